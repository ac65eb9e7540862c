"""The capstone of the course (notebook 10): a small decoder-only model assembled from the course's pieces.

Every piece is one the course built and proved earlier:

- tokens: :class:`attn_lib.tokenization.BPETokenizer` trained on ``data/corpus.txt`` (notebook 01);
- positions: RoPE, :func:`attn_lib.positional.apply_rope`, on queries and keys (notebook 02);
- the causal mask: :func:`attn_lib.masks.causal_mask`, aligned bottom-right so that it also fits a
  KV cache (notebook 04);
- grouped-query attention: :func:`attn_lib.gqa.grouped_query_attention`, ``num_kv_heads`` key/value
  heads shared by ``num_heads`` query heads (notebook 08);
- the KV cache: :class:`attn_lib.KVCache`, one per layer (notebook 08);
- tiled attention: :func:`attn_lib.tiled_attention`, the FlashAttention-2 loop (notebook 09), which can
  replace the naive attention inside the model (``attention="tiled"``).

The layout is LLaMA's (Touvron et al. 2023, section 2.2), shrunk to train in seconds on a CPU::

    x = embed(ids)                                  # (B, L, d_model); positions enter through RoPE
    for each block:
        x = x + attn(RMSNorm(x))                    # causal GQA self-attention with RoPE
        x = x + ffn(RMSNorm(x))                     # d_model -> 4 d_model -> GELU -> d_model
    logits = lm_head(RMSNorm(x))                    # (B, L, vocab_size), lm_head tied to embed

Shape legend: B batch, L new tokens, S keys (cached + new), H query heads, Hkv key/value heads,
E = head_dim.
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F

import attn_lib
from attn_lib._checks import check_choice, check_heads, check_int, check_tensor
from attn_lib.gqa import grouped_query_attention, repeat_kv
from attn_lib.masks import causal_mask
from attn_lib.positional import apply_rope

from attn_lib.tiled import tiled_attention

__all__ = ["ATTENTIONS", "CausalSelfAttention", "Block", "TinyDecoder", "corpus_token_stream",
           "random_windows", "train", "generate", "unigram_cross_entropy"]

#: The two attention implementations the model can run: "naive" materialises the (L, S) weights
#: (grouped_query_attention), "tiled" never does (tiled_attention with an online softmax).
ATTENTIONS = ("naive", "tiled")


class CausalSelfAttention(nn.Module):
    """Causal grouped-query self-attention with RoPE and an optional KV cache.

    Args:
        d_model: model width; ``num_heads`` divides it (head_dim = d_model / num_heads, even for RoPE).
        num_heads: query heads H.
        num_kv_heads: key/value heads Hkv; divides ``num_heads`` (1 = multi-query attention).
        rope_base: RoPE's base (10000 in RoFormer and LLaMA).
        block: tile size of ``attention="tiled"`` (queries and keys per tile).
    """

    def __init__(self, d_model: int, num_heads: int, num_kv_heads: int, *, rope_base: float = 10000.0,
                 block: int = 8):
        super().__init__()
        check_int("d_model", d_model, minimum=1)
        check_heads(num_heads, num_kv_heads)
        if d_model % num_heads:
            raise ValueError(f"num_heads must divide d_model, got d_model={d_model}, num_heads={num_heads}")
        self.num_heads, self.num_kv_heads = num_heads, num_kv_heads
        self.head_dim = d_model // num_heads
        if self.head_dim % 2:
            raise ValueError(f"head_dim = d_model / num_heads must be even for RoPE, got {self.head_dim}")
        self.rope_base, self.block = rope_base, check_int("block", block, minimum=1)
        self.q_proj = nn.Linear(d_model, num_heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(d_model, num_kv_heads * self.head_dim, bias=False)  # GQA: fewer K/V heads
        self.v_proj = nn.Linear(d_model, num_kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(num_heads * self.head_dim, d_model, bias=False)

    def forward(self, x: torch.Tensor, cache: "attn_lib.KVCache | None" = None, *,
                attention: str = "naive") -> torch.Tensor:
        """x (B, L, d_model) -> (B, L, d_model). With ``cache``, x holds the L newest tokens only."""
        check_choice("attention", attention, ATTENTIONS)
        B, L, _ = x.shape
        H, Hkv, E = self.num_heads, self.num_kv_heads, self.head_dim
        past = 0 if cache is None else cache.seq_len
        q = self.q_proj(x).view(B, L, H, E).transpose(1, 2)  # (B, H, L, E)
        k = self.k_proj(x).view(B, L, Hkv, E).transpose(1, 2)  # (B, Hkv, L, E)
        v = self.v_proj(x).view(B, L, Hkv, E).transpose(1, 2)  # (B, Hkv, L, E)
        positions = torch.arange(past, past + L, device=x.device)  # absolute positions of the new tokens
        q = apply_rope(q, positions, base=self.rope_base)  # rotate by m·θ_i: q·k depends on m - n
        k = apply_rope(k, positions, base=self.rope_base)
        if cache is not None:
            k, v = cache.update(k, v)  # (B, Hkv, S, E), S = past + L
        S = k.shape[-2]
        mask = causal_mask(L, S, align="bottom_right", device=x.device)  # (L, S): new token i sees keys <= past + i
        if attention == "naive":
            out, _ = grouped_query_attention(q, k, v, attn_mask=mask)  # (B, H, L, E)
        else:
            n_rep = H // Hkv
            out = tiled_attention(q, repeat_kv(k, n_rep), repeat_kv(v, n_rep), attn_mask=mask,
                                           block_q=self.block, block_k=self.block)  # (B, H, L, E)
        out = out.transpose(1, 2).reshape(B, L, H * E)  # concatenate the heads: (B, L, d_model)
        return self.o_proj(out)


class Block(nn.Module):
    """Pre-norm decoder block: ``x + attn(RMSNorm(x))``, then ``x + ffn(RMSNorm(x))``."""

    def __init__(self, d_model: int, num_heads: int, num_kv_heads: int, *, block: int = 8):
        super().__init__()
        self.norm1, self.norm2 = nn.RMSNorm(d_model), nn.RMSNorm(d_model)
        self.attn = CausalSelfAttention(d_model, num_heads, num_kv_heads, block=block)
        self.ffn = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model))

    def forward(self, x, cache=None, *, attention="naive"):
        x = x + self.attn(self.norm1(x), cache, attention=attention)  # tokens exchange information
        return x + self.ffn(self.norm2(x))  # each token transformed on its own


class TinyDecoder(nn.Module):
    """A decoder-only language model: embeddings, ``num_layers`` blocks, a tied output layer.

    Args:
        vocab_size: number of token ids.
        d_model, num_heads, num_kv_heads: as in :class:`CausalSelfAttention`.
        num_layers: decoder blocks.
        block: tile size of the tiled attention.

    ``forward(ids, caches=None, attention="naive")``: ids (B, L) long -> logits (B, L, vocab_size).
    ``caches`` is a list of one :class:`attn_lib.KVCache` per layer (or None: no cache).
    """

    def __init__(self, vocab_size: int, d_model: int = 32, num_heads: int = 4, num_kv_heads: int = 2,
                 num_layers: int = 2, *, block: int = 8):
        super().__init__()
        check_int("vocab_size", vocab_size, minimum=1)
        check_int("num_layers", num_layers, minimum=1)
        self.embed = nn.Embedding(vocab_size, d_model)
        self.blocks = nn.ModuleList(Block(d_model, num_heads, num_kv_heads, block=block) for _ in range(num_layers))
        self.norm = nn.RMSNorm(d_model)
        self.lm_head = nn.Linear(d_model, vocab_size, bias=False)
        self.lm_head.weight = self.embed.weight  # tied: the same matrix reads tokens in and out
        nn.init.normal_(self.embed.weight, std=0.02)

    def forward(self, ids: torch.Tensor, caches=None, *, attention: str = "naive") -> torch.Tensor:
        check_tensor("ids", ids, ndim=2)
        if caches is not None and len(caches) != len(self.blocks):
            raise ValueError(f"caches must hold one KVCache per layer ({len(self.blocks)}), got {len(caches)}")
        x = self.embed(ids)  # (B, L, d_model)
        for i, block in enumerate(self.blocks):
            x = block(x, None if caches is None else caches[i], attention=attention)
        return self.lm_head(self.norm(x))  # (B, L, vocab_size)


def corpus_token_stream(tokenizer, lines, eos_id: int) -> torch.Tensor:
    """All ``lines`` encoded with ``tokenizer``, each followed by ``eos_id``, as one (N,) long tensor."""
    ids: list[int] = []
    for line in lines:
        ids += tokenizer.encode(line) + [eos_id]
    return torch.tensor(ids, dtype=torch.long)


def random_windows(stream: torch.Tensor, batch_size: int, seq_len: int, generator=None):
    """A batch of random windows: inputs (B, seq_len) and targets (B, seq_len), the inputs shifted by one."""
    start = torch.randint(0, len(stream) - seq_len - 1, (batch_size,), generator=generator)
    idx = start[:, None] + torch.arange(seq_len + 1)  # (B, seq_len + 1)
    chunk = stream[idx]
    return chunk[:, :-1], chunk[:, 1:]


def train(model: TinyDecoder, stream: torch.Tensor, *, steps: int, batch_size: int = 16, seq_len: int = 32,
          lr: float = 3e-3, progress: bool = True) -> list[float]:
    """Train ``model`` on next-token prediction with AdamW; returns the loss (nats per token) of each step.

    Batches come from :func:`random_windows` with torch's global generator (seed it with
    ``attn_lib.setup()``). The learning rate decays along a cosine from ``lr`` to ``lr / 10``.
    Shows a ``tqdm.auto`` progress bar when ``progress``.
    """
    from tqdm.auto import trange

    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * s / steps)))
    losses = []
    model.train()
    bar = trange(steps, desc="training", disable=not progress)
    for _ in bar:
        x, y = random_windows(stream, batch_size, seq_len)
        loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())  # mean -log p(next token)
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        losses.append(loss.item())
        bar.set_postfix(loss=f"{loss.item():.3f}", refresh=False)
    model.eval()
    return losses


@torch.no_grad()
def generate(model: TinyDecoder, prompt: torch.Tensor, max_new_tokens: int, *, use_cache: bool = True,
             attention: str = "naive") -> tuple[torch.Tensor, torch.Tensor]:
    """Greedy decoding: append the most likely next token ``max_new_tokens`` times.

    With ``use_cache`` the prompt is run once, filling one KV cache per layer, and each step feeds only
    the newest token (L = 1). Without it every step reruns the whole sequence.

    Args:
        prompt: (B, P) long token ids.

    Returns:
        (ids (B, P + max_new_tokens), step_logits (B, max_new_tokens, vocab_size)): the logits from which
        each new token was chosen.
    """
    check_tensor("prompt", prompt, ndim=2)
    check_int("max_new_tokens", max_new_tokens, minimum=1)
    model.eval()
    ids, step_logits = prompt, []
    caches = [attn_lib.KVCache() for _ in model.blocks] if use_cache else None
    new = prompt  # what the model has not seen yet
    for _ in range(max_new_tokens):
        logits = model(new if use_cache else ids, caches, attention=attention)[:, -1]  # (B, vocab_size)
        step_logits.append(logits)
        nxt = logits.argmax(-1, keepdim=True)  # (B, 1) greedy choice
        ids = torch.cat([ids, nxt], dim=1)
        new = nxt
    return ids, torch.stack(step_logits, dim=1)


def unigram_cross_entropy(train_ids: torch.Tensor, eval_ids: torch.Tensor, vocab_size: int) -> float:
    """Nats per token of the best context-free model: token frequencies of ``train_ids`` (add-one
    smoothed) scored on ``eval_ids``. A language model that uses context should go below it."""
    counts = torch.bincount(train_ids, minlength=vocab_size).double() + 1.0
    log_p = (counts / counts.sum()).log()
    return float(-log_p[eval_ids].mean())
