"""DeepSeek-V4's compressed attention: CSA (compressed sparse) and HCA (heavily compressed) (notebook 13).

DeepSeek-V4 (DeepSeek-AI 2026, the V4 report, §2.3) keeps long contexts cheap by attending, beside a sliding window
of the last W raw tokens, to **compressed** key/value entries: every m consecutive tokens are pooled into ONE entry by
a learned, gated softmax (§2.3.1 and §2.3.2; equation numbers below as transformers' docstrings cite them). Per
layer there is ONE key/value head shared by all query heads (MQA), and the key is also the value (K = V)::

    kv_t       = RoPE(RMSNorm(x_t W_KV))                                (B, 1, S, E)    the window's keys = values
    C_i        = Σ_j softmax_j(Z_j + B_j) ⊙ C_j    over the m tokens j of block i   (per feature; HCA, eqs. 20-23)
    C_i        = Σ over 2m slots [Ca of block i-1, Cb of block i]        (CSA, §2.3.1: blocks of width 2m, stride m)
    K^Comp_i   = RoPE_{i·m}(RMSNorm(C_i))                               (B, 1, T, E)    T = ⌊S/m⌋ complete blocks
    q_t        = RoPE_t(RMSNorm_unweighted(RMSNorm(x_t W_DQ) W_UQ))      (B, H, L, E)
    o_t        = Σ_s softmax_s([q·kv_s·E^-½ | q·K^Comp_i·E^-½ | sink_h]) · value_s   (sink: a logit, no value)
    out_t      = W_O2 · group-wise W_O1 · RoPE_{-t}(o_t)                 (grouped output projection, §2.3.1)

with C = x W^C and Z = x W^Z (the compressor's ``kv_proj`` and ``gate_proj``), B a learned bias per slot of the
block (``position_bias``), and RoPE the interleaved one (pairs (2i, 2i+1)) on the LAST ``rope_dim`` features.
Query t may read block i once the block is complete: (i + 1)·m <= t + 1. Because K = V, the output picks up the
keys' rotation; RoPE at -t on the output's rope features undoes the query's position (transformers does the same).

- **HCA** (heavily compressed attention, §2.3.2): m' = 128 in the model; blocks do not overlap; the query attends
  to EVERY complete block.
- **CSA** (compressed sparse attention, §2.3.1): m = 4; each token projects to 2E features, a half Ca for the NEXT
  block and a half Cb for its own, so block i pools 2m tokens (width 2m, stride m). A **lightning indexer** with its
  own small compressor (d_I features) scores the blocks for each query, I[t, i] = Σ_h w[t, h]·ReLU(q_I[t, h] ·
  K^I_i)·d_I^-½ with w = x W_w · H_I^-½ (eqs. 13-17), and the query attends only to its top-k complete blocks.

transformers (``DeepseekV4Attention`` with ``DeepseekV4CSACompressor`` / ``DeepseekV4HCACompressor``) computes
these exactly; tests/test_compressed.py proves :class:`CompressedAttention` equal to it in float64, both layer types,
and proves that decoding through :class:`CompressedKVCache` (token by token and in chunks) gives the full forward.
Not modelled: a lower-precision storage of the cache (a precision choice: ``bytes_per_element`` of
:func:`compressed_attention_cost`) and YaRN scaling of the compressed branch's RoPE (``from_hf`` refuses it).

Shapes use the legend of :mod:`attn_lib.attention`, plus m = compress_ratio, T = number of compressed blocks,
W = sliding_window, H_I / d_I = the indexer's heads and head dim, k = index_topk, g = o_groups.
"""

from __future__ import annotations

import torch
from torch import nn

from attn_lib._checks import (check_choice, check_dtype, check_finite, check_int, check_number, check_on_device,
                              check_rope_base, check_tensor, claim_cache, shape_of)
from attn_lib.attention import scaled_dot_product_attention
from attn_lib.positional import apply_rope
from attn_lib.windows import window_mask_from_positions

__all__ = ["compress_blocks", "visible_blocks", "select_blocks", "KVCompressor", "BlockIndexer",
           "CompressedKVCache", "CompressedAttention", "compressed_attention_cost"]

KINDS = ("csa", "hca")


def _pos(name, v):
    return check_int(name, v, minimum=1)


def _work(dtype: torch.dtype) -> torch.dtype:
    """float32 for float16 / bfloat16 (transformers' softmaxes and index scores run there), else the dtype itself."""
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def _rope_tail(x: torch.Tensor, positions: torch.Tensor, rope_dim: int, base: float) -> torch.Tensor:
    """Interleaved RoPE on the last ``rope_dim`` features of x (..., n, E) at ``positions`` (n,); the rest as is."""
    keep, rot = x.split([x.shape[-1] - rope_dim, rope_dim], dim=-1)
    return torch.cat([keep, apply_rope(rot, positions, base=base, interleaved=True)], dim=-1)


# ---------------------------------------------------------------------------------------------- the three pieces
def compress_blocks(kv: torch.Tensor, gate: torch.Tensor, position_bias: torch.Tensor, *, ratio: int,
                    overlap: bool, previous: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
    """Pool every ``ratio`` = m tokens into one entry: a softmax over the block's slots, per feature.

    Without overlap (HCA, §2.3.2): ``C_i = Σ_j softmax_j(Z_j + B_j) ⊙ C_j`` over the m tokens of block i.
    With overlap (CSA, §2.3.1): each token carries 2E features [Ca | Cb]; block i pools the 2m slots
    [Ca of block i-1's tokens, Cb of block i's tokens], so it is 2m tokens wide with stride m. Block 0's Ca slots
    come from ``previous`` (the block before, e.g. from a cache), or are empty (weight 0) when there is none.

    Args:
        kv, gate: (B, n·m, E) without overlap, (B, n·m, 2E) with it: C = x W^C and Z = x W^Z of n complete blocks.
        position_bias: (m, E) or (m, 2E): B_j, one learned bias per slot of a block and feature.
        ratio: m, an int >= 1. overlap: bool, CSA's layout.
        previous: None, or (kv_a, gate_a), each (B, m, E): the Ca half of the block before block 0, its gate with
            the bias already added (what a cache saved).

    Returns:
        (B, n, E) in kv's dtype (float32, float64, ...): the pooled entries before their RMSNorm and RoPE (the
        softmax runs in float32 for float16 / bfloat16, as transformers').

    Raises:
        TypeError: kv, gate or position_bias not floating tensors; overlap not a bool.
        ValueError: not 3-D / 2-D; a length that is not a multiple of ratio; shapes that do not fit each other.

    Source: DeepSeek-AI 2026, DeepSeek-V4 report §2.3.1 (CSA) and §2.3.2 (HCA); matches transformers'
    ``DeepseekV4CSACompressor`` / ``DeepseekV4HCACompressor`` forward.
    """
    m = _pos("ratio", ratio)
    check_tensor("kv", kv, floating=True, ndim=3)
    check_tensor("gate", gate, floating=True, ndim=3)
    check_tensor("position_bias", position_bias, floating=True, ndim=2)
    if not isinstance(overlap, bool):
        raise TypeError(f"overlap must be a bool, got {type(overlap).__name__}")
    B, N, F = kv.shape
    if gate.shape != kv.shape or N % m or position_bias.shape != (m, F) or (overlap and F % 2):
        raise ValueError(f"kv and gate must be (B, n·ratio, F) with n·ratio a multiple of ratio={m} (F even with "
                         f"overlap) and position_bias (ratio, F); got {shape_of(kv)}, {shape_of(gate)} and "
                         f"{shape_of(position_bias)}")
    n = N // m
    kv, gate = kv.view(B, n, m, F), gate.view(B, n, m, F) + position_bias  # (B, n, m, F)   Z_j + B_j
    if not overlap:
        return (kv * gate.softmax(dim=2, dtype=_work(gate.dtype)).to(kv.dtype)).sum(dim=2)  # Σ_j softmax_j(Z+B) ⊙ C
    E = F // 2
    prev_kv = kv.new_zeros(B, n, m, E)  # block i-1's Ca slots; block 0's: previous, or weight 0 (gate -inf)
    prev_gate = gate.new_full((B, n, m, E), float("-inf"))
    prev_kv[:, 1:], prev_gate[:, 1:] = kv[:, :-1, :, :E], gate[:, :-1, :, :E]
    if previous is not None and n:
        prev_kv[:, 0], prev_gate[:, 0] = previous
    slots_kv = torch.cat([prev_kv, kv[..., E:]], dim=2)  # (B, n, 2m, E)   [Ca of block i-1, Cb of block i]
    slots_gate = torch.cat([prev_gate, gate[..., E:]], dim=2)
    return (slots_kv * slots_gate.softmax(dim=2, dtype=_work(gate.dtype)).to(kv.dtype)).sum(dim=2)  # (B, n, E)


def visible_blocks(positions: torch.Tensor, num_blocks: int, ratio: int) -> torch.Tensor:
    """Which compressed blocks each query may read: block i once it is complete, (i + 1)·m <= t + 1.

    Args:
        positions: (L,) int64, the queries' positions t. num_blocks: T, an int >= 0. ratio: m, an int >= 1.

    Returns:
        bool (L, T): True = query t may attend to block i (``i < (t + 1) // m``).

    Raises:
        TypeError: positions not an integer tensor; num_blocks or ratio not ints. ValueError: positions not 1-D;
            num_blocks < 0 or ratio < 1.

    Source: DeepSeek-AI 2026, DeepSeek-V4 report §2.3 (causality of the compressed entries); transformers'
    ``causal_threshold = (position_ids + 1) // compress_rate`` in ``DeepseekV4HCACompressor`` and
    ``DeepseekV4Indexer``.
    """
    check_tensor("positions", positions, ndim=1)
    if positions.is_floating_point() or positions.dtype == torch.bool:
        raise TypeError(f"positions must be integer positions, got dtype {positions.dtype}")
    T, m = check_int("num_blocks", num_blocks, minimum=0), _pos("ratio", ratio)
    return torch.arange(T, device=positions.device) < ((positions + 1) // m)[:, None]  # (L, T)


def select_blocks(scores: torch.Tensor, visible: torch.Tensor, topk: int) -> torch.Tensor:
    """The top-k visible blocks of each query by the indexer's scores, as a mask.

    Args:
        scores: (B, L, T) floating, the index scores I[t, i]. visible: bool (L, T) or (B, L, T) (see
            :func:`visible_blocks`). topk: k, an int >= 1.

    Returns:
        bool (B, L, T): True where query t attends to block i: one of its k largest scores among the visible
        blocks (every visible block while there are at most k). Equal scores are broken towards the earlier
        block (a stable sort), so a query picks the same blocks whatever number of future blocks follow
        (decoding = the full forward); transformers' ``topk`` leaves ties unspecified.

    Raises:
        TypeError: scores not floating, visible not bool, topk not an int. ValueError: shapes that do not fit;
            NaN or inf in scores; topk < 1.

    Source: DeepSeek-AI 2026, DeepSeek-V4 report §2.3.1, eq. 17 (top-k selection); matches transformers'
    ``DeepseekV4Indexer`` (top-k over the causal blocks) and the block mask of ``DeepseekV4CSACompressor``.
    """
    check_tensor("scores", scores, floating=True, ndim=3)
    check_tensor("visible", visible, ndim=(2, 3))
    if visible.dtype != torch.bool:
        raise TypeError(f"visible must be a bool mask (True = block visible), got dtype {visible.dtype}")
    k = _pos("topk", topk)
    if visible.shape[-2:] != scores.shape[-2:] or (visible.dim() == 3 and visible.shape[0] != scores.shape[0]):
        raise ValueError(f"visible must be (L, T) or (B, L, T) of scores (B, L, T) = {shape_of(scores)}, "
                         f"got {shape_of(visible)}")
    check_finite("scores", scores)
    masked = scores.masked_fill(~visible, float("-inf"))  # a future block is never chosen
    ranked = masked.sort(dim=-1, descending=True, stable=True)  # equal scores: the earlier block first, always
    k = min(k, scores.shape[-1])
    top, top_idx = ranked.values[..., :k], ranked.indices[..., :k]  # (B, L, k')
    keep = torch.zeros_like(masked, dtype=torch.bool)
    return keep.scatter(-1, top_idx, top > float("-inf"))  # a -inf pick (too few visible) is dropped


# ---------------------------------------------------------------------------------------------- the modules
class KVCompressor(nn.Module):
    """The learned compressor: x -> one RMSNorm-ed, RoPE-d entry per complete block of ``ratio`` tokens.

    Args:
        d_model: model width. head_dim: E, the features of an entry. ratio: m. overlap: CSA's 2m-wide blocks
            (projections to 2E) or HCA's m-wide ones (to E). rope_dim: the last features rotated (interleaved RoPE)
            at the block's first position i·m. rope_base: RoPE's theta. eps: the RMSNorm's epsilon.
        dtype: the weights' torch.dtype (None: torch's default, float32).

    Submodules (transformers' names): ``kv_proj`` and ``gate_proj`` (d_model -> E or 2E), ``position_bias``
    ((m, E) or (m, 2E)), ``kv_norm`` (RMSNorm of E).

    ``forward(x, state=None)`` maps x (B, L, d_model) to the entries (B, T, E) in the weights'
    dtype. Without ``state`` the L tokens start at position 0 and T = ⌊L/m⌋ (a last incomplete block is
    dropped); with a ``state`` (a dict of :class:`CompressedKVCache`) the tokens continue it, an incomplete block
    waits there, and T counts every block completed so far.

    Raises:
        TypeError: a size not an int, overlap not a bool, rope_base or eps not a number, dtype not a dtype;
            (forward) x not a floating tensor.
        ValueError: a size < 1, rope_dim odd or > head_dim, rope_base <= 1, eps <= 0 or not finite; (forward) x
            not (B, L, d_model).

    Source: DeepSeek-AI 2026, DeepSeek-V4 report §2.3.1-2.3.2; transformers' ``DeepseekV4HCACompressor`` (HCA)
    and the compressor part of ``DeepseekV4CSACompressor`` / ``DeepseekV4Indexer`` (CSA), matched in float64.
    """

    def __init__(self, d_model: int, head_dim: int, ratio: int, *, overlap: bool, rope_dim: int,
                 rope_base: float = 160000.0, eps: float = 1e-6, dtype: torch.dtype | None = None) -> None:
        super().__init__()
        d, E, m, dr = (_pos(n, v) for n, v in (("d_model", d_model), ("head_dim", head_dim), ("ratio", ratio),
                                                ("rope_dim", rope_dim)))
        if not isinstance(overlap, bool):
            raise TypeError(f"overlap must be a bool, got {type(overlap).__name__}")
        if dr % 2 or dr > E:
            raise ValueError(f"rope_dim must be even and <= head_dim={E} (RoPE rotates pairs), got {dr}")
        self.head_dim, self.ratio, self.overlap, self.rope_dim = E, m, overlap, dr
        self.rope_base = check_rope_base(rope_base, allow_none=False)
        eps = check_number("eps", eps, positive=True)
        f = {"dtype": check_dtype("dtype", dtype, allow_none=True)}
        F = 2 * E if overlap else E
        self.kv_proj = nn.Linear(d, F, bias=False, **f)
        self.gate_proj = nn.Linear(d, F, bias=False, **f)
        self.position_bias = nn.Parameter(torch.zeros(m, F, **f))
        self.kv_norm = nn.RMSNorm(E, eps=eps, **f)

    def extra_repr(self) -> str:
        return f"ratio={self.ratio}, overlap={self.overlap}, rope_dim={self.rope_dim}"

    def forward(self, x: torch.Tensor, state: dict | None = None) -> torch.Tensor:
        """The entries of every complete block: (B, T, E) (see the class docstring)."""
        check_tensor("x", x, floating=True, ndim=3)
        if x.shape[-1] != self.kv_proj.in_features:
            raise ValueError(f"x must be (B, L, d_model={self.kv_proj.in_features}), got shape {shape_of(x)}")
        kv, gate = self.kv_proj(x), self.gate_proj(x)  # (B, L, F)   C = x W^C, Z = x W^Z
        m, E = self.ratio, self.head_dim
        first, previous = 0, None
        if state is not None:  # continue the cached blocks: the waiting tokens first
            if state.get("kv") is not None:
                kv, gate = torch.cat([state["kv"], kv], 1), torch.cat([state["gate"], gate], 1)
            first, previous = state.get("count", 0) * m, state.get("previous")
        usable = kv.shape[1] // m * m  # the complete blocks; the rest waits (state) or is dropped (no state)
        ready_kv, ready_gate = kv[:, :usable], gate[:, :usable]
        if state is not None:
            state["kv"], state["gate"] = kv[:, usable:].clone(), gate[:, usable:].clone()  # copies: no view of x
            if usable and self.overlap:  # the last complete block's Ca half feeds the next block
                state["previous"] = (ready_kv[:, -m:, :E].clone(),
                                     ready_gate[:, -m:, :E] + self.position_bias[:, :E])
        pooled = compress_blocks(ready_kv, ready_gate, self.position_bias, ratio=m, overlap=self.overlap,
                                 previous=previous)  # (B, n, E)
        starts = first + m * torch.arange(pooled.shape[1], device=x.device)  # each block at its first position i·m
        entries = _rope_tail(self.kv_norm(pooled), starts, self.rope_dim, self.rope_base)  # (B, n, E)
        if state is not None:
            if state.get("entries") is not None:
                entries = torch.cat([state["entries"], entries], 1)
            state["entries"], state["count"] = entries, entries.shape[1]
        return entries


class BlockIndexer(KVCompressor):
    """CSA's lightning indexer: its own overlapping compressor (d_I features) and H_I query heads that score blocks.

    Args:
        d_model, q_lora_rank: the widths of x and of the compressed query c_Q = RMSNorm(x W_DQ) it reads.
        num_heads: H_I. head_dim: d_I. ratio: m. rope_dim, rope_base, eps, dtype: as :class:`KVCompressor`
        (overlap is always on).

    Submodules (transformers' names): those of :class:`KVCompressor`, plus ``q_b_proj`` (q_lora_rank -> H_I·d_I)
    and ``weights_proj`` (d_model -> H_I; transformers' ``scorer.weights_proj``).

    :meth:`scores` gives I[t, i], (B, L, T), in the weights' dtype (float32, float64; float32 for float16 /
    bfloat16 weights, as transformers).

    Raises:
        TypeError / ValueError: as :class:`KVCompressor`, and for num_heads, q_lora_rank (ints >= 1).

    Source: DeepSeek-AI 2026, DeepSeek-V4 report §2.3.1, eqs. 13-17; transformers' ``DeepseekV4Indexer`` and
    ``DeepseekV4IndexerScorer``, matched in float64 (transformers computes the scores in float32; the choice of
    blocks is the same unless two scores tie within float32's precision).
    """

    def __init__(self, d_model: int, q_lora_rank: int, *, num_heads: int, head_dim: int, ratio: int, rope_dim: int,
                 rope_base: float = 160000.0, eps: float = 1e-6, dtype: torch.dtype | None = None) -> None:
        super().__init__(d_model, head_dim, ratio, overlap=True, rope_dim=rope_dim, rope_base=rope_base, eps=eps,
                         dtype=dtype)
        self.num_heads = _pos("num_heads", num_heads)
        f = {"dtype": self.kv_proj.weight.dtype}
        self.q_b_proj = nn.Linear(_pos("q_lora_rank", q_lora_rank), self.num_heads * head_dim, bias=False, **f)
        self.weights_proj = nn.Linear(d_model, self.num_heads, bias=False, **f)

    def scores(self, x: torch.Tensor, q_resid: torch.Tensor, positions: torch.Tensor,
               keys: torch.Tensor) -> torch.Tensor:
        """I[t, i] = Σ_h w[t, h] · ReLU(q_I[t, h] · K^I_i) · d_I^-½, w = x W_w · H_I^-½: (B, L, T).

        x (B, L, d_model), q_resid (B, L, q_lora_rank), positions (L,) int64, keys (B, T, d_I) from
        :meth:`forward`; a TypeError for non-floating tensors, a ValueError for shapes that do not fit.
        """
        for name, t in (("x", x), ("q_resid", q_resid), ("keys", keys)):
            check_tensor(name, t, floating=True, ndim=3)
        check_tensor("positions", positions, ndim=1)
        B, L, _ = x.shape
        if (x.shape[-1] != self.weights_proj.in_features or q_resid.shape != (B, L, self.q_b_proj.in_features)
                or keys.shape[0] != B or keys.shape[-1] != self.head_dim or positions.shape != (L,)):
            raise ValueError(f"expected x (B, L, d_model={self.weights_proj.in_features}), q_resid (B, L, "
                             f"q_lora_rank={self.q_b_proj.in_features}), positions (L,) and keys (B, T, "
                             f"d_I={self.head_dim}); got {shape_of(x)}, {shape_of(q_resid)}, {shape_of(positions)} "
                             f"and {shape_of(keys)}")
        q = self.q_b_proj(q_resid).view(B, L, self.num_heads, self.head_dim).transpose(1, 2)  # (B, H_I, L, d_I)
        q = _rope_tail(q, positions, self.rope_dim, self.rope_base)
        work = _work(q.dtype)  # float16 / bfloat16: scores in float32, as transformers computes them
        dots = torch.relu(q.to(work) @ keys[:, None].transpose(-1, -2).to(work)) * self.head_dim ** -0.5
        w = self.weights_proj(x).to(work) * self.num_heads ** -0.5  # (B, L, H_I); dots (B, H_I, L, T)
        return torch.einsum("blh,bhlt->blt", w, dots)  # (B, L, T)


class CompressedKVCache:
    """The decoding cache of one :class:`CompressedAttention` layer: a window ring plus the compressed blocks.

    - the window: the last ``sliding_window`` = W keys (= values) in a ring of W slots, slot p % W holding
      position p (as :class:`attn_lib.windows.RingKVCache`, one tensor since K = V);
    - per compressor (``"kv"``; CSA also ``"index"``): the entries of the completed blocks, the tokens of the
      block still filling up (their C and Z, fewer than m), and for CSA the Ca half of the last complete block.

    A block's entry is computed once, when its m-th token arrives; nothing is recomputed later.

    Attributes:
        window (int), keys (B, 1, W, E) or None, positions (W,) int64 (-1 = empty slot), states
        ({"kv": dict, "index": dict}).

    Raises:
        TypeError / ValueError: window not an int >= 1.

    Source: the course's own; it holds what transformers' ``DeepseekV4HCACache`` / ``DeepseekV4CSACache`` hold
    (sliding-window K = V, ``buffer_kv`` / ``buffer_gate``, ``compressed_kv``, ``overlap_kv``).
    """

    def __init__(self, window: int) -> None:
        self.window = _pos("window", window)
        self.reset()

    def reset(self) -> None:
        """Empty the cache (no tensors)."""
        self.keys: torch.Tensor | None = None
        self.positions: torch.Tensor | None = None
        self.states: dict[str, dict] = {"kv": {}, "index": {}}
        self._seen = 0

    @property
    def seq_len(self) -> int:
        """Tokens seen so far (the position of the next one)."""
        return self._seen

    def nbytes(self) -> int:
        """Bytes held: the window ring, every compressed entry, the waiting tokens and CSA's saved Ca half."""
        tensors = [self.keys]
        for s in self.states.values():
            tensors += [s.get("entries"), s.get("kv"), s.get("gate"), *(s.get("previous") or ())]
        return sum(t.numel() * t.element_size() for t in tensors if t is not None)

    def update_window(self, kv: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Attend-and-store a chunk kv (B, 1, L, E): returns (old slots + chunk (B, 1, W + L, E), their positions
        (W + L,) int64), then keeps the last W tokens. TypeError: kv not a floating tensor or not of the cached
        dtype; ValueError: kv not (B, 1, L, E), or another B or E than the cached keys, or on another device."""
        check_tensor("kv", kv, floating=True, ndim=4)
        if kv.shape[1] != 1 or (self.keys is not None and (kv.shape[0], kv.shape[-1]) != (self.keys.shape[0],
                                                                                       self.keys.shape[-1])):
            cached = "" if self.keys is None else f" with the cached B, E = {self.keys.shape[0]}, {self.keys.shape[-1]}"
            raise ValueError(f"kv must be (B, 1, L, E){cached} (one head: K = V), got {shape_of(kv)}")
        if self.keys is not None:
            check_on_device("kv", kv, self.keys.device, of="the cached keys")
            if kv.dtype != self.keys.dtype:
                raise TypeError(f"kv must have the cached keys' dtype {self.keys.dtype}, got {kv.dtype}")
        B, _, L, E = kv.shape
        if self.keys is None:
            self.keys = kv.new_zeros(B, 1, self.window, E)
            self.positions = torch.full((self.window,), -1, dtype=torch.long, device=kv.device)
        new_pos = torch.arange(self._seen, self._seen + L, device=kv.device)
        out = torch.cat([self.keys, kv], 2), torch.cat([self.positions, new_pos])
        keep = min(L, self.window)
        slots = new_pos[-keep:] % self.window
        self.keys[:, :, slots] = kv[:, :, -keep:]
        self.positions[slots] = new_pos[-keep:]
        self._seen += L
        return out

    def __repr__(self) -> str:
        blocks = self.states["kv"].get("count", 0)
        return f"CompressedKVCache(window={self.window}, seq_len={self._seen}, blocks={blocks})"


class CompressedAttention(nn.Module):
    """DeepSeek-V4's attention layer with a compressor: CSA (``kind="csa"``) or HCA (``kind="hca"``).

    Args:
        d_model: model width. num_heads: H query heads (one shared key/value head). head_dim: E.
        q_lora_rank: the width of c_Q = RMSNorm(x W_DQ). kind: "csa" or "hca". compress_ratio: m (the model: 4
        for CSA, 128 for HCA). sliding_window: W, the raw keys a query sees, itself included. rope_dim: the last
        features of each head rotated (interleaved RoPE). rope_base: RoPE's theta (the model's
        compress_rope_theta, 160000). o_groups: g, o_lora_rank: d_g (the grouped output projection; H·E must be
        a multiple of g). eps: the RMSNorms' epsilon.
        index_heads, index_head_dim, index_topk: H_I, d_I, k of CSA's indexer (required for CSA, refused for
        HCA). dtype: the weights' torch.dtype (None: torch's default, float32).

    Submodules (transformers' names): ``q_a_proj``, ``q_a_norm``, ``q_b_proj``, ``q_b_norm`` (no weight),
    ``kv_proj``, ``kv_norm``, ``o_a_proj`` (g·d_g rows, H·E/g inputs: group i uses rows i·d_g..), ``o_b_proj``,
    ``sinks`` (H,), ``compressor`` (:class:`KVCompressor`; CSA: ``compressor.indexer``, a :class:`BlockIndexer`).

    Raises:
        TypeError: a size not an int, kind not a str, a number not a number, dtype not a dtype.
        ValueError: a size < 1; kind not "csa"/"hca"; rope_dim odd or > head_dim or > index_head_dim;
            H·E not a multiple of o_groups; the indexer's sizes missing for CSA or given for HCA.

    Source: DeepSeek-AI 2026, DeepSeek-V4 report §2.3 (CSA §2.3.1, HCA §2.3.2, grouped output projection and
    sinks §2.3.1); matches transformers' ``DeepseekV4Attention`` forward (its CSA and HCA layer types) in float64.
    """

    def __init__(self, d_model: int, num_heads: int, head_dim: int, *, q_lora_rank: int, kind: str,
                 compress_ratio: int, sliding_window: int, rope_dim: int, o_groups: int, o_lora_rank: int,
                 rope_base: float = 160000.0, eps: float = 1e-6, index_heads: int | None = None,
                 index_head_dim: int | None = None, index_topk: int | None = None,
                 dtype: torch.dtype | None = None) -> None:
        super().__init__()
        d, H, E, rq, m, W, dr, g, dg = (_pos(n, v) for n, v in (
            ("d_model", d_model), ("num_heads", num_heads), ("head_dim", head_dim), ("q_lora_rank", q_lora_rank),
            ("compress_ratio", compress_ratio), ("sliding_window", sliding_window), ("rope_dim", rope_dim),
            ("o_groups", o_groups), ("o_lora_rank", o_lora_rank)))
        if not isinstance(kind, str):
            raise TypeError(f"kind must be a str, 'csa' or 'hca', got {type(kind).__name__}")
        self.kind = check_choice("kind", kind, KINDS)
        if dr % 2 or dr > E:
            raise ValueError(f"rope_dim must be even and <= head_dim={E} (RoPE rotates pairs), got {dr}")
        if (H * E) % g:
            raise ValueError(f"num_heads * head_dim = {H * E} must be a multiple of o_groups={g} (the grouped "
                             f"output projection splits the heads' outputs into g equal groups)")
        index = {"index_heads": index_heads, "index_head_dim": index_head_dim, "index_topk": index_topk}
        if self.kind == "hca" and any(v is not None for v in index.values()):
            raise ValueError(f"HCA has no indexer: index_heads, index_head_dim and index_topk must be None, "
                             f"got {index}")
        self.rope_base = check_rope_base(rope_base, allow_none=False)
        eps = check_number("eps", eps, positive=True)
        f = {"dtype": check_dtype("dtype", dtype, allow_none=True)}
        self.d_model, self.num_heads, self.head_dim, self.rope_dim = d, H, E, dr
        self.compress_ratio, self.sliding_window, self.o_groups = m, W, g
        self.q_a_proj = nn.Linear(d, rq, bias=False, **f)
        self.q_a_norm = nn.RMSNorm(rq, eps=eps, **f)
        self.q_b_proj = nn.Linear(rq, H * E, bias=False, **f)
        self.q_b_norm = nn.RMSNorm(E, eps=eps, elementwise_affine=False)
        self.kv_proj = nn.Linear(d, E, bias=False, **f)
        self.kv_norm = nn.RMSNorm(E, eps=eps, **f)
        self.o_a_proj = nn.Linear(H * E // g, g * dg, bias=False, **f)
        self.o_b_proj = nn.Linear(g * dg, d, bias=False, **f)
        self.sinks = nn.Parameter(torch.zeros(H, **f))
        self.compressor = KVCompressor(d, E, m, overlap=self.kind == "csa", rope_dim=dr, rope_base=rope_base,
                                       eps=eps, **f)
        self.index_topk = None
        if self.kind == "csa":
            if any(v is None for v in index.values()):
                raise ValueError(f"CSA needs its indexer's sizes: index_heads, index_head_dim and index_topk must "
                                 f"be ints >= 1, got {index}")
            self.index_topk = _pos("index_topk", index_topk)
            if dr > _pos("index_head_dim", index_head_dim):
                raise ValueError(f"rope_dim={dr} must be <= index_head_dim={index_head_dim} (the indexer rotates "
                                 f"its last rope_dim features too)")
            self.compressor.indexer = BlockIndexer(d, rq, num_heads=index_heads, head_dim=index_head_dim, ratio=m,
                                                   rope_dim=dr, rope_base=rope_base, eps=eps, **f)

    def extra_repr(self) -> str:
        extra = f", index_topk={self.index_topk}" if self.kind == "csa" else ""
        return (f"kind={self.kind!r}, compress_ratio={self.compress_ratio}, sliding_window={self.sliding_window}, "
                f"num_heads={self.num_heads}, head_dim={self.head_dim}{extra}")

    def _check(self, x, cache) -> None:
        check_tensor("x", x, floating=True, ndim=3)
        if x.shape[-1] != self.d_model:
            raise ValueError(f"x must be (B, L, d_model={self.d_model}), got shape {shape_of(x)}")
        weight = self.kv_proj.weight
        if x.dtype != weight.dtype:
            raise TypeError(f"x must have the layer's dtype {weight.dtype}, got {x.dtype}; convert one of them "
                            f"(x.to({weight.dtype}) or layer.to({x.dtype}))")
        check_on_device("x", x, weight.device, of="the layer")
        check_finite("x", x)
        if cache is None:
            return
        if not isinstance(cache, CompressedKVCache):
            raise TypeError(f"cache must be an attn_lib.compressed.CompressedKVCache, got {type(cache).__name__}")
        if cache.window != self.sliding_window:
            raise ValueError(f"cache.window must be the layer's sliding_window={self.sliding_window}, got "
                             f"{cache.window}")
        if cache.keys is not None:
            if cache.keys.shape[0] != x.shape[0]:
                raise ValueError(f"x holds {x.shape[0]} sequences but the cache {cache.keys.shape[0]}; expected "
                                 f"one cache per batch of sequences")
            check_on_device("cache", cache.keys, x.device, of="x")

    def _blocks(self, x, q_resid, pos, states) -> tuple[torch.Tensor, torch.Tensor]:
        """The compressed blocks (B, T, E) and which ones each query reads (B, L, T): every complete one (HCA) or
        the indexer's top-k of them (CSA)."""
        states = states or {"kv": None, "index": None}
        blocks = self.compressor(x, states["kv"])  # (B, T, E)
        far = visible_blocks(pos, blocks.shape[1], self.compress_ratio).expand(x.shape[0], -1, -1)  # (B, L, T)
        if self.kind == "csa":
            ix = self.compressor.indexer
            index_keys = ix(x, states["index"])  # (B, T, d_I)
            far = select_blocks(ix.scores(x, q_resid, pos, index_keys), far, self.index_topk)
        return blocks, far

    def keys_read(self, x: torch.Tensor) -> torch.Tensor:
        """How many keys each query of x reads (no cache): its window keys plus its chosen compressed blocks.

        Args:
            x: (B, L, d_model) floating, the weights' dtype and device.

        Returns:
            int64 (B, L): min(W, t + 1) + (CSA: min(k, ⌊(t+1)/m⌋); HCA: ⌊(t+1)/m⌋) for the query at position t
            (what :func:`compressed_attention_cost` counts at S = t + 1); the sink is not a key.

        Raises:
            TypeError / ValueError: as :meth:`forward`.
        """
        self._check(x, None)
        B, L, _ = x.shape
        if x.numel() == 0:
            return torch.zeros(B, L, dtype=torch.long, device=x.device)
        pos = torch.arange(L, device=x.device)
        near = window_mask_from_positions(pos, pos, window=self.sliding_window)  # (L, L)
        _, far = self._blocks(x, self.q_a_norm(self.q_a_proj(x)), pos, None)  # (B, L, T)
        return near.sum(-1).expand(B, L) + far.sum(-1)

    def forward(self, x: torch.Tensor, *, cache: CompressedKVCache | None = None) -> torch.Tensor:
        """Causal CSA or HCA over x, continuing the tokens in ``cache``.

        Args:
            x: (B, L, d_model) floating, the weights' dtype and device.
            cache: a :class:`CompressedKVCache` of window = sliding_window, or None; the new tokens sit at
                positions cache.seq_len .. cache.seq_len + L - 1 and are appended.

        Returns:
            (B, L, d_model) in the weights' dtype; empty when L = 0 or B = 0 (the cache is then left as it is).

        Raises:
            TypeError: x not a floating tensor or not of the weights' dtype; cache not a CompressedKVCache.
            ValueError: x not (B, L, d_model) or on another device; NaN or inf in x; a cache of another window,
                batch or device, or of another layer (one cache per layer).
        """
        self._check(x, cache)
        B, L, _ = x.shape
        H, E = self.num_heads, self.head_dim
        if x.numel() == 0:  # no token or no sequence: an empty output, the cache untouched
            return self.o_b_proj(x.new_zeros(B, L, self.o_b_proj.in_features))
        if cache is not None:
            claim_cache(cache, self)
        past = 0 if cache is None else cache.seq_len
        pos = torch.arange(past, past + L, device=x.device)  # (L,)

        q_resid = self.q_a_norm(self.q_a_proj(x))  # (B, L, r_q)   c_Q
        q = self.q_b_norm(self.q_b_proj(q_resid).view(B, L, H, E).transpose(1, 2))  # (B, H, L, E)
        q = _rope_tail(q, pos, self.rope_dim, self.rope_base)
        kv = _rope_tail(self.kv_norm(self.kv_proj(x))[:, None], pos, self.rope_dim, self.rope_base)  # (B, 1, L, E)

        # the window: raw keys (= values) at distance < W
        if cache is None:
            keys, k_pos = kv, pos
        else:
            keys, k_pos = cache.update_window(kv)  # (B, 1, W + L, E), (W + L,)
        near = window_mask_from_positions(pos, k_pos, window=self.sliding_window)  # (L, S): 0 <= t - s < W

        blocks, far = self._blocks(x, q_resid, pos, None if cache is None else cache.states)  # (B, T, E), (B, L, T)

        # one softmax over [window keys | chosen blocks | the head's sink]; the sink is a zero key/value whose
        # logit the float mask sets to sinks[h]
        S, T = keys.shape[2], blocks.shape[1]
        values = torch.cat([keys, blocks[:, None], keys.new_zeros(B, 1, 1, E)], dim=2)  # (B, 1, S + T + 1, E)
        keep = torch.cat([near.expand(B, L, S), far], dim=-1)[:, None]  # (B, 1, L, S + T)
        bias = torch.zeros(keep.shape, dtype=x.dtype, device=x.device).masked_fill(~keep, float("-inf"))
        sink = self.sinks.to(x.dtype)[None, :, None, None].expand(B, H, L, 1)
        mask = torch.cat([bias.expand(B, H, L, S + T), sink], dim=-1)  # (B, H, L, S + T + 1)
        out, _ = scaled_dot_product_attention(q, values, values, mask, scale=E ** -0.5)  # (B, H, L, E)

        out = _rope_tail(out, -pos, self.rope_dim, self.rope_base)  # RoPE at -t: the values' rotation, undone
        g = self.o_groups
        grouped = out.transpose(1, 2).reshape(B, L, g, H * E // g)  # (B, L, g, H·E/g)
        w = self.o_a_proj.weight.view(g, -1, H * E // g)  # (g, d_g, H·E/g)
        mixed = torch.einsum("blgi,goi->blgo", grouped, w).reshape(B, L, -1)  # (B, L, g·d_g)   per-group W_O1
        return self.o_b_proj(mixed)  # (B, L, d_model)

    @classmethod
    def from_hf(cls, module: nn.Module) -> "CompressedAttention":
        """A copy of transformers' ``DeepseekV4Attention`` of a CSA or HCA layer (``model.layers[i].self_attn``).

        Args:
            module: a ``DeepseekV4Attention`` whose ``layer_type`` is "compressed_sparse_attention" or
                "heavily_compressed_attention" (its weights' dtype: float32, float64, ...).

        Returns:
            a :class:`CompressedAttention` with its sizes and a copy of its weights, in its dtype.

        Raises:
            TypeError: not a DeepseekV4Attention. ValueError: a sliding-only layer (no compressor); a compressed
                branch whose RoPE is not the default one (YaRN: not modelled).
        """
        if type(module).__name__ != "DeepseekV4Attention" or not hasattr(module, "config"):
            raise TypeError(f"from_hf expects transformers' DeepseekV4Attention, got {type(module).__name__}")
        if module.compressor is None:
            raise ValueError(f"from_hf expects a CSA or HCA layer; layer {module.layer_idx} is "
                             f"{module.layer_type!r} (no compressor)")
        cfg = module.config
        rope = cfg.rope_parameters["compress"]
        if rope.get("rope_type", "default") != "default":
            raise ValueError(f"the compressed branch's RoPE must be the default one, got rope_type="
                             f"{rope.get('rope_type')!r} (YaRN is not modelled)")
        csa = hasattr(module.compressor, "indexer")
        ix = module.compressor.indexer if csa else None
        new = cls(cfg.hidden_size, module.num_heads, module.head_dim, q_lora_rank=cfg.q_lora_rank,
                  kind="csa" if csa else "hca", compress_ratio=module.compressor.compress_rate,
                  sliding_window=module.sliding_window, rope_dim=cfg.qk_rope_head_dim, o_groups=cfg.o_groups,
                  o_lora_rank=cfg.o_lora_rank, rope_base=float(rope["rope_theta"]), eps=cfg.rms_norm_eps,
                  index_heads=ix.num_heads if csa else None, index_head_dim=ix.head_dim if csa else None,
                  index_topk=ix.index_topk if csa else None, dtype=module.kv_proj.weight.dtype)
        state = {k.replace("scorer.weights_proj", "weights_proj"): v for k, v in module.state_dict().items()}
        new.load_state_dict(state)
        new.train(module.training)
        return new


def compressed_attention_cost(seq_len: int, *, kind: str, compress_ratio: int, sliding_window: int = 128,
                              index_topk: int = 512, head_dim: int = 512, index_head_dim: int = 128,
                              bytes_per_element: float = 2, index_bytes_per_element: float = 2) -> dict[str, float]:
    """Keys read by one query and cache bytes per token of one CSA or HCA layer at context length S = seq_len.

    The query at position S - 1 reads min(W, S) window keys and, of the T = ⌊S/m⌋ complete blocks, all T (HCA) or
    min(k, T) (CSA); the CSA indexer also scores all T blocks with its d_I-feature keys. The cache holds min(W, S)
    window keys and T entries of E features (one head, K = V), plus, for CSA, T indexer keys of d_I features
    (the partly filled last block, < m tokens, is left out). A dense MQA layer with one K = V head of E features
    would read S keys and hold S·E elements.

    Takes no tensors: ints for the sizes (S, m, W, k, E, d_I) and floats for the bytes per element (e; e_I of the
    indexer's keys). Defaults: DeepSeek-V4's config (W 128, k 512, E 512, d_I 128), bf16 everywhere.

    Returns:
        {"window_keys", "compressed_keys", "keys_read", "index_keys_scored", "kv_bytes", "kv_bytes_per_token",
        "dense_keys_read", "dense_kv_bytes_per_token"}: floats.

    Raises:
        TypeError: a size not an int, kind not a str, a bytes_per_element not a number.
        ValueError: a size < 1; kind not "csa"/"hca"; a bytes_per_element <= 0 or not finite.

    Source: the course's own count (notebook 13) of DeepSeek-AI 2026, DeepSeek-V4 report §2.3 (CSA and HCA as
    transformers' ``DeepseekV4Attention`` computes them).
    """
    S, m, W, k, E, dI = (_pos(n, v) for n, v in (
        ("seq_len", seq_len), ("compress_ratio", compress_ratio), ("sliding_window", sliding_window),
        ("index_topk", index_topk), ("head_dim", head_dim), ("index_head_dim", index_head_dim)))
    if not isinstance(kind, str):
        raise TypeError(f"kind must be a str, 'csa' or 'hca', got {type(kind).__name__}")
    kind = check_choice("kind", kind, KINDS)
    e, eI = (check_number(n, v, positive=True) for n, v in (("bytes_per_element", bytes_per_element),
                                                           ("index_bytes_per_element", index_bytes_per_element)))
    T = S // m
    window = min(W, S)
    chosen = min(k, T) if kind == "csa" else T
    scored = T if kind == "csa" else 0
    kv_bytes = (window + T) * E * e + scored * dI * eI
    return {"window_keys": float(window), "compressed_keys": float(chosen), "keys_read": float(window + chosen),
            "index_keys_scored": float(scored), "kv_bytes": float(kv_bytes), "kv_bytes_per_token": kv_bytes / S,
            "dense_keys_read": float(S), "dense_kv_bytes_per_token": float(E * e)}
