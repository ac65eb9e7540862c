"""attn_lib.models.lm.DecoderLM: cached decoding is exact, greedy output does not depend on the cache.

- logits of cached decoding (token by token, and in chunks) equal the full forward pass to 1e-5
  (float32) and to 1e-10 (float64), for MHA, GQA and MQA;
- ``generate`` gives the same tokens with and without the cache, and the same as a plain greedy
  loop written here from the full forward pass;
- the filled caches hold exactly kv_cache_bytes(...) bytes, with num_kv_heads heads;
- the model is causal (changing a later token never changes earlier logits) and trains.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attn_lib.kv_cache import KVCache, QuantizedKVCache, kv_cache_bytes
from attn_lib.quantization import relative_error
from attn_lib.models.lm import DecoderLM


pytestmark = pytest.mark.usefixtures("one_thread")


def _model(num_kv_heads=2, dtype=torch.float32, seed=0, vocab=64, init_std=0.3):
    torch.manual_seed(seed)
    # larger weights than GPT-2's init, so that the logits depend strongly on the context
    return DecoderLM(vocab, d_model=32, num_heads=4, num_kv_heads=num_kv_heads, num_layers=2,
                     init_std=init_std).to(dtype).eval()


@settings(max_examples=15)
@given(st.sampled_from([4, 2, 1]), st.lists(st.integers(1, 5), min_size=1, max_size=5), st.integers(0, 1000))
def test_cached_logits_equal_full_forward(num_kv_heads, chunks, seed):
    m32 = _model(num_kv_heads, seed=seed)
    m64 = _model(num_kv_heads, torch.float64, seed=seed)
    ids = torch.randint(0, 64, (2, sum(chunks)), generator=torch.Generator().manual_seed(seed))
    for m, tol in ((m32, 1e-5), (m64, 1e-10)):
        with torch.no_grad():
            full = m(ids)
            caches, outs, start = m.new_kv_caches(), [], 0
            for n in chunks:
                outs.append(m(ids[:, start:start + n], kv_caches=caches))
                start += n
        torch.testing.assert_close(torch.cat(outs, 1), full, atol=tol, rtol=0)
        assert all(c.seq_len == ids.shape[1] for c in caches)


def test_token_by_token_equals_full_forward():
    m = _model(2)
    ids = torch.randint(0, 64, (1, 40), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        full = m(ids)
        caches = m.new_kv_caches()
        steps = torch.cat([m(ids[:, t:t + 1], kv_caches=caches) for t in range(40)], 1)
    assert (steps - full).abs().max().item() < 1e-5


@pytest.mark.parametrize("num_kv_heads", [4, 2, 1])
def test_greedy_identical_with_and_without_cache(num_kv_heads):
    m = _model(num_kv_heads, init_std=1.0)  # large random weights: greedy output that varies with the context
    prompt = torch.randint(0, 64, (3, 6), generator=torch.Generator().manual_seed(2))
    cached = m.generate(prompt, 20)
    plain = m.generate(prompt, 20, use_cache=False)
    assert torch.equal(cached, plain)
    # a greedy loop written from the full forward pass
    ids = prompt
    with torch.no_grad():
        for _ in range(20):
            ids = torch.cat([ids, m(ids)[:, -1].argmax(-1, keepdim=True)], 1)
    assert torch.equal(cached, ids)
    assert torch.equal(cached[:, :6], prompt)
    # the outputs depend on the context (a test that could fail): not one token repeated
    assert len(set(cached[:, 6:].flatten().tolist())) > 8


def test_generate_shapes_and_lists():
    m = _model()
    out = m.generate([1, 2, 3], 4)
    assert out.shape == (7,) and out[:3].tolist() == [1, 2, 3]
    assert torch.equal(m.generate(torch.tensor([[1, 2, 3]]), 4)[0], out)
    assert m.generate([1, 2], 0).tolist() == [1, 2]
    m.train()
    m.generate([1], 2)
    assert m.training  # generate restores the mode


def test_cache_holds_kv_cache_bytes_with_kv_heads():
    for hkv in (4, 2, 1):
        m = _model(hkv)
        caches = m.new_kv_caches()
        with torch.no_grad():
            m(torch.randint(0, 64, (2, 9)), kv_caches=caches)
        assert all(c.keys.shape == (2, hkv, 9, 8) for c in caches)
        assert sum(c.nbytes() for c in caches) == kv_cache_bytes(2, hkv, 8, 9, 2, torch.float32)


def test_quantized_cache_plugs_in():
    m = _model(2)
    prompt = torch.randint(0, 64, (1, 8), generator=torch.Generator().manual_seed(3))
    ids = m.generate(prompt, 12)
    with torch.no_grad():
        full = m(ids)
        errs = {}
        for bits in (8, 4):
            caches = m.new_kv_caches(lambda: QuantizedKVCache(bits))
            logits = torch.cat([m(ids[:, :8], kv_caches=caches)] + [m(ids[:, t:t + 1], kv_caches=caches) for t in range(8, 20)], 1)
            errs[bits] = relative_error(logits, full)
            assert all(isinstance(c, QuantizedKVCache) and c.seq_len == 20 for c in caches)
    assert 0 < errs[8] < 0.02 and errs[8] < errs[4] < 0.2


def test_causal():
    m = _model()
    ids = torch.randint(0, 64, (1, 10))
    other = ids.clone()
    other[0, 7] = (other[0, 7] + 1) % 64
    with torch.no_grad():
        a, b = m(ids), m(other)
    torch.testing.assert_close(a[:, :7], b[:, :7])
    assert not torch.allclose(a[:, 7:], b[:, 7:])


def test_trains():
    torch.manual_seed(0)
    m = DecoderLM(8, d_model=16, num_heads=2, num_kv_heads=1, num_layers=1)
    seq = torch.arange(8).repeat(4)[None]  # 0 1 2 ... 7 0 1 2 ...: next token = current + 1 (mod 8)
    opt = torch.optim.Adam(m.parameters(), lr=1e-2)
    for _ in range(100):
        loss = torch.nn.functional.cross_entropy(m(seq[:, :-1]).flatten(0, 1), seq[0, 1:])
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert loss.item() < 0.1
    assert m.generate([3], 6).tolist() == [3, 4, 5, 6, 7, 0, 1]


def test_errors():
    m = _model()
    with pytest.raises(TypeError, match="integer token ids"):
        m(torch.zeros(1, 3))
    with pytest.raises(ValueError, match=r"holds ids \[64\] outside the vocabulary 0..63"):
        m(torch.tensor([[1, 64]]))
    with pytest.raises(ValueError, match=r"must be \(B, L\) token ids with L >= 1, got shape \(2,\)"):
        m(torch.tensor([1, 2]))
    with pytest.raises(ValueError, match="one cache per layer"):
        m(torch.tensor([[1]]), kv_caches=[KVCache()])
    with pytest.raises(ValueError, match="max_new_tokens must be an int >= 0, got -1"):
        m.generate([1], -1)
    with pytest.raises(ValueError, match=r"num_kv_heads must divide num_heads=4, got num_kv_heads=3; possible values: \[1, 2, 4\]"):
        DecoderLM(10, d_model=32, num_heads=4, num_kv_heads=3)
    with pytest.raises(ValueError, match="vocab_size must be an int >= 2, got 1"):
        DecoderLM(1)
    with pytest.raises(ValueError, match="init_std must be a number > 0"):
        DecoderLM(10, init_std=0)


def test_constructor_and_generate_refuse_bad_input_with_named_errors():
    with pytest.raises(TypeError, match="d_model must be an int >= 1, got float 16.0"):
        DecoderLM(10, d_model=16.0)
    with pytest.raises(TypeError, match="rope_base must be a number, got NoneType None"):
        DecoderLM(10, rope_base=None)  # RoPE is the model's only position information
    from attn_lib.models.lm import LMBlock

    with pytest.raises(ValueError, match="norm_eps must be a number >= 0.0, got -1e-06"):
        LMBlock(16, 2, 2, 32, 10000.0, norm_eps=-1e-6)  # the block alone refuses it, as DecoderLM does
    with pytest.raises(TypeError, match="norm_eps must be None or a number"):
        LMBlock(16, 2, 2, 32, 10000.0, norm_eps="small")
    m = _model()
    with pytest.raises(ValueError, match=r"prompt_ids must be prompts of one length .* got lengths \[1, 2\]"):
        m.generate([[1], [2, 3]], 2)
    with pytest.raises(TypeError, match="prompt_ids\\[0\\] must hold int token ids, got bool True"):
        m.generate([True, False], 2)
    with pytest.raises(TypeError, match="integer token ids"):
        m.generate(torch.tensor([[True, False]]), 2)
    with pytest.raises(TypeError, match="cache_factory must be a function"):
        m.generate([1, 2], 2, cache_factory=None)
    with pytest.raises(TypeError, match="cache_factory must make a new cache per layer .* got the cache instance"):
        m.generate([1, 2], 2, cache_factory=KVCache())
    with pytest.raises(TypeError, match="use_cache must be a bool .* got str 'no'"):
        m.generate([1, 2], 2, use_cache="no")
    with pytest.raises(TypeError, match="max_new_tokens must be an int >= 0, got float 2.5"):
        m.generate([1, 2], 2.5)


def test_generate_upper_bound_is_the_models_max_len():
    torch.manual_seed(0)
    m = DecoderLM(16, d_model=16, num_heads=2, num_layers=1, max_len=8).eval()
    assert m.generate([1, 2, 3], 5).shape == (8,)  # 3 + 5 = max_len: allowed
    assert m.generate([1, 2, 3], 0).tolist() == [1, 2, 3]  # 0 new tokens: the prompt itself
    with pytest.raises(ValueError, match=r"max_new_tokens must be <= max_len - prompt length = 8 - 3 = 5, got 6"):
        m.generate([1, 2, 3], 6)
    with pytest.raises(ValueError, match="L=9 tokens, more than the model's max_len=8"):
        m(torch.zeros(1, 9, dtype=torch.long))


def test_llama_layout_options():
    """ffn="swiglu", tie_embeddings=False, head_dim and attn_bias (the options DecoderLM.from_hf uses) build what
    they say; the defaults build what they did (GELU FFN, tied head, d_model / H per head, no biases)."""
    from attn_lib.models.blocks import FeedForward, SwiGLU

    torch.manual_seed(0)
    default = DecoderLM(20, d_model=16, num_heads=2, num_layers=1)
    assert isinstance(default.layers[0].ffn, FeedForward) and default.lm_head.weight is default.embed.weight
    assert default.head_dim == 8 and default.layers[0].attn.q_proj.bias is None
    llama = DecoderLM(20, d_model=16, num_heads=3, num_kv_heads=1, num_layers=1, d_ff=24, ffn="swiglu",
                      tie_embeddings=False, head_dim=6, attn_bias=True)  # 3 heads of 6 do not divide 16: head_dim=
    assert isinstance(llama.layers[0].ffn, SwiGLU) and llama.layers[0].ffn.gate_proj.weight.shape == (24, 16)
    assert llama.lm_head.weight is not llama.embed.weight and llama.head_dim == 6
    assert llama.layers[0].attn.q_proj.weight.shape == (18, 16) and llama.layers[0].attn.k_proj.weight.shape == (6, 16)
    assert all(b.abs().sum() == 0 for n, b in llama.named_parameters() if n.endswith("bias"))  # gpt2 init: zero biases
    assert sum("bias" in n for n, _ in llama.named_parameters()) == 4
    ids = torch.randint(0, 20, (2, 5))
    assert llama(ids).shape == (2, 5, 20) and llama.generate(ids, 3).shape == (2, 8)
    with torch.no_grad():
        llama.lm_head.weight.zero_()  # untied: the head alone, the embedding stays
    assert llama.embed.weight.abs().sum() > 0 and llama(ids).abs().max() == 0
    cases = [
        (dict(ffn="relu"), ValueError, "ffn must be one of 'gelu', 'swiglu', got 'relu'"),
        (dict(ffn=None), TypeError, "ffn must be one of 'gelu', 'swiglu', got NoneType"),
        (dict(tie_embeddings=1), TypeError, "tie_embeddings must be a bool .* got int 1"),
        (dict(attn_bias="no"), TypeError, "attn_bias must be a bool .* got str 'no'"),
        (dict(head_dim=8.0), TypeError, "head_dim must be an int >= 1, got float 8.0"),
        (dict(head_dim=0), ValueError, "head_dim must be an int >= 1, got 0"),
        (dict(head_dim=7), ValueError, "even"),
        (dict(num_heads=3), ValueError, "num_heads"),  # 3 does not divide 16 and no head_dim
    ]
    for kwargs, error, match in cases:
        with pytest.raises(error, match=match):
            DecoderLM(20, **{"d_model": 16, "num_heads": 2, **kwargs})


def test_forward_names_a_single_cache_passed_for_the_list():
    m = _model()
    with pytest.raises(TypeError, match=r"kv_caches must be None or a list of KV caches, one per layer .*got KVCache"):
        m(torch.tensor([[1, 2]]), KVCache())  # a cache, not a list of them (was "not subscriptable")
    from attn_lib.models import LMBlock  # the name notebook 07 uses is importable from the package

    assert LMBlock is type(m.layers[0])


@pytest.mark.parametrize("x, error, match", [
    (torch.randn(1, 3, 32, dtype=torch.float64), TypeError,  # was a UserWarning from rms_norm, then MHA's error
     r"x has dtype torch.float64 but the layer's weights are torch.float32"),
    (torch.ones(1, 3, 32, dtype=torch.long), TypeError, "x must have a floating dtype"),  # was NotImplementedError
    (torch.randn(1, 0, 32), ValueError, r"x must be \(B, L, d_model\) = \(B, L >= 1, 32\), got shape \(1, 0, 32\)"),
    (torch.randn(1, 3, 16), ValueError, r"got shape \(1, 3, 16\)"),
    (torch.randn(3, 32), ValueError, "x must have 3 dims"),
])
def test_lm_block_refuses_bad_input_by_name(x, error, match):
    """Issue 38 §4: an input dtype other than the weights', an integer input, L = 0 (amax's IndexError)."""
    block = _model().layers[0]
    with pytest.raises(error, match=match):
        block(x)
    assert block(torch.randn(0, 3, 32)).shape == (0, 3, 32)  # B = 0: an empty batch, no error


def test_generate_refuses_nan_logits_instead_of_picking_a_token():
    """Issue 38 §3: greedy decoding picked the NaN token (torch.argmax treats NaN as the largest)."""
    m = _model()
    with torch.no_grad():
        m.lm_head.weight[5] = float("nan")  # tied: the embedding row of token 5 too; any logit row has a NaN
    with pytest.raises(ValueError, match=r"logits contains NaN .*expected finite values or -inf"):
        m.generate([[1, 2]], 2, use_cache=False)


def test_one_cache_object_for_two_layers_is_refused():
    """Issue 38 §3: kv_caches=[c, c] mixed both layers' keys in one cache: logits off by 0.03, silently."""
    m = _model()
    shared = KVCache()
    with pytest.raises(ValueError, match="kv_caches holds the same cache object for layers 0 and 1"):
        m(torch.tensor([[1, 2, 3]]), [shared, shared])
    with pytest.raises(ValueError, match="cache_factory's caches holds the same cache object for layers 0 and 1"):
        m.generate([[1, 2]], 3, cache_factory=lambda: shared)
    with pytest.raises(ValueError, match="same cache object"):
        m.generate([[1, 2]], 3, kv_caches=[shared, shared])
