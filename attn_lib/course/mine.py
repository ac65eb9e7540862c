"""Run the course on the learner's own stack, ``my_attn`` (issue 34), and report its progress.

``use_mine()`` (or ``ATTN_MINE=1`` before ``attn_lib.setup()``) checks every piece of the learner's package on fresh
inputs. A piece that passes replaces attn_lib's everywhere attn_lib refers to it, so the notebooks' own asserts
(equality with torch and transformers) run on the learner's code. A piece not yet written, or one that fails its
check, falls back to attn_lib's, and one line says so (with the failed check's hint).

``python -m attn_lib.course.mine [PATH]`` (``make check-mine``) prints the progress table: piece, notebook, status and
the first failing check with its hint.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from attn_lib.course._setup import REPO_ROOT
from attn_lib.course.exercises.pieces import Piece

__all__ = ["PIECES", "PieceStatus", "check_mine", "use_mine", "use_attn_lib", "progress_table"]

PACKAGE = "my_attn"


# The modules that define pieces: each has PIECES, a tuple of Piece, in the course's order.
_PIECE_MODULES = ("attn_lib.course.exercises.pieces", "attn_lib.course.exercises.pieces_build",
                  "attn_lib.course.exercises.pieces_fast", "attn_lib.course.exercises.pieces_modern",
                  "attn_lib.course.exercises.pieces_sparse")


def _all_pieces() -> tuple[Piece, ...]:
    out: list[Piece] = []
    for name in _PIECE_MODULES:
        out += importlib.import_module(name).PIECES
    return tuple(sorted(out, key=lambda p: p.notebook))  # stable: each module's order within a notebook


PIECES: tuple[Piece, ...] = _all_pieces()


@dataclass
class PieceStatus:
    """Where one piece stands: ``status`` is "passes", "not written" or "fails"; ``message`` the check's words.

    No tensors: a Piece and two str. Source: the course's own (issue 34), after
    Stanford CS336's per-piece test table.

    Raises:
        nothing (a plain record).
    """

    piece: Piece
    status: str
    message: str


def _package_dir(path) -> Path:
    if path is None or str(path).strip().lower() in ("", "1", "yes", "true", "on"):
        return REPO_ROOT / PACKAGE
    p = Path(path).expanduser()
    if not p.is_absolute() and not (p / "__init__.py").is_file():
        p = REPO_ROOT / p  # a notebook runs in notebooks/: a relative path is the repository's
    p = p.resolve()
    if not (p / "__init__.py").is_file():
        raise ValueError(f"path must be a folder holding your package (with an __init__.py), got {str(path)!r}")
    return p


def _load(path) -> dict:
    """The learner's package at ``path`` (default REPO_ROOT/my_attn), freshly imported as ``my_attn``: module name
    -> module, or the error that importing it raised."""
    folder = _package_dir(path)
    for name in [n for n in sys.modules if n == PACKAGE or n.startswith(PACKAGE + ".")]:
        del sys.modules[name]
    spec = importlib.util.spec_from_file_location(PACKAGE, folder / "__init__.py",
                                                  submodule_search_locations=[str(folder)])
    package = importlib.util.module_from_spec(spec)
    sys.modules[PACKAGE] = package
    spec.loader.exec_module(package)
    modules = {}
    for module in sorted({p.module for p in PIECES}):
        try:
            modules[module] = importlib.import_module(f"{PACKAGE}.{module}")
        except Exception as e:  # noqa: BLE001 - the learner's module does not import: every piece in it waits
            modules[module] = e
    return modules


def check_mine(path=None) -> list[PieceStatus]:
    """Check every piece of the learner's package on fresh inputs (nothing is replaced).

    Args:
        path: the package's folder; None (or "1") means REPO_ROOT/my_attn.

    Returns:
        one :class:`PieceStatus` per entry of :data:`PIECES`, in the course's order. No tensors in or out: each
        check draws its own float64 inputs, of the shapes its piece takes (e.g. (B, H, L, E) for attention).

    Raises:
        ValueError: ``path`` is not a folder with an ``__init__.py``.

    Source: the course's own (issue 34); the adapter seam of Stanford CS336's assignment 1, one check per piece.
    """
    modules = _load(path)
    out = []
    for piece in PIECES:
        module = modules[piece.module]
        if isinstance(module, Exception):
            out.append(PieceStatus(piece, "fails", f"my_attn.{piece.module} does not import: "
                                                   f"{type(module).__name__}: {module}"))
            continue
        fn = getattr(module, piece.name, None)
        if fn is None:
            out.append(PieceStatus(piece, "not written", f"my_attn.{piece.module} has no {piece.name}"))
            continue
        result = piece.check(fn)
        if result.passed:
            out.append(PieceStatus(piece, "passes", result.message))
        elif "not written yet" in result.message:
            out.append(PieceStatus(piece, "not written", f"write it: notebook {piece.notebook}, section "
                                                         f"\"{piece.section}\""))
        else:
            out.append(PieceStatus(piece, "fails", result.message))
    return _name_failing_dependencies(out)


# the pieces a piece's check runs through the learner's package: when one of them fails its own check, the
# dependent row says to fix that first (its failure may be nothing but theirs)
DEPENDS_ON: dict[str, tuple[str, ...]] = {
    "MultiHeadAttention": ("scaled_dot_product_attention", "causal_mask", "padding_mask", "split_heads",
                           "merge_heads", "apply_rope"),
}


def _name_failing_dependencies(statuses: list[PieceStatus]) -> list[PieceStatus]:
    by_name = {s.piece.name: s for s in statuses}
    for s in statuses:
        if s.status != "fails":
            continue
        broken = [d for d in DEPENDS_ON.get(s.piece.name, ()) if d in by_name and by_name[d].status == "fails"]
        if broken:
            s.message += (f" Fix {', '.join(broken)} first (notebook "
                          f"{', '.join(sorted({by_name[d].piece.notebook for d in broken}))}): your "
                          f"{s.piece.name} may call {'them' if len(broken) > 1 else 'it'}, and "
                          f"{'they fail their' if len(broken) > 1 else 'it fails its'} own check.")
    return statuses


_replaced: list[tuple[object, str, object]] = []  # (module, attribute, attn_lib's original) to undo


def _core_modules() -> list:
    import attn_lib

    names = ["attn_lib." + n for n in sorted(attn_lib._SUBMODULES) if n != "course"]
    names += ["attn_lib.models.blocks", "attn_lib.models.lm", "attn_lib.models.seq2seq", "attn_lib.models.decoding"]
    loaded = []
    for name in names:
        try:
            loaded.append(importlib.import_module(name))
        except ModuleNotFoundError:  # triton missing: the kernels' modules only
            continue
    return loaded


def _replace_everywhere(original, mine) -> int:
    """Point every attn_lib module's reference to ``original`` at ``mine``; the number of references.

    The exercise checks (``attn_lib.course.exercises``) keep attn_lib's own objects: they are the references the
    learner's pieces are compared with, even while the switch is on."""
    count = 0
    for name, module in list(sys.modules.items()):
        if module is None or not (name == "attn_lib" or name.startswith("attn_lib.")):
            continue
        if name.startswith("attn_lib.course.exercises") or name == __name__:
            continue
        for attr, value in list(vars(module).items()):
            if value is original:
                setattr(module, attr, mine)
                _replaced.append((module, attr, original))
                count += 1
    return count


def use_attn_lib() -> None:
    """Undo :func:`use_mine`: every replaced reference points at attn_lib's own piece again.

    No tensors (module attributes only). Source: the course's own (issue 34).

    Raises:
        nothing.
    """
    while _replaced:
        module, attr, original = _replaced.pop()
        setattr(module, attr, original)


def use_mine(path=None, *, quiet: bool = False) -> list[PieceStatus]:
    """Run the course on the learner's pieces: each one that passes its check replaces attn_lib's.

    Prints one line for the pieces in use, and one for each piece that falls back to attn_lib's (not written yet,
    or failing its check, with the check's hint).

    Args:
        path: the package's folder; None (or "1") means REPO_ROOT/my_attn.
        quiet: print nothing.

    Returns:
        the statuses, as :func:`check_mine`. No tensors in or out; the pieces keep attn_lib's shapes and dtypes
        (e.g. attention's (..., L, E) queries), which their checks verify.

    Raises:
        ValueError: ``path`` is not a folder with an ``__init__.py``.

    Source: the course's own (issue 34).
    """
    use_attn_lib()
    statuses = check_mine(path)
    _core_modules()
    yours = []
    for s in statuses:
        if s.status == "passes" and s.piece.replaces:
            original = getattr(importlib.import_module(f"attn_lib.{s.piece.module}"), s.piece.name)
            _replace_everywhere(original, getattr(importlib.import_module(f"{PACKAGE}.{s.piece.module}"), s.piece.name))
        if s.status == "passes":
            yours.append(s.piece.name)
    if not quiet:
        print(f"my_attn: {len(yours)} of {len(statuses)} pieces are yours and in use"
              + (f" ({', '.join(yours)})." if yours else "."))
        for s in statuses:
            if s.status == "not written":
                print(f"  {s.piece.notebook} {s.piece.name}: not written yet; attn_lib's is used.")
            elif s.status == "fails":
                print(f"  {s.piece.notebook} {s.piece.name}: fails its check; attn_lib's is used. {s.message}")
    return statuses


def progress_table(statuses: list[PieceStatus]) -> str:
    """The Markdown table ``make check-mine`` prints: piece, notebook, status, first failing check and its hint.

    No tensors: a list of PieceStatus in, a str out. Source: the course's own (issue 34).

    Raises:
        nothing.
    """
    rows = ["| piece | notebook | status | first failing check and its hint |", "|---|---|---|---|"]
    for s in statuses:
        detail = "" if s.status == "passes" else s.message.replace("|", "\\|").replace("\n", " ")
        rows.append(f"| `{s.piece.module}.{s.piece.name}` | {s.piece.notebook} | {s.status} | {detail} |")
    done = sum(s.status == "passes" for s in statuses)
    rows.append(f"\n{done} of {len(statuses)} pieces pass.")
    return "\n".join(rows)


def main(argv=None) -> int:
    """``make check-mine``: print the progress table; exit 1 when a written piece fails its check (a script or a
    learner's own CI can stop on it), 0 when every written piece passes (pieces not written yet are progress, not
    errors)."""
    args = list(sys.argv[1:] if argv is None else argv)
    path = args[0] if args else os.environ.get("ATTN_MINE") or None
    statuses = check_mine(path)
    print(progress_table(statuses))
    return 1 if any(s.status == "fails" for s in statuses) else 0


if __name__ == "__main__":
    sys.exit(main())
