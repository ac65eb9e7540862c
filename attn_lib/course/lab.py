"""Start JupyterLab on the course: ``python -m attn_lib.course.lab`` (what ``make lab`` runs).

The command line is built by :func:`lab_command`, which the tests use too, so the server
they start is the one a learner gets.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from attn_lib.course._setup import REPO_ROOT

WELCOME = "notebooks/00_welcome.ipynb"

#: JupyterLab settings the course sets for its environment: no "get notified about official Jupyter
#: news?" popup over the first notebook, and no update check (both would contact a website).
LAB_SETTINGS = {
    "@jupyterlab/apputils-extension:notification": {"fetchNews": "false", "checkForUpdates": False},
}


def write_lab_settings(prefix: str | Path = sys.prefix) -> Path:
    """Merge :data:`LAB_SETTINGS` into ``<prefix>/share/jupyter/lab/settings/overrides.json``.

    JupyterLab reads that file as the defaults of its environment (a learner can still change a
    setting in the Settings editor). Other entries already in the file are kept.

    Returns:
        the path of ``overrides.json``.
    """
    path = Path(prefix) / "share" / "jupyter" / "lab" / "settings" / "overrides.json"
    current = {}
    if path.exists():
        try:
            current = json.loads(path.read_text())
        except ValueError:
            current = {}
    merged = {**current}
    for plugin, values in LAB_SETTINGS.items():
        merged[plugin] = {**current.get(plugin, {}), **values}
    if merged != current:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(merged, indent=2) + "\n")
    return path


def course_notebooks(root: str | Path = REPO_ROOT) -> list[Path]:
    """Every notebook under ``root/notebooks`` (any depth, checkpoints left out), sorted: the course's layout
    (``NN_*.ipynb`` and their worked versions one folder down) and the student edition's (``NN_name/NN_name.ipynb``)."""
    root = Path(root)
    return sorted(p for p in root.glob("notebooks/**/*.ipynb") if ".ipynb_checkpoints" not in p.parts)


def trust_notebooks(root: str | Path = REPO_ROOT, *, data_dir: str | Path | None = None) -> list[Path]:
    """Sign the course's notebooks as trusted, as ``jupyter trust`` does, so that JupyterLab draws their saved
    interactive outputs (notebook 06's bertviz views) on opening, without running a cell.

    JupyterLab runs a saved output's JavaScript only for a notebook whose signature (an HMAC of its content
    with this machine's secret key) is in the signature database, ``<data_dir>/nbsignatures.db``. Only the
    course's committed notebooks (:func:`course_notebooks`) are signed; a notebook edited outside JupyterLab
    loses its signature until the next ``make lab``.

    Args:
        root: the course folder.
        data_dir: Jupyter's data folder holding the key and the database (None: Jupyter's default,
            ``jupyter --data-dir``, which the server reads too).

    Returns:
        the notebooks newly signed (already trusted ones are left as they are).

    Source: ``jupyter trust`` (nbformat.sign.TrustNotebookApp), which this calls through nbformat's
    ``NotebookNotary``.
    """
    import nbformat
    from nbformat.sign import NotebookNotary

    notary = NotebookNotary(data_dir=str(data_dir)) if data_dir is not None else NotebookNotary()
    signed = []
    for path in course_notebooks(root):
        # the committed JSON as it is (no validation pass: the tests validate the notebooks; this keeps `make lab` quick)
        nb = nbformat.from_dict(json.loads(path.read_text(encoding="utf-8")))
        if not notary.check_signature(nb):
            notary.sign(nb)
            signed.append(path)
    return signed


def lab_command(*, port: int | None = None, token: str | None = None, open_browser: bool = True) -> list[str]:
    """argv that starts JupyterLab at the course root, opening ``notebooks/00_welcome.ipynb``.

    Args:
        port: TCP port; None lets Jupyter pick (8888 or the next free one).
        token: the access token; None lets Jupyter generate one.
        open_browser: False for servers started by tests.

    Also writes the course's JupyterLab settings into this environment (:func:`write_lab_settings`) and
    trusts the course's notebooks (:func:`trust_notebooks`), so their saved bertviz views draw on opening.
    """
    write_lab_settings()
    trust_notebooks()
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
