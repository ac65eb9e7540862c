"""Argument checks shared by attn_lib's modules (clear TypeError/ValueError messages)."""

from __future__ import annotations


def check_int(name: str, value, *, minimum: int) -> int:
    """Return ``value`` if it is an int >= ``minimum``.

    Raises:
        TypeError: ``value`` is not an int (bool counts as not an int); the message names ``name``.
        ValueError: ``value < minimum``; the message names ``name``, the value and the minimum.
    """
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return value
