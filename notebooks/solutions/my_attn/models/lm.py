"""The decoder LM, solved (notebook 10): a pre-norm block and the forward pass, on attn_lib's (or my) modules."""

from __future__ import annotations

import attn_lib.models.lm as _lib_lm


class LMBlock(_lib_lm.LMBlock):
    """x + attention(RMSNorm(x)), then + FFN(RMSNorm(x))."""

    def forward(self, x, kv_cache=None, *, attn_mask=None, backend="naive", tile_size=8, need_weights=False):
        a, w = self.attn(self.norm1(x), is_causal=True, kv_cache=kv_cache, attn_mask=attn_mask, backend=backend,
                         tile_size=tile_size, need_weights=need_weights)                # (B, L, D), (B, H, L, S)
        x = x + a
        x = x + self.ffn(self.norm2(x))
        return (x, w) if need_weights else x


class DecoderLM(_lib_lm.DecoderLM):
    """Embedding, the layers (each with its own cache), the final norm and the head."""

    def forward(self, input_ids, kv_caches=None, *, attention="naive"):
        input_ids = self._given_checks(input_ids, kv_caches, attention)
        past = 0 if kv_caches is None else kv_caches[0].seq_len
        mask = self._mask(input_ids.shape[1], past, input_ids.device)
        x = self.embed(input_ids)                                                      # (B, L, D)
        for i, layer in enumerate(self.layers):
            x = layer(x, None if kv_caches is None else kv_caches[i], attn_mask=mask, backend=attention,
                      tile_size=self.tile_size)
        return self.lm_head(self.norm(x))                                              # (B, L, V)

    def _given_checks(self, input_ids, kv_caches, attention):
        _lib_lm.check_choice("attention", attention, _lib_lm.ATTENTIONS)
        input_ids = _lib_lm.check_token_ids("input_ids", input_ids, vocab_size=self.vocab_size, max_len=self.max_len)
        if kv_caches is not None:
            self._check_cache_list(kv_caches, none_ok=True)
            if kv_caches[0].seq_len + input_ids.shape[1] > self.max_len:
                raise ValueError(f"the caches hold {kv_caches[0].seq_len} tokens; {input_ids.shape[1]} more exceed "
                                 f"the model's max_len={self.max_len}")
        return input_ids
