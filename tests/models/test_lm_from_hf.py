"""DecoderLM.from_hf: a HuggingFace Llama copied into attn_lib's own decoder decodes exactly like
``model.generate(use_cache=True)``: tokens, every step's logits and the cached keys and values; sampling like
``generate(do_sample=True)``; its SwiGLU equals transformers' LlamaMLP.

Tiny random-initialised models built from transformers configs (no download), in float64. HuggingFace's RMSNorm
and RoPE tables work in float32 even in a float64 model, so whole-model logits agree to HF_ROPE_TOL (float32's
precision); the SwiGLU alone agrees to float64's.
"""

from __future__ import annotations

import pytest
import torch

from attn_lib.kv_cache import KVCache, QuantizedKVCache
from attn_lib.models.blocks import SwiGLU
from attn_lib.models.lm import DecoderLM
from references import HF_ROPE_TOL, tiny_llama


@pytest.mark.parametrize("head_dim", [None, 12])
def test_decoder_lm_from_hf_decodes_like_hf_generate(head_dim):
    """Greedy decoding of DecoderLM.from_hf (attn_lib attention + KVCache + SwiGLU + RMSNorm) == HF
    generate(use_cache=True): the tokens, the logits of every step and the cached keys/values of every layer."""
    model = tiny_llama(head_dim)
    ours = DecoderLM.from_hf(model)
    assert ours.head_dim == (12 if head_dim else 8) and not ours.tie_embeddings and ours.ffn_kind == "swiglu"
    prompt = torch.randint(0, 61, (2, 5))
    n = 8
    with torch.no_grad():
        hf = model.generate(prompt, max_new_tokens=n, do_sample=False, use_cache=True, pad_token_id=0,
                            return_dict_in_generate=True, output_logits=True)
    caches = ours.new_kv_caches()
    ids, step_logits = ours.generate(prompt, n, return_logits=True, kv_caches=caches)
    assert torch.equal(ids, hf.sequences) and ids.shape == (2, 5 + n)
    assert step_logits.shape == (2, n, 61) and step_logits.dtype == torch.float64
    for step, b in enumerate(hf.logits):
        assert b.dtype == torch.float32  # generate hands back its logits as float32, even for a float64 model
        torch.testing.assert_close(step_logits[:, step].to(b.dtype), b, **HF_ROPE_TOL, msg=f"step {step}")
    hf_cache = getattr(hf, "cache", None) or hf.past_key_values
    for i, cache in enumerate(caches):
        assert cache.seq_len == 5 + n - 1
        torch.testing.assert_close(cache.keys, hf_cache.layers[i].keys, **HF_ROPE_TOL)  # after RoPE
        torch.testing.assert_close(cache.values, hf_cache.layers[i].values, **HF_ROPE_TOL)  # layer 1: via layer 0
    # the cache changes nothing: recomputing the whole sequence each step gives the same tokens
    assert torch.equal(ours.generate(prompt, n, use_cache=False), ids)
    assert torch.equal(ours.generate(prompt, 0), prompt)  # 0 new tokens: the prompt itself (one rule for generate)


@pytest.mark.parametrize("head_dim, bias", [(None, False), (12, True)])
def test_from_hf_logits_equal_hf_forward_and_copy_every_weight(head_dim, bias):
    """Every position's logits equal the HF model's forward; the copy shares no tensor with it; the global
    random generator is left as it was; dtype and training mode follow the HF model."""
    model = tiny_llama(head_dim, bias=bias)
    state = torch.random.get_rng_state()
    ours = DecoderLM.from_hf(model)
    assert torch.equal(torch.random.get_rng_state(), state)
    assert ours.embed.weight.dtype == torch.float64 and not ours.training
    assert all(b.attn.q_proj.bias is not None for b in ours.layers) == bias
    ids = torch.randint(0, 61, (3, 11), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        torch.testing.assert_close(ours(ids), model(ids).logits, **HF_ROPE_TOL)
        ours.lm_head.weight.zero_()  # a copy, not a view: HF's head is untouched
    assert model.lm_head.weight.abs().sum() > 0
    assert DecoderLM.from_hf(model.train()).training


def test_from_hf_ties_the_head_when_the_config_does():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=40, hidden_size=16, intermediate_size=24, num_hidden_layers=1, num_attention_heads=2,
                      num_key_value_heads=1, tie_word_embeddings=True, rms_norm_eps=1e-5, rope_theta=1000.0,
                      max_position_embeddings=32, bos_token_id=None, eos_token_id=None, pad_token_id=None)
    model = LlamaForCausalLM(cfg).double().eval()
    assert model.lm_head.weight is model.model.embed_tokens.weight
    ours = DecoderLM.from_hf(model)
    assert ours.lm_head.weight is ours.embed.weight and ours.max_len == 32
    assert all(n.eps == 1e-5 for n in (ours.norm, ours.layers[0].norm1, ours.layers[0].norm2))
    ids = torch.randint(0, 40, (2, 7))
    with torch.no_grad():
        torch.testing.assert_close(ours(ids), model(ids).logits, **HF_ROPE_TOL)


def test_swiglu_equals_llama_mlp():
    """attn_lib.models.blocks.SwiGLU == transformers' LlamaMLP (silu, no bias) in float64, after copying weights."""
    from transformers.models.llama.modeling_llama import LlamaMLP

    model = tiny_llama()
    mlp = model.model.layers[0].mlp
    ours = SwiGLU(32, 48).double()
    ours.load_state_dict({k: v for k, v in mlp.state_dict().items()})
    x = torch.randn(2, 7, 32, dtype=torch.float64)
    assert isinstance(mlp, LlamaMLP)
    torch.testing.assert_close(ours(x), mlp(x), rtol=0, atol=1e-14)
    ours.up_proj.weight.data.mul_(1.01)  # the comparison can fail
    assert not torch.allclose(ours(x), mlp(x), rtol=0, atol=1e-6)
    with pytest.raises(TypeError, match="d_ff must be an int >= 1, got float"):
        SwiGLU(32, 48.0)
    with pytest.raises(ValueError, match="d_model must be an int >= 1, got 0"):
        SwiGLU(0, 48)


@pytest.mark.parametrize("change, error, match", [
    (dict(hidden_act="gelu"), ValueError, r"config.hidden_act='silu'; got 'gelu'"),
    (dict(mlp_bias=True), ValueError, r"config.mlp_bias=False; got True"),
    (dict(attention_dropout=0.1), ValueError, r"config.attention_dropout=0.0; got 0.1"),
    (dict(rope_scaling={"rope_type": "linear", "factor": 2.0}), ValueError, "default RoPE"),
])
def test_from_hf_refuses_what_it_cannot_copy(change, error, match):
    from transformers import LlamaConfig, LlamaForCausalLM

    kw = dict(vocab_size=40, hidden_size=16, intermediate_size=24, num_hidden_layers=1, num_attention_heads=2,
              bos_token_id=None, eos_token_id=None, pad_token_id=None)
    model = LlamaForCausalLM(LlamaConfig(**kw, **change))
    with pytest.raises(error, match=match):
        DecoderLM.from_hf(model)


def test_from_hf_refuses_a_model_that_is_not_a_llama():
    from transformers import GPT2Config, GPT2LMHeadModel

    for bad in (torch.nn.Linear(2, 2), GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=30))):
        with pytest.raises(TypeError, match=f"hf_model must be a HuggingFace LlamaForCausalLM.*got {type(bad).__name__}"):
            DecoderLM.from_hf(bad)


def test_generate_fills_the_kv_caches_it_is_given_and_checks_them():
    """generate(kv_caches=...) decodes with the caller's caches (any KVCacheProtocol) and leaves them filled; it
    gives the same tokens as its own caches; wrong caches are refused with named errors."""
    torch.manual_seed(0)
    lm = DecoderLM(30, d_model=16, num_heads=2, num_layers=2, init_std=0.3).eval()
    prompt = torch.randint(0, 30, (2, 4))
    caches = lm.new_kv_caches()
    ids = lm.generate(prompt, 6, kv_caches=caches)
    assert torch.equal(ids, lm.generate(prompt, 6))
    assert [c.seq_len for c in caches] == [4 + 6 - 1] * 2
    with torch.no_grad():  # the cached keys are those one full pass over the same tokens stores (to rounding)
        fresh = lm.new_kv_caches()
        lm(ids[:, :-1], fresh)
    for a, b in zip(caches, fresh):
        torch.testing.assert_close(a.keys, b.keys, rtol=0, atol=1e-5)
        torch.testing.assert_close(a.values, b.values, rtol=0, atol=1e-5)
    quantized = [QuantizedKVCache(8) for _ in range(2)]
    lm.generate(prompt, 3, kv_caches=quantized)
    assert [c.seq_len for c in quantized] == [6, 6]
    cases = [
        (dict(kv_caches=caches), ValueError, r"kv_caches must be empty .* they hold \[9, 9\] positions"),
        (dict(kv_caches=[KVCache()]), ValueError, r"one cache per layer \(2\), got 1"),
        (dict(kv_caches=[KVCache(), KVCache()], use_cache=False), ValueError, "kv_caches needs use_cache=True"),
        (dict(kv_caches=KVCache()), TypeError, "kv_caches must be a list of KV caches, one per layer"),
        (dict(kv_caches=[KVCache(), "cache"]), TypeError, r"kv_caches must be a list of KV caches.*\['KVCache', 'str'\]"),
    ]
    for kwargs, error, match in cases:
        with pytest.raises(error, match=match):
            lm.generate(prompt, 2, **kwargs)


@pytest.mark.parametrize("temperature, top_k", [(0.7, 5), (1.0, 61), (1.5, 2)])
def test_decoder_lm_from_hf_samples_like_hf_generate(temperature, top_k):
    """The one sampling loop == HF generate(do_sample=True): the same warpers in the same order and one
    torch.multinomial draw per row from torch's global generator, so the same seed gives the same tokens."""
    model = tiny_llama().float()
    ours = DecoderLM.from_hf(model)
    prompt = torch.randint(0, 61, (3, 4), generator=torch.Generator().manual_seed(1))
    n = 10
    torch.manual_seed(123)
    with torch.no_grad():
        hf = model.generate(prompt, max_new_tokens=n, do_sample=True, temperature=temperature, top_k=top_k,
                            top_p=1.0, use_cache=True, pad_token_id=0)
    torch.manual_seed(123)
    ids = ours.generate(prompt, n, temperature=temperature, top_k=top_k)
    assert torch.equal(ids, hf)
    torch.manual_seed(124)
    other = ours.generate(prompt, n, temperature=temperature, top_k=top_k)
    assert not torch.equal(other, ids)  # another seed, other tokens: the comparison can fail
