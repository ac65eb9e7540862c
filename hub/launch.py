"""``make hub``: start the class hub on this machine and print the link to hand out.

    python -m hub.launch [--ip 127.0.0.1] [--port 8000] [--roster hub/roster.csv]
                         [--repo PATH_OR_GIT_URL] [--branch NAME] [--fix-permissions]

Runs as root (each student's server runs as that student's Unix account, as on The Littlest
JupyterHub). Before starting it checks that student accounts can reach the course's Python, venv
and repository; ``--fix-permissions`` adds the missing ``o+x`` (enter, not list) to those folders, except /root
and home folders, which it refuses to open (rebuild .venv from a system Python instead:
``make clean && make hub PYTHON=/usr/bin/python3``).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from hub.course_hub import REPO_ROOT, STUDENT_EDITION, blocked_dirs, current_branch, nbgitpuller_link, read_roster

CONFIG = Path(__file__).resolve().parent / "jupyterhub_config.py"


def course_paths(repo: str) -> list[Path]:
    """What a student's server must reach: the interpreter, the venv, the course repository."""
    paths = [Path(os.path.realpath(sys.executable)), Path(sys.prefix), REPO_ROOT]
    if Path(repo).exists():
        paths.append(Path(repo))
    return paths


def is_private_home(d: Path) -> bool:
    """/root or a folder inside it, or a home folder of /home: opening them (o+x) to every student account is
    not something ``--fix-permissions`` should do without being asked by name."""
    d = Path(os.path.realpath(d))
    return d == Path("/root") or Path("/root") in d.parents or (d.parent == Path("/home"))


def python_under_home(blocked: list[Path]) -> bool:
    """True when the interpreter itself (not only the repository) lies behind a blocked folder."""
    exe = Path(os.path.realpath(sys.executable))
    return any(d == exe or d in exe.parents for d in blocked)


def blocked_message(blocked: list[Path]) -> str:
    text = ("make hub: student accounts cannot enter these folders on the way to the course's Python, venv or "
            "repository:\n  " + "\n  ".join(map(str, blocked)) + "\n")
    if python_under_home(blocked):
        # Moving the repository does not help: .venv keeps pointing at the interpreter it was built from.
        text += (f"The course's Python ({os.path.realpath(sys.executable)}) is one of them (a pyenv or similar Python "
                 "under a home folder): .venv keeps using it wherever the course is. Rebuild .venv from a system "
                 "Python that every account can run:\n"
                 "  make clean && make hub PYTHON=/usr/bin/python3\n"
                 "and keep the course itself in a folder students can enter (e.g. /srv/attention-course).")
    else:
        text += ("Move the course to a folder students can enter (e.g. /srv/attention-course; .venv must be rebuilt "
                 "there: make clean && make hub), or run: make hub HUB_ARGS=--fix-permissions (chmod o+x: enter, "
                 "not list; refused for /root and home folders).")
    return text


def refuse_home_message(home_dirs: list[Path]) -> str:
    return ("make hub: --fix-permissions refuses to open " + ", ".join(map(str, home_dirs)) +
            " to every student account (chmod o+x on /root or a home folder lets any account reach whatever sits "
            "in it under a name it can guess). Rebuild .venv from a system Python and keep the course outside "
            "home folders instead:\n  make clean && make hub PYTHON=/usr/bin/python3")


def hub_command() -> list[str]:
    return [str(Path(sys.prefix) / "bin" / "jupyterhub"), "-f", str(CONFIG)]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="make hub", description=__doc__.split("\n\n")[0])
    p.add_argument("--ip", default=os.environ.get("ATTN_HUB_IP", "127.0.0.1"), help="address students connect to")
    p.add_argument("--port", type=int, default=int(os.environ.get("ATTN_HUB_PORT", "8000")))
    p.add_argument("--roster", default=os.environ.get("ATTN_HUB_ROSTER", str(REPO_ROOT / "hub" / "roster.csv")))
    p.add_argument("--repo", default=os.environ.get("ATTN_HUB_REPO", str(STUDENT_EDITION)),
                   help="what nbgitpuller hands out: a git URL or a local path (default: the student edition "
                        "that make release builds, build/student-edition; never the course repository, which "
                        "holds the solutions)")
    p.add_argument("--branch", default=os.environ.get("ATTN_HUB_BRANCH", ""))
    p.add_argument("--fix-permissions", action="store_true",
                   help="chmod o+x the folders on the way to the course that student accounts cannot enter "
                        "(never /root or a home folder)")
    args = p.parse_args(argv)

    if os.geteuid() != 0:
        print("make hub: run as root (sudo make hub): the hub starts each student's server as their own "
              "Unix account, and creates those accounts from the roster.", file=sys.stderr)
        return 2
    if args.repo == str(STUDENT_EDITION) and not (STUDENT_EDITION / ".git").exists():
        print("make hub: no student edition yet: run `make release` first (it builds build/student-edition, the "
              "course without solutions), or give the published edition's URL: "
              "make hub HUB_ARGS=\"--repo https://github.com/OWNER/attention-course-student\"", file=sys.stderr)
        return 2
    if Path(args.repo).resolve() == REPO_ROOT.resolve():
        print("make hub: warning: handing out the course repository itself: students get notebooks/solutions/. "
              "Hand out the student edition instead (make release; docs/hub.md).", file=sys.stderr)
    roster = read_roster(args.roster)
    blocked = blocked_dirs(course_paths(args.repo))
    home_dirs = [d for d in blocked if is_private_home(d)]
    if blocked and args.fix_permissions and home_dirs:
        print(refuse_home_message(home_dirs), file=sys.stderr)
        return 2
    if blocked and args.fix_permissions:
        for d in blocked:
            os.chmod(d, d.stat().st_mode | 0o001)
            print(f"make hub: chmod o+x {d}")
    elif blocked:
        print(blocked_message(blocked), file=sys.stderr)
        return 2
    branch = args.branch or current_branch(args.repo) or ""
    env = dict(os.environ, ATTN_HUB_IP=args.ip, ATTN_HUB_PORT=str(args.port), ATTN_HUB_ROSTER=str(Path(args.roster).resolve()),
               ATTN_HUB_REPO=args.repo, ATTN_HUB_BRANCH=branch)
    url = f"http://{args.ip}:{args.port}"
    teachers = ", ".join(m.username for m in roster if m.is_teacher)
    print(f"""
Class hub for {len(roster)} people at {url}  (teacher/admin: {teachers}; first login sets the password)
Hand out this link (nbgitpuller: first click clones the course into ~/attention-course, later
clicks merge the teacher's new commits and keep each student's edits):

  {nbgitpuller_link(url, args.repo, branch)}

Stop with Ctrl-C (stops every student's server too).
""", flush=True)
    argv = hub_command()
    os.execve(argv[0], argv, env)


if __name__ == "__main__":
    sys.exit(main())
