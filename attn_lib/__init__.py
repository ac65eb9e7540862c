"""attn_lib: the attention mechanism from scratch, proven equal to the libraries people use.

Every notebook of the course starts with::

    import attn_lib
    attn_lib.setup()          # seeds, offline mode, plot defaults

Modules (one idea each):

- ``attn_lib.tokenization``   byte-pair encoding from scratch (notebook 01)
- ``attn_lib.positional``     sinusoidal, learned, RoPE and ALiBi positions (notebook 02)
- ``attn_lib.attention``      scaled dot-product attention (notebook 03)
- ``attn_lib.masks``          causal and padding masks (notebook 04)
- ``attn_lib.mha``            multi-head attention, with grouped-query heads and RoPE (notebook 05)
- ``attn_lib.kv_cache``       the KV cache (plain and quantized), its size and the work it saves (05, 08, 10)
- ``attn_lib.quantization``   absmax int8/int4 quantization of keys and values, relative_error (08)
- ``attn_lib.gqa``            MQA/GQA head grouping, grouped_query_attention, MHA -> GQA conversion (08)
- ``attn_lib.hf``             GQA and KV transforms inside a HuggingFace BERT (MiniLM) (08)
- ``attn_lib.models``         small encoder-decoder, encoder-only and decoder-only Transformers; the decoder-only
                               DecoderLM also copies a HuggingFace Llama (DecoderLM.from_hf) (07, 08, 10)
- ``attn_lib.train``          training loops and the date task's translate / span_hit_rate (07)
- ``attn_lib.tiled``          FlashAttention-style tiled attention in PyTorch (notebook 09)
- ``attn_lib.flash``          the same algorithm as Triton kernels, forward and backward: launch and API (notebook 09)
- ``attn_lib.flash_kernels``  the four Triton kernels themselves (notebook 09 reads them)
- ``attn_lib.heads``          measuring what the heads of a real model do: offsets, shuffles, head gates (06)
- ``attn_lib.capstone``       a tiny decoder assembled from the course's pieces (10)
- ``attn_lib.mla``            DeepSeek's multi-head latent attention, its latent cache and absorbed decode (11)
- ``attn_lib.windows``        sliding-window masks, the ring-buffer KV cache, StreamingLLM sinks, local:global (11)
- ``attn_lib.variants``       QK-norm, logit soft-capping, learned sinks, KV sharing: Qwen3/Gemma/gpt-oss layers (11)
- ``attn_lib.sparse``         DeepSeek-V3.2's sparse attention: the lightning indexer, top-k, its FLOPs and bytes (11)
- ``attn_lib.streaming``      StreamingLLM measured on a tiny trained decoder; the sinks + ring cache (11)
- ``attn_lib.kv_table``       KV-cache bytes of published models (Llama 3.1 ... DeepSeek-V3, gpt-oss) (11)
- ``attn_lib.hf_equal``       float64 equality harness against transformers' attention modules (11)
- ``attn_lib.linear``         linear attention (parallel, recurrent, chunked), Mamba-2's SSD, FFT long convolutions (12)
- ``attn_lib.deltanet``       the gated delta rule and a Qwen3-Next Gated DeltaNet layer, recomputed (12)
- ``attn_lib.paged``        a paged KV cache: blocks, block tables, prefix sharing with copy-on-write (14)
- ``attn_lib.serving``      packed (document-masked) batches, chunked prefill, split-KV decoding (14)
- ``attn_lib.speculative``  speculative decoding: the verify and tree masks, the acceptance rule (14)
- ``attn_lib.ring``         ring attention (zig-zag) and Ulysses across torch.distributed gloo processes (14)
- ``attn_lib.recall``         the associative-recall task and its softmax / linear / DeltaNet / hybrid models (12)
- ``attn_lib.viz``            heatmaps, widgets and bertviz wrappers; PALETTE and the colour maps
- ``attn_lib.exercises``      ``check_*`` functions for the exercises at the end of each notebook

The most used names are importable from the package itself (``attn_lib.scaled_dot_product_attention``);
they are loaded on first use so that ``import attn_lib`` stays fast.
"""

from __future__ import annotations

import importlib

from attn_lib._setup import DATA_DIR, REPO_ROOT, setup
from attn_lib.pretrained import load_pretrained

__version__ = "0.1.0"

# name -> module that defines it; imported lazily on first attribute access.
_LAZY = {
    "scaled_dot_product_attention": "attn_lib.attention",
    "causal_mask": "attn_lib.masks",
    "padding_mask": "attn_lib.masks",
    "MultiHeadAttention": "attn_lib.mha",
    "KVCache": "attn_lib.kv_cache",
    "tiled_attention": "attn_lib.tiled",
    "flash_attention": "attn_lib.flash",
    "plot_attention": "attn_lib.viz",
    "BPETokenizer": "attn_lib.tokenization",
    "sinusoidal_positional_encoding": "attn_lib.positional",
    "LearnedPositionalEmbedding": "attn_lib.positional",
    "apply_rope": "attn_lib.positional",
    "alibi_slopes": "attn_lib.positional",
    "alibi_bias": "attn_lib.positional",
}

# Submodules reachable as attributes without an explicit import (attn_lib.exercises.check_...).
# No submodule shares a name with an entry of _LAZY (a submodule import would overwrite the attribute:
# the old tiled_attention/flash_attention clash); tests/test_layout.py checks this.
_SUBMODULES = {
    "attention", "bench", "data", "deltanet", "diagrams", "env", "capstone", "exercises", "flash", "flash_kernels", "gqa", "heads",
    "hf", "hf_equal", "paged", "ring", "serving", "speculative",
    "kv_cache", "kv_table", "lab", "linear", "masks", "mha", "mla", "models", "positional", "pretrained", "quantization",
    "recall", "sparse", "streaming", "style", "tiled", "tokenization", "train", "variants", "viz", "windows",
}

__all__ = ["setup", "load_pretrained", "DATA_DIR", "REPO_ROOT", *_LAZY]


def __getattr__(name: str):
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    if name in _SUBMODULES:
        return importlib.import_module(f"attn_lib.{name}")
    raise AttributeError(f"module 'attn_lib' has no attribute {name!r}")
