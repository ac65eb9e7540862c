"""Absmax quantization of the KV cache to 8 or 4 bits, and how far the result is from the original (notebook 08).

Store each cached key and value as a small integer code with one scale per token (or per channel)::

    scale = max|x| / qmax      code = round(x / scale) in [-qmax, qmax]      x̂ = code · scale

with qmax = 2^(bits-1) - 1 (127 for 8 bits, 7 for 4 bits): symmetric absmax ("round-to-nearest")
quantization as in Dettmers et al. 2022 ("LLM.int8()", section 3.1), applied to keys and values as
in Liu et al. 2024 ("KIVI", section 3). 4-bit codes are packed two per byte. :class:`QuantizedTensor`
holds codes and scales; :func:`quantize_absmax` makes one, :func:`quantize_kv` picks the dim
(per token or per channel), :func:`fake_quantize_kv` quantizes and dequantizes (what attention then
reads), :func:`relative_error` measures the damage. The cache that stores quantized keys and values
is :class:`attn_lib.kv_cache.QuantizedKVCache`. Shapes follow the legend of :mod:`attn_lib.attention`
(B, Hkv, S, E = head_dim). tests/test_quantization.py derives every expected value by hand.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from attn_lib._checks import (check_choice, check_dtype, check_finite, check_int, check_same_device,
                              check_tensor, shape_of)

__all__ = ["QuantizedTensor", "quantize_absmax", "quantize_kv", "fake_quantize_kv", "relative_error",
           "pack_int4", "unpack_int4"]

_QMAX = {8: 127, 4: 7}


def pack_int4(q: torch.Tensor) -> torch.Tensor:
    """int8 codes in [-8, 7] (..., D) -> uint8 (..., ceil(D/2)), two codes per byte, low nibble first.

    Each code is offset by 8 to [0, 15]; an odd D is padded with the code of 0. The inverse is
    :func:`unpack_int4`. (Same nibble order as bitsandbytes' and PyTorch's ``torch.uint4x2``-style packing.)

    Raises:
        TypeError: q is not an integer tensor. ValueError: a code outside [-8, 7].
    """
    check_tensor("q", q, min_ndim=1)
    if q.is_floating_point() or q.dtype == torch.bool:
        raise TypeError(f"q must be an integer tensor of 4-bit codes, got dtype {q.dtype}")
    if q.numel() and (int(q.min()) < -8 or int(q.max()) > 7):
        raise ValueError(f"q must hold 4-bit codes in [-8, 7], got values in [{int(q.min())}, {int(q.max())}]")
    u = (q.to(torch.int16) + 8).to(torch.uint8)  # [-8, 7] -> [0, 15]
    if u.shape[-1] % 2:
        u = torch.nn.functional.pad(u, (0, 1), value=8)  # pad with the code of 0
    return u[..., 0::2] | (u[..., 1::2] << 4)


def unpack_int4(packed: torch.Tensor, last_dim: int) -> torch.Tensor:
    """uint8 (..., ceil(D/2)) from :func:`pack_int4` -> int8 codes (..., D) in [-8, 7], D = ``last_dim``.

    Raises:
        TypeError: packed is not a uint8 tensor; last_dim not an int.
        ValueError: last_dim does not fit the packed size (ceil(last_dim / 2) must equal its last dim).

    Source: the course's own nibble layout (low nibble first), the inverse of :func:`pack_int4`.
    """
    check_tensor("packed", packed, min_ndim=1)
    if packed.dtype != torch.uint8:
        raise TypeError(f"packed must be a uint8 tensor (two 4-bit codes per byte), got dtype {packed.dtype}")
    check_int("last_dim", last_dim, minimum=0)
    if (last_dim + 1) // 2 != packed.shape[-1]:
        raise ValueError(f"last_dim={last_dim} needs ceil(last_dim / 2) = {(last_dim + 1) // 2} bytes per row, "
                         f"but packed has shape {shape_of(packed)}")
    lo = packed & 0x0F
    hi = packed >> 4
    u = torch.stack((lo, hi), dim=-1).flatten(-2)[..., :last_dim]  # (..., 2·ceil(D/2)) -> (..., D)
    return u.to(torch.int8) - 8


@dataclass
class QuantizedTensor:
    """A tensor stored as ``bits``-bit integers with one absmax scale per slice along ``dim``.

    Attributes:
        data: int8 codes (bits=8), or uint8 with two 4-bit codes per byte (bits=4, packed along the last dim).
        scale: the scales, the original shape with ``dim`` reduced to size 1, dtype ``scale_dtype``.
        bits: 8 or 4.
        dim: the dim whose entries share a scale (the absmax is taken over it), negative index.
        shape: the original shape. dtype: the original dtype (what :meth:`dequantize` returns).

    For keys (B, Hkv, S, E) quantized per token (``dim=-1``) the scales are (B, Hkv, S, 1); per channel
    (``dim=-2``), (B, Hkv, 1, E).

    Raises:
        Nothing of its own: built by :func:`quantize_absmax` (which checks its inputs), not by hand.

    Source: absmax quantization, Dettmers et al. 2022 ("LLM.int8()", §3.1).
    """

    data: torch.Tensor
    scale: torch.Tensor
    bits: int
    dim: int
    shape: torch.Size
    dtype: torch.dtype

    def codes(self) -> torch.Tensor:
        """The integer codes as int8, in the original shape; in [-127, 127] (8 bits) or [-7, 7] (4 bits)."""
        if self.bits == 4:
            return unpack_int4(self.data, self.shape[-1])
        return self.data

    def dequantize(self) -> torch.Tensor:
        """x̂ = code × scale, computed in float32 (float64 for float64), in the original dtype and shape.

        The stored scale is rounded up, so qmax × scale can pass max|x| by a hair: for float16's largest value
        65504, 127 × 516 = 65532 would round to inf. x̂ is clamped to the original dtype's finite range, which
        only moves it towards x (|x| never exceeds that range).
        """
        work = torch.float64 if self.dtype == torch.float64 else torch.float32
        x_hat = self.codes().to(work) * self.scale.to(work)
        big = torch.finfo(self.dtype).max
        return x_hat.clamp(-big, big).to(self.dtype)

    def nbytes(self) -> int:
        """Bytes of the stored codes plus the scales."""
        return self.data.numel() * self.data.element_size() + self.scale.numel() * self.scale.element_size()


def quantize_absmax(x: torch.Tensor, bits: int = 8, *, dim: int = -1, scale_dtype: torch.dtype = torch.float16) -> QuantizedTensor:
    """Symmetric absmax quantization to ``bits``-bit integers, one scale per slice along ``dim``.

    scale = max|x| / qmax over ``dim`` (qmax = 2^(bits-1) - 1: 127 for 8 bits, 7 for 4 bits), rounded
    up to ``scale_dtype``; code = round(x / scale), in [-qmax, qmax]; x̂ = code × scale.
    Each element's error |x - x̂| is at most scale / 2 (round to nearest; the scale is rounded up so
    nothing clips), so the error of a slice
    is set by its largest value: one outlier coarsens everything that shares its scale. A slice of
    zeros gets scale 1 and codes 0 (exact).

    Args:
        x: floating tensor of any shape, e.g. keys (B, Hkv, S, E).
        bits: 8 or 4. 4-bit codes are packed two per byte along the last dim.
        dim: the dim reduced for the absmax; entries along it share one scale.
        scale_dtype: floating dtype (or its name, "float16") of the stored scales (float16 by default,
            like most KV-cache quantizers).

    Returns:
        a :class:`QuantizedTensor` (codes int8, or uint8 packed for 4 bits; scales of ``scale_dtype``).

    Raises:
        TypeError: x is not a floating tensor; bits or dim not an int; scale_dtype not a dtype or its name.
        ValueError: bits not 8 or 4; dim out of range; x empty along dim; x contains NaN or inf (they would
            poison the scale); scale_dtype an integer dtype; a scale overflows ``scale_dtype`` or is too
            small for it (values near 1e-10 in float16) -- the message says to pass float32.

    Source: Dettmers et al. 2022 ("LLM.int8()", §3.1, absmax quantization).
    """
    check_tensor("x", x, floating=True, min_ndim=1)
    check_choice("bits", bits, (8, 4))
    check_int("dim", dim, minimum=-x.dim(), maximum=x.dim() - 1)
    scale_dtype = check_dtype("scale_dtype", scale_dtype)
    if x.shape[dim] == 0:
        raise ValueError(f"x must have at least one entry along dim={dim} to take its absmax, got shape {shape_of(x)}")
    check_finite("x", x)
    dim = dim - x.dim() if dim >= 0 else dim
    qmax = _QMAX[bits]
    work = x.to(torch.float64 if x.dtype == torch.float64 else torch.float32)
    exact = work.abs().amax(dim=dim, keepdim=True) / qmax
    scale = exact.to(scale_dtype)
    # round the stored scale *up* (to the next representable value) so that |x| / scale <= qmax: no value clips
    low = scale.to(work.dtype) < exact
    scale = torch.where(low, torch.nextafter(scale, torch.full_like(scale, float("inf"))), scale)
    if not torch.isfinite(scale).all():
        raise ValueError(
            f"max|x| = {work.abs().max().item():.4g} overflows {scale_dtype} scales; pass scale_dtype=torch.float32"
        )
    # a scale deep below scale_dtype's normal range keeps few significant bits: 1e-10 / 127 in float16
    # rounds up to 6e-8 and every code becomes 0. Refuse once the stored scale is over twice the exact
    # one (the codes would use less than half their range: more than one bit lost) instead of returning zeros.
    coarse = (exact > 0) & (scale.to(work.dtype) > 2 * exact)
    if bool(coarse.any()):
        small = float(work.abs().amax(dim=dim, keepdim=True)[coarse].min())
        raise ValueError(
            f"max|x| = {small:.4g} of a slice along dim={dim} is too small for {scale_dtype} scales "
            f"(smallest normal {torch.finfo(scale_dtype).tiny:.3g} per step); pass scale_dtype=torch.float32"
        )
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))  # all-zero slice: scale 1, codes 0
    codes = torch.round(work / scale.to(work.dtype)).clamp(-qmax, qmax).to(torch.int8)
    data = pack_int4(codes) if bits == 4 else codes
    return QuantizedTensor(data=data, scale=scale, bits=bits, dim=dim, shape=x.shape, dtype=x.dtype)


_PER = {"token": -1, "channel": -2}


def quantize_kv(x: torch.Tensor, bits: int = 8, *, per: str = "token", scale_dtype: torch.dtype = torch.float16) -> QuantizedTensor:
    """Quantize cached keys or values (..., S, D) with absmax scales per token or per channel.

    - ``per="token"``: one scale per token and head (absmax over the D = head_dim channels of that
      token). A new token is quantized on its own, so a growing cache never re-quantizes the past;
      this is what :class:`QuantizedKVCache` uses.
    - ``per="channel"``: one scale per channel and head (absmax over the S tokens). Keys have a few
      channels with large values in every token (Liu et al. 2024, "KIVI"), so per-channel
      scales suit keys better; but the scale depends on all tokens, so streaming needs groups of
      tokens (KIVI keeps the newest tokens in full precision until a group is full).

    Args:
        x: (..., S, D) floating tensor, e.g. (B, Hkv, S, head_dim).
        bits: 8 or 4. per: "token" or "channel". scale_dtype: floating dtype of the scales, or its name.

    Returns:
        a :class:`QuantizedTensor` of x's shape and dtype.

    Raises:
        TypeError: x not a floating tensor, per not a str.
        ValueError: ``per`` unknown, x with fewer than 2 dims, head_dim (or S) = 0, and what
            :func:`quantize_absmax` raises (scale_dtype=torch.int8, values too small for float16 scales).
    """
    check_choice("per", per, tuple(_PER))
    check_tensor("x", x, floating=True, min_ndim=2)
    return quantize_absmax(x, bits, dim=_PER[per], scale_dtype=scale_dtype)


def fake_quantize_kv(x: torch.Tensor, bits: int = 8, *, per: str = "token") -> torch.Tensor:
    """``quantize_kv(x, bits, per=per).dequantize()``: what attention sees when reading a quantized cache.

    x (..., S, E) floating -> same shape and dtype. ``per="token"`` shares a scale along E, ``"channel"`` along S.

    Raises:
        TypeError / ValueError: what :func:`quantize_kv` raises (x not a finite floating tensor, bits not 8 or 4,
        ``per`` not "token" or "channel").

    Source: simulated ("fake") quantization; per-channel keys and per-token values as in Liu et al. 2024 (KIVI, §3).
    """
    return quantize_kv(x, bits, per=per).dequantize()


def relative_error(approx: torch.Tensor, exact: torch.Tensor) -> float:
    """‖approx - exact‖ / ‖exact‖ (Frobenius norms, computed in float64), e.g. of an attention output.

    Both tensors have the same shape (any, e.g. outputs (B, H, L, Ev)), floating dtypes, finite values; the result is
    a Python float. Against an all-zero
    ``exact`` the ratio is undefined: 0.0 when ``approx`` is all zero too, else a ValueError (compare
    absolute errors instead). ``numpy.linalg.norm(a - b) / numpy.linalg.norm(b)`` on the same values.

    Raises:
        TypeError: not tensors, or not floating.
        ValueError: the shapes differ (naming both); NaN or inf; an all-zero ``exact`` with a non-zero ``approx``;
            tensors on different devices.

    Source: the relative Frobenius error, ``numpy.linalg.norm``'s default (Golub & Van Loan, Matrix Computations, §2.3).
    """
    check_tensor("approx", approx, floating=True)
    check_tensor("exact", exact, floating=True)
    if approx.shape != exact.shape:
        raise ValueError(f"approx and exact must have the same shape, got approx {shape_of(approx)} "
                         f"and exact {shape_of(exact)}")
    check_same_device(approx=approx, exact=exact)
    check_finite("approx", approx)
    check_finite("exact", exact)
    exact64 = exact.detach().to(torch.float64)
    diff = (approx.detach().to(torch.float64) - exact64).norm()
    ref = exact64.norm()
    if ref == 0:
        if diff == 0:
            return 0.0
        raise ValueError(f"exact is all zero, so the relative error is undefined (‖approx - exact‖ = {float(diff):.4g}); "
                         f"expected a non-zero reference; compare the absolute error instead")
    return float(diff / ref)
