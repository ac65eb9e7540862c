"""attn_lib.positional against hand-derived values and transformers' own implementations.

- sinusoidal: the issue's example, re-derived with math.sin/cos; GPT-J's create_sinusoidal_positions.
- RoPE: the issue's example, re-derived by rotating each pair by hand; LLaMA's rotary embedding
  (half-split) and GPT-J's (interleaved); norm preserved; q·k depends only on m - n;
  the two conventions agree up to a fixed permutation; KV-cache offsets.
- ALiBi: the paper's reference code for the slopes (restated below) and BLOOM's implementation.
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from attn_lib.positional import (
    LearnedPositionalEmbedding,
    alibi_bias,
    alibi_slopes,
    apply_rope,
    rope_frequencies,
    rotate_2d,
    sinusoidal_components,
    sinusoidal_positional_encoding,
)

# ---------------------------------------------------------------- sinusoidal


def test_sinusoidal_issue_example_derived_by_hand():
    pe = sinusoidal_positional_encoding(2, 4, dtype=torch.float64)
    # position 1, d_model 4: pair 0 has frequency 1/10000^(0/4) = 1, pair 1 has 1/10000^(2/4) = 0.01
    by_hand = [math.sin(1.0), math.cos(1.0), math.sin(0.01), math.cos(0.01)]
    assert torch.allclose(pe[1], torch.tensor(by_hand, dtype=torch.float64), atol=1e-12)
    # the numbers quoted in the issue and the docstring (rounded by hand from the line above)
    assert torch.allclose(pe[1], torch.tensor([0.84147, 0.54030, 0.0099998, 0.99995], dtype=torch.float64), atol=1e-5)
    # position 0: sin 0 = 0 in even columns, cos 0 = 1 in odd columns
    assert pe[0].tolist() == [0.0, 1.0, 0.0, 1.0]


@given(st.integers(1, 40), st.integers(1, 32).map(lambda k: 2 * k))
def test_sinusoidal_matches_formula_and_gptj(num_positions, d_model):
    from transformers.models.gptj.modeling_gptj import create_sinusoidal_positions

    pe = sinusoidal_positional_encoding(num_positions, d_model)
    assert pe.shape == (num_positions, d_model) and pe.dtype == torch.float32
    # GPT-J stores all sines first, then all cosines: our even / odd columns
    gptj = create_sinusoidal_positions(num_positions, d_model)
    half = d_model // 2
    assert torch.allclose(pe[:, 0::2], gptj[:, :half], atol=1e-5)
    assert torch.allclose(pe[:, 1::2], gptj[:, half:], atol=1e-5)
    # one random entry from the formula of §3.5
    pos, i = num_positions - 1, (d_model // 2) - 1
    angle = pos / 10000 ** (2 * i / d_model)
    assert math.isclose(pe[pos, 2 * i].item(), math.sin(angle), abs_tol=1e-6)
    assert math.isclose(pe[pos, 2 * i + 1].item(), math.cos(angle), abs_tol=1e-6)
    # each (sin, cos) pair lies on the unit circle
    assert torch.allclose(pe[:, 0::2] ** 2 + pe[:, 1::2] ** 2, torch.ones(num_positions, half), atol=1e-5)


def test_sinusoidal_base_and_dtype():
    pe = sinusoidal_positional_encoding(3, 2, base=100.0, dtype=torch.float64)
    assert pe.dtype == torch.float64
    assert torch.allclose(pe[2], torch.tensor([math.sin(2.0), math.cos(2.0)], dtype=torch.float64))
    pe4 = sinusoidal_positional_encoding(3, 4, base=100.0, dtype=torch.float64)
    assert math.isclose(pe4[2, 2].item(), math.sin(2 / 100 ** 0.5))


@pytest.mark.parametrize(
    "args, kwargs, error, words",
    [
        ((4, 5), {}, ValueError, ["d_model", "even", "5"]),
        ((4, 1), {}, ValueError, ["d_model", "1"]),
        ((0, 4), {}, ValueError, ["num_positions", "0"]),
        ((4.0, 4), {}, TypeError, ["num_positions", "float"]),
        ((4, "8"), {}, TypeError, ["d_model", "str"]),
        ((4, 4), {"base": 1.0}, ValueError, ["base", "1.0"]),
        ((4, 4), {"base": "big"}, TypeError, ["base"]),
        ((4, 4), {"dtype": torch.int64}, ValueError, ["dtype", "int64", "truncate"]),
    ],
)
def test_sinusoidal_bad_input(args, kwargs, error, words):
    with pytest.raises(error) as info:
        sinusoidal_positional_encoding(*args, **kwargs)
    for word in words:
        assert word in str(info.value)


@given(st.integers(0, 200), st.integers(1, 16).map(lambda k: 2 * k), st.data())
def test_sinusoidal_components_match_table(position, d_model, data):
    pair = data.draw(st.integers(0, d_model // 2 - 1))
    c = sinusoidal_components(position, pair, d_model)
    row = sinusoidal_positional_encoding(position + 1, d_model, dtype=torch.float64)[position]
    assert math.isclose(c["sin"], row[2 * pair].item(), abs_tol=1e-12)
    assert math.isclose(c["cos"], row[2 * pair + 1].item(), abs_tol=1e-12)
    assert math.isclose(c["wavelength"], 2 * math.pi * 10000 ** (2 * pair / d_model))
    assert math.isclose(c["angle"], position * c["frequency"])


def test_sinusoidal_components_errors():
    with pytest.raises(ValueError, match="pair must be < d_model/2 = 2, got pair=2"):
        sinusoidal_components(0, 2, 4)
    with pytest.raises(ValueError, match="position"):
        sinusoidal_components(-1, 0, 4)
    with pytest.raises(ValueError, match="d_model"):
        sinusoidal_components(0, 0, 3)


# ---------------------------------------------------------------- learned


def test_learned_lookup_and_shapes():
    torch.manual_seed(0)
    emb = LearnedPositionalEmbedding(10, 6)
    assert emb.weight.shape == (10, 6)
    assert 0.01 < emb.weight.std().item() < 0.03  # N(0, 0.02^2) init
    assert torch.equal(emb(4), emb.weight[:4])
    positions = torch.tensor([[0, 3, 9], [1, 1, 2]])
    out = emb(positions)
    assert out.shape == (2, 3, 6)
    assert torch.equal(out[0, 2], emb.weight[9])
    out.sum().backward()  # trainable: positions 1 used twice get gradient 2
    assert torch.equal(emb.weight.grad[1], torch.full((6,), 2.0))
    assert torch.equal(emb.weight.grad[5], torch.zeros(6))
    assert "max_positions=10" in repr(emb)


def test_learned_out_of_range_names_both_numbers():
    emb = LearnedPositionalEmbedding(8, 4)
    with pytest.raises(ValueError) as info:
        emb(torch.tensor([0, 12]))
    assert "12" in str(info.value) and "8" in str(info.value)
    with pytest.raises(ValueError) as info:
        emb(9)
    assert "9" in str(info.value) and "8" in str(info.value)
    with pytest.raises(ValueError, match="-1"):
        emb(torch.tensor([-1]))
    with pytest.raises(TypeError, match="integer"):
        emb(torch.tensor([1.0]))
    with pytest.raises(TypeError, match="str"):
        emb("3")
    with pytest.raises(ValueError, match="max_positions"):
        LearnedPositionalEmbedding(0, 4)
    with pytest.raises(TypeError, match="d_model"):
        LearnedPositionalEmbedding(4, 2.5)


# ---------------------------------------------------------------- RoPE


def _rope_by_hand(x, m, pairs, base=10000.0):
    """Rotate each pair (a, b) of dims of the 1-D list x by m * base^(-2i/d), one 2x2 rotation at a time."""
    d = len(x)
    y = list(x)
    for i, (a, b) in enumerate(pairs):
        theta = m * base ** (-2 * i / d)
        y[a] = x[a] * math.cos(theta) - x[b] * math.sin(theta)
        y[b] = x[a] * math.sin(theta) + x[b] * math.cos(theta)
    return y


def test_rope_issue_example_derived_by_hand():
    x = torch.tensor([[0.0, 0, 0, 0], [1.0, 2.0, 3.0, 4.0]], dtype=torch.float64)  # positions 0 and 1
    inter = apply_rope(x, interleaved=True)
    half = apply_rope(x, interleaved=False)
    by_hand_inter = _rope_by_hand([1, 2, 3, 4], 1, pairs=[(0, 1), (2, 3)])
    by_hand_half = _rope_by_hand([1, 2, 3, 4], 1, pairs=[(0, 2), (1, 3)])
    assert torch.allclose(inter[1], torch.tensor(by_hand_inter, dtype=torch.float64), atol=1e-12)
    assert torch.allclose(half[1], torch.tensor(by_hand_half, dtype=torch.float64), atol=1e-12)
    # the numbers quoted in the issue (rounded from the lines above)
    assert torch.allclose(inter[1], torch.tensor([-1.1426, 1.9221, 2.9599, 4.0298], dtype=torch.float64), atol=1e-4)
    assert torch.allclose(half[1], torch.tensor([-1.9841, 1.9599, 2.4624, 4.0198], dtype=torch.float64), atol=1e-4)


def test_rope_position_zero_is_identity_and_frequencies():
    x = torch.randn(3, 1, 8)
    assert torch.equal(apply_rope(x, torch.zeros(1, dtype=torch.long)), x)
    assert torch.allclose(rope_frequencies(8, dtype=torch.float64),
                          torch.tensor([1.0, 10000 ** -0.25, 10000 ** -0.5, 10000 ** -0.75], dtype=torch.float64))


@given(
    batch=st.integers(1, 3), heads=st.integers(1, 3), seq=st.integers(1, 9),
    half_dim=st.integers(1, 16), offset=st.integers(0, 5000),
    base=st.sampled_from([10000.0, 500000.0, 100.0]),
)
def test_rope_half_split_equals_llama(batch, heads, seq, half_dim, offset, base):
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb

    head_dim = 2 * half_dim
    config = LlamaConfig(hidden_size=head_dim * heads, num_attention_heads=heads, head_dim=head_dim,
                         max_position_embeddings=8192, rope_theta=base)
    config.rope_parameters = {"rope_type": "default", "rope_theta": base}
    rotary = LlamaRotaryEmbedding(config)
    g = torch.Generator().manual_seed(seq * 1000 + head_dim)
    q = torch.randn(batch, heads, seq, head_dim, generator=g)
    k = torch.randn(batch, heads, seq, head_dim, generator=g)
    # per-sequence offsets, as with a KV cache of different lengths
    position_ids = torch.arange(seq)[None, :] + offset + torch.arange(batch)[:, None]  # (B, S)
    cos, sin = rotary(q, position_ids)
    q_hf, k_hf = apply_rotary_pos_emb(q, k, cos, sin)
    ours_q = apply_rope(q, position_ids[:, None, :], base=base)  # positions (B, 1, S) broadcast over heads
    ours_k = apply_rope(k, position_ids[:, None, :], base=base)
    assert torch.allclose(ours_q, q_hf, atol=1e-5, rtol=1e-5)
    assert torch.allclose(ours_k, k_hf, atol=1e-5, rtol=1e-5)


@given(seq=st.integers(1, 9), half_dim=st.integers(1, 16), offset=st.integers(0, 2000))
def test_rope_interleaved_equals_gptj(seq, half_dim, offset):
    from transformers.models.gptj.modeling_gptj import apply_rotary_pos_emb, create_sinusoidal_positions

    head_dim = 2 * half_dim
    g = torch.Generator().manual_seed(seq * 100 + head_dim)
    x = torch.randn(2, seq, 3, head_dim, generator=g)  # GPT-J layout (B, S, H, head_dim)
    position_ids = torch.arange(seq)[None, :] + offset + torch.tensor([[0], [7]])  # (B, S)
    sincos = create_sinusoidal_positions(offset + seq + 8, head_dim)[position_ids]
    sin, cos = torch.split(sincos, head_dim // 2, dim=-1)
    want = apply_rotary_pos_emb(x, sin, cos)
    ours = apply_rope(x.transpose(1, 2), position_ids[:, None, :], interleaved=True).transpose(1, 2)
    assert torch.allclose(ours, want, atol=1e-5, rtol=1e-5)


@given(seq=st.integers(1, 8), half_dim=st.integers(1, 12), interleaved=st.booleans(), seed=st.integers(0, 10**6))
def test_rope_preserves_norm(seq, half_dim, interleaved, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(2, seq, 2 * half_dim, generator=g, dtype=torch.float64)
    positions = torch.randint(-1000, 100000, (seq,), generator=g)
    y = apply_rope(x, positions, interleaved=interleaved)
    assert torch.allclose(y.norm(dim=-1), x.norm(dim=-1), atol=1e-10)


@given(m=st.integers(0, 3000), n=st.integers(0, 3000), shift=st.integers(-500, 5000),
       half_dim=st.integers(1, 12), interleaved=st.booleans(), seed=st.integers(0, 10**6))
def test_rope_dot_product_depends_only_on_offset(m, n, shift, half_dim, interleaved, seed):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(1, 2 * half_dim, generator=g, dtype=torch.float64)
    k = torch.randn(1, 2 * half_dim, generator=g, dtype=torch.float64)

    def score(pos_q, pos_k):
        rq = apply_rope(q, torch.tensor([pos_q]), interleaved=interleaved)
        rk = apply_rope(k, torch.tensor([pos_k]), interleaved=interleaved)
        return (rq * rk).sum().item()

    # (R_m q)·(R_n k) = q·R_(n-m) k: moving both positions by the same shift changes nothing
    assert math.isclose(score(m, n), score(m + shift, n + shift), rel_tol=1e-7, abs_tol=1e-7)
    # and it is the score of positions (0, n - m)
    assert math.isclose(score(m, n), score(0, n - m), rel_tol=1e-7, abs_tol=1e-7)


@given(seq=st.integers(1, 8), half_dim=st.integers(1, 12), seed=st.integers(0, 10**6))
def test_rope_conventions_equal_up_to_permutation(seq, half_dim, seed):
    g = torch.Generator().manual_seed(seed)
    head_dim = 2 * half_dim
    x = torch.randn(3, seq, head_dim, generator=g, dtype=torch.float64)
    positions = torch.randint(0, 10000, (seq,), generator=g)
    # P lists the even dims then the odd dims: it turns interleaved pairs (2i, 2i+1) into (i, i + d/2)
    perm = torch.cat((torch.arange(0, head_dim, 2), torch.arange(1, head_dim, 2)))
    inter = apply_rope(x, positions, interleaved=True)
    half = apply_rope(x[..., perm], positions, interleaved=False)
    assert torch.allclose(inter[..., perm], half, atol=1e-10)
    if half_dim > 1:  # and they are really different on unpermuted input
        assert not torch.allclose(inter, apply_rope(x, positions, interleaved=False))


def test_rope_kv_cache_offsets_match_full_sequence():
    x = torch.randn(2, 4, 10, 16)
    full = apply_rope(x)
    tail = apply_rope(x[..., 6:, :], torch.arange(6, 10))
    assert torch.allclose(tail, full[..., 6:, :], atol=1e-6)
    one = apply_rope(x[..., 9:, :], torch.tensor([9]))
    assert torch.allclose(one, full[..., 9:, :], atol=1e-6)
    assert torch.allclose(apply_rope(x, list(range(10))), full)  # plain lists of ints are accepted


def test_rope_dtypes():
    x = torch.randn(5, 8, dtype=torch.float64)
    assert apply_rope(x).dtype == torch.float64
    xb = x.to(torch.bfloat16)
    yb = apply_rope(xb)
    assert yb.dtype == torch.bfloat16
    assert torch.allclose(yb.double(), apply_rope(x), atol=0.05)


@pytest.mark.parametrize(
    "x, positions, kwargs, error, words",
    [
        (torch.randn(4, 5), None, {}, ValueError, ["head_dim", "5", "even"]),
        (torch.randn(4, 6), torch.arange(4.0), {}, TypeError, ["positions", "float"]),
        (torch.randn(2, 4, 6), torch.arange(5), {}, ValueError, ["positions", "(5,)", "(2, 4)"]),
        (torch.randn(2, 4, 6), torch.zeros(3, 2, 4, dtype=torch.long), {}, ValueError, ["positions", "(3, 2, 4)"]),
        (torch.randn(6), None, {}, ValueError, ["x", "(6,)"]),
        (torch.arange(12).view(2, 6), None, {}, TypeError, ["x", "floating", "int64"]),
        ([[1.0, 2.0]], None, {}, TypeError, ["x", "list"]),
        (torch.randn(2, 6), None, {"base": 0.5}, ValueError, ["base", "0.5"]),
        (torch.randn(2, 6), None, {"interleaved": 1}, TypeError, ["interleaved"]),
        (torch.randn(2, 6), "01", {}, TypeError, ["positions", "str"]),
    ],
)
def test_rope_bad_input(x, positions, kwargs, error, words):
    with pytest.raises(error) as info:
        apply_rope(x, positions, **kwargs)
    for word in words:
        assert word in str(info.value)


def test_rotate_2d():
    p = rotate_2d([1.0, 0.0], math.pi / 2)
    assert torch.allclose(p, torch.tensor([0.0, 1.0], dtype=torch.float64), atol=1e-12)
    # RoPE on a single pair is exactly this rotation by m * theta_0 = m radians
    x = torch.tensor([[0.3, -1.2]], dtype=torch.float64)
    assert torch.allclose(apply_rope(x, torch.tensor([3]))[0], rotate_2d(x[0], 3.0))
    with pytest.raises(ValueError, match="point"):
        rotate_2d([1.0, 2.0, 3.0], 1.0)


# ---------------------------------------------------------------- ALiBi


def _reference_get_slopes(n):
    # ofirpress/attention_with_linear_biases, fairseq/models/transformer.py (the paper's code), restated
    def get_slopes_power_of_2(n):
        start = 2 ** (-2 ** -(math.log2(n) - 3))
        ratio = start
        return [start * ratio**i for i in range(n)]

    if math.log2(n).is_integer():
        return get_slopes_power_of_2(n)
    closest_power_of_2 = 2 ** math.floor(math.log2(n))
    return (get_slopes_power_of_2(closest_power_of_2)
            + _reference_get_slopes(2 * closest_power_of_2)[0::2][: n - closest_power_of_2])


def test_alibi_slopes_eight_heads():
    assert alibi_slopes(8, dtype=torch.float64).tolist() == [2.0 ** -k for k in range(1, 9)]
    assert alibi_slopes(1).tolist() == [2.0 ** -8]


@pytest.mark.parametrize("num_heads", list(range(1, 40)) + [48, 64, 96, 128])
def test_alibi_slopes_match_reference_and_bloom(num_heads):
    from transformers.models.bloom.modeling_bloom import _get_alibi_slopes

    ours = alibi_slopes(num_heads, dtype=torch.float64)
    assert ours.shape == (num_heads,)
    assert torch.allclose(ours, torch.tensor(_reference_get_slopes(num_heads), dtype=torch.float64), rtol=1e-12)
    assert torch.allclose(ours.float(), _get_alibi_slopes(num_heads, "cpu"), rtol=1e-6)
    assert len(set(ours.tolist())) == num_heads  # every head its own slope


@given(num_heads=st.integers(1, 12), q_len=st.integers(1, 9), extra=st.integers(0, 6))
def test_alibi_bias_formula(num_heads, q_len, extra):
    kv_len = q_len + extra
    bias = alibi_bias(num_heads, q_len, kv_len, dtype=torch.float64)
    assert bias.shape == (num_heads, q_len, kv_len)
    slopes = _reference_get_slopes(num_heads)
    for h in range(num_heads):
        for i in range(q_len):
            for j in range(kv_len):
                assert bias[h, i, j].item() == pytest.approx(-slopes[h] * abs(i + extra - j), abs=1e-12)
    # with a KV cache the queries are the last rows of the full square bias
    square = alibi_bias(num_heads, kv_len, kv_len, dtype=torch.float64)
    assert torch.equal(bias, square[:, extra:, :])


def test_alibi_causal_softmax_equals_bloom():
    """BLOOM adds m·j (key position only) and relies on softmax ignoring a constant per row."""
    from transformers.models.bloom.modeling_bloom import build_alibi_tensor

    heads, seq = 6, 7
    scores = torch.randn(1, heads, seq, seq, dtype=torch.float64)
    causal = torch.ones(seq, seq, dtype=torch.bool).tril()
    bloom = build_alibi_tensor(torch.ones(1, seq, dtype=torch.long), heads, torch.float64).view(1, heads, 1, seq)
    want = (scores + bloom).masked_fill(~causal, float("-inf")).softmax(-1)
    ours = (scores + alibi_bias(heads, seq, seq, dtype=torch.float64)).masked_fill(~causal, float("-inf")).softmax(-1)
    assert torch.allclose(ours, want, atol=1e-6)  # BLOOM's slopes are float32


@pytest.mark.parametrize(
    "fn, args, error, words",
    [
        (alibi_slopes, (0,), ValueError, ["num_heads", "0"]),
        (alibi_slopes, (2.0,), TypeError, ["num_heads", "float"]),
        (alibi_bias, (4, 0, 3), ValueError, ["q_len", "0"]),
        (alibi_bias, (4, 3, -2), ValueError, ["kv_len", "-2"]),
        (alibi_bias, (True, 3, 3), TypeError, ["num_heads", "bool"]),
    ],
)
def test_alibi_bad_input(fn, args, error, words):
    with pytest.raises(error) as info:
        fn(*args)
    for word in words:
        assert word in str(info.value)


def test_rotate_half_rejects_an_odd_last_dim():
    import pytest

    from attn_lib.positional import rotate_half

    with pytest.raises(ValueError, match="even last dim"):
        rotate_half(torch.arange(5.0))


def test_dtype_and_device_arguments_one_rule():
    from attn_lib.positional import alibi_bias, alibi_slopes, rope_cos_sin, rope_frequencies, sinusoidal_positional_encoding

    # names of dtypes are read as the dtypes
    assert alibi_slopes(4, dtype="float64").dtype == torch.float64
    cos, sin = rope_cos_sin(torch.arange(3), 8, dtype="float32")
    assert cos.shape == (3, 4) and cos.dtype == torch.float32
    # integer dtypes would truncate slopes < 1, frequencies and biases to 0: refused
    for call in (lambda: alibi_slopes(4, dtype=torch.int64), lambda: alibi_bias(2, 3, 3, dtype=torch.int32),
                 lambda: rope_frequencies(8, dtype=torch.int64), lambda: rope_cos_sin(torch.arange(2), 8, dtype=torch.int64),
                 lambda: sinusoidal_positional_encoding(4, 8, dtype=torch.int64)):
        with pytest.raises(ValueError, match="dtype must be a floating dtype .* an integer dtype would truncate"):
            call()
    with pytest.raises(TypeError, match=r"positions must be an integer tensor of positions, e.g. torch.arange\(L\), got None"):
        rope_cos_sin(None, 8)
    with pytest.raises(ValueError, match="device must be a device such as 'cpu', 'cuda' or 'cuda:0', got 'gpu'"):
        alibi_slopes(4, device="gpu")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="no CUDA GPU is available"):
            rope_frequencies(8, device="cuda")
