"""attn_lib.attention.scaled_dot_product_attention against torch.nn.functional.scaled_dot_product_attention.

torch's function returns only the output; the weights are checked against a float64 softmax
of the scores computed here, written directly from the formula softmax(Q Kᵀ · scale + mask).
"""

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st

from attn_lib.attention import scaled_dot_product_attention as sdpa

f64 = torch.float64


def _randn(shape, gen, dtype=f64):
    return torch.randn(*shape, generator=gen, dtype=f64).to(dtype)


def _reference_weights(q, k, scale=None, mask=None, is_causal=False):
    """softmax(q kᵀ·scale + mask) in float64, straight from the formula (NaN for fully masked rows)."""
    q, k = q.to(f64), k.to(f64)
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    s = q @ k.transpose(-2, -1) * scale
    if is_causal:
        L, S = s.shape[-2:]
        mask = torch.ones(L, S, dtype=torch.bool).tril()
    if mask is not None:
        s = s.masked_fill(~mask, -math.inf) if mask.dtype == torch.bool else s + mask.to(f64)
    return torch.softmax(s, dim=-1)


@st.composite
def attention_case(draw):
    """Random batch dims, lengths, dims, scale and mask kind; tensors from a seeded generator."""
    batch = tuple(draw(st.lists(st.integers(1, 3), min_size=0, max_size=2)))
    L, S = draw(st.integers(1, 6)), draw(st.integers(1, 6))
    E, Ev = draw(st.integers(1, 8)), draw(st.integers(1, 8))
    scale = draw(st.one_of(st.none(), st.floats(0.05, 3.0)))
    kind = draw(st.sampled_from(["none", "bool", "bool_broadcast", "float", "float_broadcast", "causal"]))
    gen = torch.Generator().manual_seed(draw(st.integers(0, 2**31 - 1)))
    q = _randn((*batch, L, E), gen)
    k = _randn((*batch, S, E), gen)
    v = _randn((*batch, S, Ev), gen)
    mask, is_causal = None, False
    if kind == "bool":
        mask = torch.rand(*batch, L, S, generator=gen) < 0.7
    elif kind == "bool_broadcast":  # one mask row per key, shared by every query and batch element
        mask = torch.rand(1, S, generator=gen) < 0.7
    elif kind == "float":
        mask = _randn((*batch, L, S), gen) * 3
    elif kind == "float_broadcast":
        mask = _randn((L, 1), gen) + _randn((1, S), gen)
    elif kind == "causal":
        is_causal = True
    return q, k, v, mask, is_causal, scale


@given(attention_case())
def test_matches_torch_on_float64(case):
    q, k, v, mask, is_causal, scale = case
    out, w = sdpa(q, k, v, mask, is_causal=is_causal, scale=scale)
    want = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=is_causal, scale=scale)
    assert out.shape == want.shape and out.dtype == f64
    torch.testing.assert_close(out, want, atol=1e-10, rtol=1e-10)

    ref = _reference_weights(q, k, scale, mask, is_causal)
    masked_row = ref.isnan().any(-1)  # every key blocked (only possible with a bool mask)
    assert w.shape == ref.shape
    torch.testing.assert_close(w[~masked_row], ref[~masked_row], atol=1e-12, rtol=1e-10)
    assert (w[masked_row] == 0).all()
    sums = w.sum(-1)
    torch.testing.assert_close(sums[~masked_row], torch.ones_like(sums[~masked_row]))
    # output = weights · V, with the weights we return
    torch.testing.assert_close(out, w @ v)


@st.composite
def gqa_case(draw):
    B = draw(st.integers(1, 2))
    hkv, group = draw(st.integers(1, 3)), draw(st.integers(1, 4))
    L, S, E, Ev = (draw(st.integers(1, 5)) for _ in range(4))
    causal = draw(st.booleans())
    gen = torch.Generator().manual_seed(draw(st.integers(0, 2**31 - 1)))
    return (_randn((B, hkv * group, L, E), gen), _randn((B, hkv, S, E), gen), _randn((B, hkv, S, Ev), gen), causal)


@given(gqa_case())
def test_gqa_matches_torch(case):
    q, k, v, causal = case
    out, w = sdpa(q, k, v, is_causal=causal, enable_gqa=True)
    want = F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)
    torch.testing.assert_close(out, want, atol=1e-10, rtol=1e-10)
    assert w.shape == (*q.shape[:-1], k.shape[-2])


def test_gqa_head_assignment_is_interleaved_not_tiled():
    # 4 query heads, 2 kv heads: query heads 0,1 use kv head 0 and heads 2,3 use kv head 1.
    gen = torch.Generator().manual_seed(0)
    q, k, v = _randn((1, 4, 3, 5), gen), _randn((1, 2, 4, 5), gen), _randn((1, 2, 4, 6), gen)
    out, _ = sdpa(q, k, v, enable_gqa=True)
    for j in range(4):
        one, _ = sdpa(q[:, j], k[:, j // 2], v[:, j // 2])
        torch.testing.assert_close(out[:, j], one)


def test_gqa_not_divisible_names_both_numbers():
    q, k = torch.randn(1, 6, 2, 4), torch.randn(1, 4, 2, 4)
    with pytest.raises(ValueError, match=r"H=6.*Hkv=4"):
        sdpa(q, k, k, enable_gqa=True)


def test_fewer_kv_heads_without_gqa_suggests_it():
    q, k = torch.randn(1, 4, 2, 4), torch.randn(1, 2, 2, 4)
    with pytest.raises(ValueError, match="enable_gqa=True"):
        sdpa(q, k, k)


@pytest.mark.parametrize("kind", ["bool", "-inf"])
def test_fully_masked_row_is_zero_like_torch(kind):
    gen = torch.Generator().manual_seed(1)
    q, k, v = _randn((2, 3, 4), gen), _randn((2, 5, 4), gen), _randn((2, 5, 6), gen)
    allowed = torch.ones(3, 5, dtype=torch.bool)
    allowed[1] = False  # query 1 may attend to nothing
    mask = allowed if kind == "bool" else torch.zeros(3, 5, dtype=f64).masked_fill(~allowed, -math.inf)
    out, w = sdpa(q, k, v, mask)
    want = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    assert not out.isnan().any() and not w.isnan().any()
    assert (out[:, 1] == 0).all() and (w[:, 1] == 0).all()
    torch.testing.assert_close(out, want)  # torch gives 0 for that row today too
    torch.testing.assert_close(w.sum(-1)[:, [0, 2]], torch.ones(2, 2, dtype=f64))


def test_large_negative_constant_on_a_full_row_is_not_zero():
    # -1e9 is not -inf: a row blocked only by -1e9 is NOT zeroed. Adding one constant to a whole row leaves
    # the softmax unchanged in exact arithmetic (float64 shows that); in float32, -1e9 + s rounds to -1e9
    # (float32 spacing near 1e9 is 64), so the row becomes uniform. torch agrees in both dtypes.
    gen = torch.Generator().manual_seed(6)
    q, k, v = _randn((1, 2, 4), gen), _randn((1, 3, 4), gen), _randn((1, 3, 2), gen)
    mask = torch.zeros(2, 3, dtype=f64)
    mask[0] = -1e9
    out, w = sdpa(q, k, v, mask)
    torch.testing.assert_close(w[0, 0], _reference_weights(q, k)[0, 0])  # as if unmasked
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, attn_mask=mask))
    q32, k32, v32, m32 = q.float(), k.float(), v.float(), mask.float()
    out32, w32 = sdpa(q32, k32, v32, m32)
    torch.testing.assert_close(w32[0, 0], torch.full((3,), 1 / 3))  # uniform
    torch.testing.assert_close(out32, F.scaled_dot_product_attention(q32, k32, v32, attn_mask=m32))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_huge_logits_stay_finite_and_correct(dtype):
    # scores of about ±1e4: a naive exp overflows to inf (inf/inf = NaN); subtracting the row max does not.
    gen = torch.Generator().manual_seed(2)
    q = torch.tensor([[100.0, 0.0], [-100.0, 0.0]], dtype=dtype)
    k = torch.tensor([[100.0, 0.0], [99.0, 0.0], [-100.0, 0.0]], dtype=dtype)
    v = _randn((3, 4), gen, dtype)
    out, w = sdpa(q, k, v, scale=1.0)  # scores ±1e4 and 9900
    assert torch.isfinite(out).all() and torch.isfinite(w).all()
    naive = torch.exp(q @ k.T) / torch.exp(q @ k.T).sum(-1, keepdim=True)
    assert naive.isnan().any()  # the trap the max-subtraction avoids
    want = F.scaled_dot_product_attention(q.to(f64), k.to(f64), v.to(f64), scale=1.0)
    torch.testing.assert_close(out.to(f64), want, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(w.to(f64), _reference_weights(q, k, 1.0), atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision(dtype):
    gen = torch.Generator().manual_seed(3)
    q, k, v = _randn((2, 3, 7, 16), gen), _randn((2, 3, 9, 16), gen), _randn((2, 3, 9, 8), gen)
    qh, kh, vh = q.to(dtype), k.to(dtype), v.to(dtype)
    out, w = sdpa(qh, kh, vh, is_causal=True)
    assert out.dtype == dtype and w.dtype == dtype
    # reference: the same rounded inputs in float64
    want = F.scaled_dot_product_attention(qh.to(f64), kh.to(f64), vh.to(f64), is_causal=True)
    tol = 2e-3 if dtype == torch.float16 else 2e-2
    torch.testing.assert_close(out.to(f64), want, atol=tol, rtol=tol)
    torch.testing.assert_close(w.to(f64).sum(-1), torch.ones(2, 3, 7, dtype=f64), atol=tol, rtol=0)


def test_half_precision_scores_beyond_fp16_range():
    # q·k = 360000 > float16's max 65504: the scores are computed in float32, so nothing overflows.
    q = torch.full((1, 4), 300.0, dtype=torch.float16)
    k = torch.tensor([[300.0] * 4, [299.0] * 4], dtype=torch.float16)
    v = torch.tensor([[1.0], [2.0]], dtype=torch.float16)
    out, w = sdpa(q, k, v, scale=1.0)
    assert torch.isfinite(out).all() and torch.isfinite(w).all()
    want = F.scaled_dot_product_attention(q.to(f64), k.to(f64), v.to(f64), scale=1.0)
    torch.testing.assert_close(out.to(f64), want, atol=1e-3, rtol=1e-3)


def test_default_scale_is_one_over_sqrt_e():
    gen = torch.Generator().manual_seed(4)
    q, k, v = _randn((3, 16), gen), _randn((5, 16), gen), _randn((5, 2), gen)
    torch.testing.assert_close(sdpa(q, k, v)[1], sdpa(q, k, v, scale=0.25)[1])


def test_dropout_matches_torch_dropout_on_the_weights():
    gen = torch.Generator().manual_seed(5)
    q, k, v = _randn((2, 4, 8), gen), _randn((2, 6, 8), gen), _randn((2, 6, 3), gen)
    torch.manual_seed(0)
    out, w = sdpa(q, k, v, dropout_p=0.5)
    torch.manual_seed(0)
    want_w = F.dropout(_reference_weights(q, k), p=0.5, training=True)
    torch.testing.assert_close(w, want_w)
    torch.testing.assert_close(out, want_w @ v)
    assert ((w == 0) | torch.isclose(w, 2 * _reference_weights(q, k))).all()  # kept weights scaled by 1/(1-p)
    # dropout_p=0 is deterministic and equals the plain result
    torch.testing.assert_close(sdpa(q, k, v, dropout_p=0.0)[0], F.scaled_dot_product_attention(q, k, v))


# ---------------------------------------------------------------- errors name the shapes
def test_error_mismatched_last_dims():
    with pytest.raises(ValueError, match=r"query shape \(2, 3, 4\).*key shape \(2, 5, 6\)"):
        sdpa(torch.randn(2, 3, 4), torch.randn(2, 5, 6), torch.randn(2, 5, 6))


def test_error_key_value_lengths():
    with pytest.raises(ValueError, match=r"key shape \(5, 4\).*value shape \(6, 4\)"):
        sdpa(torch.randn(3, 4), torch.randn(5, 4), torch.randn(6, 4))


def test_error_incompatible_batch():
    with pytest.raises(ValueError, match=r"\(2, 3, 4\).*\(3, 5, 4\).*cannot broadcast"):
        sdpa(torch.randn(2, 3, 4), torch.randn(3, 5, 4), torch.randn(3, 5, 4))


def test_error_mask_cannot_broadcast():
    with pytest.raises(ValueError, match=r"attn_mask of shape \(3, 4\).*\(2, 3, 5\)"):
        sdpa(torch.randn(2, 3, 4), torch.randn(2, 5, 4), torch.randn(2, 5, 4), torch.ones(3, 4, dtype=torch.bool))


def test_error_mask_that_would_enlarge_the_batch():
    # a mask may broadcast to the scores but must not add batch elements the inputs do not have
    with pytest.raises(ValueError, match="attn_mask"):
        sdpa(torch.randn(3, 4), torch.randn(5, 4), torch.randn(5, 4), torch.ones(2, 3, 5, dtype=torch.bool))


def test_error_mask_and_is_causal():
    x = torch.randn(3, 4)
    with pytest.raises(ValueError, match="not both"):
        sdpa(x, x, x, torch.ones(3, 3, dtype=torch.bool), is_causal=True)


@pytest.mark.parametrize("dtype", [torch.long, torch.int32, torch.bool])
def test_error_non_floating_inputs(dtype):
    x = torch.ones(3, 4, dtype=dtype)
    with pytest.raises(TypeError, match=f"query must have a floating dtype.*{dtype}"):
        sdpa(x, x, x)


def test_error_integer_mask_and_mixed_dtypes():
    x = torch.randn(3, 4)
    with pytest.raises(TypeError, match="attn_mask must be bool"):
        sdpa(x, x, x, torch.ones(3, 3, dtype=torch.long))
    with pytest.raises(TypeError, match="share one dtype"):
        sdpa(x, x.double(), x)


def test_error_bad_dropout():
    x = torch.randn(3, 4)
    with pytest.raises(ValueError, match="dropout_p"):
        sdpa(x, x, x, dropout_p=1.5)


# ---------------------------------------------------------------- notebook 03's d_k / temperature explorer
def test_temperature_demo_gradient_is_the_softmax_jacobian():
    from attn_lib.course.viz import softmax_temperature_demo

    demo = softmax_temperature_demo(64, 0.7, scaled=True, num_keys=6, seed=3)
    p = torch.softmax(demo["scores"], -1)
    torch.testing.assert_close(demo["weights"], p)
    jac = torch.diag(p) - torch.outer(p, p)  # d softmax_i / d s_j, derived by hand
    assert demo["gradient_norm"] == pytest.approx(float(torch.linalg.matrix_norm(jac)), rel=1e-9)
    assert demo["max_weight"] == pytest.approx(float(p.max()))


def test_temperature_demo_scale_is_a_temperature_of_sqrt_dk():
    from attn_lib.course.viz import softmax_temperature_demo

    scaled = softmax_temperature_demo(256, 1.0, scaled=True)
    hot = softmax_temperature_demo(256, 16.0, scaled=False)  # temperature sqrt(256) = 16
    torch.testing.assert_close(scaled["weights"], hot["weights"])


def test_temperature_demo_unscaled_saturates_on_average():
    # averaged over seeds: without the scale, large d_k gives near one-hot weights and tiny gradients
    from attn_lib.course.viz import softmax_temperature_demo

    def mean(d_k, scaled, key):
        return sum(softmax_temperature_demo(d_k, scaled=scaled, seed=s)[key] for s in range(30)) / 30

    assert mean(1024, False, "max_weight") > 0.9 > mean(1024, True, "max_weight")
    assert mean(1024, False, "gradient_norm") < 0.5 * mean(1024, True, "gradient_norm")


def test_temperature_demo_errors_and_figure():
    import matplotlib.pyplot as plt

    from attn_lib.course.viz import softmax_temperature_demo, temperature_explorer, temperature_figure

    with pytest.raises(ValueError, match="d_k must be an int in 1..4096, got 0"):
        softmax_temperature_demo(0)
    with pytest.raises(ValueError, match="temperature must be > 0"):
        softmax_temperature_demo(8, 0.0)
    fig = temperature_figure(16, 2.0)
    assert len(fig.axes) == 2
    plt.close("all")
    assert temperature_explorer() is not None
    plt.close("all")


def test_learner_mistakes_get_clear_errors_not_nan_or_torch_internals():
    """Found by trying typical mistakes: empty keys, zero head_dim, NaN inputs or masks."""
    import pytest

    q = torch.randn(2, 3, 5, 4)
    with pytest.raises(ValueError, match="at least one position"):
        sdpa(q, q[..., :0, :], q[..., :0, :])
    with pytest.raises(ValueError, match="E >= 1"):
        sdpa(q[..., :0], q[..., :0], q)
    bad = q.clone()
    bad[0, 0, 0, 0] = float("nan")
    with pytest.raises(ValueError, match="query contains NaN"):
        sdpa(bad, q, q)
    with pytest.raises(ValueError, match="attn_mask contains NaN"):
        sdpa(q, q, q, attn_mask=torch.full((5, 5), float("nan")))


def test_finite_inputs_whose_scores_overflow_get_an_error_naming_their_scale():
    """torch's own SDPA returns NaN here; the old code returned silent zeros."""
    q, k, v = (torch.randn(1, 2, 3, 4) for _ in range(3))
    assert torch.isnan(F.scaled_dot_product_attention(q * 1e20, k * 1e20, v)).any()
    with pytest.raises(ValueError, match=r"scores query @ keyᵀ \* scale overflow torch.float32 .* largest "
                                         r"\|query\| or \|key\| entry is .*e\+20 with E=4"):
        sdpa(q * 1e20, k * 1e20, v)
    # the same values in float64 do not overflow: the result is finite
    out, _ = sdpa(q.double() * 1e20, k.double() * 1e20, v.double())
    assert torch.isfinite(out).all()


def test_infinite_inputs_and_plus_inf_masks_are_refused_minus_inf_blocks():
    q = torch.randn(1, 3, 4)
    with pytest.raises(ValueError, match="key contains -inf"):
        sdpa(q, q.masked_fill(q > 1, float("-inf")), q)
    mask = torch.zeros(3, 3)
    mask[0, 2] = float("inf")
    with pytest.raises(ValueError, match=r"attn_mask contains \+inf .* expected finite values or -inf \(blocked\)"):
        sdpa(q, q, q, mask)
    blocked = torch.zeros(3, 3).masked_fill(~torch.ones(3, 3, dtype=torch.bool).tril(), float("-inf"))
    torch.testing.assert_close(sdpa(q, q, q, blocked)[0], sdpa(q, q, q, is_causal=True)[0])
