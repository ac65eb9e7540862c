"""The one decoding loop of attn_lib.models -- greedy or sampled -- for every model (notebooks 07, 08, 10).

Greedy decoding appends, ``max_new_tokens`` times, the most likely next token (``argmax`` of the last
position's logits; ties go to the lowest id, like ``torch.argmax`` and HuggingFace's
``generate(do_sample=False)``). The two decoding models, :class:`attn_lib.models.Seq2SeqTransformer` and
:class:`attn_lib.models.DecoderLM` (also TinyDecoder and a copied Llama), differ only in how they compute those
logits (an encoder-decoder re-reads its source, a decoder with a KV cache feeds only the newest token), so
each passes a function to :func:`sample_loop` and the loop itself -- choosing the token, stopping at
``eos_id``, padding finished rows -- exists once.

Sampling (:func:`sample_next`) draws the next token from ``softmax(logits / temperature)`` after keeping
only the ``top_k`` largest logits: HuggingFace's ``TemperatureLogitsWarper`` then ``TopKLogitsWarper`` and
``torch.multinomial``, the order ``generate(do_sample=True)`` applies them in (tests/models/test_lm.py compares
the warpers value for value and the sampled tokens with HF ``generate`` on a random Llama). Temperature 0
is greedy decoding (the limit T -> 0 of the softmax puts all mass on the argmax); :func:`greedy_loop` is
:func:`sample_loop` with temperature 0.

One rule for every ``generate`` (:func:`check_max_new_tokens`): ``max_new_tokens``
is an int >= 0 (0 returns the prompt unchanged / nothing new), and the whole sequence -- prompt (or
``<s>``) plus the new tokens -- must fit in the model's ``max_len``.
"""

from __future__ import annotations

import contextlib
from typing import Callable

import torch

from attn_lib._checks import check_callable, check_device, check_finite, check_int, check_number, check_tensor, shape_of

__all__ = ["check_max_new_tokens", "check_prompts", "check_sampling", "greedy_loop", "sample_loop", "sample_next",
           "temperature_scale", "top_k_filter"]


def check_max_new_tokens(max_new_tokens, *, prompt_len: int, max_len: int) -> int:
    """Return ``max_new_tokens`` if it is an int >= 0 with ``prompt_len + max_new_tokens <= max_len``.

    Args:
        max_new_tokens: the int to check. prompt_len, max_len: ints (the caller's, not checked here).

    No tensors: ints in, the int out.

    Raises:
        TypeError: not an int (``2.5``, ``True``).
        ValueError: negative, or the prompt plus the new tokens longer than ``max_len`` (naming all three).

    Source: the course's own rule (HuggingFace's ``generate`` calls the argument ``max_new_tokens`` too).
    """
    check_int("max_new_tokens", max_new_tokens, minimum=0)
    if prompt_len + max_new_tokens > max_len:
        raise ValueError(f"max_new_tokens must be <= max_len - prompt length = {max_len} - {prompt_len} = "
                         f"{max_len - prompt_len}, got {max_new_tokens} (the model's max_len={max_len})")
    return max_new_tokens


def check_prompts(name: str, prompts, vocab_size: int, *, ragged: bool) -> list[list[int]] | torch.Tensor:
    """Token-id prompts as a list of lists of ints (``ragged=True``) or a (B, P) int64 tensor.

    A list of ints (one flat prompt) is refused with a hint to wrap it: ``[ids]``.

    Args:
        name: what the messages call the prompts. prompts: a list/tuple of B lists of int ids, or a (B, P)
            integer tensor (int64, int32, ...). vocab_size: int. ragged: allow prompts of different lengths.

    Returns:
        ``ragged=True``: the list of B lists of ints (a tensor's rows as lists); else a (B, P) int64 tensor
        (on the CPU).

    Raises:
        TypeError: neither a list/tuple of lists nor a tensor (a flat list of ids, too); an id that is not an
            int (``1.7``, ``True``); a float, bool or complex tensor.
        ValueError: no prompt, an empty prompt, prompts of different lengths when not ragged, an id
            outside ``[0, vocab_size)``; a tensor that is not 2-D.

    Source: the course's own (one rule for every ``generate`` of attn_lib.models).
    """
    if isinstance(prompts, torch.Tensor):
        check_tensor(name, prompts, ndim=2)
        if prompts.is_floating_point() or prompts.dtype == torch.bool or prompts.is_complex():
            raise TypeError(f"{name} must hold integer token ids (int64), got dtype {prompts.dtype}")
        rows = prompts.tolist()
    elif isinstance(prompts, (list, tuple)):
        if prompts and not all(isinstance(p, (list, tuple)) for p in prompts):
            raise TypeError(f"{name} must be a list of prompts, each a list of token ids, e.g. [[5, 3, 9]]; "
                            f"got {type(prompts).__name__} {list(prompts)[:8]!r} (wrap one prompt in a list: [ids])")
        rows = [list(p) for p in prompts]
    else:
        raise TypeError(f"{name} must be a list of lists of token ids or a (B, P) int64 tensor, got "
                        f"{type(prompts).__name__}")
    if not rows:
        raise ValueError(f"{name} must hold at least one prompt, got none")
    for b, row in enumerate(rows):
        if not row:
            raise ValueError(f"{name}[{b}] is empty; every prompt needs at least one token")
        for i in row:
            if isinstance(i, bool) or not isinstance(i, int):
                raise TypeError(f"{name}[{b}] must hold int token ids, got {type(i).__name__} {i!r}")
            if not 0 <= i < vocab_size:
                raise ValueError(f"{name}[{b}] holds id {i}, outside the vocabulary [0, {vocab_size})")
    if not ragged:
        lengths = sorted({len(r) for r in rows})
        if len(lengths) > 1:
            raise ValueError(f"{name} must be prompts of one length (a (B, P) batch), got lengths {lengths}; "
                             f"generate each prompt on its own")
        return torch.tensor(rows, dtype=torch.long)
    return rows


def check_sampling(temperature, top_k, generator=None) -> tuple[float, int | None]:
    """Return ``(temperature, top_k)`` if temperature is a number >= 0 and top_k None or an int >= 1.

    Raises:
        TypeError: temperature not a number (``"hot"``, None); top_k not an int (``2.5``, ``True``);
            generator neither None nor a ``torch.Generator``.
        ValueError: temperature < 0 or not finite; top_k < 1.

    No tensors: numbers in, ``(float, int or None)`` out.

    Source: the course's own; the arguments of HuggingFace's ``generate(do_sample=True, temperature, top_k)``.
    """
    temperature = check_number("temperature", temperature, minimum=0.0)  # NaN and inf refused there (finite=True)
    if top_k is not None:
        check_int("top_k", top_k, minimum=1)
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator or None, got {type(generator).__name__}")
    return float(temperature), top_k


def _check_logits(logits, *, choose: bool = False, ndim=None) -> torch.Tensor:
    """Logits (..., V): a floating tensor of finite values or -inf (a blocked token); NaN and +inf refused.

    ``choose=True`` (a token is picked from each row): V >= 1 and every row keeps at least one token > -inf.
    """
    check_tensor("logits", logits, floating=True, min_ndim=1, ndim=ndim)
    check_finite("logits", logits, allow_neg_inf=True)
    if choose:
        if logits.shape[-1] == 0:
            raise ValueError(f"logits must score at least one token (V >= 1), got shape {shape_of(logits)}")
        blocked = (logits == float("-inf")).all(dim=-1)
        if bool(blocked.any()):
            first = tuple(int(i) for i in blocked.nonzero()[0])
            raise ValueError(f"logits row {first} of shape {shape_of(logits)} is -inf everywhere: no token is "
                             f"allowed, so none can be chosen; expected at least one finite logit per row")
    return logits


def temperature_scale(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """``logits / temperature`` (temperature > 0): below 1 sharpens the softmax, above 1 flattens it.

    Args:
        logits: (..., V) float scores. temperature: a number > 0.

    Returns:
        (..., V), the dtype of ``logits``; equal to HuggingFace's ``TemperatureLogitsWarper(temperature)``.

    Raises:
        TypeError: logits not a floating tensor. ValueError: temperature <= 0 (use greedy decoding for 0); NaN or
            +inf in logits (-inf, a blocked token, is kept); a temperature so small that a finite logit divided by
            it overflows the dtype (it would become +-inf, and the softmax NaN).
    """
    _check_logits(logits)
    temperature = check_number("temperature", temperature, minimum=0.0)
    if temperature == 0:
        raise ValueError("temperature must be > 0 to scale logits, got 0 (temperature 0 means greedy: argmax)")
    scaled = logits / temperature
    if not torch.equal(torch.isinf(scaled), torch.isinf(logits)):  # a finite logit overflowed
        big = float(logits[torch.isfinite(logits)].abs().max())
        raise ValueError(f"temperature={temperature!r} is too small for these {logits.dtype} logits: the largest "
                         f"finite |logit| {big:.3g} / temperature overflows (max {torch.finfo(logits.dtype).max:.3g}); "
                         f"use temperature=0 for greedy decoding (the limit T -> 0) or a larger temperature")
    return scaled


def top_k_filter(logits: torch.Tensor, top_k: int) -> torch.Tensor:
    """Keep the ``top_k`` largest logits of each row, set the rest to -inf (ties with the k-th are kept).

    Args:
        logits: (..., V) float scores. top_k: int >= 1; values >= V keep every logit.

    Returns:
        (..., V), the dtype of ``logits``; equal to HuggingFace's ``TopKLogitsWarper(top_k)``
        (Fan et al. 2018, "Hierarchical Neural Story Generation", section 5.4: top-k sampling).

    Raises:
        TypeError: logits not a floating tensor; top_k not an int. ValueError: top_k < 1; logits 0-dim; NaN or
            +inf in logits (NaN is neither kept nor dropped by a comparison; -inf is allowed).
    """
    _check_logits(logits)
    k = min(check_int("top_k", top_k, minimum=1), logits.shape[-1])
    kth = torch.topk(logits, k, dim=-1).values[..., -1:]  # (..., 1) the k-th largest score
    return logits.masked_fill(logits < kth, float("-inf"))


def sample_next(logits: torch.Tensor, *, temperature: float = 0.0, top_k: int | None = None,
                generator: torch.Generator | None = None) -> torch.Tensor:
    """Choose one next token per row: the argmax (temperature 0) or a draw from the warped softmax.

    With temperature T > 0: ``scores = top_k_filter(logits / T, top_k)``, ``p = softmax(scores)``, one
    ``torch.multinomial(p, 1, generator=generator)`` draw per row -- what HuggingFace's
    ``generate(do_sample=True, temperature=T, top_k=top_k)`` does (the temperature warper first, then top-k;
    with ``generator=None`` torch's global generator, as HF uses). With T = 0 the argmax (ties go to the
    lowest id, like ``generate(do_sample=False)``); ``top_k`` cannot change the argmax.

    Args:
        logits: (B, V) float next-token scores. temperature: a number >= 0. top_k: None (all tokens) or an
            int >= 1. generator: a ``torch.Generator`` for reproducible draws, or None.

    Returns:
        (B,) int64 token ids.

    Raises:
        TypeError / ValueError: as :func:`check_sampling`; logits not a 2-D floating tensor. ValueError: NaN or
            +inf in logits (greedy decoding would pick a NaN token, sampling would fail inside torch); V = 0; a
            row of -inf only (no token allowed); as :func:`temperature_scale` (a temperature that overflows).
    """
    temperature, top_k = check_sampling(temperature, top_k, generator)
    _check_logits(logits, choose=True, ndim=2)
    if temperature == 0:
        return logits.argmax(dim=-1)
    scores = temperature_scale(logits, temperature)
    if top_k is not None:
        scores = top_k_filter(scores, top_k)
    probs = torch.softmax(scores, dim=-1)  # (B, V); zero outside the top k
    return torch.multinomial(probs, num_samples=1, generator=generator).squeeze(1)


def sample_loop(next_logits: Callable[[torch.Tensor], torch.Tensor], batch_size: int, max_new_tokens: int, *,
                temperature: float = 0.0, top_k: int | None = None, generator: torch.Generator | None = None,
                eos_id: int | None = None, pad_id: int = 0, device=None) -> torch.Tensor:
    """Append a chosen token ``max_new_tokens`` times (:func:`sample_next`); return the new tokens (B, N), int64.

    Source: the course's own loop; the choice of each token is HuggingFace's ``generate`` (see
    :func:`sample_next`), and an ``eos_id`` row is padded with ``pad_id`` afterwards, as ``generate`` does.

    The one decoding loop of attn_lib: every ``generate`` of :mod:`attn_lib.models` and
    :func:`attn_lib.course.capstone.generate` run it, and differ only in ``next_logits``.

    Args:
        next_logits: called with the tokens generated so far, (B, t) int64 (t = 0 at the first step);
            returns the next-token logits (B, V).
        batch_size: B. max_new_tokens: N (checked by the caller with :func:`check_max_new_tokens`).
        temperature, top_k, generator: as :func:`sample_next` (temperature 0, the default: greedy).
        eos_id: when given, a row that has produced it is finished: its later positions hold ``pad_id``,
            and the loop stops early once every row is finished (so N_out <= N).
        device: of the returned tokens.

    Returns:
        (B, N_out) int64 tokens; a row's ``eos_id`` is kept, positions after it hold ``pad_id``.

    Raises:
        TypeError / ValueError: bad temperature, top_k or generator (:func:`check_sampling`); next_logits not
            callable; batch_size or max_new_tokens not an int >= 0; eos_id neither None nor an int >= 0; pad_id
            not an int >= 0; logits returned by ``next_logits`` that are not (batch_size, V) floating, or that
            :func:`sample_next` refuses (NaN, +inf, a row of -inf only); an eos_id >= V; device not a device
            (as :func:`attn_lib._checks.check_device`).
    """
    check_sampling(temperature, top_k, generator)
    check_callable("next_logits", next_logits)
    check_int("batch_size", batch_size, minimum=0)
    check_int("max_new_tokens", max_new_tokens, minimum=0)
    if eos_id is not None:
        check_int("eos_id", eos_id, minimum=0)
    check_int("pad_id", pad_id, minimum=0)
    device = check_device("device", device)
    new = torch.empty(batch_size, 0, dtype=torch.long, device=device)
    done = torch.zeros(batch_size, dtype=torch.bool, device=device)
    for _ in range(max_new_tokens):
        logits = next_logits(new)
        if isinstance(logits, torch.Tensor) and (logits.dim() != 2 or logits.shape[0] != batch_size):
            raise ValueError(f"next_logits must return (batch_size, V) = ({batch_size}, V) logits, got shape "
                             f"{shape_of(logits)}")
        if eos_id is not None and isinstance(logits, torch.Tensor) and eos_id >= logits.shape[-1]:
            raise ValueError(f"eos_id={eos_id} is outside the logits' vocabulary 0..{logits.shape[-1] - 1}: no row "
                             f"could ever finish; expected an id the model can produce")
        nxt = sample_next(logits, temperature=temperature, top_k=top_k, generator=generator)  # (B,)
        if eos_id is not None:
            nxt = torch.where(done, torch.full_like(nxt, pad_id), nxt)
        new = torch.cat([new, nxt[:, None].to(new.device)], dim=1)  # (B, t+1)
        if eos_id is not None:
            done |= nxt == eos_id
            if bool(done.all()):
                break
    return new


def greedy_loop(next_logits: Callable[[torch.Tensor], torch.Tensor], batch_size: int, max_new_tokens: int, *,
                eos_id: int | None = None, pad_id: int = 0, device=None) -> torch.Tensor:
    """Greedy decoding: :func:`sample_loop` with temperature 0 (the argmax each step); new tokens (B, N), int64.

    Args and Returns: as :func:`sample_loop` (without the sampling arguments): ``next_logits`` maps the tokens
    so far, (B, t) int64, to float logits (B, V); the result is (B, N_out) int64, N_out <= N = max_new_tokens.

    Raises:
        nothing of its own: TypeError / ValueError as :func:`sample_loop` (next_logits, batch_size,
        max_new_tokens, eos_id, pad_id; logits that are not (B, V) floating, hold NaN or +inf, or a row of -inf).

    Source: greedy search, HuggingFace's ``generate(do_sample=False)``: ties go to the lowest id (``torch.argmax``).
    """
    return sample_loop(next_logits, batch_size, max_new_tokens, eos_id=eos_id, pad_id=pad_id, device=device)


@contextlib.contextmanager
def _evaluating(module: torch.nn.Module):
    """Decode in eval mode (dropout off, so greedy decoding is deterministic) and without autograd; restore after.

    The one eval-mode guard of attn_lib's decoders (Seq2SeqTransformer.generate, DecoderLM.generate, translate).
    """
    was_training = module.training
    module.eval()
    try:
        with torch.no_grad():
            yield
    finally:
        module.train(was_training)
