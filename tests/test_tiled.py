"""attn_lib.tiled against torch's scaled_dot_product_attention (float64 reference).

Outputs are allocated filled with NaN (``_POISON_OUTPUTS``), so an element the tile loop never
writes fails the comparison. Gradients are compared with autograd through torch's function.
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import attn_lib._tiling as tiling_mod
import attn_lib.tiled as tiled_mod
from references import _flex, sdpa_reference, window_reference
from attn_lib.tiled import (
    causal_tiles,
    naive_attention,
    online_softmax_trace,
    online_softmax_update,
    skipped_tiles,
    tiled_attention,
    window_tiles,
)

from attn_lib.course.bench import measure_peak_memory  # the measurement is course machinery (#33)
from attn_lib.course.viz import plot_online_softmax_step

F = torch.nn.functional
LENGTHS = [1, 17, 64, 100, 130]
HEAD_DIMS = [16, 32, 48, 64, 128]
# every length as L, paired with a different S (L != S) and with itself; every head_dim
CASES = [(L, LENGTHS[(i + shift) % 5], HEAD_DIMS[(i + 2 * shift) % 5]) for i, L in enumerate(LENGTHS) for shift in (0, 1, 3)]
# tolerances against the float64 reference: fp32 running in fp32; fp16 rounds the output to 11 bits
TOL = {torch.float32: dict(atol=2e-6, rtol=1e-5), torch.float16: dict(atol=2e-3, rtol=2e-3)}


@pytest.fixture(autouse=True)
def poison(monkeypatch):
    monkeypatch.setattr(tiling_mod, "_POISON_OUTPUTS", True)  # _new_output lives in attn_lib._tiling


def _qkv(shape_q, S, Ev=None, *, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    *lead, L, E = shape_q
    q = torch.randn(*lead, L, E, generator=g, dtype=torch.float64)
    k = torch.randn(*lead, S, E, generator=g, dtype=torch.float64)
    v = torch.randn(*lead, S, Ev or E, generator=g, dtype=torch.float64)
    return q.to(dtype), k.to(dtype), v.to(dtype)


def _ref_lse(q, k, is_causal, scale=None):
    s = (q.double() @ k.double().transpose(-2, -1)) * (scale or 1 / math.sqrt(q.shape[-1]))
    if is_causal:
        L, S = s.shape[-2:]
        s = s.masked_fill(~torch.ones(L, S, dtype=torch.bool).tril(), -math.inf)
    return torch.logsumexp(s, dim=-1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("is_causal", [False, True])
@pytest.mark.parametrize("L,S,E", CASES)
def test_matches_torch_sdpa(L, S, E, is_causal, dtype):
    q, k, v = _qkv((2, 3, L, E), S, seed=L * 1000 + S + E, dtype=dtype)
    # the reference sees exactly the (rounded) inputs the tiled version sees, in float64
    ref = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), is_causal=is_causal)
    out, lse = tiled_attention(q, k, v, is_causal=is_causal, block_q=32, block_k=16, return_lse=True)
    assert out.dtype == dtype and out.shape == ref.shape
    assert lse.dtype == torch.float32 and lse.shape == (2, 3, L)
    torch.testing.assert_close(out.double(), ref, **TOL[dtype])
    torch.testing.assert_close(lse.double(), _ref_lse(q, k, is_causal), atol=1e-4, rtol=1e-5)


@pytest.mark.parametrize("is_causal", [False, True])
def test_default_blocks_and_head_dim_of_value(is_causal):
    q, k, v = _qkv((1, 2, 300, 32), 257, Ev=24, seed=1)  # ragged against 128, Ev != E
    ref = F.scaled_dot_product_attention(q, k, v, is_causal=is_causal, scale=0.3)
    out = tiled_attention(q, k, v, is_causal=is_causal, scale=0.3)
    torch.testing.assert_close(out, ref, atol=1e-12, rtol=1e-10)


@settings(max_examples=40)
@given(
    L=st.integers(1, 40), S=st.integers(1, 40), E=st.integers(1, 12), Ev=st.integers(1, 6),
    bq=st.integers(1, 17), bk=st.integers(1, 17), is_causal=st.booleans(), lead=st.sampled_from([(), (2,), (2, 1)]),
)
def test_any_shape_and_block_float64(L, S, E, Ev, bq, bk, is_causal, lead):
    q, k, v = _qkv((*lead, L, E), S, Ev=Ev, seed=L + 41 * S)
    ref = F.scaled_dot_product_attention(q, k, v, is_causal=is_causal)
    out, lse = tiled_attention(q, k, v, is_causal=is_causal, block_q=bq, block_k=bk, return_lse=True)
    assert lse.dtype == torch.float64
    torch.testing.assert_close(out, ref, atol=1e-12, rtol=1e-10)
    torch.testing.assert_close(lse, _ref_lse(q, k, is_causal), atol=1e-12, rtol=1e-10)


def test_causal_never_computes_blocks_above_the_diagonal(monkeypatch):
    # L < S, top-left causal: rows 0..31 see keys 0..31 only, so key blocks 32.. must never be computed.
    # A spy on the tile function records every (query block, key block) the loops visit.
    seen = []
    real = tiled_mod._tile_scores

    def spy(p, q_i, k_j, i0, i1, j0, j1):
        seen.append((i0, j0))
        return real(p, q_i, k_j, i0, i1, j0, j1)

    monkeypatch.setattr(tiled_mod, "_tile_scores", spy)
    q, k, v = _qkv((1, 2, 32, 16), 64, seed=3)
    out = tiled_attention(q, k, v, is_causal=True, block_q=16, block_k=16)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, is_causal=True))
    assert sorted(seen) == [(0, 0), (16, 0), (16, 16)]
    seen.clear()
    tiled_attention(q, k, v, block_q=16, block_k=16)  # not causal: all 2 x 4 tiles (the spy can fail)
    assert len(seen) == 8


@settings(max_examples=30)
@given(L=st.integers(1, 20), S=st.integers(1, 20), bq=st.integers(1, 8), bk=st.integers(1, 8), seed=st.integers(0, 99))
def test_bool_mask_and_fully_masked_rows(L, S, bq, bk, seed):
    q, k, v = _qkv((2, L, 8), S, seed=seed)
    g = torch.Generator().manual_seed(seed)
    mask = torch.rand(2, L, S, generator=g) > 0.4
    mask[:, 0] = False  # first row of each batch sees nothing
    out, lse = tiled_attention(q, k, v, attn_mask=mask, block_q=bq, block_k=bk, return_lse=True)
    assert not torch.isnan(out).any() and not torch.isnan(lse).any()
    empty = ~mask.any(-1)
    assert (out[empty] == 0).all() and (lse[empty] == -math.inf).all()
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=torch.where(mask, 0.0, -math.inf).double())
    torch.testing.assert_close(out[~empty], ref[~empty], atol=1e-12, rtol=1e-10)


def test_mask_broadcasts_and_combines_with_causal():
    q, k, v = _qkv((2, 3, 20, 8), 20, seed=5)
    pad = torch.arange(20) < 15  # keys 15.. are padding, same for every row
    out = tiled_attention(q, k, v, attn_mask=pad, is_causal=True, block_q=8, block_k=8)
    allowed = torch.ones(20, 20, dtype=torch.bool).tril() & pad
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)
    torch.testing.assert_close(out, ref, atol=1e-12, rtol=1e-10)


@pytest.mark.parametrize("is_causal", [False, True])
@pytest.mark.parametrize("L,S", [(37, 29), (16, 50), (1, 9)])
def test_gradients_match_autograd_through_torch(L, S, is_causal):
    q, k, v = (t.requires_grad_() for t in _qkv((2, 2, L, 16), S, Ev=8, seed=L * S))
    g = torch.Generator().manual_seed(7)
    d_out = torch.randn(2, 2, L, 8, generator=g, dtype=torch.float64)
    out = tiled_attention(q, k, v, is_causal=is_causal, block_q=8, block_k=8)
    grads = torch.autograd.grad(out, (q, k, v), d_out)
    ref = F.scaled_dot_product_attention(q, k, v, is_causal=is_causal)
    ref_grads = torch.autograd.grad(ref, (q, k, v), d_out)
    for got, want in zip(grads, ref_grads):
        torch.testing.assert_close(got, want, atol=1e-10, rtol=1e-8)


def test_gradients_in_float32_match_float64_autograd():
    q64, k64, v64 = (t.requires_grad_() for t in _qkv((1, 2, 70, 32), 90, seed=11))
    q, k, v = (t.detach().float().requires_grad_() for t in (q64, k64, v64))
    d_out = torch.randn(1, 2, 70, 32, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    grads = torch.autograd.grad(tiled_attention(q, k, v, is_causal=True, block_q=32, block_k=16), (q, k, v), d_out.float())
    ref = torch.autograd.grad(F.scaled_dot_product_attention(q64, k64, v64, is_causal=True), (q64, k64, v64), d_out)
    for got, want in zip(grads, ref):
        assert got.dtype == torch.float32
        torch.testing.assert_close(got.double(), want, atol=2e-5, rtol=1e-4)


def test_gradcheck_including_lse_and_masked_rows():
    q, k, v = (t.requires_grad_() for t in _qkv((1, 7, 4), 6, Ev=3, seed=2))
    mask = torch.rand(7, 6, generator=torch.Generator().manual_seed(0)) > 0.3
    mask[2] = False

    def f(q, k, v):
        out, lse = tiled_attention(q, k, v, attn_mask=mask, is_causal=True, block_q=3, block_k=2, return_lse=True)
        return out, torch.where(torch.isinf(lse), 0.0, lse)  # -inf rows have no gradient

    assert torch.autograd.gradcheck(f, (q, k, v))


def test_backward_never_stores_the_score_matrix():
    # with L = S = 512 the (L, S) float64 matrix would be 2 MiB per head; the backward's extra
    # memory stays at O((L + S) * head_dim) plus one tile
    q, k, v = (t.requires_grad_() for t in _qkv((1, 1, 512, 16), 512, seed=4))
    out = tiled_attention(q, k, v, block_q=64, block_k=64)
    peak, _ = measure_peak_memory(lambda: torch.autograd.grad(out.sum(), (q, k, v)))
    assert peak < 512 * 512 * 8 / 2, peak


def test_padding_mask_is_never_copied_per_head():
    # a (B, 1, 1, S) padding mask broadcast over 8 heads and 512 queries: a full bool copy would add
    # B*H*L*S bytes = 4 MiB; only one tile of it (and of the masked scores) exists at a time
    B, H, N = 2, 8, 512
    q, k, v = _qkv((B, H, N, 16), N, dtype=torch.float32)
    pad = (torch.arange(N) < torch.tensor([[400], [512]]))[:, None, None, :]  # (B, 1, 1, S)
    peak, out = measure_peak_memory(tiled_attention, q, k, v, attn_mask=pad, block_q=128, block_k=128)
    peak_no_mask, _ = measure_peak_memory(tiled_attention, q, k, v, block_q=128, block_k=128)
    assert peak - peak_no_mask < B * H * N * N / 2
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=pad)
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)


def test_peak_memory_is_the_output_plus_one_tile_and_no_input_copy():
    # One (N, G*Bq, Bk) tile of scores (probabilities are computed in place over it), the output, and
    # small per-row vectors: nothing input-sized. The argument checks once made a float64 copy of each
    # input (a float64 sum of a float32 tensor converts it first): +2x the input, caught by this bound.
    # Besides those: a contiguous K tile, the scaled query block and the accumulators, ~1 MiB here.
    B, H, N, D, bq, bk = 1, 8, 4096, 64, 128, 256
    q, k, v = _qkv((B, H, N, D), N, dtype=torch.float32)
    with torch.no_grad():
        peak, _ = measure_peak_memory(tiled_attention, q, k, v, block_q=bq, block_k=bk)
    out_bytes, tile_bytes = q.nbytes, B * H * bq * bk * 4  # 8 MiB, 1 MiB
    assert out_bytes + tile_bytes <= peak < out_bytes + tile_bytes + q.nbytes // 4, (peak, out_bytes, tile_bytes)


def test_no_grad_path_saves_nothing():
    q, k, v = (t.requires_grad_() for t in _qkv((1, 4, 4), 4))
    with torch.no_grad():
        out = tiled_attention(q, k, v)
    assert out.grad_fn is None


def test_naive_attention_matches_torch():
    q, k, v = _qkv((2, 2, 13, 8), 9, seed=9)
    for causal in (False, True):
        torch.testing.assert_close(naive_attention(q, k, v, is_causal=causal),
                                   F.scaled_dot_product_attention(q, k, v, is_causal=causal))


def test_peak_memory_of_naive_vs_tiled():
    # naive holds the (H, N, N) float32 scores and the softmax of them at once: at least 2 H N^2 4 bytes
    H, N, D = 4, 512, 32
    q, k, v = _qkv((1, H, N, D), N, dtype=torch.float32)
    naive_peak, _ = measure_peak_memory(naive_attention, q, k, v)
    tiled_peak, _ = measure_peak_memory(tiled_attention, q, k, v, block_q=128, block_k=128)
    assert naive_peak >= 2 * H * N * N * 4
    assert tiled_peak < naive_peak / 4
    exact, _ = measure_peak_memory(lambda: torch.empty(1000, 1000, dtype=torch.float32))
    assert exact == 4_000_000


@pytest.mark.parametrize(
    "kwargs,exc,words",
    [
        (dict(query=[[1.0]]), TypeError, "query must be a torch.Tensor"),
        (dict(query=torch.ones(2, 4, dtype=torch.int64)), TypeError, "floating dtype"),
        (dict(key=torch.ones(3, 4, dtype=torch.float32)), TypeError, "share one dtype"),
        (dict(key=torch.ones(3, 5, dtype=torch.float64)), ValueError, "same last dim E"),
        (dict(value=torch.ones(4, 4, dtype=torch.float64)), ValueError, "same number of positions S"),
        (dict(query=torch.ones(2, 2, 4, dtype=torch.float64)), ValueError, "same batch/head dims"),
        (dict(query=torch.ones(4, dtype=torch.float64)), ValueError, "at least 2 dims"),
        (dict(key=torch.ones(0, 4, dtype=torch.float64), value=torch.ones(0, 2, dtype=torch.float64)),
         ValueError, "S >= 1"),
        (dict(query=torch.tensor([[1.0, 2, 3, math.nan]] * 2, dtype=torch.float64)), ValueError, "query contains NaN"),
        (dict(value=torch.tensor([[1.0, math.inf]] * 3, dtype=torch.float64)), ValueError, "value contains"),
        (dict(block_q=0), ValueError, "block_q"),
        (dict(block_k=2.0), TypeError, "block_k"),
        (dict(scale=-1.0), ValueError, "scale"),
        (dict(scale="x"), TypeError, "scale"),
        (dict(is_causal=1), TypeError, "is_causal"),
        (dict(causal_align="bottom-right"), ValueError, "causal_align"),
        (dict(enable_gqa="yes"), TypeError, "enable_gqa"),
        (dict(attn_mask=torch.ones(2, 3, dtype=torch.int64)), TypeError, "bool"),
        (dict(attn_mask=torch.ones(5, 3, dtype=torch.bool)), ValueError, "broadcast"),
        (dict(attn_mask=torch.full((2, 3), math.nan, dtype=torch.float64)), ValueError, "NaN"),
        (dict(alibi_slopes=torch.ones(2)), ValueError, "alibi_slopes"),
    ],
)
def test_bad_arguments_raise_clear_errors(kwargs, exc, words):
    args = dict(query=torch.ones(2, 4, dtype=torch.float64), key=torch.ones(3, 4, dtype=torch.float64),
                value=torch.ones(3, 2, dtype=torch.float64))
    args.update(kwargs)
    q, k, v = args.pop("query"), args.pop("key"), args.pop("value")
    with pytest.raises(exc, match=words.replace("(", r"\(").replace(")", r"\)").replace(".", r"\.")):
        tiled_attention(q, k, v, **args)


def test_zero_keys_refused_like_attn_lib_sdpa():
    # a softmax over no keys is undefined; torch returns zeros silently, attn_lib's three functions refuse it
    import attn_lib

    q, k = torch.ones(1, 2, 3, 4), torch.ones(1, 2, 0, 4)
    with pytest.raises(ValueError, match="S >= 1"):
        attn_lib.scaled_dot_product_attention(q, k, k)
    with pytest.raises(ValueError, match="S >= 1"):
        tiled_attention(q, k, k)
    with pytest.raises(ValueError, match="S >= 1"):
        naive_attention(q, k, k)


def test_gqa_shapes_refused_clearly():
    q, k = torch.ones(1, 6, 3, 4), torch.ones(1, 4, 5, 4)
    with pytest.raises(ValueError, match="multiple of the number"):
        tiled_attention(q, k, k, enable_gqa=True)
    with pytest.raises(ValueError, match="enable_gqa=True"):  # fewer KV heads without the flag: say which flag
        tiled_attention(q, torch.ones(1, 2, 5, 4), torch.ones(1, 2, 5, 4))


# ----------------------------------------------------------------------------------------------
# the FlashAttention-2 API: GQA, masks, both causal alignments, ALiBi (float64 against torch)
# ----------------------------------------------------------------------------------------------

def _gqa_qkv(B, H, Hkv, L, S, E, Ev, seed):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(B, H, L, E, generator=g, dtype=torch.float64),
            torch.randn(B, Hkv, S, E, generator=g, dtype=torch.float64),
            torch.randn(B, Hkv, S, Ev, generator=g, dtype=torch.float64))


PAD_LENGTHS = torch.tensor([9, 3])  # key padding, different per batch element


@pytest.mark.parametrize("align", ["top_left", "bottom_right"])
@pytest.mark.parametrize("L,S", [(5, 12), (12, 12), (12, 5), (1, 7)])
@pytest.mark.parametrize("H,Hkv", [(8, 2), (4, 1), (3, 3)])
def test_gqa_padding_alignment_against_torch(L, S, H, Hkv, align):
    q, k, v = _gqa_qkv(2, H, Hkv, L, S, 6, 5, seed=L * 31 + S + H)  # E = 6 and Ev = 5: not powers of two
    pad = (torch.arange(S) < PAD_LENGTHS.clamp(max=S)[:, None])[:, None, None, :]  # (B, 1, 1, S)
    kw = dict(attn_mask=pad, is_causal=True, causal_align=align, enable_gqa=Hkv != H)
    out, lse = tiled_attention(q, k, v, block_q=4, block_k=3, return_lse=True, **kw)
    torch.testing.assert_close(out, sdpa_reference(q, k, v, **kw), atol=1e-12, rtol=1e-10)
    assert not torch.isnan(lse).any()
    if align == "bottom_right" and L > S:  # the first L - S rows see no key: 0, not NaN
        assert (out[:, :, : L - S] == 0).all() and (lse[:, :, : L - S] == -math.inf).all()


@pytest.mark.parametrize("is_causal", [False, True])
def test_alibi_equals_the_bias_of_attn_lib_positional(is_causal):
    from attn_lib.positional import alibi_bias, alibi_slopes

    q, k, v = _gqa_qkv(2, 4, 2, 9, 13, 8, 8, seed=5)
    slopes = alibi_slopes(4, dtype=torch.float64)
    out = tiled_attention(q, k, v, alibi_slopes=slopes, is_causal=is_causal, causal_align="bottom_right",
                          enable_gqa=True, block_q=4, block_k=5)
    bias = alibi_bias(4, 9, 13, dtype=torch.float64)  # (H, L, S), a tensor the tiled loop never builds
    if is_causal:
        from attn_lib.masks import causal_mask

        bias = bias.masked_fill(~causal_mask(9, 13, align="bottom_right"), -math.inf)
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=bias, enable_gqa=True)
    torch.testing.assert_close(out, ref, atol=1e-12, rtol=1e-10)


def test_float_mask_is_added_to_the_logits():
    q, k, v = _gqa_qkv(1, 2, 2, 7, 10, 4, 4, seed=8)
    add = torch.randn(2, 7, 10, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    add[0, :, 8:] = -math.inf
    out = tiled_attention(q, k, v, attn_mask=add, block_q=3, block_k=4)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, attn_mask=add), atol=1e-12, rtol=1e-10)


@pytest.mark.parametrize("align", ["top_left", "bottom_right"])
@pytest.mark.parametrize("L,S", [(6, 11), (11, 6)])
def test_gradients_with_gqa_padding_alibi_both_alignments(L, S, align):
    q, k, v = (t.requires_grad_() for t in _gqa_qkv(2, 4, 2, L, S, 5, 3, seed=L + S))
    pad = (torch.arange(S) < torch.tensor([S, S - 2])[:, None])[:, None, None, :]
    slopes = torch.tensor([0.3, 0.1, 0.05, 0.0], dtype=torch.float64)
    kw = dict(attn_mask=pad, is_causal=True, causal_align=align, enable_gqa=True, alibi_slopes=slopes)
    d_out = torch.randn(2, 4, L, 3, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    grads = torch.autograd.grad(tiled_attention(q, k, v, block_q=4, block_k=4, **kw), (q, k, v), d_out)
    ref = torch.autograd.grad(sdpa_reference(q, k, v, **kw), (q, k, v), d_out)
    for got, want in zip(grads, ref):
        torch.testing.assert_close(got, want, atol=1e-10, rtol=1e-8)


def test_equivalent_to_snippet_in_the_docstring_runs():
    import doctest

    finder = doctest.DocTestFinder()
    (test,) = [t for t in finder.find(tiled_mod) if t.name.endswith(".tiled_attention")]
    assert len(test.examples) >= 5  # the snippet is there, and not an empty doctest
    runner = doctest.DocTestRunner()
    runner.run(test)
    assert runner.failures == 0 and runner.tries == len(test.examples)


def test_function_and_module_names_do_not_collide():
    # attn_lib.tiled_attention used to be both a module and the re-exported function
    import attn_lib
    import attn_lib.flash  # noqa: F401
    import attn_lib.tiled  # noqa: F401

    q = torch.randn(1, 1, 3, 4)
    torch.testing.assert_close(attn_lib.tiled_attention(q, q, q), F.scaled_dot_product_attention(q, q, q))
    torch.testing.assert_close(attn_lib.flash_attention(q, q, q), F.scaled_dot_product_attention(q, q, q))


def test_online_softmax_update_names_a_shape_mismatch():
    m, l, acc = torch.zeros(3), torch.zeros(3), torch.zeros(3, 2)
    with pytest.raises(ValueError, match=r"values \(Bk, Ev\).*values \(5, 3\)"):
        online_softmax_update(m, l, acc, torch.zeros(3, 5), torch.zeros(5, 3))
    with pytest.raises(TypeError, match="scores"):
        online_softmax_update(m, l, acc, [[1.0]], torch.zeros(1, 2))


# ----------------------------------------------------------------------------------------------
# the notebook's small pieces
# ----------------------------------------------------------------------------------------------
@settings(max_examples=50)
@given(S=st.integers(1, 30), Ev=st.integers(1, 4), bk=st.integers(1, 10), seed=st.integers(0, 999), spread=st.floats(0.1, 30))
def test_trace_is_exact_after_every_block(S, Ev, bk, seed, spread):
    g = torch.Generator().manual_seed(seed)
    s = torch.randn(S, generator=g, dtype=torch.float64) * spread
    v = torch.randn(S, Ev, generator=g, dtype=torch.float64)
    trace = online_softmax_trace(s, v, bk)
    assert len(trace) == math.ceil(S / bk)
    for step in trace:
        # after the block ending at `stop`, acc / l is exactly the softmax over keys 0..stop-1
        want = torch.softmax(s[: step.stop], 0) @ v[: step.stop]
        torch.testing.assert_close(step.output, want, atol=1e-12, rtol=1e-10)
        assert step.m == s[: step.stop].max().item()
        assert math.isclose(step.l, torch.exp(s[: step.stop] - step.m).sum().item(), rel_tol=1e-12)
        assert 0.0 <= step.rescale <= 1.0
    assert trace[0].rescale == 0.0  # nothing to rescale before the first block


def test_global_max_one_pass_is_the_same_number_but_not_online():
    # the notebook's point: using the max of ALL scores gives the same result, but needs every
    # score before the first exponential; the online version only ever looks at one block.
    s = torch.tensor([0.5, 3.0, -1.0, 7.0, 2.0], dtype=torch.float64)
    v = torch.arange(10, dtype=torch.float64).reshape(5, 2)
    trace = online_softmax_trace(s, v, 2)
    assert [st_.m for st_ in trace] == [3.0, 7.0, 7.0]  # the running max grows; the global max is known only at the end
    p = torch.exp(s - s.max())
    torch.testing.assert_close(trace[-1].output, (p / p.sum()) @ v)


@settings(max_examples=50)
@given(R=st.integers(1, 4), S1=st.integers(1, 8), S2=st.integers(1, 8), seed=st.integers(0, 999))
def test_update_equals_direct_state_of_both_blocks(R, S1, S2, seed):
    g = torch.Generator().manual_seed(seed)
    s = torch.randn(R, S1 + S2, generator=g, dtype=torch.float64) * 4
    v = torch.randn(S1 + S2, 3, generator=g, dtype=torch.float64)
    state = (torch.full((R,), -math.inf, dtype=torch.float64), torch.zeros(R, dtype=torch.float64),
             torch.zeros(R, 3, dtype=torch.float64))
    state = online_softmax_update(*state, s[:, :S1], v[:S1])
    m, l, acc = online_softmax_update(*state, s[:, S1:], v[S1:])
    m_direct = s.amax(-1)
    p = torch.exp(s - m_direct[:, None])
    torch.testing.assert_close(m, m_direct)
    torch.testing.assert_close(l, p.sum(-1))
    torch.testing.assert_close(acc, p @ v)


@settings(max_examples=60)
@given(L=st.integers(1, 40), S=st.integers(1, 40), bq=st.integers(1, 12), bk=st.integers(1, 12))
def test_causal_tiles_equal_the_tiles_the_mask_touches(L, S, bq, bk):
    allowed = torch.ones(L, S, dtype=torch.bool).tril()  # top-left causal, as torch's is_causal
    want = [(i, j) for i in range(math.ceil(L / bq)) for j in range(math.ceil(S / bk))
            if allowed[i * bq:(i + 1) * bq, j * bk:(j + 1) * bk].any()]
    assert causal_tiles(L, S, bq, bk) == want


def test_causal_tiles_rejects_bad_sizes():
    with pytest.raises(ValueError, match="q_len"):
        causal_tiles(0, 4, 2, 2)
    with pytest.raises(TypeError, match="block_k"):
        causal_tiles(4, 4, 2, 2.5)


def test_trace_rejects_bad_input():
    with pytest.raises(ValueError, match="scores"):
        online_softmax_trace(torch.zeros(2, 2), torch.zeros(2, 1), 1)
    with pytest.raises(ValueError, match="values"):
        online_softmax_trace(torch.zeros(3), torch.zeros(2, 1), 1)
    with pytest.raises(ValueError, match="block_k"):
        online_softmax_trace(torch.zeros(3), torch.zeros(3, 1), 0)


def test_plot_step_draws_the_state():
    import matplotlib.pyplot as plt

    s = torch.tensor([0.5, 3.0, -1.0, 7.0, 2.0])
    v = torch.randn(5, 3, generator=torch.Generator().manual_seed(0))
    ax = plot_online_softmax_step(s, v, 2, 1)
    assert "block 1: keys 2..3" in ax[0].get_title()
    assert "m = 7.000" in ax[0].get_legend().get_texts()[0].get_text()
    assert len(ax[1].patches) == 6  # running output and exact output, 3 dimensions each
    with pytest.raises(ValueError, match="step"):
        plot_online_softmax_step(s, v, 2, 3)
    plt.close("all")


# ----------------------------------------------------------------------------------------------
# silent wrong answers that became right answers or clear errors (issue 22)
# ----------------------------------------------------------------------------------------------
def _alibi_reference_bias(slopes, L, S):
    """-m |i + S - L - j| from the slopes themselves (differentiable in them); slopes (H,) or (B, H)."""
    dist = (torch.arange(L)[:, None] + S - L - torch.arange(S)[None, :]).abs().double()
    return -slopes.double()[..., None, None] * dist


@pytest.mark.parametrize("case", ["scale", "large inputs"])
def test_overflowing_scores_raise_one_error_in_every_function(case):
    from attn_lib.attention import scaled_dot_product_attention
    from attn_lib.flash import flash_attention

    q, k, v = _qkv((1, 2, 5, 64), 6, dtype=torch.float32)
    kw = {"scale": 1e38} if case == "scale" else {}
    if case == "large inputs":  # finite entries whose dot products pass float32's 3.4e38
        q, k = q * 1e19, k * 1e19
    for fn in (scaled_dot_product_attention, tiled_attention,
               lambda *a, **kw_: flash_attention(*a, backend="triton", **kw_)):
        with pytest.raises(ValueError, match="overflow torch.float32"):
            fn(q, k, v, **kw)


def test_huge_but_orthogonal_inputs_are_not_refused():
    # |q| |k| = 1e40 passes the Cauchy-Schwarz bound, but every score is 0: the exact check lets it through
    q = torch.zeros(1, 1, 3, 4)
    k = torch.zeros(1, 1, 5, 4)
    q[..., 0], k[..., 1] = 1e20, 1e20
    v = torch.randn(1, 1, 5, 4)
    assert torch.allclose(tiled_attention(q, k, v), v.mean(dim=-2, keepdim=True).expand(1, 1, 3, 4), atol=1e-6)


@pytest.mark.parametrize("mask_shape", [(5, 7), (2, 1, 1, 7), (2, 3, 5, 7)])
@pytest.mark.parametrize("only_mask", [False, True])
def test_float_mask_gets_torchs_gradient(mask_shape, only_mask):
    q, k, v = _qkv((2, 3, 5, 8), 7)
    q.requires_grad_(not only_mask)
    mask = torch.randn(*mask_shape, dtype=torch.float64, requires_grad=True)
    mask_ref = mask.detach().clone().requires_grad_()
    d_out = torch.randn(2, 3, 5, 8, dtype=torch.float64)
    out = tiled_attention(q, k, v, attn_mask=mask, block_q=2, block_k=3)
    ref = F.scaled_dot_product_attention(q.detach(), k, v, attn_mask=mask_ref)
    torch.testing.assert_close(out, ref, atol=1e-12, rtol=0)
    (out * d_out).sum().backward()
    (ref * d_out).sum().backward()
    torch.testing.assert_close(mask.grad, mask_ref.grad, atol=1e-12, rtol=0)


@pytest.mark.parametrize("per_batch", [False, True])
@pytest.mark.parametrize("is_causal", [False, True])
def test_alibi_slopes_get_their_gradient(per_batch, is_causal):
    B, H, L, S = 2, 4, 5, 9
    q, k, v = _qkv((B, H, L, 8), S)
    shape = (B, H) if per_batch else (H,)
    slopes = (torch.rand(*shape, dtype=torch.float64) + 0.1).requires_grad_()
    slopes_ref = slopes.detach().clone().requires_grad_()
    bias = _alibi_reference_bias(slopes_ref, L, S)
    if is_causal:
        bias = bias.masked_fill(~torch.ones(L, S, dtype=torch.bool).tril(S - L), -math.inf)
    out = tiled_attention(q, k, v, alibi_slopes=slopes, is_causal=is_causal, causal_align="bottom_right",
                          block_q=2, block_k=4)
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
    torch.testing.assert_close(out, ref, atol=1e-12, rtol=0)
    d_out = torch.randn_like(out)
    (out * d_out).sum().backward()
    (ref * d_out).sum().backward()
    torch.testing.assert_close(slopes.grad, slopes_ref.grad, atol=1e-11, rtol=0)


def test_key_changed_in_place_after_the_forward_is_an_error():
    q, k, v = (t.requires_grad_() for t in _qkv((1, 2, 4, 8), 6))
    out = tiled_attention(q, k, v)
    with torch.no_grad():
        k.add_(1.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        out.sum().backward()


@pytest.mark.parametrize("shape_q,shape_kv,gqa", [((1, 0, 4, 8), (1, 0, 6, 8), False),
                                                  ((1, 0, 4, 8), (1, 0, 6, 8), True),
                                                  ((0, 2, 4, 8), (0, 2, 6, 8), False),
                                                  ((2, 3, 0, 8), (2, 3, 6, 8), False)])
def test_empty_heads_or_batch_give_torchs_empty_output(shape_q, shape_kv, gqa):
    from attn_lib.flash import flash_attention

    q, k, v = torch.randn(shape_q), torch.randn(shape_kv), torch.randn(shape_kv)
    want = F.scaled_dot_product_attention(q, k, v, enable_gqa=gqa).shape
    assert tiled_attention(q, k, v, enable_gqa=gqa).shape == want
    out, lse = tiled_attention(q, k, v, enable_gqa=gqa, return_lse=True)
    assert lse.shape == want[:-1]
    assert flash_attention(q, k, v, enable_gqa=gqa, backend="triton").shape == want


def test_tiled_backward_is_twice_differentiable():
    q, k, v = (t.requires_grad_() for t in _qkv((1, 2, 3, 4), 5))
    mask = torch.randn(3, 5, dtype=torch.float64)
    fn = lambda q, k, v: tiled_attention(q, k, v, attn_mask=mask, block_q=2, block_k=2)  # noqa: E731
    assert torch.autograd.gradgradcheck(fn, (q, k, v))


@pytest.mark.parametrize("Hkv", [4, 2])
def test_per_batch_alibi_slopes_match_the_bias(Hkv):
    B, H, L, S = 3, 4, 6, 6
    g = torch.Generator().manual_seed(3)
    q = torch.randn(B, H, L, 8, generator=g, dtype=torch.float64)
    k, v = (torch.randn(B, Hkv, S, 8, generator=g, dtype=torch.float64) for _ in range(2))
    slopes = torch.rand(B, H, generator=g, dtype=torch.float64)
    out = tiled_attention(q, k, v, alibi_slopes=slopes, enable_gqa=Hkv != H, block_q=4, block_k=4)
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=_alibi_reference_bias(slopes, L, S), enable_gqa=Hkv != H)
    torch.testing.assert_close(out, ref, atol=1e-12, rtol=0)
    with pytest.raises(ValueError, match=r"\(B, H\)"):
        tiled_attention(q, k, v, alibi_slopes=slopes[:2], enable_gqa=Hkv != H)


@pytest.mark.parametrize("is_causal", [False, True])
def test_alibi_distance_padded_and_flash_attn_varlen_conventions(is_causal):
    """attn_lib measures the distance on the padded tensor; alibi_varlen_mask gives flash-attn's varlen one.

    flash-attn's varlen API runs each sequence unpadded: the reference here is tiled_attention on each
    sequence cut to its real lengths (where the two conventions coincide, since L = q_b and S = k_b).
    """
    from attn_lib.masks import padding_mask
    from attn_lib.positional import alibi_varlen_mask

    B, H, L, S, E = 3, 2, 5, 8, 4
    q_lens, k_lens = [5, 3, 2], [8, 6, 3]  # k_b - q_b = 3, 3, 1 against S - L = 3: sequence 2 differs
    g = torch.Generator().manual_seed(7)
    q = torch.randn(B, H, L, E, generator=g, dtype=torch.float64)
    k, v = (torch.randn(B, H, S, E, generator=g, dtype=torch.float64) for _ in range(2))
    slopes = torch.tensor([0.5, 0.25], dtype=torch.float64)
    varlen = tiled_attention(q, k, v, attn_mask=alibi_varlen_mask(slopes, q_lens, k_lens, L, S, is_causal=is_causal))
    keys = padding_mask(torch.tensor(k_lens), S)[:, None, None, :]  # (B, 1, 1, S), True = real key
    padded = tiled_attention(q, k, v, attn_mask=keys, alibi_slopes=slopes, is_causal=is_causal,
                             causal_align="bottom_right")
    for b, (lq, lk) in enumerate(zip(q_lens, k_lens)):
        alone = tiled_attention(q[b:b + 1, :, :lq], k[b:b + 1, :, :lk], v[b:b + 1, :, :lk], alibi_slopes=slopes,
                                is_causal=is_causal, causal_align="bottom_right")
        torch.testing.assert_close(varlen[b:b + 1, :, :lq], alone, atol=1e-12, rtol=0)
        assert (varlen[b, :, lq:] == 0).all()  # padded query rows see no key
        same = lk - lq == S - L
        assert torch.allclose(padded[b:b + 1, :, :lq], alone, atol=1e-12) == same, (b, same)


# ----------------------------------------------------------------------------------------------
# flash-attn's window_size and softcap, gpt-oss's sinks (issue 25, "In the kernels")
# ----------------------------------------------------------------------------------------------

def _windowed_inputs(B, H, Hkv, L, S, E, seed, dtype=torch.float64, sinks=False):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, H, L, E, generator=g, dtype=torch.float64).to(dtype).requires_grad_()
    k = torch.randn(B, Hkv, S, E, generator=g, dtype=torch.float64).to(dtype).requires_grad_()
    v = torch.randn(B, Hkv, S, E, generator=g, dtype=torch.float64).to(dtype).requires_grad_()
    z = (torch.randn(H, generator=g, dtype=torch.float64) * 2).to(dtype).requires_grad_() if sinks else None
    return q, k, v, z


_side = st.one_of(st.just(-1), st.integers(0, 12))


@settings(max_examples=40, deadline=None)
@given(L=st.integers(1, 14), S=st.integers(1, 14), left=_side, right=_side, cap=st.sampled_from([None, 0.0, 0.7, 5.0]),
       sink=st.booleans(), is_causal=st.booleans(), align=st.sampled_from(["top_left", "bottom_right"]),
       bq=st.integers(1, 6), bk=st.integers(1, 6), seed=st.integers(0, 99))
def test_window_softcap_sinks_match_the_float64_reference(L, S, left, right, cap, sink, is_causal, align, bq, bk, seed):
    q, k, v, z = _windowed_inputs(1, 4, 2, L, S, 8, seed, sinks=sink)
    kw = dict(window_size=(left, right), softcap=cap, sinks=z, is_causal=is_causal, causal_align=align, enable_gqa=True)
    with torch.no_grad():
        out, lse = tiled_attention(q, k, v, return_lse=True, block_q=bq, block_k=bk, **kw)
        ref, ref_lse = window_reference(q, k, v, **kw)
    torch.testing.assert_close(out, ref, atol=1e-12, rtol=1e-10)
    torch.testing.assert_close(lse, ref_lse, atol=1e-12, rtol=1e-10)


# (H, Hkv, L, S, window, softcap, sinks, is_causal, align): GQA and MHA, L < S, L > S, both alignments
GRAD_CASES = [
    (4, 2, 9, 23, (6, 2), 2.0, True, False, "top_left"),
    (4, 1, 23, 9, (-1, 0), 1.5, True, True, "bottom_right"),
    (2, 2, 16, 16, (3, -1), None, True, True, "top_left"),
    (4, 2, 12, 19, (4, 4), 30.0, False, True, "bottom_right"),
]


@pytest.mark.parametrize("H,Hkv,L,S,window,cap,sink,is_causal,align", GRAD_CASES)
def test_window_softcap_sinks_gradients_with_padding(H, Hkv, L, S, window, cap, sink, is_causal, align):
    # q, k, v and sinks gradients, also through lse, against autograd through the float64 SDPA reference
    q, k, v, z = _windowed_inputs(2, H, Hkv, L, S, 8, seed=L + S + H, sinks=sink)
    pad = (torch.arange(S) < torch.tensor([S, max(1, S - 5)])[:, None])[:, None, None, :]  # (B, 1, 1, S)
    kw = dict(window_size=window, softcap=cap, sinks=z, is_causal=is_causal, causal_align=align, enable_gqa=H != Hkv,
              attn_mask=pad)
    out, lse = tiled_attention(q, k, v, return_lse=True, block_q=4, block_k=5, **kw)
    ref, ref_lse = window_reference(q, k, v, **kw)
    torch.testing.assert_close(out, ref, atol=1e-12, rtol=1e-10)
    g = torch.Generator().manual_seed(5)
    d_out, d_lse = torch.randn(out.shape, generator=g, dtype=torch.float64), torch.randn(lse.shape, generator=g, dtype=torch.float64)
    inputs = (q, k, v) + ((z,) if sink else ())

    def loss(o, lse_):
        return (o * d_out).sum() + (lse_.masked_fill(lse_ == -math.inf, 0.0) * d_lse).sum()

    grads = torch.autograd.grad(loss(out, lse), inputs)
    want = torch.autograd.grad(loss(ref, ref_lse), inputs)
    for name, a, b in zip(["q", "k", "v", "sinks"], grads, want):
        torch.testing.assert_close(a, b, atol=1e-11, rtol=1e-9, msg=f"d{name}")


def test_sinks_gradient_in_float32_and_gradcheck():
    q, k, v, z = _windowed_inputs(1, 2, 2, 7, 9, 4, seed=3, sinks=True)
    fn = lambda q_, k_, v_, z_: tiled_attention(q_, k_, v_, sinks=z_, softcap=1.5, window_size=(3, 1),  # noqa: E731
                                                block_q=3, block_k=4, return_lse=True)
    assert torch.autograd.gradcheck(fn, (q, k, v, z))
    q32, k32, v32, z32 = (t.detach().float().requires_grad_() for t in (q, k, v, z))
    g32 = torch.autograd.grad(fn(q32, k32, v32, z32)[0].sum(), (q32, k32, v32, z32))
    g64 = torch.autograd.grad(fn(q, k, v, z)[0].sum(), (q, k, v, z))
    for a, b in zip(g32, g64):
        torch.testing.assert_close(a.double(), b, atol=1e-5, rtol=1e-4)



@pytest.mark.parametrize("window,cap,sink", [((5, 0), 2.0, True), ((-1, 3), 4.0, False), ((2, 6), None, True)])
def test_window_softcap_sinks_match_flex_attention(window, cap, sink):
    # forward and lse against FlexAttention; its backward is not implemented on the CPU (torch 2.13 raises
    # "FlexAttention does not support backward on CPU"), so the gradients are checked against the SDPA reference
    q, k, v, z = (None if t is None else t.detach() for t in _windowed_inputs(2, 4, 2, 10, 24, 8, seed=7, sinks=sink))
    lengths = torch.tensor([24, 19])
    pad = (torch.arange(24) < lengths[:, None])[:, None, None, :]
    out, lse = tiled_attention(q, k, v, window_size=window, softcap=cap, sinks=z, attn_mask=pad, enable_gqa=True,
                               return_lse=True, block_q=4, block_k=8)
    flex, flex_lse = _flex(q, k, v, window_size=window, softcap=cap, sinks=z, lengths=lengths, enable_gqa=True)
    torch.testing.assert_close(out, flex, atol=1e-12, rtol=1e-10)
    torch.testing.assert_close(lse, flex_lse, atol=1e-12, rtol=1e-10)


def _count_tiles(monkeypatch_ctx, fn):
    """Run ``fn`` with a spy on tiled._tile_scores: (forward tiles, backward tiles) the loops computed."""
    seen = {"forward": [], "backward": []}
    real = tiled_mod._tile_scores

    def spy(p, q_i, k_j, i0, i1, j0, j1, **kw):
        seen["backward" if kw.get("with_tanh") else "forward"].append((i0, j0))
        return real(p, q_i, k_j, i0, i1, j0, j1, **kw)

    monkeypatch_ctx.setattr(tiled_mod, "_tile_scores", spy)
    fn()
    return seen


@settings(max_examples=40, deadline=None)
@given(L=st.integers(1, 30), S=st.integers(1, 30), left=_side, right=_side, bq=st.integers(1, 8), bk=st.integers(1, 8),
       is_causal=st.booleans(), align=st.sampled_from(["top_left", "bottom_right"]))
def test_skipped_tiles_are_the_tiles_the_loops_skip(L, S, left, right, bq, bk, is_causal, align):
    # the spy sees every tile the forward and the backward compute; window_tiles / skipped_tiles must say the same
    kw = dict(window_size=(left, right), is_causal=is_causal, causal_align=align)
    q, k, v, _ = _windowed_inputs(1, 1, 1, L, S, 4, seed=L * S)
    with pytest.MonkeyPatch.context() as mp:
        seen = _count_tiles(mp, lambda: tiled_attention(q, k, v, block_q=bq, block_k=bk, **kw).sum().backward())
    want = sorted((i * bq, j * bk) for i, j in window_tiles(L, S, bq, bk, **kw))
    assert sorted(seen["forward"]) == want
    assert sorted(seen["backward"]) == want  # the backward skips the same tiles
    total = math.ceil(L / bq) * math.ceil(S / bk)
    assert skipped_tiles(L, S, bq, bk, **kw) == total - len(want)
    # nothing visible is skipped: every (row, key) pair the mask allows lies in a computed tile
    allowed = window_reference(q, k, v, **kw)[1].isfinite()  # (1, 1, L) rows that see a key
    r = torch.arange(L)[:, None] + S - L
    c = torch.arange(S)[None, :]
    vis = torch.ones(L, S, dtype=torch.bool)
    if left >= 0:
        vis &= c >= r - left
    if right >= 0:
        vis &= c <= r + right
    if is_causal:
        from attn_lib.masks import causal_mask
        vis &= causal_mask(L, S, align=align)
    assert torch.equal(vis.any(-1), allowed[0, 0])
    touched = {(int(a) // bq, int(b) // bk) for a, b in vis.nonzero()}
    assert touched <= set(window_tiles(L, S, bq, bk, **kw))
    if not is_causal:  # a window alone: the computed tiles are exactly the tiles it touches
        assert touched == set(window_tiles(L, S, bq, bk, **kw))


def test_sliding_window_skips_most_tiles_at_length():
    # Mistral-like: 4096 tokens, window 1024 back, causal: of 16 x 16 tiles of 256, the loops compute 16 + 4 * 15
    kw = dict(window_size=(1024, 0), is_causal=True)
    assert skipped_tiles(4096, 4096, 256, 256, **kw) == 256 - (16 * 5 - (1 + 2 + 3 + 4))
    assert skipped_tiles(4096, 4096, 256, 256, is_causal=True) == 256 - 136  # causal alone: 120 of 256


@pytest.mark.parametrize("kwargs,exc,words", [
    (dict(window_size=3), TypeError, r"window_size must be a pair of ints \(left, right\).*got int 3"),
    (dict(window_size=(2, 1.5)), TypeError, "window_size must be a pair of ints"),
    (dict(window_size=(True, 1)), TypeError, "window_size must be a pair of ints"),
    (dict(window_size=(-2, 0)), ValueError, r"each -1 \(unbounded\) or >= 0, got \(-2, 0\)"),
    (dict(softcap=-1.0), ValueError, "softcap must be a number >= 0"),
    (dict(softcap="30"), TypeError, "softcap must be None or a number"),
    (dict(softcap=math.inf), ValueError, "softcap must be a finite number"),
    (dict(sinks=[0.0, 1.0]), TypeError, "sinks must be a torch.Tensor"),
    (dict(sinks=torch.zeros(3)), ValueError, r"sinks must have shape \(H,\) = \(2,\).*got shape \(3,\)"),
    (dict(sinks=torch.zeros(1, 2)), ValueError, "sinks must have 1 dims"),
    (dict(sinks=torch.tensor([0.0, math.nan])), ValueError, "sinks"),
    (dict(sinks=torch.zeros(2, dtype=torch.long)), TypeError, "sinks must have a floating dtype"),
    (dict(compile_tile=1), TypeError, "compile_tile must be a bool"),
])
def test_window_softcap_sinks_bad_arguments_raise_clear_errors(kwargs, exc, words):
    q = torch.randn(1, 2, 5, 8)
    with pytest.raises(exc, match=words):
        tiled_attention(q, q, q, **kwargs)


def test_window_tiles_rejects_bad_arguments():
    with pytest.raises(ValueError, match="window_size"):
        window_tiles(8, 8, 4, 4, window_size=(-3, 0))
    with pytest.raises(ValueError, match="q_len"):
        skipped_tiles(0, 8, 4, 4)


def _compiler_available() -> bool:
    import shutil

    return any(shutil.which(c) for c in ("g++", "c++", "clang++"))


@pytest.mark.slow  # one Inductor compile: ~20-40 s on the 2-core machine (less when its on-disk cache is warm)
@pytest.mark.skipif(not _compiler_available(), reason="torch.compile (Inductor) needs a C++ compiler on the CPU; "
                    "none of g++, c++, clang++ is on PATH")
def test_compiled_tile_step_equals_the_eager_step():
    # the fusion lesson: the same online-softmax step, Inductor-compiled, gives the eager numbers (float32 round-off)
    g = torch.Generator().manual_seed(0)
    n, R, Bk, Ev = 2, 8, 16, 8  # the shapes of the loop below: one compile
    s = torch.randn(n, R, Bk, generator=g) * 3
    s[0, 0] = -math.inf  # a row that has seen only masked keys so far
    s[1, 2, :5] = -math.inf
    m = torch.randn(n, R, generator=g)
    m[0, 0] = -math.inf
    l, acc, v = torch.rand(n, R, generator=g), torch.randn(n, R, Ev, generator=g), torch.randn(n, Bk, Ev, generator=g)
    l[0, 0], acc[0, 0] = 0.0, 0.0
    eager = tiled_mod._online_step(s.clone(), m, l, acc, v)
    compiled = tiled_mod.compiled_tile_step()(s, m, l, acc, v)
    for a, b in zip(compiled, eager):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-6)
    assert not any(t.isnan().any() for t in compiled)
    # and the whole loop: every tile the same shape (one compile), causal and a window included
    q, k, vv, _ = _windowed_inputs(1, 2, 2, 32, 32, 8, seed=1, dtype=torch.float32)
    with torch.no_grad():
        for kw in (dict(), dict(is_causal=True, window_size=(9, 0))):
            want = tiled_attention(q, k, vv, block_q=8, block_k=16, **kw)
            got = tiled_attention(q, k, vv, block_q=8, block_k=16, compile_tile=True, **kw)
            torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-6)


# ----------------------------------------------------------------------------------------------
# issue 38: dtype edges of softcap, sinks, slopes and masks; side tensors on another device; huge windows and values
# ----------------------------------------------------------------------------------------------
_Q38 = torch.randn(1, 2, 5, 16, generator=torch.Generator().manual_seed(38))


@pytest.mark.parametrize("kwargs,words", [
    (dict(softcap=1e39), r"softcap must be None, 0 \(off\) or a number in \[1.18e-38, 3.4e\+38\]"),
    (dict(softcap=1e-50), "softcap must be None, 0"),
    (dict(sinks=torch.full((2,), 1e39, dtype=torch.float64)), r"sinks holds 1e\+39, more than torch.float32"),
    (dict(alibi_slopes=torch.full((2,), 1e39, dtype=torch.float64)), r"alibi_slopes holds 1e\+39"),
    (dict(attn_mask=torch.full((5, 5), 1e39, dtype=torch.float64)), r"attn_mask holds 1e\+39"),
    (dict(attn_mask=torch.ones(5, 5, dtype=torch.bool, device="meta")), "attn_mask must be on the query's device"),
    (dict(sinks=torch.zeros(2, device="meta")), "sinks must be on the query's device cpu, got meta"),
    (dict(alibi_slopes=torch.zeros(2, device="meta")), "alibi_slopes must be on the query's device"),
])
def test_tiled_refuses_side_values_the_dtype_cannot_hold_and_other_devices(kwargs, words):
    # each used to give NaN (inf in float32) or torch's own error
    with pytest.raises(ValueError, match=words):
        tiled_attention(_Q38, _Q38, _Q38, **kwargs)


def test_tiled_dtype_edges_that_have_a_right_answer():
    q = _Q38
    # a float64 mask of -1e39 blocks, as -inf does
    block = torch.zeros(5, 5, dtype=torch.float64).fill_diagonal_(-1e39)
    torch.testing.assert_close(tiled_attention(q, q, q, attn_mask=block),
                               tiled_attention(q, q, q, attn_mask=~torch.eye(5, dtype=torch.bool)))
    # window sides of 2**63 reach past every key: the same as unbounded (no integer overflow)
    for window in ((2**63, 2**63), (2**63, 0), (-1, 2**64)):
        want = tiled_attention(q, q, q, window_size=tuple(-1 if w >= 2**63 else w for w in window))
        torch.testing.assert_close(tiled_attention(q, q, q, window_size=window), want)
    assert window_tiles(4, 4, 2, 2, window_size=(2**63, 2**63)) == window_tiles(4, 4, 2, 2)
    # values near float32's maximum: the weighted average is finite (the running sum used to overflow to inf)
    v = torch.full((1, 2, 5, 16), 3e38)
    v[..., 0, :] = -3e38
    ref = torch.softmax(q.double() @ q.double().transpose(-1, -2) / 4, -1) @ v.double()
    v.requires_grad_()
    out = tiled_attention(q, q, v)
    assert out.isfinite().all()
    torch.testing.assert_close(out.double(), ref, rtol=1e-5, atol=0)
    (dv,) = torch.autograd.grad(out.sum(), v)
    torch.testing.assert_close(dv.sum(-2), torch.full((1, 2, 16), 5.0))  # each query's weights sum to 1


def test_online_softmax_pieces_refuse_mixed_dtypes_and_nan():
    z = torch.zeros
    with pytest.raises(TypeError, match="must share one dtype"):
        online_softmax_update(z(2), z(2), z(2, 3), z(2, 4, dtype=torch.float64), z(4, 3))
    with pytest.raises(ValueError, match="scores contains NaN"):
        online_softmax_trace(torch.tensor([math.nan, 1.0]), z(2, 3), 1)
    with pytest.raises(TypeError, match="scores must have a floating dtype"):
        online_softmax_trace(torch.tensor([1, 2]), z(2, 3), 1)
    assert online_softmax_trace(torch.tensor([-math.inf, 1.0]), z(2, 3), 1)[-1].l == 1.0  # -inf: a masked key
