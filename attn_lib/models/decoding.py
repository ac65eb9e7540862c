"""Greedy decoding, once for every model of attn_lib.models (notebooks 07, 08, 10).

Greedy decoding appends, ``max_new_tokens`` times, the most likely next token (``argmax`` of the last
position's logits; ties go to the lowest id, like ``torch.argmax`` and HuggingFace's
``generate(do_sample=False)``). The three models differ only in how they compute those logits
(an encoder-decoder re-reads its source, a decoder with a KV cache feeds only the newest token), so
each passes a function to :func:`greedy_loop` and the loop itself -- stopping at ``eos_id``, padding
finished rows -- exists once.

One rule for every ``generate``/``greedy_decode`` (:func:`check_max_new_tokens`): ``max_new_tokens``
is an int >= 0 (0 returns the prompt unchanged / nothing new), and the whole sequence -- prompt (or
``<s>``) plus the new tokens -- must fit in the model's ``max_len``.
"""

from __future__ import annotations

from typing import Callable

import torch

from attn_lib._checks import check_int, check_tensor

__all__ = ["check_max_new_tokens", "check_prompts", "greedy_loop"]


def check_max_new_tokens(max_new_tokens, *, prompt_len: int, max_len: int) -> int:
    """Return ``max_new_tokens`` if it is an int >= 0 with ``prompt_len + max_new_tokens <= max_len``.

    Raises:
        TypeError: not an int (``2.5``, ``True``).
        ValueError: negative, or the prompt plus the new tokens longer than ``max_len`` (naming all three).
    """
    check_int("max_new_tokens", max_new_tokens, minimum=0)
    if prompt_len + max_new_tokens > max_len:
        raise ValueError(f"max_new_tokens must be <= max_len - prompt length = {max_len} - {prompt_len} = "
                         f"{max_len - prompt_len}, got {max_new_tokens} (the model's max_len={max_len})")
    return max_new_tokens


def check_prompts(name: str, prompts, vocab_size: int, *, ragged: bool) -> list[list[int]] | torch.Tensor:
    """Token-id prompts as a list of lists of ints (``ragged=True``) or a (B, P) int64 tensor.

    A list of ints (one flat prompt) is refused with a hint to wrap it: ``[ids]``.

    Raises:
        TypeError: not a list/tuple of lists (or a tensor when not ragged); an id that is not an int
            (``1.7``, ``True``); a float or bool tensor.
        ValueError: no prompt, an empty prompt, prompts of different lengths when not ragged, an id
            outside ``[0, vocab_size)``.
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


def greedy_loop(next_logits: Callable[[torch.Tensor], torch.Tensor], batch_size: int, max_new_tokens: int, *,
                eos_id: int | None = None, pad_id: int = 0, device=None) -> torch.Tensor:
    """Append the argmax token ``max_new_tokens`` times; return the new tokens (B, N), int64.

    Args:
        next_logits: called with the tokens generated so far, (B, t) int64 (t = 0 at the first step);
            returns the next-token logits (B, V).
        batch_size: B. max_new_tokens: N (checked by the caller with :func:`check_max_new_tokens`).
        eos_id: when given, a row that has produced it is finished: its later positions hold ``pad_id``,
            and the loop stops early once every row is finished (so N_out <= N).
        device: of the returned tokens.

    Returns:
        (B, N_out) int64 tokens; a row's ``eos_id`` is kept, positions after it hold ``pad_id``.
    """
    new = torch.empty(batch_size, 0, dtype=torch.long, device=device)
    done = torch.zeros(batch_size, dtype=torch.bool, device=device)
    for _ in range(max_new_tokens):
        nxt = next_logits(new).argmax(dim=-1)  # (B,) greedy choice
        if eos_id is not None:
            nxt = torch.where(done, torch.full_like(nxt, pad_id), nxt)
        new = torch.cat([new, nxt[:, None]], dim=1)  # (B, t+1)
        if eos_id is not None:
            done |= nxt == eos_id
            if bool(done.all()):
                break
    return new
