"""Associative recall: what a fixed-size state forgets, measured (notebook 12).

The task (after Zoology's multi-query associative recall, Arora et al. 2023, https://arxiv.org/abs/2312.04927, reduced
to one query): a sequence of ``num_pairs`` key-value pairs with distinct keys, then one of the keys again; the model
must answer its value. Each pair is **one** token (its embedding is key embedding + value embedding), so a single
attention layer can solve it: the query's key finds the pair with the same key and copies its value.

Four models of equal width and depth, only the token mixer differs (:class:`RecallModel`): ``"softmax"`` attention,
``"linear"`` attention (elu + 1 features, :func:`attn_lib.linear.linear_attention`), ``"deltanet"`` (the gated delta
rule, :mod:`attn_lib.deltanet`) and a ``"hybrid"`` (three Gated DeltaNet layers, then one softmax layer: the 3 : 1
mix of Qwen3-Next). Notebook 13 adds two sparse mixers of the same size (``SPARSE_KINDS``): ``"moba"`` (MoBA,
:func:`attn_lib.block_sparse.moba_attention`, blocks of 4 keys, 2 read per query) and ``"window"`` (a sliding window
of the same 8 keys). ``python -m attn_lib.course.recall`` trains all four and writes ``data/recall_curve.json``
(``make train-recall``; deterministic on one CPU thread).
"""

from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

from attn_lib._checks import (_got, check_bool, check_choice, check_generator, check_head_dim, check_int, check_number,
                              check_on_device, check_token_ids, shape_of)
from attn_lib.block_sparse import moba_attention
from attn_lib.deltanet import gated_delta_rule, kimi_delta_rule, l2_normalize
from attn_lib.linear import linear_attention

__all__ = ["KINDS", "SPARSE_KINDS", "make_recall_batch", "RecallModel", "train_recall", "recall_accuracy",
           "run_recall_curve"]

KINDS = ("softmax", "linear", "deltanet", "hybrid", "kda")
SPARSE_KINDS = ("moba", "window")  # notebook 13: MoBA (blocks of 4, 2 read) and a window of the same 8 keys
MOBA_BLOCK, MOBA_TOPK = 4, 2
PAIR_COUNTS = (4, 8, 16, 32, 64)
NUM_KEYS, NUM_VALUES = 128, 64
MAX_DRAWS = 2 ** 28  # make_recall_batch's (batch_size, num_keys) table of float32 draws: 1 GiB at most


def make_recall_batch(batch_size: int, num_pairs: int, *, generator: torch.Generator, num_keys: int = NUM_KEYS,
                      num_values: int = NUM_VALUES) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A batch of recall sequences: ``(keys, values, target)``.

    keys (B, num_pairs + 1) long: distinct keys, then the queried key at the last position; values (B, num_pairs
    + 1) long: each pair's value, and ``num_values`` (the "no value" id) at the query; target (B,): the value
    stored with the queried key. All three int64, on the CPU; keys in [0, num_keys), values in [0, num_values].

    Args:
        batch_size: B. num_pairs: the pairs per sequence. num_keys, num_values: the vocabularies (ints >= 1).
        generator: the torch.Generator all draws come from (None draws from torch's global RNG, so the batch is
            then not reproducible).

    Raises:
        TypeError: a count not an int (a bool refused); generator neither None nor a torch.Generator.
        ValueError: a count < 1, more pairs than keys, or batch_size * num_keys above 2**28 (the table of draws).

    Source: Arora et al. 2023 (Zoology), multi-query associative recall, reduced to one query with one token
    per pair: the course's own variant.
    """
    for n, v in (("batch_size", batch_size), ("num_pairs", num_pairs), ("num_keys", num_keys),
                 ("num_values", num_values)):
        check_int(n, v, minimum=1)
    check_generator("generator", generator)
    if num_pairs > num_keys:
        raise ValueError(f"num_pairs must be <= num_keys={num_keys} (the keys are distinct), got {num_pairs}")
    if batch_size * num_keys > MAX_DRAWS:  # the distinct keys come from a (batch_size, num_keys) table of draws
        raise ValueError(f"batch_size * num_keys must be at most {MAX_DRAWS} (the keys are drawn from a (batch_size, "
                         f"num_keys) table of random numbers), got {batch_size} * {num_keys} = {batch_size * num_keys}")
    keys = torch.rand(batch_size, num_keys, generator=generator).argsort(-1)[:, :num_pairs]
    values = torch.randint(num_values, (batch_size, num_pairs), generator=generator)
    which = torch.randint(num_pairs, (batch_size,), generator=generator)
    rows = torch.arange(batch_size)
    keys = torch.cat([keys, keys[rows, which, None]], dim=1)
    values = torch.cat([values, torch.full((batch_size, 1), num_values)], dim=1)
    return keys, values, values[rows, which]


class _Mixer(nn.Module):
    """One token mixer: q, k, v, o projections (d_model x d_model each), plus per-head beta and gate for deltanet."""

    def __init__(self, kind: str, d_model: int, num_heads: int):
        super().__init__()
        self.kind, self.h = kind, num_heads
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=False)
        self.out = nn.Linear(d_model, d_model, bias=False)
        if kind == "deltanet":
            self.beta_gate = nn.Linear(d_model, 2 * num_heads, bias=True)
        if kind == "kda":  # Kimi Delta Attention: one beta per head; a decay gate per head and key channel, made by
            # a low-rank map (rank 4) as Kimi Linear's f_a_proj / f_b_proj, so the parameter count stays that of deltanet
            self.beta = nn.Linear(d_model, num_heads, bias=True)
            self.gate = nn.Sequential(nn.Linear(d_model, 4, bias=False), nn.Linear(4, d_model, bias=True))

    def forward(self, x):
        Bt, L, D = x.shape
        q, k, v = (t.view(Bt, L, self.h, -1).transpose(1, 2) for t in self.qkv(x).chunk(3, dim=-1))
        if self.kind == "softmax":
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        elif self.kind == "moba":
            y = moba_attention(q, k, v, block_size=MOBA_BLOCK, topk=MOBA_TOPK)
        elif self.kind == "window":
            pos = torch.arange(L, device=x.device)
            near = (pos[None, :] <= pos[:, None]) & (pos[None, :] > pos[:, None] - MOBA_BLOCK * MOBA_TOPK)
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=near)
        elif self.kind == "linear":
            y = linear_attention(q, k, v, form="parallel")
        elif self.kind == "kda":
            b, a = self.beta(x), self.gate(x)  # (B, L, H), (B, L, H·E)
            a = a.view(Bt, L, self.h, -1).transpose(1, 2)  # (B, H, L, E): a decay per key channel
            y, _ = kimi_delta_rule(l2_normalize(q), l2_normalize(k), v, F.logsigmoid(a + 4.0),
                                   b.sigmoid().transpose(1, 2), form="chunked", chunk_size=64)
        else:
            b, a = self.beta_gate(x).transpose(1, 2).chunk(2, dim=1)  # (B, H, L) each
            y, _ = gated_delta_rule(l2_normalize(q), l2_normalize(k), v, F.logsigmoid(a + 4.0), b.sigmoid(),
                                    form="chunked", chunk_size=64)
        return self.out(y.transpose(1, 2).reshape(Bt, L, D))


class RecallModel(nn.Module):
    """Embeddings, ``num_layers`` pre-norm residual mixers, a readout of the last position over the values.

    Args:
        kind: ``"softmax"``, ``"linear"``, ``"deltanet"``, ``"hybrid"`` (deltanet layers, every fourth softmax),
            ``"kda"`` (Kimi Delta Attention: the deltanet mixer with a decay per key channel); notebook 13's
            ``"moba"`` or ``"window"`` (sparse softmax attention, ``SPARSE_KINDS``).
        d_model, num_heads, num_layers: width (head_dim = d_model / num_heads), heads, depth.
        num_keys, num_values: the vocabularies of :func:`make_recall_batch` (the values get one more id, the
            "no value" one at the query).

    The parameters are float32 (torch's default dtype). The mixers: ``"softmax"`` torch's
    ``scaled_dot_product_attention`` (causal), ``"linear"`` :func:`attn_lib.linear.linear_attention` (elu + 1,
    normalised), ``"deltanet"`` :func:`attn_lib.deltanet.gated_delta_rule` (chunked, q and k L2-normalised,
    β = sigmoid, g = logsigmoid(a + 4)), ``"kda"`` :func:`attn_lib.deltanet.kimi_delta_rule` (the same, with g one per
    head and key channel).

    Raises:
        TypeError: kind not a str; num_layers, d_model, num_heads, num_keys or num_values not an int.
        ValueError: an unknown kind; a size < 1; num_heads not dividing d_model.

    Source: the course's own (notebook 12): Zoology's setting (Arora et al. 2023) with the token mixers of
    Katharopoulos et al. 2020 (linear) and Yang, Kautz & Hatamizadeh 2024 (Gated DeltaNet); the 3 : 1 hybrid as
    Qwen3-Next.
    """

    def __init__(self, kind: str, *, d_model: int = 64, num_heads: int = 4, num_layers: int = 4,
                 num_keys: int = NUM_KEYS, num_values: int = NUM_VALUES):
        super().__init__()
        check_choice("kind", kind, KINDS + SPARSE_KINDS)
        check_int("num_layers", num_layers, minimum=1)
        check_head_dim(d_model, num_heads)
        check_int("num_keys", num_keys, minimum=1)
        check_int("num_values", num_values, minimum=1)
        self.kind, self.num_keys, self.num_values = kind, num_keys, num_values
        kinds = [("softmax" if (i + 1) % 4 == 0 else "deltanet") if kind == "hybrid" else kind
                 for i in range(num_layers)]
        self.key_emb = nn.Embedding(num_keys, d_model)
        self.value_emb = nn.Embedding(num_values + 1, d_model)
        self.norms = nn.ModuleList(nn.LayerNorm(d_model) for _ in kinds)
        self.mixers = nn.ModuleList(_Mixer(k, d_model, num_heads) for k in kinds)
        self.final = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, num_values)
        self.layer_kinds = kinds

    def forward(self, keys, values):
        """Logits of the queried value.

        Args:
            keys, values: (B, L) int64 (or int32) ids, L = num_pairs + 1, as :func:`make_recall_batch` returns them.

        Returns:
            (B, num_values) float32 logits, read at the last position (the query).

        Raises:
            TypeError: keys or values not integer tensors. ValueError: not (B, L) with L >= 1, B = 0 (no sequence),
                not on the model's device (or on the meta device), keys and values of different shapes, ids outside [0, num_keys) / [0, num_values] (the "no value"
                id num_values included).
        """
        keys = check_token_ids("keys", keys, vocab_size=self.num_keys)
        values = check_token_ids("values", values, vocab_size=self.num_values + 1)
        check_on_device("keys", keys, self.head.weight.device, of="the model")
        check_on_device("values", values, self.head.weight.device, of="the model")
        if values.shape != keys.shape:
            raise ValueError(f"keys and values must have one shape (B, L), got {shape_of(keys)} and {shape_of(values)}")
        if keys.shape[0] == 0:
            raise ValueError(f"keys must hold at least one sequence (B >= 1), got shape {shape_of(keys)}")
        x = self.key_emb(keys) + self.value_emb(values)
        for norm, mixer in zip(self.norms, self.mixers):
            x = x + mixer(norm(x))
        return self.head(self.final(x[:, -1]))  # (B, num_values) logits for the queried value


def recall_accuracy(model: RecallModel, num_pairs: int, *, num_examples: int = 512, seed: int = 1) -> float:
    """Share of fresh sequences (seeded apart from training) whose value the model recalls exactly.

    Args:
        model: a :class:`RecallModel` (the batches use its num_keys / num_values).
        num_pairs, num_examples: ints >= 1 (the pairs per sequence and the number of sequences).
        seed: int >= 0; the batch is drawn from a generator seeded 10_000 + 101·seed + num_pairs.

    Takes no tensors: it draws keys/values (num_examples, num_pairs + 1) int64 and compares the argmax of the
    (num_examples, num_values) logits with the target. Returns a float in [0, 1]. Leaves the model in eval mode.

    Raises:
        TypeError: model not a :class:`RecallModel`; seed not an int. ValueError: seed < 0. TypeError /
            ValueError: as :func:`make_recall_batch` (num_pairs or num_examples not an int >= 1, more pairs than
            the model's num_keys).

    Source: the course's own (notebook 12), the accuracy of Zoology's recall task (Arora et al. 2023).
    """
    if not isinstance(model, RecallModel):
        raise TypeError(f"model must be an attn_lib.course.recall.RecallModel, got {_got(model)}")
    check_int("seed", seed, minimum=0)
    check_int("num_pairs", num_pairs, minimum=1)
    check_int("num_examples", num_examples, minimum=1)  # named here: make_recall_batch calls it batch_size
    g = torch.Generator().manual_seed(10_000 + seed * 101 + num_pairs)
    keys, values, target = make_recall_batch(num_examples, num_pairs, generator=g, num_keys=model.num_keys,
                                             num_values=model.num_values)
    with torch.no_grad():
        return float((model.eval()(keys, values).argmax(-1) == target).float().mean())


def train_recall(kind: str, *, steps: int, batch_size: int = 64, pair_counts=PAIR_COUNTS, lr: float = 3e-3,
                 seed: int = 0, progress: bool = False, num_layers: int = 4,
                 d_model: int = 64) -> tuple[RecallModel, list[float]]:
    """Train a :class:`RecallModel` with AdamW; each step's batch draws its pair count from ``pair_counts``.

    Returns ``(model, losses)``: the :class:`RecallModel` (default sizes, float32, in eval mode) and one float
    loss per step. Deterministic for a seed on one CPU thread; it calls ``torch.manual_seed(seed)``, which
    reseeds torch's global RNG.

    Args:
        kind: as :class:`RecallModel`. steps: int >= 1. batch_size: int >= 1, sequences per step.
        pair_counts: a non-empty list, tuple or range of ints in [1, 128]. lr: AdamW's peak learning rate (float > 0),
            warmed up over 50 steps, then cosine-decayed. seed: int >= 0. progress: bool, show a tqdm bar.
        num_layers, d_model: the model's depth and width (ints >= 1; notebook 13 trains smaller ones).

    Takes no tensors: its batches are :func:`make_recall_batch`'s (batch_size, n + 1) int64 ids.

    Raises:
        TypeError / ValueError: steps or batch_size not an int >= 1; kind as :class:`RecallModel`; pair_counts
            not a list, tuple or range, empty, or not ints in [1, 128]; lr not a finite number in (0, 99] (0 would
            train not at all; at 100 AdamW's weight decay of 0.01 zeroes the weights); seed not an int >= 0;
            progress not a bool. ValueError: training diverged (a loss or gradient that is not finite, or the
            model's own refusal of its overflowing activations), naming the step: lower lr.

    Source: the course's own (notebook 12); AdamW (Loshchilov & Hutter 2019) as ``torch.optim.AdamW``.
    """
    check_int("steps", steps, minimum=1)
    check_int("batch_size", batch_size, minimum=1)
    check_number("lr", lr, positive=True, maximum=99.0)  # AdamW's weight decay 0.01: 1 - lr * 0.01 must stay > 0
    check_int("seed", seed, minimum=0)
    check_bool("progress", progress)
    check_choice("kind", kind, KINDS + SPARSE_KINDS)
    if not isinstance(pair_counts, (list, tuple, range)):  # a set has no order (and no index), a str is no count
        raise TypeError(f"pair_counts must be a list, tuple or range of ints, got {_got(pair_counts)}")
    if len(pair_counts) == 0:
        raise ValueError("pair_counts must hold at least one pair count, got an empty sequence")
    for i, n in enumerate(pair_counts):
        check_int(f"pair_counts[{i}]", n, minimum=1, maximum=NUM_KEYS)
    torch.manual_seed(seed)
    model = RecallModel(kind, num_layers=num_layers, d_model=d_model)
    g = torch.Generator().manual_seed(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 50) * 0.5 * (1 + math.cos(math.pi * s / steps)))
    bar = range(steps)
    if progress:
        from tqdm.auto import tqdm
        bar = tqdm(bar, desc=kind)
    losses = []
    model.train()
    for step in bar:
        n = pair_counts[int(torch.randint(len(pair_counts), (1,), generator=g))]
        keys, values, target = make_recall_batch(batch_size, n, generator=g)
        try:
            loss = F.cross_entropy(model(keys, values), target)
        except ValueError as e:  # a check inside the model: its activations overflowed
            raise ValueError(f"training diverged at step {step} (lr={lr}): {e}") from e
        opt.zero_grad()
        loss.backward()
        norm = float(nn.utils.clip_grad_norm_(model.parameters(), 1.0))
        if not (math.isfinite(float(loss.detach())) and math.isfinite(norm)):
            raise ValueError(f"training diverged at step {step}: loss {float(loss.detach()):.4g}, gradient norm "
                             f"{norm:.4g}; expected finite values: lower lr={lr}")
        opt.step()
        sched.step()
        losses.append(float(loss.detach()))
    return model.eval(), losses


def run_recall_curve(steps: int = 600, out=None) -> dict:
    """Train the five kinds and measure accuracy at every pair count; write the JSON to ``out`` if given.

    Args:
        steps: int >= 1, training steps per kind (600 for ``data/recall_curve.json``).
        out: a path (str or os.PathLike) for the JSON, or None.

    Takes no tensors. Returns a dict: "steps", "batch_size", "pair_counts", "num_keys", "num_values", "torch"
    (the version str), and "models": per kind {"parameters" (int), "layer_kinds" (list of str), "accuracy"
    ({str(pair count): float}), "final_loss" (float, mean of the last 100 steps), "cpu_seconds" (float)}.
    Trains on one thread (``torch.set_num_threads(1)``, restored afterwards) and prints one line per kind.

    Raises:
        TypeError / ValueError: steps not an int >= 1; out neither None nor a str / os.PathLike, or in a folder
            that does not exist (both checked before training); OSError: ``out`` cannot be written.

    Source: the course's own (``make train-recall``), after Zoology's recall curves (Arora et al. 2023).
    """
    check_int("steps", steps, minimum=1)  # both checked before minutes of training, not after
    if out is not None:
        if not isinstance(out, (str, os.PathLike)):
            raise TypeError(f"out must be None or a path (str or os.PathLike), got {_got(out)}")
        if not Path(out).parent.is_dir():
            raise ValueError(f"out={str(out)!r}: its folder {str(Path(out).parent)!r} does not exist; expected a path "
                             f"in an existing folder")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _recall_curve(steps, out)
    finally:
        torch.set_num_threads(threads)


def _recall_curve(steps: int, out) -> dict:
    result = {"steps": steps, "batch_size": 64, "pair_counts": list(PAIR_COUNTS), "num_keys": NUM_KEYS,
              "num_values": NUM_VALUES, "torch": torch.__version__, "models": {}}
    for kind in KINDS:
        start = time.process_time()
        model, losses = train_recall(kind, steps=steps)
        result["models"][kind] = {
            "parameters": sum(p.numel() for p in model.parameters()),
            "layer_kinds": model.layer_kinds,
            "accuracy": {str(n): recall_accuracy(model, n) for n in PAIR_COUNTS},
            "final_loss": sum(losses[-100:]) / len(losses[-100:]),
            "cpu_seconds": round(time.process_time() - start, 1),
        }
        print(kind, result["models"][kind], flush=True)
    if out is not None:
        with open(out, "w") as f:
            json.dump(result, f, indent=1)
            f.write("\n")
    return result


if __name__ == "__main__":  # pragma: no cover
    import sys

    from attn_lib.course._setup import DATA_DIR

    run_recall_curve(int(sys.argv[1]) if len(sys.argv) > 1 else 600, DATA_DIR / "recall_curve.json")
