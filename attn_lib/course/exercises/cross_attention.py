"""Exercise checks for notebook 07 (encoder-decoder and cross-attention).

- :func:`check_shift_right`: build the decoder's input for teacher forcing.
- :func:`check_cross_attention`: one head of cross-attention with a source padding mask.
- :func:`check_most_read_source`: for each output position, the source token with the largest weight.

Each check runs your function on fresh inputs, compares with attn_lib's reference and names the
typical mistake it recognises. Convention, as everywhere in attn_lib: True = real token / may attend.
"""

from __future__ import annotations

import math

import torch

from attn_lib.attention import scaled_dot_product_attention
from attn_lib.course.exercises._core import as_tensor as _tensor
from attn_lib.course.exercises._core import CheckResult, Mismatch, as_pair, call, expect_close, fresh_generator, run_check
from attn_lib.masks import causal_mask, padding_mask

__all__ = ["check_shift_right", "check_cross_attention", "check_most_read_source"]




def check_shift_right(shift_right) -> CheckResult:
    """Check ``shift_right(tgt_out, bos_id)`` -> ``tgt_in``, both long (B, T).

    ``tgt_out`` is what the decoder must predict (target tokens, then ``</s>``, then padding);
    the decoder's input is the same sequence moved one step to the right with ``<s>`` in front:
    ``tgt_in[:, 0] = bos_id`` and ``tgt_in[:, t] = tgt_out[:, t-1]``, same length T.
    """
    cases = [(3, 11, 1), (1, 5, 1), (4, 7, 9)]

    def trials():
        for trial, (B, T, bos) in enumerate(cases):
            g = fresh_generator("check_shift_right", trial)
            tgt_out = torch.randint(3, 14, (B, T), generator=g)
            want = torch.cat([torch.full((B, 1), bos), tgt_out[:, :-1]], dim=1)
            got = _tensor(call(shift_right, {"tgt_out": tgt_out, "bos_id": bos}), "shift_right")
            wrong = [
                (tgt_out, "the input is not shifted: the decoder would see, at position t, the very token it must predict."),
                (torch.cat([tgt_out[:, 1:], torch.full((B, 1), bos)], dim=1),
                 "shifted the wrong way: move the tokens one step to the RIGHT and put <s> at position 0."),
                (torch.cat([torch.full((B, 1), bos), tgt_out], dim=1),
                 "one token too long: drop the last token of tgt_out so that tgt_in has the same length T."),
            ]
            if got.shape == want.shape and torch.equal(got[:, 1:], want[:, 1:]) and not torch.equal(got[:, 0], want[:, 0]):
                raise Mismatch(f"position 0 must hold the start token bos_id={bos} in every row.")
            expect_close(got, want, what="tgt_in", wrong_answers=wrong)
            if got.dtype != torch.long:
                raise Mismatch(f"tgt_in has dtype {got.dtype}; token ids must be long (torch.int64), as tgt_out is: "
                               "build the <s> column with torch.full_like(tgt_out[:, :1], bos_id) or dtype=torch.long. "
                               "An embedding table cannot look up float ids.")
        return len(cases)

    return run_check("check_shift_right", trials)


def check_cross_attention(cross_attention) -> CheckResult:
    """Check ``cross_attention(x, memory, w_q, w_k, w_v, src_padding_mask)`` -> ``(output, weights)``.

    One head, no output projection: queries ``x @ w_q`` from the decoder x (B, T, D); keys
    ``memory @ w_k`` and values ``memory @ w_v`` from the encoder output memory (B, S, D);
    weights = softmax(q kᵀ / sqrt(D)) over the source, with padded source positions
    (``src_padding_mask`` False, shape (B, S)) given weight 0; output = weights @ v.
    Shapes: output (B, T, D), weights (B, T, S).
    """
    cases = [(2, 4, 6, 8), (1, 3, 5, 4), (3, 5, 7, 6)]

    def trials():
        for trial, (B, T, S, D) in enumerate(cases):
            g = fresh_generator("check_cross_attention", trial)
            x = torch.randn(B, T, D, generator=g)
            memory = torch.randn(B, S, D, generator=g)
            w_q, w_k, w_v = (torch.randn(D, D, generator=g) / math.sqrt(D) for _ in range(3))
            lengths = [S - (b % 3) for b in range(B)]
            mask = padding_mask(lengths, S)  # (B, S) True = real
            q, k, v = x @ w_q, memory @ w_k, memory @ w_v
            want, want_w = scaled_dot_product_attention(q, k, v, mask[:, None, :])
            got = call(cross_attention, {"x": x, "memory": memory, "w_q": w_q, "w_k": w_k, "w_v": w_v,
                                         "src_padding_mask": mask})
            got = as_pair(got, "cross_attention", ("output", "weights"))
            out, weights = _tensor(got[0], "output"), _tensor(got[1], "weights")
            if weights.shape == (B, S, T):
                raise Mismatch("weights have shape (B, S, T): queries and keys are swapped. In cross-attention the "
                               "QUERIES come from the decoder (x) and the keys and values from the encoder (memory).")
            s = q @ k.transpose(-2, -1) / math.sqrt(D)
            wrong_w = [
                (torch.softmax(s, -1), "padded source positions get weight: set their scores to -inf before the softmax "
                                       "(src_padding_mask is True for real tokens)."),
                (torch.softmax(s.masked_fill(mask[:, None, :], float("-inf")), -1),
                 "the padding mask is inverted: True marks the REAL source tokens."),
                (scaled_dot_product_attention(q, k, v, mask[:, None, :], scale=1.0)[1],
                 "missing the 1/sqrt(D) scale on the scores."),
                (torch.softmax(s.masked_fill(~mask[:, None, :], float("-inf")), dim=-2),
                 "softmax over the wrong axis: each decoder position's weights over the SOURCE (last dim) must sum to 1."),
            ]
            causal = causal_mask(T, S)
            if T <= S:
                wrong_w.append((scaled_dot_product_attention(q, k, v, mask[:, None, :] & causal)[1],
                                "cross-attention is not causal: every target position may read the whole source; "
                                "only source padding is masked."))
            if weights.is_floating_point() and torch.isnan(weights).any():
                # a naive masked softmax gives NaN where a whole row or column is -inf; compare with NaN as 0
                weights = torch.nan_to_num(weights, nan=0.0)
                wrong_w = [(torch.nan_to_num(w, nan=0.0), hint) for w, hint in wrong_w]
                expect_close(weights, want_w, what="the weights", wrong_answers=wrong_w)
                raise Mismatch("the weights contain NaN: a softmax over scores that are all -inf. Mask only the "
                               "padded source positions (src_padding_mask False).")
            expect_close(weights, want_w, what="the weights", wrong_answers=wrong_w, dtype=x.dtype)
            expect_close(out, want, what="the output",
                         wrong_answers=[(want_w @ (memory @ w_k), "the output mixes the KEYS; multiply the weights by the values.")],
                         dtype=x.dtype)
        return len(cases)

    return run_check("check_cross_attention", trials,
                     shape_mistakes="q is (B, T, D) and k (B, S, D): the scores q @ k.transpose(-2, -1) are (B, T, S); "
                                    "the (B, S) padding mask broadcasts over the T queries as src_padding_mask[:, None, :].")


def check_most_read_source(most_read_source) -> CheckResult:
    """Check ``most_read_source(weights, source_tokens)`` -> list of str, one per output position.

    ``weights`` is one head's cross-attention (T, S): row t is how output position t spreads its
    attention over the S source tokens. Return, for each row, the source token with the largest weight.
    """
    cases = [(10, 14), (4, 9), (11, 20)]

    def trials():
        for trial, (T, S) in enumerate(cases):
            g = fresh_generator("check_most_read_source", trial)
            weights = torch.softmax(3 * torch.randn(T, S, generator=g), dim=-1)
            tokens = [chr(ord("a") + i) + ("" if trial == 0 else "▁" * (i % 3)) for i in range(S)]  # some longer than 1
            want = [tokens[i] for i in weights.argmax(-1).tolist()]
            got = call(most_read_source, {"weights": weights, "source_tokens": list(tokens)})
            if isinstance(got, torch.Tensor):
                raise Mismatch("return a list of source tokens (str), not a tensor of positions.")
            if type(got) is str:
                raise Mismatch(f"return a list with one source token per output position, not one str ({got!r}); "
                               "tokens can be longer than one character (e.g. ['▁the', 'cat']).")
            if type(got) not in (list, tuple):
                raise Mismatch(f"return a list of source tokens (str), got {type(got).__name__}.")
            got = list(got)
            if got and all(type(t) is int for t in got) and got == weights.argmax(-1).tolist():
                raise Mismatch("those are positions; return the source tokens at those positions.")
            if not all(type(t) is str for t in got):
                raise Mismatch("return a list of source tokens (str), one per output position; yours holds "
                               f"{', '.join(sorted({type(t).__name__ for t in got if type(t) is not str}))}.")
            if got == [tokens[i] for i in weights.argmin(-1).tolist()]:
                raise Mismatch("that is the SMALLEST weight of each row (argmin); take the largest (argmax).")
            if got == [tokens[i] for i in weights.argmax(0).tolist() if i < S]:
                raise Mismatch("argmax over the wrong axis: for each output position (row, dim 0) find the source "
                               "column (dim -1) with the largest weight.")
            if got == weights.argmax(-1).tolist():
                raise Mismatch("those are positions; return the source tokens at those positions.")
            if got != want:
                raise Mismatch(f"for weights of shape {(T, S)} got {got}; expected {want}.")
        return len(cases)

    return run_check("check_most_read_source", trials)
