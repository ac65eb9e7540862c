"""Causal and padding masks (notebook 04).

The causal triangle is built here, once (:func:`causal_mask`); attention, grouped-query attention and
the models call it. Shapes use the legend of :mod:`attn_lib.attention` (B, L queries, S keys).

ONE convention in attn_lib: a boolean mask is True where a query may attend / where a token is
real. It is the convention of ``torch.nn.functional.scaled_dot_product_attention``'s boolean
``attn_mask`` and of a HuggingFace tokenizer's ``attention_mask`` (1 = real token).

The trap: ``torch.nn.MultiheadAttention``'s ``key_padding_mask`` and ``attn_mask`` (and
``nn.Transformer``'s masks) use the opposite meaning, True = ignore. Convert with
:func:`to_torch_key_padding_mask` (and back with :func:`from_torch_key_padding_mask`).
"""

from __future__ import annotations

from typing import Sequence

import torch

from attn_lib._checks import check_choice, check_device, check_int, check_padding_mask

__all__ = [
    "causal_mask",
    "padding_mask",
    "to_torch_key_padding_mask",
    "from_torch_key_padding_mask",
    "padding_to_attn_mask",
]

_ALIGNS = ("top_left", "bottom_right")


def _check_len(name: str, n) -> int:
    return check_int(name, n, minimum=0)


def causal_mask(q_len: int, kv_len: int | None = None, *, align: str = "top_left", device=None) -> torch.Tensor:
    """Boolean causal mask, True = the query may attend to the key.

    Args:
        q_len: number of queries L (int >= 0).
        kv_len: number of keys S; default ``q_len``.
        align: where the triangle's corner sits when L != S.
            ``"top_left"`` (torch's ``is_causal=True``): query i sees keys 0..i.
            ``"bottom_right"`` (what a KV cache and chunked decoding need; FlashAttention 2's convention):
            the L queries are the *last* L positions, so query i sees keys 0..i + (S - L) and the last
            query sees every key. With L > S the first L - S rows are then fully masked.
            Example, L=2, S=4: top-left [[1,0,0,0],[1,1,0,0]], bottom-right [[1,1,1,0],[1,1,1,1]].
        device: torch device of the result (default CPU): a torch.device or a string ("cpu", "cuda:0").

    Returns:
        bool tensor (L, S). Top-left equals ``torch.ones(L, S, dtype=torch.bool).tril()``, what torch's
        ``is_causal=True`` uses; bottom-right equals ``torch.nn.attention.bias.causal_lower_right``.

    Raises:
        TypeError: a length is not an int; align not a str; device neither a str nor a torch.device.
        ValueError: a negative length, an unknown ``align``, a device string torch cannot read ("gpu"),
            or "cuda" on a machine without a CUDA GPU (the message says to use the CPU).
    """
    q_len = _check_len("q_len", q_len)
    kv_len = q_len if kv_len is None else _check_len("kv_len", kv_len)
    check_choice("align", align, _ALIGNS)
    device = check_device("device", device)
    offset = 0 if align == "top_left" else kv_len - q_len
    # mask[i, j] = j <= i + offset: torch.tril with a diagonal offset
    return torch.ones(q_len, kv_len, dtype=torch.bool, device=device).tril(diagonal=offset)


def padding_mask(lengths, max_len: int | None = None) -> torch.Tensor:
    """Boolean padding mask from sequence lengths, True = real token (right padding).

    Equal to a HuggingFace tokenizer's ``attention_mask.bool()`` for a right-padded batch.

    Args:
        lengths: B non-negative ints (list, tuple or 1-D integer tensor): the real length of each sequence.
        max_len: padded length S (an int >= 0); default ``max(lengths)`` (0 for an empty batch).

    Returns:
        bool tensor (B, S): ``mask[b, s] = s < lengths[b]``; on the device of ``lengths`` if a tensor.

    Raises:
        TypeError: lengths are not integers (a bool, floating or complex tensor; a list holding a non-int);
            max_len not an int.
        ValueError: lengths not 1-D, negative, or longer than max_len; max_len < 0.

    Source: HuggingFace's tokenizers (``padding=True`` returns this ``attention_mask``, 1 = real token).
    """
    if isinstance(lengths, torch.Tensor):
        if lengths.dtype == torch.bool or lengths.is_floating_point() or lengths.is_complex():
            raise TypeError(f"lengths must be integers, got a tensor of dtype {lengths.dtype}")
        lens = lengths.to(torch.long)
    else:
        if not isinstance(lengths, Sequence) or any(isinstance(n, bool) or not isinstance(n, int) for n in lengths):
            raise TypeError(f"lengths must be a sequence of ints or an integer tensor, got {lengths!r}")
        lens = torch.tensor(list(lengths), dtype=torch.long)
    if lens.dim() != 1:
        raise ValueError(f"lengths must be 1-D (one length per sequence), got shape {tuple(lens.shape)}")
    if (lens < 0).any():
        raise ValueError(f"lengths must be >= 0, got {lens.tolist()}")
    longest = int(lens.max()) if lens.numel() else 0
    if max_len is None:
        max_len = longest
    max_len = _check_len("max_len", max_len)
    if longest > max_len:
        raise ValueError(f"max_len={max_len} is shorter than the longest sequence (length {longest})")
    positions = torch.arange(max_len, device=lens.device)  # (T,)
    return positions[None, :] < lens[:, None]  # (B, L)


def to_torch_key_padding_mask(padding_mask: torch.Tensor) -> torch.Tensor:
    """Convert attn_lib's padding mask (True = real token) to ``torch.nn.MultiheadAttention``'s
    ``key_padding_mask`` (True = *ignore* this key). It is the logical NOT.

    Args:
        padding_mask: bool (B, S), True = real token.

    Returns:
        bool (B, S), True = padding (to be ignored), for ``nn.MultiheadAttention(..., key_padding_mask=)``.

    Raises:
        TypeError: not a tensor, or a floating/complex dtype (0/1 integers are accepted, as HuggingFace's
            attention_mask).
        ValueError: not 2-D (torch's key_padding_mask is (B, S); a 3-D (B, L, S) mask is an attn_mask);
            integer values other than 0 and 1.

    Source: the inverse convention of torch.nn.MultiheadAttention's ``key_padding_mask`` (True = ignore).
    """
    padding_mask = check_padding_mask("padding_mask", padding_mask)  # bool or 0/1 ints, (B, S)
    return ~padding_mask


def from_torch_key_padding_mask(key_padding_mask: torch.Tensor) -> torch.Tensor:
    """Inverse of :func:`to_torch_key_padding_mask`: True = ignore -> True = real token.

    Args:
        key_padding_mask: (B, S) bool (or 0/1 integers), True = padding, as torch.nn.MultiheadAttention takes it.

    Returns:
        bool (B, S), True = real token (attn_lib's and HuggingFace's convention).

    Raises:
        TypeError: not a tensor, or a floating/complex dtype. ValueError: not 2-D (B, S); integers other than 0/1.

    Source: torch.nn.MultiheadAttention's ``key_padding_mask`` convention, negated.
    """
    key_padding_mask = check_padding_mask("key_padding_mask", key_padding_mask)  # bool or 0/1 ints, (B, S)
    return ~key_padding_mask


def padding_to_attn_mask(padding_mask: torch.Tensor) -> torch.Tensor:
    """Reshape a padding mask (B, S) to (B, 1, 1, S): broadcastable to scores (B, H, L, S).

    Every query may attend to the real keys of its own sequence. Combine with a causal mask by
    ``&``: ``padding_to_attn_mask(pad) & causal_mask(L, S)`` -> (B, 1, L, S).

    Args:
        padding_mask: (B, S) bool (or 0/1 integers), True = real token.

    Returns:
        bool (B, 1, 1, S).

    Raises:
        TypeError: not a tensor, or a floating/complex dtype. ValueError: not 2-D; integers other than 0/1.

    Source: the key-padding mask of HuggingFace's BERT (``get_extended_attention_mask``, there as an additive
    float mask of the same (B, 1, 1, S) shape).
    """
    padding_mask = check_padding_mask("padding_mask", padding_mask)  # bool or 0/1 ints, (B, S)
    return padding_mask[:, None, None, :]
