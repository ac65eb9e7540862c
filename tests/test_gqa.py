"""attn_lib.gqa and the grouped-query / KV-cache side of attn_lib.mha, against torch and HuggingFace.

What is proven here:
- the head grouping equals torch's ``enable_gqa=True`` and HuggingFace's ``repeat_kv`` (LLaMA);
- MultiHeadAttention(num_kv_heads=..., rope_base=...) equals HuggingFace's LlamaAttention (eager,
  GQA + RoPE) with copied weights, without and with a cache (HF's DynamicCache vs our KVCache);
- cached decoding, token by token and in chunks, equals the full causal forward;
- kv_cache_bytes equals the bytes of real filled caches (KVCache and QuantizedKVCache);
- to_gqa is the identity at num_kv_heads == num_heads and equals the model with pooled heads
  repeated; the MiniLM conversion agrees with MultiHeadAttention.from_hf + to_gqa;
- absmax quantization stays within its error bound, packs 4-bit codes losslessly, counts its bytes.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from attn_lib import gqa
from attn_lib.gqa import (
    GQABertSelfAttention,
    QuantizedKVCache,
    bert_kv_transform,
    bert_to_gqa,
    decoding_cost,
    fake_quantize_kv,
    format_memory_table,
    grouped_query_attention,
    kv_cache_bytes,
    kv_cache_memory_table,
    kv_head_for_query_head,
    mean_pool_kv_heads,
    mean_pooled_embeddings,
    quantize_absmax,
    quantize_kv,
    query_groups,
    relative_error,
    repeat_kv,
    to_gqa,
)
from attn_lib.mha import KVCache, MultiHeadAttention

hf_llama = pytest.importorskip("transformers.models.llama.modeling_llama")

@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """Tiny matrices: one thread avoids OpenMP start-up costs that dominate on a busy 2-core machine."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


heads = st.tuples(st.integers(1, 6), st.integers(1, 6))  # (num_kv_heads, group size)


# ---------------------------------------------------------------------------------------------
# grouping convention
# ---------------------------------------------------------------------------------------------


@given(heads)
def test_grouping_matches_hf_repeat_kv_and_torch(hg):
    hkv, g = hg
    hq = hkv * g
    owner = kv_head_for_query_head(hq, hkv)
    # label KV head h with the value h and let HuggingFace's repeat_kv say where each one lands
    labels = torch.arange(hkv, dtype=torch.float64).view(1, hkv, 1, 1)
    placed = hf_llama.repeat_kv(labels, g).flatten().long().tolist()
    assert owner == placed
    assert owner == torch.arange(hkv).repeat_interleave(g).tolist()
    groups = query_groups(hq, hkv)
    assert [j for grp in groups for j in grp] == list(range(hq))
    assert all(owner[j] == h for h, grp in enumerate(groups) for j in grp)


def test_describe_grouping():
    assert gqa.describe_grouping(32, 8) == "GQA: 32 query heads in 8 groups of 4; the KV cache is 8/32 = 25% of MHA's"
    assert gqa.describe_grouping(32, 32).startswith("MHA: 32 query heads in 32 groups of 1")
    assert gqa.describe_grouping(32, 1) == "MQA: 32 query heads in 1 group of 32; the KV cache is 1/32 = 3.125% of MHA's"
    with pytest.raises(ValueError, match="must divide"):
        gqa.describe_grouping(32, 3)


def test_grouping_example_and_errors():
    assert query_groups(32, 8)[0] == [0, 1, 2, 3] and query_groups(32, 8)[7] == [28, 29, 30, 31]
    assert kv_head_for_query_head(8, 2) == [0, 0, 0, 0, 1, 1, 1, 1]  # repeated in place, not tiled
    with pytest.raises(ValueError, match="num_kv_heads must divide num_heads=12.*possible values"):
        kv_head_for_query_head(12, 5)
    with pytest.raises(TypeError, match="num_heads"):
        query_groups(8.0, 2)
    with pytest.raises(ValueError, match="num_kv_heads must be >= 1"):
        query_groups(8, 0)


@given(heads, st.integers(1, 2), st.integers(1, 5), st.integers(1, 4))
def test_repeat_kv_equals_hf(hg, b, s, d):
    hkv, g = hg
    x = torch.randn(b, hkv, s, d, dtype=torch.float64)
    got = repeat_kv(x, g)
    assert torch.equal(got, hf_llama.repeat_kv(x, g))
    assert torch.equal(got, x.repeat_interleave(g, dim=1))


def test_repeat_kv_errors():
    with pytest.raises(ValueError, match="at least 3 dims"):
        repeat_kv(torch.zeros(2, 3), 2)
    with pytest.raises(ValueError, match="n_rep must be >= 1"):
        repeat_kv(torch.zeros(1, 2, 3, 4), 0)
    with pytest.raises(TypeError, match="torch.Tensor"):
        repeat_kv([[1.0]], 2)


@st.composite
def gqa_case(draw):
    hkv, g = draw(heads)
    b, L, S, E = draw(st.integers(1, 2)), draw(st.integers(1, 5)), draw(st.integers(1, 6)), draw(st.integers(1, 6))
    kind = draw(st.sampled_from(["none", "causal", "bool_bhls", "bool_b1ls", "float_ls"]))
    return hkv, g, b, L, S, E, kind, draw(st.integers(0, 2**31 - 1))


@settings(max_examples=60)
@given(gqa_case())
def test_grouped_query_attention_equals_torch_enable_gqa(case):
    hkv, g, b, L, S, E, kind, seed = case
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(b, hkv * g, L, E, dtype=torch.float64, generator=gen)
    k = torch.randn(b, hkv, S, E, dtype=torch.float64, generator=gen)
    v = torch.randn(b, hkv, S, E + 1, dtype=torch.float64, generator=gen)
    mask, causal = None, kind == "causal"
    if kind == "bool_bhls":
        mask = torch.rand(b, hkv * g, L, S, generator=gen) > 0.3
        mask[..., 0] = True  # torch's function returns NaN for fully masked rows
    elif kind == "bool_b1ls":
        mask = torch.rand(b, 1, L, S, generator=gen) > 0.3
        mask[..., 0] = True
    elif kind == "float_ls":
        mask = torch.randn(L, S, dtype=torch.float64, generator=gen)
    want = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal, enable_gqa=True)
    got, w = grouped_query_attention(q, k, v, mask, is_causal=causal)
    torch.testing.assert_close(got, want, atol=1e-12, rtol=1e-10)
    # the weights are those of the repeated heads (HF's eager attention with repeat_kv)
    scores = q @ repeat_kv(k, g).transpose(-2, -1) / math.sqrt(E)
    if causal:
        scores = scores.masked_fill(~torch.ones(L, S, dtype=torch.bool).tril(), float("-inf"))
    elif mask is not None:
        scores = scores.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else scores + mask
    ref_w = scores.softmax(-1).nan_to_num(0.0)
    torch.testing.assert_close(w, ref_w, atol=1e-12, rtol=1e-10)


def test_grouped_query_attention_errors():
    q, k = torch.randn(1, 6, 2, 4), torch.randn(1, 4, 3, 4)
    with pytest.raises(ValueError, match="Hkv=4.*must divide.*Hq=6"):
        grouped_query_attention(q, k, k)
    with pytest.raises(ValueError, match="cannot broadcast"):
        grouped_query_attention(torch.randn(1, 4, 2, 4), torch.randn(1, 2, 3, 4), torch.randn(1, 2, 3, 4),
                                torch.ones(5, 3, dtype=torch.bool))
    with pytest.raises(ValueError, match="either attn_mask or is_causal"):
        grouped_query_attention(q, q, q, torch.ones(2, 2, dtype=torch.bool), is_causal=True)


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
    with pytest.raises(ValueError, match="num_kv_heads must be >= 1, got 0"):
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


# ---------------------------------------------------------------------------------------------
# quantization
# ---------------------------------------------------------------------------------------------

finite = st.floats(-1e3, 1e3, allow_nan=False, width=32)


@given(st.sampled_from([8, 4]), st.sampled_from(["token", "channel"]),
       st.lists(finite, min_size=6, max_size=6), st.integers(1, 4), st.integers(0, 2**31 - 1))
def test_quantization_round_trip_bound(bits, per, head, s, seed):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(2, 3, s, 6, generator=gen) * torch.tensor(head)  # channel scales from hypothesis, some 0
    q = quantize_kv(x, bits, per=per)
    qmax = 2 ** (bits - 1) - 1
    codes = q.codes()
    assert codes.dtype == torch.int8 and codes.shape == x.shape and codes.abs().max() <= qmax
    err = (q.dequantize() - x).abs()
    # round to nearest: error at most half a step, the step being the stored scale (1e-6 slack for float32)
    assert bool((err <= q.scale.float() / 2 + 1e-6 * x.abs().max() + 1e-30).all())
    # the largest |x| of each slice gets code ±qmax, unless the slice is zero or its scale is so
    # small that float16 stores it coarsely (subnormal, < 2^-14), where it is rounded up
    absmax = x.abs().amax(dim=-1 if per == "token" else -2, keepdim=True)
    top = codes.abs().amax(dim=-1 if per == "token" else -2, keepdim=True)
    assert bool(((top == qmax) | (absmax == 0) | (q.scale < 2**-14)).all())


def test_int4_packing_is_lossless_and_counts_bytes():
    codes = torch.arange(-7, 8, dtype=torch.float32)  # every 4-bit code, odd length (padded)
    q = quantize_absmax(codes[None], 4)
    assert torch.equal(q.codes(), codes[None].to(torch.int8))
    assert q.data.dtype == torch.uint8 and q.data.shape == (1, 8)  # 15 codes -> 8 bytes
    assert q.nbytes() == 8 + 2
    x = torch.randn(2, 4, 10, 32)
    for bits in (8, 4):
        q = quantize_kv(x, bits)
        assert q.nbytes() == x.numel() * bits // 8 + 2 * 4 * 10 * 2  # codes + one fp16 scale per token and head
        assert q.dequantize().dtype == x.dtype


def test_quantization_exact_cases_and_errors():
    z = torch.zeros(3, 4)
    assert torch.equal(fake_quantize_kv(z, 4), z)
    # absmax = qmax makes the scale exactly 1: codes are x rounded half to even (torch.round)
    x = torch.tensor([[127.0, -64.0, 32.5, 0.0]])
    assert quantize_absmax(x, 8).codes().tolist() == [[127, -64, 32, 0]]
    assert quantize_absmax(torch.tensor([7.0, -3.5, 2.5]), 4).codes().tolist() == [7, -4, 2]
    with pytest.raises(ValueError, match="bits must be 8 or 4"):
        quantize_absmax(x, 3)
    with pytest.raises(ValueError, match="NaN or inf"):
        quantize_absmax(torch.tensor([1.0, float("nan")]), 8)
    with pytest.raises(TypeError, match="floating"):
        quantize_absmax(torch.tensor([1, 2]), 8)
    with pytest.raises(ValueError, match="per must be"):
        quantize_kv(x, 8, per="head")
    with pytest.raises(ValueError, match="overflows torch.float16 scales"):
        quantize_absmax(torch.tensor([1e8]), 4)
    assert quantize_absmax(torch.tensor([1e8]), 4, scale_dtype=torch.float32).dequantize().item() == 1e8


def test_outlier_channel_favours_per_channel_keys():
    """KIVI's observation, made concrete: one large channel in every key ruins per-token scales."""
    torch.manual_seed(0)
    k = torch.randn(1, 2, 64, 32)
    k[..., 5] *= 30.0
    others = [c for c in range(32) if c != 5]
    # per token, the outlier sets every token's scale (~30·3/7): the ordinary channels round to ~0
    err_token = relative_error(fake_quantize_kv(k, 4, per="token")[..., others], k[..., others])
    err_channel = relative_error(fake_quantize_kv(k, 4, per="channel")[..., others], k[..., others])
    assert err_token > 0.5 and err_channel < 0.2


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
    with pytest.raises(ValueError, match="bits must be 8 or 4"):
        QuantizedKVCache(2)
    cache = QuantizedKVCache(8)
    cache.update(torch.randn(1, 2, 3, 4), torch.randn(1, 2, 3, 4))
    with pytest.raises(ValueError, match="do not match the cached"):
        cache.update(torch.randn(1, 3, 1, 4), torch.randn(1, 3, 1, 4))
    cache.reset()
    assert cache.seq_len == 0 and cache.nbytes() == 0


# ---------------------------------------------------------------------------------------------
# converting trained layers: to_gqa and the MiniLM wrapper
# ---------------------------------------------------------------------------------------------


@given(heads, st.integers(1, 3), st.integers(1, 5))
def test_mean_pool_kv_heads_matches_loop(hg, head_dim, d_in):
    hkv, g = hg
    hq = hkv * g
    w = torch.randn(hq * head_dim, d_in, dtype=torch.float64)
    got = mean_pool_kv_heads(w, hq, hkv)
    heads_ = [w[j * head_dim:(j + 1) * head_dim] for j in range(hq)]
    want = torch.cat([sum(heads_[j] for j in grp) / len(grp) for grp in query_groups(hq, hkv)])
    torch.testing.assert_close(got, want)
    b = torch.randn(hq * head_dim, dtype=torch.float64)
    assert mean_pool_kv_heads(b, hq, hkv).shape == (hkv * head_dim,)


def test_to_gqa_identity_and_reference():
    torch.manual_seed(0)
    mha = MultiHeadAttention(48, 6, rope_base=10000.0).double().eval()
    x = torch.randn(2, 5, 48, dtype=torch.float64)
    same = to_gqa(mha, 6)
    assert same is not mha
    for a, b in zip(same.state_dict().values(), mha.state_dict().values()):
        assert torch.equal(a, b)
    torch.testing.assert_close(same(x, is_causal=True)[0], mha(x, is_causal=True)[0], atol=0, rtol=0)
    for hkv in (3, 2, 1):
        small = to_gqa(mha, hkv)
        assert small.num_kv_heads == hkv and small.k_proj.out_features == hkv * 8
        # reference: the original MHA with each pooled head copied back to every head of its group
        ref = MultiHeadAttention(48, 6, rope_base=10000.0).double().eval()
        ref.load_state_dict(mha.state_dict())
        with torch.no_grad():
            for name in ("k_proj", "v_proj"):
                for p in ("weight", "bias"):
                    pooled = mean_pool_kv_heads(getattr(getattr(mha, name), p), 6, hkv)
                    per_head = pooled.reshape(hkv, 8, *pooled.shape[1:]).repeat_interleave(6 // hkv, dim=0)
                    getattr(getattr(ref, name), p).copy_(per_head.reshape(48, *pooled.shape[1:]))
        torch.testing.assert_close(small(x, is_causal=True)[0], ref(x, is_causal=True)[0], atol=1e-12, rtol=1e-10)
    with pytest.raises(ValueError, match="must divide the layer's current num_kv_heads=6"):
        to_gqa(mha, 4)
    with pytest.raises(ValueError, match="must divide the layer's current num_kv_heads=2"):
        to_gqa(to_gqa(mha, 2), 3)
    with pytest.raises(TypeError, match="MultiHeadAttention"):
        to_gqa(torch.nn.Linear(2, 2), 1)


def test_bert_gqa_wrapper_matches_hf_and_to_gqa(pretrained):
    tokenizer, model = pretrained
    layer = model.encoder.layer[2].attention.self
    enc = tokenizer(["the cat sat on the mat.", "hello"], return_tensors="pt", padding=True)
    with torch.no_grad():
        hidden = model.embeddings(input_ids=enc["input_ids"], token_type_ids=enc["token_type_ids"])
        pad = enc["attention_mask"].bool()
        add = torch.zeros(pad.shape, dtype=hidden.dtype).masked_fill(~pad, torch.finfo(hidden.dtype).min)[:, None, None]
        want = layer(hidden, attention_mask=add)[0]
        same = GQABertSelfAttention.from_hf(layer, 12)(hidden, attention_mask=add)[0]
        torch.testing.assert_close(same, want, atol=1e-6, rtol=1e-5)  # 12 KV heads: HF's own layer
        for hkv in (6, 4, 2, 1):
            wrapped = GQABertSelfAttention.from_hf(layer, hkv)
            assert wrapped.key.out_features == hkv * 32
            ours = to_gqa(MultiHeadAttention.from_hf(layer), hkv)
            got = ours(hidden, padding_mask=pad)[0]
            torch.testing.assert_close(wrapped(hidden, attention_mask=add)[0][pad], got[pad], atol=1e-5, rtol=1e-4)
    with pytest.raises(TypeError, match="BertSelfAttention"):
        GQABertSelfAttention.from_hf(torch.nn.Linear(2, 2), 1)


def test_bert_to_gqa_and_kv_transform(pretrained):
    tokenizer, model = pretrained
    sents = ["the cat sat on the mat.", "She drank her tea because she was thirsty"]
    base = mean_pooled_embeddings(tokenizer, model, sents)
    torch.testing.assert_close(base.norm(dim=-1), torch.ones(2))
    same = bert_to_gqa(model, 12)
    torch.testing.assert_close(mean_pooled_embeddings(tokenizer, same, sents), base, atol=1e-5, rtol=1e-4)
    mqa = bert_to_gqa(model, 1)
    assert type(model.encoder.layer[0].attention.self).__name__ == "BertSelfAttention"  # original untouched
    cos = (mean_pooled_embeddings(tokenizer, mqa, sents) * base).sum(-1)
    assert bool((cos < 0.999).all())  # pooling really changes the model
    # transforms: identity is a no-op, hooks are removed afterwards, fp16 rounding barely matters
    with bert_kv_transform(model, lambda t: t):
        torch.testing.assert_close(mean_pooled_embeddings(tokenizer, model, sents), base)
    with bert_kv_transform(model, lambda t: fake_quantize_kv(t, 4)):
        q4 = mean_pooled_embeddings(tokenizer, model, sents, one_by_one=True)
    assert not any(l.attention.self.key._forward_hooks for l in model.encoder.layer)
    assert 0.9 < float((q4 * base).sum(-1).min()) < 0.99999
    with bert_kv_transform(mqa, lambda t: t * 0):
        zeroed = mean_pooled_embeddings(tokenizer, mqa, sents)
    assert all(l.attention.self.kv_transform is None for l in mqa.encoder.layer)
    assert not torch.allclose(zeroed, mean_pooled_embeddings(tokenizer, mqa, sents))
    with pytest.raises(TypeError, match="BertModel"):
        bert_to_gqa(torch.nn.Linear(2, 2), 1)


def test_bert_qkv_reproduces_the_models_attentions(pretrained):
    tokenizer, model = pretrained
    text = "the cat sat on the mat."
    qkv = gqa.bert_qkv(tokenizer, model, text)
    with torch.no_grad():
        att = model(**tokenizer(text, return_tensors="pt"), output_attentions=True).attentions
    assert len(qkv) == 6 and qkv[0][1].shape == (1, 12, 9, 32)
    for (q, k, v), a in zip(qkv, att):
        torch.testing.assert_close((q @ k.transpose(-2, -1) / math.sqrt(32)).softmax(-1), a, atol=1e-6, rtol=1e-5)
    assert not any(l.attention.self.key._forward_hooks for l in model.encoder.layer)


def test_plot_groups_draws_one_line_per_query_head():
    import matplotlib

    matplotlib.use("Agg")
    ax = gqa.plot_groups(32, 8)
    assert len(ax.lines) == 32 and "GQA" in ax.get_title()
    assert "MQA" in gqa.plot_groups(8, 1).get_title() and "MHA" in gqa.plot_groups(4, 4).get_title()
    import matplotlib.pyplot as plt

    plt.close("all")
