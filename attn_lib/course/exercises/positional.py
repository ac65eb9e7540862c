"""Exercise checks for positions: notebook 02 (positional encodings) and the last part of notebook 04 (positions
inside attention).

- :func:`check_sinusoidal`: the sin/cos table of "Attention Is All You Need" §3.5 (notebook 02's exercise 1).
- :func:`check_rope`: rotary position embedding, half-split convention (notebook 04's exercise 3).
- :func:`check_alibi_slopes`: ALiBi's per-head slopes, including head counts that are not a power of two (the
  ``alibi_slopes`` piece of ``my_attn``; no notebook cell calls it since ALiBi moved to notebook 04).

Each check runs your function on fresh inputs, compares it with :mod:`attn_lib.positional` and,
on a mismatch, names the typical mistake it recognises.
"""

from __future__ import annotations

import torch

from attn_lib.course.exercises._core import CheckResult, Mismatch, as_tensor, call, expect_close, fresh_generator, run_check
from attn_lib.positional import alibi_slopes, apply_rope, sinusoidal_positional_encoding

__all__ = ["check_sinusoidal", "check_rope", "check_alibi_slopes"]

HINT_SWAPPED = "sin and cos are swapped: sin goes in the even columns (0, 2, 4, ...), cos in the odd ones."
HINT_HALVES = (
    "you put all sines in the first half and all cosines in the second half; the paper interleaves "
    "them: column 2i = sin, column 2i+1 = cos."
)
HINT_COLUMN_EXPONENT = (
    "the exponent must be 2i/d_model with i the PAIR index: columns 2i and 2i+1 share one "
    "frequency. You used the column index instead."
)
HINT_MULTIPLY = "divide the position by 10000^(2i/d_model); you multiplied."
HINT_FROM_1 = "positions start at 0: row 0 must be [0, 1, 0, 1, ...] (sin 0 = 0, cos 0 = 1)."
HINT_INTERLEAVED = (
    "you paired neighbouring dimensions (2i, 2i+1), the interleaved convention; this exercise uses "
    "the half-split pairs (i, i + head_dim/2), as HF's rotate_half does."
)
HINT_WRONG_WAY = (
    "the rotation goes the wrong way (the sin terms have the wrong sign): "
    "y1 = x1·cos − x2·sin, y2 = x1·sin + x2·cos."
)
HINT_POSITIONS_IGNORED = (
    "you used 0, 1, 2, ... instead of the positions passed in; use the positions argument "
    "(a KV cache passes positions that do not start at 0)."
)
HINT_ROPE_EXPONENT = "the frequencies are θ_i = base^(−2i/head_dim) for i = 0 .. head_dim/2 − 1 (note the 2i)."
HINT_NOT_POW2 = (
    "for a head count that is not a power of two, follow the paper's code: the slopes of the largest "
    "power of two below num_heads, then every other slope of twice that power."
)
HINT_REVERSED = "the slopes are reversed: the first head gets the steepest slope, 2^(-8/n)."
HINT_FIXED = (
    "the slopes depend on num_heads: for a power of two n the first is 2^(-8/n), and each next one is that "
    "times the first."
)
HINT_NEXT_POW2 = (
    "you took the slopes of the NEXT power of two and kept the first num_heads of them; the paper's code takes "
    "all the slopes of the largest power of two BELOW num_heads, then every other slope of twice that power."
)
HINT_CONSECUTIVE = (
    "you assumed the positions are consecutive (positions[0], positions[0] + 1, ...); rotate each row by its own "
    "position as given: positions can have gaps (a KV cache after eviction, packed sequences)."
)


def check_sinusoidal(sinusoidal) -> CheckResult:
    """Check ``sinusoidal(num_positions, d_model)`` -> (num_positions, d_model) table.

    PE[pos, 2i] = sin(pos / 10000^(2i/d_model)), PE[pos, 2i+1] = cos(pos / 10000^(2i/d_model)).
    """
    sizes = [(7, 4), (12, 16), (50, 6)]

    def trials():
        for P, D in sizes:
            want = sinusoidal_positional_encoding(P, D, dtype=torch.float64)
            got = as_tensor(call(sinusoidal, {"num_positions": P, "d_model": D}), f"sinusoidal({P}, {D})")
            if not got.is_floating_point():
                raise Mismatch(f"sinusoidal({P}, {D}) has dtype {got.dtype}; return a float tensor.")
            pos = torch.arange(P, dtype=torch.float64)[:, None]
            col = torch.arange(D, dtype=torch.float64)
            two_i = torch.arange(0, D, 2, dtype=torch.float64)
            swapped = torch.empty_like(want)
            swapped[:, 0::2], swapped[:, 1::2] = want[:, 1::2], want[:, 0::2]
            halves = torch.cat((want[:, 0::2], want[:, 1::2]), dim=1)
            by_column = pos / 10000 ** (col / D)
            column_exponent = torch.where(col.long() % 2 == 0, by_column.sin(), by_column.cos())
            mult = pos * 10000 ** (two_i / D)
            multiplied = torch.stack((mult.sin(), mult.cos()), dim=-1).flatten(1)
            from_1 = sinusoidal_positional_encoding(P + 1, D, dtype=torch.float64)[1:]
            wrong = [(swapped, HINT_SWAPPED), (halves, HINT_HALVES), (column_exponent, HINT_COLUMN_EXPONENT),
                     (multiplied, HINT_MULTIPLY), (from_1, HINT_FROM_1)]
            expect_close(got, want, what=f"the table for num_positions={P}, d_model={D}", wrong_answers=wrong)
        return len(sizes)

    return run_check("check_sinusoidal", trials)


def check_rope(rope) -> CheckResult:
    """Check ``rope(x, positions)`` -> x rotated by RoPE, half-split convention, base 10000.

    ``x`` is (..., seq, head_dim) float, ``positions`` a (seq,) int64 tensor (not always starting at 0).
    Pair i = (x[..., i], x[..., i + head_dim/2]) is rotated by the angle positions · 10000^(−2i/head_dim).
    """
    shapes = [(5, 4), (2, 6, 8), (2, 3, 4, 16)]

    def trials():
        for trial, shape in enumerate(shapes):
            g = fresh_generator("check_rope", trial)
            x = torch.randn(*shape, generator=g, dtype=torch.float64)
            seq, head_dim = shape[-2], shape[-1]
            start = torch.randint(0, 50, (1,), generator=g)
            if trial == 0:  # contiguous, not from 0
                positions = start + torch.arange(seq)
            elif trial == 1:  # gaps
                positions = start + torch.randperm(4 * seq, generator=g)[:seq].sort().values
            else:  # any order (each row has its own offset)
                positions = torch.randperm(3 * seq, generator=g)[:seq] + start
            want = apply_rope(x, positions)
            got = as_tensor(call(rope, {"x": x, "positions": positions}), "rope(x, positions)")
            half = head_dim // 2
            theta_i = 10000.0 ** (-torch.arange(half, dtype=torch.float64) / head_dim)  # missing the 2
            angle = positions[:, None].double() * theta_i
            cos, sin = torch.cat((angle.cos(),) * 2, -1), torch.cat((angle.sin(),) * 2, -1)
            rot = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
            wrong = [
                (apply_rope(x, positions, interleaved=True), HINT_INTERLEAVED),
                (apply_rope(x, -positions), HINT_WRONG_WAY),
                (apply_rope(x, -positions, interleaved=True), HINT_INTERLEAVED + " The rotation also goes the wrong way."),
                (apply_rope(x), HINT_POSITIONS_IGNORED),
                (apply_rope(x, positions[0] + torch.arange(seq)), HINT_CONSECUTIVE),
                (x * cos + rot * sin, HINT_ROPE_EXPONENT),
            ]
            expect_close(got, want, what=f"RoPE of x with shape {tuple(shape)} at positions {positions.tolist()}",
                         wrong_answers=wrong, dtype=x.dtype)
        return len(shapes)

    return run_check("check_rope", trials,
                     shape_mistakes="The angles positions[:, None] * theta are (seq, head_dim/2) and broadcast over "
                                    "x's leading dimensions; x[..., :half] and x[..., half:] are the two halves.")


def check_alibi_slopes(slopes_fn) -> CheckResult:
    """Check ``slopes_fn(num_heads)`` -> (num_heads,) tensor of ALiBi slopes.

    Power of two n: 2^(-8/n), 2^(-16/n), ..., 2^(-8). Other n: see the paper's reference code.
    """
    counts = [4, 8, 16, 6, 12, 5]

    def trials():
        for n in counts:
            want = alibi_slopes(n, dtype=torch.float64)
            got = call(slopes_fn, {"num_heads": n})
            if type(got) in (list, tuple):
                try:
                    got = torch.tensor(got, dtype=torch.float64)
                except Exception:
                    raise Mismatch(f"return a tensor (or list) of {n} numbers, got {got!r}.") from None
            got = as_tensor(got, f"the slopes for num_heads={n}")
            if not got.is_floating_point():
                raise Mismatch(f"the slopes for num_heads={n} have dtype {got.dtype}; return floats.")
            plain = 2.0 ** (-8.0 / n * torch.arange(1, n + 1, dtype=torch.float64))
            next_pow2 = 2 ** (n - 1).bit_length()
            wrong = [
                (alibi_slopes(next_pow2, dtype=torch.float64)[:n], HINT_NEXT_POW2),
                (plain, HINT_NOT_POW2),
                (want.flip(0), HINT_REVERSED),
                (2.0 ** -torch.arange(1, n + 1, dtype=torch.float64), HINT_FIXED),
            ]
            expect_close(got, want, what=f"the slopes for num_heads={n}", wrong_answers=wrong, atol=1e-7)
        return len(counts)

    return run_check("check_alibi_slopes", trials)
