"""The nbgrader configuration of a course directory (written there as ``nbgrader_config.py``).

The same file serves ``make release`` / ``make autograde`` and a teacher who runs nbgrader's own commands or
its formgrader in that directory.
"""

from __future__ import annotations

import os
from pathlib import Path

CELL_TIMEOUT_ENV = "ATTN_CELL_TIMEOUT"
DEFAULT_CELL_TIMEOUT = 120  # seconds per cell; the course's slowest cell takes well under a minute

CONFIG_TEMPLATE = '''\
# nbgrader configuration of the attention course, written by `make release` (classroom/config.py).
import os

c = get_config()  # noqa: F821

# The student gets the course's own stub back: the source cells hold "stub, then ### BEGIN SOLUTION ...",
# so the solution region is removed without a replacement.
c.ClearSolutions.code_stub = {{"python": ""}}
c.ClearSolutions.text_stub = ""

# Autograding: every cell has a time limit; a cell that runs past it is interrupted and counts as failed,
# and the notebook goes on with the next cell.
c.Execute.timeout = int(os.environ.get("{timeout_env}", "{timeout}"))
c.Execute.interrupt_on_timeout = True
c.Execute.allow_errors = True
# nbgrader's default waits 4 s for a cell's last output after its reply and then fails the whole notebook;
# on a busy 2-core machine (a class's submissions graded at once) outputs can lag longer than that.
c.Execute.iopub_timeout = 60

# A deleted graded cell is put back (and graded), so its points are not silently lost; edits to locked cells
# are undone from the gradebook (checksums) and listed in the gradebook's flags by classroom/autograde.py.
c.OverwriteCells.add_missing_cells = True

# Feedback HTML must not load MathJax from a CDN (classroom/autograde.py also strips the tag).
c.HTMLExporter.mathjax_url = ""

c.CourseDirectory.root = os.path.dirname(os.path.abspath(__file__))
'''


def cell_timeout() -> int:
    return int(os.environ.get(CELL_TIMEOUT_ENV, DEFAULT_CELL_TIMEOUT))


def write_config(course_dir: Path) -> Path:
    path = course_dir / "nbgrader_config.py"
    path.write_text(CONFIG_TEMPLATE.format(timeout_env=CELL_TIMEOUT_ENV, timeout=DEFAULT_CELL_TIMEOUT))
    return path


def load_config(course_dir: Path):
    """The traitlets Config of ``course_dir/nbgrader_config.py``."""
    from traitlets.config.loader import PyFileConfigLoader

    return PyFileConfigLoader("nbgrader_config.py", path=str(course_dir)).load_config()


def _alembic_on_path() -> None:
    """nbgrader runs ``alembic`` by name (to create a gradebook); alembic's env imports nbgrader, so it must run
    with this interpreter, not with an ``alembic`` script of the venv underneath (.venv may have one)."""
    import sys
    import tempfile
    import zlib

    shim_dir = Path(tempfile.gettempdir()) / f"classroom-alembic-{os.getuid()}-{zlib.crc32(sys.executable.encode())}"
    shim = shim_dir / "alembic"
    text = f"#!/bin/sh\nexec '{sys.executable}' -m alembic \"$@\"\n"
    if not shim.exists() or shim.read_text() != text:
        shim_dir.mkdir(parents=True, exist_ok=True)
        shim.write_text(text)
        shim.chmod(0o755)
    path = os.environ.get("PATH", "")
    if not path.startswith(str(shim_dir)):
        os.environ["PATH"] = f"{shim_dir}{os.pathsep}{path}"


def _jupyter_path_of_layers() -> None:
    """Add the share/jupyter of the venvs this one is layered over to JUPYTER_PATH: nbconvert's HTML templates
    (for the feedback) are installed in .venv, not in .venv-class."""
    import sys

    shares = []
    for entry in sys.path:
        if entry.endswith("site-packages"):
            share = Path(entry).parents[2] / "share" / "jupyter"
            if share.is_dir() and Path(sys.prefix) not in share.parents:
                shares.append(str(share))
    current = [p for p in os.environ.get("JUPYTER_PATH", "").split(os.pathsep) if p]
    os.environ["JUPYTER_PATH"] = os.pathsep.join(dict.fromkeys(current + shares))


def api(course_dir: Path):
    """An ``nbgrader.apps.NbGraderAPI`` for ``course_dir`` with its configuration."""
    _alembic_on_path()
    _jupyter_path_of_layers()
    from nbgrader.apps import NbGraderAPI
    from nbgrader.coursedir import CourseDirectory

    config = load_config(course_dir)
    coursedir = CourseDirectory(config=config, root=str(course_dir.resolve()))
    return NbGraderAPI(coursedir=coursedir, config=config)
