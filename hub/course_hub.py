"""What the course's hub configuration, ``make hub`` and the hub tests share.

- :func:`read_roster`: the class list (``hub/roster.csv``): who may log in, who is a teacher.
- :func:`ensure_unix_user`: each login is a Unix account, created on first spawn the way
  The Littlest JupyterHub does (``useradd --create-home``), its home readable by its owner only.
- :func:`nbgitpuller_link`: the link that hands the course out (nbgitpuller clones it on the
  first click and merges updates on later clicks, keeping the student's edits).
- :func:`blocked_dirs`: folders a student account cannot enter, on the way to the course's
  Python, venv or repository (each student server runs as its student).
"""

from __future__ import annotations

import csv
import os
import re
import stat
import subprocess
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
ROLES = ("teacher", "student")
# Unix login names that useradd accepts everywhere: lowercase, starting with a letter, at most 32.
USERNAME = re.compile(r"[a-z][a-z0-9_-]{0,31}")
# The folder each student's copy of the course is cloned into, inside their home.
TARGET_DIR = "attention-course"
# The first notebook: in the student edition (make release: one folder per notebook, as nbgrader hands them out)
# and in the course repository itself.
WELCOME = "notebooks/00_welcome/00_welcome.ipynb"
COURSE_WELCOME = "notebooks/00_welcome.ipynb"
# What `make hub` hands out by default: the student edition `make release` builds (no solutions in it).
STUDENT_EDITION = REPO_ROOT / "build" / "student-edition"


def welcome_path(repo: str | os.PathLike | None = None) -> str:
    """The first notebook's path inside ``repo``: ATTN_HUB_WELCOME if set; for a local repository the layout it
    has (student edition or course); for a URL the student edition's (what a teacher publishes)."""
    if os.environ.get("ATTN_HUB_WELCOME"):
        return os.environ["ATTN_HUB_WELCOME"]
    if repo is not None and Path(repo).is_dir() and not (Path(repo) / WELCOME).exists() \
            and (Path(repo) / COURSE_WELCOME).exists():
        return COURSE_WELCOME
    return WELCOME


@dataclass(frozen=True)
class Member:
    username: str
    role: str

    @property
    def is_teacher(self) -> bool:
        return self.role == "teacher"


def read_roster(path: str | os.PathLike) -> list[Member]:
    """The class list: a CSV file with a header ``username,role``; lines starting with # are comments.

    Raises:
        FileNotFoundError: no file at ``path``.
        ValueError: a missing column, a username Unix cannot have, a role other than teacher or
            student, a username listed twice, or no teacher at all.
    """
    path = Path(path)
    lines = [line for line in path.read_text().splitlines() if line.strip() and not line.lstrip().startswith("#")]
    reader = csv.DictReader(lines)
    if not {"username", "role"} <= {f.strip() for f in reader.fieldnames or []}:
        raise ValueError(f"roster {path} must start with the header 'username,role', got {lines[:1]!r}")
    members: list[Member] = []
    seen: set[str] = set()
    for number, row in enumerate(reader, start=2):
        row = {(k or "").strip(): (v or "").strip() for k, v in row.items() if k}
        name, role = row["username"], row["role"].lower()
        if not USERNAME.fullmatch(name):
            raise ValueError(f"roster {path} row {number}: username must be lowercase letters, digits, _ or -, "
                             f"starting with a letter, at most 32 characters; got {name!r}")
        if role not in ROLES:
            raise ValueError(f"roster {path} row {number}: role must be one of {ROLES}, got {role!r}")
        if name in seen:
            raise ValueError(f"roster {path} row {number}: username {name!r} is listed twice")
        seen.add(name)
        members.append(Member(name, role))
    if not any(m.is_teacher for m in members):
        raise ValueError(f"roster {path}: no teacher (role 'teacher'); the hub needs at least one admin")
    return members


def course_urlpath(target: str = TARGET_DIR, welcome: str = WELCOME) -> str:
    """Where a student lands after the pull: JupyterLab on the welcome notebook of their copy."""
    return f"lab/tree/{target}/{welcome}"


def nbgitpuller_link(hub_url: str, repo: str, branch: str | None = None, target: str = TARGET_DIR) -> str:
    """The link a teacher hands out: log in, pull (clone or merge) ``repo`` into ``~/target``, open 00_welcome.

    ``hub_url`` is the hub's public URL (``http://127.0.0.1:8000``); ``repo`` any URL or path git
    can clone. Same parameters as nbgitpuller's link generator (repo, branch, urlpath, targetpath).
    """
    query = {"repo": repo}
    if branch:
        query["branch"] = branch
    query["targetpath"] = target
    query["urlpath"] = course_urlpath(target, welcome_path(repo))
    return f"{hub_url.rstrip('/')}/hub/user-redirect/git-pull?{urllib.parse.urlencode(query)}"


def current_branch(repo: str | os.PathLike = REPO_ROOT) -> str | None:
    """The branch checked out in a local repository (None for a URL or a detached HEAD)."""
    if not Path(repo).is_dir():
        return None
    r = subprocess.run(["git", "-C", str(repo), "rev-parse", "--abbrev-ref", "HEAD"], capture_output=True, text=True)
    branch = r.stdout.strip()
    return branch if r.returncode == 0 and branch and branch != "HEAD" else None


def git_dirs(repo: str | os.PathLike) -> list[str]:
    """A local repository's folders that git checks the owner of (work tree, its .git, git dir,
    common dir); [] for a URL."""
    if not Path(repo).is_dir():
        return []
    # git names the gitfile or .git folder (<repo>/.git) for a work tree, the folder itself when bare.
    dirs = [os.path.realpath(repo), os.path.join(os.path.realpath(repo), ".git")]
    for flag in ("--absolute-git-dir", "--git-common-dir"):
        r = subprocess.run(["git", "-C", str(repo), "rev-parse", flag], capture_output=True, text=True)
        if r.returncode == 0 and r.stdout.strip():
            d = os.path.realpath(os.path.join(repo, r.stdout.strip()))
            if d not in dirs:
                dirs.append(d)
    return dirs


def blocked_dirs(paths) -> list[Path]:
    """Folders on the way to ``paths`` that other accounts cannot enter (no x bit for others).

    A student's server runs as the student: it must be able to reach the course's Python, its
    venv and the repository. On a machine where Python was installed under /root (pyenv), /root
    is one of them; moving the repository does not help then (.venv keeps its interpreter): rebuild
    .venv from a system Python (``make clean && make hub PYTHON=/usr/bin/python3``). Otherwise keep the
    course in a folder students can enter, or ``chmod o+x`` each folder listed (traversal only).
    """
    blocked: list[Path] = []
    for p in paths:
        p = Path(p)
        for d in [*reversed(Path(os.path.realpath(p)).parents), Path(os.path.realpath(p))]:
            if d.is_dir() and not (d.stat().st_mode & stat.S_IXOTH) and d not in blocked:
                blocked.append(d)
    return blocked


def ensure_unix_user(name: str, home_root: str = "/home"):
    """The Unix account for hub user ``name``, created if missing (``useradd --create-home``).

    The home directory is mode 0700: no other student can read it. Returns the ``pwd`` entry.
    Needs root (the hub runs as root, as in The Littlest JupyterHub).
    """
    import pwd

    if not USERNAME.fullmatch(name):
        raise ValueError(f"name must be a valid Unix login name, got {name!r}")
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        subprocess.run(["useradd", "--create-home", "--base-dir", home_root, "--shell", "/bin/bash",
                        "--user-group", name], check=True, capture_output=True, text=True)
        entry = pwd.getpwnam(name)
    home = Path(entry.pw_dir)
    home.mkdir(mode=0o700, exist_ok=True)
    os.chown(home, entry.pw_uid, entry.pw_gid)
    os.chmod(home, 0o700)
    return entry


def seed_matplotlib_cache(entry, built: Path) -> None:
    """Copy the hub's prebuilt matplotlib font list into a new account's ~/.cache/matplotlib.

    Without it each student's first plot builds the font cache, slowly when a class starts at
    once, and shows "Matplotlib is building the font cache" under their first cell."""
    import shutil

    target = Path(entry.pw_dir) / ".cache" / "matplotlib"
    for src in Path(built).glob("fontlist-*.json"):
        if (target / src.name).exists():
            continue
        for d in (target.parent, target):
            d.mkdir(exist_ok=True)
            os.chown(d, entry.pw_uid, entry.pw_gid)
        shutil.copy2(src, target / src.name)
        os.chown(target / src.name, entry.pw_uid, entry.pw_gid)



NBGRADER_CONFIG = """\
import os
import sys

c = get_config()  # noqa: F821
c.CourseDirectory.course_id = {course_id!r}
c.Exchange.root = {exchange!r}
# The teacher's course folder (source/, release/, submitted/, autograded/, feedback/): in their home.
c.CourseDirectory.root = os.path.expanduser("~/nbgrader-course")
# Collect only submissions whose folder belongs to the student they name (nbgrader's check_owner only warns).
sys.path.insert(0, {repo!r})
c.ExchangeFactory.collect = "classroom.exchange.OwnerCheckedCollect"
# inbound/ sticky (1733): no student can rename or remove another's submission (nbgrader makes it 0733).
c.ExchangeFactory.release_assignment = "classroom.exchange.StickyReleaseAssignment"
# A submission's folder stays its owner's (nbgrader makes it 0777, hidden only by its random name).
c.ExchangeFactory.submit = "classroom.exchange.PrivateSubmit"
"""


def write_nbgrader_config(shared: Path, course_id: str = "attn-course") -> Path:
    """nbgrader's exchange for the hub: ``shared/nbgrader/exchange`` (mode 1777, like /tmp: every account creates
    its own files; the sticky bit keeps them its own), and ``shared/nbgrader/jupyter-config/nbgrader_config.py``,
    which every server and every nbgrader command reads (JUPYTER_CONFIG_PATH). Returns the config folder."""
    nbgrader_dir = Path(shared) / "nbgrader"
    exchange = nbgrader_dir / "exchange"
    exchange.mkdir(parents=True, exist_ok=True)
    os.chmod(nbgrader_dir, 0o755)
    os.chmod(exchange, 0o1777)
    config_dir = nbgrader_dir / "jupyter-config"
    config_dir.mkdir(exist_ok=True)
    (config_dir / "nbgrader_config.py").write_text(
        NBGRADER_CONFIG.format(course_id=course_id, exchange=str(exchange), repo=str(REPO_ROOT)))
    os.chmod(config_dir, 0o755)
    os.chmod(config_dir / "nbgrader_config.py", 0o644)
    return config_dir
