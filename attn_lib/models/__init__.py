"""Small Transformers built from attn_lib's own attention (notebooks 07, 08 and 10).

- ``attn_lib.models.blocks``   encoder block, decoder block, position-wise feed-forward (GELU/ReLU, and SwiGLU)
- ``attn_lib.models.seq2seq``  encoder-decoder and encoder-only (BERT-like) models of notebook 07's comparison
  (the 2017 blocks)
- ``attn_lib.models.lm``       attn_lib's one decoder-only language model, ``DecoderLM`` (RoPE, grouped-query
  attention, a KV cache, tiled attention, the self-only ablation): the GPT-like member of notebook 07's comparison,
  ``attn_lib.course.capstone.TinyDecoder`` configures it, and ``DecoderLM.from_hf`` copies a HuggingFace Llama into it
  (the proof against ``generate``, notebook 08)
- ``attn_lib.models.decoding`` the one decoding loop (greedy, temperature, top-k) and its max_new_tokens rule,
  shared by all of them
"""

import importlib

_LAZY = {
    "EncoderBlock": "attn_lib.models.blocks",
    "DecoderBlock": "attn_lib.models.blocks",
    "FeedForward": "attn_lib.models.blocks",
    "SwiGLU": "attn_lib.models.blocks",
    "Seq2SeqTransformer": "attn_lib.models.seq2seq",
    "EncoderOnly": "attn_lib.models.seq2seq",
    "DecoderLM": "attn_lib.models.lm",
    "LMBlock": "attn_lib.models.lm",
}


def __getattr__(name):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'attn_lib.models' has no attribute {name!r}")
