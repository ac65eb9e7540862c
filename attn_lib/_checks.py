"""Argument checks shared by every public function of attn_lib: one style of error everywhere.

The rule (the developers' guide): a **TypeError** means a wrong type, a **ValueError** a wrong value,
and the message names the argument, the value received and what was expected::

    num_heads must be an int >= 1, got 0
    is_causal must be a bool, got str 'yes'
    device must be a torch.device or a string such as 'cpu' or 'cuda:0', got 'gpu'

Each helper returns the (possibly normalised) value, so a caller writes ``n = check_int("n", n, minimum=1)``.
Shape letters in messages follow the legend of :mod:`attn_lib.attention` (B, H, Hkv, L, S, E, Ev).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

__all__ = [
    "check_int", "check_bool", "check_number", "check_choice", "check_callable", "check_tensor",
    "check_finite", "check_dtype", "check_device", "check_same_device", "check_same_dtype",
    "check_attn_mask", "check_qkv", "shape_of", "all_finite", "check_heads", "scores_overflow_error",
    "check_token_ids", "check_padding_mask", "check_scale", "check_rope_base", "check_fits_dtype", "check_on_device",
    "claim_cache",
]

# The integer dtypes accepted for token ids (what nn.Embedding takes after .long()).
TOKEN_ID_DTYPES = (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8)


def shape_of(t) -> tuple[int, ...]:
    """``tuple(t.shape)``: shapes print as ``(2, 4, 8)`` in messages, not ``torch.Size([2, 4, 8])``."""
    return tuple(t.shape)


def _got(value) -> str:
    """``"int 3"``, ``"str 'yes'"``, ``"Tensor of shape (2, 3)"``: what a message says it received."""
    if isinstance(value, torch.Tensor):
        return f"Tensor of shape {shape_of(value)} and dtype {value.dtype}"
    text = repr(value)
    if len(text) > 80:
        text = text[:77] + "..."
    return f"{type(value).__name__} {text}"


def _bounds(minimum, maximum) -> str:
    if minimum is not None and maximum is not None:
        return f" in [{minimum}, {maximum}]"
    if minimum is not None:
        return f" >= {minimum}"
    if maximum is not None:
        return f" <= {maximum}"
    return ""


def check_int(name: str, value, *, minimum: int | None = None, maximum: int | None = None) -> int:
    """Return ``value`` if it is an int (not a bool) within ``[minimum, maximum]``.

    Raises:
        TypeError: not an int (``True``, ``2.0`` and ``"2"`` are refused).
        ValueError: outside the bounds.
    """
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int{_bounds(minimum, maximum)}, got {_got(value)}")
    if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
        raise ValueError(f"{name} must be an int{_bounds(minimum, maximum)}, got {value}")
    return int(value)


def check_bool(name: str, value) -> bool:
    """Return ``value`` if it is a bool. ``1``, ``"yes"`` and a one-element tensor raise TypeError."""
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool (True or False), got {_got(value)}")
    return value


def check_number(name: str, value, *, minimum: float | None = None, maximum: float | None = None,
                 finite: bool = True, allow_none: bool = False, positive: bool = False) -> float | None:
    """Return ``float(value)`` for an int or float (not a bool) within the bounds; ``None`` if allowed.

    ``positive=True`` also refuses 0 (a size in bytes, a cap, a scale: > 0, not >= 0).

    Raises:
        TypeError: not a real number (a bool, a string, a tensor).
        ValueError: NaN, an infinity when ``finite``, outside ``[minimum, maximum]``, or <= 0 when ``positive``.
    """
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        what = "None or a number" if allow_none else "a number"
        raise TypeError(f"{name} must be {what}{_bounds(minimum, maximum)}, got {_got(value)}")
    value = float(value)
    if math.isnan(value) or (finite and math.isinf(value)):
        raise ValueError(f"{name} must be a finite number{_bounds(minimum, maximum)}, got {value}")
    if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
        raise ValueError(f"{name} must be a number{_bounds(minimum, maximum)}, got {value}")
    if positive and value <= 0:
        raise ValueError(f"{name} must be a number > 0, got {value}")
    return value


def check_choice(name: str, value, choices: Sequence) -> object:
    """Return ``value`` if it is one of ``choices`` (compared with ==).

    Raises:
        TypeError: of another type than every choice (e.g. an int where strings are expected).
        ValueError: of the right type but not a choice.
    """
    for choice in choices:
        if type(value) is type(choice) and value == choice:
            return value
    options = ", ".join(repr(c) for c in choices)
    if not any(type(value) is type(c) for c in choices):
        raise TypeError(f"{name} must be one of {options}, got {_got(value)}")
    raise ValueError(f"{name} must be one of {options}, got {value!r}")


def check_callable(name: str, value):
    """Return ``value`` if it is callable (a function, a lambda, a class).

    Raises:
        TypeError: not callable, e.g. the *result* of a call passed where the function was expected.
    """
    if not callable(value):
        raise TypeError(f"{name} must be a function (callable), got {_got(value)}; pass the function itself, "
                        f"without calling it: f, not f(...)")
    return value


def check_tensor(name: str, value, *, floating: bool = False, ndim: int | Sequence[int] | None = None,
                 min_ndim: int | None = None) -> torch.Tensor:
    """Return ``value`` if it is a tensor with the asked dtype kind and number of dims.

    Raises:
        TypeError: not a torch.Tensor, or not floating point when ``floating``.
        ValueError: the number of dims is not ``ndim`` (one int or a set of allowed ones) or below ``min_ndim``.
    """
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {_got(value)}")
    if floating and not value.is_floating_point():
        raise TypeError(f"{name} must have a floating dtype (float16, bfloat16, float32 or float64), got {value.dtype}")
    if ndim is not None:
        allowed = (ndim,) if isinstance(ndim, int) else tuple(ndim)
        if value.dim() not in allowed:
            want = " or ".join(str(n) for n in allowed)
            raise ValueError(f"{name} must have {want} dims, got shape {shape_of(value)}")
    if min_ndim is not None and value.dim() < min_ndim:
        raise ValueError(f"{name} must have at least {min_ndim} dims, got shape {shape_of(value)}")
    return value


def all_finite(tensor: torch.Tensor) -> bool:
    """True when a floating tensor holds no NaN and no infinity.

    Fast path: a sum of finite values is finite (NaN and inf propagate), and one sum costs ~30x less than
    ``torch.isfinite(t).all()`` on the small tensors of the course. Only when the sum is not finite (an inf
    or NaN inside, or finite values whose sum overflows) is every element tested. The sum runs in the
    tensor's own dtype: asking for a float64 sum of a float32 tensor makes torch convert a full float64 copy
    first, which doubled the peak memory of a long ``tiled_attention`` call (measured: 32 MiB instead of 22
    MiB at 8192 tokens, docs/benchmarks.md). An overflowing sum only costs the exact test.
    """
    if tensor.numel() == 0:
        return True
    total = float(tensor.detach().sum())
    if math.isfinite(total):
        return True
    return bool(torch.isfinite(tensor).all())


def check_finite(name: str, tensor: torch.Tensor, *, allow_neg_inf: bool = False) -> torch.Tensor:
    """Return ``tensor`` if it holds no NaN and no infinity (``-inf`` allowed when ``allow_neg_inf``).

    Attention would spread one NaN to a whole output row (and +inf in a score makes inf - inf = NaN),
    so attn_lib refuses them at the door instead of returning a silent NaN.

    Raises:
        ValueError: naming how many values are NaN / +inf / -inf and the first index of one; a floating tensor
            on the meta device (no values to check or compute with).
    """
    if tensor.is_floating_point() and tensor.device.type == "meta":
        raise ValueError(f"{name} is on the meta device, which holds shapes but no values, got a Tensor of shape "
                         f"{shape_of(tensor)}; expected a tensor with values (on 'cpu' or 'cuda')")
    if not tensor.is_floating_point() or all_finite(tensor):
        return tensor  # the common case costs one sum; the details below only when something is off
    bad = torch.isnan(tensor) | (tensor == float("inf"))
    if not allow_neg_inf:
        bad = bad | (tensor == float("-inf"))
    if bool(bad.any()):
        first = tuple(int(i) for i in bad.nonzero()[0])
        n_nan, n_pos = int(torch.isnan(tensor).sum()), int((tensor == float("inf")).sum())
        n_neg = int((tensor == float("-inf")).sum())
        parts = [f"{what} ({n} value{'s' if n > 1 else ''})" for n, what in
                 ((n_nan, "NaN"), (n_pos, "+inf"), (n_neg, "-inf")) if n]
        expected = "finite values or -inf (blocked)" if allow_neg_inf else "finite values"
        raise ValueError(f"{name} contains {' and '.join(parts)}, first at index {first} of shape "
                         f"{shape_of(tensor)}; expected {expected}")
    return tensor


_DTYPE_NAMES = {
    "float16": torch.float16, "half": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32,
    "float": torch.float32, "float64": torch.float64, "double": torch.float64,
}


def check_dtype(name: str, value, *, floating: bool = True, allow_none: bool = False) -> torch.dtype | None:
    """Return a ``torch.dtype``: a dtype itself, or its name as a string (``"float32"``, ``"torch.float16"``).

    Raises:
        TypeError: neither a torch.dtype nor a string.
        ValueError: a string that names no floating dtype, or an integer/bool dtype when ``floating``
            (an integer dtype would silently truncate the values).
    """
    if value is None and allow_none:
        return None
    if isinstance(value, str):
        key = value.removeprefix("torch.")
        if key not in _DTYPE_NAMES:
            raise ValueError(f"{name} must name a floating dtype such as 'float32' or torch.float32, got {value!r}")
        value = _DTYPE_NAMES[key]
    if not isinstance(value, torch.dtype):
        raise TypeError(f"{name} must be a torch.dtype such as torch.float32, got {_got(value)}")
    if floating and not value.is_floating_point:
        raise ValueError(f"{name} must be a floating dtype (torch.float16, bfloat16, float32 or float64), got {value}; "
                         f"an integer dtype would truncate the values")
    return value


def check_device(name: str, value, *, allow_none: bool = True) -> torch.device | None:
    """Return a ``torch.device`` (or None when allowed) that exists on this machine.

    Raises:
        TypeError: neither a string nor a torch.device.
        ValueError: a string torch does not read as a device (``"gpu"``), or a CUDA device on a machine
            with no CUDA GPU (the message says to use the CPU).
    """
    if value is None and allow_none:
        return None
    if isinstance(value, str):
        try:
            value = torch.device(value)
        except RuntimeError:
            raise ValueError(f"{name} must be a device such as 'cpu', 'cuda' or 'cuda:0', got {value!r}") from None
    if not isinstance(value, torch.device):
        raise TypeError(f"{name} must be a torch.device or a string such as 'cpu' or 'cuda:0', got {_got(value)}")
    if value.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"{name}={str(value)!r}, but no CUDA GPU is available on this machine "
                         f"(torch.cuda.is_available() is False): use device='cpu'")
    return value


def check_same_device(**tensors) -> torch.device:
    """All tensors (None entries skipped) on one device; returns it.

    Raises:
        ValueError: naming each argument and its device.
    """
    present = {k: t for k, t in tensors.items() if t is not None}
    devices = {t.device for t in present.values()}
    if len(devices) > 1:
        where = ", ".join(f"{k} on {t.device}" for k, t in present.items())
        raise ValueError(f"{', '.join(present)} must be on one device, got {where}; move them with .to(device)")
    return next(iter(devices)) if devices else torch.device("cpu")


# check_same_dtype mirrors check_same_device line for line on purpose (duplicates lists the pair): one
# is about .device and a ValueError, the other about .dtype and a TypeError; a shared helper taking an
# attribute name and an error class would be harder to read than the two plain loops.
def check_same_dtype(**tensors) -> torch.dtype:
    """All tensors (None entries skipped) of one dtype; returns it.

    Raises:
        TypeError: naming each argument and its dtype.
    """
    present = {k: t for k, t in tensors.items() if t is not None}
    dtypes = {t.dtype for t in present.values()}
    if len(dtypes) > 1:
        which = ", ".join(f"{k} {t.dtype}" for k, t in present.items())
        raise TypeError(f"{', '.join(present)} must share one dtype, got {which}")
    return next(iter(dtypes))


def check_attn_mask(attn_mask, scores_shape: Sequence[int], *, name: str = "attn_mask",
                    allow_float: bool = True) -> torch.Tensor | None:
    """Check a mask against the scores' shape (..., L, S); returns it unchanged (or None).

    A bool mask: True = may attend. A float mask is added to the scores: finite values or -inf (blocked);
    NaN and +inf are refused (+inf would make inf - inf = NaN in the softmax).

    Raises:
        TypeError: not a tensor; neither bool nor (when ``allow_float``) floating.
        ValueError: NaN or +inf in a float mask; a shape that does not broadcast to ``scores_shape``.
    """
    if attn_mask is None:
        return None
    if not isinstance(attn_mask, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor or None, got {_got(attn_mask)}")
    if attn_mask.dtype != torch.bool and not (allow_float and attn_mask.is_floating_point()):
        kinds = "bool (True = may attend) or floating (added to the scores)" if allow_float else \
            "bool (True = may attend)"
        raise TypeError(f"{name} must be {kinds}, got dtype {attn_mask.dtype}")
    if attn_mask.is_floating_point():
        check_finite(name, attn_mask, allow_neg_inf=True)
    scores_shape = tuple(scores_shape)
    try:
        full = tuple(torch.broadcast_shapes(attn_mask.shape, scores_shape))
    except RuntimeError:
        full = None
    if full != scores_shape:
        L, S = scores_shape[-2], scores_shape[-1]
        raise ValueError(f"{name} of shape {shape_of(attn_mask)} must broadcast to the scores' shape {scores_shape} "
                         f"(..., L={L}, S={S})")
    return attn_mask


def check_qkv(query, key, value, *, enable_gqa: bool = False, min_ndim: int = 2) -> None:
    """The checks every attention function shares: types, dtypes, devices, finiteness and shapes.

    query (..., L, E), key (..., S, E), value (..., S, Ev); with ``enable_gqa``, key/value have Hkv heads at
    dim -3 and query Hq, a multiple of Hkv.

    Raises:
        TypeError: not tensors, not floating, or of different dtypes.
        ValueError: fewer than ``min_ndim`` dims; E = 0; S = 0; NaN or infinity in an input; E or S or the
            batch dims disagree; Hq not a multiple of Hkv with ``enable_gqa``; tensors on different devices.
    """
    for n, t in (("query", query), ("key", key), ("value", value)):
        check_tensor(n, t, floating=True, min_ndim=min_ndim)
    check_same_dtype(query=query, key=key, value=value)
    check_same_device(query=query, key=key, value=value)
    if query.shape[-1] == 0:
        raise ValueError(f"query and key need a last dim E >= 1 (head_dim), got query shape {shape_of(query)}")
    if key.shape[-2] == 0:
        raise ValueError(f"key and value need at least one position (S >= 1) for the softmax over keys, "
                         f"got key shape {shape_of(key)}")
    for n, t in (("query", query), ("key", key), ("value", value)):
        check_finite(n, t)
    if query.shape[-1] != key.shape[-1]:
        raise ValueError(f"query and key must have the same last dim E: query shape {shape_of(query)} "
                         f"(E={query.shape[-1]}), key shape {shape_of(key)} (E={key.shape[-1]})")
    if key.shape[-2] != value.shape[-2]:
        raise ValueError(f"key and value must have the same number of positions S (dim -2): key shape "
                         f"{shape_of(key)}, value shape {shape_of(value)}")
    if key.shape[:-2] != value.shape[:-2]:
        raise ValueError(f"key and value must have the same batch/head dims: key shape {shape_of(key)}, "
                         f"value shape {shape_of(value)}")
    if enable_gqa:
        if query.dim() < 3 or key.dim() < 3:
            raise ValueError("enable_gqa=True needs a heads dim at -3: query (..., H, L, E) and key/value "
                             f"(..., Hkv, S, E); got query shape {shape_of(query)}, key shape {shape_of(key)}")
        hq, hkv = query.shape[-3], key.shape[-3]
        if (hkv == 0 and hq != 0) or (hkv != 0 and hq % hkv != 0):
            raise ValueError(f"enable_gqa=True needs the number of query heads H={hq} to be a multiple of the number "
                             f"of key/value heads Hkv={hkv} (query shape {shape_of(query)}, key shape {shape_of(key)})")


def scores_overflow_error(query: torch.Tensor, key: torch.Tensor, scale: float, dtype: torch.dtype) -> ValueError:
    """The one error for finite query/key whose scores scale * query @ keyᵀ overflow ``dtype``.

    Raised (not returned as NaN) by scaled_dot_product_attention, tiled_attention and flash_attention alike.
    """
    E = query.shape[-1]
    big = max(float(query.detach().abs().amax()), float(key.detach().abs().amax()))
    return ValueError(
        f"the scores query @ keyᵀ * scale overflow {dtype} (max {torch.finfo(dtype).max:.3g}): the largest "
        f"|query| or |key| entry is {big:.3g} with E={E} and scale={scale:.3g}; expected scores of a moderate "
        f"scale -- normalise the inputs (e.g. LayerNorm) or compute in float64"
    )


def check_heads(num_heads, num_kv_heads) -> int:
    """Validate a pair of head counts; return the group size G = num_heads // num_kv_heads.

    Raises:
        TypeError: a count is not an int.
        ValueError: a count < 1, or num_kv_heads does not divide num_heads (the message lists the divisors).
    """
    check_int("num_heads", num_heads, minimum=1)
    check_int("num_kv_heads", num_kv_heads, minimum=1)
    if num_heads % num_kv_heads:
        divisors = [d for d in range(1, num_heads + 1) if num_heads % d == 0]
        raise ValueError(
            f"num_kv_heads must divide num_heads={num_heads}, got num_kv_heads={num_kv_heads}; "
            f"possible values: {divisors}"
        )
    return num_heads // num_kv_heads


def check_head_dim(d_model, num_heads, *, name: str = "d_model", hint: str = "") -> int:
    """Validate ``d_model`` features split into ``num_heads`` heads; return head_dim E = d_model // num_heads.

    The one head-divisibility rule (mha, hf, the model blocks). ``name`` is what the message calls d_model
    (``"the last dim of x"`` for :func:`attn_lib.mha.split_heads`); ``hint`` is appended to the ValueError.

    Raises:
        TypeError: a count is not an int.
        ValueError: a count < 1, or num_heads does not divide d_model (the message gives the quotient).
    """
    check_int(name, d_model, minimum=1)
    check_int("num_heads", num_heads, minimum=1)
    if d_model % num_heads:
        raise ValueError(
            f"{name} ({d_model}) must be divisible by num_heads ({num_heads}): each head gets "
            f"{name} / num_heads features, and {d_model} / {num_heads} = {d_model / num_heads:.4g}{hint}"
        )
    return d_model // num_heads


def check_token_ids(name: str, ids, *, vocab_size: int, max_len: int | None = None) -> torch.Tensor:
    """Token ids (B, L): an integer tensor with 1 <= L (<= max_len) and every id in [0, vocab_size); returns int64.

    The one rule for token ids across attn_lib (the decoder LM, the encoder-decoder, the capstone).

    Raises:
        TypeError: not a tensor, or not one of the integer dtypes int64, int32, int16, int8, uint8.
        ValueError: not 2-D, L = 0, L > max_len, or ids outside the vocabulary (the message lists them); a tensor
            on the meta device (no values).
    """
    if not isinstance(ids, torch.Tensor):
        raise TypeError(f"{name} must be a (B, L) tensor of token ids, got {_got(ids)}")
    if ids.dtype not in TOKEN_ID_DTYPES:
        raise TypeError(f"{name} must hold integer token ids (int64, int32, int16, int8 or uint8), got dtype {ids.dtype}")
    if ids.dim() != 2 or ids.shape[1] == 0:
        raise ValueError(f"{name} must be (B, L) token ids with L >= 1, got shape {shape_of(ids)}")
    if ids.device.type == "meta":
        raise ValueError(f"{name} is on the meta device, which holds shapes but no values, got shape {shape_of(ids)}; "
                         f"expected token ids with values (on 'cpu' or 'cuda')")
    if max_len is not None and ids.shape[1] > max_len:
        raise ValueError(f"{name} has L={ids.shape[1]} tokens, more than the model's max_len={max_len}")
    if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= vocab_size):
        bad = ids[(ids < 0) | (ids >= vocab_size)].unique()[:8].tolist()
        raise ValueError(f"{name} holds ids {bad} outside the vocabulary 0..{vocab_size - 1} (vocab_size={vocab_size})")
    return ids.long()


def check_padding_mask(name: str, mask, shape: Sequence[int] | None = None) -> torch.Tensor:
    """A padding mask (B, S), True = real token: bool, or 0/1 integers like HuggingFace's attention_mask.

    The one rule for padding masks across attn_lib; returns the mask as bool. ``shape``: the (B, S) it must have.

    Raises:
        TypeError: not a tensor; a floating or complex dtype.
        ValueError: not 2-D; integer values other than 0 and 1; a shape other than ``shape``.
    """
    if not isinstance(mask, torch.Tensor):
        raise TypeError(f"{name} must be a (B, S) bool tensor (True = real token), got {_got(mask)}")
    if mask.dtype.is_floating_point or mask.dtype.is_complex:
        raise TypeError(f"{name} must be bool (True = real token) or 0/1 integers, got dtype {mask.dtype}")
    if mask.dim() != 2:
        raise ValueError(f"{name} must be (B, S), one row of key flags per sequence, got shape {shape_of(mask)}; "
                         f"a (B, L, S) or (L, S) mask is an attn_mask, not a padding mask")
    if mask.dtype != torch.bool:
        bad = (mask != 0) & (mask != 1)
        if bool(bad.any()):
            values = sorted({int(v) for v in mask[bad].flatten()[:5].tolist()})
            raise ValueError(f"{name} of integers must hold only 0 (padding) and 1 (real token), like HuggingFace's "
                             f"attention_mask; got the values {values} (shape {shape_of(mask)})")
        mask = mask.bool()
    if shape is not None and tuple(mask.shape) != tuple(shape):
        raise ValueError(f"{name} must have shape (B, S) = {tuple(shape)}, got {shape_of(mask)}")
    return mask


def check_scale(scale, head_dim: int) -> float:
    """The softmax scale: None -> 1/sqrt(head_dim); else a finite number > 0 (the one rule of every attention).

    A scale <= 0 would flip or flatten the scores, which no attention layer means; torch's function accepts it,
    attn_lib refuses it everywhere alike (scaled_dot_product_attention, grouped_query_attention, tiled, flash).

    Raises:
        TypeError: not a number. ValueError: NaN, infinite, or <= 0.
    """
    if scale is None:
        return 1.0 / math.sqrt(head_dim)
    scale = check_number("scale", scale)
    if scale <= 0:
        raise ValueError(f"scale must be None or a finite number > 0 (default 1/sqrt(E)), got {scale!r}")
    return scale


def check_rope_base(rope_base, *, allow_none: bool = True) -> float | None:
    """RoPE's base (HF's rope_theta): None (no RoPE) where allowed, else a finite number > 1 (e.g. 10000.0).

    A base of 1 makes every frequency 1: the rotation no longer depends on the feature pair. The one rule of
    ``positional``, ``mha`` and ``models``.

    Raises:
        TypeError: not a number. ValueError: NaN, infinite, or <= 1.
    """
    if rope_base is None and allow_none:
        return None
    value = check_number("rope_base", rope_base)
    if value <= 1.0:
        raise ValueError(f"rope_base must be {'None or ' if allow_none else ''}a finite number > 1 "
                         f"(e.g. 10000.0), got {value}")
    return value


def check_fits_dtype(name: str, tensor: torch.Tensor, dtype: torch.dtype, *, allow_negative: bool = False) -> None:
    """Refuse a floating tensor whose finite values ``dtype`` cannot hold (they would become +-inf there).

    float64 sinks of 1e39 with a float32 query became inf in float32 and the output NaN. ``allow_negative``: huge
    negative values are fine (a float mask's -1e39 blocks, as -inf does).

    Raises:
        ValueError: naming the largest such value and the dtype's maximum.
    """
    if not tensor.is_floating_point() or tensor.numel() == 0 or torch.finfo(tensor.dtype).max <= torch.finfo(dtype).max:
        return
    vals = tensor.detach()[torch.isfinite(tensor.detach())]
    big = vals.clamp(min=0) if allow_negative else vals.abs()
    if big.numel() and float(big.max()) > torch.finfo(dtype).max:
        raise ValueError(f"{name} holds {float(big.max()):.3g}, more than {dtype} (the dtype the computation runs in) "
                         f"holds, {torch.finfo(dtype).max:.3g}; expected values of at most that size")


def check_on_device(name: str, tensor: torch.Tensor, device: torch.device, *, of: str = "the query") -> None:
    """Refuse a side tensor (mask, slopes, sinks, positions) that is not on ``device`` (the main input's).

    Raises:
        ValueError: naming both devices and the ``.to`` to call.
    """
    if tensor.device != device:
        raise ValueError(f"{name} must be on {of}'s device {device}, got {tensor.device}; move it with "
                         f".to({str(device)!r})")


def claim_cache(cache, owner, *, name: str = "cache") -> None:
    """One cache per layer: the first layer that fills ``cache`` owns it; another layer passing it is refused.

    Two layers sharing one cache object would each append their keys to the other's (silently wrong decoding).
    A cache that is empty again (``seq_len == 0``, e.g. after ``reset()``) may be claimed by a new layer.

    Raises:
        ValueError: ``cache`` already holds tokens of another layer.
    """
    import weakref

    ref = getattr(cache, "_attn_lib_owner", None)
    current = ref() if ref is not None else None
    if current is not None and current is not owner and getattr(cache, "seq_len", 0) > 0:
        raise ValueError(f"{name} already holds the keys of another layer ({type(current).__name__} at "
                         f"0x{id(current):x}); expected one cache object per layer (a list of new caches, one each)")
    try:
        cache._attn_lib_owner = weakref.ref(owner)
    except (AttributeError, TypeError):  # a cache class with __slots__: nothing to record
        pass


# ---------------------------------------------------------------------------------------------- added for issue 38
# (appended, not merged into __all__ above, so that parallel edits of this file do not collide)
__all__ += ["check_generator", "check_iterator"]


def check_generator(name: str, value) -> torch.Generator | None:
    """Return ``value`` if it is None or a ``torch.Generator`` (the random draws' source).

    Raises:
        TypeError: anything else, e.g. a seed (an int) where ``torch.Generator().manual_seed(seed)`` was meant.
    """
    if value is not None and not isinstance(value, torch.Generator):
        hint = f"; for a seed, pass torch.Generator().manual_seed({value})" if isinstance(value, int) else ""
        raise TypeError(f"{name} must be a torch.Generator or None, got {_got(value)}{hint}")
    return value


def check_iterator(name: str, value):
    """Return ``value`` if it is an iterator (``next(value)`` works), e.g. a generator of training batches.

    Raises:
        TypeError: not an iterator; for an iterable such as a list the message says to wrap it: ``iter(...)``.
    """
    if not hasattr(value, "__next__"):
        if hasattr(value, "__iter__") and hasattr(value, "__len__") and not isinstance(value, torch.Tensor):
            got = f"a {type(value).__name__} of {len(value)} items; wrap it: iter(your_{type(value).__name__})"
        else:
            got = _got(value)
        raise TypeError(f"{name} must be an iterator (next({name}) gives the next item), got {got}")
    return value
