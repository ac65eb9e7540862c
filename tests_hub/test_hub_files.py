"""The hub's files, checked without starting a hub: roster, nbgitpuller link, the JupyterHub config as
JupyterHub loads it, the Zero to JupyterHub values, and the repo2docker files (environment.yml and
postBuild) read by repo2docker itself and run in a clean venv."""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import sys
import urllib.parse
from pathlib import Path

import pytest
import yaml

from hub.course_hub import REPO_ROOT, TARGET_DIR, git_dirs, nbgitpuller_link, read_roster

HUB = REPO_ROOT / "hub"


def test_example_roster_has_a_teacher_and_students():
    members = read_roster(HUB / "roster.csv")
    assert [m.username for m in members if m.is_teacher] == ["teacher"]
    assert len([m for m in members if not m.is_teacher]) >= 2


@pytest.mark.parametrize("body, message", [
    ("name,role\nteacher,teacher\n", "header"),
    ("username,role\nteacher,teacher\nBob,student\n", "username must be lowercase"),
    ("username,role\nteacher,teacher\nbob,ta\n", "role must be one of"),
    ("username,role\nteacher,teacher\nbob,student\nbob,student\n", "listed twice"),
    ("username,role\nbob,student\n", "no teacher"),
])
def test_roster_mistakes_are_named(tmp_path, body, message):
    path = tmp_path / "roster.csv"
    path.write_text(body)
    with pytest.raises(ValueError, match=message):
        read_roster(path)


def _handler_arguments() -> set[str]:
    """The query arguments nbgitpuller's own handlers read (from its installed source)."""
    import nbgitpuller.handlers

    tree = ast.parse(Path(nbgitpuller.handlers.__file__).read_text())
    return {node.args[0].value for node in ast.walk(tree)
            if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "get_argument"
            and node.args and isinstance(node.args[0], ast.Constant)}


def test_nbgitpuller_link_uses_nbgitpullers_own_parameters():
    link = nbgitpuller_link("http://127.0.0.1:8000/", "https://github.com/o/attention-course", "main")
    url = urllib.parse.urlsplit(link)
    assert url.path == "/hub/user-redirect/git-pull"
    query = dict(urllib.parse.parse_qsl(url.query))
    assert set(query) <= _handler_arguments(), set(query) - _handler_arguments()
    assert query == {"repo": "https://github.com/o/attention-course", "branch": "main", "targetpath": TARGET_DIR,
                     "urlpath": f"lab/tree/{TARGET_DIR}/notebooks/00_welcome.ipynb"}
    assert (REPO_ROOT / "notebooks" / "00_welcome.ipynb").exists()


def test_git_dirs_name_the_work_tree_and_its_git_dir():
    dirs = git_dirs(REPO_ROOT)
    assert dirs[0] == os.path.realpath(REPO_ROOT)
    assert any(Path(d).name == ".git" or "/.git/" in d for d in dirs[1:])
    assert git_dirs("https://github.com/o/r") == []


def _load_config(tmp_path, **env):
    from traitlets.config.loader import PyFileConfigLoader

    roster = tmp_path / "roster.csv"
    roster.write_text("username,role\nprof,teacher\nann,student\nben,student\n")
    values = dict(ATTN_HUB_ROSTER=str(roster), ATTN_HUB_STATE=str(tmp_path / "state"),
                  ATTN_HUB_SHARED_DIR=str(tmp_path / "shared"), ATTN_HUB_PORT="18300", **env)
    old = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        return PyFileConfigLoader("jupyterhub_config.py", path=str(HUB)).load_config()
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def test_jupyterhub_config_as_jupyterhub_loads_it(tmp_path):
    # Take the course's JupyterLab setting out of the server venv first: loading the config must put it back.
    server_prefix = Path(os.environ.get("ATTN_HUB_SERVER_VENV") or sys.prefix)
    overrides_file = server_prefix / "share" / "jupyter" / "lab" / "settings" / "overrides.json"
    if overrides_file.exists():
        kept = json.loads(overrides_file.read_text())
        kept.pop("@jupyterlab/apputils-extension:notification", None)
        overrides_file.write_text(json.dumps(kept))
    c = _load_config(tmp_path)
    assert c.JupyterHub.bind_url == "http://127.0.0.1:18300"
    assert c.Authenticator.allowed_users == {"prof", "ann", "ben"}
    assert c.Authenticator.admin_users == {"prof"}
    assert c.JupyterHub.authenticator_class == "firstuseauthenticator.FirstUseAuthenticator"
    assert c.JupyterHub.spawner_class == "jupyterhub.spawner.LocalProcessSpawner"
    # The student servers run the course venv's jupyterhub-singleuser, which has the course kernel.
    singleuser = Path(c.Spawner.cmd[0])
    assert singleuser.exists()
    if not os.environ.get("ATTN_HUB_SERVER_VENV"):
        assert singleuser == Path(sys.prefix) / "bin" / "jupyterhub-singleuser"
    kernels = Path(c.Spawner.environment["JUPYTER_PATH"]) / "kernels"
    assert (kernels / "attn-course" / "kernel.json").exists()
    # Every start pulls the course with nbgitpuller, then opens 00_welcome.
    url = urllib.parse.urlsplit(c.Spawner.default_url)
    assert url.path == "/git-pull"
    query = dict(urllib.parse.parse_qsl(url.query))
    assert query["repo"] == str(REPO_ROOT) and query["urlpath"].endswith("notebooks/00_welcome.ipynb")
    # git is told that the teacher's repository is safe to clone from, and nothing else.
    gitconfig = Path(c.Spawner.environment["GIT_CONFIG_SYSTEM"]).read_text()
    assert re.findall(r"directory = (.*)", gitconfig) == git_dirs(REPO_ROOT)
    assert c.Spawner.environment["OMP_NUM_THREADS"] == "1"
    assert "services" not in c.JupyterHub  # no admin token unless one is asked for
    assert "--MappingKernelManager.cull_idle_timeout=3600" in c.Spawner.args
    # matplotlib's font list is built once, for copying into each new account.
    assert list((tmp_path / "shared" / "matplotlib").glob("fontlist-*.json"))
    # The servers' JupyterLab has the course's settings (no news popup), as `make lab` does.
    overrides = json.loads(overrides_file.read_text())
    assert overrides["@jupyterlab/apputils-extension:notification"]["fetchNews"] == "false"


def test_seed_matplotlib_cache_copies_the_font_list_once(tmp_path):
    from types import SimpleNamespace

    from hub.course_hub import seed_matplotlib_cache

    built = tmp_path / "built"
    built.mkdir()
    (built / "fontlist-v390.json").write_text('{"fonts": 1}')
    home = tmp_path / "home"
    home.mkdir()
    entry = SimpleNamespace(pw_dir=str(home), pw_uid=os.getuid(), pw_gid=os.getgid())
    seed_matplotlib_cache(entry, built)
    copied = home / ".cache" / "matplotlib" / "fontlist-v390.json"
    assert copied.read_text() == '{"fonts": 1}'
    copied.write_text('{"fonts": "the student\'s own"}')
    seed_matplotlib_cache(entry, built)  # an existing cache is left alone
    assert "own" in copied.read_text()


def test_jupyterhub_config_nbgrader_exchange_when_nbgrader_is_installed(tmp_path, monkeypatch):
    class_venv = REPO_ROOT / ".venv-class"
    if (class_venv / "bin" / "python").exists() and not os.environ.get("ATTN_HUB_SERVER_VENV"):
        monkeypatch.setenv("ATTN_HUB_SERVER_VENV", str(class_venv))  # the classroom venv (make release) has nbgrader
    c = _load_config(tmp_path)
    server_python = Path(c.Spawner.cmd[0]).parent / "python"
    if subprocess.run([str(server_python), "-c", "import nbgrader"], capture_output=True).returncode != 0:
        pytest.skip("nbgrader is not installed where the student servers run (requirements-class.txt)")
    config_dir = Path(c.Spawner.environment["JUPYTER_CONFIG_PATH"].split(os.pathsep)[0])  # nbgrader's, then the venv's
    text = (config_dir / "nbgrader_config.py").read_text()
    exchange = tmp_path / "shared" / "nbgrader" / "exchange"
    assert f"c.Exchange.root = {str(exchange)!r}" in text
    assert oct(exchange.stat().st_mode & 0o7777) == "0o1777"


def test_jupyterhub_config_refuses_too_few_ports(tmp_path):
    with pytest.raises(ValueError, match="ATTN_HUB_SERVER_PORTS"):
        _load_config(tmp_path, ATTN_HUB_SERVER_PORTS="18310-18311")


# -- Zero to JupyterHub ------------------------------------------------------------------------------
def _parse_quantity(q) -> float:
    """Kubernetes memory quantity -> bytes (G = 1e9, Gi = 2**30)."""
    m = re.fullmatch(r"([0-9.]+)([KMGT]i?)?", str(q))
    assert m, q
    scale = {None: 1, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}
    return float(m.group(1)) * scale[m.group(2)]


def test_z2jh_config_is_valid_yaml_with_the_course_settings():
    """The chart's values schema is not on a package registry, so this checks the YAML and the keys
    the course relies on (docs/hub.md says how it was validated against the chart's schema)."""
    cfg = yaml.safe_load((HUB / "z2jh-config.yaml").read_text())
    assert set(cfg) <= {"hub", "singleuser", "cull", "prePuller", "proxy", "scheduling", "ingress"}
    su = cfg["singleuser"]
    assert su["image"]["name"] and su["image"]["tag"]
    cmd = su["lifecycleHooks"]["postStart"]["exec"]["command"]
    assert cmd[0] == "gitpuller" and cmd[3] == TARGET_DIR  # nbgitpuller's CLI: repo, branch, folder
    import importlib.metadata

    assert any(e.name == "gitpuller" for e in importlib.metadata.entry_points(group="console_scripts"))
    assert su["defaultUrl"] == f"/lab/tree/{TARGET_DIR}/notebooks/00_welcome.ipynb"
    mem, cpu = su["memory"], su["cpu"]
    assert 0 < _parse_quantity(mem["guarantee"]) <= _parse_quantity(mem["limit"])
    assert 0 < cpu["guarantee"] <= cpu["limit"]
    gpu = [p for p in su["profileList"] if "kubespawner_override" in p]
    assert gpu and gpu[0]["kubespawner_override"]["extra_resource_limits"]["nvidia.com/gpu"] == "1"
    assert sum(bool(p.get("default")) for p in su["profileList"]) == 1
    assert cfg["cull"]["enabled"] is True and cfg["cull"]["timeout"] > 0


def test_z2jh_memory_guarantee_covers_the_measured_peak():
    """The guarantee is at least the peak RSS of a student server measured by the last
    `make test-hub` on this machine (when its results are here)."""
    results = REPO_ROOT / "test-results" / "hub" / "loadtest.json"
    if not results.exists():
        pytest.skip("no load-test results yet (make test-hub writes test-results/hub/loadtest.json)")
    rep = json.loads(results.read_text())
    cfg = yaml.safe_load((HUB / "z2jh-config.yaml").read_text())
    guarantee = _parse_quantity(cfg["singleuser"]["memory"]["guarantee"])
    limit = _parse_quantity(cfg["singleuser"]["memory"]["limit"])
    peak = rep["student_peak_mib_max"] * 2**20
    assert peak <= limit, f"a student server peaked at {rep['student_peak_mib_max']:.0f} MiB, over the limit"
    assert rep["student_peak_mib_p50"] * 2**20 <= guarantee * 1.25, "the guarantee is far below the typical peak"


# -- repo2docker -------------------------------------------------------------------------------------
def _repo2docker() -> str | None:
    return os.environ.get("REPO2DOCKER") or shutil.which("repo2docker") or next(
        (str(p) for p in [REPO_ROOT / "build" / "r2d-venv" / "bin" / "repo2docker"] if p.exists()), None)


def test_repo2docker_reads_environment_yml_and_postbuild(tmp_path):
    r2d = _repo2docker()
    if r2d is None:
        pytest.skip("repo2docker not installed (make test-hub installs it into build/r2d-venv)")
    # repo2docker reads the committed files; a copy of the tree shows it this commit's files.
    src = tmp_path / "repo"
    subprocess.run(["git", "clone", "--quiet", "--no-hardlinks", str(REPO_ROOT), str(src)], check=True)
    for name in ["environment.yml", "postBuild"]:  # the working copies, committed or not
        shutil.copy2(REPO_ROOT / name, src / name)
    r = subprocess.run([r2d, "--no-build", "--no-run", "--debug", str(src)], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    dockerfile = r.stdout + r.stderr
    assert re.search(r'env update -p \$\{NB_PYTHON_PREFIX\} --file "environment.yml"', dockerfile), dockerfile[-3000:]
    assert "RUN ./postBuild" in dockerfile
    assert not (REPO_ROOT / "binder").exists(), "a binder/ folder would make repo2docker ignore the root files"


def test_postbuild_installs_attn_lib_and_the_kernel_in_a_clean_venv(tmp_path):
    """postBuild as repo2docker runs it: in the repository, with the environment's python first on PATH.
    The clean venv gets only ipykernel (environment.yml brings it in the image)."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    py = venv / "bin" / "python"
    r = subprocess.run([str(py), "-m", "pip", "install", "--quiet", "ipykernel==7.4.0"], capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        pytest.skip(f"could not install ipykernel into a clean venv (no package index?): {r.stderr[-500:]}")
    src = tmp_path / "repo"
    subprocess.run(["git", "clone", "--quiet", "--no-hardlinks", str(REPO_ROOT), str(src)], check=True)
    shutil.copy2(REPO_ROOT / "postBuild", src / "postBuild")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = f"{venv / 'bin'}:{env['PATH']}"
    r = subprocess.run(["bash", "./postBuild"], cwd=src, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    spec = json.loads((venv / "share" / "jupyter" / "kernels" / "attn-course" / "kernel.json").read_text())
    assert Path(spec["argv"][0]).parent == venv / "bin"
    origin = subprocess.run([str(py), "-c", "import importlib.util as u; print(u.find_spec('attn_lib').origin)"],
                            capture_output=True, text=True, cwd=tmp_path, env=env)
    assert origin.stdout.strip() == str(src / "attn_lib" / "__init__.py"), origin.stderr
    overrides = json.loads((venv / "share" / "jupyter" / "lab" / "settings" / "overrides.json").read_text())
    assert overrides["@jupyterlab/apputils-extension:notification"]["fetchNews"] == "false"  # no news popup
