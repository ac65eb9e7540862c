"""`make lab` turns off JupyterLab's news popup, which otherwise covers the first notebook."""

import json

from attn_lib.course.lab import LAB_SETTINGS, write_lab_settings


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


def test_make_lab_trusts_the_course_notebooks(tmp_path):
    """Saved scripts (notebook 06's bertviz views) run on opening only in a trusted notebook: `make lab` signs them."""
    import nbformat
    from nbformat.sign import NotebookNotary

    from attn_lib import REPO_ROOT
    from attn_lib.course.lab import course_notebooks, trust_notebooks

    notebooks = course_notebooks()
    assert REPO_ROOT / "notebooks" / "06_heads_in_a_real_model.ipynb" in notebooks
    assert len(notebooks) >= 20 and all("solutions" in p.parts or p.name[:2].isdigit() for p in notebooks)
    # the student edition's layout, one folder per notebook, is found too
    (tmp_path / "edition" / "notebooks" / "06_x").mkdir(parents=True)
    (tmp_path / "edition" / "notebooks" / "06_x" / "06_x.ipynb").write_text("{}")
    (tmp_path / "edition" / "notebooks" / "06_x" / ".ipynb_checkpoints").mkdir()
    (tmp_path / "edition" / "notebooks" / "06_x" / ".ipynb_checkpoints" / "06_x-checkpoint.ipynb").write_text("{}")
    assert course_notebooks(tmp_path / "edition") == [tmp_path / "edition" / "notebooks" / "06_x" / "06_x.ipynb"]
    notary = NotebookNotary(data_dir=str(tmp_path))
    nb06 = nbformat.read(REPO_ROOT / "notebooks" / "06_heads_in_a_real_model.ipynb", as_version=nbformat.NO_CONVERT)
    assert not notary.check_signature(nb06)  # a fresh key: not trusted yet
    assert trust_notebooks(data_dir=tmp_path) == notebooks
    assert NotebookNotary(data_dir=str(tmp_path)).check_signature(nb06)
    assert trust_notebooks(data_dir=tmp_path) == []  # already trusted: nothing signed again
    nb06.cells[0].source += " (edited)"
    assert not NotebookNotary(data_dir=str(tmp_path)).check_signature(nb06)  # the signature covers the content


def test_lab_command_trusts_before_starting(monkeypatch):
    import attn_lib.course.lab as lab

    calls = []
    monkeypatch.setattr(lab, "trust_notebooks", lambda *a, **k: calls.append("trust") or [])
    monkeypatch.setattr(lab, "write_lab_settings", lambda *a, **k: None)
    argv = lab.lab_command(port=8899, token="t", open_browser=False)
    assert calls == ["trust"] and "--ServerApp.port=8899" in argv
