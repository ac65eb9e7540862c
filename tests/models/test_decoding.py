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


NAN, INF = float("nan"), float("inf")


@pytest.mark.parametrize("temperature", [0.0, 1.0])
@pytest.mark.parametrize("row, match", [
    ([0.0, NAN, 1.0], r"logits contains NaN \(1 value\), first at index \(0, 1\)"),  # greedy picked the NaN (id 1)
    ([0.0, INF, 1.0], r"logits contains \+inf"),  # sampling: softmax NaN, torch.multinomial's RuntimeError
    ([-INF, -INF, -INF], r"logits row \(0,\) .* is -inf everywhere: no token is allowed"),  # greedy returned id 0
    ([], r"at least one token \(V >= 1\)"),  # V = 0: argmax IndexError / multinomial RuntimeError
])
def test_sampling_refuses_logits_no_token_can_be_chosen_from(row, match, temperature):
    """Issue 38: before, greedy returned the NaN token 1 and the all -inf row's token 0; sampling raised torch's error."""
    logits = torch.tensor([row])
    with pytest.raises(ValueError, match=match):
        sample_next(logits, temperature=temperature)
    with pytest.raises(ValueError, match=match):
        sample_loop(lambda new: logits, 1, 2, temperature=temperature)
    ok = torch.tensor([[0.0, -INF, 1.0]])  # -inf alone is a blocked token, not an error
    assert sample_next(ok).item() == 2 and sample_next(ok, temperature=1.0, generator=torch.Generator()).item() != 1


def test_top_k_and_temperature_refuse_nan_and_overflow():
    """Issue 38: top-k kept the NaN (a comparison with NaN is False); a temperature whose division overflows
    gave +inf logits (then NaN probabilities) instead of an error."""
    with pytest.raises(ValueError, match="logits contains NaN"):
        top_k_filter(torch.tensor([[0.0, NAN, 1.0]]), 1)  # before: [0, nan, 1] returned, the NaN kept
    with pytest.raises(ValueError, match="logits contains NaN"):
        temperature_scale(torch.tensor([[NAN]]), 1.0)
    with pytest.raises(ValueError, match="logits must have at least 1 dims"):
        top_k_filter(torch.tensor(1.0), 1)  # before: IndexError
    for t in (1e-39, 1e-320):  # 2 / t overflows float32 (max 3.4e38); 1e-320 is a subnormal double
        with pytest.raises(ValueError, match=rf"temperature={t!r} is too small .* use temperature=0"):
            temperature_scale(torch.tensor([[1.0, 2.0]]), t)  # before: [inf, inf]
        with pytest.raises(ValueError, match="too small"):
            sample_next(torch.tensor([[1.0, 2.0]]), temperature=t)  # before: torch.multinomial's RuntimeError
    with pytest.raises(ValueError, match="too small"):
        temperature_scale(torch.tensor([[3e38, 0.0]]), 0.5)  # a finite logit near the max, doubled: inf
    # the edges that stay valid: -inf is kept, a huge temperature flattens to 0, float64 holds 2 / 1e-39
    assert temperature_scale(torch.tensor([[-INF, 2.0]]), 0.5).tolist() == [[-INF, 4.0]]
    assert torch.equal(temperature_scale(torch.tensor([[1.0, 2.0]]), 1e300), torch.zeros(1, 2))  # uniform limit
    assert temperature_scale(torch.tensor([[1.0, 2.0]], dtype=torch.float64), 1e-39)[0, 1] == 2.0 / 1e-39


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(next_logits=None), TypeError, "next_logits must be a function"),  # before: 'NoneType' not callable
    (dict(batch_size=-1), ValueError, "batch_size must be an int >= 0, got -1"),  # before: torch's RuntimeError
    (dict(max_new_tokens=-1), ValueError, "max_new_tokens must be an int >= 0, got -1"),  # before: silently none
    (dict(eos_id="a"), TypeError, "eos_id must be an int >= 0"),  # before: silently never stopped
    (dict(pad_id=1.5), TypeError, "pad_id must be an int >= 0"),
    (dict(batch_size=2), ValueError, r"next_logits must return \(batch_size, V\) = \(2, V\) logits, got shape \(1, 3\)"),
])
def test_sample_loop_checks_its_arguments(kwargs, error, match):
    args = dict(next_logits=lambda new: torch.zeros(1, 3), batch_size=1, max_new_tokens=2) | kwargs
    with pytest.raises(error, match=match):
        sample_loop(args.pop("next_logits"), args.pop("batch_size"), args.pop("max_new_tokens"), **args)
    assert sample_loop(lambda new: torch.zeros(0, 3), 0, 2).shape == (0, 2)  # B = 0: an empty batch, no error
