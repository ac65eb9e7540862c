"""attn_lib.models.decoding: the one decoding loop's sampling equals HuggingFace's.

- ``temperature_scale`` and ``top_k_filter`` equal transformers' ``TemperatureLogitsWarper`` and
  ``TopKLogitsWarper`` value for value (ties with the k-th logit kept, as HF keeps them);
- ``sample_next`` at temperature 0 is the argmax; with a temperature it draws from the warped softmax
  (frequencies against the exact probabilities), never outside the top k, reproducibly with a generator;
- ``sample_loop`` at temperature 0 is ``greedy_loop``; DecoderLM.generate samples the same way.
The sampled tokens equal HF ``generate(do_sample=True)`` on a random Llama in tests/models/test_lm_from_hf.py.
"""

from __future__ import annotations

import pytest
import torch

from attn_lib.models.decoding import greedy_loop, sample_loop, sample_next, temperature_scale, top_k_filter
from attn_lib.models.lm import DecoderLM


@pytest.mark.parametrize("temperature", [0.3, 0.7, 1.0, 2.5])
def test_temperature_equals_hf_warper(temperature):
    from transformers import TemperatureLogitsWarper

    logits = torch.randn(3, 50, generator=torch.Generator().manual_seed(0))
    ours = temperature_scale(logits, temperature)
    ref = TemperatureLogitsWarper(temperature)(None, logits.clone())
    torch.testing.assert_close(ours, ref, rtol=0, atol=0)


@pytest.mark.parametrize("k", [1, 2, 5, 49, 50, 80])
def test_top_k_equals_hf_warper_with_ties(k):
    from transformers import TopKLogitsWarper

    g = torch.Generator().manual_seed(k)
    logits = torch.randint(-3, 4, (4, 50), generator=g).double()  # few distinct values: many ties
    ours = top_k_filter(logits, k)
    ref = TopKLogitsWarper(k)(None, logits.clone())
    assert torch.equal(ours, ref)
    assert ((ours > float("-inf")).sum(-1) >= min(k, 50)).all()  # ties with the k-th are kept
    smooth = torch.randn(4, 50, generator=g)
    assert torch.equal(top_k_filter(smooth, k), TopKLogitsWarper(k)(None, smooth.clone()))
    assert ((top_k_filter(smooth, k) > float("-inf")).sum(-1) == min(k, 50)).all()


def test_sampling_follows_the_warped_softmax():
    logits = torch.tensor([[2.0, 1.0, 0.5, 0.0, -1.0]])
    n = 20000
    g = torch.Generator().manual_seed(0)
    draws = torch.stack([sample_next(logits, temperature=0.5, top_k=3, generator=g) for _ in range(n)])
    freq = torch.bincount(draws.flatten(), minlength=5).double() / n
    p = torch.softmax(torch.tensor([2.0, 1.0, 0.5]).double() / 0.5, 0)
    assert freq[3:].sum() == 0  # outside the top 3: never
    assert (freq[:3] - p).abs().max() < 0.015  # 4 standard errors at n = 20000
    # temperature 0 is the argmax; top_k cannot change it; a generator makes draws reproducible
    assert sample_next(logits, temperature=0.0, top_k=2).item() == 0
    a = sample_next(logits.repeat(8, 1), temperature=1.0, generator=torch.Generator().manual_seed(3))
    b = sample_next(logits.repeat(8, 1), temperature=1.0, generator=torch.Generator().manual_seed(3))
    assert torch.equal(a, b)


def test_sample_loop_at_temperature_zero_is_greedy():
    table = torch.randn(7, 7, generator=torch.Generator().manual_seed(1))  # a bigram "model"
    start = torch.tensor([0, 3])

    def next_logits(new):
        last = start if new.shape[1] == 0 else new[:, -1]
        return table[last]

    greedy = greedy_loop(next_logits, 2, 6)
    assert torch.equal(sample_loop(next_logits, 2, 6, temperature=0.0), greedy)
    expected, last = [], start
    for _ in range(6):  # the greedy chain by hand
        last = table[last].argmax(-1)
        expected.append(last)
    assert torch.equal(greedy, torch.stack(expected, 1))
    hot = sample_loop(next_logits, 2, 6, temperature=5.0, generator=torch.Generator().manual_seed(0))
    assert not torch.equal(hot, greedy)  # a high temperature leaves the greedy chain: the test can fail


def test_decoder_lm_generate_samples_reproducibly():
    torch.manual_seed(0)
    m = DecoderLM(30, d_model=16, num_heads=2, num_layers=1, init_std=0.5).eval()
    prompt = torch.tensor([[1, 2, 3]])
    kw = dict(temperature=0.8, top_k=4)
    a = m.generate(prompt, 10, generator=torch.Generator().manual_seed(5), **kw)
    b = m.generate(prompt, 10, use_cache=False, generator=torch.Generator().manual_seed(5), **kw)
    assert torch.equal(a, b)  # the cache changes nothing, sampled or not
    ids, logits = m.generate(prompt, 10, generator=torch.Generator().manual_seed(5), return_logits=True, **kw)
    assert torch.equal(ids, a) and logits.shape == (1, 10, 30)
    kth = logits.topk(4, dim=-1).values[..., -1]
    chosen = logits.gather(-1, ids[:, 3:, None])[..., 0]
    assert (chosen >= kth).all()  # every sampled token is among the top 4 of its step
    assert torch.equal(m.generate(prompt, 10), m.generate(prompt, 10, temperature=0.0, top_k=3))


def test_bad_sampling_arguments_are_named():
    logits = torch.randn(2, 5)
    with pytest.raises(ValueError, match="temperature"):
        sample_next(logits, temperature=-1.0)
    with pytest.raises(TypeError, match="temperature"):
        sample_next(logits, temperature="hot")
    with pytest.raises(ValueError, match="top_k"):
        sample_next(logits, temperature=1.0, top_k=0)
    with pytest.raises(TypeError, match="top_k"):
        top_k_filter(logits, 2.5)
    with pytest.raises(TypeError, match="generator"):
        sample_next(logits, temperature=1.0, generator=0)
    with pytest.raises(ValueError, match="temperature"):
        temperature_scale(logits, 0.0)
    with pytest.raises(TypeError, match="logits"):
        sample_next(torch.zeros(2, 5, dtype=torch.long))
