"""Exercise checks for notebook 08 (grouped-query attention, the KV cache and its size).

- :func:`check_kv_cache_bytes`: bytes of a KV cache from the model's shape.
- :func:`check_repeat_kv`: expand num_kv_heads key/value heads to num_heads (GQA's "repeat in place").
- :func:`check_mean_pool_kv_heads`: turn a trained key/value projection into a grouped one (GQA paper, §2.1).
- :func:`check_fake_quantize`: absmax quantization per token to ``bits`` bits and back.

Each check compares with attn_lib.gqa (tests/test_gqa.py proves it equal to torch's ``enable_gqa`` and
HuggingFace's ``repeat_kv``, and to the bytes of real caches) on fresh inputs, and names typical mistakes.
"""

from __future__ import annotations

import torch

from attn_lib.course.exercises._core import as_tensor as _tensor
from attn_lib.course.exercises._core import CheckResult, Mismatch, call, expect_close, fresh_generator, run_check
from attn_lib.gqa import mean_pool_kv_heads, repeat_kv
from attn_lib.kv_cache import kv_cache_bytes

__all__ = ["check_kv_cache_bytes", "check_repeat_kv", "check_mean_pool_kv_heads", "check_fake_quantize"]

HINT_NO_TWO = "that is half the answer: the cache keeps keys AND values, so multiply by 2."
HINT_ELEMENTS = "you counted elements, not bytes: multiply by bytes_per_element (2 for fp16, 1 for int8, 0.5 for int4)."
HINT_BITS = "bytes_per_element is already in bytes (2 for fp16, 0.5 for int4); do not multiply by 8."
HINT_NUM_HEADS = (
    "you counted every query head; only the num_kv_heads key/value heads are cached -- that is the saving of GQA/MQA."
)
HINT_TILE = (
    "you tiled the set of KV heads (0, 1, 0, 1, ...), like .repeat(); GQA repeats each KV head in place "
    "(0, 0, 1, 1, ...): query head j reads KV head j // n_rep. Use repeat_interleave(n_rep, dim=1) or "
    "x[:, :, None].expand(...).reshape(...)."
)
HINT_SEQ_AXIS = "you repeated along the sequence axis; repeat the heads axis (dim 1 of (B, Hkv, S, D))."
HINT_STRIDED = (
    "you averaged heads g, g + num_kv_heads, g + 2·num_kv_heads, ... (strided). The group of KV head g is the "
    "CONSECUTIVE query heads g·G .. g·G + G - 1 (G = num_heads // num_kv_heads): view as (num_kv_heads, G, head_dim, d_in)."
)
HINT_SUM = "you summed the heads of each group; take their mean (divide by the group size G)."
HINT_FIRST = (
    "you kept the first head of each group; the GQA paper found mean-pooling all heads of the group works better."
)
HINT_UNSIGNED = (
    "your largest code is 2^bits - 1 (the unsigned range). Signed absmax codes run from -qmax to qmax with "
    "qmax = 2^(bits-1) - 1: 127 for 8 bits, 7 for 4 bits."
)
HINT_NOT_ABS = "take the absolute value before the max: the scale must cover the most negative values too."
HINT_PER_TENSOR = (
    "you used one scale for the whole tensor; quantize per token: absmax over the last dim (head_dim), keepdim=True."
)
HINT_PER_CHANNEL = "you took the absmax over the tokens (dim -2): that is per channel. This exercise asks per token (dim -1)."
HINT_FLOOR = "round to the nearest integer (torch.round), not down (floor) or toward zero (trunc)."
HINT_NOT_DEQUANT = "return the dequantized values (code × scale), not the integer codes."
HINT_ZERO_TOKEN = (
    "a token whose values are all 0 gave NaN: its absmax is 0, so scale = 0 and x / scale = 0/0. Guard it: "
    "scale = torch.where(absmax > 0, absmax / qmax, torch.ones_like(absmax)) (any scale returns the zeros)."
)




# ------------------------------------------------------------------------------------------
def check_kv_cache_bytes(kv_cache_bytes_fn) -> CheckResult:
    """Check ``kv_cache_bytes(num_layers, num_kv_heads, head_dim, seq_len, batch_size, bytes_per_element)``.

    The answer: 2 × num_layers × num_kv_heads × head_dim × seq_len × batch_size × bytes_per_element
    (compared with attn_lib.gqa.kv_cache_bytes on 4 configurations, fp16 to int4).
    """
    cases = [  # (layers, kv_heads, head_dim, seq, batch, bytes per element, query heads)
        (6, 12, 32, 128, 8, 4, 12),  # first: fp32, where forgetting the 2 and forgetting the bytes differ
        (32, 8, 128, 4096, 1, 2, 32),
        (24, 1, 64, 1000, 3, 1, 16),
        (80, 8, 128, 32768, 2, 0.5, 64),
    ]
    names = {4: "fp32", 2: "fp16", 1: "int8", 0.5: "int4"}

    def trials():
        for L, hkv, d, s, b, e, hq in cases:
            want = kv_cache_bytes(L, hkv, d, s, b, names[e])
            got = call(kv_cache_bytes_fn, {"num_layers": L, "num_kv_heads": hkv, "head_dim": d, "seq_len": s,
                                           "batch_size": b, "bytes_per_element": e})
            if isinstance(got, bool) or not isinstance(got, (int, float, torch.Tensor)) or \
                    (isinstance(got, torch.Tensor) and got.numel() != 1):
                raise Mismatch(f"kv_cache_bytes({L}, {hkv}, {d}, {s}, {b}, {e}): return one number of bytes, "
                               f"got {type(got).__name__}.")
            wrong = [(want / 2, HINT_NO_TWO), (want * 8, HINT_BITS), (want * hq / hkv, HINT_NUM_HEADS),
                     (want / e, HINT_ELEMENTS)]
            expect_close(torch.tensor(float(got)) if isinstance(got, (int, float)) else got, torch.tensor(float(want)),
                         what=f"kv_cache_bytes({L}, {hkv}, {d}, {s}, {b}, {e})", wrong_answers=wrong, atol=0.5, rtol=0)
        return len(cases)

    return run_check("check_kv_cache_bytes", trials)


# ------------------------------------------------------------------------------------------
def check_repeat_kv(repeat_kv_fn) -> CheckResult:
    """Check ``repeat_kv(x, n_rep)``: (B, Hkv, S, D) -> (B, Hkv·n_rep, S, D), each KV head repeated in place.

    Compared with attn_lib.gqa.repeat_kv (= HuggingFace's ``repeat_kv`` = ``repeat_interleave(n_rep, dim=1)``).
    """
    dims = [(2, 2, 3, 4, 4), (1, 4, 5, 2, 2), (2, 1, 2, 3, 6), (1, 3, 4, 2, 1)]  # (B, Hkv, S, D, n_rep)

    def trials():
        for trial, (B, H, S, D, n) in enumerate(dims):
            x = torch.randn(B, H, S, D, generator=fresh_generator("check_repeat_kv", trial))
            want = repeat_kv(x, n)
            got = _tensor(call(repeat_kv_fn, {"x": x, "n_rep": n}), "repeat_kv")
            wrong = [(x.repeat(1, n, 1, 1), HINT_TILE), (x.repeat_interleave(n, dim=2), HINT_SEQ_AXIS)]
            expect_close(got, want, what=f"repeat_kv(x of shape {(B, H, S, D)}, n_rep={n})", wrong_answers=wrong,
                         dtype=x.dtype)
        return len(dims)

    return run_check("check_repeat_kv", trials)


# ------------------------------------------------------------------------------------------
def check_mean_pool_kv_heads(mean_pool_fn) -> CheckResult:
    """Check ``mean_pool_kv_heads(weight, num_heads, num_kv_heads)``: a key or value projection's
    weight (num_heads·head_dim, d_in) -> (num_kv_heads·head_dim, d_in), each KV head the mean of its
    group of consecutive heads (GQA paper, Ainslie et al. 2023, §2.1)."""
    dims = [(4, 2, 3, 5), (6, 3, 2, 4), (8, 2, 4, 3), (12, 4, 2, 6)]  # (num_heads, num_kv_heads, head_dim, d_in)

    def trials():
        for trial, (H, K, D, d_in) in enumerate(dims):
            w = torch.randn(H * D, d_in, generator=fresh_generator("check_mean_pool_kv_heads", trial))
            want = mean_pool_kv_heads(w, H, K)
            got = _tensor(call(mean_pool_fn, {"weight": w, "num_heads": H, "num_kv_heads": K}), "mean_pool_kv_heads")
            G = H // K
            heads = w.view(H, D, d_in)
            wrong = [
                (heads.view(G, K, D, d_in).mean(0).reshape(K * D, d_in), HINT_STRIDED),
                (heads.view(K, G, D, d_in).sum(1).reshape(K * D, d_in), HINT_SUM),
                (heads.view(K, G, D, d_in)[:, 0].reshape(K * D, d_in), HINT_FIRST),
            ]
            expect_close(got, want, what=f"the pooled weight for num_heads={H}, num_kv_heads={K}", wrong_answers=wrong,
                         dtype=w.dtype)
        return len(dims)

    return run_check("check_mean_pool_kv_heads", trials)


# ------------------------------------------------------------------------------------------
def _fake_quant(x, bits, *, qmax=None, absfn=torch.abs, reduce_dims=(-1,), rnd=torch.round, dequant=True):
    """Per-token absmax quantize-dequantize in float64 with float64 scales (the exercise's reference and its variants)."""
    qmax = 2 ** (bits - 1) - 1 if qmax is None else qmax
    amax = absfn(x).amax(dim=reduce_dims, keepdim=True)
    scale = torch.where(amax == 0, torch.ones_like(amax), amax / qmax)
    codes = rnd(x / scale).clamp(-qmax, qmax)
    return codes * scale if dequant else codes


def check_fake_quantize(fake_quantize_fn) -> CheckResult:
    """Check ``fake_quantize(x, bits)``: absmax quantization per token of x (..., S, D) and dequantization.

    scale = max|x| over the last dim / qmax with qmax = 2^(bits-1) - 1; codes = round(x / scale);
    return codes × scale (same shape as x). Inputs are float64; compared with an exact reference.
    """
    dims = [((2, 5, 8), 8), ((1, 3, 6, 4), 4), ((4, 16), 8), ((2, 2, 7, 6), 4)]

    def trials():
        for trial, (shape, bits) in enumerate(dims):
            g = fresh_generator("check_fake_quantize", trial)
            x = torch.randn(*shape, generator=g, dtype=torch.float64) * torch.rand(shape[-1], generator=g, dtype=torch.float64).mul(3)
            x[..., 0] -= 2.0  # a strongly negative channel, so that max(x) != max|x|
            zero_token = trial == len(dims) - 1
            if zero_token:
                x[1, 0, 3, :] = 0.0  # a token of zeros (padding): absmax 0
            want = _fake_quant(x, bits)
            got = _tensor(call(fake_quantize_fn, {"x": x, "bits": bits}), "fake_quantize")
            if zero_token and got.shape == want.shape and got.is_floating_point() and bool(torch.isnan(got).any()):
                raise Mismatch(HINT_ZERO_TOKEN)
            all_dims = tuple(range(x.dim()))
            wrong = [
                (_fake_quant(x, bits, qmax=2**bits - 1), HINT_UNSIGNED),
                (_fake_quant(x, bits, absfn=lambda t: t), HINT_NOT_ABS),
                (_fake_quant(x, bits, reduce_dims=all_dims), HINT_PER_TENSOR),
                (_fake_quant(x, bits, reduce_dims=(-2,)), HINT_PER_CHANNEL),
                (_fake_quant(x, bits, rnd=torch.floor), HINT_FLOOR),
                (_fake_quant(x, bits, rnd=torch.trunc), HINT_FLOOR),
                (_fake_quant(x, bits, dequant=False), HINT_NOT_DEQUANT),
            ]
            expect_close(got, want, what=f"fake_quantize(x of shape {shape}, bits={bits})", wrong_answers=wrong,
                         atol=1e-9, rtol=1e-7, dtype=x.dtype)
        return len(dims)

    return run_check("check_fake_quantize", trials,
                     shape_mistakes="The absmax of each token is x.abs().amax(dim=-1, keepdim=True), shape (..., S, 1), "
                                    "so that it broadcasts against x (..., S, D).")
