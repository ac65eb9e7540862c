"""Exercise checks for notebook 14 (attention at scale): the pieces of a serving and a context-parallel stack.

- :func:`check_block_lookup`: where a token lives in a paged KV cache (its block table, block and offset).
- :func:`check_merge_two`: merge two partial attention results by their log-sum-exps (split-KV, ring attention).
- :func:`check_verify_mask`: the mask of speculative decoding's verify forward (causal, bottom-right).
- :func:`check_ring_step`: one step of ring attention (attend to the block just received, merge).

Each check compares with :mod:`attn_lib.paged`, :mod:`attn_lib.tiled`, :mod:`attn_lib.speculative` and
:mod:`attn_lib.ring` (proven equal to torch's attention in tests/test_paged.py, test_speculative.py, test_ring.py)
on fresh inputs and names the typical mistake it recognises.
"""

from __future__ import annotations

import math

import torch

from attn_lib.course.exercises._core import (CheckResult, Mismatch, as_pair, call, expect_close, fresh_generator,
                                      run_check)
from attn_lib.paged import block_lookup
from attn_lib.ring import ring_step, shard_positions
from attn_lib.speculative import verify_mask
from attn_lib.tiled import merge_partials, tiled_attention

__all__ = ["check_block_lookup", "check_merge_two", "check_verify_mask", "check_ring_step"]

HINT_NO_TABLE = ("you returned the LOGICAL block position // block_size; the token lives in the PHYSICAL block the "
                 "table names: block_table[position // block_size].")
HINT_SWAPPED = "block and offset are swapped: the block is block_table[position // block_size], the offset position % block_size."
HINT_MOD_INDEX = ("the table is indexed by position // block_size (which block of the sequence), not by position % "
                  "block_size.")
HINT_AVERAGE = ("a plain average ignores how much of the softmax each part holds: weigh each output by "
                "exp(lse_i - lse), with lse = log(exp(lse_a) + exp(lse_b)).")
HINT_LSE_MAX = ("the merged lse is log(exp(lse_a) + exp(lse_b)) (torch.logaddexp), not the larger of the two: the "
                "smaller part's keys add to the denominator too.")
HINT_LSE_SUM = "lse_a + lse_b multiplies the two denominators; they add: lse = log(exp(lse_a) + exp(lse_b)) (torch.logaddexp)."
HINT_UNNORMALISED = ("the weights must sum to 1: divide exp(lse_a) and exp(lse_b) by their sum, i.e. weigh by "
                     "exp(lse_a - lse) and exp(lse_b - lse).")
HINT_NAN = ("a row that saw no key in either part (lse -inf in both) must give output 0 and lse -inf, not NaN: "
            "exp(-inf - (-inf)) is NaN; subtract 0 where lse is -inf (torch.where).")
HINT_TOP_LEFT = ("this is the top-left causal mask (torch's is_causal): new token i would see only keys 0..i. The new "
                 "tokens are the LAST num_new of the cached + num_new keys: token i sees keys 0..cached + i "
                 "(bottom-right).")
HINT_SQUARE = ("the mask has one column per key: the cached tokens AND the new ones, (num_new, cached + num_new); "
               "the new tokens see every cached key.")
HINT_STRICT = "each new token also sees itself: key cached + i is visible to new token i (<=, not <)."
HINT_NO_CAUSAL = ("the block was attended without the causal mask: a query at position i may see the key at "
                  "position j only if j <= i (compare q_pos and k_pos).")
HINT_NO_MERGE = ("the running result was replaced by this block's attention; merge them: weigh each by exp(lse_i - "
                 "lse) with lse = logaddexp(lse, lse_block).")
HINT_FUTURE_BLOCK = ("a block whose keys are all after every query must leave (out, lse) unchanged (nothing is "
                     "visible; attention over no key would be NaN): skip it, or give it lse -inf.")


def _pair(result, what, names):
    a, b = as_pair(result, what, names)
    try:
        return torch.as_tensor(a), torch.as_tensor(b)
    except Exception:
        raise Mismatch(f"{what}: return two tensors ({names[0]}, {names[1]}).") from None


# ----------------------------------------------------------------------------------------------
# exercise 1: block-table lookup
# ----------------------------------------------------------------------------------------------
def check_block_lookup(block_lookup_fn) -> CheckResult:
    """Check ``block_lookup(block_table, position, block_size) -> (block, offset)`` (two ints)."""
    name = "check_block_lookup"

    def trials():
        count = 0
        for trial, (n_blocks, P) in enumerate([(5, 4), (3, 16), (6, 1), (4, 3)]):
            g = fresh_generator(name, trial)
            table = (torch.randperm(40, generator=g)[:n_blocks] + 1).tolist()  # physical blocks, shuffled
            for pos in sorted({0, P - 1, P, n_blocks * P - 1, int(torch.randint(0, n_blocks * P, (1,), generator=g))}):
                if pos >= n_blocks * P:
                    continue
                want = block_lookup(table, pos, P)
                got = call(block_lookup_fn, {"block_table": table, "position": pos, "block_size": P})
                got = as_pair(got, f"block_lookup({table}, {pos}, {P})", ("block", "offset"))
                try:
                    got = (int(got[0]), int(got[1]))
                except Exception:
                    raise Mismatch("return two ints (block, offset).") from None
                wrong = [((pos // P, pos % P), HINT_NO_TABLE), ((pos % P, table[pos // P]), HINT_SWAPPED)]
                if pos % P < n_blocks:
                    wrong.append(((table[pos % P], pos // P), HINT_MOD_INDEX))
                if got != want:
                    for w, hint in wrong:
                        if got == w:
                            raise Mismatch(f"{hint} (block_table {table}, position {pos}, block_size {P}: expected "
                                           f"{want}, got {got})")
                    raise Mismatch(f"block_lookup({table}, {pos}, {P}) returned {got}; expected {want}.")
                count += 1
        return count

    return run_check(name, trials)


# ----------------------------------------------------------------------------------------------
# exercise 2: merge two partial results
# ----------------------------------------------------------------------------------------------
def check_merge_two(merge_fn) -> CheckResult:
    """Check ``merge_two(out_a, lse_a, out_b, lse_b) -> (out, lse)``.

    out_a, out_b (..., L, Ev): attention over two disjoint sets of keys; lse_a, lse_b (..., L) their log-sum-exps.
    The result must be attention over the union: lse = logaddexp(lse_a, lse_b), out = exp(lse_a - lse) out_a +
    exp(lse_b - lse) out_b. Tried with large logits (no overflow allowed) and rows that saw no key.
    """
    name = "check_merge_two"

    def trials():
        cases = [(2, 4, 3, 5, 1.0), (3, 6, 2, 4, 30.0), (1, 5, 5, 3, 1.0)]
        for trial, (H, L, Sa, Sb, spread) in enumerate(cases):
            g = fresh_generator(name, trial)
            s = torch.randn(H, L, Sa + Sb, generator=g, dtype=torch.float64) * spread
            v = torch.randn(H, Sa + Sb, 3, generator=g, dtype=torch.float64)
            visible = torch.ones(H, L, Sa + Sb, dtype=torch.bool)
            if trial == 2:
                visible[:, 0] = False  # a row that sees no key at all
            parts = []
            for sl in (slice(0, Sa), slice(Sa, Sa + Sb)):
                logits = s[..., sl].masked_fill(~visible[..., sl], -math.inf)
                lse = torch.logsumexp(logits, -1)
                w = torch.exp(logits - torch.where(lse == -math.inf, 0.0, lse)[..., None])
                parts.append((w @ v[:, sl], lse))
            (oa, la), (ob, lb) = parts
            want = merge_partials([oa, ob], [la, lb])
            got = _pair(call(merge_fn, {"out_a": oa, "lse_a": la, "out_b": ob, "lse_b": lb}), "merge_two",
                        ("out", "lse"))
            if trial == 2 and bool(torch.isnan(got[0]).any() | torch.isnan(got[1]).any()):
                raise Mismatch(HINT_NAN)
            lse_max = torch.maximum(la, lb)
            expect_close(got[1], want[1], what="the merged lse", atol=1e-9, rtol=1e-9,
                         wrong_answers=[(lse_max, HINT_LSE_MAX), (la + lb, HINT_LSE_SUM)])
            expect_close(got[0], want[0], what="the merged output", atol=1e-9, rtol=1e-9,
                         wrong_answers=[((oa + ob) / 2, HINT_AVERAGE),
                                        (torch.exp(la)[..., None] * oa + torch.exp(lb)[..., None] * ob,
                                         HINT_UNNORMALISED)])
            exact = torch.softmax(s.masked_fill(~visible, -math.inf), -1) @ v
            rows = visible.any(-1)
            expect_close(got[0][rows], exact[rows], what="the merged output against attention over all keys",
                         atol=1e-9, rtol=1e-9)
        return len(cases)

    return run_check(name, trials)


# ----------------------------------------------------------------------------------------------
# exercise 3: the verify mask
# ----------------------------------------------------------------------------------------------
def check_verify_mask(verify_mask_fn) -> CheckResult:
    """Check ``verify_mask(cached, num_new) -> (num_new, cached + num_new)`` bool, True = may attend."""
    name = "check_verify_mask"

    def trials():
        cases = [(5, 3), (0, 4), (2, 1), (7, 5)]
        for cached, k in cases:
            want = verify_mask(cached, k)
            got = call(verify_mask_fn, {"cached": cached, "num_new": k})
            try:
                got = torch.as_tensor(got)
            except Exception:
                raise Mismatch("return a bool tensor (num_new, cached + num_new).") from None
            top_left = torch.ones(k, cached + k, dtype=torch.bool).tril()
            square = torch.ones(k, k, dtype=torch.bool).tril()
            strict = want & ~torch.eye(k, cached + k, dtype=torch.bool).roll(cached, dims=1)
            wrong = [(square, HINT_SQUARE), (strict, HINT_STRICT)]
            if cached:
                wrong.insert(0, (top_left, HINT_TOP_LEFT))
            expect_close(got, want, what=f"verify_mask({cached}, {k})", wrong_answers=wrong)
        return len(cases)

    return run_check(name, trials)


# ----------------------------------------------------------------------------------------------
# exercise 4: one ring step
# ----------------------------------------------------------------------------------------------
def check_ring_step(ring_step_fn) -> CheckResult:
    """Check ``ring_step(query, key, value, out, lse, q_pos, k_pos) -> (out, lse)``, causal over positions.

    query (B, H, L, E) at positions q_pos (L,); key, value (B, H, Lk, E/Ev) at k_pos (Lk,); out (B, H, L, Ev) and
    lse (B, H, L) the running result. Tried on a zig-zag shard with blocks before, across and after its queries.
    """
    name = "check_ring_step"

    def trials():
        count = 0
        for trial, (S, W, r) in enumerate([(12, 3, 0), (11, 2, 1)]):
            g = fresh_generator(name, trial)
            q, k, v = (torch.randn(1, 2, S, 4, generator=g, dtype=torch.float64) for _ in range(3))
            pos = [shard_positions(S, W, i, "contiguous") for i in range(W)]
            mine = pos[r]
            out = torch.zeros(1, 2, len(mine), 4, dtype=torch.float64)
            lse = torch.full((1, 2, len(mine)), -math.inf, dtype=torch.float64)
            for src in [(r - s) % W for s in range(W)]:
                kp = pos[src]
                args = {"query": q[:, :, mine], "key": k[:, :, kp], "value": v[:, :, kp], "out": out, "lse": lse,
                        "q_pos": mine, "k_pos": kp}
                want = ring_step(*[args[n] for n in ("query", "key", "value", "out", "lse")], q_pos=mine, k_pos=kp)
                got = call(ring_step_fn, args)
                if all(bool((kp > p).all()) for p in mine) and type(got) in (tuple, list) and len(got) == 2:
                    g0 = torch.as_tensor(got[0])
                    if bool(torch.isnan(g0).any()):
                        raise Mismatch(HINT_FUTURE_BLOCK)
                got = _pair(got, "ring_step", ("out", "lse"))
                no_mask = ring_step(args["query"], args["key"], args["value"], out, lse, q_pos=mine, k_pos=kp,
                                    is_causal=False)
                wrong = [(no_mask[0], HINT_NO_CAUSAL)]
                visible = kp[None, :] <= mine[:, None]
                if bool(visible.any(-1).all()):
                    alone = tiled_attention(args["query"], args["key"], args["value"], attn_mask=visible)
                    if count:  # replacing only differs from merging after the first block
                        wrong.append((alone, HINT_NO_MERGE))
                expect_close(got[0], want[0], what=f"out after the block of positions {kp.tolist()}", atol=1e-9,
                             rtol=1e-9, wrong_answers=wrong)
                expect_close(got[1], want[1], what=f"lse after the block of positions {kp.tolist()}", atol=1e-9,
                             rtol=1e-9, wrong_answers=[(no_mask[1], HINT_NO_CAUSAL)])
                out, lse = want
                count += 1
        exact = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)[:, :, mine]
        expect_close(out, exact, what="the result after the whole ring", atol=1e-9, rtol=1e-9)
        return count

    return run_check(name, trials)
