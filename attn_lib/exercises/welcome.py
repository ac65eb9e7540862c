"""Warm-up check for notebook 00: a numerically safe softmax."""

from __future__ import annotations

import torch

from attn_lib.exercises._core import Mismatch, expect_close, fresh_generator, run_check

OVERFLOW_HINT = (
    "large scores overflow exp(): subtract each row's maximum before exponentiating "
    "(softmax(x) = softmax(x - max))."
)

__all__ = ["check_softmax"]


def check_softmax(softmax) -> "CheckResult":  # noqa: F821
    """Check ``softmax(x)`` -> softmax over the last dimension of a float tensor x (..., N).

    Compares with ``torch.softmax(x, dim=-1)`` on fresh inputs, including scores of +-1000
    (where exp() overflows unless the row maximum is subtracted first).
    """

    def trials():
        count = 0
        for trial in range(4):
            g = fresh_generator("check_softmax", trial)
            x = torch.randn(3, 5, generator=g) * (1000.0 if trial == 3 else 3.0)
            want = torch.softmax(x, dim=-1)
            got = softmax(x.clone())
            wrong = [
                (torch.softmax(x, dim=0), "the weights should sum to 1 along the LAST dimension (over the keys); yours sum to 1 along dim 0."),
                (torch.exp(x), "exponentiate, then divide each row by its sum."),
            ]
            if trial == 3:
                naive = torch.exp(x) / torch.exp(x).sum(-1, keepdim=True)
                wrong.append((naive, OVERFLOW_HINT))
            got = torch.as_tensor(got)
            if trial == 3 and not torch.isfinite(got).all():
                raise Mismatch(OVERFLOW_HINT)
            expect_close(got, want, what="softmax(x)", wrong_answers=wrong)
            count += 1
        return count

    return run_check("check_softmax", trials)
