# JupyterHub configuration for a class on one machine (`make hub`; docs/hub.md).
#
# The model is The Littlest JupyterHub's: one hub process (as root), configurable-http-proxy in
# front, and each student's JupyterLab started by LocalProcessSpawner as that student's own Unix
# account, from the course's venv (so every student has the course kernel "attn-course").
# Lines a teacher might change are commented; most take their value from an environment
# variable that `make hub` (hub/launch.py) and the load test (tests_hub/) set.
#
# Run it by hand:  .venv/bin/jupyterhub -f hub/jupyterhub_config.py   (as root)

import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))  # the hub package next to this file (roster, Unix accounts, links)

from hub.course_hub import (STUDENT_EDITION, TARGET_DIR, course_urlpath, current_branch,  # noqa: E402
                            ensure_unix_user, git_dirs, read_roster, seed_matplotlib_cache, welcome_path,  # noqa: E402
                            write_nbgrader_config)  # noqa: E402

c = get_config()  # noqa: F821 (defined by JupyterHub when it loads this file)
env = os.environ.get

# ---- where the hub listens ---------------------------------------------------------------------
# Address and port students open in their browser. 127.0.0.1 keeps the hub on this machine; for a
# class on a network use the machine's address (and put HTTPS in front: c.JupyterHub.ssl_cert/key).
IP = env("ATTN_HUB_IP", "127.0.0.1")
PORT = int(env("ATTN_HUB_PORT", "8000"))
c.JupyterHub.bind_url = f"http://{IP}:{PORT}"
# The hub's own API and the proxy's API stay on loopback, on the next two ports.
c.JupyterHub.hub_bind_url = f"http://127.0.0.1:{PORT + 1}"
c.ConfigurableHTTPProxy.api_url = f"http://127.0.0.1:{PORT + 2}"
# configurable-http-proxy from npm (make hub installs it into build/hub-node/).
c.ConfigurableHTTPProxy.command = [env("ATTN_HUB_CHP", str(REPO / "build/hub-node/node_modules/.bin/configurable-http-proxy"))]

# The hub's state (user database, cookie secret, passwords): keep it across restarts.
STATE = Path(env("ATTN_HUB_STATE", str(REPO / "build/hub-state")))
STATE.mkdir(parents=True, exist_ok=True, mode=0o700)
c.JupyterHub.db_url = f"sqlite:///{STATE / 'jupyterhub.sqlite'}"
c.JupyterHub.cookie_secret_file = str(STATE / "jupyterhub_cookie_secret")
c.ConfigurableHTTPProxy.pid_file = str(STATE / "proxy.pid")
c.JupyterHub.pid_file = str(STATE / "jupyterhub.pid")
# Stopping the hub stops every student's server too.
c.JupyterHub.cleanup_servers = True
c.JupyterHub.cleanup_proxy = True

# ---- who may log in ----------------------------------------------------------------------------
# The class roster: username,role (teacher = hub admin). Edit it and restart the hub to add people.
ROSTER = read_roster(env("ATTN_HUB_ROSTER", str(HERE / "roster.csv")))
c.Authenticator.allowed_users = {m.username for m in ROSTER}
c.Authenticator.admin_users = {m.username for m in ROSTER if m.is_teacher}
# Each person chooses their password on their first login (as on The Littlest JupyterHub).
# For a campus login use PAMAuthenticator or an OAuthenticator instead.
c.JupyterHub.authenticator_class = "firstuseauthenticator.FirstUseAuthenticator"
c.FirstUseAuthenticator.dbm_path = str(STATE / "passwords.dbm")
c.FirstUseAuthenticator.create_users = False  # only people on the roster
c.FirstUseAuthenticator.min_password_length = 8  # shortest password a student may choose

# ---- each student's server ---------------------------------------------------------------------
# LocalProcessSpawner runs `jupyterhub-singleuser` as the student's Unix account.
c.JupyterHub.spawner_class = "jupyterhub.spawner.LocalProcessSpawner"
# The course venv (the Python running this hub): its JupyterLab, its kernel "attn-course". For nbgrader's
# Assignments tab, point ATTN_HUB_SERVER_VENV at the classroom venv (.venv-class: nbgrader, layered over .venv);
# that setup is configured below but has not been tested end to end with students' accounts (docs/hub.md).
COURSE_VENV = Path(sys.prefix)
SERVER_VENV = Path(env("ATTN_HUB_SERVER_VENV", "") or sys.prefix)
if SERVER_VENV == COURSE_VENV:
    c.Spawner.cmd = [str(COURSE_VENV / "bin" / "jupyterhub-singleuser")]
else:
    c.Spawner.cmd = [str(SERVER_VENV / "bin" / "python"), "-m", "jupyterhub.singleuser"]
c.Spawner.notebook_dir = "~"  # a student sees their home folder; the course is in ~/attention-course

# The course handed out by nbgitpuller: any git URL or local path; default: the student edition that
# `make release` builds (build/student-edition: no solutions in it). Publish it and give its URL (docs/hub.md).
COURSE_REPO = env("ATTN_HUB_REPO", str(STUDENT_EDITION))
COURSE_BRANCH = env("ATTN_HUB_BRANCH", "") or current_branch(COURSE_REPO)
PULL_ON_START = env("ATTN_HUB_PULL_ON_START", "1") == "1"  # 0: open JupyterLab without pulling
if PULL_ON_START:
    # Every time a student opens their server, nbgitpuller clones the course (first time) or
    # merges the teacher's new commits into their copy, keeping their edits, then opens 00_welcome.
    from urllib.parse import urlencode

    _query = {"repo": COURSE_REPO, "targetpath": TARGET_DIR, "urlpath": course_urlpath(welcome=welcome_path(COURSE_REPO))}
    if COURSE_BRANCH:
        _query["branch"] = COURSE_BRANCH
    c.Spawner.default_url = "/git-pull?" + urlencode(_query)
else:
    c.Spawner.default_url = "/" + course_urlpath(welcome=welcome_path(COURSE_REPO))

# Files every student server reads (the git settings below, nbgrader's config and exchange):
# a folder students can enter but not write, except the exchange.
SHARED = Path(env("ATTN_HUB_SHARED_DIR", "/srv/attn-course"))
SHARED.mkdir(parents=True, exist_ok=True)
os.chmod(SHARED, 0o755)
GITCONFIG = SHARED / "gitconfig"
# A local course repository belongs to the teacher; git refuses to clone another account's repository
# unless it is listed as safe (git's safe.directory). List it, and nothing else.
GITCONFIG.write_text("".join(f"[safe]\n\tdirectory = {d}\n" for d in git_dirs(COURSE_REPO)))
os.chmod(GITCONFIG, 0o644)

c.Spawner.environment = {
    "GIT_CONFIG_SYSTEM": str(GITCONFIG),
    # One torch thread per student: a class shares the machine's cores.
    "OMP_NUM_THREADS": env("ATTN_HUB_THREADS", "1"),
    # The course runs offline, as on a laptop.
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_HUB_DISABLE_TELEMETRY": "1",
    "NBGITPULLER_APP": "lab",
    # The course kernel is registered in the course venv; a server from another venv finds it here.
    "JUPYTER_PATH": str(COURSE_VENV / "share" / "jupyter"),
    # ... and the course venv's server extensions (nbgitpuller's git-pull handler is enabled by a file in
    # <venv>/etc/jupyter, which a layered venv such as .venv-class does not read by itself).
    "JUPYTER_CONFIG_PATH": str(COURSE_VENV / "etc" / "jupyter"),
}
# Servers that come up slowly when a whole class logs in at once still count as started.
c.Spawner.start_timeout = int(env("ATTN_HUB_START_TIMEOUT", "300"))
c.Spawner.http_timeout = int(env("ATTN_HUB_START_TIMEOUT", "300"))
# Idle culling inside each server: kernels idle for an hour are shut down, and a server with
# no activity for two hours stops itself (its files stay; the student starts it again).
c.Spawner.args = [
    f"--MappingKernelManager.cull_idle_timeout={env('ATTN_HUB_CULL_KERNEL_S', '3600')}",
    "--MappingKernelManager.cull_interval=300",
    f"--ServerApp.shutdown_no_activity_timeout={env('ATTN_HUB_CULL_SERVER_S', '7200')}",
]

# Ports of the student servers: random free ports, or a fixed range "FIRST-LAST" (one per roster line).
PORTS = env("ATTN_HUB_SERVER_PORTS", "")
_port_of = {}
if PORTS:
    first, last = (int(x) for x in PORTS.split("-"))
    if last - first + 1 < len(ROSTER):
        raise ValueError(f"ATTN_HUB_SERVER_PORTS must hold one port per roster line ({len(ROSTER)}), got {PORTS!r}")
    _port_of = {m.username: first + i for i, m in enumerate(ROSTER)}


# matplotlib's font list, built once here and copied into each new account (see create_account).
MPL_CACHE = SHARED / "matplotlib"
import subprocess  # noqa: E402

subprocess.run([str(SERVER_VENV / "bin" / "python"), "-c", "import matplotlib.font_manager"],
               env=dict(os.environ, MPLCONFIGDIR=str(MPL_CACHE)), capture_output=True, timeout=600)

# JupyterLab's settings for the course (attn_lib.course.lab.LAB_SETTINGS, as `make lab` writes them): no "get notified
# about official Jupyter news?" popup over a student's first notebook, no update check (both contact a website).
subprocess.run([str(SERVER_VENV / "bin" / "python"), "-c", "from attn_lib.course.lab import write_lab_settings; "
                "write_lab_settings()"], capture_output=True, timeout=600)


def create_account(spawner):
    """Before a server starts: the student's Unix account exists (created from the roster on first
    spawn, as The Littlest JupyterHub does), with a home only they can read, and matplotlib's font
    list already built (a class starting at once would otherwise each build it, slowly)."""
    entry = ensure_unix_user(spawner.user.name)
    seed_matplotlib_cache(entry, MPL_CACHE)
    if spawner.user.name in _port_of:
        spawner.port = _port_of[spawner.user.name]


c.Spawner.pre_spawn_hook = create_account

# ---- nbgrader (if installed in the course venv) ------------------------------------------------
# Students fetch and submit from the Assignments tab; the teacher releases, collects and autogrades
# from the Formgrader tab. The exchange is a folder every account can write into (mode 1777, like
# /tmp); each student's files in it are their own.
HAS_NBGRADER = subprocess.run([str(SERVER_VENV / "bin" / "python"), "-c", "import nbgrader"],
                              capture_output=True).returncode == 0
if HAS_NBGRADER:
    COURSE_ID = env("ATTN_HUB_COURSE_ID", "attn-course")  # the course's name in nbgrader
    # Outside the hub's state folder (which holds the password hashes and stays root-only). The teacher's course
    # folder is ~/nbgrader-course; collecting refuses a submission whose folder another account made
    # (classroom.exchange.OwnerCheckedCollect; nbgrader itself only warns).
    jupyter_config = write_nbgrader_config(SHARED, COURSE_ID)
    c.Spawner.environment["JUPYTER_CONFIG_PATH"] = os.pathsep.join(
        [str(jupyter_config), c.Spawner.environment["JUPYTER_CONFIG_PATH"]])

# ---- for scripts: an API token with admin rights (the load test sets it; unset: none) -----------
if env("ATTN_HUB_SERVICE_TOKEN"):
    c.JupyterHub.services = [{"name": "course-admin", "api_token": env("ATTN_HUB_SERVICE_TOKEN")}]
    c.JupyterHub.load_roles = [{
        "name": "course-admin",
        "scopes": ["admin:users", "admin:servers", "tokens", "list:users", "read:users", "read:hub"],
        "services": ["course-admin"],
    }]
