"""Context parallelism: ring attention and Ulysses across processes with ``torch.distributed`` (gloo, loopback).

Shape legend (as :mod:`attn_lib.attention`): B batch, H heads, L local queries (this process's shard), S the
whole sequence, E head_dim of query and key, Ev head_dim of value; W processes (the world size), r this
process's rank.

Each of W processes holds a shard of the sequence: its queries, keys and values for some positions.

- **Ring attention** keeps the queries in place and passes the key/value blocks around a ring: at step s,
  rank r holds the block of rank (r - s) mod W, attends to it (a partial output and log-sum-exp), merges it
  into its running result with notebook 09's merge (:func:`attn_lib.tiled.merge_partials`) and sends the block
  on to rank r + 1. After W steps every query has seen every key. The backward pass sends the blocks around
  again, with their gradients dK, dV travelling with them, and one last hop brings each block's gradient home.
- With a causal mask and contiguous shards the last rank does W times the work of the first. **Zig-zag**
  sharding cuts the sequence into 2W chunks and gives rank r chunks r and 2W - 1 - r: every rank then gets
  the same amount of work (one early chunk, one late one).
- **Ulysses** trades a sequence shard for a head shard with an all-to-all: after it, each rank holds all S
  positions of H / W heads, runs ordinary attention, and a second all-to-all sends the outputs back.

Everything is exact: in float64 the results equal one process's attention (tests/test_ring.py).
:func:`run_processes` starts the W processes (``torch.multiprocessing``'s spawn on 127.0.0.1, a free port),
bounds them in time, reports an error raised in any of them, and leaves none running.

Source: Liu, Zaharia, Abbeel, "Ring Attention with Blockwise Transformers for Near-Infinite Context" (2023),
sections 3-4; Brandon et al., "Striped Attention" (2023) and the zig-zag layout of Llama 3's context parallelism
(Dubey et al., "The Llama 3 Herd of Models", 2024, section 3.3.2); Jacobs et al., "DeepSpeed Ulysses" (2023),
section 3.
"""

from __future__ import annotations

import math
import os
import queue as queue_module
import socket
import sys
import time
import traceback
from datetime import timedelta

import torch
import torch.distributed as dist

from attn_lib._checks import check_bool, check_choice, check_int, check_number, check_tensor, shape_of
from attn_lib._tiling import BLOCK_K, BLOCK_Q, _prepare
from attn_lib.tiled import _tiled_backward, merge_partials, tiled_attention

__all__ = [
    "LAYOUTS", "shard_positions", "ring_holders", "ring_work", "ring_step", "ring_attention", "ulysses_attention",
    "ring_bytes", "ulysses_bytes", "run_processes", "compare_worker",
]

LAYOUTS = ("contiguous", "zigzag")


# ----------------------------------------------------------------------------------------------
# who holds what
# ----------------------------------------------------------------------------------------------
def shard_positions(seq_len: int, world_size: int, rank: int, layout: str = "zigzag") -> torch.Tensor:
    """The sequence positions rank ``rank`` holds, as an (L,) int64 tensor in increasing order.

    ``contiguous``: ``torch.arange(S).tensor_split(W)[rank]``. ``zigzag``: the sequence cut into 2W chunks
    (``tensor_split``, sizes differ by at most one), rank r holding chunks r and 2W - 1 - r.

    Args:
        seq_len: S >= world_size (int). world_size: W >= 1 (int). rank: 0 <= rank < W (int).
        layout: ``"contiguous"`` or ``"zigzag"`` (str).

    Returns:
        (L,) int64 tensor, L >= 1.

    Raises:
        TypeError: a non-int size. ValueError: world_size < 1, a rank outside 0..W-1, a world size larger than
            the sequence (some process would hold nothing), an unknown layout.

    Source: Liu et al. (2023), "Ring Attention", section 3 (contiguous blocks); Llama 3 (Dubey et al., 2024),
    section 3.3.2 (2W chunks, rank i holding chunks i and 2W - 1 - i, for load balance).
    """
    world_size = check_int("world_size", world_size, minimum=1)
    seq_len = check_int("seq_len", seq_len, minimum=1)
    rank = check_int("rank", rank, minimum=0, maximum=world_size - 1)
    check_choice("layout", layout, LAYOUTS)
    if world_size > seq_len:
        raise ValueError(f"world_size {world_size} is larger than the sequence (seq_len {seq_len}): some process "
                         "would hold no token; use at most seq_len processes")
    pos = torch.arange(seq_len)
    if layout == "contiguous":
        return pos.tensor_split(world_size)[rank]
    chunks = pos.tensor_split(2 * world_size)
    return torch.cat([chunks[rank], chunks[2 * world_size - 1 - rank]])


def ring_holders(world_size: int) -> torch.Tensor:
    """(W, W) int64: entry [s, r] is the rank whose key/value block rank r holds at ring step s, (r - s) mod W.

    Raises:
        TypeError: world_size not an int. ValueError: world_size < 1.

    Source: Liu et al. (2023), "Ring Attention", Algorithm 1 (each host sends its block to the next).
    """
    W = check_int("world_size", world_size, minimum=1)
    return (torch.arange(W)[None, :] - torch.arange(W)[:, None]) % W


def ring_work(seq_len: int, world_size: int, layout: str = "zigzag", *, is_causal: bool = True) -> torch.Tensor:
    """(W,) int64: the (query, key) pairs each rank scores over the whole ring (the visible ones when causal).

    Raises:
        TypeError, ValueError: as :func:`shard_positions`; is_causal not a bool.

    Source: the course's own count; the imbalance it shows is Brandon et al. (2023), "Striped Attention", section 3.
    """
    check_bool("is_causal", is_causal)
    out = []
    for r in range(check_int("world_size", world_size, minimum=1)):
        q = shard_positions(seq_len, world_size, r, layout)
        out.append(int((q + 1).sum()) if is_causal else len(q) * seq_len)
    return torch.tensor(out)


# ----------------------------------------------------------------------------------------------
# one step, and the blocks' forward and backward
# ----------------------------------------------------------------------------------------------
def _block_mask(q_pos, k_pos, is_causal: bool):
    """None (all visible), False (nothing visible) or the (L, Lk) bool mask."""
    if not is_causal:
        return None
    mask = k_pos[None, :] <= q_pos[:, None]
    if bool(mask.all()):
        return None
    if not bool(mask.any()):
        return False
    return mask


def ring_step(query, key, value, out, lse, *, q_pos, k_pos, is_causal: bool = True, scale: float | None = None):
    """One step of ring attention: attend to the key/value block just received and merge it into the running result.

    Args:
        query: (B, H, L, E) this rank's queries; key: (B, H, Lk, E), value: (B, H, Lk, Ev) the block it holds now.
        out: (B, H, L, Ev) and lse: (B, H, L) the running result (zeros and -inf before the first block).
        q_pos: (L,) and k_pos: (Lk,) int64, the sequence positions of the queries and of the block's keys.
        is_causal: key at position j visible to the query at position i iff j <= i. scale: default 1/sqrt(E).

    Returns:
        ``(out, lse)`` merged, same shapes and dtypes. A block no query may see changes nothing (not computed).

    Raises:
        TypeError: non-floating tensors or non-integer positions. ValueError: shapes that do not fit.

    Source: Liu et al. (2023), "Ring Attention", Algorithm 1 (the blockwise inner step); the merge of
    Milakov & Gimelshein (2018).
    """
    check_tensor("q_pos", q_pos, ndim=1)
    check_tensor("k_pos", k_pos, ndim=1)
    if q_pos.is_floating_point() or k_pos.is_floating_point():
        raise TypeError("q_pos and k_pos must be integer tensors of sequence positions")
    check_tensor("query", query, floating=True, ndim=4)
    check_tensor("key", key, floating=True, ndim=4)
    if len(q_pos) != query.shape[-2] or len(k_pos) != key.shape[-2]:
        raise ValueError(f"q_pos has {len(q_pos)} positions for {query.shape[-2]} queries, k_pos {len(k_pos)} for "
                         f"{key.shape[-2]} keys: one position per token")
    mask = _block_mask(q_pos, k_pos, check_bool("is_causal", is_causal))
    if mask is False:
        return out, lse
    o, s = tiled_attention(query, key, value, attn_mask=mask, scale=scale, return_lse=True)
    return merge_partials([out, o], [lse, s])


def _block_grads(q, k, v, out, lse, d_out, mask, scale):
    """dq, dk, dv of one (query shard, key block) pair given the FINAL out and lse: FlashAttention-2's backward."""
    p = _prepare(q, k, v, mask, False, "top_left", scale, False, None)
    n, G, L, _ = p.q.shape
    dq, dk, dv, *_ = _tiled_backward(p, out.reshape(n, G, L, -1), lse.reshape(n, G, L),
                                     d_out.reshape(n, G, L, -1), None, BLOCK_Q, BLOCK_K)
    return dq.reshape(q.shape), dk.reshape(k.shape), dv.reshape(v.shape)


# ----------------------------------------------------------------------------------------------
# communication
# ----------------------------------------------------------------------------------------------
def _global(group, r: int) -> int:
    return r if group is None else dist.get_global_rank(group, r)


def _count(stats, key: str, tensors) -> None:
    if stats is not None:
        stats[key] = stats.get(key, 0) + sum(t.numel() * t.element_size() for t in tensors)


def _pass_on(tensors, shapes, group, stats, key):
    """Send ``tensors`` to rank r + 1 and receive tensors of ``shapes`` from rank r - 1 (non-blocking pairs)."""
    W, r = dist.get_world_size(group), dist.get_rank(group)
    nxt, prv = _global(group, (r + 1) % W), _global(group, (r - 1) % W)
    bufs = [torch.empty(s, dtype=t.dtype) for t, s in zip(tensors, shapes)]
    reqs = [dist.isend(t.contiguous(), nxt, group=group, tag=i) for i, t in enumerate(tensors)]
    reqs += [dist.irecv(b, prv, group=group, tag=i) for i, b in enumerate(bufs)]
    for req in reqs:
        req.wait()
    _count(stats, key, tensors)
    return bufs


def _exchange(parts, shapes, group, stats, key):
    """All-to-all by pairs: send parts[j] to rank j, receive a tensor of shapes[i] from each rank i.

    gloo's own ``all_to_all`` needs equal sizes from every rank; shards of a sequence that does not divide
    evenly differ, so the exchange is written as non-blocking sends and receives.
    """
    W, r = dist.get_world_size(group), dist.get_rank(group)
    got = [None] * W
    got[r] = parts[r]
    reqs = []
    for j in range(W):
        if j != r:
            got[j] = torch.empty(shapes[j], dtype=parts[j].dtype)
            reqs.append(dist.isend(parts[j].contiguous(), _global(group, j), group=group, tag=100))
            reqs.append(dist.irecv(got[j], _global(group, j), group=group, tag=100))
    for req in reqs:
        req.wait()
    _count(stats, key, [parts[j] for j in range(W) if j != r])
    return got


# ----------------------------------------------------------------------------------------------
# ring attention
# ----------------------------------------------------------------------------------------------
class _RingAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, positions, is_causal, scale, group, stats):
        W, r = dist.get_world_size(group), dist.get_rank(group)
        B, H, L, _ = q.shape
        out = torch.zeros(B, H, L, v.shape[-1], dtype=q.dtype)
        lse = torch.full((B, H, L), -math.inf, dtype=q.dtype)
        k_cur, v_cur = k, v
        for s in range(W):
            src = (r - s) % W
            mask = _block_mask(positions[r], positions[src], is_causal)
            if mask is not False:
                o, l_ = tiled_attention(q, k_cur, v_cur, attn_mask=mask, scale=scale, return_lse=True)
                out, lse = merge_partials([out, o], [lse, l_])
                if stats is not None:
                    stats["scores"] = stats.get("scores", 0) + B * H * L * k_cur.shape[-2]
            if s < W - 1:  # send the block on; receive the one rank r - 1 held
                nxt_len = len(positions[(src - 1) % W])
                k_cur, v_cur = _pass_on([k_cur, v_cur], [(B, H, nxt_len, k.shape[-1]), (B, H, nxt_len, v.shape[-1])],
                                        group, stats, "forward")
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.positions, ctx.is_causal, ctx.scale, ctx.group, ctx.stats = positions, is_causal, scale, group, stats
        return out

    @staticmethod
    def backward(ctx, d_out):
        q, k, v, out, lse = ctx.saved_tensors
        positions, group, stats = ctx.positions, ctx.group, ctx.stats
        W, r = dist.get_world_size(group), dist.get_rank(group)
        B, H = q.shape[:2]
        dq = torch.zeros_like(q)
        k_cur, v_cur, dk_cur, dv_cur = k, v, torch.zeros_like(k), torch.zeros_like(v)
        for s in range(W):
            src = (r - s) % W
            mask = _block_mask(positions[r], positions[src], ctx.is_causal)
            if mask is not False:
                dq_b, dk_b, dv_b = _block_grads(q, k_cur, v_cur, out, lse, d_out, mask, ctx.scale)
                dq, dk_cur, dv_cur = dq + dq_b, dk_cur + dk_b, dv_cur + dv_b
            if s < W - 1:  # the block travels on with its gradients so far
                n = len(positions[(src - 1) % W])
                shapes = [(B, H, n, k.shape[-1]), (B, H, n, v.shape[-1])] * 2
                k_cur, v_cur, dk_cur, dv_cur = _pass_on([k_cur, v_cur, dk_cur, dv_cur], shapes, group, stats,
                                                        "backward")
        if W > 1:  # rank r now holds block r + 1's gradients: one more hop takes them home
            dk_cur, dv_cur = _pass_on([dk_cur, dv_cur], [k.shape, v.shape], group, stats, "backward")
        return dq, dk_cur, dv_cur, None, None, None, None, None


def _check_shards(query, key, value, seq_len, layout, group, name: str):
    for n, t in (("query", query), ("key", key), ("value", value)):
        check_tensor(n, t, floating=True, ndim=4)
    if key.shape != query.shape or value.shape[:-1] != query.shape[:-1] or len({query.dtype, key.dtype,
                                                                                  value.dtype}) != 1:
        raise ValueError(f"{name} needs query and key (B, H, L, E) and value (B, H, L, Ev) of one dtype with the "
                         f"same B, H, L; got {shape_of(query)}, {shape_of(key)}, {shape_of(value)}")
    if not dist.is_initialized():
        raise ValueError(f"{name} runs inside a torch.distributed process group: call "
                         "torch.distributed.init_process_group first (attn_lib.ring.run_processes does)")
    W, r = dist.get_world_size(group), dist.get_rank(group)
    positions = [shard_positions(seq_len, W, i, layout) for i in range(W)]
    if query.shape[-2] != len(positions[r]):
        raise ValueError(f"mismatched shards: rank {r} of {W} holds {query.shape[-2]} tokens, but the {layout} "
                         f"layout of seq_len {seq_len} gives it {len(positions[r])} (positions "
                         f"{positions[r][:4].tolist()}...)")
    return positions


def ring_attention(query, key, value, *, seq_len: int, is_causal: bool = False, layout: str = "zigzag",
                   scale: float | None = None, group=None, stats: dict | None = None) -> torch.Tensor:
    """Attention over a sequence sharded across the processes of a ``torch.distributed`` group, by passing
    key/value blocks around a ring. Differentiable (the backward pass is a second ring).

    Args:
        query: (B, H, L, E), key: (B, H, L, E), value: (B, H, L, Ev): this rank's shard, the positions
            :func:`shard_positions` gives it; floating, one dtype (float64 for the proofs).
        seq_len: S, the whole sequence's length (int). is_causal: causal over the global positions (bool).
        layout: ``"zigzag"`` or ``"contiguous"`` (str). scale: default 1/sqrt(E).
        group: the process group (None: the default one). stats: a dict, or None; bytes sent are added under
            ``"forward"`` and ``"backward"``, the scores computed under ``"scores"``.

    Returns:
        (B, H, L, Ev): this rank's rows of the attention output, in query's dtype.

    Raises:
        TypeError: non-floating tensors, a flag not a bool. ValueError: no process group; a world size larger
            than the sequence; mismatched shards (a local length that is not this rank's shard); shapes or
            dtypes that differ; an unknown layout.

    Source: Liu et al. (2023), "Ring Attention", Algorithm 1; the zig-zag layout of Llama 3's context
    parallelism (Dubey et al., 2024, section 3.3.2); the backward recomputes each block's probabilities from the
    final log-sum-exp as FlashAttention-2 (Dao, 2023), Algorithm 2.
    """
    check_bool("is_causal", is_causal)
    check_choice("layout", layout, LAYOUTS)
    positions = _check_shards(query, key, value, seq_len, layout, group, "ring_attention")
    if scale is not None:
        check_number("scale", scale, minimum=0.0)
    return _RingAttention.apply(query, key, value, positions, is_causal, scale, group, stats)


def ring_bytes(seq_len: int, world_size: int, rank: int, *, batch: int, heads: int, head_dim: int,
               value_dim: int | None = None, itemsize: int = 8, layout: str = "zigzag") -> dict:
    """Bytes rank ``rank`` sends in ring attention: forward t (S - n), backward t (2 S - n).

    t = B H (E + Ev) itemsize is one token's key and value; n is the shard of rank r + 1, the one block rank r
    never sends forward (it is the last it receives). The backward sends each block with its dK, dV (2 t per
    token) W - 1 times, then the gradients of block r + 1 (t n) home.

    Returns:
        ``{"forward": int, "backward": int}`` (no tensors).

    Raises:
        TypeError, ValueError: as :func:`shard_positions`; sizes < 1.

    Source: the course's own count of :func:`ring_attention`'s sends; Liu et al. (2023), section 3.
    """
    b, h, e = (check_int(n, x, minimum=1) for n, x in (("batch", batch), ("heads", heads), ("head_dim", head_dim)))
    ev = e if value_dim is None else check_int("value_dim", value_dim, minimum=1)
    itemsize = check_int("itemsize", itemsize, minimum=1)
    if world_size == 1:
        shard_positions(seq_len, 1, rank, layout)
        return {"forward": 0, "backward": 0}
    n = len(shard_positions(seq_len, world_size, (rank + 1) % world_size, layout))
    t = b * h * (e + ev) * itemsize
    return {"forward": t * (seq_len - n), "backward": t * (2 * seq_len - n)}


# ----------------------------------------------------------------------------------------------
# Ulysses
# ----------------------------------------------------------------------------------------------
def _all_to_all(x, send_dim, recv_dim, send_sizes, recv_sizes, group, stats, phase):
    """Split x along ``send_dim`` by ``send_sizes``, part j to rank j; concat what arrives along ``recv_dim``."""
    r = dist.get_rank(group)
    parts = list(x.split(send_sizes, dim=send_dim))
    shapes = []
    for i in range(len(recv_sizes)):
        s = list(x.shape)
        s[send_dim], s[recv_dim] = send_sizes[r], recv_sizes[i]
        shapes.append(tuple(s))
    return torch.cat(_exchange(parts, shapes, group, stats, phase), dim=recv_dim)


class _AllToAll(torch.autograd.Function):
    """The all-to-all of :func:`_all_to_all`; its backward is the same exchange with the two dims swapped."""

    @staticmethod
    def forward(ctx, x, send_dim, recv_dim, send_sizes, recv_sizes, group, stats):
        ctx.args = (send_dim, recv_dim, send_sizes, recv_sizes, group, stats)
        return _all_to_all(x, send_dim, recv_dim, send_sizes, recv_sizes, group, stats, "forward")

    @staticmethod
    def backward(ctx, grad):
        send_dim, recv_dim, send_sizes, recv_sizes, group, stats = ctx.args
        return (_all_to_all(grad, recv_dim, send_dim, recv_sizes, send_sizes, group, stats, "backward"),
                None, None, None, None, None, None)


def ulysses_attention(query, key, value, *, seq_len: int, is_causal: bool = False, layout: str = "contiguous",
                      scale: float | None = None, group=None, stats: dict | None = None) -> torch.Tensor:
    """Attention over a sharded sequence by trading sequence shards for head shards (an all-to-all), attending
    to the whole sequence for H / W heads, and trading back. Differentiable (the all-to-alls run in reverse).

    Args:
        query: (B, H, L, E), key: (B, H, L, E), value: (B, H, L, Ev): this rank's shard (positions from
            :func:`shard_positions`); H divisible by the world size W.
        seq_len, is_causal, layout, scale, group, stats: as :func:`ring_attention`.

    Returns:
        (B, H, L, Ev): this rank's rows of the output, in query's dtype.

    Raises:
        TypeError: non-floating tensors. ValueError: as :func:`ring_attention`, and H not divisible by W.

    Source: Jacobs et al., "DeepSpeed Ulysses" (2023), section 3 (all-to-all before and after attention).
    """
    check_bool("is_causal", is_causal)
    check_choice("layout", layout, LAYOUTS)
    positions = _check_shards(query, key, value, seq_len, layout, group, "ulysses_attention")
    W, H = dist.get_world_size(group), query.shape[1]
    if H % W:
        raise ValueError(f"ulysses_attention splits the {H} heads over {W} processes: H must be a multiple of the "
                         "world size")
    heads = [H // W] * W
    lens = [len(p) for p in positions]
    q, k, v = (_AllToAll.apply(t, 1, 2, heads, lens, group, stats) for t in (query, key, value))
    order = torch.cat(positions)  # the gathered tokens' positions; sort them into sequence order
    inv = torch.argsort(order)
    o = tiled_attention(q[:, :, inv], k[:, :, inv], v[:, :, inv], is_causal=is_causal, scale=scale)
    o = o[:, :, order]  # back to the gathered order: rank i's tokens first
    return _AllToAll.apply(o, 2, 1, lens, heads, group, stats)


def ulysses_bytes(seq_len: int, world_size: int, rank: int, *, batch: int, heads: int, head_dim: int,
                  value_dim: int | None = None, itemsize: int = 8, layout: str = "contiguous") -> dict:
    """Bytes rank r sends in :func:`ulysses_attention`, with h = H / W heads per rank and n its shard:
    forward b h (W - 1) n (2E + Ev) + b h (S - n) Ev, backward b h (W - 1) n Ev + b h (S - n) (2E + Ev), times
    the itemsize.

    Returns:
        ``{"forward": int, "backward": int}`` (no tensors).

    Raises:
        TypeError, ValueError: as :func:`shard_positions`; heads not divisible by world_size.

    Source: the course's own count; DeepSpeed Ulysses (Jacobs et al., 2023), section 3.2 (its communication
    volume).
    """
    b, H, e = (check_int(n, x, minimum=1) for n, x in (("batch", batch), ("heads", heads), ("head_dim", head_dim)))
    ev = e if value_dim is None else check_int("value_dim", value_dim, minimum=1)
    itemsize = check_int("itemsize", itemsize, minimum=1)
    n = len(shard_positions(seq_len, world_size, rank, layout))
    if H % world_size:
        raise ValueError(f"heads {H} must be a multiple of world_size {world_size}")
    h, W, S = H // world_size, world_size, seq_len
    return {"forward": itemsize * b * h * ((W - 1) * n * (2 * e + ev) + (S - n) * ev),
            "backward": itemsize * b * h * ((W - 1) * n * ev + (S - n) * (2 * e + ev))}


# ----------------------------------------------------------------------------------------------
# starting processes
# ----------------------------------------------------------------------------------------------
def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _entry(fn, rank, world_size, port, args, results, timeout):
    """One process: join the gloo group on loopback, run fn, report its result or its traceback."""
    try:
        torch.set_num_threads(1)
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo0" if sys.platform == "darwin" else "lo")
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world_size,
                                timeout=timedelta(seconds=timeout))
        try:
            results.put((rank, True, fn(rank, world_size, *args)))
        finally:
            dist.destroy_process_group()
    except BaseException:  # noqa: BLE001 - reported to the parent, which raises it
        results.put((rank, False, traceback.format_exc()))


def run_processes(fn, world_size: int, *args, timeout: float = 60.0) -> list:
    """Run ``fn(rank, world_size, *args)`` in ``world_size`` new processes joined in a gloo process group on
    127.0.0.1, and return their results in rank order.

    The processes are started with ``torch.multiprocessing``'s spawn (``fn`` and ``args`` must be picklable:
    a function defined in a module, not in a notebook). An error in any process stops all of them and is
    raised here with that process's traceback, rather than leaving the others waiting for it. Nothing keeps
    running after the call: stragglers are terminated, then killed.

    Args:
        fn: a module-level function (rank, world_size, *args) -> a picklable result (no tensors needed).
        world_size: W >= 1 (int). timeout: seconds for the whole run, including the process group's set-up
            (float > 0); also the group's timeout for each collective.

    Returns:
        A list of W results, ``[fn(0, W, *args), ..., fn(W - 1, W, *args)]``.

    Raises:
        TypeError: fn not callable, a non-int world size. ValueError: world_size < 1, timeout <= 0.
        RuntimeError: a process raised (its rank and traceback in the message) or died without a result.
        TimeoutError: the processes did not all finish within ``timeout`` seconds.

    Source: torch.distributed's ``init_process_group`` (TCP initialisation) and torch.multiprocessing's spawn
    start method, as PyTorch's distributed tutorial "Writing Distributed Applications with PyTorch".
    """
    if not callable(fn):
        raise TypeError(f"fn must be a function, got {type(fn).__name__}")
    W = check_int("world_size", world_size, minimum=1)
    timeout = check_number("timeout", timeout, minimum=0.0)
    if timeout <= 0:
        raise ValueError(f"timeout must be > 0 seconds, got {timeout}")
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    port = _free_port()
    procs = [ctx.Process(target=_entry, args=(fn, r, W, port, args, results, timeout), daemon=True)
             for r in range(W)]
    for p in procs:
        p.start()
    got, deadline = {}, time.monotonic() + timeout
    try:
        while len(got) < W:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"{W - len(got)} of {W} processes gave no result within {timeout:g} s "
                                   f"(ranks {sorted(set(range(W)) - set(got))}); they were stopped")
            try:
                rank, ok, payload = results.get(timeout=min(left, 0.2))
            except queue_module.Empty:
                dead = [r for r, p in enumerate(procs) if r not in got and p.exitcode is not None]
                if dead:  # died without reporting (killed, out of memory): give it a moment to report, then fail
                    time.sleep(0.5)
                    if results.empty():
                        raise RuntimeError(f"process {dead[0]} of {W} exited with code {procs[dead[0]].exitcode} "
                                           "without a result") from None
                continue
            if not ok:
                raise RuntimeError(f"process {rank} of {W} raised an error; the others were stopped. Its "
                                   f"traceback:\n{payload}")
            got[rank] = payload
    finally:
        for p in procs:
            p.join(timeout=5 if len(got) == W else 0.1)
        for p in procs:
            if p.is_alive():
                p.terminate()
                p.join(timeout=2)
            if p.is_alive():
                p.kill()
                p.join(timeout=2)
        results.close()
    return [got[r] for r in range(W)]


# ----------------------------------------------------------------------------------------------
# the proof, run inside each process (the tests and notebook 14 call it through run_processes)
# ----------------------------------------------------------------------------------------------
def compare_worker(rank: int, world_size: int, cases: list) -> list:
    """Run each case's ring or Ulysses attention on this rank's shard and compare with one process's attention.

    Every rank draws the same full (B, H, S, E) float64 query, key, value and output gradient from the case's
    seed, computes ``torch.nn.functional.scaled_dot_product_attention`` and its gradients on all of it, then
    runs the sharded method in a sub-group of the case's world size and compares its rows.

    Args:
        rank, world_size: given by :func:`run_processes`.
        cases: a list of dicts with keys ``method`` (``"ring"`` or ``"ulysses"``), ``world`` (<= world_size),
            ``seq_len``, ``causal``, ``layout``, and optionally ``batch``, ``heads``, ``head_dim``, ``seed``,
            ``bad_rank`` (that rank passes one token too many: the mismatched-shards error).

    Returns:
        One dict per case this rank took part in (no tensors): the largest absolute differences of the output
        and of dQ, dK, dV (``out``, ``dq``, ``dk``, ``dv``), the bytes sent (``sent``) and the formula's
        (``formula``), the scores computed (``scores``).

    Raises:
        ValueError: whatever the attention raises on bad input (reported by :func:`run_processes`).

    Source: the course's own harness; the reference is torch's ``scaled_dot_product_attention`` in float64.
    """
    groups = {w: dist.new_group(list(range(w))) for w in sorted({c["world"] for c in cases})}
    rows = []
    for case in cases:
        W = case["world"]
        if rank >= W:
            continue
        B, H, E = case.get("batch", 1), case.get("heads", 2), case.get("head_dim", 4)
        S, causal, layout = case["seq_len"], case["causal"], case["layout"]
        g = torch.Generator().manual_seed(case.get("seed", 0))
        q, k, v, d_out = (torch.randn(B, H, S, E, generator=g, dtype=torch.float64) for _ in range(4))
        ref_in = [t.clone().requires_grad_() for t in (q, k, v)]
        ref = torch.nn.functional.scaled_dot_product_attention(*ref_in, is_causal=causal)
        ref.backward(d_out)
        pos = shard_positions(S, W, rank, layout)
        if case.get("bad_rank") == rank:
            pos = torch.cat([pos, pos[:1]])
        mine = [t[:, :, pos].clone().requires_grad_() for t in (q, k, v)]
        stats: dict = {}
        fn = ring_attention if case["method"] == "ring" else ulysses_attention
        out = fn(*mine, seq_len=S, is_causal=causal, layout=layout, group=groups[W], stats=stats)
        out.backward(d_out[:, :, pos])
        formula = (ring_bytes if case["method"] == "ring" else ulysses_bytes)(
            S, W, rank, batch=B, heads=H, head_dim=E, layout=layout)
        rows.append({
            "case": case, "rank": rank,
            "out": (out - ref[:, :, pos]).abs().max().item(),
            **{f"d{n}": (t.grad - r.grad[:, :, pos]).abs().max().item() for n, t, r in zip("qkv", mine, ref_in)},
            "sent": {"forward": stats.get("forward", 0), "backward": stats.get("backward", 0)},
            "formula": formula, "scores": stats.get("scores", 0),
        })
    return rows
