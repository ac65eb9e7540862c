"""Small Transformers built from attn_lib's own attention (notebooks 07, 08 and 10).

- ``attn_lib.models.blocks``   encoder block, decoder block, position-wise feed-forward
- ``attn_lib.models.seq2seq``  encoder-decoder, encoder-only (BERT-like) and decoder-only (GPT-like) models
- ``attn_lib.models.lm``       a decoder-only language model with RoPE, grouped-query attention and a KV cache
- ``attn_lib.models.decoding`` the one greedy decoding loop and its max_new_tokens rule, shared by all three
"""

import importlib

_LAZY = {
    "EncoderBlock": "attn_lib.models.blocks",
    "DecoderBlock": "attn_lib.models.blocks",
    "FeedForward": "attn_lib.models.blocks",
    "Seq2SeqTransformer": "attn_lib.models.seq2seq",
    "EncoderOnly": "attn_lib.models.seq2seq",
    "DecoderOnly": "attn_lib.models.seq2seq",
    "DecoderLM": "attn_lib.models.lm",
    "AttnLibLlama": "attn_lib.models.llama",
}


def __getattr__(name):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'attn_lib.models' has no attribute {name!r}")
