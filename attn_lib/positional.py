"""Position information for attention: sinusoidal, learned, rotary (RoPE) and ALiBi.

Self-attention by itself does not know in which order the tokens come (shuffle the tokens and
the outputs shuffle the same way). Each function here adds order back in one of the four ways
used in practice:

- :func:`sinusoidal_positional_encoding` -- fixed sin/cos waves added to the token embeddings
  (Vaswani et al. 2017, "Attention Is All You Need", §3.5).
- :class:`LearnedPositionalEmbedding` -- one trained vector per position, added to the token
  embeddings (BERT, GPT-2).
- :func:`apply_rope` -- rotates query and key vectors by angles proportional to the position, so
  that q·k depends only on the offset between the two positions (Su et al. 2021, "RoFormer",
  §3.2-3.4; used in GPT-NeoX, GPT-J, LLaMA).
- :func:`alibi_slopes`, :func:`alibi_bias` (and :func:`alibi_varlen_mask` for padded batches measured
  as flash-attn's variable-length API measures them) -- no vectors at all: a penalty proportional to the
  distance is added to the attention scores, with a different slope per head (Press et al. 2022,
  "Train Short, Test Long", §3).

Over 400 lines: four position schemes, each short, compared side by side in notebook 02.
"""

from __future__ import annotations

import math

import torch
from torch import nn
from attn_lib._checks import check_bool, check_device, check_dtype, check_finite, check_int as _check_int, check_number, check_tensor

__all__ = [
    "sinusoidal_positional_encoding",
    "LearnedPositionalEmbedding",
    "rope_frequencies",
    "rope_cos_sin",
    "rotate_half",
    "apply_rope",
    "alibi_slopes",
    "alibi_bias",
    "alibi_varlen_mask",
    "rotate_2d",
    "sinusoidal_components",
]


# --------------------------------------------------------------------------- argument checks


def _check_even(name: str, value: int) -> int:
    if value % 2:
        raise ValueError(
            f"{name} must be even (the dimensions are used in pairs, one sin/cos or rotation "
            f"frequency per pair), got {name}={value}"
        )
    return value


def _check_base(base) -> float:
    """RoPE's and the sinusoid's ``base``: the rule of ``_checks.check_rope_base`` (a finite number > 1)."""
    if isinstance(base, bool) or not isinstance(base, (int, float)):
        raise TypeError(f"base must be a number, got {type(base).__name__} {base!r}")
    if not math.isfinite(base) or base <= 1.0:
        raise ValueError(f"base must be a finite number > 1, got {base!r}")
    return float(base)


# --------------------------------------------------------------------------- sinusoidal
def sinusoidal_positional_encoding(
    num_positions: int,
    d_model: int,
    *,
    base: float = 10000.0,
    dtype: torch.dtype = torch.float32,
    device=None,
) -> torch.Tensor:
    """The fixed sinusoidal position encodings of the original Transformer.

    Vaswani et al. (2017), "Attention Is All You Need", §3.5::

        PE[pos, 2i]     = sin(pos / base^(2i / d_model))
        PE[pos, 2i + 1] = cos(pos / base^(2i / d_model))

    Even columns hold sines, odd columns cosines; pair i oscillates with wavelength
    ``2π · base^(2i/d_model)`` positions, from 2π (pair 0) to almost ``2π · base`` (last pair).
    Example: ``d_model=4``, position 1 -> ``[sin 1, cos 1, sin 0.01, cos 0.01]``
    = ``[0.84147, 0.54030, 0.0099998, 0.99995]``.

    (GPT-J's ``create_sinusoidal_positions`` and tensor2tensor store the same numbers with all
    sines first and all cosines after: a fixed permutation of the columns.)

    Args:
        num_positions: number of positions P (rows), positions 0..P-1; int >= 1.
        d_model: embedding size D (columns); a positive even int.
        base: the constant 10000 of the paper; a number > 1.
        dtype: floating dtype of the result (computed in float64, then cast).
        device: device of the result.

    Returns:
        (P, D) tensor; add it to the (B, P, D) token embeddings (it broadcasts over B).

    Raises:
        TypeError: ``num_positions``/``d_model`` not ints, ``base`` not a number, ``dtype`` not a dtype or its name.
        ValueError: an integer ``dtype``; a bad device string ("gpu") or CUDA without a GPU.
        ValueError: ``num_positions`` < 1, ``d_model`` < 2 or odd, ``base`` <= 1.
    """
    _check_int("num_positions", num_positions, minimum=1)
    _check_int("d_model", d_model, minimum=2)
    _check_even("d_model", d_model)
    base = _check_base(base)
    dtype = check_dtype("dtype", dtype)
    device = check_device("device", device)

    position = torch.arange(num_positions, dtype=torch.float64)[:, None]  # (P, 1)
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)  # (D/2,)  = 2i
    angle = position / base ** (two_i / d_model)  # (P, D/2)  pos / base^(2i/d)
    pe = torch.empty(num_positions, d_model, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(angle)  # PE[pos, 2i]   = sin(...)
    pe[:, 1::2] = torch.cos(angle)  # PE[pos, 2i+1] = cos(...)
    return pe.to(dtype=dtype, device=device)


def sinusoidal_components(position: int, pair: int, d_model: int, *, base: float = 10000.0) -> dict[str, float]:
    """The numbers behind one entry pair of the sinusoidal table (for the notebook's widget).

    Args:
        position: the position pos (int >= 0).
        pair: the pair index i (columns 2i and 2i+1), 0 <= i < d_model/2.
        d_model: even int >= 2.

    Returns:
        dict of Python floats (no tensors) with ``frequency`` ω_i = 1/base^(2i/d_model) (radians per position),
        ``wavelength`` 2π/ω_i (positions per full turn), ``angle`` pos·ω_i, ``sin`` (column 2i) and ``cos``
        (column 2i+1).

    Raises:
        TypeError / ValueError: arguments out of range (the message names them).

    Source: Vaswani et al. 2017, §3.5 (PE(pos, 2i) = sin(pos / 10000^(2i/d_model)), PE(pos, 2i+1) = cos(...)).
    """
    _check_int("position", position, minimum=0)
    _check_int("d_model", d_model, minimum=2)
    _check_even("d_model", d_model)
    _check_int("pair", pair, minimum=0)
    if pair >= d_model // 2:
        raise ValueError(f"pair must be < d_model/2 = {d_model // 2}, got pair={pair}")
    base = _check_base(base)
    frequency = 1.0 / base ** (2 * pair / d_model)
    angle = position * frequency
    return {"frequency": frequency, "wavelength": 2 * math.pi / frequency, "angle": angle,
            "sin": math.sin(angle), "cos": math.cos(angle)}


# --------------------------------------------------------------------------- learned
class LearnedPositionalEmbedding(nn.Module):
    """A trained table with one vector per position, as in BERT and GPT-2.

    ``weight[p]`` is the vector added to the token embedding at position p. Unlike the
    sinusoidal encoding it cannot go beyond ``max_positions``: a longer input has no row to
    look up (BERT: 512 positions, GPT-2: 1024), which is why asking for one raises ValueError.

    Initialised from N(0, 0.02²), BERT's ``initializer_range`` (torch's ``nn.Embedding`` default
    would be N(0, 1)).

    Args:
        max_positions: number of rows (positions 0..max_positions-1); int >= 1.
        d_model: size D of each vector; int >= 1.

    Attributes:
        weight: (max_positions, D) ``nn.Parameter``.
    """

    def __init__(self, max_positions: int, d_model: int):
        super().__init__()
        self.max_positions = _check_int("max_positions", max_positions, minimum=1)
        self.d_model = _check_int("d_model", d_model, minimum=1)
        self.weight = nn.Parameter(torch.empty(max_positions, d_model))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.normal_(self.weight, mean=0.0, std=0.02)

    def forward(self, positions) -> torch.Tensor:
        """Look up position vectors.

        Args:
            positions: an int ``seq_len`` (returns positions 0..seq_len-1), or an integer
                tensor of positions of any shape (...).

        Returns:
            (seq_len, D) for an int, (..., D) for a tensor; dtype of ``weight``.

        Raises:
            TypeError: ``positions`` is neither an int nor an integer tensor.
            ValueError: a position is negative or >= ``max_positions`` (the message names the
                position and max_positions), or ``seq_len`` > ``max_positions``.
        """
        if isinstance(positions, bool):
            raise TypeError(f"positions must be an int seq_len or an integer tensor, got bool {positions!r}")
        if isinstance(positions, int):
            if positions < 0:
                raise ValueError(f"seq_len must be >= 0, got {positions}")
            if positions > self.max_positions:
                raise ValueError(
                    f"seq_len={positions} needs positions 0..{positions - 1}, but the table has "
                    f"max_positions={self.max_positions} rows (positions 0..{self.max_positions - 1})"
                )
            positions = torch.arange(positions, device=self.weight.device)
        elif isinstance(positions, torch.Tensor):
            if positions.dtype.is_floating_point or positions.dtype.is_complex or positions.dtype == torch.bool:
                raise TypeError(f"positions must be an integer tensor, got dtype {positions.dtype}")
        else:
            raise TypeError(
                f"positions must be an int seq_len or an integer tensor, got {type(positions).__name__}"
            )
        if positions.numel():
            lo, hi = int(positions.min()), int(positions.max())
            if lo < 0:
                raise ValueError(f"positions must be >= 0, got position {lo}")
            if hi >= self.max_positions:
                raise ValueError(
                    f"position {hi} is beyond the table: max_positions={self.max_positions} "
                    f"(valid positions 0..{self.max_positions - 1})"
                )
        return self.weight[positions.to(self.weight.device).long()]  # (..., D)

    def extra_repr(self) -> str:
        return f"max_positions={self.max_positions}, d_model={self.d_model}"


# --------------------------------------------------------------------------- RoPE
def rope_frequencies(head_dim: int, *, base: float = 10000.0, dtype: torch.dtype = torch.float32, device=None):
    """RoPE's angular frequencies θ_i = base^(-2i/head_dim), i = 0..head_dim/2-1 (RoFormer eq. 15).

    Computed exactly like transformers' ``LlamaRotaryEmbedding`` (``1 / base ** (arange(0, d, 2) / d)``).

    Returns:
        (head_dim/2,) tensor in radians per position.

    Raises:
        TypeError / ValueError: ``head_dim`` not a positive even int, ``base`` not a number > 1;
            ``dtype`` not a floating dtype or its name (an integer dtype would truncate every frequency
            but the first to 0); ``device`` unknown ("gpu") or CUDA without a GPU.
    """
    _check_int("head_dim", head_dim, minimum=2)
    _check_even("head_dim", head_dim)
    base = _check_base(base)
    dtype = check_dtype("dtype", dtype)
    device = check_device("device", device)
    return 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=dtype, device=device) / head_dim))


def _as_positions(positions, seq_len: int, device) -> torch.Tensor:
    if positions is None:
        return torch.arange(seq_len, device=device)
    if isinstance(positions, bool):
        raise TypeError(f"positions must be an integer tensor (or None), got bool {positions!r}")
    if isinstance(positions, int):
        positions = torch.tensor(positions, device=device)
    elif isinstance(positions, (list, tuple, range)):
        positions = torch.tensor(list(positions), device=device)
    if not isinstance(positions, torch.Tensor):
        raise TypeError(f"positions must be an integer tensor (or None), got {type(positions).__name__}")
    if positions.dtype.is_floating_point or positions.dtype.is_complex or positions.dtype == torch.bool:
        raise TypeError(f"positions must be an integer tensor, got dtype {positions.dtype}")
    if positions.device.type == "meta" and torch.device(device or "cpu").type != "meta":
        raise ValueError(f"positions must be on x's device {device} (or on one it can be copied from), got a meta "
                         f"tensor, which holds no values; move it with .to({str(device)!r})")
    return positions.to(device)


def rope_cos_sin(positions, head_dim: int, *, base: float = 10000.0, dtype: torch.dtype = torch.float32, device=None):
    """cos and sin of the RoPE angles m·θ_i for integer positions m.

    Args:
        positions: integer tensor (...,) of positions (or a list of ints / an int); None is refused
            (there is no length to default to here -- pass ``torch.arange(L)``).
        head_dim: even int.
        dtype: floating dtype or its name ("float32"). device: torch.device or a string.

    Returns:
        (cos, sin), each (..., head_dim/2), computed in float32 (float64 when ``dtype`` is
        float64) and cast to ``dtype``. Equal to transformers' ``LlamaRotaryEmbedding`` (first half).

    Raises:
        TypeError: positions None, float or bool; dtype not a dtype or its name.
        ValueError: head_dim not a positive even int; an integer dtype; a bad or unavailable device.
    """
    if positions is None:
        raise TypeError("positions must be an integer tensor of positions, e.g. torch.arange(L), got None")
    dtype = check_dtype("dtype", dtype)
    device = check_device("device", device)
    positions = _as_positions(positions, 0, device)
    work = torch.float64 if dtype == torch.float64 else torch.float32
    inv_freq = rope_frequencies(head_dim, base=base, dtype=work, device=positions.device)  # (head_dim/2,)
    angle = positions.to(work)[..., None] * inv_freq  # (..., head_dim/2)   m·θ_i
    return angle.cos().to(dtype), angle.sin().to(dtype)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """[x1, x2] -> [-x2, x1] on the last dim: the 90° turn of the half-split RoPE convention.

    x: (..., E) with E even, any dtype (float32/float64 in the course); returns (..., E) in x's dtype.

    Source: transformers' ``models.llama.modeling_llama.rotate_half`` (the same function; GPT-NeoX's half split).

    Raises:
        ValueError: the last dim of x is odd (it must split into two halves).
    """
    if x.shape[-1] % 2:
        raise ValueError(f"rotate_half needs an even last dim, got x of shape {tuple(x.shape)}")
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def apply_rope(x: torch.Tensor, positions=None, *, base: float = 10000.0, interleaved: bool = False) -> torch.Tensor:
    """Rotary position embedding: rotate each pair of dimensions of x by the angle m·θ_i.

    Su et al. (2021), "RoFormer: Enhanced Transformer with Rotary Position Embedding", §3.2-3.4.
    For the vector at position m, pair i is rotated by the angle m·θ_i with
    θ_i = base^(-2i/head_dim)::

        [y_a]   [cos mθ_i  -sin mθ_i] [x_a]
        [y_b] = [sin mθ_i   cos mθ_i] [x_b]

    Rotating queries at position m and keys at position n makes q·k depend only on m - n
    (the rotations compose to one rotation by (n-m)·θ_i), and leaves every vector's norm unchanged.

    Which dimensions form pair i:

    - ``interleaved=False`` (default, "half-split"): pair i = (x[i], x[i + head_dim/2]).
      GPT-NeoX, LLaMA in HF transformers (``rotate_half`` / ``apply_rotary_pos_emb``).
    - ``interleaved=True``: pair i = (x[2i], x[2i+1]). RoFormer paper, GPT-J, Meta's original LLaMA code.

    The two conventions give the same result up to a fixed permutation of the dimensions.
    Example, head_dim 4, position 1, x = [1, 2, 3, 4]:
    interleaved -> [-1.1426, 1.9221, 2.9599, 4.0298]; half-split -> [-1.9841, 1.9599, 2.4624, 4.0198].

    Args:
        x: (..., seq, head_dim) floating tensor, e.g. queries or keys (B, H, L, head_dim).
        positions: integer positions, broadcastable to ``x.shape[:-1]`` = (..., seq): e.g. (seq,)
            shared by the batch, or (B, 1, seq) per sequence. Any integers (a KV cache
            passes offsets such as ``arange(past, past + seq)``). Default 0..seq-1.
        base: the 10000 of θ_i; a number > 1.
        interleaved: the pairing convention (see above).

    Returns:
        tensor of x's shape and dtype. Angles are computed in float32 (float64 for float64 x).

    Raises:
        TypeError: x is not a floating tensor; positions is not an integer tensor.
        ValueError: x has fewer than 2 dims; head_dim is odd; positions does not broadcast
            to x.shape[:-1].
    """
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x must be a torch.Tensor of shape (..., seq, head_dim), got {type(x).__name__}")
    if not x.dtype.is_floating_point:
        raise TypeError(f"x must be a floating tensor, got dtype {x.dtype}")
    if x.dim() < 2:
        raise ValueError(f"x must have shape (..., seq, head_dim) with at least 2 dims, got shape {tuple(x.shape)}")
    if not isinstance(interleaved, bool):
        raise TypeError(f"interleaved must be a bool, got {interleaved!r}")
    head_dim = x.shape[-1]
    if head_dim % 2:
        raise ValueError(f"head_dim (last dim of x) must be even for RoPE, got head_dim={head_dim} (x shape {tuple(x.shape)})")
    if head_dim == 0:
        raise ValueError(f"head_dim (last dim of x) must be > 0, got x shape {tuple(x.shape)}")
    seq_len = x.shape[-2]
    positions = _as_positions(positions, seq_len, x.device)
    try:
        target = torch.broadcast_shapes(positions.shape, x.shape[:-1])
    except RuntimeError:
        target = None
    if target != x.shape[:-1]:
        raise ValueError(
            f"positions of shape {tuple(positions.shape)} must broadcast to x.shape[:-1] = "
            f"{tuple(x.shape[:-1])} (..., seq); e.g. a ({seq_len},) tensor"
        )

    cos, sin = rope_cos_sin(positions, head_dim, base=base, dtype=x.dtype)  # (..., seq, head_dim/2)
    if interleaved:
        x_a, x_b = x[..., 0::2], x[..., 1::2]  # pairs (x[2i], x[2i+1])
        y_a = x_a * cos - x_b * sin
        y_b = x_a * sin + x_b * cos
        return torch.stack((y_a, y_b), dim=-1).flatten(-2)  # (..., seq, head_dim/2, 2) -> (..., seq, head_dim)
    cos = torch.cat((cos, cos), dim=-1)  # (..., seq, head_dim)
    sin = torch.cat((sin, sin), dim=-1)
    return x * cos + rotate_half(x) * sin  # pairs (x[i], x[i + head_dim/2])


def rotate_2d(point, angle: float) -> torch.Tensor:
    """Rotate 2-D point(s) (..., 2) counter-clockwise by ``angle`` radians (for RoPE pictures).

    ``point``: a tensor or nested sequence of numbers of shape (..., 2); ``angle`` a real number (radians).
    Returns a float64 tensor (..., 2): ``(x cos a - y sin a, x sin a + y cos a)``.

    Raises:
        TypeError: ``angle`` not a real number.
        ValueError: ``angle`` not finite; ``point``'s last dim not 2.

    Source: the 2-D rotation matrix R(a) that RoPE applies to each pair (Su et al. 2021, RoFormer, §3.2.1, Eq. 13).
    """
    check_number("angle", angle)
    p = torch.as_tensor(point, dtype=torch.float64)
    if p.shape[-1:] != (2,):
        raise ValueError(f"point must have shape (..., 2), got {tuple(p.shape)}")
    c, s = math.cos(angle), math.sin(angle)
    return torch.stack((c * p[..., 0] - s * p[..., 1], s * p[..., 0] + c * p[..., 1]), dim=-1)


# --------------------------------------------------------------------------- ALiBi
def _alibi_slopes_list(n: int) -> list[float]:
    # Press et al.'s reference code (github.com/ofirpress/attention_with_linear_biases,
    # fairseq/models/transformer.py, get_slopes), restated.
    def power_of_2(n: int) -> list[float]:
        start = 2 ** (-(2 ** -(math.log2(n) - 3)))  # 2^(-8/n)
        return [start * start**i for i in range(n)]  # 2^(-8/n), 2^(-16/n), ..., 2^(-8)

    if math.log2(n).is_integer():
        return power_of_2(n)
    closest = 2 ** math.floor(math.log2(n))
    # the slopes of the nearest smaller power of two, then every other slope of the next one up
    return power_of_2(closest) + _alibi_slopes_list(2 * closest)[0::2][: n - closest]


def alibi_slopes(num_heads: int, *, dtype: torch.dtype = torch.float32, device=None) -> torch.Tensor:
    """ALiBi's per-head slopes m_h (Press et al. 2022, "Train Short, Test Long", §3).

    For a power of two n: the geometric sequence starting at 2^(-8/n) with that same ratio,
    e.g. 8 heads -> [1/2, 1/4, ..., 1/256]. For other n, as in the paper's reference code: the
    slopes for the largest power of two k < n, followed by every other slope of 2k
    (the same slopes as transformers' BLOOM ``_get_alibi_slopes``).

    Returns:
        (H,) tensor of slopes, H = num_heads, largest first, in ``dtype``.

    Raises:
        TypeError / ValueError: ``num_heads`` not an int >= 1; ``dtype`` not a floating dtype or its name
            (an integer dtype would truncate every slope < 1 to 0); ``device`` unknown or CUDA without a GPU.
    """
    _check_int("num_heads", num_heads, minimum=1)
    dtype = check_dtype("dtype", dtype)
    device = check_device("device", device)
    return torch.tensor(_alibi_slopes_list(num_heads), dtype=torch.float64).to(dtype=dtype, device=device)


def alibi_bias(num_heads: int, q_len: int, kv_len: int, *, dtype: torch.dtype = torch.float32, device=None) -> torch.Tensor:
    """ALiBi's additive attention bias: ``-m_h · distance(query, key)``.

    Press et al. (2022), §3: ``softmax(q_i K^T / sqrt(d) + m · [-(i-1), ..., -2, -1, 0])`` --
    the further away a key, the larger the penalty, growing linearly with slope m_h per head.
    Add the result to the (B, H, L, S) attention scores (as a float ``attn_mask``).

    Positions: when kv_len > q_len the queries are the *last* q_len positions (as when decoding
    with a KV cache): query i sits at position ``i + kv_len - q_len``, key j at position j.
    The paper is causal and only needs keys at or before the query; for a key after the query
    (no causal mask) the distance is taken as ``|i - j|``, the symmetric choice of
    bidirectional ALiBi variants. With a causal mask this equals the reference code's
    ``m · j`` bias up to a constant per row, which softmax ignores.

    Args:
        num_heads: H, int >= 1.
        q_len: L, number of queries, int >= 1.
        kv_len: S, number of keys, int >= 1.

    Returns:
        (H, L, S) tensor, zero on the (bottom-right aligned) diagonal, <= 0 elsewhere.

    Raises:
        TypeError / ValueError: an argument is not an int >= 1; ``dtype`` not a floating dtype or its
            name (an integer dtype would truncate the bias); ``device`` unknown or CUDA without a GPU.
    """
    _check_int("num_heads", num_heads, minimum=1)
    _check_int("q_len", q_len, minimum=1)
    _check_int("kv_len", kv_len, minimum=1)
    dtype = check_dtype("dtype", dtype)
    device = check_device("device", device)
    slopes = alibi_slopes(num_heads, dtype=torch.float64)  # (H,)
    q_pos = torch.arange(q_len, dtype=torch.float64) + (kv_len - q_len)  # (L,)
    k_pos = torch.arange(kv_len, dtype=torch.float64)  # (S,)
    distance = (q_pos[:, None] - k_pos[None, :]).abs()  # (L, S)   |i - j|
    bias = -slopes[:, None, None] * distance + 0.0  # (H, L, S); + 0.0 turns -0.0 into 0.0
    return bias.to(dtype=dtype, device=device)


def _lengths(name: str, lengths, batch: int | None, maximum: int) -> list[int]:
    if isinstance(lengths, torch.Tensor):
        if lengths.dim() != 1 or lengths.is_floating_point() or lengths.dtype == torch.bool:
            raise TypeError(f"{name} must be a 1-D integer tensor or a list of ints (one length per batch element), "
                            f"got a tensor of shape {tuple(lengths.shape)} and dtype {lengths.dtype}")
        lengths = lengths.tolist()
    if not isinstance(lengths, (list, tuple)):
        raise TypeError(f"{name} must be a list of ints or a 1-D integer tensor, got {type(lengths).__name__}")
    out = [_check_int(f"{name}[{b}]", n, minimum=1, maximum=maximum) for b, n in enumerate(lengths)]
    if batch is not None and len(out) != batch:
        raise ValueError(f"{name} must have one length per batch element (B = {batch}), got {len(out)} lengths")
    return out


def alibi_varlen_mask(slopes: torch.Tensor, q_lens, k_lens, q_len: int, kv_len: int, *,
                      is_causal: bool = False) -> torch.Tensor:
    """ALiBi for a right-padded batch, with distances measured as flash-attn's variable-length API does.

    attn_lib's ``alibi_slopes=`` (in :func:`attn_lib.tiled.tiled_attention` and
    :func:`attn_lib.flash.flash_attention`) measures the distance on the *padded* tensor: query i sits at
    position ``i + S - L``, so the bias of query i and key j is ``-m_h |i + S - L - j|`` for every batch element.
    flash-attn's ``flash_attn_varlen_func`` sees each sequence unpadded, so for sequence b with q_b real queries
    and k_b real keys, query i sits at ``i + k_b - q_b``. The two agree when every ``k_b - q_b`` equals
    ``S - L`` (for instance no padding, or self-attention with equal query and key padding), and differ
    otherwise. This function builds flash-attn's version as a float ``attn_mask``: pass it as
    ``attn_mask=`` (without ``alibi_slopes``) to get flash-attn's numbers from attn_lib's kernels.

    Args:
        slopes: (H,) or (B, H) floating ALiBi slopes m_h (:func:`alibi_slopes`), one row per batch element
            for (B, H) as flash-attn accepts.
        q_lens, k_lens: the real lengths q_b and k_b, a list of ints or a 1-D integer tensor of B entries,
            1 <= q_b <= q_len, 1 <= k_b <= kv_len; the real tokens come first (right padding).
        q_len, kv_len: L and S, the padded lengths.
        is_causal: also hide the keys after each query, bottom-right aligned per sequence
            (key j visible from query i iff j <= i + k_b - q_b), as flash-attn's ``causal=True``.

    Returns:
        (B, H, L, S) float tensor in slopes' dtype (float32 for float16/bfloat16 slopes): the bias
        ``-m_h |i + k_b - q_b - j|`` where key j is real (and visible), -inf at padded or hidden keys and on
        padded query rows (those rows then see no key: attn_lib's kernels return 0 there).

    Raises:
        TypeError: slopes not a floating tensor; lengths not ints; is_causal not a bool.
        ValueError: slopes not (H,) or (B, H), NaN or inf in slopes; lengths outside 1..L or 1..S, or not B of
            them.

    Source: flash-attn's ``flash_attn_varlen_func(..., alibi_slopes=...)``: the bias ``-m |i + k_b - q_b - j|``
    of its docstring, per sequence; Press et al. (2022), §3.
    """
    check_tensor("slopes", slopes, floating=True, ndim=(1, 2))
    check_finite("slopes", slopes)
    check_bool("is_causal", is_causal)
    L = _check_int("q_len", q_len, minimum=1)
    S = _check_int("kv_len", kv_len, minimum=1)
    batch = slopes.shape[0] if slopes.dim() == 2 else None
    qs = _lengths("q_lens", q_lens, batch, L)
    ks = _lengths("k_lens", k_lens, len(qs), S)
    B = len(qs)
    dtype = slopes.dtype if slopes.dtype in (torch.float32, torch.float64) else torch.float32
    m = slopes.to(dtype).expand(B, -1) if slopes.dim() == 1 else slopes.to(dtype)  # (B, H)
    q_real = torch.tensor(qs, device=slopes.device)[:, None, None]  # (B, 1, 1)
    k_real = torch.tensor(ks, device=slopes.device)[:, None, None]
    i = torch.arange(L, device=slopes.device)[None, :, None]  # (1, L, 1)
    j = torch.arange(S, device=slopes.device)[None, None, :]  # (1, 1, S)
    rel = i + k_real - q_real - j  # (B, L, S): query i at position i + k_b - q_b, key j at j
    visible = (i < q_real) & (j < k_real)
    if is_causal:
        visible = visible & (rel >= 0)
    bias = -m[:, :, None, None] * rel.abs().to(dtype)[:, None]  # (B, H, L, S)
    return bias.masked_fill(~visible[:, None], -math.inf) + 0.0  # + 0.0 turns -0.0 into 0.0
