"""Notebook 14's paged KV cache and serving pieces, each equal in float64 to plain attention (torch's SDPA):
decoding through block tables, prefix sharing with copy-on-write, packed (document-masked) batches, chunked
prefill, split-KV decoding with 09's merge; and the errors of bad input."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from attn_lib.kv_cache import KVCache
from attn_lib.paged import BlockAllocator, PagedKVCache, block_lookup, memory_waste, paged_attention
from attn_lib.serving import chunked_prefill, document_mask, split_kv_attention
from attn_lib.tiled import merge_partials

D = torch.float64


def _rand(*shape, g):
    return torch.randn(*shape, generator=g, dtype=D)


# ----------------------------------------------------------------------------------------------
# block table and allocator
# ----------------------------------------------------------------------------------------------
def test_block_lookup_by_hand():
    assert block_lookup([7, 2, 9], 0, 4) == (7, 0)
    assert block_lookup([7, 2, 9], 5, 4) == (2, 1)
    assert block_lookup(torch.tensor([7, 2, 9]), 11, 4) == (9, 3)
    with pytest.raises(ValueError, match="past the block table"):
        block_lookup([7, 2, 9], 12, 4)
    with pytest.raises(ValueError, match="block_size"):
        block_lookup([1], 0, 0)
    with pytest.raises(TypeError, match="block_table"):
        block_lookup("abc", 0, 2)


def test_allocator_counts_owners_and_refuses_double_free():
    a = BlockAllocator(2)
    b0, b1 = a.allocate(), a.allocate()
    assert (b0, b1) == (0, 1) and a.num_free == 0
    with pytest.raises(ValueError, match="no free block: all 2 blocks"):
        a.allocate()
    a.share(b0)
    a.free(b0)
    assert a.refcount(b0) == 1 and a.num_free == 0
    a.free(b0)
    assert a.refcount(b0) == 0 and a.num_free == 1
    with pytest.raises(ValueError, match="block 0: it is free"):
        a.free(b0)
    with pytest.raises(ValueError, match="block"):
        a.free(5)
    with pytest.raises(TypeError):
        BlockAllocator(2.0)


# ----------------------------------------------------------------------------------------------
# decoding through the paged cache equals the contiguous cache
# ----------------------------------------------------------------------------------------------
@settings(max_examples=15, deadline=None)
@given(lengths=st.lists(st.integers(1, 11), min_size=1, max_size=4), block_size=st.integers(1, 5),
       steps=st.integers(1, 4), gqa=st.booleans(), seed=st.integers(0, 2**16))
def test_batched_decoding_through_block_tables_equals_contiguous_caches(lengths, block_size, steps, gqa, seed):
    g = torch.Generator().manual_seed(seed)
    Hkv, G, E = 2, (2 if gqa else 1), 4
    H = Hkv * G
    cache = PagedKVCache(64, block_size, Hkv, E, dtype=D)
    refs = []
    for b, n in enumerate(lengths):  # prompts of different lengths
        cache.add_sequence(b)
        k, v = _rand(Hkv, n, E, g=g), _rand(Hkv, n, E, g=g)
        cache.append(b, k, v)
        ref = KVCache()
        ref.update(k[None], v[None])
        refs.append(ref)
    for _ in range(steps):  # the batch grows by one token per sequence per step
        q = _rand(len(lengths), H, 1, E, g=g)
        for b, ref in enumerate(refs):
            k, v = _rand(Hkv, 1, E, g=g), _rand(Hkv, 1, E, g=g)
            cache.append(b, k, v)
            ref.update(k[None], v[None])
        got = paged_attention(q, cache, list(range(len(lengths))), enable_gqa=gqa)
        for b, ref in enumerate(refs):
            want = F.scaled_dot_product_attention(q[b:b + 1], ref.keys, ref.values, enable_gqa=gqa)
            assert torch.allclose(got[b:b + 1], want, atol=1e-12, rtol=0)
        for b, ref in enumerate(refs):
            k, v = cache.gather(b)
            assert torch.equal(k, ref.keys[0]) and torch.equal(v, ref.values[0])
            assert len(cache.block_table(b)) == math.ceil(cache.seq_len(b) / block_size)


def test_prefill_queries_are_bottom_right_causal():
    g = torch.Generator().manual_seed(1)
    cache = PagedKVCache(8, 3, 1, 4, dtype=D)
    cache.add_sequence("a")
    k, v, q = _rand(1, 7, 4, g=g), _rand(1, 7, 4, g=g), _rand(1, 1, 7, 4, g=g)
    cache.append("a", k, v)
    want = F.scaled_dot_product_attention(q, k[None], v[None], is_causal=True)
    assert torch.allclose(paged_attention(q, cache, ["a"]), want, atol=1e-12, rtol=0)


def test_prefix_sharing_copies_on_write_and_frees_when_unused():
    g = torch.Generator().manual_seed(2)
    P = 4
    cache = PagedKVCache(10, P, 1, 2, dtype=D)
    cache.add_sequence("prompt")
    pk, pv = _rand(1, 6, 2, g=g), _rand(1, 6, 2, g=g)  # 6 tokens: one full block, one half-full
    cache.append("prompt", pk, pv)
    cache.fork("prompt", "b")
    shared = cache.block_table("prompt")
    assert cache.block_table("b") == shared and cache.allocator.num_free == 8
    assert all(cache.allocator.refcount(x) == 2 for x in shared)
    ka, va, kb, vb = (_rand(1, 3, 2, g=g) for _ in range(4))
    cache.append("prompt", ka, va)  # writes into the shared half-full block: copied first
    cache.append("b", kb, vb)  # now b owns the old block alone: no copy
    assert cache.copies == 1
    assert cache.block_table("prompt")[0] == cache.block_table("b")[0] == shared[0]  # the full block stays shared
    assert cache.block_table("prompt")[1] != cache.block_table("b")[1]
    for name, k, v in (("prompt", ka, va), ("b", kb, vb)):
        gk, gv = cache.gather(name)
        assert torch.equal(gk, torch.cat([pk, k], 1)) and torch.equal(gv, torch.cat([pv, v], 1))
    cache.free("prompt")
    assert cache.allocator.refcount(shared[0]) == 1
    cache.free("b")
    assert cache.allocator.num_free == 10


def test_bad_input_to_the_paged_cache():
    cache = PagedKVCache(2, 2, 1, 2, dtype=D)
    cache.add_sequence(0)
    cache.append(0, torch.zeros(1, 3, 2, dtype=D), torch.zeros(1, 3, 2, dtype=D))
    # a block freed behind the sequence's back: reading it is refused
    cache.allocator.free(cache.block_table(0)[1])
    with pytest.raises(ValueError, match="points at block 1 .* which is free"):
        cache.gather(0)
    with pytest.raises(ValueError, match="no free block"):
        c2 = PagedKVCache(1, 2, 1, 2, dtype=D)
        c2.add_sequence(0)
        c2.append(0, torch.zeros(1, 3, 2, dtype=D), torch.zeros(1, 3, 2, dtype=D))
    assert c2.seq_len(0) == 0  # nothing half-written
    with pytest.raises(ValueError, match="unknown sequence 5"):
        cache.append(5, torch.zeros(1, 1, 2, dtype=D), torch.zeros(1, 1, 2, dtype=D))
    with pytest.raises(ValueError, match="already exists"):
        cache.add_sequence(0)
    with pytest.raises(ValueError, match=r"key must be \(Hkv=1, T, E=2\)"):
        cache.append(0, torch.zeros(2, 1, 2, dtype=D), torch.zeros(2, 1, 2, dtype=D))
    with pytest.raises(ValueError, match="finite"):
        cache.append(0, torch.full((1, 1, 2), math.nan, dtype=D), torch.zeros(1, 1, 2, dtype=D))
    with pytest.raises(TypeError, match="key"):
        cache.append(0, [[0.0]], torch.zeros(1, 1, 2, dtype=D))
    with pytest.raises(ValueError, match="fewer than the 4 queries"):
        c3 = PagedKVCache(4, 2, 1, 2, dtype=D)
        c3.add_sequence(0)
        c3.append(0, torch.zeros(1, 3, 2, dtype=D), torch.zeros(1, 3, 2, dtype=D))
        paged_attention(torch.zeros(1, 1, 4, 2, dtype=D), c3, [0])
    with pytest.raises(ValueError, match="seq_ids has 2 ids"):
        paged_attention(torch.zeros(1, 1, 1, 2, dtype=D), c3, [0, 0])


def test_memory_waste_counts_slots():
    w = memory_waste([1, 4, 5], max_len=8, block_size=4)
    assert w["tokens"] == 10 and w["contiguous_slots"] == 24 and w["paged_slots"] == 4 + 4 + 8
    assert w["contiguous_waste"] == pytest.approx(1 - 10 / 24) and w["paged_waste"] == pytest.approx(1 - 10 / 16)
    with pytest.raises(ValueError, match="lengths\\[1\\]"):
        memory_waste([1, 9], max_len=8, block_size=4)
    with pytest.raises(ValueError, match="empty"):
        memory_waste([], max_len=8, block_size=4)


# ----------------------------------------------------------------------------------------------
# packed batches, chunked prefill, split-KV
# ----------------------------------------------------------------------------------------------
@settings(max_examples=15, deadline=None)
@given(lengths=st.lists(st.integers(1, 9), min_size=1, max_size=4), seed=st.integers(0, 2**16))
def test_packed_batch_with_a_document_mask_equals_each_sequence_alone(lengths, seed):
    g = torch.Generator().manual_seed(seed)
    T = sum(lengths)
    q, k, v = (_rand(1, 2, T, 4, g=g) for _ in range(3))
    packed = F.scaled_dot_product_attention(q, k, v, attn_mask=document_mask(lengths))
    start = 0
    for n in lengths:
        s = slice(start, start + n)
        alone = F.scaled_dot_product_attention(q[:, :, s], k[:, :, s], v[:, :, s], is_causal=True)
        assert torch.allclose(packed[:, :, s], alone, atol=1e-12, rtol=0)
        start += n


def test_document_mask_by_hand_and_errors():
    m = document_mask([2, 1], causal=False)
    assert m.tolist() == [[True, True, False], [True, True, False], [False, False, True]]
    assert document_mask([2, 1]).tolist() == [[True, False, False], [True, True, False], [False, False, True]]
    with pytest.raises(ValueError, match="lengths\\[0\\]"):
        document_mask([0, 2])
    with pytest.raises(TypeError, match="causal"):
        document_mask([2], causal=1)


@pytest.mark.parametrize("L,chunk", [(1, 1), (7, 3), (8, 8), (9, 2), (5, 20)])
def test_chunked_prefill_equals_the_whole_prompt(L, chunk):
    g = torch.Generator().manual_seed(L * 31 + chunk)
    q, k, v = (_rand(2, 2, L, 4, g=g) for _ in range(3))
    out, cache = chunked_prefill(q, k, v, chunk)
    assert torch.allclose(out, F.scaled_dot_product_attention(q, k, v, is_causal=True), atol=1e-12, rtol=0)
    assert cache.seq_len == L
    with pytest.raises(ValueError, match="chunk_size"):
        chunked_prefill(q, k, v, 0)


@settings(max_examples=20, deadline=None)
@given(S=st.integers(1, 23), L=st.integers(1, 3), data=st.data(), seed=st.integers(0, 2**16))
def test_split_kv_equals_whole_attention(S, L, data, seed):
    splits = data.draw(st.integers(1, S))
    g = torch.Generator().manual_seed(seed)
    q, k, v = _rand(2, 3, L, 4, g=g), _rand(2, 3, S, 4, g=g), _rand(2, 3, S, 5, g=g)
    mask = torch.rand(L, S, generator=g) < 0.7
    mask[:, 0] = True
    out, lse = split_kv_attention(q, k, v, splits, attn_mask=mask, return_lse=True)
    want = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    assert torch.allclose(out, want, atol=1e-12, rtol=0)
    logits = (q @ k.mT / 2).masked_fill(~mask, -math.inf)
    assert torch.allclose(lse, torch.logsumexp(logits, -1), atol=1e-12, rtol=0)


def test_split_kv_bad_splits_and_merge_errors():
    q, k, v = torch.zeros(1, 1, 1, 2), torch.zeros(1, 1, 3, 2), torch.zeros(1, 1, 3, 2)
    with pytest.raises(ValueError, match="num_splits"):
        split_kv_attention(q, k, v, 4)
    with pytest.raises(ValueError, match="lses\\[1\\]"):
        merge_partials([torch.zeros(2, 3)] * 2, [torch.zeros(2), torch.zeros(3)])
    with pytest.raises(ValueError, match="empty"):
        merge_partials([], [])
    with pytest.raises(ValueError, match="NaN"):
        merge_partials([torch.zeros(2, 3)], [torch.tensor([0.0, math.nan])])
    with pytest.raises(TypeError, match="outputs"):
        merge_partials(torch.zeros(2, 3), [torch.zeros(2)])


def test_merge_of_rows_that_saw_no_key_is_zero_not_nan():
    out, lse = merge_partials([torch.ones(2, 3), torch.ones(2, 3)],
                              [torch.tensor([-math.inf, 0.0]), torch.tensor([-math.inf, 0.0])])
    assert torch.equal(out[0], torch.zeros(3)) and lse[0] == -math.inf
    assert torch.allclose(out[1], torch.ones(3)) and torch.isclose(lse[1], torch.tensor(math.log(2)))
