"""attn_lib: the attention mechanism from scratch, proven equal to the libraries people use.

Every notebook of the course starts with::

    import attn_lib
    attn_lib.setup()          # seeds, offline mode, plot defaults

Two tiers. The top level is the **core**: the attention a learner studies, one idea per module, importing nothing
but torch (and triton, for the kernels). ``attn_lib.course`` is the **machinery** that runs the course: figures,
widgets, data, training loops, benchmarks and the exercise checks. The core never imports the machinery
(tests/test_layout.py checks it).

The core (one idea each):

- ``attn_lib.tokenization``   byte-pair encoding from scratch (notebook 01)
- ``attn_lib.positional``     sinusoidal, learned, RoPE and ALiBi positions (notebook 02)
- ``attn_lib.attention``      scaled dot-product attention (notebook 03)
- ``attn_lib.masks``          causal and padding masks (notebook 04)
- ``attn_lib.mha``            multi-head attention, with grouped-query heads and RoPE (notebook 05)
- ``attn_lib.kv_cache``       the KV cache (plain and quantized), its size and the work it saves (05, 08, 10)
- ``attn_lib.quantization``   absmax int8/int4 quantization of keys and values, relative_error (08)
- ``attn_lib.gqa``            MQA/GQA head grouping, grouped_query_attention, MHA -> GQA conversion (08)
- ``attn_lib.tiled``          FlashAttention-style tiled attention in PyTorch (notebook 09)
- ``attn_lib.flash``          the same algorithm as Triton kernels, forward and backward: launch and API (notebook 09)
- ``attn_lib.flash_kernels``  the four Triton kernels themselves (notebook 09 reads them)
- ``attn_lib.models``         small encoder-decoder, encoder-only and decoder-only Transformers; the decoder-only
                               DecoderLM also copies a HuggingFace Llama (DecoderLM.from_hf) (07, 08, 10)
- ``attn_lib.mla``            DeepSeek's multi-head latent attention, its latent cache and absorbed decode (11)
- ``attn_lib.windows``        sliding-window masks, the ring-buffer KV cache, StreamingLLM sinks, local:global (11)
- ``attn_lib.variants``       QK-norm, logit soft-capping, learned sinks, KV sharing: Qwen3/Gemma/gpt-oss layers (11)
- ``attn_lib.sparse``         DeepSeek-V3.2's sparse attention: the lightning indexer, top-k, its FLOPs and bytes (11);
                               GLM-5's selection shared across layers, the DSA cache (13)
- ``attn_lib.block_sparse``   block-sparse attention: MoBA's routing, NSA's compressed/selected/window branches (13)
- ``attn_lib.compressed``     DeepSeek-V4's compressed attention: CSA and HCA, their decoding cache and cost (13)
- ``attn_lib.linear``         linear attention (parallel, recurrent, chunked), Mamba-2's SSD, FFT long convolutions (12)
- ``attn_lib.deltanet``       the gated delta rule and a Qwen3-Next Gated DeltaNet layer, recomputed (12)
- ``attn_lib.paged``          a paged KV cache: blocks, block tables, prefix sharing with copy-on-write (14)
- ``attn_lib.serving``        packed (document-masked) batches, chunked prefill, split-KV decoding (14)
- ``attn_lib.speculative``    speculative decoding: the verify and tree masks, the acceptance rule (14)
- ``attn_lib.ring``           ring attention (zig-zag) and Ulysses across torch.distributed gloo processes (14)

The machinery, ``attn_lib.course``: ``viz``, ``diagrams`` and ``style`` (figures and widgets), ``data``, ``train``,
``capstone``, ``recall`` and ``streaming`` (tasks and training), ``heads``, ``hf``, ``hf_equal`` and ``kv_table``
(measurements on real models), ``bench``, ``env``, ``lab`` and ``pretrained`` (running the course), ``mine`` (the
course run on the learner's own ``my_attn``), and ``exercises`` (the ``check_*`` functions); its own docstring has
one line for each.

The most used names are importable from the package itself (``attn_lib.scaled_dot_product_attention``);
they are loaded on first use so that ``import attn_lib`` stays fast.
"""

from __future__ import annotations

import importlib

from attn_lib.course._setup import DATA_DIR, REPO_ROOT, setup
from attn_lib.course.pretrained import load_pretrained

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
    "plot_attention": "attn_lib.course.viz",
    "BPETokenizer": "attn_lib.tokenization",
    "sinusoidal_positional_encoding": "attn_lib.positional",
    "LearnedPositionalEmbedding": "attn_lib.positional",
    "apply_rope": "attn_lib.positional",
    "alibi_slopes": "attn_lib.positional",
    "alibi_bias": "attn_lib.positional",
}

# Submodules reachable as attributes without an explicit import (attn_lib.course.exercises.check_...).
# No submodule shares a name with an entry of _LAZY (a submodule import would overwrite the attribute:
# the old tiled_attention/flash_attention clash); tests/test_layout.py checks this.
_SUBMODULES = {
    "attention", "block_sparse", "course", "deltanet", "flash", "flash_kernels", "gqa", "kv_cache", "linear", "masks", "mha", "mla",
    "models", "paged", "positional", "quantization", "ring", "serving", "sparse", "speculative", "tiled",
    "tokenization", "variants", "windows",
}
_SUBMODULES |= {"compressed"}  # issue 36 (notebook 13); its own line, for parallel branches

__all__ = ["setup", "load_pretrained", "DATA_DIR", "REPO_ROOT", *_LAZY]


def __getattr__(name: str):
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    if name in _SUBMODULES:
        return importlib.import_module(f"attn_lib.{name}")
    raise AttributeError(f"module 'attn_lib' has no attribute {name!r}")
