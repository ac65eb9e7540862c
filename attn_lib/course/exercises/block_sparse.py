"""Exercise checks for notebook 13 (sparse and compressed attention): the pieces that decide what a query reads.

- :func:`check_moba_block_choice`: MoBA's routing, the blocks each query reads (its own, the best earlier ones).
- :func:`check_nsa_combine`: NSA's gated sum of its three branches (independent sigmoid gates).
- :func:`check_nsa_keys_read`: the keys (and compressed entries) one NSA query reads at a context length.

Each check compares with :mod:`attn_lib.block_sparse` (proven equal to float64 references written from the papers
in tests/test_block_sparse.py) on fresh inputs and names the typical mistake it recognises.
"""

from __future__ import annotations

from types import SimpleNamespace

import torch

import attn_lib.block_sparse
from attn_lib.course.exercises._core import CheckResult, Mismatch, call, expect_close, fresh_generator, run_check

# attn_lib's own functions, held in a namespace: when the course runs on the learner's stack (ATTN_MINE), the
# learner's moba_block_choice replaces attn_lib's module-level references, never these, so the checks still compare
# with attn_lib.
_lib = SimpleNamespace(moba_block_choice=attn_lib.block_sparse.moba_block_choice,
                       keys_read_per_query=attn_lib.block_sparse.keys_read_per_query)

__all__ = ["check_moba_block_choice", "check_nsa_combine", "check_nsa_keys_read"]

HINT_NOT_FORCED = ("each query must read its OWN block (the one holding its position, causally masked), whatever its "
                   "gate score: give that block the score +inf before the top-k.")
HINT_FUTURE = ("a query routed to a block AFTER its own: give the later blocks the score -inf before the top-k "
               "(MoBA's causality rule), and keep only the chosen blocks whose score is not -inf.")
HINT_K_PLUS_ONE = "topk counts the query's own block: it reads topk blocks in all, its own and topk - 1 earlier ones."
HINT_SOFTMAX_GATES = ("NSA's gates are three independent sigmoids (each in [0, 1], they need not sum to 1), not a "
                      "softmax over the branches.")
HINT_NO_SIGMOID = "the gate logits go through a sigmoid first: g = sigmoid(logit), in [0, 1]."
HINT_NO_WINDOW = "you left out the sliding window: every query also reads its last `window` keys."
HINT_ALL_STRIDES = ("a compressed entry needs a COMPLETE block of block_len keys: there are (S - block_len) // stride "
                    "+ 1 of them (0 while S < block_len), not S // stride.")


def _moba_wrong(query, key, block_size, topk):
    """Three typical mistakes of MoBA's routing, computed: own block not forced, future allowed, k + 1 blocks."""
    B, H, L, E = query.shape
    S = key.shape[-2]
    n = -(-S // block_size)
    pad = torch.nn.functional.pad(key, (0, 0, 0, n * block_size - S)).view(B, H, n, block_size, E)
    counts = torch.full((n,), float(block_size), dtype=key.dtype)
    counts[-1] = S - (n - 1) * block_size
    gate = query @ (pad.sum(-2) / counts[:, None]).transpose(-1, -2)
    own = torch.arange(S - L, S) // block_size
    j = torch.arange(n)
    future = j > own[:, None]

    def top(scores, k):
        t = scores.topk(min(k, n), dim=-1)
        return torch.zeros_like(scores, dtype=torch.bool).scatter(-1, t.indices, t.values > float("-inf"))

    not_forced = top(gate.masked_fill(future, float("-inf")), topk)
    with_future = top(gate.masked_fill(j == own[:, None], float("inf")), topk)
    return [(not_forced, HINT_NOT_FORCED), (with_future, HINT_FUTURE),
            (_lib.moba_block_choice(query, key, block_size=block_size, topk=topk + 1), HINT_K_PLUS_ONE)]


def check_moba_block_choice(moba_block_choice_fn, *, name: str = "check_moba_block_choice",
                            keywords: bool = False) -> CheckResult:
    """Check ``moba_block_choice(query, key, block_size, topk)``: query (B, H, L, E), the last L of the S positions
    of key (B, H, S, E), float64 -> bool (B, H, L, ceil(S / block_size)), the blocks each query reads, against
    :func:`attn_lib.block_sparse.moba_block_choice` (Lu et al. 2025, MoBA, §2.2). ``keywords``: pass block_size
    and topk by keyword (attn_lib's signature, the learner's ``my_attn.block_sparse`` piece)."""
    fn = moba_block_choice_fn
    if keywords:
        def fn(query, key, block_size, topk):
            return moba_block_choice_fn(query, key, block_size=block_size, topk=topk)
    cases = [(1, 2, 9, 9, 3, 2), (2, 1, 3, 14, 4, 3), (1, 3, 12, 12, 2, 1), (1, 1, 1, 17, 4, 8)]

    def trials():
        for trial, (B, H, L, S, bs, k) in enumerate(cases):
            g = fresh_generator(name, trial)
            q = torch.randn(B, H, L, 4, generator=g, dtype=torch.float64)
            kk = torch.randn(B, H, S, 4, generator=g, dtype=torch.float64)
            want = _lib.moba_block_choice(q, kk, block_size=bs, topk=k)
            got = call(fn, {"query": q, "key": kk, "block_size": bs, "topk": k})
            expect_close(got, want, what=f"the blocks chosen for {L} queries over {S} keys, blocks of {bs}, top-{k}",
                         wrong_answers=_moba_wrong(q, kk, bs, k))
        return len(cases)

    return run_check(name, trials)


def check_nsa_combine(nsa_combine_fn) -> CheckResult:
    """Check ``nsa_combine(o_cmp, o_slc, o_win, gate_logits)``: three branch outputs (B, H, L, E) and the gate logits
    (B, H, L, 3) float64 -> Σ_c sigmoid(logit_c) · o_c, (B, H, L, E) (Yuan et al. 2025, NSA, eq. 5)."""
    name = "check_nsa_combine"
    cases = [(1, 2, 5, 4), (2, 1, 3, 8), (1, 4, 1, 2)]

    def trials():
        for trial, shape in enumerate(cases):
            g = fresh_generator(name, trial)
            outs = [torch.randn(*shape, generator=g, dtype=torch.float64) for _ in range(3)]
            logits = torch.randn(*shape[:-1], 3, generator=g, dtype=torch.float64) * 2
            stack = torch.stack(outs, -1)  # (B, H, L, E, 3)
            want = (stack * torch.sigmoid(logits)[..., None, :]).sum(-1)
            wrong = [((stack * torch.softmax(logits, -1)[..., None, :]).sum(-1), HINT_SOFTMAX_GATES),
                     ((stack * logits[..., None, :]).sum(-1), HINT_NO_SIGMOID)]
            got = call(nsa_combine_fn, {"o_cmp": outs[0], "o_slc": outs[1], "o_win": outs[2], "gate_logits": logits})
            expect_close(got, want, what=f"the gated sum of three {shape} outputs", wrong_answers=wrong, atol=1e-10,
                         rtol=0)
        return len(cases)

    return run_check(name, trials)


def check_nsa_keys_read(nsa_keys_read_fn) -> CheckResult:
    """Check ``nsa_keys_read(seq_len, block_len, stride, select_size, num_select, window)`` -> int: compressed
    entries + selected keys + window keys one NSA query reads at position seq_len - 1, overlaps counted twice, against
    :func:`attn_lib.block_sparse.keys_read_per_query` ("nsa")."""
    name = "check_nsa_keys_read"
    cases = [(1 << 20, 32, 16, 64, 16, 512), (100, 32, 16, 64, 16, 512), (20, 32, 16, 64, 16, 8),
             (4096, 8, 4, 8, 4, 64), (7, 4, 2, 4, 3, 5)]

    def trials():
        for S, l, d, ls, n, w in cases:
            want = _lib.keys_read_per_query("nsa", S, block_len=l, stride=d, select_size=ls, num_select=n, window=w)
            got = call(nsa_keys_read_fn, {"seq_len": S, "block_len": l, "stride": d, "select_size": ls,
                                          "num_select": n, "window": w})
            try:
                got = int(got)
            except Exception:
                raise Mismatch(f"return an int, got {type(got).__name__}") from None
            cmp = max(0, (S - l) // d + 1)
            wrong = {want - min(S, w): HINT_NO_WINDOW, S // d + min(S, n * ls) + min(S, w): HINT_ALL_STRIDES}
            if got != want:
                hint = wrong.get(got, "count the three branches: complete compressed blocks, num_select blocks of "
                                      "select_size keys (at most S), and the window (at most S).")
                raise Mismatch(f"{hint} (seq_len {S}, block_len {l}, stride {d}, select_size {ls}, num_select {n}, "
                               f"window {w}: expected {want} = {cmp} + {min(S, n * ls)} + {min(S, w)}, got {got})")
        return len(cases)

    return run_check(name, trials)
