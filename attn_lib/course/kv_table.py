"""KV-cache bytes per token, and at 128k tokens, of published models (notebook 11's table and plot).

Each entry of :data:`PUBLISHED` holds the numbers of the model's Hugging Face ``config.json`` (its ``source``) that
decide the cache: layers, KV heads, head_dim, sliding windows, MLA's ranks. :func:`cache_bytes` applies one formula:

- a global layer keeps every token: 2 · Hkv · head_dim · bytes (keys and values) per token;
- a sliding-window layer keeps at most ``window`` tokens (a ring buffer, :mod:`attn_lib.windows`);
- an MLA layer keeps (kv_lora_rank + qk_rope_head_dim) · bytes per token (:mod:`attn_lib.mla`), no factor 2;
- a linear-attention layer (Qwen3-Next's Gated DeltaNet) keeps a state of fixed size, no per-token cache; it is
  left out of the per-token bytes (``note`` says so).

bf16 (2 bytes) throughout, batch 1, no quantization. tests/course/test_kv_table.py checks every row against numbers derived
by hand. Values were read from the configs as published; where a value was not re-checked, ``note`` says so.
"""

from __future__ import annotations

from dataclasses import dataclass

from attn_lib._checks import _got, check_int, check_number

__all__ = ["ModelKV", "PUBLISHED", "cache_bytes", "kv_table", "format_kv_table", "plot_kv_table"]


@dataclass(frozen=True)
class ModelKV:
    """The cache-deciding numbers of one model (its config.json's names in brackets).

    Attributes:
        name: the model. source: the config.json it comes from.
        global_layers: layers attending over every token. local_layers: sliding-window layers (window ``window``).
        num_kv_heads [num_key_value_heads], head_dim [head_dim] of the (G)QA layers.
        kv_lora_rank, qk_rope_head_dim: MLA's cached sizes (then num_kv_heads/head_dim are unused).
        note: what is approximated or not re-checked.
        Every size is an int (0 = absent), name, source and note are str; no tensors.

    The cache of a (G)QA layer holds keys and values (B, Hkv, S, head_dim) each, an MLA layer c_KV (B, S, r)
    and k_R (B, S, dr): :meth:`per_token_layer_bytes` is their size for one token (B = 1, S = 1).

    Raises:
        TypeError: name, source or note not a str; a size not an int (a float or a bool refused); a missing
            name/source/global_layers.
        ValueError: a size < 0; no layer at all; local layers without a window >= 1; neither MLA's
            kv_lora_rank >= 1 nor num_kv_heads and head_dim >= 1 (the cache would count 0 bytes). Assigning a
            field raises dataclasses.FrozenInstanceError.

    Source: the models' Hugging Face config.json (the ``source`` field of each entry of :data:`PUBLISHED`); the
    per-token formulas as DeepSeek-V2 (DeepSeek-AI 2024), §2.1.4, Table 1: 2·Hkv·head_dim per (G)QA layer,
    kv_lora_rank + qk_rope_head_dim per MLA layer.
    """

    name: str
    source: str
    global_layers: int
    num_kv_heads: int = 0
    head_dim: int = 0
    local_layers: int = 0
    window: int = 0
    kv_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    note: str = ""

    def __post_init__(self) -> None:
        for field in ("name", "source", "note"):
            if not isinstance(getattr(self, field), str):
                raise TypeError(f"ModelKV.{field} must be a str, got {_got(getattr(self, field))}")
        for field in ("global_layers", "num_kv_heads", "head_dim", "local_layers", "window", "kv_lora_rank",
                      "qk_rope_head_dim"):
            check_int(f"ModelKV.{field}", getattr(self, field), minimum=0)
        if self.global_layers + self.local_layers == 0:
            raise ValueError(f"ModelKV {self.name!r} needs at least one layer (global_layers + local_layers >= 1), "
                             f"got 0")
        if self.local_layers and not self.window:
            raise ValueError(f"ModelKV {self.name!r} has local_layers={self.local_layers} but window=0; a "
                             f"sliding-window layer needs window >= 1")
        if not self.kv_lora_rank and not (self.num_kv_heads and self.head_dim):
            raise ValueError(f"ModelKV {self.name!r} caches nothing: give MLA's kv_lora_rank >= 1, or num_kv_heads "
                             f">= 1 and head_dim >= 1 (got {self.num_kv_heads} and {self.head_dim})")

    @property
    def kind(self) -> str:
        """"MLA", "GQA" (or "MQA"/"MHA" by heads would need num_heads: GQA here), plus "+window"/"+linear"."""
        base = "MLA" if self.kv_lora_rank else "GQA"
        if self.local_layers:
            base += f" + window {self.window} ({self.local_layers}:{self.global_layers} local:global)"
        if "linear" in self.note:
            base += " + linear attention"
        return base

    def per_token_layer_bytes(self, bytes_per_element: float = 2) -> float:
        """Bytes one token adds to one layer's cache (bytes_per_element: a number > 0, 2 for bf16).

        Raises:
            TypeError: bytes_per_element not a number. ValueError: NaN, infinite or <= 0.
        """
        bytes_per_element = check_number("bytes_per_element", bytes_per_element, positive=True)
        if self.kv_lora_rank:
            return (self.kv_lora_rank + self.qk_rope_head_dim) * bytes_per_element
        return 2 * self.num_kv_heads * self.head_dim * bytes_per_element


_HF = "https://huggingface.co/{}/blob/main/config.json"

PUBLISHED: list[ModelKV] = [
    ModelKV("Llama 3.1 70B", _HF.format("meta-llama/Llama-3.1-70B"), global_layers=80, num_kv_heads=8, head_dim=128),
    ModelKV("Mistral Large 2", _HF.format("mistralai/Mistral-Large-Instruct-2407"), global_layers=88, num_kv_heads=8,
            head_dim=128),
    # text_config: 62 layers, sliding_window 1024, sliding_window_pattern 6: layers 5, 11, ..., 59 global (10)
    ModelKV("Gemma 3 27B", _HF.format("google/gemma-3-27b-it"), global_layers=10, local_layers=52, window=1024,
            num_kv_heads=16, head_dim=128),
    ModelKV("DeepSeek-V3", _HF.format("deepseek-ai/DeepSeek-V3"), global_layers=61, kv_lora_rank=512,
            qk_rope_head_dim=64),
    # layer_types alternate sliding_attention / full_attention over 36 layers, sliding_window 128
    ModelKV("gpt-oss-120b", _HF.format("openai/gpt-oss-120b"), global_layers=18, local_layers=18, window=128,
            num_kv_heads=8, head_dim=64, note="the sinks add one logit per head, nothing per token"),
    ModelKV("Qwen3-235B-A22B", _HF.format("Qwen/Qwen3-235B-A22B"), global_layers=94, num_kv_heads=4, head_dim=128),
    # 48 layers, full_attention_interval 4: 12 gated full-attention layers, 36 Gated DeltaNet layers
    ModelKV("Qwen3-Next-80B-A3B", _HF.format("Qwen/Qwen3-Next-80B-A3B-Instruct"), global_layers=12, num_kv_heads=2,
            head_dim=256, note="36 linear-attention (Gated DeltaNet) layers keep a fixed-size state instead "
                               "(not counted); their sizes were not re-checked"),
]


def cache_bytes(model: ModelKV, seq_len: int, *, bytes_per_element: float = 2) -> float:
    """KV-cache bytes of one sequence of ``seq_len`` tokens: global layers keep all, local ones min(seq_len, window).

    Args:
        model: a :class:`ModelKV`.
        seq_len: int >= 0, the cached tokens S. bytes_per_element: float > 0, 2 for bf16 (default).

    Returns:
        float, the bytes of batch 1: no tensors are made (the caches it counts are (1, Hkv, S, head_dim) keys and
        values per (G)QA layer, (1, S, r + dr) latents per MLA layer).

    Raises:
        TypeError: model not a :class:`ModelKV`; seq_len not an int (a float or a bool refused);
            bytes_per_element not a number.
        ValueError: seq_len < 0; bytes_per_element NaN, infinite or <= 0.

    Source: the course's own formula (notebook 11), as in the module's docstring.
    """
    if not isinstance(model, ModelKV):
        raise TypeError(f"model must be a ModelKV, got {_got(model)}")
    S = check_int("seq_len", seq_len, minimum=0)
    e = check_number("bytes_per_element", bytes_per_element, positive=True)
    per = model.per_token_layer_bytes(e)
    return per * (model.global_layers * S + model.local_layers * min(S, model.window))


def kv_table(seq_len: int = 131072, models: list[ModelKV] | None = None) -> list[dict]:
    """One row per model: name, kind, bytes per token (every layer keeping the token), bytes at ``seq_len``, source.

    Args:
        seq_len: int >= 0, the context of the ``bytes_at`` column (default 131072 = 128k). models: a list of
            :class:`ModelKV`, default :data:`PUBLISHED`.

    Returns:
        list of {"model", "kind", "bytes_per_token", "bytes_at", "seq_len", "source", "note"}: str, str, float,
        float, int, str, str; no tensors. bytes_per_token counts every layer (local ones too), bf16.

    Raises:
        TypeError: models neither None nor a list or tuple of :class:`ModelKV` (a single ModelKV: wrap it in a
            list); seq_len not an int. ValueError: seq_len < 0 (checked even for an empty ``models``, which gives
            ``[]``).

    Source: the course's own (notebook 11's table), from the config.json of each model (the ``source`` column).
    """
    check_int("seq_len", seq_len, minimum=0)
    models = PUBLISHED if models is None else models
    if not isinstance(models, (list, tuple)) or not all(isinstance(m, ModelKV) for m in models):
        what = _got(models) if not isinstance(models, (list, tuple)) else \
            f"a {type(models).__name__} of {sorted({type(m).__name__ for m in models})}"
        raise TypeError(f"models must be None or a list of ModelKV (e.g. [PUBLISHED[0]]), got {what}")
    rows = []
    for m in models:
        layers = m.global_layers + m.local_layers
        rows.append({"model": m.name, "kind": m.kind, "bytes_per_token": layers * m.per_token_layer_bytes(),
                     "bytes_at": cache_bytes(m, seq_len), "seq_len": seq_len, "source": m.source, "note": m.note})
    return rows


_ROW_KEYS = ("model", "kind", "bytes_per_token", "bytes_at", "seq_len")


def _tokens(rows: list[dict]) -> str:
    """The first row's seq_len as a column label: "128k" for a multiple of 1024, else the number ("1000").

    Also the rows' check for format_kv_table and plot_kv_table: a non-empty list of kv_table's dicts.
    """
    if not isinstance(rows, (list, tuple)) or not all(isinstance(r, dict) for r in rows):
        raise TypeError(f"rows must be kv_table()'s list of dicts, got {_got(rows)}")
    if not rows:
        raise ValueError("rows must hold at least one row of kv_table(), got an empty list")
    for i, r in enumerate(rows):
        missing = [k for k in _ROW_KEYS if k not in r]
        if missing:
            raise ValueError(f"rows[{i}] lacks {missing}; expected kv_table()'s rows with keys {list(_ROW_KEYS)}")
    n = rows[0]["seq_len"]
    return f"{n // 1024}k" if n >= 1024 and n % 1024 == 0 else str(n)


def format_kv_table(rows: list[dict]) -> str:
    """The rows as a fixed-width text table: KiB per token and GiB, both at seq_len (a window layer holds at most
    ``window`` tokens, so its bytes per token fall as the context grows; both columns count that).

    Args:
        rows: :func:`kv_table`'s list of dicts (no tensors); every row must have "model" (str), "kind" (str),
            "bytes_per_token" and "bytes_at" (numbers); the first one's "seq_len" (int) names the column ("128k"
            for a multiple of 1024 tokens, else the count itself, "1000").

    Returns:
        str, a header, a rule and one line per row, joined by newlines.

    Raises:
        TypeError: rows not a list of dicts. ValueError: an empty list (no row to name the column); a row
            without one of the keys "model", "kind", "bytes_per_token", "bytes_at", "seq_len".

    Source: the course's own (notebook 11).
    """
    tokens = _tokens(rows)
    head = f"{'model':<20} {'KiB/token @ ' + tokens:>16} {'GiB @ ' + tokens:>11}  kind"
    lines = [head, "-" * len(head)]
    for r in rows:  # per token at seq_len: the GiB column divided by the tokens, so the windows count in both
        per = r["bytes_at"] / r["seq_len"] if r.get("seq_len") else r["bytes_per_token"]
        lines.append(f"{r['model']:<20} {per / 1024:>16.1f} {r['bytes_at'] / 2**30:>11.2f}  {r['kind']}")
    return "\n".join(lines)


def plot_kv_table(rows: list[dict], *, ax=None):
    """Horizontal bars of GiB at seq_len per model, colour-blind-safe (attn_lib.course.viz.PALETTE). Returns the axes.

    Args:
        rows: :func:`kv_table`'s list of dicts (no tensors): "model" (str), "kind" (str), "bytes_at" (number),
            and the first row's "seq_len" (int) for the axis label. The first row is drawn at the top.
        ax: a matplotlib Axes to draw into, or None for a new 7 x 3.2 inch figure.

    Returns:
        the matplotlib Axes. Bars: blue for MLA, green for a kind with a window, reddish purple ("pink") for GQA +
        linear attention (Qwen3-Next's hybrid), orange for plain GQA.

    Raises:
        TypeError / ValueError: as :func:`format_kv_table` (rows not a non-empty list of kv_table()'s dicts);
        matplotlib missing raises ModuleNotFoundError.

    Source: the course's own (notebook 11's plot); colours of Okabe & Ito 2008 (attn_lib.course.style.PALETTE).
    """
    import matplotlib.pyplot as plt

    from attn_lib.course.viz import PALETTE

    label = _tokens(rows)  # checks the rows before a figure is made
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 3.2))
    names = [r["model"] for r in rows][::-1]
    gib = [r["bytes_at"] / 2**30 for r in rows][::-1]
    colours = [PALETTE[0] if "MLA" in r["kind"] else PALETTE[2] if "window" in r["kind"]
               else PALETTE[3] if "linear" in r["kind"] else PALETTE[1] for r in rows][::-1]
    ax.barh(names, gib, color=colours)
    ax.set_xlabel(f"KV cache of one {label}-token sequence, GiB (bf16)")
    ax.set_title("blue: MLA, orange: GQA, green: + sliding windows, pink: + linear attention", fontsize=9)
    return ax
