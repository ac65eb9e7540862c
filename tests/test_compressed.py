"""attn_lib.compressed equals transformers' DeepseekV4Attention (CSA and HCA layers) in float64, decodes through its
cache token by token and in chunks as the full forward does (and as transformers' own cached decoding does), refuses
bad input, and its cost helper's numbers check out by hand (issue 36, notebook 13)."""

from __future__ import annotations

import contextlib
import math

import pytest
import torch
from hypothesis import assume, given, settings, strategies as st

from attn_lib.compressed import (BlockIndexer, CompressedAttention, CompressedKVCache, KVCompressor,
                                 compress_blocks, compressed_attention_cost, select_blocks, visible_blocks)

TOL = {"rtol": 0, "atol": 1e-12}
LAYER = {"csa": "compressed_sparse_attention", "hca": "heavily_compressed_attention"}


# ---------------------------------------------------------------------------------------------- transformers
def v4_float64():
    """float64_reference plus DeepSeek-V4's float32 gate softmax and RoPE angles, lifted; restored exactly on exit
    (``torch.Tensor.softmax`` is inherited from the C base class: assigning the original back would leave a patched
    attribute behind, which the exercise checks then report as a replaced torch function)."""
    from attn_lib.course.hf_equal import deepseek_v4_float64

    return deepseek_v4_float64()


def _config(*, ratio=3, window=5, topk=2, index_heads=4, d=32, H=4, E=16, theta=1000.0, **extra):
    from transformers import DeepseekV4Config

    return DeepseekV4Config(
        hidden_size=d, num_attention_heads=H, head_dim=E, q_lora_rank=12, partial_rotary_factor=0.5,
        sliding_window=window, o_groups=2, o_lora_rank=6, index_n_heads=index_heads, index_head_dim=8,
        index_topk=topk, compress_rates={LAYER["csa"]: ratio, LAYER["hca"]: ratio + 1}, num_hidden_layers=3,
        layer_types=["sliding_attention", LAYER["csa"], LAYER["hca"]], compress_rope_theta=theta,
        attn_implementation="eager", **extra)


def _hf_layer(kind, seed=0, **cfg):
    from transformers.models.deepseek_v4.modeling_deepseek_v4 import DeepseekV4Attention

    torch.manual_seed(seed)
    m = DeepseekV4Attention(_config(**cfg), 1 if kind == "csa" else 2).double().eval()
    with torch.no_grad():
        for p in m.parameters():
            p.normal_(0, 0.3)  # norms, sinks and position biases too: ones or zeros would hide a missing one
    return m


def _hf_run(m, x, *, cache=None, past=0, float64=True):
    """transformers' layer on x (B, L, d) at positions past.., with the sliding-window mask its model builds."""
    B, L, _ = x.shape
    W = m.sliding_window
    pos = torch.arange(past, past + L)
    old = min(past, W - 1) if cache is not None else 0  # its cache keeps the last W - 1 keys
    dist = pos[:, None] - torch.arange(past - old, past + L)[None]
    mask = torch.zeros(B, 1, L, old + L, dtype=x.dtype).masked_fill(~((dist >= 0) & (dist < W)), float("-inf"))
    ids = pos[None].expand(B, -1)
    with torch.no_grad(), (v4_float64() if float64 else contextlib.nullcontext()):
        cos_sin = m.compressor.rotary_emb(x, ids, layer_type="compress")
        return m(x, {"compress": cos_sin}, ids, mask, cache=cache)[0]


def _chunked(layer, x, sizes):
    cache, outs, i = CompressedKVCache(layer.sliding_window), [], 0
    with torch.no_grad():
        for n in sizes:
            outs.append(layer(x[:, i:i + n], cache=cache))
            i += n
    return torch.cat(outs, 1), cache


def _no_boundary_tie(layer, x):
    """True when no query's k-th and (k+1)-th visible index scores are equal (transformers' topk breaks such ties
    its own way); checked on our scores, which equal transformers' in float64."""
    if layer.kind == "hca":
        return True
    ix, L = layer.compressor.indexer, x.shape[1]
    pos = torch.arange(L)
    with torch.no_grad():
        keys = ix(x)
        s = ix.scores(x, layer.q_a_norm(layer.q_a_proj(x)), pos, keys)
    s = s.masked_fill(~visible_blocks(pos, keys.shape[1], layer.compress_ratio), float("-inf"))
    top = s.sort(-1, descending=True).values
    k = layer.index_topk
    if top.shape[-1] <= k:
        return True
    a, b = top[..., k - 1], top[..., k]
    return bool(((a > b) | torch.isinf(b)).all())


def test_the_window_mask_fed_to_transformers_is_the_one_its_model_builds():
    """_hf_run hands the layer a mask built by hand; DeepseekV4Model builds the same for its CSA and HCA layers."""
    from transformers import DeepseekV4ForCausalLM

    from attn_lib.course.hf_equal import captured_attention_masks
    from attn_lib.windows import window_mask_from_positions

    torch.manual_seed(0)
    cfg = _config(vocab_size=50, n_routed_experts=4, num_experts_per_tok=2, moe_intermediate_size=8, hc_mult=2)
    masks = captured_attention_masks(DeepseekV4ForCausalLM(cfg).eval(), torch.randint(0, 50, (2, 14)))
    want = window_mask_from_positions(torch.arange(14), torch.arange(14), window=5)  # 0 <= t - s < W = 5
    for layer in (1, 2):  # CSA, HCA
        assert masks[layer].shape == (2, 1, 14, 14) and torch.equal(masks[layer][:, 0] == 0, want.expand(2, 14, 14))


@pytest.mark.parametrize("kind", ["csa", "hca"])
def test_equals_transformers_deepseek_v4_attention_in_float64(kind):
    m = _hf_layer(kind)
    x = torch.randn(2, 14, 32, dtype=torch.float64)  # 14 tokens: neither m = 3 (CSA) nor m = 4 (HCA) divides it
    ours = CompressedAttention.from_hf(m)
    assert ours.kind == kind and ours.compress_ratio == (3 if kind == "csa" else 4) and _no_boundary_tie(ours, x)
    ref = _hf_run(m, x)
    with torch.no_grad():
        out = ours(x)
        torch.testing.assert_close(out, ref, **TOL)
        # without the float64 patches transformers' float32 norms, softmaxes and RoPE agree to float32's precision
        torch.testing.assert_close(out, _hf_run(m, x, float64=False), rtol=1e-5, atol=1e-6)
        # the comparison can fail: the sinks, the blocks and (CSA) the top-k each change the output
        for change in ("sinks", "blocks", "topk") if kind == "csa" else ("sinks", "blocks"):
            other = CompressedAttention.from_hf(m)
            if change == "sinks":
                other.sinks.zero_()
            elif change == "blocks":
                other.compressor.position_bias.zero_()
            else:
                other.index_topk = 100
            assert (other(x) - ref).abs().max() > 1e-6, change


@pytest.mark.parametrize("kind", ["csa", "hca"])
@pytest.mark.parametrize("sizes", [[1] * 14, [5, 1, 3, 5], [2, 7, 5], [14], [4, 0, 10]])
def test_decoding_through_the_cache_equals_the_full_forward_and_transformers_cached_decoding(kind, sizes):
    from transformers import DynamicCache

    m = _hf_layer(kind, seed=1)
    ours = CompressedAttention.from_hf(m)
    x = torch.randn(2, 14, 32, dtype=torch.float64)
    assert _no_boundary_tie(ours, x)
    with torch.no_grad():
        full = ours(x)
    steps, cache = _chunked(ours, x, sizes)
    torch.testing.assert_close(steps, full, **TOL)
    torch.testing.assert_close(full, _hf_run(m, x), **TOL)
    hf_cache, outs, past = DynamicCache(config=m.config), [], 0
    for n in (s for s in sizes if s):
        outs.append(_hf_run(m, x[:, past:past + n], cache=hf_cache, past=past))
        past += n
    torch.testing.assert_close(torch.cat(outs, 1), full, **TOL)
    # what the cache holds, derived: 14 tokens, window W = 5 (E = 16 each), m = 3 (CSA) / 4 (HCA) -> 4 / 3 blocks;
    # 2 / 2 tokens wait for their block; CSA keeps the last block's Ca half and its indexer's (d_I = 8) states
    m_, T, wait = (3, 4, 2) if kind == "csa" else (4, 3, 2)
    assert cache.seq_len == 14 and cache.states["kv"]["count"] == T and cache.keys.shape == (2, 1, 5, 16)
    assert sorted(cache.positions.tolist()) == [9, 10, 11, 12, 13]
    kv = 5 * 16 + T * 16 + wait * 2 * (32 if kind == "csa" else 16)  # window + entries + waiting C and Z
    if kind == "csa":
        kv += 2 * m_ * 16  # the Ca half (kv and gate) of the last complete block
        kv += T * 8 + wait * 2 * 16 + 2 * m_ * 8  # the indexer's entries, waiting C and Z, Ca half
    assert cache.nbytes() == 2 * kv * 8  # B = 2, float64


@settings(max_examples=12, deadline=None)
@given(kind=st.sampled_from(["csa", "hca"]), B=st.integers(1, 3), L=st.integers(1, 17), ratio=st.integers(1, 5),
       window=st.integers(1, 6), topk=st.integers(1, 4), seed=st.integers(0, 2**16), data=st.data())
def test_hypothesis_equals_transformers_and_decodes_in_any_chunks(kind, B, L, ratio, window, topk, seed, data):
    m = _hf_layer(kind, seed=seed, ratio=ratio, window=window, topk=topk)
    ours = CompressedAttention.from_hf(m)
    x = torch.randn(B, L, 32, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))
    assume(_no_boundary_tie(ours, x))
    with torch.no_grad():
        full = ours(x)
    torch.testing.assert_close(full, _hf_run(m, x), **TOL)
    cuts = sorted(data.draw(st.lists(st.integers(0, L), max_size=4)))
    sizes = [b - a for a, b in zip([0, *cuts], [*cuts, L])]
    torch.testing.assert_close(_chunked(ours, x, sizes)[0], full, **TOL)


# ---------------------------------------------------------------------------------------------- the pieces by hand
def test_compress_blocks_by_hand():
    kv = torch.arange(12.0, dtype=torch.float64).view(1, 6, 2)  # 6 tokens, 2 features
    zero = torch.zeros(2, 2, dtype=torch.float64)
    # HCA, equal gates: each block of m = 2 is the mean of its tokens
    out = compress_blocks(kv, torch.zeros_like(kv), zero, ratio=2, overlap=False)
    torch.testing.assert_close(out, torch.tensor([[[1.0, 2.0], [5.0, 6.0], [9.0, 10.0]]], dtype=torch.float64))
    # a gate of +50 on the second slot picks that token (softmax weight 1 - e^-50)
    out = compress_blocks(kv, torch.zeros_like(kv), torch.tensor([[0.0, 0.0], [50.0, 50.0]], dtype=torch.float64),
                          ratio=2, overlap=False)
    torch.testing.assert_close(out, kv[:, 1::2], rtol=0, atol=1e-15)
    # CSA: features [Ca | Cb] = [2t | 2t + 1] for token t (E = 1); block i averages Ca of block i-1 and Cb of i
    kv = torch.stack([2 * torch.arange(6.0), 2 * torch.arange(6.0) + 1], -1)[None].double()  # (1, 6, 2)
    out = compress_blocks(kv, torch.zeros_like(kv), zero, ratio=2, overlap=True)[0, :, 0]
    # block 0: Cb of tokens 0, 1 = 1, 3 -> 2; block 1: Ca of 0, 1 (0, 2), Cb of 2, 3 (5, 7) -> 3.5; block 2: 7.5
    torch.testing.assert_close(out, torch.tensor([2.0, 3.5, 7.5], dtype=torch.float64))
    prev = (torch.full((1, 2, 1), 10.0, dtype=torch.float64), torch.zeros(1, 2, 1, dtype=torch.float64))
    out = compress_blocks(kv, torch.zeros_like(kv), zero, ratio=2, overlap=True, previous=prev)[0, :, 0]
    torch.testing.assert_close(out[0], torch.tensor(6.0, dtype=torch.float64))  # (10 + 10 + 1 + 3) / 4


@settings(max_examples=40, deadline=None)
@given(B=st.integers(1, 2), n=st.integers(0, 4), m=st.integers(1, 4), E=st.integers(1, 3), overlap=st.booleans(),
       with_previous=st.booleans(), seed=st.integers(0, 2**16))
def test_hypothesis_compress_blocks_equals_a_loop_over_blocks_and_slots(B, n, m, E, overlap, with_previous, seed):
    g = torch.Generator().manual_seed(seed)
    F = 2 * E if overlap else E
    kv, gate = (torch.randn(B, n * m, F, generator=g, dtype=torch.float64) for _ in range(2))
    bias = torch.randn(m, F, generator=g, dtype=torch.float64)
    prev = tuple(torch.randn(B, m, E, generator=g, dtype=torch.float64) for _ in range(2)) if overlap and \
        with_previous else None
    out = compress_blocks(kv, gate, bias, ratio=m, overlap=overlap, previous=prev)
    assert out.shape == (B, n, E)
    for b in range(B):
        for i in range(n):
            for f in range(E):
                slots = []  # (value, logit) of every slot of block i, feature f
                for j in range(m):
                    t = i * m + j
                    if not overlap:
                        slots.append((kv[b, t, f], gate[b, t, f] + bias[j, f]))
                        continue
                    slots.append((kv[b, t, E + f], gate[b, t, E + f] + bias[j, E + f]))  # Cb of block i
                    if i > 0:
                        s = t - m  # Ca of block i - 1
                        slots.append((kv[b, s, f], gate[b, s, f] + bias[j, f]))
                    elif prev is not None:
                        slots.append((prev[0][b, j, f], prev[1][b, j, f]))
                z = sum(math.exp(float(lg)) for _, lg in slots)
                want = sum(float(v) * math.exp(float(lg)) / z for v, lg in slots)
                assert abs(float(out[b, i, f]) - want) < 1e-12


@settings(max_examples=40, deadline=None)
@given(L=st.integers(1, 6), T=st.integers(0, 6), k=st.integers(1, 7), seed=st.integers(0, 2**16))
def test_hypothesis_select_blocks_keeps_the_k_best_visible_earlier_first(L, T, k, seed):
    g = torch.Generator().manual_seed(seed)
    scores = torch.randint(-2, 3, (1, L, T), generator=g).double()  # small integers: many ties
    visible = torch.rand(L, T, generator=g) < 0.6
    keep = select_blocks(scores, visible, k)
    for t in range(L):
        ranked = sorted((i for i in range(T) if visible[t, i]), key=lambda i: (-float(scores[0, t, i]), i))
        assert [i for i in range(T) if keep[0, t, i]] == sorted(ranked[:k])


def test_visible_and_selected_blocks_by_hand():
    # m = 4: block i is complete at position 4i + 3
    vis = visible_blocks(torch.tensor([0, 3, 6, 7, 11]), 3, 4)
    assert vis.tolist() == [[False] * 3, [True, False, False], [True, False, False], [True, True, False],
                            [True, True, True]]
    scores = torch.tensor([[[5.0, 1.0, 9.0], [5.0, 1.0, 9.0], [2.0, 2.0, 3.0]]])
    keep = select_blocks(scores, torch.tensor([[True, False, False], [True, True, True], [True, True, True]]), 2)
    # query 0 sees one block (the future 9 is never picked); query 1 keeps 9 and 5; query 2 ties 2 = 2: block 0 wins
    assert keep.tolist() == [[[True, False, False], [True, False, True], [True, False, True]]]


def test_cost_by_hand():
    # DeepSeek-V4's sizes (W 128, k 512, E 512, d_I 128), bf16, at S = 65536 tokens
    hca = compressed_attention_cost(65536, kind="hca", compress_ratio=128)
    assert hca["window_keys"] == 128 and hca["compressed_keys"] == 512 and hca["keys_read"] == 640
    assert hca["kv_bytes"] == (128 + 512) * 512 * 2 and hca["index_keys_scored"] == 0
    csa = compressed_attention_cost(65536, kind="csa", compress_ratio=4)
    assert csa["compressed_keys"] == 512 and csa["index_keys_scored"] == 16384 and csa["keys_read"] == 640
    assert csa["kv_bytes"] == (128 + 16384) * 512 * 2 + 16384 * 128 * 2
    assert csa["kv_bytes_per_token"] == pytest.approx(csa["kv_bytes"] / 65536)
    assert csa["dense_keys_read"] == 65536 and csa["dense_kv_bytes_per_token"] == 1024
    # short context: 100 tokens -> 100 window keys, 25 blocks all chosen (k = 512 > 25), none for HCA (100 < 128)
    short = compressed_attention_cost(100, kind="csa", compress_ratio=4)
    assert short["keys_read"] == 125
    assert compressed_attention_cost(100, kind="hca", compress_ratio=128)["keys_read"] == 100
    # per token, HCA's cache tends to E·e/m = 8 bytes (+ the window) and CSA's to (E·e + d_I·e_I)/m = 320
    at_1m = {k: compressed_attention_cost(2**20, kind=k, compress_ratio=r)["kv_bytes_per_token"]
             for k, r in (("hca", 128), ("csa", 4))}
    assert math.isclose(at_1m["hca"], 8 + 128 * 1024 / 2**20) and math.isclose(at_1m["csa"], 320 + 128 * 1024 / 2**20)
    # and the cost counts the keys a layer reads: W = 3, m = 2, k = 2, S = 1..11 tokens
    for kind in ("csa", "hca"):
        layer = _small(kind, sliding_window=3, compress_ratio=2, dtype=torch.float64)
        with torch.no_grad():
            read = layer.keys_read(torch.randn(2, 11, 8, dtype=torch.float64))
        by_hand = [min(3, S) + (min(2, S // 2) if kind == "csa" else S // 2) for S in range(1, 12)]
        assert read.tolist() == [by_hand] * 2
        assert [compressed_attention_cost(S, kind=kind, compress_ratio=2, sliding_window=3, index_topk=2)["keys_read"]
                for S in range(1, 12)] == by_hand
    # and the cost matches what a layer's cache holds (entries + window, the waiting block aside) at S = 12
    layer = CompressedAttention(8, 2, 4, q_lora_rank=4, kind="hca", compress_ratio=4, sliding_window=3, rope_dim=2,
                                o_groups=1, o_lora_rank=3, dtype=torch.float64)
    _, cache = _chunked(layer, torch.randn(1, 12, 8, dtype=torch.float64), [5, 7])
    assert cache.nbytes() == compressed_attention_cost(12, kind="hca", compress_ratio=4, sliding_window=3,
                                                       head_dim=4, bytes_per_element=8)["kv_bytes"]


# ---------------------------------------------------------------------------------------------- bad input
def _small(kind="csa", **kw):
    torch.manual_seed(0)
    index = dict(index_heads=2, index_head_dim=4, index_topk=2) if kind == "csa" else {}
    args = dict(q_lora_rank=4, kind=kind, compress_ratio=2, sliding_window=3, rope_dim=2, o_groups=2, o_lora_rank=3)
    return CompressedAttention(8, 2, 4, **{**args, **index, **kw})


@pytest.mark.parametrize("kwargs,exc,words", [
    (dict(kind="dsa"), ValueError, "kind must be one of 'csa', 'hca'"),
    (dict(kind=4), TypeError, "kind must be a str"),
    (dict(compress_ratio=0), ValueError, "compress_ratio"),
    (dict(compress_ratio=2.0), TypeError, "compress_ratio"),
    (dict(rope_dim=3), ValueError, "rope_dim must be even"),
    (dict(o_groups=3), ValueError, "multiple of o_groups=3"),
    (dict(index_topk=None), ValueError, "CSA needs its indexer's sizes"),
    (dict(rope_dim=4, index_head_dim=2), ValueError, "rope_dim=4 must be <= index_head_dim=2"),
    (dict(dtype=torch.int64), ValueError, "dtype must be a floating dtype"),
    (dict(eps=0.0), ValueError, "eps must be a number > 0"),
    (dict(rope_base=1.0), ValueError, "rope_base"),
])
def test_constructor_refuses_bad_sizes(kwargs, exc, words):
    with pytest.raises(exc, match=words):
        _small(**kwargs)
    with pytest.raises(ValueError, match="HCA has no indexer"):
        _small("hca", index_topk=2)


def test_forward_refuses_bad_input_and_gives_empty_outputs():
    layer = _small()
    with pytest.raises(TypeError, match="x must be a torch.Tensor"):
        layer([[1.0] * 8])
    with pytest.raises(TypeError, match="floating dtype"):
        layer(torch.ones(1, 3, 8, dtype=torch.int64))
    with pytest.raises(TypeError, match="layer's dtype torch.float32, got torch.float64"):
        layer(torch.randn(1, 3, 8, dtype=torch.float64))
    with pytest.raises(ValueError, match="d_model=8"):
        layer(torch.randn(1, 3, 6))
    with pytest.raises(ValueError, match="3 dims"):
        layer(torch.randn(3, 8))
    with pytest.raises(ValueError, match="x contains NaN"):
        layer(torch.full((1, 3, 8), float("nan")))
    with pytest.raises(ValueError, match="device"):
        layer(torch.randn(1, 3, 8, device="meta"))
    with pytest.raises(TypeError, match="CompressedKVCache"):
        layer(torch.randn(1, 3, 8), cache={})
    with pytest.raises(ValueError, match="sliding_window=3"):
        layer(torch.randn(1, 3, 8), cache=CompressedKVCache(4))
    cache = CompressedKVCache(3)
    layer(torch.randn(2, 3, 8), cache=cache)
    with pytest.raises(ValueError, match="x holds 1 sequences but the cache 2"):
        layer(torch.randn(1, 1, 8), cache=cache)
    with pytest.raises(ValueError, match="another layer"):
        _small()(torch.randn(2, 1, 8), cache=cache)
    with pytest.raises(ValueError, match="cached B, E = 2, 4"):
        cache.update_window(torch.randn(2, 1, 1, 5))
    with pytest.raises(TypeError, match="cached keys' dtype torch.float32"):
        cache.update_window(torch.randn(2, 1, 1, 4, dtype=torch.float64))
    cache.keys = cache.keys.to("meta")
    with pytest.raises(ValueError, match="cache must be on x's device"):
        layer(torch.randn(2, 1, 8), cache=cache)
    for B, L in ((2, 0), (0, 4)):  # empty: an empty output, the cache untouched
        c = CompressedKVCache(3)
        assert layer(torch.randn(B, L, 8), cache=c).shape == (B, L, 8) and c.seq_len == 0 and c.nbytes() == 0
    # float16 / bfloat16 edges: a half layer runs and stays finite
    half = _small(dtype=torch.bfloat16)
    out = half(torch.randn(1, 7, 8, dtype=torch.bfloat16))
    assert out.dtype == torch.bfloat16 and bool(torch.isfinite(out).all())


def test_pieces_and_from_hf_refuse_bad_input():
    with pytest.raises(ValueError, match="multiple of ratio=2"):
        compress_blocks(torch.randn(1, 3, 2), torch.randn(1, 3, 2), torch.zeros(2, 2), ratio=2, overlap=False)
    with pytest.raises(TypeError, match="overlap must be a bool"):
        compress_blocks(torch.randn(1, 2, 2), torch.randn(1, 2, 2), torch.zeros(2, 2), ratio=2, overlap=1)
    with pytest.raises(TypeError, match="integer positions"):
        visible_blocks(torch.tensor([0.5]), 2, 2)
    with pytest.raises(ValueError, match="num_blocks"):
        visible_blocks(torch.tensor([0]), -1, 2)
    with pytest.raises(TypeError, match="visible must be a bool mask"):
        select_blocks(torch.zeros(1, 2, 2), torch.ones(2, 2), 1)
    with pytest.raises(ValueError, match="scores contains NaN"):
        select_blocks(torch.full((1, 2, 2), float("nan")), torch.ones(2, 2, dtype=torch.bool), 1)
    with pytest.raises(ValueError, match="topk"):
        select_blocks(torch.zeros(1, 2, 2), torch.ones(2, 2, dtype=torch.bool), 0)
    with pytest.raises(ValueError, match="rope_dim must be even"):
        KVCompressor(8, 4, 2, overlap=False, rope_dim=5)
    with pytest.raises(ValueError, match="d_model=8"):
        KVCompressor(8, 4, 2, overlap=False, rope_dim=2)(torch.randn(1, 4, 6))
    with pytest.raises(ValueError, match="num_heads"):
        BlockIndexer(8, 4, num_heads=0, head_dim=4, ratio=2, rope_dim=2)
    ix = BlockIndexer(8, 4, num_heads=2, head_dim=4, ratio=2, rope_dim=2)
    with pytest.raises(ValueError, match=r"keys \(B, T, d_I=4\)"):
        ix.scores(torch.randn(1, 3, 8), torch.randn(1, 3, 4), torch.arange(3), torch.randn(1, 1, 5))
    with pytest.raises(TypeError, match="keys must be a torch.Tensor"):
        ix.scores(torch.randn(1, 3, 8), torch.randn(1, 3, 4), torch.arange(3), None)
    assert ix.scores(torch.randn(1, 3, 8), torch.randn(1, 3, 4), torch.arange(3), torch.randn(1, 2, 4)).shape == \
        (1, 3, 2)
    with pytest.raises(ValueError, match="seq_len"):
        compressed_attention_cost(0, kind="csa", compress_ratio=4)
    with pytest.raises(ValueError, match="bytes_per_element"):
        compressed_attention_cost(8, kind="csa", compress_ratio=4, bytes_per_element=0)
    with pytest.raises(TypeError, match="DeepseekV4Attention"):
        CompressedAttention.from_hf(torch.nn.Linear(2, 2))
    from transformers.models.deepseek_v4.modeling_deepseek_v4 import DeepseekV4Attention

    with pytest.raises(ValueError, match="no compressor"):
        CompressedAttention.from_hf(DeepseekV4Attention(_config(), 0))
    yarn = _config(rope_parameters={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64})
    with pytest.raises(ValueError, match="YaRN is not modelled"):
        CompressedAttention.from_hf(DeepseekV4Attention(yarn, 2))
