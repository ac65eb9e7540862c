"""Notebook 13's sparse designs (issue #36): MoBA and NSA equal their float64 references written from the papers,
GLM-5's shared DSA selection equals transformers' ``GlmMoeDsaAttention``; for each, decoding token by token (and in
chunks) equals the full forward; bad input gets a clear error."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings, strategies as st

from attn_lib.block_sparse import (NativeSparseAttention, NSACache, NSACompressor, keys_read_per_query,
                                   moba_attention, moba_block_choice, moba_reference, nsa_reference)
from attn_lib.course.hf_equal import float64_reference, hf_cos_sin, max_abs_diff
from attn_lib.kv_cache import KVCache
from attn_lib.masks import causal_mask
from attn_lib.sparse import DSACache, LightningIndexer, SparseLatentAttention

TOL = {"rtol": 0, "atol": 1e-12}
f64 = torch.float64


def _qkv(B, H, Hkv, S, E, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(B, H, S, E, generator=g, dtype=f64), torch.randn(B, Hkv, S, E, generator=g, dtype=f64),
            torch.randn(B, Hkv, S, E, generator=g, dtype=f64))


# ------------------------------------------------------------------------------------------------------------ MoBA
@settings(max_examples=25, deadline=None)
@given(S=st.integers(1, 20), L_cut=st.integers(0, 19), block=st.integers(1, 6), topk=st.integers(1, 4),
       seed=st.integers(0, 99))
def test_moba_equals_its_reference(S, L_cut, block, topk, seed):
    q, k, v = _qkv(2, 2, 2, S, 4, seed)
    L = max(1, S - L_cut)  # the last L positions as queries
    out = moba_attention(q[:, :, S - L:], k, v, block_size=block, topk=topk)
    torch.testing.assert_close(out, moba_reference(q[:, :, S - L:], k, v, block_size=block, topk=topk), **TOL)


def test_moba_decoding_equals_the_full_forward_and_routing_matters():
    q, k, v = _qkv(2, 3, 3, 21, 8)
    full = moba_attention(q, k, v, block_size=4, topk=2)
    cache, steps = KVCache(), []
    for t in range(21):
        keys, values = cache.update(k[:, :, t:t + 1], v[:, :, t:t + 1])
        steps.append(moba_attention(q[:, :, t:t + 1], keys, values, block_size=4, topk=2))
    torch.testing.assert_close(torch.cat(steps, 2), full, **TOL)
    # the choice: own block + 1 other; the last query of 21 (block 5 of 6) reads 2 blocks, not 6
    chosen = moba_block_choice(q, k, block_size=4, topk=2)
    assert chosen[:, :, -1].sum(-1).eq(2).all() and chosen[:, :, 0].sum(-1).eq(1).all()
    dense = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert max_abs_diff(full, dense) > 1e-2  # sparse is another result
    # with topk >= the blocks, MoBA is causal dense attention
    torch.testing.assert_close(moba_attention(q, k, v, block_size=4, topk=6), dense, **TOL)


def test_moba_refuses_bad_input():
    q, k, v = _qkv(1, 2, 2, 6, 4)
    with pytest.raises(ValueError, match="block_size must be an int >= 1, got 0"):
        moba_attention(q, k, v, block_size=0, topk=2)
    with pytest.raises(TypeError, match="topk must be an int"):
        moba_attention(q, k, v, block_size=2, topk=2.0)
    with pytest.raises(ValueError, match="H=2 heads"):
        moba_attention(q, k[:, :1], v[:, :1], block_size=2, topk=2)
    with pytest.raises(ValueError, match="L <= S"):
        moba_attention(torch.cat([q, q], 2), k, v, block_size=2, topk=2)
    with pytest.raises(ValueError, match="NaN"):
        moba_attention(q * float("nan"), k, v, block_size=2, topk=2)


# ------------------------------------------------------------------------------------------------------------ NSA
def _nsa(**kw):
    torch.manual_seed(0)
    sizes = dict(block_len=4, stride=2, select_size=4, num_select=3, window=5)
    return NativeSparseAttention(8, **{**sizes, **kw}, dtype=f64)


@settings(max_examples=15, deadline=None)
@given(S=st.integers(1, 22), groups=st.sampled_from([(2, 1), (2, 2), (4, 2)]), seed=st.integers(0, 99),
       sizes=st.sampled_from([dict(block_len=4, stride=2, select_size=4, num_select=3, window=5),
                              dict(block_len=4, stride=2, select_size=8, num_select=4, window=3),
                              dict(block_len=2, stride=2, select_size=2, num_select=5, window=1)]))
def test_nsa_equals_its_reference(S, groups, seed, sizes):
    H, Hkv = groups
    m = _nsa(**sizes)
    q, k, v = _qkv(2, H, Hkv, S, 8, seed)
    gates = torch.rand(2, H, S, 3, generator=torch.Generator().manual_seed(seed), dtype=f64)
    with torch.no_grad():
        torch.testing.assert_close(m(q, k, v, gates), nsa_reference(m, q, k, v, gates), **TOL)


def test_nsa_decoding_and_chunks_equal_the_full_forward_and_each_branch_matters():
    m = _nsa()
    q, k, v = _qkv(2, 4, 2, 23, 8)
    gates = torch.rand(2, 4, 23, 3, generator=torch.Generator().manual_seed(1), dtype=f64)
    with torch.no_grad():
        full = m(q, k, v, gates)
        cache, steps = NSACache(), []
        for t in range(23):
            steps.append(m(q[:, :, t:t + 1], k[:, :, t:t + 1], v[:, :, t:t + 1], gates[:, :, t:t + 1], cache=cache))
        torch.testing.assert_close(torch.cat(steps, 2), full, **TOL)
        assert cache.compressed.keys.shape[-2] == m.compress_k.num_blocks(23) == 10  # (23 - 4) // 2 + 1
        cache, parts = NSACache(), []
        for a, b in ((0, 3), (3, 10), (10, 23)):
            parts.append(m(q[:, :, a:b], k[:, :, a:b], v[:, :, a:b], gates[:, :, a:b], cache=cache))
        torch.testing.assert_close(torch.cat(parts, 2), full, **TOL)
        for branch in range(3):  # a gate off changes the output: every branch contributes
            g = gates.clone()
            g[..., branch] = 0
            assert max_abs_diff(m(q, k, v, g), full) > 1e-3


def test_nsa_compressor_and_bad_input():
    c = NSACompressor(4, 2, 3, dtype=f64)
    x = torch.randn(1, 9, 3, dtype=f64)
    out = c(x)
    assert out.shape == (1, 3, 3) and c.num_blocks(3) == 0 and c(x[:, :3]).shape == (1, 0, 3)
    by_hand = c.proj((x[0, 2:6] + c.position).flatten())  # block 1 starts at stride 2
    torch.testing.assert_close(out[0, 1], by_hand, **TOL)
    with pytest.raises(ValueError, match="stride must be an int in \\[1, 4\\], got 5"):
        NSACompressor(4, 5, 3)
    with pytest.raises(ValueError, match="select_size must be a multiple of stride=2"):
        _nsa(select_size=5)
    with pytest.raises(ValueError, match="num_select must be an int >= 3"):
        _nsa(num_select=2)
    m = _nsa()
    q, k, v = _qkv(1, 2, 1, 6, 8)
    with pytest.raises(ValueError, match="gates must be \\(B, H, L, 3\\)"):
        m(q, k, v, torch.rand(1, 2, 6, 2, dtype=f64))
    with pytest.raises(ValueError, match="gates must lie in \\[0, 1\\]"):
        m(q, k, v, torch.full((1, 2, 6, 3), 2.0, dtype=f64))
    with pytest.raises(TypeError, match="cache must be an attn_lib.block_sparse.NSACache"):
        m(q, k, v, torch.rand(1, 2, 6, 3, dtype=f64), cache=KVCache())
    with pytest.raises(ValueError, match="head_dim=8"):
        m(q[..., :4], k[..., :4], v[..., :4], torch.rand(1, 2, 6, 3, dtype=f64))


def test_keys_read_per_query_by_hand():
    S = 1 << 20
    assert keys_read_per_query("dense", S) == S
    assert keys_read_per_query("moba", S) == 8 * 512 and keys_read_per_query("moba", 1000) == 1000
    assert keys_read_per_query("nsa", S) == (S - 32) // 16 + 1 + 16 * 64 + 512 == 67_071
    assert keys_read_per_query("dsa", S) == 2048 and keys_read_per_query("window", S, window=128) == 128
    with pytest.raises(ValueError, match="design must be one of"):
        keys_read_per_query("nope", 8)
    with pytest.raises(ValueError, match="seq_len must be an int >= 1"):
        keys_read_per_query("dense", 0)


# ------------------------------------------------------------------------------------------------------------ GLM-5
B, L = 2, 12


@pytest.fixture(scope="module")
def glm_layers():
    from transformers import GlmMoeDsaConfig
    from transformers.models.glm_moe_dsa.modeling_glm_moe_dsa import GlmMoeDsaAttention

    torch.manual_seed(0)
    cfg = GlmMoeDsaConfig(hidden_size=32, num_attention_heads=4, num_key_value_heads=4, q_lora_rank=12,
                          kv_lora_rank=16, qk_nope_head_dim=8, qk_rope_head_dim=4, v_head_dim=6, rope_theta=1000.0,
                          index_n_heads=8, index_head_dim=8, index_topk=4, num_hidden_layers=3,
                          indexer_types=["full", "shared", "shared"], attn_implementation="eager")
    layers = [GlmMoeDsaAttention(cfg, i).double().eval() for i in range(3)]
    with torch.no_grad():
        for m in layers:
            for p in m.parameters():
                p.normal_(0, 0.3)  # norms too
    xs = [torch.randn(B, L, 32, dtype=f64) for _ in range(3)]  # each layer's input (as after the layer before)
    cos, sin = hf_cos_sin(torch.arange(L), 4, base=1000.0, batch=B)
    mask = torch.zeros(B, 1, L, L, dtype=f64).masked_fill(~causal_mask(L), torch.finfo(f64).min)
    refs, prev = [], None
    with torch.no_grad(), float64_reference():
        for m, x in zip(layers, xs):
            out, _, prev = m(x, (cos, sin), mask, prev_topk_indices=prev)
            refs.append(out)
    return layers, xs, refs


def test_glm5_shared_selection_equals_glm_moe_dsa_attention(glm_layers):
    layers, xs, refs = glm_layers
    ours = [SparseLatentAttention.from_hf(m) for m in layers]
    assert [o.indexer is None for o in ours] == [False, True, True]
    assert ours[0].indexer.rope_interleave  # GLM-5's indexer rotates interleaved pairs
    selection = None
    with torch.no_grad():
        for o, x, ref in zip(ours, xs, refs):
            for gather in (True, False):
                out, sel = o(x, selection=selection, gather=gather, return_selection=True)
                torch.testing.assert_close(out, ref, **TOL)
            selection = sel
        # the shared choice matters: layer 2 attending to every causal key is another result
        every = torch.arange(L).expand(B, L, L).contiguous(), causal_mask(L).expand(B, L, L)
        assert max_abs_diff(ours[2](xs[2], selection=every), refs[2]) > 1e-3
        # and the interleaved indexer RoPE matters: a half-split one picks other keys somewhere
        half = LightningIndexer.from_hf(layers[0].indexer)
        half.rope_interleave = False
        q_resid = ours[0].q_a_norm(ours[0].q_a_proj(xs[0]))
        assert not torch.equal(half.selected_mask(half.scores(xs[0], q_resid)),
                               ours[0].indexer.selected_mask(ours[0].indexer.scores(xs[0], q_resid)))
    with pytest.raises(ValueError, match="no indexer"):
        ours[1](xs[1])


def test_glm5_decoding_token_by_token_and_in_chunks_equals_the_full_forward(glm_layers):
    layers, xs, refs = glm_layers
    ours = [SparseLatentAttention.from_hf(m) for m in layers]
    for cuts in ([(t, t + 1) for t in range(L)], [(0, 5), (5, 6), (6, L)]):
        caches, outs = [DSACache() for _ in ours], [[] for _ in ours]
        with torch.no_grad():
            for a, b in cuts:
                selection = None
                for i, (o, x) in enumerate(zip(ours, xs)):
                    out, selection = o(x[:, a:b], selection=selection, cache=caches[i], return_selection=True)
                    outs[i].append(out)
        for i in range(3):
            torch.testing.assert_close(torch.cat(outs[i], 1), refs[i], **TOL)
        assert caches[0].index.seq_len == L and caches[1].index.seq_len == 0  # only the full layer keeps k_I


def test_dsa_selection_and_cache_refuse_bad_input(glm_layers):
    ours = SparseLatentAttention.from_hf(glm_layers[0][0])
    x = glm_layers[1][0]
    with pytest.raises(TypeError, match="cache must be an attn_lib.sparse.DSACache"):
        ours(x, cache=KVCache())
    with pytest.raises(TypeError, match="selection must be the \\(indices, valid\\) pair"):
        ours(x, selection=torch.zeros(B, L, 2, dtype=torch.long))
    with pytest.raises(ValueError, match="indices must lie in \\[0, S=12\\)"):
        ours(x, selection=(torch.full((B, L, 2), 12), torch.ones(B, L, 2, dtype=torch.bool)))
    with pytest.raises(ValueError, match="shape \\(B=2, L=12, k\\)"):
        ours(x, selection=(torch.zeros(B, 3, 2, dtype=torch.long), torch.ones(B, 3, 2, dtype=torch.bool)))


# ------------------------------------------------------------------------------------------------------- V4 float64
def test_deepseek_v4_float64_lifts_the_two_float32_steps_and_restores_them():
    from transformers.models.deepseek_v4 import modeling_deepseek_v4 as v4

    from attn_lib.course.hf_equal import deepseek_v4_float64

    rotary = v4.DeepseekV4RotaryEmbedding.forward
    x = torch.randn(3, 4, dtype=f64)
    assert "softmax" not in torch.Tensor.__dict__  # inherited from the C base class
    with deepseek_v4_float64():
        assert x.softmax(-1, dtype=torch.float32).dtype == f64  # the compressors' cast, lifted
        assert x.float().dtype == f64  # float64_reference is active too
        assert x.float().softmax(-1, dtype=torch.float32).dtype == f64
    assert "softmax" not in torch.Tensor.__dict__ and v4.DeepseekV4RotaryEmbedding.forward is rotary
    assert x.softmax(-1, dtype=torch.float32).dtype == torch.float32
    with pytest.raises(RuntimeError, match="inside"), deepseek_v4_float64():
        raise RuntimeError("inside")
    assert "softmax" not in torch.Tensor.__dict__ and v4.DeepseekV4RotaryEmbedding.forward is rotary
