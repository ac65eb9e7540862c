"""The checked problem every tiled attention path shares: arguments in, (N, G, L, E) views out.

:func:`attn_lib.tiled.tiled_attention` (PyTorch) and :func:`attn_lib.flash.flash_attention` (Triton) check
their arguments here, once, with the same rules, and allocate their outputs with the same helper; neither
reaches into the other's private names. Shape legend as :mod:`attn_lib.attention` (B, H, Hkv, L, S, E, Ev),
plus the loops' own: N = (batch elements) x Hkv row groups, G = H / Hkv query heads per key/value head.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from attn_lib._checks import (
    _got,
    check_attn_mask,
    check_bool,
    check_choice,
    check_finite,
    check_fits_dtype,
    check_int,
    check_on_device,
    check_number,
    check_qkv,
    check_scale,
    check_tensor,
    scores_overflow_error,
    shape_of,
)

CAUSAL_ALIGNS = ("top_left", "bottom_right")  # the values of masks.causal_mask's ``align``

# Default tiles on the CPU. The loop body is a handful of whole-tile tensor operations, so bigger tiles
# mean fewer Python-level steps; 256 x 512 float32 scores for 8 heads is 4 MiB, small next to the output
# at long lengths. Measured with `python -m attn_lib.course.bench cpu` (docs/benchmarks.md).
BLOCK_Q = 256
BLOCK_K = 512


# ----------------------------------------------------------------------------------------------
# argument checks shared with attn_lib.flash
# ----------------------------------------------------------------------------------------------
def _check_block(name: str, value) -> int:
    return check_int(name, value, minimum=1)


@dataclass(frozen=True)
class _Problem:
    """The checked arguments, with q/k/v viewed as q (N, G, L, E), k (N, S, E), v (N, S, Ev).

    N = (batch elements) x Hkv, G = H / Hkv query heads per key/value head (G = 1 without GQA);
    ``lead`` is query's shape without (L, E). ``mask`` is attn_mask broadcast (a view) to (*lead, L, S).
    ``slopes`` (N, G) float32/64 or None. ``offset`` = S - L for bottom-right causal, else 0.
    ``window`` (left, right) with -1 for unbounded (flash-attn's window_size; always bottom-right: query r at
    position r + S - L), ``softcap`` a positive float or None (off), ``sinks`` (N, G) in the accumulation dtype
    or None: the sink logit of each row group's query head.
    """

    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    lead: tuple
    mask: torch.Tensor | None
    slopes: torch.Tensor | None
    scale: float
    is_causal: bool
    offset: int
    window: tuple = (-1, -1)
    softcap: float | None = None
    sinks: torch.Tensor | None = None


def _check_window(window_size) -> tuple[int, int]:
    """flash-attn's ``window_size=(left, right)``: two ints, each -1 (unbounded) or >= 0."""
    if (not isinstance(window_size, (tuple, list)) or len(window_size) != 2
            or any(isinstance(w, bool) or not isinstance(w, int) for w in window_size)):
        raise TypeError(f"window_size must be a pair of ints (left, right), each -1 (unbounded) or >= 0, as "
                        f"flash-attn's window_size; got {_got(window_size)}")
    left, right = window_size
    if left < -1 or right < -1:
        raise ValueError(f"window_size must be (left, right) with each -1 (unbounded) or >= 0, got {tuple(window_size)}")
    return int(left), int(right)


def _clip_window(window: tuple[int, int], L: int, S: int) -> tuple[int, int]:
    """A side of L + S or more reaches past every key: the same mask as -1 (unbounded), and no int64/int32 overflow.

    (A side of 2**63 used to wrap around inside the Triton kernels and block every key.)
    """
    return tuple(-1 if w >= L + S else w for w in window)


def _check_softcap(softcap, dtype: torch.dtype = torch.float64) -> float | None:
    """flash-attn's ``softcap``: None or 0 = off, else a positive finite number that ``dtype`` holds as a normal number.

    ``dtype`` is the accumulation dtype (float32, or float64 for float64 inputs): a cap above its maximum becomes
    inf there (scores / inf = 0, then inf * 0 = NaN), and one below its smallest normal number rounds towards 0.
    """
    cap = check_number("softcap", softcap, minimum=0.0, allow_none=True)
    if not cap:
        return None
    info = torch.finfo(dtype)
    if not info.tiny <= cap <= info.max:
        raise ValueError(f"softcap must be None, 0 (off) or a number in [{info.tiny:.3g}, {info.max:.3g}] (what {dtype}, "
                         f"the dtype the scores are computed in, holds), got {cap:.3g}")
    return cap


def _check_side_tensor(name: str, t: torch.Tensor, query: torch.Tensor, dtype: torch.dtype) -> None:
    """A side tensor (mask, slopes, sinks) on query's device whose finite values ``dtype`` holds (not +-inf there).

    float64 sinks of 1e39 with a float32 query used to become inf in float32 and the output NaN.
    """
    check_on_device(name, t, query.device)
    check_fits_dtype(name, t, dtype, allow_negative=name == "attn_mask")  # a mask's -1e39 blocks, as -inf does


def _value_scale(value: torch.Tensor, n_keys: int) -> float:
    """A power of two c such that value / c cannot overflow the running sum of n_keys weighted values.

    The online softmax adds up to n_keys values, each times a weight <= 1, before it divides by the sum of the
    weights: values near float32's maximum (3e38) made a finite average come out inf. 1.0 in the common case;
    otherwise the caller attends over value / c (exact: a power of two) and multiplies the output by c.
    """
    if value.dtype not in (torch.float32, torch.float64) or value.numel() == 0:
        return 1.0
    largest = float(value.detach().abs().amax())
    if not 0.0 < largest < math.inf:  # zeros, or non-finite values (refused before; tests may let them through)
        return 1.0
    excess = math.log2(largest) + math.log2(max(n_keys, 1)) - math.log2(torch.finfo(value.dtype).max / 4)
    return 1.0 if excess <= 0 else 2.0 ** math.ceil(excess)  # in logs: float64's 1.7e308 * n_keys is inf


def _sink_rows(sinks, query, lead, n: int, G: int, hkv: int) -> torch.Tensor:
    """gpt-oss's ``sinks``: one logit per query head (H,) -> (N, G), the sink of each row group (differentiable)."""
    check_tensor("sinks", sinks, floating=True, ndim=1)
    H = lead[-1] if lead else 1
    if query.dim() < 3:
        raise ValueError(f"sinks need a query with a heads dim, (..., H, L, E), one sink logit per head; got query "
                         f"shape {shape_of(query)} (add the dim: query[None], key[None], value[None])")
    if sinks.shape[0] != H:
        raise ValueError(f"sinks must have shape (H,) = ({H},), one logit per query head as gpt-oss's attention "
                         f"takes, for a query (..., H, L, E); got shape {shape_of(sinks)} for query shape "
                         f"{shape_of(query)}")
    check_finite("sinks", sinks)
    rows = sinks.to(_acc_dtype(query.dtype))
    return rows.reshape(hkv, G).repeat(n // hkv if hkv else 0, 1)  # (H,) -> (N, G): head h = kv * G + g


def _prepare(query, key, value, attn_mask, is_causal, causal_align, scale, enable_gqa, alibi_slopes,
             *, window_size=(-1, -1), softcap=None, sinks=None, allow_float_mask: bool = True) -> _Problem:
    """Every check of tiled_attention / flash_attention, then the (N, G, L, E) views the loops use."""
    check_bool("is_causal", is_causal)
    check_choice("causal_align", causal_align, CAUSAL_ALIGNS)
    check_bool("enable_gqa", enable_gqa)
    check_qkv(query, key, value, enable_gqa=enable_gqa)
    if enable_gqa:
        if query.shape[:-3] != key.shape[:-3]:
            raise ValueError(f"query and key must have the same batch dims before the heads dim: query shape "
                             f"{shape_of(query)}, key shape {shape_of(key)}")
    elif query.shape[:-2] != key.shape[:-2]:
        raise ValueError(f"query and key must have the same batch/head dims (..., H) (pass enable_gqa=True for "
                         f"fewer key/value heads): query shape {shape_of(query)}, key shape {shape_of(key)}")
    scale = check_scale(scale, query.shape[-1])
    lead, (L, E), (S, Ev) = tuple(query.shape[:-2]), query.shape[-2:], value.shape[-2:]
    H = lead[-1] if lead else 1
    hkv = key.shape[-3] if enable_gqa else H
    G = H // hkv if hkv else 1  # zero heads (H = Hkv = 0): an empty problem, as torch returns an empty tensor
    n = math.prod(lead) // G
    q = query.reshape(n, G, L, E)  # (..., Hkv, G, L, E): query head h = hkv_index * G + g, as torch's enable_gqa
    k, v = key.reshape(n, S, E), value.reshape(n, S, Ev)
    acc = _acc_dtype(query.dtype)
    for name, t in (("attn_mask", attn_mask), ("alibi_slopes", alibi_slopes), ("sinks", sinks)):
        if isinstance(t, torch.Tensor):
            _check_side_tensor(name, t, query, acc)
    mask = check_attn_mask(attn_mask, (*lead, L, S), allow_float=allow_float_mask)
    if mask is not None:
        mask = mask.expand(*lead, L, S)  # a view: no (L, S) copy per head
        if mask.is_floating_point():
            mask = mask.to(_acc_dtype(query.dtype))
    slopes = None
    if alibi_slopes is not None:
        slopes = _alibi_rows(alibi_slopes, query, lead, n, G, hkv)
    offset = S - L if (is_causal and causal_align == "bottom_right") else 0
    window = _clip_window(_check_window(window_size), L, S)
    cap = _check_softcap(softcap, acc)
    sink_rows = None if sinks is None else _sink_rows(sinks, query, lead, n, G, hkv)
    _check_scores_fit(q, k, scale)
    return _Problem(q, k, v, lead, mask, slopes, scale, is_causal, offset, window, cap, sink_rows)


def _alibi_rows(alibi_slopes, query, lead, n: int, G: int, hkv: int) -> torch.Tensor:
    """(H,) slopes, or (B, H) per batch element as flash-attn accepts -> (N, G): the slope of each row group."""
    check_tensor("alibi_slopes", alibi_slopes, floating=True, ndim=(1, 2))
    H = lead[-1] if lead else 1
    if query.dim() < 3:
        raise ValueError(f"alibi_slopes need a query with a heads dim, (..., H, L, E), one slope per head; got query "
                         f"shape {shape_of(query)} (add the dim: query[None], key[None], value[None])")
    per_head = alibi_slopes.dim() == 1 and alibi_slopes.shape[0] == H and query.dim() >= 3
    per_batch = alibi_slopes.dim() == 2 and query.dim() == 4 and shape_of(alibi_slopes) == lead
    if not (per_head or per_batch):
        raise ValueError(f"alibi_slopes must have shape (H,) = ({H},), one slope per query head, or (B, H) = "
                         f"{lead if query.dim() == 4 else '(B, H)'} for a query (B, H, L, E), one row per batch "
                         f"element as flash-attn takes; got shape {shape_of(alibi_slopes)} for query shape "
                         f"{shape_of(query)}")
    check_finite("alibi_slopes", alibi_slopes)
    slopes = alibi_slopes.to(_acc_dtype(query.dtype))
    if per_batch:  # (B, H) -> (B * Hkv, G): row group n = (b, kv head), its G query heads
        return slopes.reshape(n, G)
    # (H,) -> (N, G): the same slopes for every batch element; a few numbers, not an (L, S) bias
    return slopes.reshape(hkv, G).repeat(n // hkv if hkv else 0, 1)


def _check_scores_fit(q: torch.Tensor, k: torch.Tensor, scale: float) -> None:
    """Refuse finite inputs whose scores scale * q . k overflow the accumulation dtype (one rule for all paths).

    ``scaled_dot_product_attention`` raises on such scores; the tiled loop and the kernels would return NaN
    (inf - inf in the online softmax). Cauchy-Schwarz bounds every score by scale * max|q_i| * max|k_j|
    (row norms): when that bound is far below the dtype's maximum, which is nearly always, nothing more is
    done (two norms, O(L E) work). Otherwise the largest score is computed exactly, in float64, one block of
    query rows at a time (no (L, S) matrix), and a score beyond half the maximum is refused.
    """
    if q.numel() == 0 or k.numel() == 0:
        return
    acc = _acc_dtype(q.dtype)
    big = torch.finfo(acc).max
    q_norm = float(torch.linalg.vector_norm(q.detach(), dim=-1, dtype=acc).amax())
    k_norm = float(torch.linalg.vector_norm(k.detach(), dim=-1, dtype=acc).amax())
    if scale * q_norm * k_norm < big / 4:  # |scale q.k| <= scale |q| |k| (inf norms fall through)
        return
    n, G, L, E = q.shape
    worst = 0.0
    k64 = k.detach().to(torch.float64).transpose(1, 2)
    for i0 in range(0, L, BLOCK_Q):
        s = torch.bmm(q[:, :, i0:i0 + BLOCK_Q].detach().to(torch.float64).reshape(n, -1, E), k64) * scale
        worst = max(worst, float(s.abs().amax()))
    if worst > big / 2:
        raise scores_overflow_error(q, k, scale, acc)


# Tests set this to True: outputs are then allocated filled with NaN instead of left uninitialised,
# so an element the algorithm forgets to write shows up as NaN.
_POISON_OUTPUTS = False


def _new_output(*shape, dtype, device) -> torch.Tensor:
    if _POISON_OUTPUTS:
        return torch.full(shape, math.nan, dtype=dtype, device=device)
    return torch.empty(shape, dtype=dtype, device=device)


def _acc_dtype(dtype: torch.dtype) -> torch.dtype:
    """float32 for the running statistics, float64 when the inputs are float64."""
    return torch.float64 if dtype == torch.float64 else torch.float32
