"""Helpers several test files share: tiny random HuggingFace models (no download) and their tolerances."""

from __future__ import annotations

import torch

#: HF's LlamaRotaryEmbedding computes cos/sin in float32 even in a float64 model (autocast off, then
#: cast), so float64 results agree to float32's precision of the angles (~1e-9 abs measured), not 1e-12.
HF_ROPE_TOL = {"rtol": 1e-6, "atol": 1e-7}


def capture(model, modules):
    """Run hooks that record (input hidden_states, output) of each module."""
    seen = {}

    def hook(i):
        def f(mod, args, kwargs, out):
            x = args[0] if args else kwargs["hidden_states"]
            seen[i] = (x.detach(), (out[0] if isinstance(out, tuple) else out).detach())
        return f

    handles = [m.register_forward_hook(hook(i), with_kwargs=True) for i, m in enumerate(modules)]
    return seen, handles


def tiny_llama(head_dim=None, num_kv_heads=2, theta=500.0, bias=False):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=61, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=num_kv_heads, head_dim=head_dim,
                      rope_theta=theta, attention_bias=bias, bos_token_id=None, eos_token_id=None,
                      pad_token_id=None, attn_implementation="eager")
    return LlamaForCausalLM(cfg).double().eval()
