"""The machinery behind every ``check_*`` function.

A check calls the learner's function on fresh random inputs (not the notebook's examples),
compares with attn_lib's reference and, on a mismatch, tries the typical wrong answers the
check knows about, so that the hint can name the mistake ("sin and cos are swapped").

Checks never raise for a wrong answer: they return a :class:`CheckResult` whose ``repr`` is
the message a notebook shows, and which is truthy only when the check passed.

Every call of the learner's function goes through :func:`call`, which guards the check:

- **Not a function:** the check says what was passed instead (no "raised TypeError").
- **Time limit:** each call gets :data:`TIME_LIMIT_S` seconds (default 5; change it with
  :func:`set_time_limit` or the environment variable ``ATTN_LIB_CHECK_TIME_LIMIT``). The limit uses
  ``signal.setitimer`` and so works on Linux and macOS in the main thread, which is where Jupyter
  kernels (and nbgrader) run cells. Elsewhere (Windows, a worker thread) the call runs without a
  limit. A time limit interrupts Python code; a single long-running torch operation is interrupted
  when it returns to Python.
- **In-place changes:** the function gets copies of the inputs; if it changes them, the check fails
  (unless the exercise asks for it).
- **Patching:** the comparisons use functions this module captured when it was imported. If the
  learner's code replaces a function of ``torch``, ``torch.Tensor``, ``torch.nn.functional``,
  ``torch.special``, ``torch.linalg`` or a builtin the checks use (``len``, ``isinstance``, ...), e.g.
  ``torch.allclose = lambda *a, **k: True``, the check undoes it and fails with a message naming it.
- **Results:** ``None`` ("did you forget return?"), NumPy arrays and lists (accepted, as tensors),
  tensor subclasses (turned into plain tensors, so that ``__torch_function__`` cannot fake a result).

For a grader: :func:`fresh_check` returns a private copy of a check, built from the source files
and unaffected by anything a notebook rebinds in ``attn_lib.course.exercises``; :func:`integrity_report`
lists what differs between the loaded checks and their source files (empty list: unpatched).

Why one module of over 400 lines: every check goes through this machinery (the guarded call, the time
limit, the patch detection, the comparisons); keeping it in one place leaves no check a way around it.
"""

from __future__ import annotations

import builtins
import copy
import importlib.util
import math
import os
import signal
import sys
import threading
import time
import traceback
import types
import warnings
import zlib
from dataclasses import dataclass
from typing import Callable, Iterable

import numpy as np
import torch
import torch.nn.functional

from attn_lib._checks import check_callable

__all__ = [
    # what the package re-exports for learners and graders
    "CheckResult", "set_time_limit", "fresh_check", "integrity_report",
    # the toolkit each check module is written with (imported by name, not re-exported)
    "Mismatch", "ShapeMismatch", "fresh_generator", "inputs_text", "call", "as_tensor", "as_pair", "expect_close",
    "expect_dtype", "run_check",
]

# ---------------------------------------------------------------------------------------------
# private copies of the functions a comparison relies on, taken when attn_lib is imported
# ---------------------------------------------------------------------------------------------
_VF = torch._C._VariableFunctions
_allclose, _equal, _isfinite, _isnan = _VF.allclose, _VF.equal, _VF.isfinite, _VF.isnan
_as_tensor = torch.as_tensor
_Tensor = torch.Tensor
_isinstance, _type, _len, _list, _tuple, _str = isinstance, type, len, list, tuple, str

_GUARDED_MODULES = {
    "torch": torch,
    "torch.Tensor": torch.Tensor,
    "torch.nn.functional": torch.nn.functional,
    "torch.special": torch.special,
    "torch.linalg": torch.linalg,
    "builtins": builtins,
}


# builtins: only those a check relies on (Jupyter rebinds others, such as input, on every cell)
_GUARDED_BUILTINS = frozenset(
    "abs all any bool callable dict enumerate float getattr hasattr int isinstance issubclass len list map max min "
    "range repr round sorted str sum tuple type zip".split())


def _guardable(where: str, key: str, value) -> bool:
    if where == "builtins":
        return key in _GUARDED_BUILTINS
    if where == "torch" and key.startswith("_"):
        return False
    return callable(value) or where == "torch.Tensor"


def _snapshot_namespaces() -> dict[str, dict]:
    return {where: {k: v for k, v in vars(obj).items() if _guardable(where, k, v)}
            for where, obj in _GUARDED_MODULES.items()}


_PRISTINE = _snapshot_namespaces()


def _undo_patches() -> list[str]:
    """Restore every guarded name that no longer holds its original object; return their names."""
    patched = []
    for where, names in _PRISTINE.items():
        obj = _GUARDED_MODULES[where]
        current = vars(obj)
        for key, original in names.items():
            now = current.get(key, _MISSING)
            if now is not original and _torch_own_wrapper(now, original):
                names[key] = now  # torch re-wrapped its own function (torch._dynamo wraps torch.manual_seed)
                continue
            if now is not original:
                patched.append(f"{where}.{key}" if where != "builtins" else key)
                try:
                    setattr(obj, key, original)
                except (AttributeError, TypeError):  # pragma: no cover - read-only slot
                    pass
        if where == "torch.Tensor":  # a new attribute there shadows torch._C.TensorBase's (e.g. __eq__)
            for key in [k for k in _list(current) if k not in names and _guardable(where, k, current[k])]:
                patched.append(f"{where}.{key}")
                try:
                    delattr(obj, key)
                except (AttributeError, TypeError):  # pragma: no cover
                    pass
    return patched


_MISSING = object()
_TORCH_DIR = os.path.dirname(torch.__file__)


def _torch_own_wrapper(value, original) -> bool:
    """True for a wrapper that torch itself put around ``original``.

    Importing ``torch._dynamo`` (torch.compile, FlexAttention) replaces ``torch.manual_seed`` by
    ``torch._disable_dynamo(torch.manual_seed)``. That is not a learner's patch: the wrapper's code lives in torch's
    own files and its ``__wrapped__`` chain leads to the original. (``functools.wraps`` in a learner's cell copies
    ``__wrapped__`` but not the code's file name, so such a patch is still caught.)
    """
    seen, fn = 0, value
    code = getattr(value, "__code__", None)
    if code is None or not os.path.abspath(code.co_filename).startswith(_TORCH_DIR):
        return False
    while fn is not None and seen < 10:
        if fn is original:
            return True
        fn, seen = getattr(fn, "__wrapped__", None), seen + 1
    return False


# ---------------------------------------------------------------------------------------------
# results and failures
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class CheckResult:
    """Outcome of an exercise check: ``bool(result)`` is True when it passed."""

    name: str
    passed: bool
    message: str

    def __bool__(self) -> bool:
        return self.passed

    def __repr__(self) -> str:
        return self.message

    def _repr_pretty_(self, p, cycle) -> None:  # IPython display: just the message
        p.text(self.message)


class Mismatch(Exception):
    """Raised inside a check's trial to report a wrong answer with a hint."""


class ShapeMismatch(Mismatch):
    """A wrong answer whose shape is wrong: the message adds the inputs' shapes and known shape mistakes."""


class _TimeLimit(BaseException):  # BaseException: a learner's ``except Exception`` does not swallow it
    pass


class _LearnerError(Exception):
    """The learner's function raised ``error`` (anything but NotImplementedError)."""

    def __init__(self, error: BaseException):
        super().__init__(str(error))
        self.error = error


# what the last call got (names and shapes) and warned, for the messages of shape mistakes
_context = threading.local()


def _ctx(key, default=None):
    return getattr(_context, key, default)


def is_instance(obj, cls) -> bool:
    """``isinstance(obj, cls)``, also for an object of the learner's that lives in the grader's sandbox
    (``classroom.grade.RemoteObject``: its type answers from the names of the classes the object's type has)."""
    if isinstance(obj, cls):
        return True
    answer = getattr(type(obj), "_grader_isinstance", None)
    return bool(answer(obj, cls)) if callable(answer) else False


def new_beside(obj, cls, *args):
    """``cls(*args)`` (one of attn_lib's classes, e.g. a ``KVCache`` for the learner's block) made where ``obj``
    lives: here, or in the grader's sandbox when ``obj`` is a proxy of an object there (``classroom.grade``)."""
    make = getattr(type(obj), "_grader_new", None)
    return make(obj, cls, *args) if callable(make) else cls(*args)


def fresh_generator(name: str, trial: int = 0) -> torch.Generator:
    """A torch.Generator seeded from the check's name and trial number.

    The inputs differ from anything in the notebooks, yet every run of a check sees the
    same inputs, so a notebook's saved output (the pass/fail message) is reproducible.
    """
    return torch.Generator().manual_seed(zlib.crc32(f"{name}:{trial}".encode()))


# ---------------------------------------------------------------------------------------------
# time limit
# ---------------------------------------------------------------------------------------------
TIME_LIMIT_S: float = float(os.environ.get("ATTN_LIB_CHECK_TIME_LIMIT", "5"))


def set_time_limit(seconds: float | None) -> None:
    """Set the time limit of each call of a learner's function, in seconds (None or 0: no limit).

    Raises:
        ValueError: a negative or non-finite number.
    """
    global TIME_LIMIT_S
    if seconds is None:
        seconds = 0.0
    if _isinstance(seconds, bool) or not _isinstance(seconds, (int, float)) or not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"seconds must be a finite number >= 0 (or None for no limit), got {seconds!r}")
    TIME_LIMIT_S = float(seconds)


def _can_time_limit() -> bool:
    return hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()


def _with_time_limit(fn, args):
    limit = TIME_LIMIT_S
    if not limit or not _can_time_limit():
        return fn(*args)

    def on_alarm(signum, frame):
        raise _TimeLimit()

    previous = signal.signal(signal.SIGALRM, on_alarm)
    outer_delay, _ = signal.setitimer(signal.ITIMER_REAL, limit)  # an outer timer (pytest-timeout) is kept
    start = time.monotonic()
    try:
        return fn(*args)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        if outer_delay:
            signal.setitimer(signal.ITIMER_REAL, max(outer_delay - (time.monotonic() - start), 1e-3))


# ---------------------------------------------------------------------------------------------
# calling the learner's function
# ---------------------------------------------------------------------------------------------
def _copy(value):
    if _isinstance(value, _Tensor):
        return value.detach().clone()
    return copy.deepcopy(value)


def _same(a, b) -> bool:
    if _isinstance(a, _Tensor):
        if not _isinstance(b, _Tensor) or a.shape != b.shape or a.dtype != b.dtype:
            return False
        if a.is_floating_point():
            return bool(_equal(_isnan(a), _isnan(b))) and bool(_equal(torch.nan_to_num(a), torch.nan_to_num(b)))
        return bool(_equal(a, b))
    return _type(a) is _type(b) and a == b


def _describe(value) -> str:
    if _isinstance(value, _Tensor):
        return f"{tuple(value.shape)} {str(value.dtype).replace('torch.', '')}"
    if _isinstance(value, (list, tuple, dict)) and _len(value) > 6:
        return f"{_type(value).__name__} of {_len(value)}"
    return repr(value)


def inputs_text() -> str:
    """The inputs of the last call, e.g. "query (2, 6, 32) float32, key (2, 3, 32) float32"."""
    return ", ".join(f"{k} {_describe(v)}" for k, v in (_ctx("inputs") or {}).items())


def _plain(x):
    """A tensor subclass as a plain tensor (its __torch_function__ could fake any comparison); detached."""
    if _isinstance(x, _Tensor):
        if _type(x) is not _Tensor:
            with torch._C.DisableTorchFunctionSubclass():
                x = _Tensor.as_subclass(x, _Tensor)
        return x.detach()
    if _type(x) in (_list, _tuple):
        return _type(x)(_plain(i) for i in x)
    return x


def call(fn, inputs: dict, *, mutates: Iterable[str] = ()):
    """Call the learner's ``fn`` on copies of ``inputs`` (name -> value, in argument order).

    Raises :class:`Mismatch` when the function is not a function, runs past the time limit,
    patches torch or builtins, changes an input in place (except those named in ``mutates``) or
    returns None; ``NotImplementedError`` passes through (the "not written yet" message) and
    any other exception becomes a :class:`_LearnerError`.
    """
    try:
        check_callable("the argument of the check", fn)
    except TypeError as e:
        raise Mismatch(f"{e}.") from None
    patched = _undo_patches()
    if patched:
        raise Mismatch(_patch_message(patched, before=True))
    copies = {k: _copy(v) for k, v in inputs.items()}
    _context.inputs = inputs
    error = None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            result = _with_time_limit(fn, _tuple(copies.values()))
        except _TimeLimit:
            error = Mismatch(
                f"your function did not return within {TIME_LIMIT_S:g} s (inputs: {inputs_text()}). "
                "Is there a loop that never ends (a while loop whose condition never changes)? "
                "Raise the limit with attn_lib.course.exercises.set_time_limit(seconds) if it is only slow.")
        except NotImplementedError:
            raise
        except Exception as e:  # noqa: BLE001 - the learner's code crashed: reported, not raised
            error = _LearnerError(e)
        finally:
            patched = _undo_patches()
    _context.warnings = [str(w.message) for w in caught]
    if patched:
        raise Mismatch(_patch_message(patched, before=False))
    if error is not None:
        raise error
    for k, original in inputs.items():
        if k not in mutates and not _same(copies[k], original):
            raise Mismatch(
                f"your function changed its input {k} in place. Leave the inputs as they are and build a new "
                f"result (e.g. y = x - m instead of x -= m, masked_fill instead of masked_fill_, a copy of a list).")
    if result is None:
        raise Mismatch("your function returned None: did you forget the `return` statement?")
    return _plain(result)


def _patch_message(patched: list[str], *, before: bool) -> str:
    names = ", ".join(patched[:5]) + (" ..." if _len(patched) > 5 else "")
    when = "had been replaced before the check ran (by code in an earlier cell?)" if before else \
        "was replaced by your function"
    return (f"{names} {when}. The check restored the original; a check compares with its own copies of "
            "torch's functions, so replacing them cannot make an answer pass.")


_T_WARNING = "The use of `x.T` on tensors of dimension other than 2"
HINT_DOT_T = ("you used .T on a tensor with more than 2 dimensions: .T reverses ALL the dimensions (and is "
              "deprecated there); to swap the last two use .transpose(-2, -1) (or .mT).")
HINT_SCALE_ZERO = ("scale=0.0 was treated as the default: 0.0 is a scale like any other (every score 0, so every "
                   "key gets the same weight), and only scale=None means 1/sqrt(E). Test `scale is None`; "
                   "`scale or 1 / math.sqrt(E)` replaces 0.0, which is falsy.")


def _shape_notes(extra: str | None) -> str:
    notes = [f"Your function got {inputs_text()}."] if _ctx("inputs") else []
    if _T_WARNING in " ".join(_ctx("warnings") or []):
        notes.append(HINT_DOT_T)
    if extra:
        notes.append(extra)
    return (" " + " ".join(notes)) if notes else ""


def _shapeish(message: str) -> bool:
    words = ("size", "shape", "dimension", "mat1", "broadcast", "must match", "out of range")
    return any(w in message for w in words)


# ---------------------------------------------------------------------------------------------
# turning results into tensors and comparing them
# ---------------------------------------------------------------------------------------------
def as_tensor(x, what: str) -> torch.Tensor:
    """The learner's result as a tensor (NumPy arrays and lists accepted), or a :class:`Mismatch`."""
    if _isinstance(x, _tuple):
        raise Mismatch(f"{what}: return one tensor, not a tuple of {_len(x)} items.")
    if x is None:
        raise Mismatch(f"{what} is None: did you forget the `return` statement?")
    try:
        t = _as_tensor(x)
    except Exception:
        raise Mismatch(f"{what}: expected a tensor, got {_type(x).__name__}.") from None
    return _plain(t)


def as_pair(x, what: str, names: tuple[str, str]) -> tuple:
    """A result that must be a pair, as a tuple or a list of two items."""
    if _type(x) not in (_tuple, _list) or _len(x) != 2:
        raise Mismatch(f"{what}: return a pair ({names[0]}, {names[1]}), got {_type(x).__name__}"
                       f"{f' of {_len(x)} items' if _type(x) in (_tuple, _list) else ''}.")
    return _tuple(x)


def _to_tensor(a):
    if _isinstance(a, _Tensor):
        return a
    try:
        return _as_tensor(np.asarray(a) if not _isinstance(a, (int, float)) else a)
    except Exception:
        return None


def _close(a, b, atol: float, rtol: float) -> bool:
    a, b = _to_tensor(a), _to_tensor(b)
    if a is None or b is None or a.shape != b.shape:
        return False
    if a.dtype == torch.bool or b.dtype == torch.bool:
        return a.dtype == b.dtype and bool(_equal(a, b))
    if a.is_complex() or b.is_complex():
        return False
    return bool(_allclose(a.to(torch.float64), b.to(torch.float64), rtol, atol, False))


def _first_wrong_cell(got: torch.Tensor, want: torch.Tensor, what: str) -> str:
    wrong = (got != want).nonzero().tolist()
    idx = _tuple(wrong[0])
    where = f"{what}[{', '.join(map(str, idx))}]"
    rc = f" (query row {idx[-2]}, key column {idx[-1]}" + (f", sequence {idx[0]}" if _len(idx) == 3 else "") + ")" \
        if _len(idx) >= 2 else ""
    return (f"{_len(wrong)} of {want.numel()} cells are wrong; the first is {where}{rc}: "
            f"expected {bool(want[idx])}, got {bool(got[idx])}.")


def expect_close(
    got,
    want,
    *,
    what: str,
    wrong_answers: Iterable[tuple[object, str]] = (),
    atol: float = 1e-5,
    rtol: float = 1e-4,
    dtype: torch.dtype | None = None,
) -> None:
    """Raise :class:`Mismatch` unless ``got`` equals ``want`` within tolerance, and has ``dtype``.

    Args:
        got: the learner's result (tensor, array or number).
        want: the reference result.
        what: how the message names the value ("the output for query 'sat'").
        wrong_answers: pairs (result of a typical mistake, hint). When ``got`` matches one,
            the message is that hint.
        atol, rtol: tolerances for ``torch.allclose`` (computed in float64, with this module's own copy).
        dtype: the dtype the result must have (that of the float inputs); None: any.
    """
    g = _to_tensor(got)
    if _close(g, want, atol, rtol):
        if dtype is not None and g.dtype != dtype:
            raise Mismatch(f"{what} has dtype {g.dtype}; expected {dtype}, the dtype of the inputs. Keep the inputs' "
                           "dtype: build new tensors with dtype=x.dtype (or torch.zeros_like(x), ...), not the default.")
        return
    for wrong, hint in wrong_answers:
        if _close(g, wrong, atol, rtol):
            if _isinstance(want, _Tensor) and want.dtype == torch.bool and g.shape == want.shape:
                hint = f"{hint} ({_first_wrong_cell(g, want, what)})"
            raise Mismatch(hint)
    if g is not None and _isinstance(want, _Tensor):
        if g.shape != want.shape:
            raise ShapeMismatch(f"{what} has shape {tuple(g.shape)}; expected {tuple(want.shape)}.")
        if want.dtype == torch.bool:
            if g.dtype != torch.bool:
                raise Mismatch(f"{what} has dtype {g.dtype}; return a bool tensor (True = may attend).")
            raise Mismatch(_first_wrong_cell(g, want, what))
        if g.is_complex() or not (g.is_floating_point() or g.dtype in (torch.int64, torch.int32, torch.int16,
                                                                          torch.int8, torch.uint8)):
            raise Mismatch(f"{what} has dtype {g.dtype}; expected {want.dtype}.")
        if not bool(_isfinite(g.to(torch.float64)).all()):
            raise Mismatch(f"{what} contains NaN or inf; the reference is finite.")
        diff = (g.to(torch.float64) - want.to(torch.float64)).abs().max().item()
        raise Mismatch(f"{what} differs from the reference (largest difference {diff:.3g}).")
    raise Mismatch(f"{what} is {got!r}; expected {want!r}.")


def expect_dtype(got: torch.Tensor, dtype: torch.dtype, what: str) -> None:
    """Raise :class:`Mismatch` unless the tensor ``got`` has ``dtype``."""
    if got.dtype != dtype:
        raise Mismatch(f"{what} has dtype {got.dtype}; expected {dtype}.")


# ---------------------------------------------------------------------------------------------
# running a check
# ---------------------------------------------------------------------------------------------
def _learner_frame(tb) -> traceback.FrameSummary | None:
    """The deepest frame of the learner's own code (not torch's, not this package's)."""
    here = os.path.dirname(os.path.abspath(__file__))
    torch_dir = os.path.dirname(os.path.abspath(torch.__file__))
    frames = [f for f in traceback.extract_tb(tb)
              if not os.path.abspath(f.filename).startswith((here, torch_dir))]
    return frames[-1] if frames else None


def run_check(name: str, trials: Callable[[], int | None], *, success: str | None = None,
              shape_mistakes: str | None = None) -> CheckResult:
    """Run ``trials`` and turn its outcome into a :class:`CheckResult`.

    Args:
        name: the check's name, e.g. ``"check_sinusoidal"``.
        trials: runs the learner's function (through :func:`call`) on fresh inputs; raises
            :class:`Mismatch` with a hint on a wrong answer; may return the number of inputs it tried.
        success: extra words for the pass message.
        shape_mistakes: the known shape mistakes of this exercise, added to the message of a wrong
            shape or of a shape error raised inside the learner's function.
    """
    _context.inputs, _context.warnings = None, None
    try:
        count = trials()
    except ShapeMismatch as e:
        return CheckResult(name, False, f"❌ {name}: not yet. {e}{_shape_notes(shape_mistakes)}")
    except Mismatch as e:
        return CheckResult(name, False, f"❌ {name}: not yet. {e}")
    except NotImplementedError:
        return CheckResult(name, False, f"❌ {name}: your function is not written yet (it raised NotImplementedError).")
    except _LearnerError as le:  # the learner's code crashed: show where, briefly
        e = le.error
        frame = _learner_frame(e.__traceback__)
        where = f" (line {frame.lineno} of {frame.name})" if frame else ""
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        notes = _shape_notes(shape_mistakes) if _isinstance(e, (RuntimeError, IndexError, ValueError)) and \
            _shapeish(str(e)) else (" " + HINT_DOT_T if _T_WARNING in " ".join(_ctx("warnings") or []) else "")
        return CheckResult(name, False, f"❌ {name}: your function raised {type(e).__name__}: {first}{where}.{notes}")
    except Exception as e:  # noqa: BLE001 - the check could not read an answer (or has a bug): say which, not blame
        return CheckResult(name, False, f"❌ {name}: the check could not read what your code gave it "
                                        f"({type(e).__name__}: {str(e)[:200]}): return the types the docstring "
                                        "names (tensors, lists, the class's own objects); if yours does, this is a "
                                        "bug of the check, please report it.")
    finally:
        patched = _undo_patches()
    if patched:
        return CheckResult(name, False, f"❌ {name}: not yet. {_patch_message(patched, before=False)}")
    tried = f" on {count} fresh inputs" if count else ""
    extra = f" {success}" if success else ""
    return CheckResult(name, True, f"✅ {name}: passed{tried}.{extra}")


# ---------------------------------------------------------------------------------------------
# for graders: private copies of the checks and an integrity report
# ---------------------------------------------------------------------------------------------
_HERE = os.path.dirname(os.path.abspath(__file__))
_CHECK_MODULES = ("welcome", "tokens", "positional", "attention", "masking", "multihead", "cross_attention",
                  "gqa", "tiled", "capstone", "modern", "scale")
_fresh_counter = [0]


def _load_private(path: str, name: str, overlay: dict[str, types.ModuleType]) -> types.ModuleType:
    """Execute the source file ``path`` as a new module ``name`` not registered in sys.modules; while it
    runs, ``overlay`` stands in for the named modules of sys.modules (its imports of them)."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    saved = {k: sys.modules.get(k) for k in overlay}
    sys.modules.update(overlay)
    sys.modules[name] = module  # dataclasses need their module registered while it executes
    try:
        spec.loader.exec_module(module)
    finally:
        for k, v in saved.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v
        sys.modules.pop(name, None)
    return module


def fresh_check(name: str):
    """A private copy of the check ``name`` (e.g. ``"check_softmax"``), built from the source files.

    The copy runs the source of ``attn_lib/course/exercises/_core.py`` and of the check's module afresh, in
    module objects that no notebook can reach: rebinding ``attn_lib.course.exercises.check_softmax`` or a
    helper such as ``attn_lib.course.exercises._core.expect_close`` does not affect it. Patched torch
    functions are undone by each call anyway. Use it in a grader's hidden test:
    ``assert attn_lib.course.exercises.fresh_check("check_softmax")(my_softmax)``.

    Raises:
        ValueError: no check of that name.
    """
    for mod in _CHECK_MODULES:
        with open(os.path.join(_HERE, f"{mod}.py"), encoding="utf-8") as f:
            if f"def {name}(" in f.read():
                break
    else:
        raise ValueError(f"name must name an exercise check such as 'check_softmax', got {name!r}")
    _fresh_counter[0] += 1
    prefix = f"_attn_lib_fresh_checks_{_fresh_counter[0]}"
    core = _load_private(os.path.join(_HERE, "_core.py"), f"{prefix}._core", {})
    core._PRISTINE = _PRISTINE  # torch as it was when attn_lib was first imported, not as it is now
    module = _load_private(os.path.join(_HERE, f"{mod}.py"), f"{prefix}.{mod}", {"attn_lib.course.exercises._core": core})
    return getattr(module, name)


def _fingerprint(obj):
    """What a function does: its code (recursively), names and constants; plain values as themselves."""
    if _isinstance(obj, types.FunctionType):
        obj = obj.__code__
    if _isinstance(obj, types.CodeType):
        return ("code", obj.co_code, obj.co_names, _tuple(_fingerprint(c) for c in obj.co_consts))
    if _isinstance(obj, (str, int, float, bool, bytes, _tuple, type(None))):
        return obj
    return ("object", _type(obj).__qualname__)


def integrity_report() -> list[str]:
    """What differs between the checks as loaded and their source files; an empty list: nothing.

    Looks at every ``check_*`` reachable as ``attn_lib.course.exercises.<name>`` and in its module, at the
    module-level names (helpers, hints) of each check module and of ``_core``, and at the guarded
    torch and builtins functions (which it restores). A grader's hidden test:
    ``assert not attn_lib.course.exercises.integrity_report()``.
    """
    problems = [f"{n} was replaced (restored now)" for n in _undo_patches()]
    package = sys.modules.get("attn_lib.course.exercises")
    _fresh_counter[0] += 1
    prefix = f"_attn_lib_integrity_{_fresh_counter[0]}"
    fresh_core = _load_private(os.path.join(_HERE, "_core.py"), f"{prefix}._core", {})
    loaded_core = sys.modules.get("attn_lib.course.exercises._core")
    for mod in ("_core",) + _CHECK_MODULES:
        fresh = fresh_core if mod == "_core" else _load_private(
            os.path.join(_HERE, f"{mod}.py"), f"{prefix}.{mod}", {"attn_lib.course.exercises._core": fresh_core})
        loaded = loaded_core if mod == "_core" else sys.modules.get(f"attn_lib.course.exercises.{mod}")
        if loaded is None:
            problems.append(f"attn_lib.course.exercises.{mod} is not loaded")
            continue
        for key, value in vars(fresh).items():
            if key.startswith("__") or _isinstance(value, types.ModuleType) or key in ("_context", "_fresh_counter",
                                                                                       "TIME_LIMIT_S", "_PRISTINE"):
                continue
            if key not in vars(loaded):
                problems.append(f"attn_lib.course.exercises.{mod}.{key} is missing")
            elif _fingerprint(vars(loaded)[key]) != _fingerprint(value):
                problems.append(f"attn_lib.course.exercises.{mod}.{key} differs from its source")
            if key in getattr(fresh, "__all__", ()) and mod != "_core" and package is not None and \
                    _fingerprint(getattr(package, key, None)) != _fingerprint(value):
                problems.append(f"attn_lib.course.exercises.{key} differs from its source")
    return problems
