"""attn_lib.quantization: absmax quantization stays within its error bound, packs 4-bit codes
losslessly, counts its bytes, and favours per-channel scales for outlier channels."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

pytestmark = pytest.mark.usefixtures("one_thread")

from attn_lib.quantization import (fake_quantize_kv, pack_int4, quantize_absmax, quantize_kv, relative_error,
                                   unpack_int4)

heads = st.tuples(st.integers(1, 6), st.integers(1, 6))  # (num_kv_heads, group size)


# ---------------------------------------------------------------------------------------------
# quantization
# ---------------------------------------------------------------------------------------------

finite = st.floats(-1e3, 1e3, allow_nan=False, width=32)


@given(st.sampled_from([8, 4]), st.sampled_from(["token", "channel"]),
       st.lists(finite, min_size=6, max_size=6), st.integers(1, 4), st.integers(0, 2**31 - 1))
def test_quantization_round_trip_bound(bits, per, head, s, seed):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(2, 3, s, 6, generator=gen) * torch.tensor(head)  # channel scales from hypothesis, some 0
    qmax = 2 ** (bits - 1) - 1
    exact = x.double().abs().amax(dim=-1 if per == "token" else -2) / qmax
    # the float16 scale, rounded up to the next float16 so that nothing clips
    s16 = exact.to(torch.float16)
    up = torch.where(s16.double() < exact, torch.nextafter(s16, torch.full_like(s16, math.inf)), s16).double()
    if bool(((exact > 0) & (up > 2 * exact)).any()):
        # deep in float16's subnormals (absmax ~1e-10): refused with a hint, never returned as zeros
        with pytest.raises(ValueError, match="too small for torch.float16 scales"):
            quantize_kv(x, bits, per=per)
        return
    q = quantize_kv(x, bits, per=per)
    codes = q.codes()
    assert codes.dtype == torch.int8 and codes.shape == x.shape and codes.abs().max() <= qmax
    err = (q.dequantize() - x).abs()
    # round to nearest: error at most half a step, the step being the stored scale (1e-6 slack for float32)
    assert bool((err <= q.scale.float() / 2 + 1e-6 * x.abs().max() + 1e-30).all())
    # the largest |x| of each slice gets code ±qmax, unless the slice is zero or its scale is so
    # small that float16 stores it coarsely (subnormal, < 2^-14), where it is rounded up
    absmax = x.abs().amax(dim=-1 if per == "token" else -2, keepdim=True)
    top = codes.abs().amax(dim=-1 if per == "token" else -2, keepdim=True)
    assert bool(((top == qmax) | (absmax == 0) | (q.scale < 2**-14)).all())


def test_int4_packing_is_lossless_and_counts_bytes():
    codes = torch.arange(-7, 8, dtype=torch.float32)  # every 4-bit code, odd length (padded)
    q = quantize_absmax(codes[None], 4)
    assert torch.equal(q.codes(), codes[None].to(torch.int8))
    assert q.data.dtype == torch.uint8 and q.data.shape == (1, 8)  # 15 codes -> 8 bytes
    assert q.nbytes() == 8 + 2
    x = torch.randn(2, 4, 10, 32)
    for bits in (8, 4):
        q = quantize_kv(x, bits)
        assert q.nbytes() == x.numel() * bits // 8 + 2 * 4 * 10 * 2  # codes + one fp16 scale per token and head
        assert q.dequantize().dtype == x.dtype


def test_quantization_exact_cases_and_errors():
    z = torch.zeros(3, 4)
    assert torch.equal(fake_quantize_kv(z, 4), z)
    # absmax = qmax makes the scale exactly 1: codes are x rounded half to even (torch.round)
    x = torch.tensor([[127.0, -64.0, 32.5, 0.0]])
    assert quantize_absmax(x, 8).codes().tolist() == [[127, -64, 32, 0]]
    assert quantize_absmax(torch.tensor([7.0, -3.5, 2.5]), 4).codes().tolist() == [7, -4, 2]
    with pytest.raises(ValueError, match="bits must be one of 8, 4, got"):
        quantize_absmax(x, 3)
    with pytest.raises(ValueError, match=r"x contains NaN \(1 value\), first at index \(1,\)"):
        quantize_absmax(torch.tensor([1.0, float("nan")]), 8)
    with pytest.raises(TypeError, match="floating"):
        quantize_absmax(torch.tensor([1, 2]), 8)
    with pytest.raises(ValueError, match="per must be"):
        quantize_kv(x, 8, per="head")
    with pytest.raises(ValueError, match="overflows torch.float16 scales"):
        quantize_absmax(torch.tensor([1e8]), 4)
    assert quantize_absmax(torch.tensor([1e8]), 4, scale_dtype=torch.float32).dequantize().item() == 1e8


def test_outlier_channel_favours_per_channel_keys():
    """KIVI's observation, made concrete: one large channel in every key ruins per-token scales."""
    torch.manual_seed(0)
    k = torch.randn(1, 2, 64, 32)
    k[..., 5] *= 30.0
    others = [c for c in range(32) if c != 5]
    # per token, the outlier sets every token's scale (~30·3/7): the ordinary channels round to ~0
    err_token = relative_error(fake_quantize_kv(k, 4, per="token")[..., others], k[..., others])
    err_channel = relative_error(fake_quantize_kv(k, 4, per="channel")[..., others], k[..., others])
    assert err_token > 0.5 and err_channel < 0.2


def test_quantize_kv_bad_arguments_name_argument_value_and_expectation():
    x = torch.randn(1, 2, 3, 4)
    # a dtype's name is read as the dtype; an integer dtype is refused before it could overflow
    assert quantize_kv(x, 8, scale_dtype="float16").scale.dtype == torch.float16
    assert quantize_kv(x, 8, scale_dtype="float32").scale.dtype == torch.float32
    with pytest.raises(ValueError, match="scale_dtype must be a floating dtype .* got torch.int8"):
        quantize_kv(x, 8, scale_dtype=torch.int8)
    with pytest.raises(ValueError, match="scale_dtype must name a floating dtype .* got 'gpu16'"):
        quantize_kv(x, 8, scale_dtype="gpu16")
    with pytest.raises(TypeError, match="scale_dtype must be a torch.dtype .* got int 16"):
        quantize_kv(x, 8, scale_dtype=16)
    with pytest.raises(ValueError, match=r"at least one entry along dim=-1 .* got shape \(1, 2, 3, 0\)"):
        quantize_kv(torch.randn(1, 2, 3, 0))
    with pytest.raises(ValueError, match=r"x must have at least 2 dims, got shape \(4,\)"):
        quantize_kv(torch.randn(4))
    with pytest.raises(TypeError, match="per must be one of 'token', 'channel', got int 1"):
        quantize_kv(x, 8, per=1)
    with pytest.raises(TypeError, match="bits must be one of 8, 4, got str '8'"):
        quantize_kv(x, "8")


def test_tiny_values_are_refused_in_float16_and_exact_in_float32():
    """1e-10 / 127 underflows float16 (smallest subnormal 6e-8): the codes would all be 0."""
    x = torch.full((2, 4), 1e-10)
    with pytest.raises(ValueError, match=r"max\|x\| = 1e-10 .* too small for torch.float16 scales.*scale_dtype=torch.float32"):
        quantize_kv(x)
    torch.testing.assert_close(quantize_kv(x, scale_dtype=torch.float32).dequantize(), x)


def test_relative_error_by_hand_and_its_errors():
    exact = torch.tensor([3.0, 4.0])  # norm 5
    assert relative_error(torch.tensor([3.0, 5.0]), exact) == pytest.approx(1 / 5)
    assert relative_error(torch.zeros(2, 2), torch.zeros(2, 2)) == 0.0
    with pytest.raises(ValueError, match=r"exact is all zero, so the relative error is undefined"):
        relative_error(torch.ones(2), torch.zeros(2))
    with pytest.raises(ValueError, match=r"same shape, got approx \(2, 3\) and exact \(3, 2\)"):
        relative_error(torch.ones(2, 3), torch.ones(3, 2))
    with pytest.raises(TypeError, match="approx must be a torch.Tensor, got list"):
        relative_error([1.0], exact)
    with pytest.raises(ValueError, match="exact contains NaN"):
        relative_error(torch.ones(2), torch.tensor([1.0, float("nan")]))


def test_int4_pack_unpack_round_trip_and_errors():
    codes = torch.arange(-8, 8, dtype=torch.int8).reshape(2, 8)
    packed = pack_int4(codes)
    assert packed.dtype == torch.uint8 and packed.shape == (2, 4)
    assert packed[0, 0].item() == (-8 + 8) | ((-7 + 8) << 4)  # low nibble first
    assert torch.equal(unpack_int4(packed, 8), codes)
    assert torch.equal(unpack_int4(pack_int4(codes[:, :7]), 7), codes[:, :7])  # odd length: padded
    with pytest.raises(ValueError, match=r"4-bit codes in \[-8, 7\], got values in \[0, 9\]"):
        pack_int4(torch.tensor([0, 9]))
    with pytest.raises(ValueError, match=r"last_dim=9 needs ceil\(last_dim / 2\) = 5 bytes"):
        unpack_int4(packed, 9)


def test_float16_at_its_maximum_dequantizes_finite():
    # the float16 scale 65504 / 127 rounds up to 516, and 127 * 516 = 65532 would round to inf in float16
    x = torch.tensor([65504.0, -65504.0, 1.0]).half()
    for bits in (8, 4):
        x_hat = quantize_absmax(x, bits).dequantize()
        assert torch.isfinite(x_hat).all(), x_hat
        assert x_hat[0] == 65504 and x_hat[1] == -65504
    from attn_lib.kv_cache import QuantizedKVCache

    kv = x.reshape(1, 1, 1, 3)
    keys, values = QuantizedKVCache().update(kv, kv)
    assert torch.isfinite(keys).all() and torch.isfinite(values).all()
