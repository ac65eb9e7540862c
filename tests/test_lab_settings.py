"""`make lab` turns off JupyterLab's news popup, which otherwise covers the first notebook."""

import json

from attn_lib.lab import LAB_SETTINGS, write_lab_settings


def test_news_popup_and_update_check_are_off(tmp_path):
    path = write_lab_settings(tmp_path)
    settings = json.loads(path.read_text())
    notification = settings["@jupyterlab/apputils-extension:notification"]
    assert notification["fetchNews"] == "false" and notification["checkForUpdates"] is False


def test_existing_overrides_are_kept(tmp_path):
    path = tmp_path / "share" / "jupyter" / "lab" / "settings" / "overrides.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"@jupyterlab/apputils-extension:themes": {"theme": "JupyterLab Dark"},
                                "@jupyterlab/apputils-extension:notification": {"doNotDisturbMode": True}}))
    settings = json.loads(write_lab_settings(tmp_path).read_text())
    assert settings["@jupyterlab/apputils-extension:themes"] == {"theme": "JupyterLab Dark"}
    assert settings["@jupyterlab/apputils-extension:notification"] == {
        "doNotDisturbMode": True, **LAB_SETTINGS["@jupyterlab/apputils-extension:notification"]}


def test_the_setting_names_exist_in_this_jupyterlab():
    """A misspelt plugin or key would be ignored silently: check them against JupyterLab's own schema."""
    import sys
    from pathlib import Path

    schema_path = (Path(sys.prefix) / "share" / "jupyter" / "lab" / "schemas" / "@jupyterlab" /
                   "apputils-extension" / "notification.json")
    schema = json.loads(schema_path.read_text())
    for key in LAB_SETTINGS["@jupyterlab/apputils-extension:notification"]:
        assert key in schema["properties"], key
