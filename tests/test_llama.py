"""attn_lib.models.llama: a HuggingFace Llama with attn_lib's attention and KV cache decodes exactly like
``model.generate(use_cache=True)``: tokens, every step's logits and the cached keys and values.

Tiny random-initialised models built from transformers configs (no download), in float64.
"""

from __future__ import annotations

import pytest
import torch

from attn_lib.models.llama import AttnLibLlama
from references import HF_ROPE_TOL, tiny_llama


@pytest.mark.parametrize("head_dim", [None, 12])
def test_attn_lib_llama_decodes_like_hf_generate(head_dim):
    """Greedy decoding with attn_lib attention + KVCache == HF generate(use_cache=True):
    the tokens, the logits of every step and the cached keys/values of every layer."""
    model = tiny_llama(head_dim)
    ours = AttnLibLlama(model)
    prompt = torch.randint(0, 61, (2, 5))
    n = 8
    with torch.no_grad():
        hf = model.generate(prompt, max_new_tokens=n, do_sample=False, use_cache=True, pad_token_id=0,
                            return_dict_in_generate=True, output_logits=True)
    ids, step_logits, caches = ours.generate(prompt, n)
    assert torch.equal(ids, hf.sequences) and ids.shape == (2, 5 + n)
    for step, (a, b) in enumerate(zip(step_logits, hf.logits)):
        assert b.dtype == torch.float32  # generate hands back its logits as float32, even for a float64 model
        torch.testing.assert_close(a.to(b.dtype), b, **HF_ROPE_TOL, msg=f"step {step}")
    hf_cache = getattr(hf, "cache", None) or hf.past_key_values
    for i, cache in enumerate(caches):
        assert cache.seq_len == 5 + n - 1
        torch.testing.assert_close(cache.keys, hf_cache.layers[i].keys, **HF_ROPE_TOL)  # after RoPE
        torch.testing.assert_close(cache.values, hf_cache.layers[i].values, **HF_ROPE_TOL)  # layer 1: via layer 0
    # the cache changes nothing: recomputing the whole sequence each step gives the same tokens
    again, _, _ = ours.generate(prompt, n, use_cache=False)
    assert torch.equal(again, ids)
    with pytest.raises(ValueError, match="max_new_tokens"):
        ours.generate(prompt, 0)


@pytest.mark.parametrize("temperature, top_k", [(0.7, 5), (1.0, 61), (1.5, 2)])
def test_attn_lib_llama_samples_like_hf_generate(temperature, top_k):
    """The one sampling loop == HF generate(do_sample=True): the same warpers in the same order and one
    torch.multinomial draw per row from torch's global generator, so the same seed gives the same tokens."""
    model = tiny_llama().float()
    ours = AttnLibLlama(model)
    prompt = torch.randint(0, 61, (3, 4), generator=torch.Generator().manual_seed(1))
    n = 10
    torch.manual_seed(123)
    with torch.no_grad():
        hf = model.generate(prompt, max_new_tokens=n, do_sample=True, temperature=temperature, top_k=top_k,
                            top_p=1.0, use_cache=True, pad_token_id=0)
    torch.manual_seed(123)
    ids, _, _ = ours.generate(prompt, n, temperature=temperature, top_k=top_k)
    assert torch.equal(ids, hf)
    torch.manual_seed(124)
    other, _, _ = ours.generate(prompt, n, temperature=temperature, top_k=top_k)
    assert not torch.equal(other, ids)  # another seed, other tokens: the comparison can fail
