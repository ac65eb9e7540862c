"""The capstone of the course (notebook 10): a small decoder-only model on a task that needs attention.

The model is :class:`attn_lib.models.lm.DecoderLM`, attn_lib's one decoder-only language model (RoPE,
grouped-query :class:`attn_lib.mha.MultiHeadAttention`, a KV cache per layer, the tiled attention of
notebook 09 as an option); :class:`TinyDecoder` is that class with the capstone's small defaults.
Training goes through :func:`attn_lib.course.train.train_loop`; decoding through
:func:`attn_lib.models.decoding.sample_loop` (greedy, or temperature and top-k sampling).

The task: **copying in context**. A sequence of ``n`` random words (4 <= n <= 12, from :data:`WORDS`) is
followed by the separator ``|`` and by the same words again::

    the cat sat on the mat | the cat sat on the mat

The first half is random, so no model can predict it; only the second half is scored. There the next
word is fixed by the text -- but only by looking back: the word after ``w`` in the copy is the word
that followed ``w`` in the first half (an *induction head*, Olsson et al. 2022, "In-context Learning
and Induction Heads", section 2). A model whose tokens attend only to themselves (``attend="self"``)
sees the current word alone and can do no better than a uniform guess, ln 16 nats; the attention
model drives the loss towards 0.

Shape legend: B batch, L tokens, n words per half.
"""

from __future__ import annotations

from typing import Iterator

import torch
from torch.nn import functional as F

from attn_lib._checks import (TOKEN_ID_DTYPES, _got, check_generator, check_int, check_iterator, check_tensor,
                              shape_of)
from attn_lib.models.lm import ATTENTIONS, DecoderLM

__all__ = ["ATTENTIONS", "WORDS", "SEP", "VOCAB_SIZE", "TinyDecoder", "encode", "decode", "copy_batch",
           "copy_batches", "copy_loss", "held_out_loss", "HeldOutCurve", "generate", "corpus_token_stream",
           "random_windows", "unigram_cross_entropy"]

#: The 16 words of the copy task (ids 0..15); the sentence of the course is spelled with them.
WORDS = ("the", "cat", "sat", "on", "mat", "dog", "ran", "a", "big", "red", "saw", "in", "hat", "and", "sun", "box")
#: The separator between the two halves, id 16.
SEP = len(WORDS)
#: 16 words + the separator.
VOCAB_SIZE = len(WORDS) + 1
_INDEX = {w: i for i, w in enumerate(WORDS)} | {"|": SEP}


class TinyDecoder(DecoderLM):
    """The capstone's decoder: :class:`~attn_lib.models.lm.DecoderLM` configured small (a thin subclass).

    ``TinyDecoder(vocab_size, d_model, num_heads, num_kv_heads, num_layers, block=, attend=)`` is
    ``DecoderLM(vocab_size, d_model=d_model, num_heads=num_heads, num_kv_heads=num_kv_heads,
    num_layers=num_layers, tile_size=block, attend=attend, norm_eps=None, init="torch")``: PyTorch's default
    initialisation of the linear layers, the tied embedding N(0, 0.02), RMSNorm with torch's default epsilon.
    Everything else -- ``forward(ids, caches=None, attention="naive")``, ``blocks``, ``generate``,
    ``attention_weights`` -- is DecoderLM's.

    Args:
        vocab_size: number of token ids (>= 2). d_model: width (default 32). num_heads: query heads
            (default 4). num_kv_heads: key/value heads (default 2). num_layers: blocks (default 2).
        block: tile size of ``attention="tiled"`` (default 8). attend: ``"causal"`` or ``"self"``.

    Shapes: ``forward(ids (B, L) int64)`` -> logits (B, L, vocab_size), float32 (the parameters' dtype).

    Raises:
        TypeError / ValueError: as :class:`~attn_lib.models.lm.DecoderLM`.

    Source: Touvron et al. 2023 (LLaMA), section 2.2, shrunk; the course's own configuration.
    """

    def __init__(self, vocab_size: int, d_model: int = 32, num_heads: int = 4, num_kv_heads: int = 2,
                 num_layers: int = 2, *, block: int = 8, attend: str = "causal"):
        super().__init__(vocab_size, d_model=d_model, num_heads=num_heads, num_kv_heads=num_kv_heads,
                         num_layers=num_layers, tile_size=block, attend=attend, norm_eps=None, init="torch")


def encode(text: str) -> list[int]:
    """Word ids of a space-separated text of :data:`WORDS` and ``|``: a list of L ints, shape (L,) as a tensor.

    Raises:
        TypeError: text not a str. ValueError: a word outside the task's vocabulary (named).

    Source: the course's own (notebook 10's copy task).
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    unknown = [w for w in text.split() if w not in _INDEX]
    if unknown:
        raise ValueError(f"text holds {unknown!r}, not among the task's words {WORDS + ('|',)}")
    return [_INDEX[w] for w in text.split()]


def decode(ids) -> str:
    """The words of ``ids`` (a list of ints or a (L,) int64 tensor), space-separated: a str; inverse of :func:`encode`.

    Raises:
        TypeError: ids neither a list/tuple of ints nor a 1-D integer tensor (a str, a float, a bool id).
        ValueError: a tensor that is not 1-D or on the meta device; an id outside 0..16 (a negative id is refused,
            not read from the end).

    Source: the course's own (notebook 10's copy task).
    """
    if isinstance(ids, torch.Tensor):
        if ids.dtype not in TOKEN_ID_DTYPES:
            raise TypeError(f"ids must hold integer word ids (int64), got dtype {ids.dtype}")
        if ids.dim() != 1:
            raise ValueError(f"ids must be one sequence (L,) of word ids, got shape {shape_of(ids)}; decode each row")
        if ids.device.type == "meta":
            raise ValueError("ids are on the meta device, which holds shapes but no values; expected word ids with "
                             "values")
        ids = ids.tolist()
    elif isinstance(ids, (list, tuple)):
        for i in ids:
            if isinstance(i, bool) or not isinstance(i, int):
                raise TypeError(f"ids must hold int word ids, got {_got(i)}")
    else:
        raise TypeError(f"ids must be a list of int word ids or a (L,) int64 tensor, got {_got(ids)}")
    bad = sorted({i for i in ids if not 0 <= i < VOCAB_SIZE})
    if bad:
        raise ValueError(f"ids holds {bad[:8]}, outside the task's vocabulary 0..{VOCAB_SIZE - 1} "
                         f"(16 words and the separator {SEP})")
    return " ".join("|" if i == SEP else WORDS[i] for i in ids)


MAX_BATCH_TOKENS = 2 ** 28  # copy_batch's largest (batch_size, 2 * max_words + 1) table of int64 ids: 2 GiB


def copy_batch(batch_size: int, generator: torch.Generator | None = None, *, min_words: int = 4,
               max_words: int = 12) -> tuple[torch.Tensor, torch.Tensor]:
    """One batch of the copy task: ``w_1 .. w_n | w_1 .. w_n``, one n for the batch, drawn in [min_words, max_words].

    Returns:
        (inputs (B, 2n), targets (B, 2n)), int64: the sequence without its last token, and the next tokens,
        with -100 (ignored by ``F.cross_entropy``) where the next token is one of the random first half.

    Raises:
        TypeError / ValueError: sizes not ints, min_words < 1 or max_words < min_words; a batch of more than
            2**28 token ids (batch_size * (2 * max_words + 1)); generator neither None nor a torch.Generator.

    Source: the repeated random sequence of Olsson et al. 2022 ("In-context Learning and Induction Heads"),
    section 2, as a small supervised task.
    """
    B = check_int("batch_size", batch_size, minimum=1, maximum=2**31)
    lo = check_int("min_words", min_words, minimum=1)
    hi = check_int("max_words", max_words, minimum=lo)
    check_generator("generator", generator)
    if B * (2 * hi + 1) > MAX_BATCH_TOKENS:  # max_words=10**9 allocated gigabytes of int64 ids before failing
        raise ValueError(f"batch_size * (2 * max_words + 1) must be at most {MAX_BATCH_TOKENS} token ids, got "
                         f"{B} * {2 * hi + 1} = {B * (2 * hi + 1)}")
    n = int(torch.randint(lo, hi + 1, (1,), generator=generator))
    words = torch.randint(0, len(WORDS), (B, n), generator=generator)  # (B, n) random: unpredictable
    seq = torch.cat([words, torch.full((B, 1), SEP), words], dim=1)  # (B, 2n + 1)
    inputs, targets = seq[:, :-1], seq[:, 1:].clone()
    targets[:, :n - 1] = -100  # the next word inside the first half is random: not scored
    targets[:, n - 1] = -100  # nor the separator, which always comes after n words (a count, not a copy)
    return inputs, targets


def copy_batches(batch_size: int = 32, *, seed: int = 0, **kwargs) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """An endless iterator of :func:`copy_batch` batches ((B, 2n), (B, 2n) int64) from
    ``torch.Generator().manual_seed(seed)``.

    Raises:
        TypeError / ValueError: seed not an int >= 0; later, :func:`copy_batch`'s errors.

    Source: the course's own.
    """
    gen = torch.Generator().manual_seed(check_int("seed", seed, minimum=0))
    while True:
        yield copy_batch(batch_size, gen, **kwargs)


def _check_batch(batch, name: str = "batch") -> tuple[torch.Tensor, torch.Tensor]:
    """An (inputs (B, L), targets (B, L)) pair with at least one scored target (!= -100)."""
    if not isinstance(batch, (tuple, list)) or len(batch) != 2 or not all(isinstance(t, torch.Tensor) for t in batch):
        raise TypeError(f"{name} must be a pair (inputs, targets) of (B, L) tensors, as copy_batch returns, got "
                        f"{_got(batch)}")
    inputs, targets = batch
    if targets.shape != inputs.shape:
        raise ValueError(f"{name}'s targets must have the inputs' shape {shape_of(inputs)}, got {shape_of(targets)}")
    if targets.dtype not in TOKEN_ID_DTYPES or targets.dtype == torch.uint8:  # uint8 cannot hold -100
        raise TypeError(f"{name}'s targets must hold integer token ids (int64; -100 = not scored), got dtype "
                        f"{targets.dtype}")
    if targets.device.type == "meta":
        raise ValueError(f"{name}'s targets are on the meta device, which holds shapes but no values; expected "
                         f"target ids with values (on 'cpu' or 'cuda')")
    if not bool((targets != -100).any()):
        raise ValueError(f"{name} has no scored position (every target is -100, shape {shape_of(targets)}): its mean "
                         f"loss would be NaN; expected at least one target id")
    return inputs, targets


def copy_loss(model, batch) -> torch.Tensor:
    """Mean next-token cross-entropy (nats) over the scored (copy) positions; ``loss_fn`` of ``train_loop``.

    Args:
        model: maps (B, L) int64 ids to (B, L, V) logits. batch: (inputs, targets) from :func:`copy_batch`.

    Returns:
        a 0-dim float tensor, shape ().

    Raises:
        TypeError: batch not an (inputs, targets) pair of tensors; targets not integer ids. ValueError: targets of
            another shape than inputs, on the meta device, with no scored position (all -100: the mean over nothing
            would be NaN), or with ids outside the model's vocabulary (other than -100). The model's errors.

    Source: next-token cross-entropy with transformers' convention of ignoring label -100.
    """
    inputs, targets = _check_batch(batch)
    logits = model(inputs)
    V = logits.shape[-1]
    bad = (targets != -100) & ((targets < 0) | (targets >= V))
    if bool(bad.any()):  # cross_entropy raised a raw IndexError (or a device-side assert on a GPU)
        raise ValueError(f"batch's targets hold {targets[bad].unique()[:8].tolist()}, outside the model's vocabulary "
                         f"0..{V - 1} (and not -100, the id of an unscored position)")
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=-100)


@torch.no_grad()
def held_out_loss(model, batches) -> float:
    """Mean :func:`copy_loss` over ``batches`` (a list of (inputs, targets), each (B, 2n) int64), in nats per
    scored token: a Python float. The model is evaluated in eval mode without gradients, then restored.

    Raises:
        TypeError: model not an nn.Module; batches not a list or tuple. ValueError: no batch (the mean over nothing is undefined);
            :func:`copy_loss`'s errors (a batch without scored positions).

    Source: the course's own.
    """
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"model must be a torch.nn.Module (e.g. a TinyDecoder), got {_got(model)}")
    if not isinstance(batches, (list, tuple)):
        raise TypeError(f"batches must be a list of (inputs, targets) batches, got {_got(batches)}")
    if batches and isinstance(batches[0], torch.Tensor):
        raise TypeError(f"batches must be a list of (inputs, targets) batches, got a {type(batches).__name__} of "
                        f"tensors (one batch?); wrap it: [batch]")
    if not batches:
        raise ValueError("batches must hold at least one (inputs, targets) batch, got an empty list: the mean "
                         "held-out loss over no token is undefined")
    was = model.training
    model.eval()
    try:
        total = sum(copy_loss(model, b).item() * int((b[1] != -100).sum()) for b in batches)
    finally:
        model.train(was)
    return total / sum(int((b[1] != -100).sum()) for b in batches)


class HeldOutCurve:
    """Wrap a batch iterator for :func:`attn_lib.course.train.train_loop` so that every ``every`` steps the
    held-out loss is measured (before the step's batch is handed out): ``steps`` and ``losses`` lists.

    Args:
        batches: the training iterator. model: the model being trained. held_out: a list of batches
            ((B, 2n), (B, 2n) int64). every: an int >= 1.

    Attributes: ``steps`` (list of int), ``losses`` (list of float, :func:`held_out_loss`); no tensors.

    Raises:
        TypeError / ValueError: every not an int >= 1; batches not an iterator (a list: pass ``iter(list)``);
            model not an nn.Module; held_out not a non-empty list (as :func:`held_out_loss`).

    Source: the course's own (a held-out curve without changing :func:`attn_lib.course.train.train_loop`).
    """

    def __init__(self, batches: Iterator, model, held_out: list, every: int = 50):
        check_iterator("batches", batches)
        if not isinstance(model, torch.nn.Module):
            raise TypeError(f"model must be a torch.nn.Module (e.g. a TinyDecoder), got {_got(model)}")
        if not isinstance(held_out, (list, tuple)) or not held_out:
            raise (TypeError if not isinstance(held_out, (list, tuple)) else ValueError)(
                f"held_out must be a non-empty list of (inputs, targets) batches, got {_got(held_out)}")
        self.batches, self.model, self.held_out = batches, model, held_out
        self.every = check_int("every", every, minimum=1)
        self.steps: list[int] = []
        self.losses: list[float] = []
        self._step = 0

    def __iter__(self):
        return self

    def __next__(self):
        if self._step % self.every == 0:
            self.steps.append(self._step)
            self.losses.append(held_out_loss(self.model, self.held_out))
        self._step += 1
        return next(self.batches)

    def finish(self) -> None:
        """Measure once more after the last step."""
        self.steps.append(self._step)
        self.losses.append(held_out_loss(self.model, self.held_out))


@torch.no_grad()
def generate(model: DecoderLM, prompt: torch.Tensor, max_new_tokens: int, *, use_cache: bool = True,
             attention: str = "naive", temperature: float = 0.0, top_k: int | None = None,
             generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``model.generate(..., return_logits=True)``: greedy at temperature 0, else temperature/top-k sampling.

    Args:
        prompt: (B, P) long token ids. Others: as :meth:`attn_lib.models.lm.DecoderLM.generate`.

    Returns:
        (ids (B, P + max_new_tokens), step_logits (B, max_new_tokens, vocab_size)): the logits from which
        each new token was chosen.

    Raises:
        TypeError: model not a :class:`~attn_lib.models.lm.DecoderLM`. TypeError / ValueError: as
            DecoderLM.generate (max_new_tokens must be >= 1 here).

    Source: HuggingFace's ``generate`` (do_sample, temperature, top_k), which tests/models/test_lm_from_hf.py matches
    (DecoderLM.from_hf of a random Llama).
    """
    if not isinstance(model, DecoderLM):
        raise TypeError(f"model must be an attn_lib DecoderLM (e.g. a TinyDecoder), got {_got(model)}")
    check_tensor("prompt", prompt, ndim=2)
    check_int("max_new_tokens", max_new_tokens, minimum=1)
    return model.generate(prompt, max_new_tokens, use_cache, attention=attention, temperature=temperature,
                          top_k=top_k, generator=generator, return_logits=True)


def corpus_token_stream(tokenizer, lines, eos_id: int) -> torch.Tensor:
    """All ``lines`` encoded with ``tokenizer``, each followed by ``eos_id``, as one (N,) int64 tensor.

    Raises:
        TypeError: tokenizer without an ``encode`` method; lines a single str (pass a list of lines) or not
            iterable; a line not a str; eos_id not an int. ValueError: eos_id < 0. The tokenizer's own errors.

    Source: the course's own (GPT-2's document separator, Radford et al. 2019).
    """
    if not callable(getattr(tokenizer, "encode", None)):
        raise TypeError(f"tokenizer must have an encode(str) -> list of ids method, got {_got(tokenizer)}")
    if isinstance(lines, str) or not hasattr(lines, "__iter__"):
        raise TypeError(f"lines must be a list (or iterable) of str, one document each, got {_got(lines)}")
    check_int("eos_id", eos_id, minimum=0)
    ids: list[int] = []
    for line in lines:
        if not isinstance(line, str):
            raise TypeError(f"lines must hold str, got {_got(line)}")
        ids += tokenizer.encode(line) + [eos_id]
    return torch.tensor(ids, dtype=torch.long)


def random_windows(stream: torch.Tensor, batch_size: int, seq_len: int, generator=None):
    """A batch of random windows: inputs (B, seq_len) and targets (B, seq_len), int64, the inputs shifted by one.

    A window reads seq_len + 1 tokens of ``stream`` (N,), so a stream holds N - seq_len windows, starting at
    0..N - seq_len - 1; each is drawn with probability 1 / (N - seq_len), the last one too.

    Raises:
        TypeError: stream not an integer tensor; batch_size or seq_len not an int; generator neither None nor a
            torch.Generator.
        ValueError: stream not 1-D; batch_size < 1; seq_len < 1; a stream shorter than seq_len + 1 tokens (no
            window).

    Source: the course's own (next-token prediction, Radford et al. 2018).
    """
    check_tensor("stream", stream, ndim=1)
    if stream.dtype not in TOKEN_ID_DTYPES:
        raise TypeError(f"stream must hold integer token ids (int64), got dtype {stream.dtype}")
    B = check_int("batch_size", batch_size, minimum=1, maximum=2**31)
    T = check_int("seq_len", seq_len, minimum=1)
    check_generator("generator", generator)
    if len(stream) < T + 1:
        raise ValueError(f"stream must hold at least seq_len + 1 = {T + 1} tokens (one window of inputs and "
                         f"targets), got {len(stream)}")
    start = torch.randint(0, len(stream) - T, (B,), generator=generator)  # N - T windows: 0..N - T - 1
    idx = start[:, None] + torch.arange(T + 1)  # (B, seq_len + 1)
    chunk = stream[idx].long()
    return chunk[:, :-1], chunk[:, 1:]


def unigram_cross_entropy(train_ids: torch.Tensor, eval_ids: torch.Tensor, vocab_size: int) -> float:
    """Nats per token (a float) of the best context-free model: token frequencies of ``train_ids`` (N,)
    int64 (add-one smoothed) scored on ``eval_ids`` (M,) int64. A model that uses context should go below it.

    Raises:
        TypeError: train_ids or eval_ids not a 1-D integer tensor; vocab_size not an int.
        ValueError: not 1-D; on the meta device; eval_ids empty (the mean over no token is undefined);
            vocab_size < 1; an id outside [0, vocab_size) in either (a negative id would be read from the end, a larger one counted outside).

    Source: Laplace's add-one smoothing, as in Jurafsky and Martin, 2024 (Speech and Language Processing, section 3.5).
    """
    V = check_int("vocab_size", vocab_size, minimum=1)
    for name, ids in (("train_ids", train_ids), ("eval_ids", eval_ids)):
        check_tensor(name, ids, ndim=1)
        if ids.dtype not in TOKEN_ID_DTYPES:
            raise TypeError(f"{name} must hold integer token ids (int64), got dtype {ids.dtype}")
        if ids.device.type == "meta":
            raise ValueError(f"{name} is on the meta device, which holds shapes but no values; expected token ids "
                             f"with values")
        if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= V):
            bad = ids[(ids < 0) | (ids >= V)].unique()[:8].tolist()
            raise ValueError(f"{name} holds ids {bad} outside the vocabulary 0..{V - 1} (vocab_size={V})")
    if eval_ids.numel() == 0:
        raise ValueError("eval_ids must hold at least one token: the mean cross-entropy over none is undefined")
    # the add-one counts of the eval tokens only, from the sorted train ids: no table of V counts (a vocab_size
    # of 10**13 tried to allocate 80 TB); the same numbers, (count + 1) / (N + V) in float64
    train_sorted, e = train_ids.long().sort().values, eval_ids.long()
    counts = torch.searchsorted(train_sorted, e, right=True) - torch.searchsorted(train_sorted, e, right=False)
    log_p = ((counts.double() + 1.0) / float(train_ids.numel() + V)).log()
    return float(-log_p.mean())
