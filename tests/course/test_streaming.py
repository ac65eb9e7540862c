"""StreamingLLM on the course's tiny decoder: the sink cache's decode equals the streaming mask, and on a model
trained with a BOS token, evicting the first token hurts while keeping it does not (notebook 11, issue #25)."""

from __future__ import annotations

import pytest
import torch

from attn_lib.course.capstone import TinyDecoder
from attn_lib.masks import causal_mask
from attn_lib.course.streaming import (SinkRingKVCache, bos_windows, masked_logits, streaming_logits, train_sink_model,
                                window_losses)
from attn_lib.windows import streaming_mask


@pytest.mark.parametrize("window, num_sinks", [(5, 0), (4, 2), (3, 4)])
def test_sink_ring_decode_equals_the_streaming_mask_with_constant_memory(window, num_sinks):
    torch.manual_seed(0)
    model = TinyDecoder(11, d_model=16, num_heads=4, num_kv_heads=2).double().eval()
    ids = torch.randint(0, 11, (2, 17))
    with torch.no_grad():
        torch.testing.assert_close(masked_logits(model, ids, causal_mask(17)), model(ids), rtol=0, atol=1e-12)
        logits, peak = streaming_logits(model, ids, window=window, num_sinks=num_sinks)
        ref = masked_logits(model, ids, streaming_mask(17, window=window, num_sinks=num_sinks))
        torch.testing.assert_close(logits, ref, rtol=0, atol=1e-12)
        assert (logits - model(ids)).abs().max() > 1e-6  # the eviction changes the result: the check can fail
    # B x Hkv x (num_sinks + window) tokens x (E + E) float64 numbers per layer, however long the decode
    assert peak == 2 * 2 * (num_sinks + window) * 2 * 4 * 8
    with pytest.raises(ValueError, match="num_sinks"):
        SinkRingKVCache(4, -1)


def test_evicting_the_first_token_hurts_and_keeping_it_does_not():
    """Seed 0, 200 steps (~5 s). Measured over seeds 0-3: window - full 0.05-0.3 nats, sinks - full 0.01-0.03."""
    model, stream, bos = train_sink_model(seed=0)
    x, y = bos_windows(stream, 64, 64, bos, torch.Generator().manual_seed(1000))
    r = window_losses(model, x, y, window=16, num_sinks=1)
    gap = r["window"] - r["full"]
    assert gap > 0.05  # (b) the window alone: clearly worse than the full cache
    assert r["sinks"] - r["full"] < gap / 2  # (c) BOS + 15 recent keys, the same 16 keys: close to (a)
    with pytest.raises(ValueError, match="window"):
        window_losses(model, x, y, window=64)
    with pytest.raises(TypeError, match="TinyDecoder"):
        masked_logits(torch.nn.Linear(2, 2), x, causal_mask(64))
    with pytest.raises(ValueError, match=rf"ids holds ids \[{bos + 1}\] outside the vocabulary 0..{bos}"):
        masked_logits(model, torch.full_like(x, bos + 1), causal_mask(64))
    with pytest.raises(TypeError, match="ids must hold integer token ids"):
        streaming_logits(model, x.float(), window=8, num_sinks=1)
    with pytest.raises(TypeError, match="mask must be a bool tensor .*got dtype torch.int64"):
        masked_logits(model, x, causal_mask(64).long())
    with pytest.raises(ValueError, match=r"mask must be \(L, L\) = \(64, 64\), got \(8, 8\)"):
        masked_logits(model, x, causal_mask(8))
    with pytest.raises(ValueError, match=r"targets must have ids' shape \(64, 64\), got \(64, 63\)"):
        window_losses(model, x, y[:, 1:], window=16)
    with pytest.raises(ValueError, match="targets holds ids"):
        window_losses(model, x, y - 1000, window=16)


def test_sink_cache_empty_chunks_dtypes_and_copies():
    """Issue 38: an empty first chunk raised torch.cat's error; a float64 chunk after float32 sinks was promoted
    (torch.cat) where the ring refuses it; the sinks were views of the caller's tensor and changed with it."""
    k = torch.randn(1, 2, 2, 4)
    keys, values, pos = SinkRingKVCache(3, 1).update(k[:, :, :0], k[:, :, :0])  # S_new = 0, nothing stored
    assert keys.shape == values.shape == (1, 2, 0, 4) and pos.shape == (0,) and pos.dtype == torch.int64
    cache = SinkRingKVCache(3, 4)
    cache.update(k, k.clone())
    with pytest.raises(TypeError, match="SinkRingKVCache.update: new key and value have dtype torch.float64, but the "
                                        "cache holds torch.float32"):
        cache.update(k.double(), k.double())  # was promoted: sinks + chunk returned as float64
    with pytest.raises(ValueError, match=r"do not match the cached keys .* in \(B, Hkv, E\)"):
        cache.update(torch.randn(2, 2, 1, 4), torch.randn(2, 2, 1, 4))
    caller = torch.randn(1, 2, 2, 4)
    cache = SinkRingKVCache(3, 2)
    cache.update(caller, caller.clone())
    stored = cache.sink_keys.clone()
    caller.add_(1.0)  # the caller reuses its buffer
    assert torch.equal(cache.sink_keys, stored)  # was a view: it changed with the caller's tensor
    keys, _, pos = SinkRingKVCache(3, 1).update(torch.randn(0, 2, 6, 4), torch.randn(0, 2, 6, 4))
    assert keys.shape == (0, 2, 9, 4) and pos.tolist() == [0, -1, -1, -1, 1, 2, 3, 4, 5]  # B = 0: the positions


@pytest.mark.parametrize("call, error, match", [
    (lambda m, x: window_losses(m, x[:0], x[:0], window=2), ValueError, r"at least one sequence \(B >= 1\)"),  # NaN
    (lambda m, x: bos_windows(torch.arange(10.0), 2, 4, 9), TypeError, "stream must hold integer token ids"),
    (lambda m, x: bos_windows(torch.arange(10), 2, 4, -1), ValueError, "bos must be an int >= 0, got -1"),  # kept -1
    (lambda m, x: bos_windows(torch.arange(10), 2, 4, "x"), TypeError, "bos must be an int"),  # was torch.full's
    (lambda m, x: bos_windows(torch.arange(10), 2, 4, 1, 5), TypeError, "generator must be a torch.Generator"),
    (lambda m, x: train_sink_model(steps=1, lr="x"), TypeError, "lr must be a number"),  # was '<=' not supported
    (lambda m, x: train_sink_model(steps=1, lr=-1.0), ValueError, "lr must be a number > 0"),  # was AdamW's
])
def test_streaming_refuses_bad_input_by_name(call, error, match):
    torch.manual_seed(0)
    model = TinyDecoder(11, d_model=16, num_heads=4, num_kv_heads=2).eval()
    ids = torch.randint(0, 11, (2, 6))
    with pytest.raises(error, match=match):
        call(model, ids)
    assert masked_logits(model, ids[:0], causal_mask(6)).shape == (0, 6, 11)  # B = 0: an empty batch, no error
    assert streaming_logits(model, ids[:0], window=2, num_sinks=1)[0].shape == (0, 6, 11)


def test_bos_windows_takes_a_stream_of_exactly_one_window():
    """Issue 38 §5's twin: a stream of exactly seq_len tokens holds one window (start 0); it was refused."""
    x, y = bos_windows(torch.arange(5, 9), 3, 4, 0)
    assert torch.equal(y, torch.arange(5, 9).expand(3, 4)) and torch.equal(x, torch.tensor([0, 5, 6, 7]).expand(3, 4))
    with pytest.raises(ValueError, match="stream must hold at least seq_len=4 tokens"):
        bos_windows(torch.arange(3), 2, 4, 0)
