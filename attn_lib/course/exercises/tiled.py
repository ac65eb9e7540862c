"""Exercise checks for notebook 09 (tiled / FlashAttention-style attention).

- :func:`check_online_softmax_update`: fold one block of keys into the running (max, sum, accumulator).
- :func:`check_merge_states`: merge two partial results computed on different keys (the rescale step).
- :func:`check_causal_tiles`: which (query block, key block) tiles causal attention must compute.

Each check compares with :mod:`attn_lib.tiled` on fresh random inputs and names the
typical mistake it recognises (no rescale, inverted rescale, forgotten running max, ...).
"""

from __future__ import annotations

import math

import torch

from attn_lib.course.exercises._core import CheckResult, Mismatch, call, expect_close, fresh_generator, run_check
from attn_lib.tiled import causal_tiles, online_softmax_update

__all__ = ["check_online_softmax_update", "check_merge_states", "check_causal_tiles"]

HINT_NO_RESCALE = (
    "the old sum and accumulator were not rescaled: when the max moves from m_old to m_new, multiply "
    "l_old and acc_old by exp(m_old - m_new) before adding the new block."
)
HINT_INVERTED = "the rescale factor is upside down: use exp(m_old - m_new) (at most 1), not exp(m_new - m_old)."
HINT_TILE_MAX = (
    "the new max must be the running max: m_new = max(m_old, rowmax(scores)), not only the max of the new block."
)
HINT_ACC_ONLY_L = "you rescaled l but not the accumulator: acc_old needs the same factor exp(m_old - m_new)."
HINT_L_ONLY_ACC = "you rescaled the accumulator but not l: l_old needs the same factor exp(m_old - m_new)."
HINT_P_OLD_MAX = "the new block's exponentials must be taken relative to the NEW max: exp(scores - m_new)."
HINT_TUPLE = "return a tuple of three tensors (m_new, l_new, acc_new)."
HINT_MASKED_ROW = (
    "a row whose scores are all -inf (a fully masked block, as causal or padding masks give) got NaN: with "
    "m_old = m_new = -inf, exp(m_old - m_new) = exp(-inf - (-inf)) = exp(NaN). Where m_new is -inf, subtract 0 "
    "instead: m_safe = torch.where(m_new == -math.inf, 0.0, m_new), then alpha = exp(m_old - m_safe) and "
    "p = exp(scores - m_safe[:, None]); l and acc stay 0."
)
SHAPE_MISTAKES = (
    "Known shape mistakes: a per-row vector (R,) such as alpha or m_new must become a column, alpha[:, None] "
    "(R, 1), to scale the rows of an (R, Ev) or (R, Bk) matrix; without [:, None] it lines up with the columns."
)


def _three(result, what: str, dtype: torch.dtype, names=("m_new", "l_new", "acc_new")):
    if type(result) not in (tuple, list) or len(result) != 3:
        raise Mismatch(f"{what}: {HINT_TUPLE} Got {type(result).__name__}.")
    try:
        out = tuple(torch.as_tensor(x) for x in result)
    except Exception:
        raise Mismatch(f"{what}: {HINT_TUPLE}") from None
    for t, n in zip(out, names):
        if t.dtype != dtype:
            raise Mismatch(f"{n} has dtype {t.dtype}; expected {dtype}, the dtype of the inputs.")
    return out


def _pack(m, l, acc) -> torch.Tensor:
    """One vector holding m, l and acc, so a whole state compares at once."""
    return torch.cat([m.reshape(-1).double(), l.reshape(-1).double(), acc.reshape(-1).double()])


def _check_shapes(got, want, names):
    for g, w, n in zip(got, want, names):
        if tuple(g.shape) != tuple(w.shape):
            raise Mismatch(f"{n} has shape {tuple(g.shape)}; expected {tuple(w.shape)}.")


# ----------------------------------------------------------------------------------------------
# exercise 1: one online-softmax update
# ----------------------------------------------------------------------------------------------
def _update_wrong_answers(m_old, l_old, acc_old, s, v):
    tile_max = s.amax(dim=-1)
    m_new = torch.maximum(m_old, tile_max)
    alpha = torch.exp(m_old - m_new)
    p = torch.exp(s - m_new[:, None])
    wrong = [
        (_pack(m_new, l_old + p.sum(-1), acc_old + p @ v), HINT_NO_RESCALE),
        (_pack(m_new, l_old / alpha + p.sum(-1), acc_old / alpha[:, None] + p @ v), HINT_INVERTED),
        (_pack(m_new, alpha * l_old + p.sum(-1), acc_old + p @ v), HINT_ACC_ONLY_L),
        (_pack(m_new, l_old + p.sum(-1), alpha[:, None] * acc_old + p @ v), HINT_L_ONLY_ACC),
    ]
    # forgotten running max: m_new = rowmax(scores) only (differs when m_old is larger)
    a2 = torch.exp(m_old - tile_max)
    p2 = torch.exp(s - tile_max[:, None])
    wrong.append((_pack(tile_max, a2 * l_old + p2.sum(-1), a2[:, None] * acc_old + p2 @ v), HINT_TILE_MAX))
    p3 = torch.exp(s - torch.where(torch.isinf(m_old), m_new, m_old)[:, None])
    wrong.append((_pack(m_new, alpha * l_old + p3.sum(-1), alpha[:, None] * acc_old + p3 @ v), HINT_P_OLD_MAX))
    return wrong


def check_online_softmax_update(online_softmax_update_fn) -> CheckResult:
    """Check ``fn(m_old, l_old, acc_old, scores, values) -> (m_new, l_new, acc_new)``.

    m_old, l_old (R,), acc_old (R, Ev), scores (R, Bk) of the new block of keys, values (Bk, Ev).
    Expected: m_new = max(m_old, rowmax(scores)); l_new = exp(m_old - m_new) l_old + rowsum(exp(scores - m_new));
    acc_new = exp(m_old - m_new) acc_old + exp(scores - m_new) @ values. Tried on a first block
    (m_old = -inf), a block that raises the max, and a block below the running max.
    """
    name = "check_online_softmax_update"

    def trials():
        # the first-block case comes last: there l_old = acc_old = 0 hides most rescaling mistakes
        cases = [("higher", 4, 6, 3), ("lower", 5, 3, 4), ("mixed", 6, 8, 2), ("first", 3, 4, 5)]
        for trial, (kind, R, Bk, Ev) in enumerate(cases):
            g = fresh_generator(name, trial)
            s = torch.randn(R, Bk, generator=g, dtype=torch.float64) * 2
            v = torch.randn(Bk, Ev, generator=g, dtype=torch.float64)
            if kind == "first":
                m_old = torch.full((R,), -math.inf, dtype=torch.float64)
                l_old = torch.zeros(R, dtype=torch.float64)
                acc_old = torch.zeros(R, Ev, dtype=torch.float64)
                s[1] = -math.inf  # row 1: a fully masked block (its keys all in the future, or padding)
            else:
                offset = {"higher": -3.0, "lower": 4.0, "mixed": 0.0}[kind]
                m_old = s.amax(-1) + offset + torch.randn(R, generator=g, dtype=torch.float64)
                l_old = torch.rand(R, generator=g, dtype=torch.float64) * 3 + 1
                acc_old = torch.randn(R, Ev, generator=g, dtype=torch.float64) * l_old[:, None]
            want = online_softmax_update(m_old, l_old, acc_old, s, v)
            got = _three(call(online_softmax_update_fn, {"m_old": m_old, "l_old": l_old, "acc_old": acc_old,
                                                          "scores": s, "values": v}),
                         "online_softmax_update", s.dtype)
            _check_shapes(got, want, ("m_new", "l_new", "acc_new"))
            if kind == "first" and bool(torch.isnan(got[1][1]).any() or torch.isnan(got[2][1]).any()):
                raise Mismatch(HINT_MASKED_ROW)
            expect_close(_pack(*got), _pack(*want), what=f"(m_new, l_new, acc_new) for a {kind} block",
                         wrong_answers=_update_wrong_answers(m_old, l_old, acc_old, s, v), atol=1e-8, rtol=1e-6)
        return len(cases)

    return run_check(name, trials, shape_mistakes=SHAPE_MISTAKES)


# ----------------------------------------------------------------------------------------------
# exercise 2: merge two partial states (the rescale step on its own)
# ----------------------------------------------------------------------------------------------
def merge_states_reference(m_a, l_a, acc_a, m_b, l_b, acc_b):
    """Merge two online-softmax states computed over disjoint sets of keys.

    m = max(m_a, m_b); l = exp(m_a - m) l_a + exp(m_b - m) l_b; acc likewise. Then acc / l is the
    softmax-weighted average over the union of the keys. Shapes: m, l (R,), acc (R, Ev).
    """
    m = torch.maximum(m_a, m_b)
    a, b = torch.exp(m_a - m), torch.exp(m_b - m)
    return m, a * l_a + b * l_b, a[:, None] * acc_a + b[:, None] * acc_b


def _state(s, v):
    """(m, l, acc) of scores s (R, S) and values v (S, Ev), computed directly."""
    m = s.amax(-1)
    p = torch.exp(s - m[:, None])
    return m, p.sum(-1), p @ v


def check_merge_states(merge_states) -> CheckResult:
    """Check ``merge_states(m_a, l_a, acc_a, m_b, l_b, acc_b) -> (m, l, acc)``.

    State a covers some keys, state b the others (each: m, l (R,), acc (R, Ev)). The merged
    state must satisfy acc / l == softmax over all keys @ values.
    """
    name = "check_merge_states"

    def trials():
        cases = [(3, 4, 5, 2), (4, 7, 2, 3), (2, 1, 6, 4)]
        for trial, (R, Sa, Sb, Ev) in enumerate(cases):
            g = fresh_generator(name, trial)
            s = torch.randn(R, Sa + Sb, generator=g, dtype=torch.float64) * 3
            s[:, :Sa] += 2.0 * (trial - 1)  # the larger max sits in a, in b, or mixed
            v = torch.randn(Sa + Sb, Ev, generator=g, dtype=torch.float64)
            sa, sb = _state(s[:, :Sa], v[:Sa]), _state(s[:, Sa:], v[Sa:])
            want = merge_states_reference(*sa, *sb)
            got = _three(call(merge_states, dict(zip(("m_a", "l_a", "acc_a", "m_b", "l_b", "acc_b"), (*sa, *sb)))),
                         "merge_states", s.dtype, ("m", "l", "acc"))
            _check_shapes(got, want, ("m", "l", "acc"))
            m = torch.maximum(sa[0], sb[0])
            a, b = torch.exp(sa[0] - m), torch.exp(sb[0] - m)
            m_lo = torch.minimum(sa[0], sb[0])
            a_lo, b_lo = torch.exp(sa[0] - m_lo), torch.exp(sb[0] - m_lo)
            wrong = [
                (_pack(m, sa[1] + sb[1], sa[2] + sb[2]), HINT_NO_RESCALE.replace("l_old and acc_old", "each state's l and acc")
                 .replace("exp(m_old - m_new)", "exp(m_a - m) and exp(m_b - m)")),
                (_pack(m, sa[1] / a + sb[1] / b, sa[2] / a[:, None] + sb[2] / b[:, None]),
                 "the rescale factors are upside down: multiply by exp(m_a - m) and exp(m_b - m), each at most 1."),
                (_pack(m_lo, a_lo * sa[1] + b_lo * sb[1], a_lo[:, None] * sa[2] + b_lo[:, None] * sb[2]),
                 "use the larger of the two maxima, m = max(m_a, m_b): relative to the smaller one, exp() can overflow."),
            ]
            expect_close(_pack(*got), _pack(*want), what="the merged (m, l, acc)", wrong_answers=wrong,
                         atol=1e-8, rtol=1e-6)
            # and the point of it all: the merged state gives the exact attention output
            exact = torch.softmax(s, dim=-1) @ v
            expect_close(got[2] / got[1][:, None], exact, what="acc / l of the merged state", atol=1e-8, rtol=1e-6)
        return len(cases)

    return run_check(name, trials, shape_mistakes=SHAPE_MISTAKES)


# ----------------------------------------------------------------------------------------------
# exercise 3: causal tiles
# ----------------------------------------------------------------------------------------------
def _grid(tiles, q_len, kv_len, block_q, block_k, what):
    nq, nk = math.ceil(q_len / block_q), math.ceil(kv_len / block_k)
    grid = torch.zeros(nq, nk, dtype=torch.bool)
    try:
        pairs = [tuple(int(x) for x in t) for t in tiles]
    except Exception:
        raise Mismatch(f"{what}: return a list of (query_block, key_block) pairs of ints.") from None
    for pair in pairs:
        if len(pair) != 2:
            raise Mismatch(f"{what}: each tile must be a pair (query_block, key_block), got {pair!r}.")
        i, j = pair
        if not (0 <= i < nq and 0 <= j < nk):
            raise Mismatch(f"{what}: tile {pair} is outside the {nq} x {nk} grid of blocks.")
        if grid[i, j]:
            raise Mismatch(f"{what}: tile {pair} appears twice.")
        grid[i, j] = True
    return grid


def _all_tiles(q_len, kv_len, bq, bk):
    return [(i, j) for i in range(math.ceil(q_len / bq)) for j in range(math.ceil(kv_len / bk))]


def _strictly_below(q_len, kv_len, bq, bk):  # only tiles with every key <= every row (forgets diagonal tiles)
    return [(i, j) for i, j in _all_tiles(q_len, kv_len, bq, bk) if min((j + 1) * bk, kv_len) - 1 <= i * bq]


def _bottom_right(q_len, kv_len, bq, bk):  # row r sees keys c <= r + (kv_len - q_len)
    shift = kv_len - q_len
    return [(i, j) for i, j in _all_tiles(q_len, kv_len, bq, bk) if j * bk <= min((i + 1) * bq, q_len) - 1 + shift]


def _unclamped(q_len, kv_len, bq, bk):  # forgets that the last query block is shorter
    return [(i, j) for i, j in _all_tiles(q_len, kv_len, bq, bk) if j * bk <= (i + 1) * bq - 1]


def check_causal_tiles(causal_tiles_fn) -> CheckResult:
    """Check ``causal_tiles(q_len, kv_len, block_q, block_k) -> list of (i, j)``.

    Tile (i, j) = query rows [i*block_q, (i+1)*block_q) x keys [j*block_k, (j+1)*block_k), cut at
    q_len and kv_len. Causal attention, top-left aligned as in torch (row r sees keys c <= r),
    needs every tile holding at least one allowed (row, key) pair; the others are skipped.
    """
    name = "check_causal_tiles"
    cases = [(8, 8, 4, 4), (10, 10, 4, 4), (7, 12, 4, 2), (12, 7, 2, 4), (10, 16, 8, 4), (5, 5, 8, 8), (13, 6, 4, 4)]

    def trials():
        for q_len, kv_len, bq, bk in cases:
            what = f"the tiles for q_len={q_len}, kv_len={kv_len}, block_q={bq}, block_k={bk}"
            want = _grid(causal_tiles(q_len, kv_len, bq, bk), q_len, kv_len, bq, bk, what)
            got = _grid(call(causal_tiles_fn, {"q_len": q_len, "kv_len": kv_len, "block_q": bq, "block_k": bk}),
                        q_len, kv_len, bq, bk, what)
            wrong = [
                (_grid(_all_tiles(q_len, kv_len, bq, bk), q_len, kv_len, bq, bk, what),
                 "these are all the tiles: the ones entirely above the diagonal (every key after every row) can be skipped."),
                (_grid(_strictly_below(q_len, kv_len, bq, bk), q_len, kv_len, bq, bk, what),
                 "tiles that cross the diagonal are missing: they hold some allowed pairs, so they are computed (with a mask)."),
                (_grid(_bottom_right(q_len, kv_len, bq, bk), q_len, kv_len, bq, bk, what),
                 "this is the bottom-right alignment; torch's is_causal (and ours) is top-left: row r sees keys 0..r."),
                (_grid(_unclamped(q_len, kv_len, bq, bk), q_len, kv_len, bq, bk, what),
                 "the last query block may be shorter than block_q: its last row is q_len - 1, not (i+1)*block_q - 1."),
            ]
            if torch.equal(got, want):
                continue
            for grid, hint in wrong:
                if torch.equal(got, grid):
                    raise Mismatch(f"{what}: {hint}")
            missing = [tuple(x) for x in (want & ~got).nonzero().tolist()]
            extra = [tuple(x) for x in (got & ~want).nonzero().tolist()]
            raise Mismatch(f"{what}: missing tiles {missing}, tiles that can be skipped {extra}.")
        return len(cases)

    return run_check(name, trials)
