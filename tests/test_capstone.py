"""attn_lib.capstone (notebook 10): its attention equals torch's SDPA (GQA, RoPE, causal), the tiled
attention inside the model equals the naive one, cached decoding equals uncached, training lowers the loss."""

import math

import pytest
import torch
import torch.nn.functional as F

import attn_lib
from attn_lib import capstone as C
from attn_lib.positional import apply_rope


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    m = C.TinyDecoder(40, d_model=32, num_heads=4, num_kv_heads=2, num_layers=2, block=4).eval()
    for p in m.parameters():  # larger weights than the init, so that differences would show
        torch.nn.init.normal_(p, std=0.3)
    return m


def test_attention_equals_torch_sdpa_with_gqa():
    torch.manual_seed(1)
    attn = C.CausalSelfAttention(32, 4, 2).double()
    x = torch.randn(2, 9, 32, dtype=torch.float64)
    B, L, _ = x.shape
    q = apply_rope(attn.q_proj(x).view(B, L, 4, 8).transpose(1, 2))
    k = apply_rope(attn.k_proj(x).view(B, L, 2, 8).transpose(1, 2))
    v = attn.v_proj(x).view(B, L, 2, 8).transpose(1, 2)
    ref = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    expected = attn.o_proj(ref.transpose(1, 2).reshape(B, L, 32))
    with torch.no_grad():
        for how in C.ATTENTIONS:
            assert torch.allclose(attn(x, attention=how), expected, atol=1e-10), how


def test_tiled_equals_naive_inside_the_model(model):
    ids = torch.randint(0, 40, (3, 13), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        naive, tiled = model(ids), model(ids, attention="tiled")
    assert naive.abs().max() > 1  # not trivially small
    assert torch.allclose(naive, tiled, atol=1e-5)


def test_cache_equals_full_forward_and_generation(model):
    prompt = torch.tensor([[3, 1, 4, 1, 5]])
    with torch.no_grad():
        for how in C.ATTENTIONS:
            cached, cached_logits = C.generate(model, prompt, 12, attention=how)
            full, full_logits = C.generate(model, prompt, 12, use_cache=False, attention=how)
            assert torch.equal(cached, full)
            assert torch.allclose(cached_logits, full_logits, atol=1e-5)
            # the step logits are the full forward pass's logits at the positions that chose each token
            all_logits = model(cached[:, :-1])
            assert torch.allclose(all_logits[:, prompt.shape[1] - 1:], cached_logits, atol=1e-5)
            assert torch.equal(cached_logits.argmax(-1), cached[:, prompt.shape[1]:])


def test_cache_in_chunks(model):
    ids = torch.randint(0, 40, (2, 10), generator=torch.Generator().manual_seed(3))
    caches = [attn_lib.KVCache() for _ in model.blocks]
    with torch.no_grad():
        parts = [model(ids[:, :4], caches), model(ids[:, 4:7], caches), model(ids[:, 7:], caches)]
        full = model(ids)
    assert torch.allclose(torch.cat(parts, 1), full, atol=1e-5)
    assert caches[0].seq_len == 10 and caches[0].keys.shape[1] == 2  # num_kv_heads keys are cached


def test_unigram_cross_entropy_by_hand():
    # counts + 1: token 0 -> 3, token 1 -> 2; p = (0.6, 0.4)
    got = C.unigram_cross_entropy(torch.tensor([0, 0, 1]), torch.tensor([1, 0]), 2)
    assert math.isclose(got, -(math.log(0.4) + math.log(0.6)) / 2)


def test_training_learns_a_periodic_sequence():
    torch.manual_seed(0)
    stream = torch.arange(10).repeat(60)  # 0 1 2 ... 9 0 1 ...: the next token is determined
    m = C.TinyDecoder(10, d_model=32, num_layers=1)
    losses = C.train(m, stream, steps=60, batch_size=8, seq_len=16, progress=False)
    assert abs(losses[0] - math.log(10)) < 0.3  # untrained: a uniform guess
    assert sum(losses[-5:]) / 5 < 0.5


def test_errors():
    with pytest.raises(ValueError, match="num_kv_heads must divide num_heads"):
        C.CausalSelfAttention(32, 4, 3)
    with pytest.raises(ValueError, match="head_dim"):
        C.CausalSelfAttention(12, 4, 2)
    m = C.TinyDecoder(10, num_layers=2)
    with pytest.raises(ValueError, match="attention"):
        m(torch.zeros(1, 3, dtype=torch.long), attention="flash")
    with pytest.raises(ValueError, match="one KVCache per layer"):
        m(torch.zeros(1, 3, dtype=torch.long), [attn_lib.KVCache()])
