"""A HuggingFace Llama whose attention layers are attn_lib's :class:`~attn_lib.mha.MultiHeadAttention`.

Everything but the attention is HuggingFace's own module, reused as it is: the token embedding,
each layer's RMSNorms and SwiGLU MLP, the final norm and the LM head. Each ``self_attn`` is replaced
by ``MultiHeadAttention.from_hf(layer.self_attn)`` (grouped-query heads, the config's head_dim,
RoPE with its rope_theta) and decodes with one :class:`~attn_lib.kv_cache.KVCache` per layer. So when
the outputs equal HuggingFace's, the from-scratch attention and KV cache are what differs and
what is proven: tests/test_llama.py checks greedy decoding against ``model.generate(use_cache=True)``
token for token, step by step logits, and the cached keys and values (notebook 08 shows it), and
temperature/top-k sampling against ``generate(do_sample=True)``. Decoding runs attn_lib's one loop,
:func:`attn_lib.models.decoding.sample_loop`, the same as :class:`attn_lib.models.lm.DecoderLM`'s.

The decoder layer (Touvron et al. 2023, "LLaMA", §2.2: pre-normalisation, SwiGLU, RoPE)::

    h = x + attn(input_layernorm(x))                # attn_lib's MultiHeadAttention, is_causal=True
    y = h + mlp(post_attention_layernorm(h))        # HuggingFace's LlamaMLP
"""

from __future__ import annotations

import torch
from torch import nn

from attn_lib._checks import check_bool, check_int, check_tensor
from attn_lib.kv_cache import KVCache
from attn_lib.mha import MultiHeadAttention
from attn_lib.models.decoding import check_sampling, sample_loop

__all__ = ["AttnLibLlama"]


class AttnLibLlama(nn.Module):
    """A copy of a HuggingFace ``LlamaForCausalLM`` (or a same-layout model) with attn_lib attention.

    Args:
        hf_model: a ``LlamaForCausalLM``; its weights are shared (norms, MLP, embedding, head) or
            copied (attention). Only the default RoPE is supported (see ``MultiHeadAttention.from_hf``).

    Shapes: ``forward(input_ids (B, L))`` -> logits (B, L, V), V = the config's vocab_size. Dtypes: int64 ids in;
    logits in the HF model's dtype (float32, or float64 after ``.double()``).

    Raises:
        TypeError: ``hf_model`` has no ``model`` with ``layers`` or no ``lm_head``; errors of
            ``MultiHeadAttention.from_hf`` (TypeError / ValueError) for an attention block it cannot copy.

    Source: Touvron et al. 2023 (LLaMA), §2.2; every module but the attention is transformers' LlamaForCausalLM's
    own, and tests/test_llama.py checks the logits and ``generate`` against it.
    """

    def __init__(self, hf_model: nn.Module) -> None:
        super().__init__()
        inner = getattr(hf_model, "model", None)
        if inner is None or not hasattr(inner, "layers") or not hasattr(hf_model, "lm_head"):
            raise TypeError(f"hf_model must be a HuggingFace LlamaForCausalLM (model.layers, lm_head), "
                            f"got {type(hf_model).__name__}")
        self.embed_tokens = inner.embed_tokens
        self.attn = nn.ModuleList(MultiHeadAttention.from_hf(layer.self_attn) for layer in inner.layers)
        self.input_norms = nn.ModuleList(layer.input_layernorm for layer in inner.layers)
        self.post_norms = nn.ModuleList(layer.post_attention_layernorm for layer in inner.layers)
        self.mlps = nn.ModuleList(layer.mlp for layer in inner.layers)
        self.norm = inner.norm
        self.lm_head = hf_model.lm_head
        self.train(hf_model.training)

    def new_caches(self) -> list[KVCache]:
        """One empty :class:`KVCache` per layer."""
        return [KVCache() for _ in self.attn]

    def forward(self, input_ids: torch.Tensor, caches: list[KVCache] | None = None) -> torch.Tensor:
        """Logits of the next token at every position.

        Args:
            input_ids: (B, L) int64 token ids; with ``caches`` they continue the cached tokens.
            caches: from :meth:`new_caches`, updated in place (None: no cache, positions 0..L-1).

        Returns:
            (B, L, vocab_size) logits, in the model's dtype.

        Raises:
            TypeError: input_ids not a tensor, or of a floating dtype; caches without a length.
            ValueError: input_ids not 2-D; caches not one per layer.
            Ids outside the vocabulary are not checked here: the embedding raises IndexError.
        """
        check_tensor("input_ids", input_ids, ndim=2)
        if input_ids.is_floating_point():
            raise TypeError(f"input_ids must hold integer token ids, got dtype {input_ids.dtype}")
        if caches is not None and len(caches) != len(self.attn):
            raise ValueError(f"caches must hold one KVCache per layer ({len(self.attn)}), got {len(caches)}")
        x = self.embed_tokens(input_ids)  # (B, L, d_model)
        for i, attn in enumerate(self.attn):
            h, _ = attn(self.input_norms[i](x), is_causal=True,
                        kv_cache=None if caches is None else caches[i])  # (B, L, d_model)
            x = x + h
            x = x + self.mlps[i](self.post_norms[i](x))
        return self.lm_head(self.norm(x))  # (B, L, vocab_size)

    @torch.no_grad()
    def generate(self, input_ids: torch.Tensor, max_new_tokens: int, *, use_cache: bool = True,
                 temperature: float = 0.0, top_k: int | None = None, generator: torch.Generator | None = None):
        """Decode with :func:`attn_lib.models.decoding.sample_loop`: greedy at temperature 0, else sampled.

        Sampling is HF's ``generate(do_sample=True, temperature=T, top_k=k)``: the temperature warper, then
        top-k, then one ``torch.multinomial`` draw per row (torch's global generator when ``generator`` is None).

        Args:
            input_ids: (B, L) int64 prompt ids. max_new_tokens: an int >= 1.
            use_cache: False recomputes the whole sequence at every step.
            temperature: a number >= 0 (0 = greedy). top_k: None or an int >= 1. generator: a torch.Generator.

        Returns:
            (ids (B, L + max_new_tokens) int64, step_logits: a list of (B, vocab_size) float logits before
            warping, caches: the list of per-layer KV caches, or None without ``use_cache``).

        Raises:
            TypeError: max_new_tokens or top_k not an int, use_cache not a bool, temperature not a number,
                generator not a torch.Generator; input_ids of a floating dtype (from :meth:`forward`).
            ValueError: max_new_tokens < 1, temperature < 0, top_k < 1; input_ids not 2-D (from :meth:`forward`).
            input_ids that is not a tensor fails with AttributeError (``input_ids.shape``), ids outside the
            vocabulary with IndexError (the embedding): neither is checked here.
        """
        max_new_tokens = check_int("max_new_tokens", max_new_tokens, minimum=1)
        use_cache = check_bool("use_cache", use_cache)
        check_sampling(temperature, top_k, generator)
        caches = self.new_caches() if use_cache else None
        step_logits = []

        def next_logits(new: torch.Tensor) -> torch.Tensor:
            if use_cache:  # the prompt at the first step, then only the newest token
                logits = self(input_ids if new.shape[1] == 0 else new[:, -1:], caches)[:, -1]
            else:
                logits = self(torch.cat([input_ids, new], dim=1))[:, -1]  # (B, vocab_size)
            step_logits.append(logits)
            return logits

        new = sample_loop(next_logits, input_ids.shape[0], max_new_tokens, temperature=temperature, top_k=top_k,
                          generator=generator, device=input_ids.device)
        return torch.cat([input_ids, new], dim=1), step_logits, caches
