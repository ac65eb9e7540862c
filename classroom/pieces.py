"""Grade a student's own stack, ``my_attn/`` (issue #34), piece by piece, in the sandbox.

A submission may include the student's ``my_attn/`` folder. Its pieces are graded with the same checks
``make check-mine`` runs (:data:`attn_lib.course.mine.PIECES`), by the machinery that grades the notebooks'
exercises (:func:`classroom.grade.grade_notebook`): this module writes a notebook of its own whose first, locked cell
unpacks the student's modules inside the sandbox and imports them, one module at a time (a module that does not
import leaves its pieces "not written"), and whose graded cells call ``check_piece_<name>`` on each piece. As for a
notebook, the check runs in the grader's process on salted inputs, and the piece is a
:class:`~classroom.grade.RemoteFunction` that runs in the sandbox; the student's code never runs in the grader's
process and the expected values never leave it.

Graded here: every piece. The functions are :class:`~classroom.grade.RemoteFunction` handles. The classes
(``BPETokenizer``, ``MultiHeadAttention``, the blocks, ``KVCache``, ``LMBlock``, ``DecoderLM``, ``RingKVCache``)
are graded by handle: the graded cell hands the check the student's class as a :class:`~classroom.grade.RemoteObject`,
a proxy whose calls, method calls and reads of plain attributes go to the sandbox by name (``cls.train(...)``,
``cls(12, 3).double().eval()``, ``mine.load_state_dict(...)``, ``cache.update(k, v)``, ``cache.seq_len``); the
instances stay in the sandbox's table (:class:`classroom.wire.Table`) and only tensors and plain data cross. What the
in-process checks watch in their own process is reported by the sandbox's runner instead (:mod:`classroom.runner`):
attn_lib's own version of the methods the student writes (``super().forward``, ``attn_lib...EncoderBlock.forward(self,
...)``: the piece gets 0 and a flag, :data:`classroom.grade.REFUSED`), torch's fused attention and whether the
student's own ``scaled_dot_product_attention`` ran (the MultiHeadAttention piece). The assembled decoder is also
graded by a shortened training run with a threshold (``piece_decoder_training``).

The Triton kernel ``flash_forward``: its check watches what happens during the call (that Triton's interpreter
launched a kernel, ``GridExecutor.__call__``; that the launcher computed no attention in torch; that it ran none of
attn_lib's kernels): in the sandbox the runner keeps those watches and reports them by name (``classroom/runner.py``'s
``_NamedWatch``, resolved before any student code runs, with ``TRITON_INTERPRET=1`` set before triton is first
imported there), and the grader turns the names it asked for into the check's verdict (``classroom/grade.py``'s
``sandbox_watches`` and ``watched_names``).

Every such report is the sandbox's word: rebinding torch's functions, Triton's launcher or the runner's watch from
the student's module changes nothing (the runner resolved them first), a watch turned off during the call fails the
check, and a reply forged on the report channel puts the protocol out of step, which fails the next call; a student
who rewrites the runner's own process can still forge it, in code the submission shows, and a package whose source
names the grader's machinery (:data:`GRADER_TOKENS`) is flagged for the teacher to read. The points come from the
grader's comparison of values either way. :func:`ungraded_pieces` names what is not graded here (nothing today).

Points per piece: :data:`PIECE_POINTS`, or ``piece_<name> = points`` in ``classroom/points.toml``.
"""

from __future__ import annotations

import inspect
import json
import re
from pathlib import Path

ASSIGNMENT = "my_attn"
PIECE_POINTS = 5  # a piece is a function the learner writes and the course then runs on: half an exercise's 10
MAX_FILE_BYTES = 200_000  # per module of the student's package
MAX_FILES = 200  # modules read from one package (the course's has 21): the job stays far below a message's 64 MB
NOT_GRADED_HERE: set[str] = set()  # function pieces not graded in the sandbox (none now: flash_forward's watches are)

_SETUP = '''\
import importlib, json, pathlib, sys, tempfile, types
_root = pathlib.Path(tempfile.mkdtemp(prefix="my_attn-"))
for _name, _text in json.loads({files!r}).items():
    (_root / _name).parent.mkdir(parents=True, exist_ok=True)
    (_root / _name).write_text(_text)
sys.path.insert(0, str(_root))
for _m in [m for m in sys.modules if m == "my_attn" or m.startswith("my_attn.")]:
    del sys.modules[_m]
_DTYPES = {dtypes!r}
_modules = {{}}
for _m in {modules!r}:
    try:
        _modules[_m] = importlib.import_module("my_attn." + _m)
    except Exception as _e:  # the module does not import: its pieces are not written
        _modules[_m] = _e


def _keywords(fn):
    """The grader sends keyword arguments as a last positional {{"__kwargs__": {{...}}}} (its calls are positional)."""
    def value(v):  # a torch dtype travels as {{"__dtype__": name}}
        if isinstance(v, dict) and set(v) == {{"__dtype__"}} and v["__dtype__"] in _DTYPES:
            import torch

            return getattr(torch, v["__dtype__"])
        return v

    def call(*args):
        args = [value(a) for a in args]
        if args and isinstance(args[-1], dict) and set(args[-1]) == {{"__kwargs__"}}:
            return fn(*args[:-1], **{{k: value(v) for k, v in args[-1]["__kwargs__"].items()}})
        return fn(*args)

    call.__name__ = getattr(fn, "__name__", "piece")
    return call


def _train_decoder(module, steps):
    """A capstone TinyDecoder whose blocks are the student's LMBlock (whether or not it passes its own check),
    trained on the copy task for ``steps`` steps; its logits are what the grader scores."""
    import torch
    import attn_lib.models.lm as lm
    from attn_lib.course import capstone
    from attn_lib.course.train import train_loop

    block = getattr(_modules.get(module), "LMBlock", None)
    if not isinstance(block, type) or not issubclass(block, lm.LMBlock):
        raise NotImplementedError(f"my_attn.{{module}} has no LMBlock (a subclass of attn_lib's)")
    library_block, lm.LMBlock = lm.LMBlock, block
    try:
        torch.manual_seed(0)
        model = capstone.TinyDecoder(capstone.VOCAB_SIZE)
    finally:
        lm.LMBlock = library_block
    train_loop(model, capstone.copy_batches(32, seed=1), capstone.copy_loss, steps=steps, warmup_steps=30,
               desc="your decoder")
    return model.eval()


try:
    _decoder, _decoder_error = _train_decoder({decoder_module!r}, {decoder_steps!r}), None
except Exception as _e:  # not written, or it breaks while training: the graded call says so
    _decoder, _decoder_error = None, _e


def _decoder_logits(inputs):
    import torch

    if _decoder is None:
        if isinstance(_decoder_error, NotImplementedError):
            raise _decoder_error
        raise RuntimeError(f"training your decoder failed: {{type(_decoder_error).__name__}}: {{_decoder_error}}")
    with torch.no_grad():
        return _decoder(inputs)


def _mine(module, name):
    """The student's piece (a class as it is: the grader holds it by handle), or a stand-in that says why there is
    none."""
    m = _modules.get(module)
    if isinstance(m, types.ModuleType) and callable(getattr(m, name, None)):
        piece = getattr(m, name)
        return piece if isinstance(piece, type) else _keywords(piece)
    why = f"my_attn.{{module}} did not import ({{type(m).__name__}}: {{m}})" if isinstance(m, Exception) else \\
        f"my_attn.{{module}} has no {{name}}"

    def missing(*args, **kwargs):
        raise NotImplementedError(why)

    class _Missing(type):  # a class piece: its methods (BPETokenizer.train) are not written either
        def __getattr__(cls, attr):
            raise NotImplementedError(why)

        def __call__(cls, *args, **kwargs):
            raise NotImplementedError(why)

    missing.__name__ = name
    return _Missing(name, (), {{}}) if name[:1].isupper() else missing
'''


DECODER_STEPS = 300  # about 6 s on one idle core; the course's blocks reach a held-out loss near 1.4 by then
DECODER_THRESHOLD = 2.2  # nats per copied word: ln 16 = 2.77 is what a model whose tokens cannot read each other gets
DECODER_POINTS = 10
DECODER_ID = "piece_decoder_training"


def check_decoder_training(logits) -> "CheckResult":
    """The student's decoder, trained in the sandbox for :data:`DECODER_STEPS` steps, scored here on held-out copy
    sequences drawn afresh for each call (the sandbox never sees the targets): its mean loss on the copied words
    must be below :data:`DECODER_THRESHOLD`."""
    import secrets

    import torch
    import torch.nn.functional as F

    from attn_lib.course import capstone
    from attn_lib.course.exercises._core import Mismatch, call, run_check

    def trials():
        g = torch.Generator().manual_seed(secrets.randbits(62))
        losses = []
        for n in (4, 7, 10, 12):
            inputs, targets = capstone.copy_batch(64, g, min_words=n, max_words=n)
            got = torch.as_tensor(call(logits, {"inputs": inputs}))
            if got.shape != (*inputs.shape, capstone.VOCAB_SIZE) or not bool(torch.isfinite(got).all()):
                raise Mismatch(f"your decoder's logits must be finite, of shape {(*inputs.shape, capstone.VOCAB_SIZE)}; "
                               f"got {tuple(got.shape)}.")
            losses.append(F.cross_entropy(got.double().flatten(0, 1), targets.flatten(), ignore_index=-100).item())
        loss = sum(losses) / len(losses)
        if not loss < DECODER_THRESHOLD:
            raise Mismatch(f"after {DECODER_STEPS} training steps your decoder's held-out loss on the copied words is "
                           f"{loss:.2f} nats, above the threshold {DECODER_THRESHOLD} (the course's blocks reach about "
                           "1.4; tokens that cannot read each other stay at ln 16 = 2.77). Look at your LMBlock: the "
                           "causal attention and both residual additions.")
        return 4

    return run_check("decoder_training", trials)


def _piece_checks() -> dict:
    from attn_lib.course import mine

    return {**{f"check_piece_{p.name}": p.check for p in mine.PIECES}, "check_piece_decoder_training":
            check_decoder_training}


def check_for(name: str):
    """The piece check called ``name`` (``check_piece_softmax``), or None: the grader's fallback after the
    exercises' own checks (:func:`classroom.grade.grade_check`)."""
    return _piece_checks().get(name) if name.startswith("check_piece_") else None


class KeywordCall:
    """A :class:`~classroom.grade.RemoteFunction` that also takes keyword arguments: they travel as a last positional
    ``{"__kwargs__": {...}}``, which the sandbox's ``_keywords`` unpacks (the protocol's calls are positional)."""

    def __init__(self, remote):
        self.remote, self.__name__ = remote, remote.__name__

    def __call__(self, *args, **kwargs):
        args = [_send(a) for a in args]
        if kwargs:
            args.append({"__kwargs__": {k: _send(v) for k, v in kwargs.items()}})
        return self.remote(*args)

    def watched_call(self, watch: dict, *args, **kwargs):
        """The call, with the sandbox's runner watching the names of ``watch`` (``{"torch": [...], "code": [...],
        "library": [...]}``, a check's own, see ``attn_lib.course.exercises.pieces_fast._watching``): (result, the
        names that fired, or None when the watch was turned off during the call)."""
        self.remote.watch, self.remote.fired = watch, None
        try:
            result = self(*args, **kwargs)
        finally:
            self.remote.watch = None
        return result, self.remote.fired


DTYPES = ("float16", "bfloat16", "float32", "float64", "int32", "int64", "bool")


def _send(value):
    """A torch dtype as {"__dtype__": name} (the wire carries tensors and plain data, not dtypes)."""
    import torch

    if isinstance(value, torch.dtype):
        return {"__dtype__": str(value).removeprefix("torch.")}
    return value


def keyword_calls(values: list) -> list:
    """``values`` with every remote function wrapped in :class:`KeywordCall` (recognised by its sandbox and handle:
    under ``python -m classroom.grade`` its class is ``__main__.RemoteFunction``, not ``classroom.grade``'s)."""
    return [KeywordCall(v) if callable(v) and hasattr(v, "box") and hasattr(v, "number")
            and not getattr(type(v), "_grader_remote", False) else v for v in values]


def graded_pieces() -> list:
    """The pieces graded in the sandbox: the functions and the classes (see the module's docstring), in the
    course's order."""
    from attn_lib.course import mine

    pieces = []
    for p in mine.PIECES:
        stub = getattr(_stub_module(p.module), p.name, None)
        if p.name not in NOT_GRADED_HERE and (inspect.isfunction(stub) or isinstance(stub, type)):
            pieces.append(p)
    return pieces


def class_pieces() -> dict[str, str]:
    """check name -> class name, for the pieces that are classes (their checks get a
    :class:`~classroom.grade.RemoteObject`)."""
    from attn_lib.course import mine

    return {f"check_piece_{p.name}": p.name for p in mine.PIECES if p.name[:1].isupper()
            and isinstance(getattr(_stub_module(p.module), p.name, None), type)}


def is_class_check(name: str) -> bool:
    return name in _class_checks()


def class_name(name: str) -> str | None:
    return _class_checks().get(name)


_CLASS_CHECKS: dict = {}


def _class_checks() -> dict:
    if not _CLASS_CHECKS:
        _CLASS_CHECKS.update(class_pieces())
    return _CLASS_CHECKS


def ungraded_pieces() -> list[str]:
    from attn_lib.course import mine

    graded = {p.name for p in graded_pieces()}
    return [p.name for p in mine.PIECES if p.name not in graded]


def _stub_module(module: str):
    """The course's stub of ``my_attn.<module>`` (its objects say which pieces are functions), read as source."""
    import ast

    from attn_lib import REPO_ROOT

    tree = ast.parse((REPO_ROOT / "my_attn" / (module.replace(".", "/") + ".py")).read_text())
    names = {n.name: (lambda: None) for n in tree.body if isinstance(n, (ast.FunctionDef,))}
    names.update({n.name: type(n.name, (), {}) for n in tree.body if isinstance(n, ast.ClassDef)})
    return type("stub", (), names)


def points() -> dict[str, float]:
    """grade id -> points: :data:`PIECE_POINTS` unless ``classroom/points.toml`` names ``piece_<name>``."""
    overrides = {}
    toml = Path(__file__).with_name("points.toml")
    if toml.exists():
        import tomllib

        overrides = tomllib.loads(toml.read_text())
    out = {f"piece_{p.name}": float(overrides.get(f"piece_{p.name}", PIECE_POINTS)) for p in graded_pieces()}
    out[DECODER_ID] = float(overrides.get(DECODER_ID, DECODER_POINTS))
    return out


def package_files(folder: Path) -> dict[str, str]:
    """The student's package as {relative path: text}: every ``.py`` file under ``folder`` (``my_attn/``),
    links and oversized files left out, at most :data:`MAX_FILES` (the grader reads them as data; nothing of it
    runs here)."""
    files = {}
    for path in sorted(folder.rglob("*.py")):
        if len(files) >= MAX_FILES:
            break
        if path.is_symlink() or not path.is_file() or path.stat().st_size > MAX_FILE_BYTES:
            continue
        rel = path.relative_to(folder)
        if any(part.startswith(".") or part == "__pycache__" for part in rel.parts):
            continue
        try:
            files[str(Path("my_attn") / rel)] = path.read_text()
        except (UnicodeDecodeError, OSError):
            continue
    return files


def _cell(source: str, meta: dict, kind: str = "code") -> dict:
    cell = {"cell_type": kind, "metadata": {"nbgrader": meta}, "source": source}
    if kind == "code":
        cell.update(outputs=[], execution_count=None)
    return cell


def pieces_notebook(files: dict[str, str], only: set[str] | None = None) -> dict:
    """The notebook that grades the pieces: a locked cell that unpacks ``files`` in the sandbox and imports the
    modules, then one graded cell per piece (nbgrader's metadata, as :func:`classroom.grade.plan_cells` reads it).
    ``only``: the grade ids to grade (``{"piece_flash_forward"}``; the decoder is trained only when
    :data:`DECODER_ID` is among them); every one by default."""
    pieces = [p for p in graded_pieces() if only is None or f"piece_{p.name}" in only]
    pts = points()
    modules = sorted({p.module for p in pieces})
    from attn_lib.course import mine

    decoder_module = next(p.module for p in mine.PIECES if p.name == "LMBlock")
    if only is not None and DECODER_ID not in only:
        decoder_module = None  # nothing to train: the setup's _train_decoder says "not written" at once
    modules = sorted(set(modules) | ({decoder_module} - {None}))
    cells = [_cell(_SETUP.format(files=json.dumps(files), modules=modules, dtypes=DTYPES,
                                 decoder_module=decoder_module, decoder_steps=DECODER_STEPS),
                   {"grade": False, "solution": False, "locked": True, "grade_id": "my_attn_setup"})]
    for p in pieces:
        cells.append(_cell(f"attn_lib.course.exercises.check_piece_{p.name}(_mine({p.module!r}, {p.name!r}))",
                           {"grade": True, "solution": False, "locked": True, "grade_id": f"piece_{p.name}",
                            "points": pts[f"piece_{p.name}"]}))
    if decoder_module is not None:
        cells.append(_cell("attn_lib.course.exercises.check_piece_decoder_training(_decoder_logits)",
                           {"grade": True, "solution": False, "locked": True, "grade_id": DECODER_ID,
                            "points": pts[DECODER_ID]}))
    return {"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}


# what code needs to reach the grader's machinery in the sandbox's process (the runner, its pipes, its profile hook
# and torch's function modes, Triton's launcher): a package whose source names one is flagged for the teacher to
# read, since in-sandbox watches are the sandbox's word (see the module's docstring). The flag names these tokens only.
# The ways to reach a loaded module, a frame or a function's code without naming it are tokens too (a student who
# writes ``sys.modules["class" + "room.runner"]`` or copies attn_lib's method's ``__code__`` is flagged, breakhandles)
GRADER_TOKENS = ("classroom", "/opt/grader", "dup2", "sys.argv", "setprofile", "settrace", "DisableTorchFunction",
                 "_pop_mode", "_set_torch_function_mode", "GridExecutor", "get_objects", "f_locals", "f_back",
                 "sys.modules", "import_module", "__import__", "__code__", "_getframe", "currentframe", "import gc",
                 "_thread", "_profile_hook")  # a thread started without the runner's profile function
# and the same reached under another name (``import sys as _s; _s.modules[...]``), named in the flag by these words
GRADER_PATTERNS = (("sys under another name", re.compile(r"\bimport\s+sys\s+as\b|\bfrom\s+sys\s+import\b")),
                   ("modules[...]", re.compile(r"\bmodules\s*\[")),
                   ("getattr or vars of sys", re.compile(r"\b(getattr|vars)\(\s*sys\b")))


def source_flags(files: dict[str, str]) -> list[str]:
    """A flag when the package's source mentions :data:`GRADER_TOKENS` (which ones, in the grader's words), or
    none. A tripwire, not a proof: the points are the checks'."""
    found = [t for t in GRADER_TOKENS if any(t in text for text in files.values())]
    found += [what for what, pattern in GRADER_PATTERNS if any(pattern.search(text) for text in files.values())]
    if not found:
        return []
    return [f"my_attn: the package's source mentions the grader's machinery ({', '.join(found)}): read it before "
            "trusting the checks that watch the sandbox (flash_forward's kernel, the torch functions refused)"]


def grade_pieces(folder: Path, library: Path, *, cell_timeout: float = 60, budget_s: float = 600,
                 salt: str = "graded", limits=None, only: set[str] | None = None) -> dict:
    """Grade the student's ``my_attn/`` in the sandbox: :func:`classroom.grade.grade_notebook`'s result
    ({"scores", "max", "messages", "cells", "flags"}), one grade id ``piece_<name>`` per graded piece (``only``:
    those grade ids, as :func:`pieces_notebook`)."""
    from classroom.grade import grade_notebook

    files = package_files(folder)
    nb = pieces_notebook(files, only)
    result = grade_notebook(nb, nb, library, cell_timeout=cell_timeout, budget_s=budget_s, salt=salt, limits=limits)
    result["flags"] = source_flags(files) + result["flags"]
    return result


# ------------------------------------------------------------------------------------- make autograde
def find_packages(submissions: Path) -> dict[str, Path]:
    """student -> their ``my_attn/`` folder: SUBMISSIONS/<student>/my_attn/ with an ``__init__.py``, a folder and
    not a link (nor a link inside the path); students named as :func:`classroom.autograde.find_submissions` names
    them (ids that collide are left to its errors)."""
    import os
    import stat

    from classroom.autograde import id_key, student_id

    found, keys = {}, {}
    for entry in sorted(os.scandir(submissions), key=lambda e: e.name):
        try:
            if not stat.S_ISDIR(entry.stat(follow_symlinks=False).st_mode):
                continue
        except OSError:
            continue
        student = student_id(entry.name)
        if student is None:
            continue
        key = id_key(student)
        if key in keys:
            found.pop(keys[key], None)
            continue
        keys[key] = student
        pkg = Path(entry.path) / ASSIGNMENT
        try:
            ok = stat.S_ISDIR(pkg.lstat().st_mode) and (pkg / "__init__.py").is_file() \
                and not (pkg / "__init__.py").is_symlink()
        except OSError:
            ok = False
        if ok:
            found[student] = pkg
    return found


def register_in_gradebook(gb) -> None:
    """The assignment ``my_attn`` with one notebook and one grade cell per graded piece, in nbgrader's gradebook
    (so that :func:`classroom.autograde.record_in_gradebook` can record its scores)."""
    gb.update_or_create_assignment(ASSIGNMENT)
    gb.update_or_create_notebook(ASSIGNMENT, ASSIGNMENT)
    for gid, pts in points().items():
        gb.update_or_create_grade_cell(gid, ASSIGNMENT, ASSIGNMENT, max_score=pts, cell_type="code")


def grade_package(student: str, folder: Path, library: Path, out: Path, *, cell_timeout: float, budget_s: float,
                  salt: str = "graded") -> dict:
    """One student's ``my_attn/`` graded in a process of its own (``python -m classroom.grade``, which starts the
    sandbox), as :func:`classroom.autograde.grade_one_notebook` grades a notebook; the result is kept in
    ``out/.state`` under the digest of the package, so a new run reuses it."""
    from classroom import autograde as ag

    files = package_files(folder)
    nb = pieces_notebook(files)
    data = json.dumps(nb, sort_keys=True).encode()
    key = ag.grade_digest(data, str(cell_timeout).encode())
    state = ag._state_path(out, student, ASSIGNMENT)
    kept = ag.kept_result(state, key)
    if kept is not None:
        return kept
    result = ag.run_grade_job(nb, nb, library, cell_timeout=cell_timeout, budget_s=budget_s, salt=salt)
    result["cells"] = []  # the setup cell holds the whole package: the feedback shows the checks' messages only
    result["flags"] = source_flags(files) + list(result.get("flags", []))
    if result["status"] == "graded":
        ag._atomic_write(state, json.dumps({"digest": key, "result": result}, ensure_ascii=False))
    return result
