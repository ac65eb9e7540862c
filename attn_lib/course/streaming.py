"""StreamingLLM measured on a model the course trains: evicting the first tokens hurts, keeping them does not
(notebook 11).

Xiao et al. 2023 ("Efficient Streaming Language Models with Attention Sinks", sections 3.1-3.2) found that a trained
LM parks much attention on its first tokens, whatever they are; a window cache that evicts them breaks the model,
and keeping the first few ("attention sinks") beside the window repairs it at the same cache size.

This module makes that measurable on a CPU in seconds:

- :func:`train_sink_model`: the capstone's :class:`~attn_lib.course.capstone.TinyDecoder` trained on characters of
  ``data/corpus.txt``, every training window starting with a BOS token (as LLMs' documents do);
- :func:`masked_logits`: the same model run in parallel under any (L, S) mask, e.g.
  :func:`attn_lib.windows.streaming_mask`;
- :class:`SinkRingKVCache` and :func:`streaming_logits`: the decode StreamingLLM runs, token by token, with the first
  ``num_sinks`` tokens kept and the rest in a :class:`~attn_lib.windows.RingKVCache` of ``window`` slots;
- :func:`window_losses`: per-token losses under (a) the full causal mask, (b) the window alone, (c) sinks + window.

Keys keep their true positions (they are cached after RoPE); all measurements stay inside the training length, so
the difference between (b) and (c) is the evicted first tokens only, not a position the model never saw.
Shapes use attn_lib's legend; masks are bool, True = may attend.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from attn_lib._checks import (TOKEN_ID_DTYPES, check_generator, check_int, check_number, check_tensor, check_token_ids,
                              shape_of)
from attn_lib.course.capstone import TinyDecoder
from attn_lib.course.train import single_thread
from attn_lib.gqa import grouped_query_attention
from attn_lib.kv_cache import _check_chunk
from attn_lib.masks import causal_mask
from attn_lib.positional import apply_rope
from attn_lib.windows import RingKVCache, streaming_mask, window_mask_from_positions

__all__ = ["SinkRingKVCache", "char_corpus", "bos_windows", "train_sink_model", "masked_logits", "streaming_logits",
           "window_losses"]


class SinkRingKVCache:
    """StreamingLLM's cache: the first ``num_sinks`` tokens forever, then a ring of the ``window`` latest others.

    Its memory stays (num_sinks + window) tokens. ``update`` returns the stored tokens followed by the chunk, with
    their positions (-1 = empty slot), to be masked by :func:`attn_lib.windows.window_mask_from_positions` with the
    same ``window`` and ``num_sinks``. A sink token never enters the ring, so no key is seen twice.

    Shapes: ``update(key (B, Hkv, S_new, E), value (B, Hkv, S_new, Ev))`` -> keys (B, Hkv, S', E), values
    (B, Hkv, S', Ev), positions (S',) int64, S' <= num_sinks + window + S_new (the sinks, the ring's slots, empty
    ones included, and the chunk).
    Dtypes: key and value floating, of one dtype (float32, float64, ...), stored and returned as given; the first
    update fixes the dtype, device, B, Hkv and head dims (a later chunk of another dtype is refused, never promoted).
    The stored keys and values are copies: changing the caller's tensors afterwards does not change the cache.
    An empty chunk (S_new = 0) stores nothing and returns what is stored (an empty (B, Hkv, 0, E) if nothing is).

    Raises:
        TypeError / ValueError: window not an int >= 1, num_sinks not an int >= 0.

    Source: Xiao et al. 2023 (StreamingLLM), §3.2: the attention sinks plus a rolling KV cache; unlike the paper,
    which numbers positions within the cache, keys keep their true positions (RoPE is applied before caching).
    """

    def __init__(self, window: int, num_sinks: int) -> None:
        self.window = check_int("window", window, minimum=1)
        self.num_sinks = check_int("num_sinks", num_sinks, minimum=0)
        self.ring = RingKVCache(window)
        self.sink_keys: torch.Tensor | None = None
        self.sink_values: torch.Tensor | None = None
        self._seen = 0
        self._spec: tuple | None = None  # (key shape, value shape, dtype, device) of the first chunk

    @property
    def seq_len(self) -> int:
        """Tokens seen so far (the position of the next one)."""
        return self._seen

    def nbytes(self) -> int:
        """Bytes of the stored keys and values: at most (num_sinks + window) tokens' worth."""
        sinks = 0 if self.sink_keys is None else (self.sink_keys.numel() * self.sink_keys.element_size()
                                                  + self.sink_values.numel() * self.sink_values.element_size())
        return sinks + self.ring.nbytes()

    def update(self, key: torch.Tensor, value: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Attend-and-store one chunk: key (B, Hkv, S_new, E), value (B, Hkv, S_new, Ev) at the next positions.

        Returns:
            (keys, values, positions): (B, Hkv, S', E), (B, Hkv, S', Ev), (S',) int64; sinks first.

        Raises:
            TypeError / ValueError: as :class:`attn_lib.kv_cache.KVCache`'s checks: not 4-D floating tensors, NaN
                or infinity; a dtype (TypeError), device, B, Hkv or head dim other than the first chunk's.
        """
        _check_chunk("SinkRingKVCache", key, value, self._spec)
        if self._spec is None:
            self._spec = (key.shape, value.shape, key.dtype, key.device)
        n_sink = max(0, min(key.shape[2], self.num_sinks - self._seen))
        if n_sink:  # copies: a view would change when the caller changes its tensor
            ks, vs = key[:, :, :n_sink].clone(), value[:, :, :n_sink].clone()
            self.sink_keys = ks if self.sink_keys is None else torch.cat([self.sink_keys, ks], 2)
            self.sink_values = vs if self.sink_values is None else torch.cat([self.sink_values, vs], 2)
        parts_k, parts_v, parts_p = [], [], []
        if self.sink_keys is not None:
            parts_k.append(self.sink_keys)
            parts_v.append(self.sink_values)
            parts_p.append(torch.arange(self.sink_keys.shape[2], device=key.device))
        if key.shape[2] > n_sink:  # the rest goes through the ring, which counts its own positions from 0
            rk, rv, rp = self.ring.update(key[:, :, n_sink:], value[:, :, n_sink:])
            parts_k.append(rk)
            parts_v.append(rv)
            parts_p.append(torch.where(rp >= 0, rp + self.num_sinks, rp))
        elif self.ring.keys is not None:
            parts_k.append(self.ring.keys)
            parts_v.append(self.ring.values)
            parts_p.append(torch.where(self.ring.positions >= 0, self.ring.positions + self.num_sinks, -1))
        self._seen += key.shape[2]
        if not parts_k:  # nothing stored and an empty chunk: empty keys, values and positions
            return key[:, :, :0].clone(), value[:, :, :0].clone(), torch.zeros(0, dtype=torch.long, device=key.device)
        return torch.cat(parts_k, 2), torch.cat(parts_v, 2), torch.cat(parts_p)


def char_corpus() -> tuple[torch.Tensor, int]:
    """``data/corpus.txt`` as one stream of character ids (lines joined by newlines) and the BOS id (= the number of
    distinct characters; the vocabulary is BOS + 1).

    Returns:
        (stream (N,) int64, N the number of characters of the file; the BOS id, an int).

    Raises:
        nothing of its own; OSError (FileNotFoundError) when ``data/corpus.txt`` is missing.

    Source: the course's own (the character-level corpus of notebook 11).
    """
    from attn_lib import DATA_DIR

    text = (DATA_DIR / "corpus.txt").read_text(encoding="utf-8")
    chars = sorted(set(text))
    index = {c: i for i, c in enumerate(chars)}
    return torch.tensor([index[c] for c in text]), len(chars)


def bos_windows(stream: torch.Tensor, batch_size: int, seq_len: int, bos: int,
                generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Random windows of ``stream``, each starting with ``bos``: inputs (B, seq_len) and next-token targets
    (B, seq_len), int64.

    Args:
        stream: (N,) integer token ids (int64 from :func:`char_corpus`). batch_size: B. seq_len: the window length.
            bos: the BOS id (an int >= 0).
        generator: a ``torch.Generator`` for the window starts (None: torch's global one).

    The starts are drawn from 0..N - seq_len - 1 (0 when N = seq_len): the last window (start N - seq_len) is never
    drawn, one window of ~5900 in ``data/corpus.txt``. Kept as it is so that notebook 11's trained model, tests/course/test_streaming.py's
    measured gaps and the notebook's outputs stay those published (:func:`attn_lib.course.capstone.random_windows` draws
    every window).

    Raises:
        TypeError: stream not an integer tensor; batch_size, seq_len or bos not an int; generator neither None nor
            a torch.Generator.
        ValueError: stream not 1-D; batch_size < 1, seq_len < 2, bos < 0; a stream shorter than seq_len.

    Source: the course's own; a BOS at the start of every window, as LLMs' documents have, so that the model can
    learn a sink there (Xiao et al. 2023).
    """
    check_tensor("stream", stream, ndim=1)
    if stream.dtype not in TOKEN_ID_DTYPES:
        raise TypeError(f"stream must hold integer token ids (int64), got dtype {stream.dtype}")
    B, T = check_int("batch_size", batch_size, minimum=1, maximum=2**31), check_int("seq_len", seq_len, minimum=2)
    check_int("bos", bos, minimum=0)
    check_generator("generator", generator)
    if len(stream) < T:
        raise ValueError(f"stream must hold at least seq_len={T} tokens (one window), got {len(stream)}")
    start = torch.randint(0, max(1, len(stream) - T), (B,), generator=generator)  # max: N = T has one window, 0
    chunk = stream[start[:, None] + torch.arange(T)]  # (B, T): T - 1 inputs after BOS, T targets
    return torch.cat([torch.full((B, 1), bos), chunk[:, :-1]], 1), chunk


def train_sink_model(*, seed: int = 0, steps: int = 200, seq_len: int = 64, d_model: int = 48,
                     lr: float = 3e-3) -> tuple[TinyDecoder, torch.Tensor, int]:
    """Train a 2-layer :class:`~attn_lib.course.capstone.TinyDecoder` (4 heads, 2 KV heads) on BOS-led character windows.

    About 5 s on one CPU thread with the defaults (200 AdamW steps of batch 16).

    Returns:
        (model in eval mode, float32 whatever the default dtype, the character stream (N,) int64, the BOS id int).

    Raises:
        TypeError: seed, steps, d_model or seq_len not an int.
        ValueError: steps or d_model < 1, seed < 0, seq_len < 2, longer than the corpus or above the model's
            max_len (2048); a d_model the 4 heads do not split into an even head_dim (RoPE). TypeError / ValueError:
            lr not a finite number > 0.

    Source: the course's own training loop; the BOS-led windows give the model a fixed first token, where
    Xiao et al. 2023 (StreamingLLM) observe attention sinks.
    """
    check_int("steps", steps, minimum=1)
    check_number("lr", lr, positive=True)
    gen = torch.Generator().manual_seed(check_int("seed", seed, minimum=0))
    stream, bos = char_corpus()
    torch.manual_seed(seed)
    model = TinyDecoder(bos + 1, d_model=check_int("d_model", d_model, minimum=1), num_heads=4, num_kv_heads=2).float()
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    model.train()
    with single_thread():  # as every training loop of the course: tiny matrices, one thread (attn_lib.course.train)
        for _ in range(steps):
            x, y = bos_windows(stream, 16, seq_len, bos, gen)
            loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
            opt.zero_grad()
            loss.backward()
            opt.step()
    return model.eval(), stream, bos


def _check_model(model, ids, name: str = "ids") -> torch.Tensor:
    if not isinstance(model, TinyDecoder):
        raise TypeError(f"model must be an attn_lib.course.capstone.TinyDecoder, got {type(model).__name__}")
    return check_token_ids(name, ids, vocab_size=model.vocab_size, max_len=model.max_len)  # int64 (B, L)


def _attend(attn, h, positions, kv_fn):
    """One layer's MultiHeadAttention (its projections): q, k, v with RoPE at ``positions``; kv_fn(k, v) -> (keys, values, mask)."""
    B, L, _ = h.shape
    H, Hkv, E = attn.num_heads, attn.num_kv_heads, attn.head_dim
    q = apply_rope(attn.q_proj(h).view(B, L, H, E).transpose(1, 2), positions, base=attn.rope_base)
    k = apply_rope(attn.k_proj(h).view(B, L, Hkv, E).transpose(1, 2), positions, base=attn.rope_base)
    v = attn.v_proj(h).view(B, L, Hkv, E).transpose(1, 2)
    k, v, mask = kv_fn(k, v)
    out, _ = grouped_query_attention(q, k, v, attn_mask=mask)  # (B, H, L, E)
    return attn.out_proj(out.transpose(1, 2).reshape(B, L, H * E))


def _run(model, ids, positions, kv_fns):
    x = model.embed(ids)
    for block, kv_fn in zip(model.blocks, kv_fns):
        x = x + _attend(block.attn, block.norm1(x), positions, kv_fn)
        x = x + block.ffn(block.norm2(x))
    return model.lm_head(model.norm(x))


@torch.no_grad()
def masked_logits(model: TinyDecoder, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The model's logits (B, L, vocab) with every layer's attention under ``mask`` (bool (L, L), True = may attend)
    instead of the causal one; ``mask = causal_mask(L)`` gives ``model(ids)``.

    Shapes: ids (B, L) -> logits (B, L, V), V = the model's vocab_size. Dtypes: ids int64; mask bool; the
    logits in the model's dtype (float32 from :func:`train_sink_model`, float64 after ``.double()``).

    Raises:
        TypeError: model not a TinyDecoder; ids not a tensor of integer ids; mask not a bool tensor.
        ValueError: ids not (B, L) with L >= 1 and L <= the model's max_len, or ids outside the vocabulary;
            mask not (L, L).

    Source: the course's own; the masks it is run with are StreamingLLM's (Xiao et al. 2023, §3.2).
    """
    ids = _check_model(model, ids)
    L = ids.shape[1]
    check_tensor("mask", mask)
    if mask.dtype != torch.bool:
        raise TypeError(f"mask must be a bool tensor (True = may attend), got dtype {mask.dtype}")
    if mask.shape != (L, L):
        raise ValueError(f"mask must be (L, L) = ({L}, {L}), got {shape_of(mask)}")
    return _run(model, ids, torch.arange(L), [lambda k, v: (k, v, mask)] * len(model.blocks))


@torch.no_grad()
def streaming_logits(model: TinyDecoder, ids: torch.Tensor, *, window: int, num_sinks: int) -> tuple[torch.Tensor, int]:
    """Decode ``ids`` one token at a time with a :class:`SinkRingKVCache` per layer (StreamingLLM's decode).

    Args:
        ids: (B, L) int64 token ids. window: int >= 1, the ring's slots. num_sinks: int >= 0, the tokens kept.

    Returns:
        (logits (B, L, vocab) in the model's dtype (float32 from :func:`train_sink_model`), the largest cache bytes
        of one layer during the decode, an int).

    Raises:
        TypeError / ValueError: model and ids as :func:`masked_logits`; window/num_sinks as
            :class:`SinkRingKVCache`.

    Source: Xiao et al. 2023 (StreamingLLM), §3.2: decoding with attention sinks and a rolling cache (keys at their
    true positions, see :class:`SinkRingKVCache`).
    """
    ids = _check_model(model, ids)
    caches = [SinkRingKVCache(window, num_sinks) for _ in model.blocks]
    steps, peak = [], 0
    for t in range(ids.shape[1]):
        pos = torch.tensor([t])

        def kv_fn(k, v, cache):
            keys, values, kpos = cache.update(k, v)
            return keys, values, window_mask_from_positions(pos, kpos, window=window, num_sinks=num_sinks)

        steps.append(_run(model, ids[:, t:t + 1], pos, [lambda k, v, c=c: kv_fn(k, v, c) for c in caches]))
        peak = max(peak, caches[0].nbytes())
    return torch.cat(steps, 1), peak


@torch.no_grad()
def window_losses(model: TinyDecoder, ids: torch.Tensor, targets: torch.Tensor, *, window: int,
                  num_sinks: int = 1) -> dict[str, float]:
    """Mean next-token loss (nats) over the positions >= ``window`` (where the window has started evicting) under:
    ``"full"`` the causal mask; ``"window"`` the last ``window`` keys only; ``"sinks"`` the first ``num_sinks``
    keys plus the last ``window - num_sinks`` (the same number of keys as ``"window"``).

    Args:
        ids: (B, L) int64 inputs. targets: (B, L) int64 next-token ids. window: int in [num_sinks + 1, L - 1].
        num_sinks: int >= 0.

    Returns:
        ``{"full": float, "window": float, "sinks": float}``: mean cross-entropy in nats over positions
        ``window..L-1``.

    Raises:
        TypeError / ValueError: model and ids as :func:`masked_logits`; window or num_sinks not an int; targets
            not integer ids in the vocabulary or not of ids' shape; window not in [num_sinks + 1, L - 1];
            num_sinks < 0; B = 0 (a mean loss over no sequence is undefined).

    Source: Xiao et al. 2023 (StreamingLLM), §3.1: window attention against sinks plus a window, on one model.
    """
    ids = _check_model(model, ids)
    L = ids.shape[1]
    if ids.shape[0] == 0:
        raise ValueError(f"ids must hold at least one sequence (B >= 1) to average a loss over, got shape "
                         f"{shape_of(ids)}")
    check_int("num_sinks", num_sinks, minimum=0)
    check_int("window", window, minimum=num_sinks + 1, maximum=L - 1)
    targets = check_token_ids("targets", targets, vocab_size=model.vocab_size)
    if targets.shape != ids.shape:
        raise ValueError(f"targets must have ids' shape {shape_of(ids)}, got {shape_of(targets)}")
    masks = {"full": causal_mask(L), "window": streaming_mask(L, window=window, num_sinks=0),
             "sinks": streaming_mask(L, window=window - num_sinks, num_sinks=num_sinks)}
    out = {}
    for name, mask in masks.items():
        logits = masked_logits(model, ids, mask)
        ce = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction="none").view(ids.shape)
        out[name] = float(ce[:, window:].mean())
    return out
