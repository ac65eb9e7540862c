"""Notebook 14's speculative decoding: the verify mask and tree mask equal running each path alone, the
acceptance rule keeps the target's distribution (exactly, and measured), and a generation loop counts its
forwards."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from attn_lib.course.capstone import TinyDecoder
from attn_lib.speculative import (emitted_distribution, speculative_accept, speculative_generate, tree_mask,
                                  verify_mask)

D = torch.float64


def test_verify_mask_is_bottom_right_causal_and_a_chain_tree():
    assert verify_mask(2, 3).tolist() == [[True, True, True, False, False],
                                          [True, True, True, True, False],
                                          [True, True, True, True, True]]
    assert torch.equal(tree_mask([-1, 0, 1], cached=2), verify_mask(2, 3))


def test_verified_forward_with_a_cache_equals_the_full_forward():
    torch.manual_seed(0)
    model = TinyDecoder(17).double().eval()
    ids = torch.randint(0, 17, (1, 9))
    with torch.no_grad():
        full = model(ids)
        caches = model.new_kv_caches()
        model(ids[:, :5], caches)
        verify = model(ids[:, 5:], caches)  # 4 drafted tokens in one forward, bottom-right causal
    assert torch.allclose(verify, full[:, 5:], atol=1e-12, rtol=0)


@settings(max_examples=15, deadline=None)
@given(parents=st.lists(st.integers(0, 10), min_size=1, max_size=7), cached=st.integers(0, 4),
       seed=st.integers(0, 2**16))
def test_tree_attention_equals_each_path_alone(parents, cached, seed):
    parents = [-1] + [p % (i + 1) for i, p in enumerate(parents[1:])]  # a valid tree: parent before child
    g = torch.Generator().manual_seed(seed)
    N = len(parents)
    q, k, v = (torch.randn(1, 2, cached + N, 4, generator=g, dtype=D) for _ in range(3))
    out = F.scaled_dot_product_attention(q[:, :, cached:], k, v, attn_mask=tree_mask(parents, cached))
    for i in range(N):
        path, j = [], i
        while j >= 0:
            path.append(cached + j)
            j = parents[j]
        idx = list(range(cached)) + path[::-1]
        alone = F.scaled_dot_product_attention(q[:, :, idx], k[:, :, idx], v[:, :, idx], is_causal=True)
        assert torch.allclose(out[:, :, i], alone[:, :, -1], atol=1e-12, rtol=0)


@settings(max_examples=50, deadline=None)
@given(V=st.integers(2, 8), seed=st.integers(0, 2**16))
def test_the_emitted_distribution_is_the_target_exactly(V, seed):
    g = torch.Generator().manual_seed(seed)
    p = torch.softmax(torch.randn(V, generator=g, dtype=D) * 2, -1)
    q = torch.softmax(torch.randn(V, generator=g, dtype=D) * 2, -1)
    assert torch.allclose(emitted_distribution(p, q), p, atol=1e-15, rtol=0)
    assert torch.allclose(emitted_distribution(p, p), p, atol=1e-15, rtol=0)
    # the naive rule (keep the draft's token whenever the target would also pick it often) is NOT p
    assert not torch.allclose(q, p)


def test_measured_frequencies_follow_the_target():
    """20 000 seeded single-token rounds on V = 4: every frequency within 5 standard errors of p (and the
    draft's q is far outside that)."""
    p = torch.tensor([0.5, 0.3, 0.15, 0.05], dtype=D)
    q = torch.tensor([0.1, 0.2, 0.3, 0.4], dtype=D)
    g = torch.Generator().manual_seed(0)
    n, counts, kept = 20000, torch.zeros(4), 0
    for _ in range(n):
        x = torch.multinomial(q, 1, generator=g)
        tokens, acc = speculative_accept(torch.stack([p, p]), q[None], x, g)
        counts[tokens[0]] += 1
        kept += acc
    freq = counts / n
    bound = 5 * (p * (1 - p) / n).sqrt()
    assert ((freq - p).abs() <= bound).all(), (freq, p)
    assert ((freq - q).abs() > bound).any()
    assert abs(kept / n - float(torch.minimum(p, q).sum())) < 5 * (0.25 / n) ** 0.5  # acceptance rate = beta


def test_acceptance_is_deterministic_where_it_must_be():
    p = torch.tensor([[0.0, 1.0, 0.0], [0.2, 0.3, 0.5]], dtype=D)
    q = torch.tensor([[0.5, 0.5, 0.0]], dtype=D)
    # p(x) >= q(x): always kept, then a bonus token from the last row
    assert speculative_accept(p, q, torch.tensor([1]))[1] == 1
    # p(x) = 0: always rejected, and the residual max(0, p - q) puts all its mass on token 1
    for seed in range(5):
        tokens, acc = speculative_accept(p, q, torch.tensor([0]), torch.Generator().manual_seed(seed))
        assert (tokens, acc) == ([1], 0)


def test_bad_input_gets_clear_errors():
    p2, q1 = torch.full((2, 3), 1 / 3), torch.full((1, 3), 1 / 3)
    with pytest.raises(ValueError, match="target_probs \\(k \\+ 1, V\\)"):
        speculative_accept(p2, torch.full((2, 3), 1 / 3), torch.tensor([0]))
    with pytest.raises(ValueError, match="sum to 1"):
        speculative_accept(p2 * 2, q1, torch.tensor([0]))
    with pytest.raises(ValueError, match="ids in 0..2"):
        speculative_accept(p2, q1, torch.tensor([3]))
    with pytest.raises(TypeError, match="integer"):
        speculative_accept(p2, q1, torch.tensor([0.0]))
    with pytest.raises(ValueError, match="parents\\[1\\] = 1"):
        tree_mask([-1, 1])
    with pytest.raises(ValueError, match="num_new"):
        verify_mask(3, 0)


def test_generation_counts_forwards_and_a_copy_of_the_target_is_always_accepted():
    torch.manual_seed(0)
    target = TinyDecoder(17).eval()
    prompt = torch.randint(0, 17, (1, 5))
    ids, stats = speculative_generate(target, target, prompt, 12, k=4, temperature=0.0)
    # each round keeps all its drafts and adds the bonus token: 4 + 1, 4 + 1, then 2 drafts for the last 2 tokens
    assert ids.shape == (1, 17) and stats["accepted"] == stats["drafted"] == 4 + 4 + 2
    assert stats["target_forwards"] == 3 and stats["draft_forwards"] == 10
    assert torch.equal(ids, target.generate(prompt, 12))  # greedy: the target's own greedy output
    other = TinyDecoder(17, d_model=16, num_layers=1).eval()
    ids2, s2 = speculative_generate(target, other, prompt, 12, k=3, temperature=0.0)
    assert torch.equal(ids2, target.generate(prompt, 12))  # any draft: the same greedy tokens
    assert s2["target_forwards"] >= 3
