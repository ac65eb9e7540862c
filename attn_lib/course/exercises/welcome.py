"""Warm-up check for notebook 00: a numerically safe softmax."""

from __future__ import annotations

import torch

from attn_lib.course.exercises._core import CheckResult, Mismatch, as_tensor, call, expect_close, fresh_generator, run_check

OVERFLOW_HINT = (
    "large scores overflow exp(): subtract each row's maximum before exponentiating "
    "(softmax(x) = softmax(x - max))."
)
HINT_FLAT_MAX = (
    "you subtracted the maximum of the whole tensor (x.max()); subtract each row's own maximum, "
    "x.max(dim=-1, keepdim=True).values, or a row far below the others underflows to 0/0."
)

__all__ = ["check_softmax"]


def check_softmax(softmax) -> CheckResult:
    """Check ``softmax(x)`` -> softmax over the last dimension of a float tensor x (..., N).

    Compares with ``torch.softmax(x, dim=-1)`` on fresh inputs of 2 and 3 dimensions, including
    scores of +-1000 (where exp() overflows unless the row maximum is subtracted first). The result
    keeps x's dtype; x is left unchanged.
    """

    def trials():
        count = 0
        shapes = [(3, 5), (4, 5), (2, 3, 5), (3, 5)]  # trial 2 is 3-D: softmax over dim 1 must fail there
        for trial, shape in enumerate(shapes):
            g = fresh_generator("check_softmax", trial)
            x = torch.randn(*shape, generator=g) * (1000.0 if trial == 3 else 3.0)
            if trial == 1:
                x = x.double()
            want = torch.softmax(x, dim=-1)
            got = as_tensor(call(softmax, {"x": x}), "softmax(x)")
            wrong = [(torch.softmax(x, dim=d), "the weights should sum to 1 along the LAST dimension (over the keys); "
                      f"yours sum to 1 along dim {d}.") for d in range(x.dim() - 1)]
            wrong.append((torch.exp(x), "exponentiate, then divide each row by its sum."))
            if trial == 3:
                naive = torch.exp(x) / torch.exp(x).sum(-1, keepdim=True)
                wrong.append((naive, OVERFLOW_HINT))
                flat = torch.exp(x - x.max()) / torch.exp(x - x.max()).sum(-1, keepdim=True)
                wrong.append((flat, HINT_FLAT_MAX))
            if trial == 3 and got.shape == want.shape and got.is_floating_point() and not torch.isfinite(got).all():
                bad = ~torch.isfinite(got)
                flat = torch.exp(x - x.max()) / torch.exp(x - x.max()).sum(-1, keepdim=True)
                raise Mismatch(HINT_FLAT_MAX if bool(torch.equal(bad, ~torch.isfinite(flat))) else OVERFLOW_HINT)
            expect_close(got, want, what=f"softmax(x) for x of shape {tuple(shape)}", wrong_answers=wrong,
                         dtype=x.dtype)
            count += 1
        return count

    return run_check("check_softmax", trials,
                     shape_mistakes="Reduce over the last dimension with keepdim=True (dim=-1), so that the "
                                    "row maxima and sums broadcast against x (..., N).")
