"""The sliding window, the ring-buffer cache, StreamingLLM's mask and the local:global saving (notebook 11)."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings, strategies as st

from attn_lib.kv_cache import KVCache
from attn_lib.masks import causal_mask
from attn_lib.variants import VariantAttention
from attn_lib.windows import (RingKVCache, local_global_cache_bytes, ring_slot_positions, sliding_window_mask,
                              streaming_mask, window_mask_from_positions)


@settings(max_examples=40, deadline=None)
@given(L=st.integers(1, 9), extra=st.integers(0, 6), window=st.integers(1, 12))
def test_sliding_window_mask_by_definition(L, extra, window):
    S = L + extra
    m = sliding_window_mask(L, S, window=window)
    i, j = torch.arange(L)[:, None] + S - L, torch.arange(S)[None, :]
    assert torch.equal(m, (j <= i) & (i - j < window))
    assert torch.equal(m, window_mask_from_positions(torch.arange(S - L, S), torch.arange(S), window=window))
    if window >= S:
        assert torch.equal(m, causal_mask(L, S, align="bottom_right"))


def test_streaming_mask_keeps_the_first_tokens():
    m = streaming_mask(6, window=2, num_sinks=1)
    assert m[:, 0].all() and m.sum(1).tolist() == [1, 2, 3, 3, 3, 3]
    assert torch.equal(streaming_mask(6, window=2, num_sinks=0), sliding_window_mask(6, window=2))


@pytest.mark.parametrize("window, prompt", [(4, 1), (4, 3), (3, 5)])
def test_ring_buffer_decode_equals_full_cache_masked_to_the_window(window, prompt):
    """Three windows' worth of tokens, token for token; the ring's memory never grows."""
    torch.manual_seed(0)
    m = VariantAttention(16, 4, 2, 4, sliding_window=window, qk_norm=True, dtype=torch.float64)
    n = 3 * window + prompt
    x = torch.randn(2, n, 16, dtype=torch.float64)
    full = m(x)  # no cache: the window mask over all n tokens
    ring, plain = RingKVCache(window), KVCache()
    outs_ring, outs_plain, sizes = [m(x[:, :prompt], cache=ring)], [m(x[:, :prompt], cache=plain)], []
    for t in range(prompt, n):
        outs_ring.append(m(x[:, t:t + 1], cache=ring))
        outs_plain.append(m(x[:, t:t + 1], cache=plain))
        sizes.append(ring.nbytes())
    for outs in (outs_ring, outs_plain):
        torch.testing.assert_close(torch.cat(outs, 1), full, rtol=0, atol=1e-12)
    assert set(sizes) == {2 * 2 * window * 4 * 2 * 8} and plain.nbytes() == 2 * 2 * n * 4 * 2 * 8
    assert ring.positions.tolist() == ring_slot_positions(n, window) and ring.seq_len == n
    # the window matters: without it the decode differs
    m.sliding_window = None
    assert (m(x) - full).abs().max() > 1e-6


def test_ring_slot_positions_and_local_global_saving():
    from attn_lib.course.exercises.concepts import QUESTIONS, questions_for

    questions_for(11)
    assert ring_slot_positions(10001, 4096).index(10000) == QUESTIONS["11.ring_slot"].answer
    assert ring_slot_positions(7, 3) == [6, 4, 5] and ring_slot_positions(2, 4) == [0, 1, -1, -1]
    # Gemma 3 27B: 62 layers, 5 local (1024) : 1 global, 16 KV heads of 128, at 128k tokens
    r = local_global_cache_bytes(131072, num_layers=62, num_kv_heads=16, head_dim=128, window=1024, local_per_global=5)
    per = 2 * 16 * 128 * 2
    assert r["all_global"] == 62 * 131072 * per and r["local_global"] == (10 * 131072 + 52 * 1024) * per
    assert 5.5 < r["saving"] < 6.0
    with pytest.raises(ValueError, match="window"):
        RingKVCache(0)


def test_window_mask_from_positions_refuses_positions_on_two_devices():
    with pytest.raises(ValueError, match="q_positions, k_positions must be on one device"):
        window_mask_from_positions(torch.arange(3), torch.arange(3, device="meta"))


@pytest.mark.parametrize("call", [
    lambda: ring_slot_positions(3, 2**63),          # was Python's OverflowError
    lambda: ring_slot_positions(3, 2**31 + 1),
    lambda: RingKVCache(2**40),                     # was torch's allocation error at the first update
    lambda: local_global_cache_bytes(2**63, num_layers=2**63, num_kv_heads=2**63, head_dim=2**63, window=2,
                                     local_per_global=1, bytes_per_element=1e300),  # bytes beyond a float
])
def test_ring_windows_and_sizes_beyond_sane_bounds_are_refused(call):
    with pytest.raises(ValueError, match="window|overflow"):
        call()


def test_local_global_counts_global_layers_without_a_loop():
    # 5 local per global over 12 layers: layers 6 and 12 global; the closed form equals the per-layer count
    got = local_global_cache_bytes(100, num_layers=12, num_kv_heads=1, head_dim=1, window=10, local_per_global=5,
                                   bytes_per_element=1)
    assert got["local_global"] == 2 * (2 * 100 + 10 * 10) and got["all_global"] == 2 * 12 * 100
    assert local_global_cache_bytes(10**6, num_layers=2**40, num_kv_heads=1, head_dim=1, window=4,
                                    local_per_global=3)["saving"] > 1  # instant, no loop over 2**40 layers
    assert local_global_cache_bytes(2**63, num_layers=2**63, num_kv_heads=2**63, head_dim=2**63, window=2,
                                    local_per_global=1)["saving"] == pytest.approx(2.0)  # looped over 2**63 layers
