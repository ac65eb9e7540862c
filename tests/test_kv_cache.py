"""attn_lib.kv_cache: the caches, their size and the work they save.

What is proven here:
- MultiHeadAttention(num_kv_heads=..., rope_base=...) equals HuggingFace's LlamaAttention (eager,
  GQA + RoPE) with copied weights, without and with a cache (HF's DynamicCache vs our KVCache);
- cached decoding, token by token and in chunks, equals the full causal forward;
- kv_cache_bytes equals the bytes of real filled caches (KVCache and QuantizedKVCache);
- decoding_cost equals counts taken from an instrumented model; a quantized cache stays close.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

pytestmark = pytest.mark.usefixtures("one_thread")

from attn_lib.kv_cache import (KVCache, QuantizedKVCache, decoding_cost, format_memory_table, kv_cache_bytes,
                               kv_cache_memory_table)
from attn_lib.mha import MultiHeadAttention
from attn_lib.quantization import relative_error

hf_llama = pytest.importorskip("transformers.models.llama.modeling_llama")

heads = st.tuples(st.integers(1, 6), st.integers(1, 6))  # (num_kv_heads, group size)


# ---------------------------------------------------------------------------------------------
# MultiHeadAttention(num_kv_heads, rope_base) against HuggingFace's LlamaAttention
# ---------------------------------------------------------------------------------------------


# HF's LlamaRotaryEmbedding computes its angles in float32 even for float64 inputs (attn_lib uses
# float64 there), so the two differ by ~1e-8; a wrong pairing or grouping differs by O(1).
HF_ATOL, HF_RTOL = 1e-6, 1e-5


def _llama_pair(d_model=64, num_heads=8, num_kv_heads=2, base=10000.0):
    from transformers import LlamaConfig

    config = LlamaConfig(hidden_size=d_model, num_attention_heads=num_heads, num_key_value_heads=num_kv_heads,
                         attention_bias=False, max_position_embeddings=256,
                         rope_parameters={"rope_type": "default", "rope_theta": base})
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    theirs = hf_llama.LlamaAttention(config, layer_idx=0).double().eval()
    rotary = hf_llama.LlamaRotaryEmbedding(config)
    ours = MultiHeadAttention(d_model, num_heads, num_kv_heads=num_kv_heads, bias=False, rope_base=base).double().eval()
    with torch.no_grad():
        for a, b in (("q_proj", "q_proj"), ("k_proj", "k_proj"), ("v_proj", "v_proj"), ("out_proj", "o_proj")):
            getattr(ours, a).weight.copy_(getattr(theirs, b).weight)
    return config, ours, theirs, rotary


def _hf_call(theirs, rotary, x, positions, mask):
    cos, sin = rotary(x, positions[None].expand(x.shape[0], -1))
    return theirs(x, (cos, sin), mask)[0]


@pytest.mark.parametrize("num_kv_heads", [8, 2, 1])
def test_mha_gqa_rope_equals_llama_attention(num_kv_heads):
    config, ours, theirs, rotary = _llama_pair(num_kv_heads=num_kv_heads)
    x = torch.randn(2, 7, 64, dtype=torch.float64)
    causal = torch.zeros(7, 7, dtype=torch.float64).masked_fill(~torch.ones(7, 7, dtype=torch.bool).tril(), float("-inf"))
    want = _hf_call(theirs, rotary, x, torch.arange(7), causal[None, None])
    got, _ = ours(x, is_causal=True)
    torch.testing.assert_close(got, want, atol=HF_ATOL, rtol=HF_RTOL)
    # the cache holds num_kv_heads heads: that is the saving
    cache = KVCache()
    ours(x, is_causal=True, kv_cache=cache)
    assert cache.keys.shape == (2, num_kv_heads, 7, 8)


def test_cached_decoding_equals_llama_with_dynamic_cache():
    from transformers.cache_utils import DynamicCache

    config, ours, theirs, rotary = _llama_pair(num_kv_heads=2)
    x = torch.randn(1, 9, 64, dtype=torch.float64)
    hf_cache, cache = DynamicCache(config=config), KVCache()
    # prompt of 4 tokens, then one token at a time (HF needs no mask for a single new query)
    prompt_mask = torch.zeros(4, 4, dtype=torch.float64).masked_fill(~torch.ones(4, 4, dtype=torch.bool).tril(), float("-inf"))
    cos, sin = rotary(x[:, :4], torch.arange(4)[None])
    want = [theirs(x[:, :4], (cos, sin), prompt_mask[None, None], cache=hf_cache)[0]]
    got = [ours(x[:, :4], is_causal=True, kv_cache=cache)[0]]
    for t in range(4, 9):
        cos, sin = rotary(x[:, t:t + 1], torch.tensor([[t]]))
        want.append(theirs(x[:, t:t + 1], (cos, sin), None, cache=hf_cache)[0])
        got.append(ours(x[:, t:t + 1], is_causal=True, kv_cache=cache)[0])
    torch.testing.assert_close(torch.cat(got, 1), torch.cat(want, 1), atol=HF_ATOL, rtol=HF_RTOL)
    torch.testing.assert_close(cache.keys, hf_cache.layers[0].keys, atol=HF_ATOL, rtol=HF_RTOL)


@settings(max_examples=20)
@given(heads, st.lists(st.integers(1, 4), min_size=1, max_size=5), st.integers(0, 2**31 - 1))
def test_cache_chunks_equal_full_causal_forward_with_rope(hg, chunks, seed):
    hkv, g = hg
    torch.manual_seed(seed)
    hq = hkv * g
    mha = MultiHeadAttention(hq * 4, hq, num_kv_heads=hkv, rope_base=10000.0).double().eval()
    T = sum(chunks)
    x = torch.randn(2, T, hq * 4, dtype=torch.float64)
    full, _ = mha(x, is_causal=True)
    cache, outs, start = KVCache(), [], 0
    for n in chunks:
        outs.append(mha(x[:, start:start + n], is_causal=True, kv_cache=cache)[0])
        start += n
    torch.testing.assert_close(torch.cat(outs, 1), full, atol=1e-12, rtol=1e-10)
    assert cache.seq_len == T


def test_top_left_alignment_would_be_wrong():
    """The reason for bottom-right: with the causal triangle aligned top-left, the new token
    (the 6th) would see only the first key, and the cached result would differ from the full one."""
    from attn_lib.attention import scaled_dot_product_attention
    from attn_lib.masks import causal_mask

    q, k, v = (torch.randn(1, 1, 6, 4, dtype=torch.float64) for _ in range(3))
    full, _ = scaled_dot_product_attention(q, k, v, is_causal=True)
    last, _ = scaled_dot_product_attention(q[..., -2:, :], k, v, causal_mask(2, 6, align="bottom_right"))
    torch.testing.assert_close(last, full[..., -2:, :])
    wrong, _ = scaled_dot_product_attention(q[..., -2:, :], k, v, is_causal=True)  # top-left
    assert (wrong - full[..., -2:, :]).abs().max() > 1e-3


# ---------------------------------------------------------------------------------------------
# KV-cache size
# ---------------------------------------------------------------------------------------------


@settings(max_examples=30)
@given(st.integers(1, 3), heads, st.sampled_from([2, 4, 6]), st.integers(1, 6), st.integers(1, 3),
       st.sampled_from([torch.float32, torch.float64, torch.bfloat16, torch.float16]))
def test_kv_cache_bytes_equals_filled_caches(layers, hg, head_dim, seq_len, batch, dtype):
    hkv, g = hg
    hq = hkv * g
    mhas = [MultiHeadAttention(hq * head_dim, hq, num_kv_heads=hkv).to(dtype) for _ in range(layers)]
    x = torch.randn(batch, seq_len, hq * head_dim).to(dtype)
    caches = [KVCache() for _ in mhas]
    with torch.no_grad():
        for m, c in zip(mhas, caches):
            m(x, is_causal=True, kv_cache=c)
    assert sum(c.nbytes() for c in caches) == kv_cache_bytes(layers, hkv, head_dim, seq_len, batch, dtype)


@pytest.mark.parametrize("bits, name", [(8, "int8"), (4, "int4")])
def test_kv_cache_bytes_equals_quantized_cache_plus_scales(bits, name):
    layers, hkv, head_dim, batch = 2, 2, 8, 3
    mhas = [MultiHeadAttention(4 * head_dim, 4, num_kv_heads=hkv).eval() for _ in range(layers)]
    caches = [QuantizedKVCache(bits) for _ in mhas]
    x = torch.randn(batch, 7, 4 * head_dim)
    with torch.no_grad():
        for m, c in zip(mhas, caches):
            m(x[:, :4], is_causal=True, kv_cache=c)  # a prompt, then one token at a time
            for t in range(4, 7):
                m(x[:, t:t + 1], is_causal=True, kv_cache=c)
    assert all(c.seq_len == 7 for c in caches)
    # per-token scales: one float16 per token, head, batch entry and K/V, in each layer
    scales = 2 * layers * hkv * 7 * batch * 2
    assert sum(c.nbytes() for c in caches) == kv_cache_bytes(layers, hkv, head_dim, 7, batch, name) + scales


def test_kv_cache_bytes_7b_and_errors():
    # 2 (K and V) * 32 layers * 32 heads * 128 dims * 2 bytes = 524288 bytes = 0.5 MiB per token
    assert kv_cache_bytes(32, 32, 128, 1, 1, torch.float16) == 2 * 32 * 32 * 128 * 2 == 2**19
    assert kv_cache_bytes(32, 32, 128, 4096, 1, "fp16") == 2 * 2**30
    assert kv_cache_bytes(32, 8, 128, 4096, 1, "int4") * 16 == kv_cache_bytes(32, 32, 128, 4096, 1, "fp16")
    assert kv_cache_bytes(2, 2, 2, 0, 1, "fp16") == 0
    with pytest.raises(ValueError, match="dtype must be a torch.dtype or one of"):
        kv_cache_bytes(1, 1, 1, 1, 1, "int3")
    with pytest.raises(TypeError, match="dtype must be"):
        kv_cache_bytes(1, 1, 1, 1, 1, 2)
    with pytest.raises(ValueError, match="num_kv_heads must be an int >= 1, got 0"):
        kv_cache_bytes(1, 0, 1, 1, 1, "fp16")
    with pytest.raises(TypeError, match="seq_len must be an int"):
        kv_cache_bytes(1, 1, 1, 4.5, 1, "fp16")


def test_memory_table():
    rows = kv_cache_memory_table()
    assert len(rows) == 3 * 3 * 2 * 2
    by = {(r["variant"], r["dtype"], r["seq_len"], r["batch_size"]): r["gib"] for r in rows}
    assert by[("MHA", "fp16", 4096, 1)] == 2.0
    assert by[("MHA", "fp16", 32768, 8)] == 128.0
    assert by[("GQA", "fp16", 4096, 1)] == 0.5  # 32 / 8 = 4x smaller
    assert by[("MQA", "int4", 4096, 1)] == 2.0 / 32 / 4
    text = format_memory_table(rows)
    assert "GQA (8 KV)" in text and "32k×8" in text and "0.015625" in text
    with pytest.raises(ValueError, match="must divide"):
        kv_cache_memory_table(variants={"odd": 5})


def test_decoding_cost_matches_instrumented_model():
    """Count the rows the key projections really process during generation (forward hooks)."""
    from attn_lib.models.lm import DecoderLM

    model = DecoderLM(50, d_model=16, num_heads=2, num_layers=1)
    P, N = 5, 7
    for use_cache in (True, False):
        rows = []
        h = model.layers[0].attn.k_proj.register_forward_hook(lambda m, a, out: rows.append(out.shape[1]))
        model.generate(torch.zeros(1, P, dtype=torch.long), N, use_cache=use_cache)
        h.remove()
        cost = decoding_cost(P, N, use_cache=use_cache)
        assert sum(rows) == cost["kv_projections"]
    # closed forms: N*P + N(N-1)/2 without the cache, P + N - 1 with it
    assert decoding_cost(P, N, use_cache=False)["kv_projections"] == N * P + N * (N - 1) // 2
    assert decoding_cost(P, N, use_cache=True)["kv_projections"] == P + N - 1
    assert decoding_cost(P, N, use_cache=True)["attention_scores"] == P * (P + 1) // 2 + sum(range(P + 1, P + N))


def test_quantized_cache_in_attention():
    torch.manual_seed(0)
    mha = MultiHeadAttention(32, 4, num_kv_heads=2, rope_base=10000.0).eval()
    x = torch.randn(2, 12, 32)
    full, _ = mha(x, is_causal=True)
    errs = {}
    for bits in (8, 4):
        cache = QuantizedKVCache(bits)
        with torch.no_grad():
            out = torch.cat([mha(x[:, :5], is_causal=True, kv_cache=cache)[0]]
                            + [mha(x[:, t:t + 1], is_causal=True, kv_cache=cache)[0] for t in range(5, 12)], 1)
        errs[bits] = relative_error(out, full)
        assert cache.seq_len == 12 and len(cache) == 12
    assert errs[8] < 0.01 and errs[8] < errs[4] < 0.2
    with pytest.raises(ValueError, match="bits must be one of 8, 4, got"):
        QuantizedKVCache(2)
    cache = QuantizedKVCache(8)
    cache.update(torch.randn(1, 2, 3, 4), torch.randn(1, 2, 3, 4))
    with pytest.raises(ValueError, match="do not match the cached"):
        cache.update(torch.randn(1, 3, 1, 4), torch.randn(1, 3, 1, 4))
    cache.reset()
    assert cache.seq_len == 0 and cache.nbytes() == 0


@pytest.mark.parametrize("make", [KVCache, lambda: QuantizedKVCache(8)], ids=["KVCache", "QuantizedKVCache"])
def test_both_caches_share_one_check_and_follow_the_protocol(make):
    from attn_lib.kv_cache import KVCacheProtocol

    cache = make()
    assert isinstance(cache, KVCacheProtocol)
    name = type(cache).__name__
    k = torch.randn(1, 2, 3, 4)
    with pytest.raises(TypeError, match=f"{name}.update: key must have a floating dtype .* got torch.int64"):
        cache.update(k.long(), k.long())  # an integer cache would truncate every value
    with pytest.raises(TypeError, match="key, value must share one dtype, got key torch.float32, value torch.float64"):
        cache.update(k, k.double())
    with pytest.raises(ValueError, match=f"{name}.update: key contains NaN"):
        cache.update(k.masked_fill(k > 1, float("nan")), k)
    assert cache.seq_len == 0  # nothing was stored by the refused updates
    cache.update(k, k)
    with pytest.raises(TypeError, match=f"{name}.update: new key and value have dtype torch.float64, but the cache "
                                        "holds torch.float32; convert them"):
        cache.update(k.double(), k.double())  # no silent promotion
    with pytest.raises(ValueError, match=rf"{name}.update: key must be a \(B, Hkv, S_new, head_dim\) tensor, got shape \(2, 3, 4\)"):
        cache.update(k[0], k[0])
    assert cache.seq_len == 3


def test_multi_head_attention_refuses_what_is_not_a_cache():
    mha = MultiHeadAttention(8, 2)
    with pytest.raises(TypeError, match="kv_cache must be a KVCache .* got dict"):
        mha(torch.randn(1, 2, 8), kv_cache={})


def test_kv_cache_copies_the_first_tensors_it_is_given():
    # issue 38: the first update kept the caller's tensors, so changing them in place changed the cache
    cache = KVCache()
    k, v = torch.randn(1, 1, 2, 4), torch.randn(1, 1, 2, 4)
    keys, values = cache.update(k, v)
    want = k.clone()
    k.fill_(7.0)
    v.fill_(7.0)
    torch.testing.assert_close(cache.keys, want)
    assert not (cache.values == 7.0).any() and not (keys == 7.0).any()
