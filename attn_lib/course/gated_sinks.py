"""Gated attention measured on a model the course trains: does the output gate remove the attention sink?
(notebook 11, section 9)

Qiu et al. 2025 ("Gated Attention for Large Language Models", sections 4-5) report that a head-specific sigmoid gate
on each head's output, before the output projection, removes the attention sink (the weight trained LMs park on
the first token) and the very large activations that go with it. Qwen3-Next and Qwen3.5 ship that gate
(:class:`attn_lib.variants.VariantAttention` ``output_gate``, proven equal to their modules in tests/test_variants.py).

This module repeats the measurement at the course's scale, on the character model of :mod:`attn_lib.course.streaming`
(the capstone's :class:`~attn_lib.course.capstone.TinyDecoder`, BOS-led windows of ``data/corpus.txt``):

- :class:`OutputGate` and :func:`add_output_gates`: the gate, fitted into a trained-from-scratch DecoderLM's
  attention (its ``out_proj`` becomes ``out_proj(heads * sigmoid(x W_G + b))``, x the attention's input);
- :func:`train_char_model`: :func:`attn_lib.course.streaming.train_sink_model`'s training, with or without the gates, with a
  ``tqdm.auto`` bar;
- :func:`sink_and_peak`: the mean attention weight on the BOS token per layer, and the largest |hidden state|.

Machinery (not core): it imports the capstone model and tqdm.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from attn_lib._checks import check_bool, check_int, check_token_ids
from attn_lib.course.capstone import TinyDecoder
from attn_lib.course.streaming import bos_windows, char_corpus

__all__ = ["OutputGate", "add_output_gates", "train_char_model", "sink_and_peak"]


class OutputGate(nn.Module):
    """The output projection of one attention layer, gated: ``out_proj(heads * sigmoid(x W_G + b))``.

    It replaces ``attn.out_proj`` of an :class:`attn_lib.mha.MultiHeadAttention` and registers a forward pre-hook on
    ``attn`` that keeps the attention's query input x (B, L, d_model), from which the gate is computed. The gate is
    one logit per head and channel (H·E of them), as in Qwen3-Next; its weight starts at 0 and its bias at 0, so a
    fresh gate halves every head's output (sigmoid(0) = 1/2) until training moves it.

    Args:
        attn: a :class:`attn_lib.mha.MultiHeadAttention` (its ``out_proj`` is kept inside, as ``out``).
        d_model: the width of x.

    Shapes: ``forward(heads (B, L, H·E))`` -> (B, L, d_model), in the weights' dtype.

    Raises:
        TypeError: attn has no ``out_proj`` Linear; d_model not an int. ValueError: d_model < 1. ``forward``
            raises RuntimeError if the attention has not run yet (no x kept).

    Source: Qiu et al. 2025, "Gated Attention for Large Language Models", section 3 (position G1, head-specific,
    elementwise, sigmoid); transformers' ``Qwen3NextAttention``.
    """

    def __init__(self, attn: nn.Module, d_model: int) -> None:
        super().__init__()
        if not isinstance(getattr(attn, "out_proj", None), nn.Linear):
            raise TypeError(f"attn must be a MultiHeadAttention with an out_proj Linear, got {type(attn).__name__}")
        d = check_int("d_model", d_model, minimum=1)
        self.out = attn.out_proj
        w = self.out.weight
        self.gate = nn.Linear(d, self.out.in_features, bias=True, dtype=w.dtype, device=w.device)
        nn.init.zeros_(self.gate.weight)
        nn.init.zeros_(self.gate.bias)
        self._x: torch.Tensor | None = None
        attn.register_forward_pre_hook(self._keep_input)

    def _keep_input(self, module, args):
        self._x = args[0]  # the attention's query input (B, L, d_model)

    def forward(self, heads: torch.Tensor) -> torch.Tensor:
        if self._x is None:
            raise RuntimeError("OutputGate needs the attention's input: run the attention module, not the gate alone")
        return self.out(heads * torch.sigmoid(self.gate(self._x)))


def add_output_gates(model: TinyDecoder) -> TinyDecoder:
    """Fit an :class:`OutputGate` into every layer's attention of ``model`` (in place), and return it.

    Args:
        model: a :class:`~attn_lib.models.lm.DecoderLM` (e.g. a TinyDecoder), not yet gated.

    Returns:
        the same model, each ``layers[i].attn.out_proj`` now an :class:`OutputGate`: d_model x H·E + H·E more
        parameters per layer, of the out_proj weight's dtype (float32 by default). Its forward still maps ids (B, L)
        int64 to logits (B, L, vocab_size).

    Raises:
        TypeError: model has no ``layers`` of attention blocks. ValueError: a layer is gated already.

    Source: the course's own (notebook 11); the gate of Qiu et al. 2025.
    """
    layers = getattr(model, "layers", None)
    if layers is None:
        raise TypeError(f"model must be a DecoderLM with layers, got {type(model).__name__}")
    for layer in layers:
        if isinstance(layer.attn.out_proj, OutputGate):
            raise ValueError("the model already has output gates")
        layer.attn.out_proj = OutputGate(layer.attn, model.d_model)
    return model


def train_char_model(*, seed: int = 0, gated: bool = False, steps: int = 200, seq_len: int = 64,
                     d_model: int = 48, lr: float = 3e-3, progress: bool = True) -> tuple[TinyDecoder, torch.Tensor, int]:
    """:func:`attn_lib.course.streaming.train_sink_model`'s model and training, with output gates when ``gated``.

    A 2-layer TinyDecoder (4 heads, 2 KV heads) trained for ``steps`` AdamW steps of 16 BOS-led character windows;
    the same seed gives both variants the same data and the same initial weights (the gates start closed half-way).

    Returns:
        (model in eval mode, float32; the character stream (N,) int64; the BOS id int).

    Raises:
        TypeError: an int argument not an int; gated or progress not a bool. ValueError: as train_sink_model.

    Source: the course's own; the measurement of Qiu et al. 2025, section 5, at a tiny scale.
    """
    from tqdm.auto import tqdm

    from attn_lib.course.train import single_thread

    check_bool("gated", gated)
    check_bool("progress", progress)
    check_int("steps", steps, minimum=1)
    gen = torch.Generator().manual_seed(check_int("seed", seed, minimum=0))
    stream, bos = char_corpus()
    torch.manual_seed(seed)
    model = TinyDecoder(bos + 1, d_model=check_int("d_model", d_model, minimum=1), num_heads=4, num_kv_heads=2).float()
    if gated:
        add_output_gates(model)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    model.train()
    bar = tqdm(range(steps), desc="gated" if gated else "plain", disable=not progress)
    with single_thread():  # as every training loop of the course: tiny matrices, one thread (attn_lib.course.train)
        for _ in bar:
            x, y = bos_windows(stream, 16, check_int("seq_len", seq_len, minimum=2), bos, gen)
            loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
            opt.zero_grad()
            loss.backward()
            opt.step()
            bar.set_postfix(loss=f"{loss.item():.3f}", refresh=False)
    bar.close()
    return model.eval(), stream, bos


@torch.no_grad()
def sink_and_peak(model: TinyDecoder, ids: torch.Tensor, *, first_query: int = 8) -> dict:
    """The attention sink and the largest activation of ``model`` on ``ids``.

    Args:
        model: a DecoderLM (gated or not). ids: (B, L) int64, every row starting with the BOS token.
        first_query: the queries from this position on are averaged (early queries have few keys to choose from).

    Returns:
        {"sink": [mean weight on position 0 over batch, heads and queries >= first_query, per layer] (floats),
        "peak": [largest |hidden state| after each layer] (floats), "loss": next-token cross-entropy (float, nats)}.

    Raises:
        TypeError / ValueError: ids not int64 (B, L) within the vocabulary; first_query not an int in [1, L).

    Source: the measures of Qiu et al. 2025, section 5 (attention on the first token; massive activations).
    """
    ids = check_token_ids("ids", ids, vocab_size=model.vocab_size, max_len=model.max_len)
    check_int("first_query", first_query, minimum=1, maximum=ids.shape[1] - 1)
    weights = model.attention_weights(ids)  # per layer (B, H, L, L)
    h = model.embed(ids)
    peaks = []
    for layer in model.layers:
        h = layer(h)
        peaks.append(float(h.abs().max()))
    loss = F.cross_entropy(model(ids[:, :-1]).flatten(0, 1), ids[:, 1:].flatten())
    return {"sink": [float(w[:, :, first_query:, 0].mean()) for w in weights], "peak": peaks, "loss": float(loss)}
