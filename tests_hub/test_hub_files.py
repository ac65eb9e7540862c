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

from hub.course_hub import (COURSE_WELCOME, REPO_ROOT, STUDENT_EDITION, TARGET_DIR, WELCOME, git_dirs,
                            nbgitpuller_link, read_roster)

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
                     "urlpath": f"lab/tree/{TARGET_DIR}/{WELCOME}"}  # a published student edition
    # a local repository: the layout it has (the course's own, or the student edition's)
    local = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(nbgitpuller_link("http://h", str(REPO_ROOT))).query))
    assert local["urlpath"] == f"lab/tree/{TARGET_DIR}/{COURSE_WELCOME}"
    assert (REPO_ROOT / COURSE_WELCOME).exists()


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
    # By default the hub hands out the student edition (make release), never the course with its solutions.
    assert query["repo"] == str(STUDENT_EDITION) and query["urlpath"].endswith(WELCOME)
    # git is told that the teacher's repository is safe to clone from, and nothing else.
    gitconfig = Path(c.Spawner.environment["GIT_CONFIG_SYSTEM"]).read_text()
    assert re.findall(r"directory = (.*)", gitconfig) == git_dirs(STUDENT_EDITION)
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
    assert su["defaultUrl"] == f"/lab/tree/{TARGET_DIR}/{WELCOME}"  # the student edition's layout
    assert cmd[1].endswith("-student"), "the servers pull the student edition, not the course with its solutions"
    mem, cpu = su["memory"], su["cpu"]
    assert 0 < _parse_quantity(mem["guarantee"]) <= _parse_quantity(mem["limit"])
    assert 0 < cpu["guarantee"] <= cpu["limit"]
    gpu = [p for p in su["profileList"] if "kubespawner_override" in p]
    assert gpu and gpu[0]["kubespawner_override"]["extra_resource_limits"]["nvidia.com/gpu"] == "1"
    assert sum(bool(p.get("default")) for p in su["profileList"]) == 1
    assert cfg["cull"]["enabled"] is True and cfg["cull"]["timeout"] > 0


def _deep_merge(base: dict, over: dict) -> dict:
    out = dict(base)
    for k, v in over.items():
        out[k] = _deep_merge(base[k], v) if isinstance(v, dict) and isinstance(base.get(k), dict) else v
    return out


CHART = HUB / "z2jh-chart"


def test_z2jh_config_validates_against_the_charts_values_schema():
    """As `helm install` does: the values, merged over the chart's defaults, against the chart's values.schema.json
    (chart 4.4.0, vendored in hub/z2jh-chart/, the version docs/hub.md and the config name); a misspelt key and a
    wrong type are rejected, so the check can fail."""
    import jsonschema

    schema = json.loads((CHART / "values.schema.json").read_text())
    defaults = yaml.safe_load((CHART / "values.yaml").read_text())
    values = yaml.safe_load((HUB / "z2jh-config.yaml").read_text())
    validator = jsonschema.Draft7Validator(schema)
    errors = [f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(_deep_merge(defaults, values))]
    assert errors == []
    bad = _deep_merge(values, {"singleuser": {"memory": {"limitt": "2G"}}})
    assert any("limitt" in e.message for e in validator.iter_errors(_deep_merge(defaults, bad)))
    bad = _deep_merge(values, {"cull": {"timeout": "an hour"}})
    assert not validator.is_valid(_deep_merge(defaults, bad))
    version = "4.4.0"
    assert f"--version {version}" in (HUB / "z2jh-config.yaml").read_text()
    assert f"chart version {version}" in (REPO_ROOT / "docs" / "hub.md").read_text()


def test_z2jh_memory_is_in_step_with_the_measurement():
    """The guarantee and limit follow from the per-student peak that z2jh-config.yaml records (its `measured:` line),
    which must be the figures docs/hub.md reports: guarantee >= PSS peak + 10 %, limit >= 1.5 x the RSS peak."""
    text = (HUB / "z2jh-config.yaml").read_text()
    m = re.search(r"measured: pss_max_mib=(\d+) rss_max_mib=(\d+)", text)
    assert m, "z2jh-config.yaml must record the measurement its memory comes from"
    pss, rss = int(m.group(1)), int(m.group(2))
    doc = (REPO_ROOT / "docs" / "hub.md").read_text()
    assert f"{pss} MiB PSS" in doc and f"{rss} MiB" in doc
    mem = yaml.safe_load(text)["singleuser"]["memory"]
    guarantee, limit = _parse_quantity(mem["guarantee"]) / 2**20, _parse_quantity(mem["limit"]) / 2**20
    assert guarantee >= 1.1 * pss, f"guarantee {guarantee:.0f} MiB under the measured PSS peak {pss} MiB + 10 %"
    assert limit >= 1.5 * rss, f"limit {limit:.0f} MiB leaves too little room over the RSS peak {rss} MiB"
    assert guarantee <= 1.5 * pss, "the guarantee reserves far more than a student uses: nodes sized for nothing"
    assert f"guarantee {mem['guarantee']}" in doc and f"limit {mem['limit']}" in doc


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
    if rep.get("student_peak_pss_mib_max", float("nan")) == rep.get("student_peak_pss_mib_max"):  # not NaN
        recorded = int(re.search(r"pss_max_mib=(\d+)", (HUB / "z2jh-config.yaml").read_text()).group(1))
        assert rep["student_peak_pss_mib_max"] <= 1.1 * recorded, (
            f"this run's PSS peak {rep['student_peak_pss_mib_max']:.0f} MiB is >10 % above the {recorded} MiB "
            "that z2jh-config.yaml sizes for: update its measured: line, the memory and docs/hub.md")


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


# -- make hub on a teacher's machine -------------------------------------------------------------------
def _launch(monkeypatch, tmp_path, blocked, *args):
    """hub.launch.main as root, with `blocked` as the folders students cannot enter; chmod and exec recorded."""
    import hub.launch as launch

    calls = {"chmod": [], "exec": []}
    monkeypatch.setattr(launch.os, "geteuid", lambda: 0)
    monkeypatch.setattr(launch, "blocked_dirs", lambda paths: [Path(b) for b in blocked])
    monkeypatch.setattr(launch.os, "chmod", lambda d, mode: calls["chmod"].append(str(d)))
    monkeypatch.setattr(launch.os, "execve", lambda *a: calls["exec"].append(a))
    roster = tmp_path / "roster.csv"
    roster.write_text("username,role\nprof,teacher\n")
    rc = launch.main(["--roster", str(roster), "--repo", str(REPO_ROOT), *args])
    return rc, calls


def test_make_hub_names_the_fix_for_a_python_under_root(monkeypatch, tmp_path, capsys):
    """A .venv built from a pyenv Python under /root: moving the course does not help; rebuild .venv from a system
    Python. The message names the command that works."""
    monkeypatch.setattr(sys, "executable", "/root/.pyenv/versions/3.11.9/bin/python3.11")
    rc, calls = _launch(monkeypatch, tmp_path, ["/root"])
    err = capsys.readouterr().err
    assert rc == 2 and not calls["exec"] and not calls["chmod"]
    assert "make clean && make hub PYTHON=/usr/bin/python3" in err and "/root" in err


@pytest.mark.parametrize("blocked", [["/root"], ["/root/.pyenv/versions"], ["/home/prof"], ["/srv/x", "/root"]])
def test_fix_permissions_refuses_to_open_root_or_a_home(monkeypatch, tmp_path, capsys, blocked):
    rc, calls = _launch(monkeypatch, tmp_path, blocked, "--fix-permissions")
    err = capsys.readouterr().err
    assert rc == 2 and calls["chmod"] == [] and not calls["exec"], calls
    assert "refuses" in err and "make clean && make hub PYTHON=/usr/bin/python3" in err


def test_fix_permissions_opens_other_folders_enter_only(monkeypatch, tmp_path, capsys):
    folder = tmp_path / "srv-course"
    folder.mkdir()
    rc, calls = _launch(monkeypatch, tmp_path, [folder], "--fix-permissions")
    assert calls["chmod"] == [str(folder)] and len(calls["exec"]) == 1
    assert "warning: handing out the course repository itself" in capsys.readouterr().err


SUPPORTED_NODE = (20, 22, 24)  # the majors docs/hub.md names


def test_node_is_a_supported_version_and_runs_the_proxy():
    """docs/hub.md states the Node versions the hub supports; the node here is one of them, and
    configurable-http-proxy 5.3.0 runs on it (its --version, and it starts and answers on loopback)."""
    import socket
    import time
    import urllib.request

    doc = (REPO_ROOT / "docs" / "hub.md").read_text()
    assert "Supported Node.js: 20 (Debian 12 and 13's `nodejs`; what CI tests), 22.12 or newer" in doc
    node = shutil.which("node")
    chp = REPO_ROOT / "build" / "hub-node" / "node_modules" / ".bin" / "configurable-http-proxy"
    if node is None or not chp.exists():
        pytest.skip("node or configurable-http-proxy not installed (make test-hub installs them)")
    version = subprocess.run([node, "--version"], capture_output=True, text=True, check=True).stdout.strip()
    major, minor = (int(x) for x in version.lstrip("v").split(".")[:2])
    assert major in SUPPORTED_NODE and (major, minor) >= (20, 0) and (major != 22 or minor >= 12), version
    assert subprocess.run([str(chp), "--version"], capture_output=True, text=True, timeout=60).stdout.strip() == "5.3.0"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([str(chp), "--ip", "127.0.0.1", "--port", str(port), "--api-port", str(port + 1),
                             "--default-target", "http://127.0.0.1:9"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            env=dict(os.environ, CONFIGPROXY_AUTH_TOKEN="t"))
    try:
        answer = None
        for _ in range(60):  # bounded: 30 s
            try:
                req = urllib.request.Request(f"http://127.0.0.1:{port + 1}/api/routes", headers={"Authorization": "token t"})
                answer = json.loads(urllib.request.urlopen(req, timeout=2).read())
                break
            except OSError:
                time.sleep(0.5)
        assert answer is not None and "/" in answer, "configurable-http-proxy did not answer on its API"
    finally:
        proc.kill()
        proc.wait(10)
