"""attn_lib.course: the machinery that runs the course, apart from the attention it teaches (the core, ``attn_lib.*``).

The core never imports this package; this package imports the core freely. Modules:

- ``attn_lib.course.viz``        heatmaps, widgets and bertviz wrappers (matplotlib, ipywidgets, bertviz)
- ``attn_lib.course.diagrams``   drawn schematics: boxes, arrows and labelled shapes, no data
- ``attn_lib.course.style``      the colour-blind-safe PALETTE and the two colour maps of every figure
- ``attn_lib.course.data``       the date-translation task of notebook 07
- ``attn_lib.course.train``      training loops and the date task's translate / span_hit_rate (07, 08)
- ``attn_lib.course.capstone``   the capstone's copying task and its tiny decoder (10)
- ``attn_lib.course.streaming``  StreamingLLM measured on a tiny trained decoder (11)
- ``attn_lib.course.recall``     the associative-recall task and its softmax / linear / DeltaNet / hybrid models (12)
- ``attn_lib.course.gated_sinks`` the attention sink with and without Qwen3-Next's output gate, trained live (11)
- ``attn_lib.course.mine``       the course run on the learner's own stack, my_attn; ``make check-mine``
- ``attn_lib.course.heads``      measuring what the heads of a real model do: offsets, shuffles, head gates (06)
- ``attn_lib.course.hf``         GQA and KV transforms inside a HuggingFace BERT (MiniLM) (08)
- ``attn_lib.course.hf_equal``   the float64 equality harness against transformers' attention modules (11)
- ``attn_lib.course.kv_table``   KV-cache bytes of published models (11)
- ``attn_lib.course.bench``      benchmarks: ``python -m attn_lib.course.bench cpu`` (or ``gpu``)
- ``attn_lib.course.env``        what this machine offers the course (00)
- ``attn_lib.course.lab``        ``python -m attn_lib.course.lab``: JupyterLab on the course (``make lab``)
- ``attn_lib.course.pretrained`` the bundled all-MiniLM-L6-v2, loaded offline
- ``attn_lib.course.exercises``  the ``check_*`` functions of each notebook's exercises and predictions
"""

from __future__ import annotations

import importlib

_SUBMODULES = {
    "bench", "capstone", "data", "diagrams", "env", "exercises", "gated_sinks", "heads", "hf", "hf_equal", "kv_table",
    "lab", "mine", "pretrained", "recall", "streaming", "style", "train", "viz",
}


def __getattr__(name: str):
    if name in _SUBMODULES:
        return importlib.import_module(f"attn_lib.course.{name}")
    raise AttributeError(f"module 'attn_lib.course' has no attribute {name!r}")
