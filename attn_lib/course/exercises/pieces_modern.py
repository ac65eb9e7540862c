"""The checks of the learner's pieces of notebooks 11 and 12 (issue 34): soft-capping, a softmax with a sink, the
sliding-window mask, the ring-buffer cache, top-k selection, MLA's absorbed attention, chunked (decayed) linear
attention, the FFT long convolution and one step of the gated delta rule.

Each ``check_piece_*`` takes the learner's object and returns a :class:`CheckResult`, comparing it with attn_lib's
own (itself proven equal to transformers in tests/) on fresh float64 inputs, with a hint for each typical mistake.
Where attn_lib has the piece only inside a class (the sink inside ``VariantAttention.attend``, the selection in
``LightningIndexer``, the absorbed path in ``MultiHeadLatentAttention.forward``), the piece is a function of the
learner's package that replaces nothing (``replaces=False``) and the reference is attn_lib's code for that step.
"""

from __future__ import annotations

import sys
from contextlib import contextmanager
from types import SimpleNamespace

import torch
from torch.overrides import TorchFunctionMode

import attn_lib.attention
import attn_lib.deltanet
import attn_lib.linear
import attn_lib.masks
import attn_lib.variants
import attn_lib.windows
from attn_lib._checks import check_callable
from attn_lib.course.exercises._core import CheckResult, Mismatch, call, expect_close, fresh_generator, run_check
from attn_lib.course.exercises._core import is_instance
from attn_lib.course.exercises.pieces import Piece
from attn_lib.course.exercises.pieces_fast import _Guard, _sandbox_watch_torch, _watched_remotely
from attn_lib.mla import MultiHeadLatentAttention
from attn_lib.sparse import LightningIndexer
from attn_lib.variants import VariantAttention

# attn_lib's own objects, the references, held in a namespace: ``use_mine`` swaps module-level references to a
# piece, never these, so a check run while the course runs on the learner's stack still compares with attn_lib.
_lib = SimpleNamespace(
    sdpa=attn_lib.attention.scaled_dot_product_attention, causal_mask=attn_lib.masks.causal_mask,
    softcap=attn_lib.variants.softcap, window_mask=attn_lib.windows.sliding_window_mask,
    streaming_mask=attn_lib.windows.streaming_mask, window_mask_from_positions=attn_lib.windows.window_mask_from_positions,
    Ring=attn_lib.windows.RingKVCache, decayed=attn_lib.linear.decayed_attention,
    linear_attention=attn_lib.linear.linear_attention, ssd=attn_lib.linear.ssd,
    delta_step=attn_lib.deltanet.delta_rule_step, gated_delta_rule=attn_lib.deltanet.gated_delta_rule,
    fft_conv=attn_lib.linear.fft_long_conv, direct_conv=attn_lib.linear.direct_long_conv)

__all__ = ["PIECES", "check_piece_softcap", "check_piece_softmax_with_sink", "check_piece_sliding_window_mask",
           "check_piece_ring_kv_cache", "check_piece_select_topk", "check_piece_absorbed_attention",
           "check_piece_decayed_attention", "check_piece_fft_long_conv", "check_piece_delta_rule_step"]


def _randn(g, *shape, dtype=torch.float64):
    return torch.randn(*shape, generator=g, dtype=dtype)


@contextmanager
def _refusing(*functions, what: str):
    """Fail the check when the code run under it calls one of attn_lib's ``functions`` (the piece itself): a
    profile hook compares each Python call's code object, so an import under another name is caught too."""
    codes = {f.__code__ for f in functions}
    used = []
    previous = sys.getprofile()

    def hook(frame, event, arg):
        if event == "call" and frame.f_code in codes and frame.f_code.co_name not in used:
            used.append(frame.f_code.co_name)
        if previous is not None:
            previous(frame, event, arg)

    sys.setprofile(hook)
    try:
        yield
    finally:
        sys.setprofile(previous)
    if used:
        raise Mismatch(f"your {what} called attn_lib's {', '.join(used)}: the piece is the one you write, so "
                       "compute it yourself.")


# ----------------------------------------------------------------------------------------------------- 11
def check_piece_softcap(fn) -> CheckResult:
    """my_attn.variants.softcap against attn_lib's: cap · tanh(scores / cap), small and huge scores, several caps.

    Inputs: float64 scores of shapes (3, 5), (2, 4, 6, 6) and (7,). Raises: nothing; a wrong answer is a failed
    CheckResult with a hint (the division inside tanh, the factor outside, a hard clamp).
    Source: Gemma 2 report (logit soft-capping); attn_lib.variants.softcap.
    """
    def trials():
        for t, (shape, cap, spread) in enumerate((((3, 5), 50.0, 30.0), ((2, 4, 6, 6), 2.0, 4.0), ((7,), 30.0, 500.0))):
            s = _randn(fresh_generator("softcap", t), *shape) * spread
            want = _lib.softcap(s, cap)
            with _refusing(_lib.softcap, what="softcap"):
                got = call(lambda s_, c_: fn(s_, c_), {"scores": s, "cap": cap})
            expect_close(got, want, what=f"softcap of a {shape} tensor with cap={cap:g}", atol=1e-10, rtol=1e-8,
                         dtype=torch.float64, wrong_answers=[
                             (torch.tanh(s), "divide by the cap inside the tanh and multiply by it outside: "
                                             "cap · tanh(scores / cap), so small scores pass unchanged."),
                             (torch.tanh(s / cap), "you forgot the factor cap outside: tanh alone is bounded by ±1, "
                                                   "the capped scores by ±cap."),
                             (cap * torch.tanh(s), "the scores must be divided by the cap inside the tanh: "
                                                   "cap · tanh(scores / cap)."),
                             (s.clamp(-cap, cap), "a hard clamp is not soft-capping: it has no gradient beyond the "
                                                  "cap. Use cap · tanh(scores / cap), smooth everywhere.")])
        return 3

    return run_check("softcap", trials)


def _sink_reference(scores, sinks):
    """attn_lib's rule (VariantAttention.attend): the head's sink logit is one more column of the softmax, dropped."""
    column = sinks.to(scores.dtype)[:, None, None].expand(*scores.shape[:-1], 1)
    return torch.softmax(torch.cat([scores, column], -1), -1)[..., :-1]


def check_piece_softmax_with_sink(fn) -> CheckResult:
    """my_attn.variants.softmax_with_sink: gpt-oss's softmax with one learned sink logit per head.

    The reference is attn_lib's rule in ``VariantAttention.attend``: the sink is an extra column of the softmax that
    takes weight and gives back nothing. Scores (B, H, L, S) float64 with -inf (masked) entries and scores near 1000
    (overflow), sinks (H,). Raises: nothing; a wrong answer is a failed CheckResult with a hint.
    Source: gpt-oss model card, section 2.1; transformers' ``GptOssAttention`` (``eager_attention_forward``).
    """
    def trials():
        for t, (B, H, L, S, big) in enumerate(((2, 3, 4, 5, False), (1, 2, 3, 3, True), (1, 4, 2, 6, False))):
            g = fresh_generator("softmax_with_sink", t)
            s = _randn(g, B, H, L, S) * (300.0 if big else 2.0) + (1000.0 if big else 0.0)
            sinks = _randn(g, H) * (300.0 if big else 2.0) + (1000.0 if big else 0.0)
            if t == 0:
                s[0, 0, 1, 2:] = -torch.inf
            if t == 2:
                s[0, 1, 0, :] = -torch.inf  # a row whose keys are all masked: all its weight goes to the sink
            want = _sink_reference(s, sinks)
            with _refusing(VariantAttention.attend, what="softmax with a sink"):
                got = call(lambda s_, k_: fn(s_, k_), {"scores": s, "sinks": sinks})
            if big and not bool(torch.isfinite(torch.as_tensor(got)).all()):
                raise Mismatch("scores and sinks near 1000 gave NaN or inf: subtract the maximum of each row, the "
                               "sink included, before exp.")
            expect_close(got, want, what=f"the weights of case {t + 1}, scores {(B, H, L, S)}", atol=1e-10, rtol=1e-8,
                         dtype=torch.float64, wrong_answers=[
                             (torch.softmax(s, -1), "the weights sum to 1: the sink is missing. Add exp(sink) of the "
                                                    "query's head to the denominator (and nothing to the output)."),
                             (torch.softmax(torch.cat([s, sinks[:, None, None].expand(B, H, L, 1)], -1), -1)[..., 1:],
                              "you dropped the first column: the sink is the extra LAST column here; return the "
                              "weights of the S keys."),
                             (_sink_reference(s, sinks.flip(0)), "the sinks go to the wrong heads: sinks[h] belongs "
                                                                 "to head h, dim 1 of the scores.")])
        return 3

    return run_check("softmax_with_sink", trials)


def check_piece_sliding_window_mask(fn) -> CheckResult:
    """my_attn.windows.sliding_window_mask against attn_lib's: square, fewer queries than keys, windows 1 to S.

    Raises: nothing; a wrong answer is a failed CheckResult with a hint (off by one, alignment, convention).
    Source: transformers' ``sliding_window`` convention; attn_lib.windows.sliding_window_mask.
    """
    def trials():
        cases = [(6, None, 3), (3, 8, 4), (1, 9, 2), (5, 5, 1), (4, 7, 10)]
        for L, S, w in cases:
            want = _lib.window_mask(L, S, window=w)
            with _refusing(_lib.window_mask, _lib.streaming_mask, _lib.window_mask_from_positions, what="window mask"):
                got = call(lambda L_, S_: fn(L_, S_, window=w), {"q_len": L, "kv_len": S})
            S_ = L if S is None else S
            extra = _lib.window_mask(L, S, window=w + 1)
            top_left = _lib.causal_mask(L, S_) & ~torch.ones(L, S_, dtype=torch.bool).tril(-w)
            wrong = [(~want, "True and False are swapped: True means 'may attend'."),
                     (_lib.causal_mask(L, S, align="bottom_right"), "that is the causal mask: drop the keys that "
                                                                    f"fell out of the window (i' - j >= window).")]
            if w > 1:
                wrong.append((_lib.window_mask(L, S, window=w - 1), "off by one: a query sees `window` keys, ITSELF "
                                                                    "included (0 <= i' - j < window)."))
            wrong.append((extra, "off by one: a query sees `window` keys in all, itself included, not window + 1."))
            if S_ != L:
                wrong.append((top_left, "the queries are the LAST L of the S positions (bottom-right): query i sits "
                                        "at position i' = i + S - L."))
            expect_close(got, want, what=f"sliding_window_mask({L}, {S}, window={w})", wrong_answers=wrong)
        return len(cases)

    return run_check("sliding_window_mask", trials)


def check_piece_ring_kv_cache(cls) -> CheckResult:
    """my_attn.windows.RingKVCache against attn_lib's: chunks of 3, 1, 1, 5, 1, 1 tokens through a window of 4,
    then a reset; each ``update``'s (keys, values, positions), ``seq_len``, ``positions`` and ``nbytes``.

    Keys (1, 2, S_new, 3) and values (1, 2, S_new, 5) float64. Raises: nothing; a wrong answer is a failed
    CheckResult with a hint. Source: transformers' sliding-window cache layer; attn_lib.windows.RingKVCache.
    """
    def trials():
        if not is_instance(cls, type):
            raise Mismatch("RingKVCache must be a class: RingKVCache(window) makes an empty cache.")
        g = fresh_generator("RingKVCache", 0)
        window = 4
        ref = _lib.Ring(window)
        mine = call(lambda w: cls(w), {"window": window})
        for rnd in range(2):
            for step, n in enumerate((3, 1, 1, 5, 1, 1)):
                k, v = _randn(g, 1, 2, n, 3), _randn(g, 1, 2, n, 5)
                want = ref.update(k, v)
                with _refusing(_lib.Ring.update, what="ring cache"):
                    got = call(lambda k_, v_: mine.update(k_, v_), {"key": k, "value": v})
                if not isinstance(got, (tuple, list)) or len(got) != 3:
                    raise Mismatch("update must return (keys, values, positions): the slots before this chunk "
                                   "followed by the chunk, and the position of each.")
                where = f"update {step + 1} (a chunk of {n} after {ref.seq_len - n} tokens, window {window})"
                pos = torch.as_tensor(got[2])
                empty = bool((want[2][:window] < 0).any())
                if pos.shape == want[2].shape and empty and bool((pos[:window] >= 0).all()):
                    raise Mismatch(f"{where}: an empty slot must have position -1 (then the mask never attends it).")
                stored_first = torch.cat([ref.positions, want[2][window:]])  # the slots AFTER storing the chunk
                expect_close(pos, want[2], what=f"the positions of {where}", wrong_answers=[
                    (stored_first, "update returns the slots as they were BEFORE this chunk, then the chunk: attend "
                                   "first, then store (else a token of the chunk is attended twice)."),
                    (torch.cat([want[2][:window].sort().values, want[2][window:]]),
                     "position p lives in slot p % window: the slots are not kept in order (no shifting).")])
                expect_close(got[0], want[0], what=f"the keys of {where}", atol=0, rtol=0, dtype=torch.float64)
                expect_close(got[1], want[1], what=f"the values of {where}", atol=0, rtol=0, dtype=torch.float64)
                if getattr(mine, "seq_len", None) != ref.seq_len:
                    raise Mismatch(f"after {where}, seq_len is {getattr(mine, 'seq_len', None)!r}; expected "
                                   f"{ref.seq_len}: every token seen so far, not the {window} kept.")
                expect_close(getattr(mine, "positions", None), ref.positions,
                             what=f"the slots' positions after {where}",
                             wrong_answers=[(ref.positions.sort().values, "position p lives in slot p % window: the "
                                                                          "slots are not kept in order.")])
                if call(lambda: mine.nbytes(), {}) != ref.nbytes():
                    raise Mismatch(f"after {where}, nbytes() is {mine.nbytes()}; expected {ref.nbytes()}: the bytes "
                                   f"of the {window}-slot keys and values, constant however long the sequence.")
            if rnd == 0:
                call(lambda: mine.reset() or True, {})  # reset returns None; call refuses a None result
                ref.reset()
                if mine.seq_len != 0 or mine.nbytes() != 0:
                    raise Mismatch("after reset(), seq_len and nbytes() must be 0: an empty cache.")
        return 12

    return run_check("RingKVCache", trials)


class _Indexer:
    """Just enough of a LightningIndexer to run its own ``select`` and ``selected_mask`` with a given top-k."""

    select = LightningIndexer.select
    selected_mask = LightningIndexer.selected_mask

    def __init__(self, topk: int):
        self.topk = topk


def check_piece_select_topk(fn) -> CheckResult:
    """my_attn.sparse.select_topk: DeepSeek-V3.2's top-k selection, against attn_lib's
    ``LightningIndexer.selected_mask``: causal index scores (B, L, S) float64 with -inf at future keys.

    torch.topk is allowed: the piece is the selection rule (the largest k, blocked keys never). Raises: nothing; a
    wrong answer is a failed CheckResult with a hint (the smallest kept, blocked keys kept). Source: DeepSeek-V3.2
    report, §2.1; transformers' ``DeepseekV32Indexer``.
    """
    def trials():
        for t, (B, L, k) in enumerate(((2, 6, 3), (1, 5, 1), (1, 4, 8))):
            g = fresh_generator("select_topk", t)
            s = _randn(g, B, L, L).masked_fill(~_lib.causal_mask(L), -torch.inf)
            want = _Indexer(k).selected_mask(s)
            with _refusing(LightningIndexer.select, LightningIndexer.selected_mask, what="top-k selection"):
                got = call(lambda s_, k_: fn(s_, k_), {"scores": s, "topk": k})
            finite = torch.isfinite(s)
            smallest = torch.zeros_like(want).scatter(-1, s.masked_fill(~finite, torch.inf).topk(
                min(k, L), -1, largest=False).indices, True) & finite
            blocked = torch.zeros_like(want).scatter(-1, s.topk(min(k, L), -1).indices, True)
            expect_close(got, want, what=f"the keys kept of {(B, L, L)} scores, top-{k}", wrong_answers=[
                (~want, "True and False are swapped: True marks the keys kept."),
                (smallest, "you kept the k SMALLEST scores: keep the k largest."),
                (blocked, "a query with fewer than k causal keys kept future keys (score -inf): keep only the "
                          "keys whose score is finite.")])
        return 3

    return run_check("select_topk", trials)


def check_piece_absorbed_attention(fn) -> CheckResult:
    """my_attn.mla.absorbed_attention: MLA's attention in the latent space, against attn_lib's expanded path (the
    per-head keys and values rebuilt from c_KV, then the course's SDPA), one decode step and a chunk with a cache.

    Inputs: q_c (B, H, L, dn), q_r (B, H, L, dr), c_kv (B, 1, S, r), k_r (B, 1, S, dr), w_uk (H, dn, r),
    w_uv (H, dv, r) float64, L <= S (the queries are the last L positions), scale a float. Raises: nothing; a wrong
    answer is a failed CheckResult with a hint. Source: DeepSeek-V2 report, §2.1.2-2.1.3 (absorbing W_UK, W_UV);
    attn_lib.mla.MultiHeadLatentAttention.forward.
    """
    def trials():
        try:  # call() below sees a lambda around fn (to pass scale by keyword): check fn itself first
            check_callable("the argument of the check", fn)
        except TypeError as e:
            raise Mismatch(f"{e}.") from None
        for t, (B, H, L, S, dn, dr, dv, r) in enumerate(((1, 2, 1, 5, 4, 2, 3, 6), (2, 3, 3, 7, 4, 2, 5, 8))):
            g = fresh_generator("absorbed_attention", t)
            q_c, q_r = _randn(g, B, H, L, dn), _randn(g, B, H, L, dr)
            c, k_r = _randn(g, B, 1, S, r), _randn(g, B, 1, S, dr)
            w_uk, w_uv = _randn(g, H, dn, r), _randn(g, H, dv, r)
            scale = (dn + dr) ** -0.5
            mask = _lib.causal_mask(L, S, align="bottom_right")
            k_c = torch.einsum("bxsr,hdr->bhsd", c, w_uk)  # (B, H, S, dn): the expanded keys
            v = torch.einsum("bxsr,hvr->bhsv", c, w_uv)  # (B, H, S, dv)
            key = torch.cat([k_c, k_r.expand(B, H, S, dr)], -1)
            want, _ = _lib.sdpa(torch.cat([q_c, q_r], -1), key, v, mask, scale=scale)
            no_rope, _ = _lib.sdpa(q_c, k_c, v, mask, scale=scale)
            no_mask, _ = _lib.sdpa(torch.cat([q_c, q_r], -1), key, v, scale=scale)
            default_scale, _ = _lib.sdpa(torch.cat([q_c, q_r], -1), key, v, mask, scale=(r + dr) ** -0.5)
            with _refusing(MultiHeadLatentAttention.forward, what="absorbed attention"):
                got = call(lambda *a: fn(*a, scale=scale), {"q_c": q_c, "q_r": q_r, "c_kv": c, "k_r": k_r,
                                                            "w_uk": w_uk, "w_uv": w_uv})
            wrong = [(no_rope, "the rotary part is missing: the score is q_C·W_UK·c + q_R·k_R; append q_R to the "
                               "absorbed query and k_R to the latent key."),
                     (default_scale, "the scale is the one given (1/sqrt(dn + dr) in DeepSeek), not 1/sqrt of the "
                                     "latent width r + dr.")]
            if L > 1:
                wrong.append((no_mask, "the chunk's queries are the last L of the S positions: mask the future keys "
                                       "(causal, bottom-right)."))
            expect_close(got, want, what=f"the heads' output (B, H, L, dv) = {(B, H, L, dv)}", atol=1e-9, rtol=1e-7,
                         dtype=torch.float64, wrong_answers=wrong)
        return 2

    return run_check("absorbed_attention", trials, shape_mistakes="apply W_UV after the softmax: the attention over "
                     "the latents gives (B, H, L, r); einsum with w_uv (H, dv, r) makes it (B, H, L, dv).")


# ----------------------------------------------------------------------------------------------------- 12
def check_piece_decayed_attention(fn) -> CheckResult:
    """my_attn.linear.decayed_attention against attn_lib's: the three forms, with and without decay, chunk sizes
    that do and do not divide L, an initial state and the returned state.

    Inputs: query, key (B, H, L, E), value (B, H, L, Ev), log_decay (B, H, L) <= 0, float64. Raises: nothing; a
    wrong answer is a failed CheckResult with a hint. Source: Katharopoulos et al. 2020 §3.3-3.4; Dao & Gu 2024
    (Mamba-2) §3-5; attn_lib.linear.decayed_attention.
    """
    def trials():
        n = 0
        for t, (L, C, decay) in enumerate(((8, 4, True), (7, 3, True), (6, 16, False), (5, 1, True))):
            g = fresh_generator("decayed_attention", t)
            q, k, v = _randn(g, 2, 2, L, 3), _randn(g, 2, 2, L, 3), _randn(g, 2, 2, L, 4)
            ld = -torch.rand(2, 2, L, generator=g, dtype=torch.float64) if decay else None
            state0 = _randn(g, 2, 2, 3, 4)
            for form in ("parallel", "recurrent", "chunked"):
                want = _lib.decayed(q, k, v, ld, form=form, chunk_size=C)
                with _refusing(_lib.decayed, _lib.linear_attention, _lib.ssd, what="decayed attention"):
                    got = call(lambda *a: fn(*a, form=form, chunk_size=C), {"query": q, "key": k, "value": v,
                                                                             "log_decay": ld})
                wrong = [(_lib.decayed(q, k, v, None, form="parallel"), "the decay is missing: weight key j's "
                                                                        "contribution to query i by exp(g_{j+1} + ... "
                                                                        "+ g_i).")] if decay else []
                if decay:
                    late = _lib.decayed(q, k * ld.exp()[..., None], v, ld, form="parallel")  # weights exp(g_j..g_i)
                    wrong.append((late, "the decay is one position too long: token i's own decay g_i multiplies the "
                                        "state BEFORE k_i v_iᵀ is added, so key j < i is decayed by g_{j+1} .. g_i "
                                        "and key i not at all."))
                strict = _lib.decayed(q, k, v, ld, form="parallel") - \
                    (q * k).sum(-1, keepdim=True) * v  # without the diagonal
                wrong.append((strict, "the token must see itself: read the state AFTER adding k_i v_iᵀ (j <= i)."))
                if form == "chunked" and L > C:
                    alone = torch.cat([_lib.decayed(q[..., s:s + C, :], k[..., s:s + C, :], v[..., s:s + C, :],
                                                    None if ld is None else ld[..., s:s + C]) for s in range(0, L, C)], -2)
                    wrong.append((alone, "each chunk only sees itself: carry the state from chunk to chunk (decayed "
                                         "by the chunk's total decay) and add the query times that state to every "
                                         "output of the next chunk."))
                expect_close(got, want, what=f"the output of form={form!r}, L={L}, chunk_size={C}"
                             f"{'' if decay else ', no decay'}", atol=1e-9, rtol=1e-7, dtype=torch.float64,
                             wrong_answers=[w for w in wrong if w[0] is not None])
                n += 1
                if form == "parallel":
                    continue
                want_o, want_s = _lib.decayed(q, k, v, ld, form=form, chunk_size=C, initial_state=state0,
                                              return_state=True)
                with _refusing(_lib.decayed, _lib.linear_attention, _lib.ssd, what="decayed attention"):
                    got = call(lambda *a: fn(*a, form=form, chunk_size=C, initial_state=state0, return_state=True),
                               {"query": q, "key": k, "value": v, "log_decay": ld})
                if not isinstance(got, (tuple, list)) or len(got) != 2:
                    raise Mismatch("with return_state=True, return (out, state): the state after the last position.")
                what = f"form={form!r} with an initial state, L={L}, chunk_size={C}"
                expect_close(got[1], want_s, what=f"the final state of {what}", atol=1e-9, rtol=1e-7,
                             dtype=torch.float64, wrong_answers=[
                                 (_lib.decayed(q, k, v, ld, form="recurrent", return_state=True)[1],
                                  "the initial state was ignored: start from initial_state, not zeros.")])
                expect_close(got[0], want_o, what=f"the output of {what}", atol=1e-9, rtol=1e-7, dtype=torch.float64)
                n += 1
        return n

    return run_check("decayed_attention", trials)


HINT_FFT_CIRCULAR = ("the convolution wrapped around: an FFT of n points multiplies CIRCULARLY, so with n = L the last "
                     "values of u leak into the first outputs. Zero-pad both to n >= L + K - 1 points (2L is enough): "
                     "torch.fft.rfft(u, n=n), torch.fft.rfft(k, n=n), then torch.fft.irfft(..., n=n).")
HINT_FFT_CONJ = ("the conjugated spectrum gives a correlation, where y_t reads u_{t+s}, the FUTURE: multiply the two "
                 "spectra as they are, rfft(u) * rfft(k).")
HINT_FFT_FLIPPED = ("the filter is reversed: y_t = Σ_s k_s u_{t-s} pairs k_0 with the CURRENT value u_t, and the product "
                    "of the spectra already does the convolution's flip: do not flip k yourself.")
HINT_FFT_HALF = ("you kept the wrong part of the 2L values: the causal outputs y_0 .. y_{L-1} are the FIRST L values "
                 "of irfft(...)[..., :L]; the rest is the tail of the full convolution.")
HINT_FFT_SCALE = ("the result is right up to a constant factor: keep torch.fft's default norm ('backward': rfft does not "
                  "scale, irfft divides by n once), or use the same norm everywhere and undo it once.")
HINT_FFT_COMPLEX = ("the result is complex: a real signal convolved with a real filter is real. Use torch.fft.irfft (or "
                    "take .real of torch.fft.ifft) and return u's dtype.")
HINT_FFT_DIRECT = ("your fft_long_conv summed the convolution directly ({how}): that is the O(L²) route this piece "
                   "replaces. Go through the spectra: torch.fft.rfft of both, multiply, torch.fft.irfft.")
SHAPE_MISTAKES_FFT = ("Known shape mistakes: keep the first L values of the inverse transform ([..., :L]), not all n; "
                      "pad the filter to the same n as the signal (torch.fft.rfft(k, n=n)), or the two spectra have "
                      "different lengths; the leading dims of u and k broadcast, as in u * k.")


class _DirectSum(TorchFunctionMode):
    """Watches the learner's fft_long_conv (changes nothing): how many torch calls it makes, its largest result
    (in elements) and whether it ran a direct convolution; a loop over positions, a Toeplitz matrix or unfolded
    windows is the O(L²) sum, not the FFT route."""

    def __init__(self):
        super().__init__()
        self.calls, self.largest, self.conv = 0, 0, False

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.calls += 1
        if getattr(func, "__name__", "") in ("conv1d", "conv_transpose1d", "convolution", "_convolution"):
            self.conv = True
        if isinstance(out, torch.Tensor):
            self.largest = max(self.largest, out.numel())
        return out


# in the grader's sandbox the runner watches these by name (pieces_fast's named watches): the FFT route must call one
# of _FFTS, and a direct convolution shows as one of _CONVS (a loop over positions calls neither: no torch.fft fails)
_FFTS = {torch.fft.rfft: "torch.fft.rfft", torch.fft.fft: "torch.fft.fft", torch.fft.irfft: "torch.fft.irfft",
         torch.fft.ifft: "torch.fft.ifft"}
_CONVS = {torch.nn.functional.conv1d: "conv1d", torch.conv1d: "conv1d", torch.Tensor.unfold: "Tensor.unfold"}
_FFT_WATCHED = {**_FFTS, **_CONVS}


def check_piece_fft_long_conv(fn) -> CheckResult:
    """my_attn.linear.fft_long_conv against the direct causal sum y_t = Σ_{s<=t} k_s u_{t-s} (attn_lib's
    ``direct_long_conv``): filters as long as the signal and shorter, odd and even lengths, one position, leading
    dims that broadcast, float64 and float32.

    Inputs: u (..., L), k (..., K), K <= L. Raises: nothing; a wrong answer is a failed CheckResult with a hint (no
    zero-padding, so the product wraps around; a conjugated spectrum; a reversed filter; the wrong half kept; a
    constant factor from the FFT's norm; a complex result). Calling attn_lib's fft_long_conv or direct_long_conv
    fails, and so does the direct O(L²) sum (a loop over positions, a Toeplitz matrix, unfolded windows or conv1d).
    In the classroom's sandbox the runner watches torch's FFTs and convolutions by name: conv1d or unfold fails, and
    so does a sum that calls no torch.fft function (attn_lib's functions are flagged by the runner's report).
    Source: Gu, Goel & Ré 2022 (S4), §2.4 and §3.3; Poli et al. 2023 (Hyena), §3.3; attn_lib.linear.fft_long_conv.
    """
    cases = [((3, 64), (3, 64), torch.float64), ((2, 3, 37), (3, 37), torch.float64),
             ((2, 300), (2, 20), torch.float64), ((4, 1), (4, 1), torch.float64), ((2, 50), (50,), torch.float32)]

    def trials():
        try:  # call() below sees a wrapper around fn (to watch it run): check fn itself first
            check_callable("the argument of the check", fn)
        except TypeError as e:
            raise Mismatch(f"{e}.") from None
        for t, (u_shape, k_shape, dtype) in enumerate(cases):
            g = fresh_generator("fft_long_conv", t)
            u, k = _randn(g, *u_shape), _randn(g, *k_shape) / k_shape[-1] ** 0.5
            want = _lib.direct_conv(u, k)  # float64: the definition, summed term by term
            u, k = u.to(dtype), k.to(dtype)
            L, K = u_shape[-1], k_shape[-1]
            watch = _DirectSum()

            def run(u_, k_):
                with watch:
                    return fn(u_, k_)

            if hasattr(fn, "watched_call"):  # in the grader's sandbox: the runner watches torch's FFTs and convs
                guard, used = _Guard(_FFT_WATCHED), []
                got = call(lambda u_, k_: _watched_remotely(fn, (u_, k_), {}, guard, used, None, {}),
                           {"u": u, "k": k})
                if L >= 64 and any(x in guard.used for x in _CONVS.values()):
                    raise Mismatch(HINT_FFT_DIRECT.format(how="conv1d or unfolded windows"))
                if L >= 64 and not any(x in guard.used for x in _FFTS.values()):
                    raise Mismatch(HINT_FFT_DIRECT.format(how="no call of torch.fft"))
            else:
                with _refusing(_lib.fft_conv, _lib.direct_conv, what="fft_long_conv"):
                    got = call(run, {"u": u, "k": k})
            what = f"fft_long_conv of u {tuple(u_shape)} and k {tuple(k_shape)} ({str(dtype).removeprefix('torch.')})"
            if L >= 64 and not hasattr(fn, "watched_call"):
                how = ("conv1d" if watch.conv else
                       f"{watch.calls} torch calls for {L} positions: a loop over them" if watch.calls > L else
                       f"a tensor of {watch.largest} numbers for {want.numel()} outputs: a Toeplitz matrix or "
                       f"unfolded windows" if watch.largest > 8 * want.numel() else None)
                if how is not None:
                    raise Mismatch(HINT_FFT_DIRECT.format(how=how))
            if isinstance(got, torch.Tensor) and got.is_complex():
                raise Mismatch(HINT_FFT_COMPLEX)
            x, f = u.double(), k.double()
            n = 2 * L
            spectra = torch.fft.rfft(x, n=n), torch.fft.rfft(f, n=n)
            wrong = [(torch.fft.irfft(torch.fft.rfft(x, n=L) * torch.fft.rfft(f, n=L), n=L), HINT_FFT_CIRCULAR),
                     (torch.fft.irfft(spectra[0] * spectra[1].conj(), n=n)[..., :L], HINT_FFT_CONJ),
                     (torch.fft.irfft(spectra[0] * spectra[1], n=n)[..., L:], HINT_FFT_HALF),
                     (_lib.direct_conv(x, f.flip(-1)), HINT_FFT_FLIPPED)]
            if isinstance(got, torch.Tensor) and got.shape == want.shape and got.is_floating_point() and \
                    bool(torch.isfinite(got).all()):
                c = float((got.double() * want).sum() / (want * want).sum())
                if abs(c - 1) > 1e-3:
                    wrong.append((c * want, HINT_FFT_SCALE))
            tol = 1e-9 if dtype == torch.float64 else 1e-4
            expect_close(got, want.to(dtype) if dtype != torch.float64 else want, what=what, atol=tol, rtol=tol,
                         dtype=dtype, wrong_answers=[(w.to(dtype), h) for w, h in wrong
                                                      if L > 1 or h == HINT_FFT_SCALE])
        return len(cases)

    return run_check("fft_long_conv", trials, shape_mistakes=SHAPE_MISTAKES_FFT)


def check_piece_delta_rule_step(fn) -> CheckResult:
    """my_attn.deltanet.delta_rule_step against attn_lib's: one token of the gated delta rule, on a random state,
    with gates from none to strong and learning rates from 0 to 1.

    Inputs: state (B, H, E, Ev), query and key (B, H, E), value (B, H, Ev), log_decay and beta (B, H), float64.
    Raises: nothing; a wrong answer is a failed CheckResult with a hint (order of decay and correction, the sign,
    the read). Source: Yang, Kautz & Hatamizadeh 2024, "Gated Delta Networks", §3; attn_lib.deltanet.delta_rule_step.
    """
    def trials():
        for t, (B, H, E, Ev) in enumerate(((2, 3, 4, 5), (1, 1, 3, 3), (1, 2, 6, 2))):
            g = fresh_generator("delta_rule_step", t)
            state, q = _randn(g, B, H, E, Ev), _randn(g, B, H, E)
            k = _randn(g, B, H, E)
            k = k / k.norm(dim=-1, keepdim=True)
            v = _randn(g, B, H, Ev)
            ld = -torch.rand(B, H, generator=g, dtype=torch.float64) * 2
            beta = torch.rand(B, H, generator=g, dtype=torch.float64)
            if t == 1:
                beta[:] = 1.0
            want_o, want_s = _lib.delta_step(state, q, k, v, ld, beta)
            with _refusing(_lib.delta_step, _lib.gated_delta_rule, what="delta-rule step"):
                got = call(lambda *a: fn(*a), {"state": state, "query": q, "key": k, "value": v, "log_decay": ld,
                                              "beta": beta})
            if not isinstance(got, (tuple, list)) or len(got) != 2:
                raise Mismatch("return (out, new_state), as attn_lib's delta_rule_step does.")
            a = ld.exp()[..., None, None]
            pred_before = (state * k[..., :, None]).sum(-2)  # Sᵀ k with the undecayed state
            late = a * (state + k[..., :, None] * (beta[..., None] * (v - pred_before))[..., None, :])
            plain = a * state + k[..., :, None] * (beta[..., None] * v)[..., None, :]
            _, no_gate = _lib.delta_step(state, q, k, v, torch.zeros_like(ld), beta)
            expect_close(got[1], want_s, what=f"the new state {(B, H, E, Ev)}", atol=1e-10, rtol=1e-8,
                         dtype=torch.float64, wrong_answers=[
                             (late, "decay first, then correct: the prediction Sᵀk uses the DECAYED state "
                                    "exp(g)·S, as in S_t = α_t S_{t-1}(I - β k kᵀ) + β v kᵀ."),
                             (plain, "that is the linear-attention update (add β k vᵀ): the delta rule adds "
                                     "β k (v - Sᵀk)ᵀ, the correction of what the memory predicts for k."),
                             (no_gate, "the gate is missing: multiply the state by exp(log_decay) first.")])
            expect_close(got[0], want_o, what=f"the output {(B, H, Ev)}", atol=1e-10, rtol=1e-8, dtype=torch.float64,
                         wrong_answers=[((a * state * q[..., :, None]).sum(-2), "read the state AFTER the update: "
                                                                                "out = new_stateᵀ query.")])
        return 3

    return run_check("delta_rule_step", trials)


# ----------------------------------------------------------------------------------------------------- the registry
# read by classroom/grade.py's sandbox_watches (the runner resolves these names before the student's code runs)
check_piece_fft_long_conv.sandbox_watch = _sandbox_watch_torch(_FFT_WATCHED)


PIECES: tuple[Piece, ...] = (
    Piece("mla", "absorbed_attention", "11", "1 · Multi-head latent attention (DeepSeek-V2, V3)",
          check_piece_absorbed_attention, replaces=False),  # attn_lib has it only inside MultiHeadLatentAttention
    Piece("windows", "sliding_window_mask", "11", "2 · Sliding windows and a ring-buffer cache (Mistral, Gemma 2 and 3, "
          "gpt-oss)", check_piece_sliding_window_mask),
    Piece("windows", "RingKVCache", "11", "2 · Sliding windows and a ring-buffer cache (Mistral, Gemma 2 and 3, "
          "gpt-oss)", check_piece_ring_kv_cache),
    Piece("variants", "softmax_with_sink", "11", "3 · Attention sinks (gpt-oss, StreamingLLM)",
          check_piece_softmax_with_sink, replaces=False),  # attn_lib has it only inside VariantAttention.attend
    Piece("variants", "softcap", "11", "5 · Logit soft-capping (Gemma 2)", check_piece_softcap),
    Piece("sparse", "select_topk", "11", "8 · DeepSeek sparse attention (DeepSeek-V3.2)", check_piece_select_topk,
          replaces=False),  # attn_lib has it only as LightningIndexer.selected_mask, a method
    Piece("linear", "decayed_attention", "12", "1 · Linear attention is an RNN",
          check_piece_decayed_attention),
    Piece("deltanet", "delta_rule_step", "12", "3 · Gated DeltaNet: the state as online regression",
          check_piece_delta_rule_step),
    Piece("linear", "fft_long_conv", "12", "4 · Long convolutions: S4's convolution mode and Hyena",
          check_piece_fft_long_conv),
)
