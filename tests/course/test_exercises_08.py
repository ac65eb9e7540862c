"""The exercise checks of notebook 08 accept correct answers (written independently here) and name typical wrong ones."""

import torch

from attn_lib.course.exercises import check_fake_quantize, check_kv_cache_bytes, check_mean_pool_kv_heads, check_repeat_kv


from exercise_asserts import fails_with as _fails_with, not_written as _not_written


# ------------------------------------------------------------------ kv_cache_bytes
def test_check_kv_cache_bytes():
    result = check_kv_cache_bytes(lambda L, h, d, s, b, e: 2 * L * h * d * s * b * e)
    assert result and "✅" in repr(result) and "4 fresh inputs" in repr(result)
    assert check_kv_cache_bytes(lambda L, h, d, s, b, e: int(2 * L * h * d * s * b * e))  # ints are fine
    _fails_with(check_kv_cache_bytes(lambda L, h, d, s, b, e: L * h * d * s * b * e), "keys AND values")
    _fails_with(check_kv_cache_bytes(lambda L, h, d, s, b, e: 16 * L * h * d * s * b * e), "do not multiply by 8")
    _fails_with(check_kv_cache_bytes(lambda L, h, d, s, b, e: 2 * L * h * d * s * b), "counted elements, not bytes")
    _fails_with(check_kv_cache_bytes(lambda L, h, d, s, b, e: 2 * L * h * d * s * b * e + 1), "differs from the reference")
    _fails_with(check_kv_cache_bytes(_not_written), "not written yet")


# ------------------------------------------------------------------ repeat_kv
def test_check_repeat_kv():
    def with_expand(x, n):  # HuggingFace's way
        B, H, S, D = x.shape
        return x[:, :, None].expand(B, H, n, S, D).reshape(B, H * n, S, D)

    assert check_repeat_kv(with_expand)
    assert check_repeat_kv(lambda x, n: torch.repeat_interleave(x, n, dim=1))
    _fails_with(check_repeat_kv(lambda x, n: x.repeat(1, n, 1, 1)), "tiled", "j // n_rep")
    _fails_with(check_repeat_kv(lambda x, n: torch.cat([x] * n, dim=1)), "tiled")
    _fails_with(check_repeat_kv(lambda x, n: x.repeat_interleave(n, dim=2)), "sequence axis")
    _fails_with(check_repeat_kv(lambda x, n: x), "has shape")
    _fails_with(check_repeat_kv(_not_written), "not written yet")


# ------------------------------------------------------------------ mean pooling
def _pool_loop(w, H, K):
    D = w.shape[0] // H
    G = H // K
    return torch.cat([torch.stack([w[(g * G + i) * D:(g * G + i + 1) * D] for i in range(G)]).mean(0) for g in range(K)])


def test_check_mean_pool_kv_heads():
    assert check_mean_pool_kv_heads(_pool_loop)
    _fails_with(check_mean_pool_kv_heads(lambda w, H, K: w.view(H // K, K, -1, w.shape[1]).mean(0).reshape(-1, w.shape[1])),
                "strided", "CONSECUTIVE")
    _fails_with(check_mean_pool_kv_heads(lambda w, H, K: _pool_loop(w, H, K) * (H // K)), "summed")
    _fails_with(check_mean_pool_kv_heads(lambda w, H, K: w.view(K, H // K, -1, w.shape[1])[:, 0].reshape(-1, w.shape[1])),
                "first head")
    _fails_with(check_mean_pool_kv_heads(lambda w, H, K: w), "has shape")
    _fails_with(check_mean_pool_kv_heads(_not_written), "not written yet")


# ------------------------------------------------------------------ fake quantization
def _fq(x, bits, *, qmax=None, dim=-1, absval=True, rnd=torch.round, dequant=True, guard=True):
    qmax = 2 ** (bits - 1) - 1 if qmax is None else qmax
    amax = (x.abs() if absval else x).amax(dim=dim, keepdim=True)
    scale = torch.where(amax == 0, torch.ones_like(amax), amax / qmax) if guard else amax / qmax
    codes = rnd(x / scale).clamp(-qmax, qmax)
    return codes * scale if dequant else codes


def test_check_fake_quantize():
    assert check_fake_quantize(_fq)
    _fails_with(check_fake_quantize(lambda x, b: _fq(x, b, qmax=2**b - 1)), "unsigned")
    _fails_with(check_fake_quantize(lambda x, b: _fq(x, b, absval=False)), "absolute value")
    _fails_with(check_fake_quantize(lambda x, b: _fq(x, b, dim=tuple(range(x.dim())))), "whole tensor")
    _fails_with(check_fake_quantize(lambda x, b: _fq(x, b, dim=-2)), "per channel")
    _fails_with(check_fake_quantize(lambda x, b: _fq(x, b, rnd=torch.floor)), "nearest")
    _fails_with(check_fake_quantize(lambda x, b: _fq(x, b, dequant=False)), "dequantized")
    _fails_with(check_fake_quantize(lambda x, b: x), "differs from the reference")
    _fails_with(check_fake_quantize(lambda x, b: _fq(x, b, guard=False)), "all 0 gave NaN")
    _fails_with(check_fake_quantize(_not_written), "not written yet")


def test_check_fake_quantize_accepts_attn_lib():
    """attn_lib's own quantizer (float16 scales, rounded up) is close, but the check asks for exact float64
    scales; an answer built on it with float64 scales passes."""
    from attn_lib.quantization import quantize_absmax

    assert check_fake_quantize(lambda x, b: quantize_absmax(x, b, scale_dtype=torch.float64).dequantize())
