"""Block-sparse attention: MoBA's routing to blocks and NSA's three gated branches (notebook 13).

Two designs that let a query read a few **blocks** of keys instead of all of them:

- **MoBA** (Lu et al. 2025, "MoBA: Mixture of Block Attention for Long-Context LLMs", arXiv 2502.13189, section
  2.2): the keys are cut into blocks of ``block_size``; query q scores block i by ``q · mean(K_i)`` (the mean of
  its keys), keeps the ``topk`` best blocks and attends to their keys only. Causality (section 2.2, "Causality"):
  a query never routes to a block after its own, and always reads its own (current) block, causally masked. Each
  head routes on its own.
- **NSA** (Yuan et al. 2025, "Native Sparse Attention", arXiv 2502.11089, section 3): three branches, each plain
  attention over its own keys, mixed by gates g ∈ [0, 1] per query and head (eq. 5):
  ``o_t = g_cmp · Attn(q_t, K_cmp, V_cmp) + g_slc · Attn(q_t, K_slc, V_slc) + g_win · Attn(q_t, K_win, V_win)``.
  *Compression* (section 3.3.1, eq. 7): each block of ``block_len`` l keys, taken every ``stride`` d, becomes one
  key by a learned map φ (here a linear map of the block's keys plus a learned intra-block position, :class:`
  NSACompressor`); only complete blocks count. *Selection* (section 3.3.2, eqs. 8-11): the compressed branch's
  attention weights score the selection blocks of ``select_size`` l' (a block's score: the weights of the
  compressed blocks overlapping it), summed over the heads of a key/value group (eq. 10: the group shares its
  choice), and the ``num_select`` best blocks are read in full; the first block and the two most recent are always
  among them (the paper's setting in section 4.1). *Sliding window* (section 3.3.3): the last ``window`` keys.
  The paper gives each branch its own keys and values; here the three share K and V (one cache), a simplification.

Both are written twice: a float64 reference that loops over queries and heads, sets of keys spelled out
(:func:`moba_reference`, :func:`nsa_reference`), and the batched version (:func:`moba_attention`,
:class:`NativeSparseAttention`) that builds one bool mask per branch and calls
:func:`attn_lib.attention.scaled_dot_product_attention`; tests/test_block_sparse.py proves them equal in float64, and
decoding token by token (a query attending to the cached keys) equal to the full forward.

:func:`keys_read_per_query` counts the keys one decoding query reads in each design of notebook 13.

Shapes: the legend of :mod:`attn_lib.attention`: query (B, H, L, E), key (B, Hkv, S, E), value (B, Hkv, S, Ev);
the L queries are the LAST L of the S positions (a prefill has L = S, a decoding step L = 1).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from attn_lib._checks import check_int, check_number, check_qkv, check_tensor, shape_of
from attn_lib.attention import scaled_dot_product_attention
from attn_lib.kv_cache import KVCache

__all__ = ["moba_block_choice", "moba_attention", "moba_reference", "NSACompressor", "NativeSparseAttention",
           "NSACache", "nsa_reference", "keys_read_per_query"]


def _check_inputs(query, key, value):
    check_qkv(query, key, value, enable_gqa=True)
    if query.dim() != 4 or key.dim() != 4:
        raise ValueError(f"query must be (B, H, L, E) and key/value (B, Hkv, S, E), got query {shape_of(query)}, "
                         f"key {shape_of(key)}")
    if query.shape[0] != key.shape[0]:
        raise ValueError(f"query and key must share the batch B, got {query.shape[0]} and {key.shape[0]}")
    L, S = query.shape[-2], key.shape[-2]
    if L > S:
        raise ValueError(f"the L={L} queries must be the last L of the S={S} key positions (L <= S), got L > S")
    return L, S


# ------------------------------------------------------------------------------------------------------------ MoBA
def moba_block_choice(query: torch.Tensor, key: torch.Tensor, *, block_size: int, topk: int) -> torch.Tensor:
    """The blocks each query reads in MoBA: bool (B, H, L, n_blocks), n_blocks = ceil(S / block_size).

    Query t (position S - L + i) scores each earlier block j by q_t · mean(K_j), forces its own block
    (score +inf) and blocks the later ones (-inf), then keeps the ``topk`` best: its own and topk - 1 others.

    Args:
        query: (B, H, L, E); key: (B, H, S, E) floating (one key head per query head). block_size, topk: ints >= 1.

    Raises:
        TypeError / ValueError: as :func:`moba_attention`.

    Source: Lu et al. 2025 (MoBA), section 2.2, eqs. 4-6 and "Causality".
    """
    block_size = check_int("block_size", block_size, minimum=1)
    topk = check_int("topk", topk, minimum=1)
    check_tensor("query", query, floating=True, ndim=4)
    check_tensor("key", key, floating=True, ndim=4)
    B, H, L, E = query.shape
    S = key.shape[-2]
    n = -(-S // block_size)
    padded = torch.nn.functional.pad(key, (0, 0, 0, n * block_size - S))
    counts = torch.full((n,), float(block_size), dtype=key.dtype, device=key.device)
    counts[-1] = S - (n - 1) * block_size
    means = padded.view(B, key.shape[1], n, block_size, E).sum(-2) / counts[:, None]  # (B, H, n, E)
    gate = query @ means.transpose(-1, -2)  # (B, H, L, n): q · mean(K_j)
    own = torch.arange(S - L, S, device=query.device) // block_size  # each query's block
    j = torch.arange(n, device=query.device)
    gate = gate.masked_fill(j > own[:, None], float("-inf")).masked_fill(j == own[:, None], float("inf"))
    top = gate.topk(min(topk, n), dim=-1)
    return torch.zeros_like(gate, dtype=torch.bool).scatter(-1, top.indices, top.values > float("-inf"))


def moba_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, *, block_size: int, topk: int,
                   scale: float | None = None) -> torch.Tensor:
    """MoBA: each query attends, causally, to the keys of the ``topk`` blocks it routes to (one mask, one SDPA).

    Args:
        query: (B, H, L, E), the last L of the S positions; key: (B, H, S, E); value: (B, H, S, Ev); floating,
            one dtype. block_size: keys per block. topk: blocks read per query (its own included). scale: default
            1/sqrt(E).

    Returns:
        (B, H, L, Ev) in the inputs' dtype.

    Raises:
        TypeError: not floating tensors, dtypes differ, a size not an int. ValueError: not 4-D, shapes that
            disagree, L > S, key heads other than H, NaN/inf, block_size or topk < 1.

    Source: Lu et al. 2025 (MoBA), section 2.2; equal in float64 to :func:`moba_reference`.
    """
    L, S = _check_inputs(query, key, value)
    if key.shape[1] != query.shape[1]:
        raise ValueError(f"MoBA routes per head: key must have the query's H={query.shape[1]} heads, got "
                         f"{key.shape[1]} (repeat the key/value heads first)")
    chosen = moba_block_choice(query, key, block_size=block_size, topk=topk)  # (B, H, L, n)
    block_of_key = torch.arange(S, device=key.device) // block_size
    pos = torch.arange(S - L, S, device=key.device)
    causal = torch.arange(S, device=key.device)[None, :] <= pos[:, None]  # (L, S)
    keep = chosen[..., block_of_key] & causal  # (B, H, L, S): the keys of the chosen blocks, causal
    return scaled_dot_product_attention(query, key, value, keep, scale=scale)[0]


@torch.no_grad()
def moba_reference(query, key, value, *, block_size: int, topk: int, scale: float | None = None) -> torch.Tensor:
    """MoBA spelled out, one query and head at a time, in float64 (the test's reference; slow).

    Same arguments as :func:`moba_attention`: query (B, H, L, E), key (B, H, S, E), value (B, H, S, Ev); the
    inputs are converted to float64, and the result (B, H, L, Ev) is float64.

    Raises:
        TypeError / ValueError: as :func:`moba_attention`'s input checks (types, shapes, L > S, NaN/inf).

    Source: Lu et al. 2025 (MoBA), section 2.2: blocks of block_size keys, gate q · mean-pooled block keys,
    top-k blocks, the current block always routed, no future block.
    """
    L, S = _check_inputs(query, key, value)
    q, k, v = (t.double() for t in (query, key, value))
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    out = torch.zeros(*q.shape[:-1], v.shape[-1], dtype=torch.float64)
    for b in range(q.shape[0]):
        for h in range(q.shape[1]):
            for i in range(L):
                t = S - L + i
                own = t // block_size
                past = [(float(q[b, h, i] @ k[b, h, j * block_size:(j + 1) * block_size].mean(0)), j)
                        for j in range(own)]
                blocks = [own] + [j for _, j in sorted(past, reverse=True)[: topk - 1]]
                keys = [s for s in range(t + 1) if s // block_size in blocks]
                w = torch.softmax(torch.stack([q[b, h, i] @ k[b, h, s] for s in keys]) * scale, 0)
                out[b, h, i] = w @ v[b, h, keys]
    return out


# ------------------------------------------------------------------------------------------------------------ NSA
class NSACompressor(nn.Module):
    """NSA's φ: one key (or value) per block of ``block_len`` keys, every ``stride`` positions.

    φ(K[i·d : i·d + l]) = W · vec(K[i·d : i·d + l] + P): the block's keys plus a learned intra-block position
    P (l, E), flattened and mapped by a linear W (l·E -> E). Only complete blocks are compressed.

    Args:
        block_len: l. stride: d (<= l). head_dim: E. dtype: the weights' dtype.

    ``forward(x)`` maps x (..., S, E) to (..., n, E), n = max(0, (S - l) // d + 1), in the weights' dtype.

    Raises:
        TypeError: a size not an int. ValueError: a size < 1; stride > block_len; x not (..., S, head_dim).

    Source: Yuan et al. 2025 (NSA), section 3.3.1, eq. 7 (φ "an MLP with intra-block position encoding"; here one
    linear layer).
    """

    def __init__(self, block_len: int, stride: int, head_dim: int, *, dtype: torch.dtype | None = None) -> None:
        super().__init__()
        self.block_len = check_int("block_len", block_len, minimum=1)
        self.stride = check_int("stride", stride, minimum=1, maximum=block_len)
        self.head_dim = check_int("head_dim", head_dim, minimum=1)
        self.position = nn.Parameter(torch.randn(block_len, head_dim, dtype=dtype) * 0.1)
        self.proj = nn.Linear(block_len * head_dim, head_dim, bias=False, dtype=dtype)

    def num_blocks(self, seq_len: int) -> int:
        """The complete blocks among seq_len keys: max(0, (seq_len - l) // d + 1)."""
        return max(0, (seq_len - self.block_len) // self.stride + 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        check_tensor("x", x, floating=True, min_ndim=2)
        if x.shape[-1] != self.head_dim:
            raise ValueError(f"x must be (..., S, head_dim={self.head_dim}), got {shape_of(x)}")
        n = self.num_blocks(x.shape[-2])
        if n == 0:
            return x.new_zeros(*x.shape[:-2], 0, self.head_dim)
        blocks = x[..., : (n - 1) * self.stride + self.block_len, :].unfold(-2, self.block_len, self.stride)
        blocks = blocks.transpose(-1, -2) + self.position  # (..., n, l, E)
        return self.proj(blocks.flatten(-2))


class NSACache:
    """An NSA layer's cache: the raw keys and values (``raw``, a :class:`~attn_lib.kv_cache.KVCache`, read by the
    selection and window branches) and the compressed ones (``compressed``), which grow by one entry each time a
    block of l keys completes (every d tokens).

    ``raw`` holds key (B, Hkv, S, E) and value (B, Hkv, S, E); ``compressed`` (B, Hkv, n, E) each, n = the complete
    blocks; one floating dtype.

    Raises:
        TypeError / ValueError: as :class:`~attn_lib.kv_cache.KVCache`, when :class:`NativeSparseAttention` fills it.

    Source: Yuan et al. 2025 (NSA), section 3.3 (the three branches' keys); the course's own cache (notebook 13).
    """

    def __init__(self) -> None:
        self.raw = KVCache()
        self.compressed = KVCache()

    @property
    def seq_len(self) -> int:
        return self.raw.seq_len

    def nbytes(self) -> int:
        return self.raw.nbytes() + self.compressed.nbytes()


class NativeSparseAttention(nn.Module):
    """NSA's attention (after the q, k, v projections): compressed, selected and sliding-window branches, gated.

    Args:
        head_dim: E (keys and values). block_len, stride: l and d of the compression. select_size: l' (a multiple
            of d, >= l). num_select: n, selected blocks per query (>= 3: the first and the two latest always).
            window: w, keys of the sliding window. dtype: the compressors' dtype.

    Submodules: ``compress_k``, ``compress_v`` (:class:`NSACompressor`).

    Raises:
        TypeError: a size not an int. ValueError: a size < 1; select_size not a multiple of stride or < block_len;
            num_select < 3.

    Source: Yuan et al. 2025 (NSA), section 3 (eqs. 5-11); tests/test_block_sparse.py: equal to
    :func:`nsa_reference` in float64, decoding equal to the full forward.
    """

    def __init__(self, head_dim: int, *, block_len: int = 8, stride: int = 4, select_size: int = 8,
                 num_select: int = 4, window: int = 8, dtype: torch.dtype | None = None) -> None:
        super().__init__()
        self.compress_k = NSACompressor(block_len, stride, head_dim, dtype=dtype)
        self.compress_v = NSACompressor(block_len, stride, head_dim, dtype=dtype)
        self.block_len, self.stride, self.head_dim = block_len, stride, head_dim
        self.select_size = check_int("select_size", select_size, minimum=1)
        if select_size % stride or select_size < block_len:
            raise ValueError(f"select_size must be a multiple of stride={stride} and >= block_len={block_len} "
                             f"(NSA's l' with d | l' and l <= l'), got {select_size}")
        self.num_select = check_int("num_select", num_select, minimum=3)
        self.window = check_int("window", window, minimum=1)

    def extra_repr(self) -> str:
        return (f"block_len={self.block_len}, stride={self.stride}, select_size={self.select_size}, "
                f"num_select={self.num_select}, window={self.window}")

    def branch_masks(self, scores_cmp: torch.Tensor, L: int, S: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The selected blocks' and the window's masks, bool (B, Hkv, L, S) and (L, S), from the compressed
        branch's attention weights (B, Hkv, L, n_cmp) summed over each group's heads."""
        d, l, ls = self.stride, self.block_len, self.select_size
        dev = scores_cmp.device
        n_sel = -(-S // ls)
        start = torch.arange(scores_cmp.shape[-1], device=dev) * d  # compressed block i covers [i·d, i·d + l)
        j0 = torch.arange(n_sel, device=dev) * ls
        overlap = (start[:, None] < j0 + ls) & (start[:, None] + l > j0)  # (n_cmp, n_sel)
        importance = scores_cmp @ overlap.to(scores_cmp.dtype)  # (B, Hkv, L, n_sel): eq. 9, overlapping weights
        pos = torch.arange(S - L, S, device=dev)
        own = pos // ls
        j = torch.arange(n_sel, device=dev)
        forced = (j == 0) | ((j <= own[:, None]) & (j >= own[:, None] - 1))  # the first and the two latest
        importance = importance.masked_fill(j > own[:, None], float("-inf")).masked_fill(forced, float("inf"))
        top = importance.topk(min(self.num_select, n_sel), dim=-1)  # eq. 11
        chosen = torch.zeros_like(importance, dtype=torch.bool).scatter(-1, top.indices, top.values > float("-inf"))
        s = torch.arange(S, device=dev)
        causal = s[None, :] <= pos[:, None]
        selected = chosen[..., s // ls] & causal
        window = causal & (s[None, :] > pos[:, None] - self.window)
        return selected, window

    def forward(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, gates: torch.Tensor, *,
                cache: NSACache | None = None, scale: float | None = None) -> torch.Tensor:
        """NSA over the last L positions: the three branches, mixed by ``gates``.

        Args:
            query: (B, H, L, E); key: (B, Hkv, S_new, E); value: (B, Hkv, S_new, E), Hkv dividing H (GQA: a
                group of H / Hkv heads shares one selection); gates: (B, H, L, 3) in [0, 1], the weights of the
                compressed, selected and window branches (the paper's sigmoid of an MLP of x). With a ``cache``
                the new keys are appended and the queries are the last L of all cached positions; without one
                L <= S_new and the queries are the last L of key's positions.
            cache: an :class:`NSACache`. scale: default 1/sqrt(E).

        Returns:
            (B, H, L, E) in the inputs' dtype.

        Raises:
            TypeError: not floating tensors, dtypes differ, cache not an NSACache. ValueError: shapes that disagree;
                E other than head_dim; gates not (B, H, L, 3) or outside [0, 1]; NaN/inf.
        """
        check_qkv(query, key, value, enable_gqa=True)
        check_tensor("gates", gates, floating=True, ndim=4)
        B, H, L, E = query.shape
        if E != self.head_dim or value.shape[-1] != self.head_dim:
            raise ValueError(f"query, key and value need head_dim={self.head_dim}, got query {shape_of(query)}, "
                             f"value {shape_of(value)}")
        if gates.shape != (B, H, L, 3):
            raise ValueError(f"gates must be (B, H, L, 3) = {(B, H, L, 3)}, got {shape_of(gates)}")
        if not bool(((gates >= 0) & (gates <= 1)).all()):
            raise ValueError("gates must lie in [0, 1] (a sigmoid's output), got values outside it")
        if cache is None:
            _check_inputs(query, key, value)
            k_cmp, v_cmp = self.compress_k(key), self.compress_v(value)
        else:
            if not isinstance(cache, NSACache):
                raise TypeError(f"cache must be an attn_lib.block_sparse.NSACache, got {type(cache).__name__}")
            done = self.compress_k.num_blocks(cache.seq_len)
            key, value = cache.raw.update(key, value)
            # the blocks completed by the new keys: compressed once, appended
            first = done * self.stride
            ck, cv = self.compress_k(key[..., first:, :]), self.compress_v(value[..., first:, :])
            if ck.shape[-2]:
                cache.compressed.update(ck, cv)
            k_cmp = cache.compressed.keys if cache.compressed.keys is not None else ck
            v_cmp = cache.compressed.values if cache.compressed.values is not None else cv
        L, S = _check_inputs(query, key, value)
        G = H // key.shape[1]
        pos = torch.arange(S - L, S, device=query.device)
        n_cmp = k_cmp.shape[-2]
        if n_cmp:  # compressed block i is visible once complete: i·d + l - 1 <= t
            seen = torch.arange(n_cmp, device=query.device) * self.stride + self.block_len - 1 <= pos[:, None]
            o_cmp, p_cmp = scaled_dot_product_attention(query, k_cmp, v_cmp, seen, scale=scale, enable_gqa=True)
        else:  # no complete block yet: the branch reads nothing
            o_cmp, p_cmp = torch.zeros_like(query), query.new_zeros(B, H, L, 0)
        group_scores = p_cmp.view(B, H // G, G, L, n_cmp).sum(2)  # eq. 10: the group's heads vote together
        selected, window = self.branch_masks(group_scores, L, S)
        o_slc = scaled_dot_product_attention(query, key, value, selected.repeat_interleave(G, dim=1), scale=scale,
                                             enable_gqa=True)[0]
        o_win = scaled_dot_product_attention(query, key, value, window, scale=scale, enable_gqa=True)[0]
        g = gates.to(query.dtype)
        return g[..., 0:1] * o_cmp + g[..., 1:2] * o_slc + g[..., 2:3] * o_win  # eq. 5


@torch.no_grad()
def nsa_reference(module: NativeSparseAttention, query, key, value, gates, *, scale: float | None = None):
    """NSA spelled out in float64, one query and head at a time (the test's reference; slow).

    Same arguments as :meth:`NativeSparseAttention.forward` without a cache (the module gives φ and the sizes;
    its compressors are applied to one block at a time, in float64). Returns (B, H, L, E) float64.

    Raises:
        TypeError / ValueError: as :func:`moba_attention`'s input checks (types, shapes, L > S, NaN/inf).

    Source: Yuan et al. 2025 (NSA): eq. 5 (gated sum), eq. 7 (compression of complete blocks), eqs. 8-11
    (importance from the compressed attention, shared by a GQA group, top-n blocks), section 3.3.3 (window).
    """
    L, S = _check_inputs(query, key, value)
    q, k, v, g = (t.double() for t in (query, key, value, gates))
    m = module
    ck = _copy_compressor(m.compress_k)
    cv = _copy_compressor(m.compress_v)
    B, H, _, E = q.shape
    G = H // k.shape[1]
    scale = 1 / math.sqrt(E) if scale is None else scale
    l, d, ls = m.block_len, m.stride, m.select_size

    def attend(qv, keys, vals):
        if len(keys) == 0:
            return torch.zeros(E, dtype=torch.float64), torch.zeros(0, dtype=torch.float64)
        w = torch.softmax(torch.stack([qv @ kk for kk in keys]) * scale, 0)
        return w @ torch.stack(list(vals)), w

    out = torch.zeros(B, H, L, E, dtype=torch.float64)
    for b in range(B):
        for i in range(L):
            t = S - L + i
            for hk in range(k.shape[1]):
                blocks = [c for c in range((t + 1 - l) // d + 1)] if t >= l - 1 else []  # complete: c·d + l - 1 <= t
                kc = [ck(k[b, hk, c * d:c * d + l][None])[0, 0] for c in blocks]
                vc = [cv(v[b, hk, c * d:c * d + l][None])[0, 0] for c in blocks]
                o_c, w_c, imp = {}, {}, {}
                for h in range(hk * G, (hk + 1) * G):
                    o_c[h], w_c[h] = attend(q[b, h, i], kc, vc)
                own = t // ls
                for j in range(own + 1):  # eq. 9-10: weights of the compressed blocks overlapping block j, group-summed
                    imp[j] = sum(float(w_c[h][n]) for h in w_c for n, c in enumerate(blocks)
                                 if c * d < (j + 1) * ls and c * d + l > j * ls)
                forced = {0, own, max(own - 1, 0)}
                rest = sorted((j for j in imp if j not in forced), key=lambda j: imp[j], reverse=True)
                chosen = forced | set(rest[: m.num_select - len(forced)])
                sel = [s for s in range(t + 1) if s // ls in chosen]
                win = list(range(max(0, t - m.window + 1), t + 1))
                for h in range(hk * G, (hk + 1) * G):
                    o_s, _ = attend(q[b, h, i], [k[b, hk, s] for s in sel], [v[b, hk, s] for s in sel])
                    o_w, _ = attend(q[b, h, i], [k[b, hk, s] for s in win], [v[b, hk, s] for s in win])
                    out[b, h, i] = g[b, h, i, 0] * o_c[h] + g[b, h, i, 1] * o_s + g[b, h, i, 2] * o_w
    return out


def _copy_compressor(c: NSACompressor) -> NSACompressor:
    new = NSACompressor(c.block_len, c.stride, c.head_dim, dtype=torch.float64)
    new.load_state_dict({n: p.detach().double() for n, p in c.state_dict().items()})
    return new


# ------------------------------------------------------------------------------------------------------------ counts
def keys_read_per_query(design: str, seq_len: int, **sizes) -> int:
    """Keys (or compressed entries) one decoding query at position seq_len - 1 reads, per head, in each design.

    - ``"dense"``: S. ``"window"``: min(S, window).
    - ``"moba"``: the tokens of min(topk, blocks) blocks: min(S, topk·block_size) (default 8 of 512, an illustrative
      setting: the MoBA paper varies block size and top-k).
    - ``"nsa"``: compressed entries (S - l) // d + 1, plus num_select blocks of select_size, plus the window (the
      paper's l 32, d 16, l' 64, n 16, w 512), overlaps not subtracted.
    - ``"dsa"``: the top-k tokens, min(S, topk) (default 2048); the indexer also scores all S keys, d_I features
      each, which this does not count.

    Raises:
        ValueError: an unknown design; TypeError / ValueError: a size not an int >= 1.

    Source: the course's own count (notebook 13), from each paper's default sizes.
    """
    S = check_int("seq_len", seq_len, minimum=1)
    defaults = {"dense": {}, "window": {"window": 4096}, "moba": {"block_size": 512, "topk": 8},
                "nsa": {"block_len": 32, "stride": 16, "select_size": 64, "num_select": 16, "window": 512},
                "dsa": {"topk": 2048}}
    if design not in defaults:
        raise ValueError(f"design must be one of {sorted(defaults)}, got {design!r}")
    cfg = {**defaults[design], **sizes}
    for n, v in cfg.items():
        check_int(n, v, minimum=1)
    if design == "dense":
        return S
    if design == "window":
        return min(S, cfg["window"])
    if design == "moba":
        return min(S, cfg["topk"] * cfg["block_size"])
    if design == "dsa":
        return min(S, cfg["topk"])
    n_cmp = max(0, (S - cfg["block_len"]) // cfg["stride"] + 1)
    return n_cmp + min(S, cfg["num_select"] * cfg["select_size"]) + min(S, cfg["window"])
