"""Your decoder-only language model's pieces (mirrors attn_lib.models.lm; notebook 10, section "2 · The model").
B batch, L new tokens, S = cached + L keys, D = d_model, V = vocab_size.

Given (inherited from attn_lib's classes): ``__init__`` with the same arguments. An LMBlock has ``norm1``, ``attn`` (a
MultiHeadAttention with grouped-query heads and RoPE: yours once it passes its check), ``norm2`` (RMSNorms) and
``ffn``. A DecoderLM has ``embed`` (nn.Embedding), ``layers`` (LMBlocks: yours once LMBlock passes), ``norm``
(RMSNorm), ``lm_head`` (nn.Linear D -> V, tied to ``embed`` by default), ``_mask(L, past, device)`` (None, or the
diagonal mask of ``attend="self"``), ``tile_size``, ``generate`` (which calls your forward).
"""

from __future__ import annotations

import attn_lib.models.lm as _lib_lm
from my_attn._todo import todo

_SECTION = "2 · The model"


class LMBlock(_lib_lm.LMBlock):
    """Your pre-norm decoder layer (LLaMA's layout; Touvron et al. 2023, §2.2).

    ``forward(x (B, L, D), kv_cache=None, *, attn_mask=None, backend="naive", tile_size=8, need_weights=False)``:

        a, w = attn(norm1(x), is_causal=True, kv_cache=kv_cache, attn_mask=attn_mask, backend=backend,
                    tile_size=tile_size, need_weights=need_weights)
        x = x + a                       # tokens exchange information
        x = x + ffn(norm2(x))           # each token on its own

    Returns x (B, L, D), or (x, w) with ``need_weights`` (w: (B, H, L, S)).
    """

    def forward(self, x, kv_cache=None, *, attn_mask=None, backend="naive", tile_size=8, need_weights=False):
        todo("LMBlock", "10", _SECTION)


class DecoderLM(_lib_lm.DecoderLM):
    """Your decoder LM's forward pass, assembled from its modules (GPT-2 / LLaMA; Radford et al. 2019).

    ``forward(input_ids (B, L) int64, kv_caches=None, *, attention="naive")`` returns the logits (B, L, V):

        past = kv_caches[0].seq_len if kv_caches is not None else 0
        mask = self._mask(L, past, device)                          # None (causal) or attend="self"'s diagonal
        x = embed(input_ids)                                        # (B, L, D): no position embedding (RoPE)
        for i, layer in enumerate(layers):
            x = layer(x, kv_caches[i] or None, attn_mask=mask, backend=attention, tile_size=self.tile_size)
        logits = lm_head(norm(x))                                   # (B, L, V)

    The input checks (ids within the vocabulary, the cache list) are given.
    """

    def forward(self, input_ids, kv_caches=None, *, attention="naive"):
        input_ids = self._given_checks(input_ids, kv_caches, attention)
        todo("DecoderLM", "10", _SECTION)

    def _given_checks(self, input_ids, kv_caches, attention):
        _lib_lm.check_choice("attention", attention, _lib_lm.ATTENTIONS)
        input_ids = _lib_lm.check_token_ids("input_ids", input_ids, vocab_size=self.vocab_size, max_len=self.max_len)
        if kv_caches is not None:
            self._check_cache_list(kv_caches, none_ok=True)
            if kv_caches[0].seq_len + input_ids.shape[1] > self.max_len:
                raise ValueError(f"the caches hold {kv_caches[0].seq_len} tokens; {input_ids.shape[1]} more exceed "
                                 f"the model's max_len={self.max_len}")
        return input_ids
