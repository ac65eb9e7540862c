"""Exercise checks for notebook 04 (masking).

Notebook 04 calls :func:`check_window_mask` (exercise 1) and :func:`check_masked_attention` (exercise 2).
:func:`check_causal_mask` and :func:`check_decoder_mask` are the checks of its earlier exercises 1 and 3 (``tril``,
and the padding-and-causal mask its cells build in code), kept for teachers who assign them.

Each check runs your function on fresh inputs, compares it with :mod:`attn_lib.masks` and
:func:`attn_lib.attention.scaled_dot_product_attention`, and names the typical mistake it
recognises (inverted mask, upper instead of lower triangle, mask applied after the softmax, ...).
Convention, as everywhere in attn_lib: a boolean mask is True where a query MAY attend.
"""

from __future__ import annotations

import math

import torch

from attn_lib.attention import scaled_dot_product_attention
from attn_lib.course.exercises._core import CheckResult, Mismatch, call, expect_close, fresh_generator, run_check
from attn_lib.course.exercises._core import as_tensor as _as_tensor
from attn_lib.masks import causal_mask, padding_mask

__all__ = ["check_causal_mask", "check_window_mask", "check_masked_attention", "check_decoder_mask"]

HINT_INVERTED = (
    "the mask is inverted: in attn_lib (and torch's scaled_dot_product_attention) True means "
    "'may attend', so the allowed positions must be True."
)
HINT_NAN = (
    "a query row whose keys are ALL masked gave NaN (softmax of a row of -inf is 0/0). "
    "Give such rows weights 0 (and output 0): e.g. torch.where on the row, or "
    "torch.nan_to_num(weights, nan=0.0) after the softmax."
)


HINT_BIG_NEGATIVE = (
    "you filled the masked scores with a large negative number (-1e9 or torch.finfo(...).min) instead of -inf. "
    "That works until a query has NO allowed key: then all its scores are equal, the softmax spreads evenly and "
    "the output is the average of every value, while it must be 0. Fill with -inf and give such rows weight 0 "
    "(torch.nan_to_num(weights, nan=0.0)), or zero them with torch.where."
)
HINT_BOOL_INDEX = (
    "Known shape mistakes: scores[~mask] = -inf (boolean indexing) needs a mask of the scores' full shape; a (L, S) "
    "mask with batched queries (..., L, S) must broadcast: scores.masked_fill(~mask, float('-inf')) does that."
)


def _bool_tensor(x, what: str) -> torch.Tensor:
    t = _as_tensor(x, what)
    if t.dtype != torch.bool:
        raise Mismatch(
            f"{what} has dtype {t.dtype}; return a bool tensor (True = may attend). "
            "An additive 0/-inf mask is a different (equivalent) form."
        )
    return t


def check_causal_mask(make_causal_mask) -> CheckResult:
    """Check ``make_causal_mask(n)`` -> bool (n, n), True where query i may attend to key j (j <= i)."""
    sizes = [4, 7, 1]

    def trials():
        for n in sizes:
            want = causal_mask(n)
            got = _bool_tensor(call(make_causal_mask, {"n": n}), f"make_causal_mask({n})")
            ones = torch.ones(n, n, dtype=torch.bool)
            wrong = [
                (~want, HINT_INVERTED),
                (ones.triu(), "that is the upper triangle: query i would see the future keys j > i and not the past."),
                (ones.tril(-1), "the diagonal is missing: a token may attend to itself (key j = i)."),
                (ones.tril(1), "off by one: query i may see key i + 1, one step into the future; the diagonal "
                               "offset is 0 (torch.tril(..., diagonal=0), or j <= i)."),
                (ones, "nothing is masked: query i must not see keys j > i."),
            ]
            expect_close(got, want, what=f"make_causal_mask({n})", wrong_answers=wrong)
        return len(sizes)

    return run_check("check_causal_mask", trials)


HINT_RIGHT_PADDED = (
    "that is the mask of a RIGHT-padded batch (real keys j < lengths[b]). Here the padding comes first: sequence b's "
    "real tokens are the LAST lengths[b] positions, so key j is real when j >= max_len - lengths[b]."
)
HINT_WINDOW_OFF_BY_ONE = (
    "off by one in the window: a window of w lets a query see itself and the w - 1 keys before it, "
    "so key j is inside when i - j < w (you allowed i - j <= w, one key too many)."
)


def check_window_mask(window_mask) -> CheckResult:
    """Check ``window_mask(lengths, max_len, window)`` -> bool (B, max_len, max_len) for a LEFT-padded batch.

    Entry [b, i, j] is True iff key j is not in the future (j <= i), lies inside the sliding window (i - j < window:
    the query itself and the window - 1 keys before it), and is a real token: with left padding, sequence b's real
    tokens are its last lengths[b] positions (j >= max_len - lengths[b]). Padded queries' rows get no key.
    """
    cases = [([5, 3, 1], 6, 3), ([4, 2], 4, 1), ([6], 6, 10), ([3, 7, 5], 7, 2)]

    def trials():
        for lengths, T, w in cases:
            i, j = torch.arange(T)[:, None], torch.arange(T)[None, :]
            first_real = T - torch.tensor(lengths)  # (B,): left padding puts the real tokens at the end
            real = torch.arange(T)[None, :] >= first_real[:, None]  # (B, T)
            causal, inside = j <= i, (i - j) < w
            want = real[:, None, :] & causal & inside
            got = _bool_tensor(call(window_mask, {"lengths": list(lengths), "max_len": T, "window": w}),
                               f"window_mask({lengths}, {T}, {w})")
            right_real = torch.arange(T)[None, :] < torch.tensor(lengths)[:, None]
            wrong = [
                (~want, HINT_INVERTED),
                (right_real[:, None, :] & causal & inside, HINT_RIGHT_PADDED),
                (real[:, None, :] & causal & ((i - j) <= w), HINT_WINDOW_OFF_BY_ONE),
                ((real[:, None, :] & causal).expand(len(lengths), T, T),
                 "the window is missing: query i may see only the keys j with i - j < window, not every earlier key."),
                (real[:, None, :] & ((i - j).abs() < w),
                 "the causal part is missing: the window reaches into the future (|i - j| < window); a decoder's "
                 "query i may see only keys j <= i."),
                ((causal & inside).expand(len(lengths), T, T),
                 "the padding part is missing: no query may attend to a padded key (the first max_len - lengths[b] "
                 "positions of sequence b)."),
                (real[:, :, None] & causal & inside,
                 "the padding masks the queries (rows) instead of the keys (columns): use real[:, None, :]."),
                (real[:, None, :] | (causal & inside),
                 "combined with OR: a key must be allowed by every part (causal, window, real), so combine with &."),
            ]
            expect_close(got, want, what=f"window_mask({lengths}, {T}, {w})", wrong_answers=wrong)
        return len(cases)

    return run_check("check_window_mask", trials)


def check_masked_attention(masked_attention) -> CheckResult:
    """Check ``masked_attention(query, key, value, mask)`` -> output (..., L, d_v).

    ``mask`` is bool (L, S) or (..., L, S), True = may attend. The last trial has a query whose
    keys are all masked: its output must be 0, not NaN.
    """
    # (L, S, d_k, d_v, batch, fully_masked_row)
    # trial 0: a batched mask; trial 2: one (L, S) mask broadcast over batched queries
    cases = [(4, 4, 8, 8, (3,), False), (3, 6, 16, 5, (), False), (5, 5, 8, 4, (2,), False), (4, 5, 8, 3, (), True)]

    def trials():
        for trial, (L, S, E, Ev, batch, full_row) in enumerate(cases):
            g = fresh_generator("check_masked_attention", trial)
            q = torch.randn(*batch, L, E, generator=g)
            k = torch.randn(*batch, S, E, generator=g)
            v = torch.randn(*batch, S, Ev, generator=g)
            mask = torch.rand(*(batch if trial != 2 else ()), L, S, generator=g) < 0.6
            mask[..., torch.arange(L), torch.arange(L) % S] = True  # every row keeps a key ...
            if full_row:
                mask[..., 1, :] = False  # ... except this one
            want, _ = scaled_dot_product_attention(q, k, v, mask)
            got = call(masked_attention, {"query": q, "key": k, "value": v, "mask": mask})
            if isinstance(got, (tuple, list)) and not isinstance(got, torch.Tensor):
                raise Mismatch("return only the output tensor, not a tuple.")
            got = _as_tensor(got, "the masked attention output")
            if full_row and got.shape == want.shape and torch.isnan(got).any():
                raise Mismatch(HINT_NAN)

            scale = 1 / math.sqrt(E)
            s = q @ k.transpose(-2, -1) * scale
            inv, _ = scaled_dot_product_attention(q, k, v, ~mask)
            wrong = [
                (inv, HINT_INVERTED),
                (torch.softmax(s, -1) * mask @ v,
                 "the mask is applied after the softmax: the remaining weights no longer sum to 1. "
                 "Add -inf (masked_fill) to the SCORES before the softmax."),
                (torch.softmax(s * mask, -1) @ v,
                 "masked keys got a score of 0 (multiplying the scores by the mask, or masked_fill with 0), and "
                 "exp(0) = 1 still gives them weight. Set masked scores to -inf instead."),
                (scaled_dot_product_attention(q, k, v, mask, scale=1.0)[0], "missing 1/sqrt(d_k) scale on the scores."),
                (torch.softmax(s.masked_fill(~mask, -1e9), -1) @ v, HINT_BIG_NEGATIVE),
                (torch.softmax(s.masked_fill(~mask, torch.finfo(s.dtype).min), -1) @ v, HINT_BIG_NEGATIVE),
            ]
            expect_close(got, want, what=f"the masked attention output (query {tuple(q.shape)}, mask "
                                         f"{tuple(mask.shape)})", wrong_answers=wrong, dtype=q.dtype)
        return len(cases)

    return run_check("check_masked_attention", trials, shape_mistakes=HINT_BOOL_INDEX)


def check_decoder_mask(decoder_mask) -> CheckResult:
    """Check ``decoder_mask(lengths, max_len)`` -> bool (B, max_len, max_len).

    Entry [b, i, j] is True iff query i of sequence b may attend to key j: key j is not in the
    future (j <= i) AND key j is a real token (j < lengths[b]). Padded queries' rows are not
    otherwise restricted.
    """
    cases = [([3, 5, 1], 5), ([2, 4], 6), ([4], 4)]

    def trials():
        for lengths, T in cases:
            pad = padding_mask(lengths, T)  # (B, T) True = real
            causal = causal_mask(T)  # (T, T)
            want = pad[:, None, :] & causal
            got = _bool_tensor(call(decoder_mask, {"lengths": list(lengths), "max_len": T}), f"decoder_mask({lengths}, {T})")
            pad_le = torch.arange(T)[None, :] <= torch.tensor(lengths)[:, None]
            wrong = [
                (~want, HINT_INVERTED),
                (pad[:, :, None] & causal,
                 "the padded queries' rows have no allowed key at all: the padding must mask the KEYS "
                 "(columns), pad[:, None, :], not the queries (rows). Padded queries' outputs are dropped later, "
                 "and a row with no key invites the NaN trap."),
                (pad[:, None, :] | causal,
                 "combined with OR: a key must be allowed by BOTH masks, so combine them with & (AND)."),
                (pad[:, None, :] & ~causal, "the causal part is inverted: query i may see keys j <= i."),
                (pad[:, None, :].expand(-1, T, -1), "the causal part is missing: query i must not see keys j > i."),
                (causal.expand(len(lengths), -1, -1), "the padding part is missing: no query may attend to a padded key."),
                (pad_le[:, None, :] & causal, "off by one: a sequence of length n has real tokens 0 .. n-1, so key j is "
                                              "real when j < lengths[b] (you used <=)."),
            ]
            expect_close(got, want, what=f"decoder_mask({lengths}, {T})", wrong_answers=wrong)
        return len(cases)

    return run_check("check_decoder_mask", trials)
