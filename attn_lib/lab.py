"""Start JupyterLab on the course: ``python -m attn_lib.lab`` (what ``make lab`` runs).

The command line is built by :func:`lab_command`, which the tests use too, so the server
they start is the one a learner gets.
"""

from __future__ import annotations

import os
import sys

from attn_lib._setup import REPO_ROOT

WELCOME = "notebooks/00_welcome.ipynb"


def lab_command(*, port: int | None = None, token: str | None = None, open_browser: bool = True) -> list[str]:
    """argv that starts JupyterLab at the course root, opening ``notebooks/00_welcome.ipynb``.

    Args:
        port: TCP port; None lets Jupyter pick (8888 or the next free one).
        token: the access token; None lets Jupyter generate one.
        open_browser: False for servers started by tests.
    """
    argv = [sys.executable, "-m", "jupyter", "lab", f"--ServerApp.root_dir={REPO_ROOT}"]
    if port is not None:
        argv.append(f"--ServerApp.port={int(port)}")
        argv.append("--ServerApp.port_retries=0")
    if token is not None:
        argv.append(f"--IdentityProvider.token={token}")
    if not open_browser:
        argv.append("--no-browser")
    if hasattr(os, "geteuid") and os.geteuid() == 0:  # containers and CI run as root; Jupyter refuses otherwise
        argv.append("--allow-root")
    argv.append(f"--LabApp.default_url=/lab/tree/{WELCOME}")
    return argv


def main() -> None:  # pragma: no cover - interactive
    argv = lab_command()
    os.execv(argv[0], argv)


if __name__ == "__main__":  # pragma: no cover
    main()
