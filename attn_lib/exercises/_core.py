"""The machinery behind every ``check_*`` function.

A check calls the learner's function on fresh random inputs (not the notebook's examples),
compares with attn_lib's reference and, on a mismatch, tries the typical wrong answers the
check knows about, so that the hint can name the mistake ("sin and cos are swapped").

Checks never raise for a wrong answer: they return a :class:`CheckResult` whose ``repr`` is
the message a notebook shows, and which is truthy only when the check passed.
"""

from __future__ import annotations

import traceback
import zlib
from dataclasses import dataclass
from typing import Callable, Iterable

import torch


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


def fresh_generator(name: str, trial: int = 0) -> torch.Generator:
    """A torch.Generator seeded from the check's name and trial number.

    The inputs differ from anything in the notebooks, yet every run of a check sees the
    same inputs, so a notebook's saved output (the pass/fail message) is reproducible.
    """
    return torch.Generator().manual_seed(zlib.crc32(f"{name}:{trial}".encode()))


def as_tensor(x, what: str) -> torch.Tensor:
    """The learner's result as a tensor, or a :class:`Mismatch` saying what came back instead."""
    if isinstance(x, tuple):
        raise Mismatch(f"{what}: return one tensor, not a tuple of {len(x)} items.")
    try:
        return torch.as_tensor(x)
    except Exception:
        raise Mismatch(f"{what}: expected a tensor, got {type(x).__name__}.") from None


def _close(a, b, atol: float, rtol: float) -> bool:
    if not isinstance(a, torch.Tensor):
        try:
            a = torch.as_tensor(a)
        except Exception:
            return False
    if not isinstance(b, torch.Tensor):
        b = torch.as_tensor(b)
    if a.shape != b.shape:
        return False
    if a.dtype == torch.bool or b.dtype == torch.bool:
        return bool(torch.equal(a.bool(), b.bool()))
    return bool(torch.allclose(a.to(torch.float64), b.to(torch.float64), atol=atol, rtol=rtol, equal_nan=False))


def expect_close(
    got,
    want,
    *,
    what: str,
    wrong_answers: Iterable[tuple[object, str]] = (),
    atol: float = 1e-5,
    rtol: float = 1e-4,
) -> None:
    """Raise :class:`Mismatch` unless ``got`` equals ``want`` within tolerance.

    Args:
        got: the learner's result (tensor, array or number).
        want: the reference result.
        what: how the message names the value ("the output for query 'sat'").
        wrong_answers: pairs (result of a typical mistake, hint). When ``got`` matches one,
            the message is that hint.
        atol, rtol: tolerances for ``torch.allclose`` (computed in float64).
    """
    if _close(got, want, atol, rtol):
        return
    for wrong, hint in wrong_answers:
        if _close(got, wrong, atol, rtol):
            raise Mismatch(hint)
    if isinstance(got, torch.Tensor) and isinstance(want, torch.Tensor):
        if got.shape != want.shape:
            raise Mismatch(f"{what} has shape {tuple(got.shape)}; expected {tuple(want.shape)}.")
        if not torch.isfinite(got.to(torch.float64)).all():
            raise Mismatch(f"{what} contains NaN or inf; the reference is finite.")
        diff = (got.to(torch.float64) - want.to(torch.float64)).abs().max().item()
        raise Mismatch(f"{what} differs from the reference (largest difference {diff:.3g}).")
    raise Mismatch(f"{what} is {got!r}; expected {want!r}.")


def run_check(name: str, trials: Callable[[], int | None], *, success: str | None = None) -> CheckResult:
    """Run ``trials`` and turn its outcome into a :class:`CheckResult`.

    Args:
        name: the check's name, e.g. ``"check_sinusoidal"``.
        trials: runs the learner's function on fresh inputs; raises :class:`Mismatch` with a
            hint on a wrong answer; may return the number of inputs it tried.
        success: extra words for the pass message.
    """
    try:
        count = trials()
    except Mismatch as e:
        return CheckResult(name, False, f"❌ {name}: not yet. {e}")
    except NotImplementedError:
        return CheckResult(name, False, f"❌ {name}: your function is not written yet (it raised NotImplementedError).")
    except Exception as e:  # the learner's code crashed: show where, briefly
        frames = traceback.extract_tb(e.__traceback__)
        where = f" (line {frames[-1].lineno} of {frames[-1].name})" if frames else ""
        return CheckResult(name, False, f"❌ {name}: your function raised {type(e).__name__}: {e}{where}")
    tried = f" on {count} fresh inputs" if count else ""
    extra = f" {success}" if success else ""
    return CheckResult(name, True, f"✅ {name}: passed{tried}.{extra}")
