"""A paged KV cache: fixed-size blocks, a block table per sequence, prefix sharing with copy-on-write.

Shape legend (as :mod:`attn_lib.attention`): B batch, H query heads, Hkv key/value heads, L queries, S keys,
E head_dim of query and key, Ev head_dim of value; here also N blocks in the pool and P tokens per block
(``block_size``).

A contiguous cache reserves ``max_len`` slots for every sequence when it starts, whatever length it will reach.
A paged cache (vLLM's PagedAttention) keeps one pool of N blocks of P token slots, shared by every sequence. A
sequence owns a **block table**: the list of block numbers that hold its tokens, in order, so token t lives in
block ``table[t // P]`` at offset ``t % P``. A new block is taken from the pool only when the last one is full,
so at most P - 1 slots per sequence are ever unused. Two sequences that share a prompt share its blocks (each
block counts its owners); the first write into a shared block copies it first (**copy-on-write**).

Attention itself does not change: :func:`paged_attention` gathers each sequence's keys and values through its
block table and runs the course's attention over them, with a padding mask for the ragged lengths. A GPU kernel
reads the blocks in place instead of gathering them; the arithmetic is the same.

Source: Kwon et al., "Efficient Memory Management for Large Language Model Serving with PagedAttention" (2023),
sections 4.1-4.4 (blocks, block tables, copy-on-write for parallel sampling and shared prefixes).
"""

from __future__ import annotations

import math

import torch

from attn_lib._checks import check_dtype, check_int, check_tensor, shape_of
from attn_lib.tiled import tiled_attention

__all__ = ["BlockAllocator", "PagedKVCache", "block_lookup", "paged_attention", "memory_waste"]


class BlockAllocator:
    """The pool's bookkeeping: which blocks are free, and how many sequences share each one (its refcount).

    Args:
        num_blocks: N >= 1, the blocks in the pool (int).

    Attributes:
        num_blocks: N. ``num_free``: blocks not in use.

    Raises:
        TypeError: num_blocks not an int.
        ValueError: num_blocks < 1; :meth:`allocate` with no free block; :meth:`free` or :meth:`share` of a block
            that is not in use or out of range.

    No tensors: it hands out block numbers (int). Freed blocks are reused last-freed first (a stack), as vLLM's
    free list. Source: Kwon et al. (2023), section 4.2 (the block manager's reference counts).
    """

    def __init__(self, num_blocks: int) -> None:
        self.num_blocks = check_int("num_blocks", num_blocks, minimum=1)
        self._free = list(range(self.num_blocks - 1, -1, -1))  # pop() hands out block 0 first
        self._refs = [0] * self.num_blocks

    @property
    def num_free(self) -> int:
        return len(self._free)

    def _check_block(self, block, what: str) -> int:
        block = check_int("block", block, minimum=0, maximum=self.num_blocks - 1)
        if self._refs[block] == 0:
            raise ValueError(f"cannot {what} block {block}: it is free (not allocated to any sequence)")
        return block

    def allocate(self) -> int:
        """Take a free block (refcount 1). Raises ValueError when all N blocks are in use."""
        if not self._free:
            raise ValueError(f"no free block: all {self.num_blocks} blocks of the pool are in use (free a "
                             "sequence or make the pool larger)")
        block = self._free.pop()
        self._refs[block] = 1
        return block

    def share(self, block: int) -> None:
        """One more owner of an allocated block (a sequence forked from another)."""
        self._refs[self._check_block(block, "share")] += 1

    def free(self, block: int) -> None:
        """One owner less; the block returns to the pool when it has none."""
        block = self._check_block(block, "free")
        self._refs[block] -= 1
        if self._refs[block] == 0:
            self._free.append(block)

    def refcount(self, block: int) -> int:
        """How many sequences use ``block`` (0: free)."""
        return self._refs[check_int("block", block, minimum=0, maximum=self.num_blocks - 1)]

    def __repr__(self) -> str:
        return f"BlockAllocator(num_blocks={self.num_blocks}, free={self.num_free})"


def block_lookup(block_table, position: int, block_size: int) -> tuple[int, int]:
    """Where token ``position`` of a sequence lives: ``(block_table[position // P], position % P)``.

    Args:
        block_table: a list or tuple of block numbers (int), or a (T,) int64 tensor (T blocks).
        position: the token's index in its sequence, 0 <= position < len(block_table) * P (int).
        block_size: P >= 1, tokens per block (int).

    Returns:
        ``(block, offset)``, two ints: the physical block and the slot inside it.

    Raises:
        TypeError: position or block_size not an int, a table entry not an int.
        ValueError: block_size < 1, a negative position, or one past the table's last block.

    Source: Kwon et al. (2023), section 4.2 (logical to physical blocks through the block table).
    """
    block_size = check_int("block_size", block_size, minimum=1)
    position = check_int("position", position, minimum=0)
    table = block_table.tolist() if isinstance(block_table, torch.Tensor) else block_table
    if not isinstance(table, (list, tuple)):
        raise TypeError(f"block_table must be a list, tuple or 1-D tensor of block numbers, got {type(table).__name__}")
    if position >= len(table) * block_size:
        raise ValueError(f"position {position} is past the block table: {len(table)} blocks of {block_size} "
                         f"tokens hold positions 0..{len(table) * block_size - 1}")
    block = check_int(f"block_table[{position // block_size}]", table[position // block_size], minimum=0)
    return block, position % block_size


class PagedKVCache:
    """A pool of key/value blocks shared by many sequences, each reading its tokens through a block table.

    Args:
        num_blocks: N >= 1 blocks in the pool (int).
        block_size: P >= 1 token slots per block (int; vLLM's default is 16).
        num_kv_heads: Hkv >= 1 (int). head_dim: E >= 1 (int); value_dim: Ev (default E).
        dtype: the pool's floating dtype (default float32; the course's proofs use float64).

    Attributes:
        key_blocks: (N, Hkv, P, E) and value_blocks: (N, Hkv, P, Ev), the pool.
        allocator: the :class:`BlockAllocator`.

    Sequences are named by any hashable id (an int or a str). :meth:`append` writes tokens, allocating a block
    when the last one is full and copying a shared block before writing into it; :meth:`fork` starts a sequence
    that shares all of another's blocks; :meth:`free` gives a sequence's blocks back; :meth:`gather` reads a
    sequence back as contiguous (Hkv, S, E) keys and (Hkv, S, Ev) values.

    Raises:
        TypeError: a size not an int, a dtype not floating; in :meth:`append`, key/value not floating tensors.
        ValueError: sizes < 1; an unknown or existing sequence id; key/value shapes that do not match the pool;
            NaN or infinity in key/value; no free block; a block table that points at a freed block (found
            when a sequence is read).

    Source: Kwon et al. (2023), "PagedAttention", sections 4.1-4.4; vLLM's block manager.
    """

    def __init__(self, num_blocks: int, block_size: int, num_kv_heads: int, head_dim: int, *,
                 value_dim: int | None = None, dtype: torch.dtype = torch.float32) -> None:
        self.block_size = check_int("block_size", block_size, minimum=1)
        self.num_kv_heads = check_int("num_kv_heads", num_kv_heads, minimum=1)
        self.head_dim = check_int("head_dim", head_dim, minimum=1)
        self.value_dim = self.head_dim if value_dim is None else check_int("value_dim", value_dim, minimum=1)
        self.dtype = check_dtype("dtype", dtype)
        self.allocator = BlockAllocator(num_blocks)
        n = self.allocator.num_blocks
        self.key_blocks = torch.zeros(n, self.num_kv_heads, self.block_size, self.head_dim, dtype=self.dtype)
        self.value_blocks = torch.zeros(n, self.num_kv_heads, self.block_size, self.value_dim, dtype=self.dtype)
        self._tables: dict = {}
        self._lengths: dict = {}
        self.copies = 0  # blocks copied on write so far

    # -- sequences ---------------------------------------------------------------------------------
    def _known(self, seq_id):
        if seq_id not in self._tables:
            raise ValueError(f"unknown sequence {seq_id!r}; known: {sorted(self._tables, key=str)}")
        return seq_id

    def add_sequence(self, seq_id) -> None:
        """Start an empty sequence (no block yet)."""
        if seq_id in self._tables:
            raise ValueError(f"sequence {seq_id!r} already exists")
        self._tables[seq_id], self._lengths[seq_id] = [], 0

    def fork(self, parent, child) -> None:
        """Start ``child`` sharing every block of ``parent`` (a shared prompt): no copy until one writes."""
        self._known(parent)
        if child in self._tables:
            raise ValueError(f"sequence {child!r} already exists")
        for block in self._tables[parent]:
            self.allocator.share(block)
        self._tables[child], self._lengths[child] = list(self._tables[parent]), self._lengths[parent]

    def free(self, seq_id) -> None:
        """Remove a sequence; its blocks return to the pool when no other sequence shares them."""
        for block in self._tables.pop(self._known(seq_id)):
            self.allocator.free(block)
        del self._lengths[seq_id]

    def seq_len(self, seq_id) -> int:
        """Tokens stored for ``seq_id``."""
        return self._lengths[self._known(seq_id)]

    def block_table(self, seq_id) -> list[int]:
        """A copy of the sequence's block table (block numbers, in token order)."""
        return list(self._tables[self._known(seq_id)])

    @property
    def sequences(self) -> list:
        return list(self._tables)

    # -- writing -----------------------------------------------------------------------------------
    def _writable_last_block(self, seq_id) -> int:
        table = self._tables[seq_id]
        block = table[-1]
        if self.allocator.refcount(block) > 1:  # shared: copy on write
            new = self.allocator.allocate()
            self.key_blocks[new] = self.key_blocks[block]
            self.value_blocks[new] = self.value_blocks[block]
            self.allocator.free(block)
            table[-1] = new
            self.copies += 1
            block = new
        return block

    def append(self, seq_id, key: torch.Tensor, value: torch.Tensor) -> None:
        """Write T new tokens of one sequence: key (Hkv, T, E), value (Hkv, T, Ev), in the pool's dtype."""
        self._known(seq_id)
        check_tensor("key", key, floating=True, ndim=3)
        check_tensor("value", value, floating=True, ndim=3)
        Hkv, P = self.num_kv_heads, self.block_size
        if key.shape[0] != Hkv or key.shape[2] != self.head_dim or value.shape != (Hkv, key.shape[1], self.value_dim):
            raise ValueError(f"key must be (Hkv={Hkv}, T, E={self.head_dim}) and value (Hkv={Hkv}, T, "
                             f"Ev={self.value_dim}) with the same T; got key {shape_of(key)}, value {shape_of(value)}")
        if not (bool(torch.isfinite(key).all()) and bool(torch.isfinite(value).all())):
            raise ValueError("key and value must be finite (no NaN or infinity) before they enter the cache")
        T = key.shape[1]
        table, n = self._tables[seq_id], self._lengths[seq_id]
        cow = 1 if T and n % P and self.allocator.refcount(table[-1]) > 1 else 0  # a shared last block to copy
        blocks_needed = math.ceil((n + T) / P) - len(table) + cow
        if blocks_needed > self.allocator.num_free:  # checked before writing anything: no half-written sequence
            raise ValueError(f"no free block: sequence {seq_id!r} needs {blocks_needed} more blocks of {P} tokens, "
                             f"the pool has {self.allocator.num_free} free of {self.allocator.num_blocks}")
        t = 0
        while t < T:
            if n % P == 0:  # the last block is full (or there is none): take a new one
                table.append(self.allocator.allocate())
                block = table[-1]
            else:
                block = self._writable_last_block(seq_id)
            off = n % P
            take = min(P - off, T - t)
            self.key_blocks[block, :, off:off + take] = key[:, t:t + take].to(self.dtype)
            self.value_blocks[block, :, off:off + take] = value[:, t:t + take].to(self.dtype)
            n, t = n + take, t + take
        self._lengths[seq_id] = n

    # -- reading -----------------------------------------------------------------------------------
    def slot_indices(self, seq_id) -> torch.Tensor:
        """(S,) int64: for each token of the sequence, its slot ``block * P + offset`` in the flattened pool.

        Raises ValueError when the table points at a block that is free (freed behind the sequence's back).
        """
        table = self._tables[self._known(seq_id)]
        for i, block in enumerate(table):
            if self.allocator.refcount(block) == 0:
                raise ValueError(f"the block table of sequence {seq_id!r} points at block {block} (entry {i}), "
                                 "which is free: its contents may belong to another sequence now")
        n, P = self._lengths[seq_id], self.block_size
        pos = torch.arange(n)
        return torch.tensor(table, dtype=torch.int64)[pos // P] * P + pos % P if n else pos

    def gather(self, seq_id) -> tuple[torch.Tensor, torch.Tensor]:
        """The sequence's keys (Hkv, S, E) and values (Hkv, S, Ev), read through its block table."""
        idx = self.slot_indices(seq_id)
        Hkv = self.num_kv_heads
        k = self.key_blocks.transpose(0, 1).reshape(Hkv, -1, self.head_dim)[:, idx]
        v = self.value_blocks.transpose(0, 1).reshape(Hkv, -1, self.value_dim)[:, idx]
        return k, v

    def used_slots(self) -> int:
        """Token slots in allocated blocks (in use by at least one sequence)."""
        return (self.allocator.num_blocks - self.allocator.num_free) * self.block_size

    def nbytes(self) -> int:
        """Bytes of keys and values in the allocated blocks."""
        per_slot = self.num_kv_heads * (self.head_dim + self.value_dim) * self.key_blocks.element_size()
        return self.used_slots() * per_slot

    def __repr__(self) -> str:
        return (f"PagedKVCache(blocks={self.allocator.num_blocks}, block_size={self.block_size}, "
                f"sequences={len(self._tables)}, free={self.allocator.num_free})")


def paged_attention(query: torch.Tensor, cache: PagedKVCache, seq_ids, *, enable_gqa: bool = False,
                    scale: float | None = None) -> torch.Tensor:
    """Decoding attention for a batch of sequences of different lengths, each read through its block table.

    Query row r of sequence b is the last L of its S_b tokens (bottom-right causal, as decoding with a cache):
    the keys are gathered through the block tables into a (B, Hkv, max S_b, E) batch with a padding mask,
    and the course's tiled attention runs once over it.

    Args:
        query: (B, H, L, E), the new tokens' queries, floating (float32/float64), L <= every S_b.
        cache: the :class:`PagedKVCache` holding the sequences (their new keys already appended).
        seq_ids: a list or tuple of B sequence ids.
        enable_gqa: H a multiple of Hkv (grouped-query attention). scale: default 1/sqrt(E).

    Returns:
        (B, H, L, Ev) in query's dtype.

    Raises:
        TypeError: query not a floating tensor, seq_ids not a list/tuple.
        ValueError: query not 4-D, len(seq_ids) != B, an unknown sequence, L larger than a sequence's length,
            a block table pointing at a freed block, head counts that do not fit.

    Source: Kwon et al. (2023), section 4.1 (Eq. 4: attention block by block through the block table).
    """
    check_tensor("query", query, floating=True, ndim=4)
    if not isinstance(seq_ids, (list, tuple)):
        raise TypeError(f"seq_ids must be a list or tuple of sequence ids, got {type(seq_ids).__name__}")
    B, H, L, E = query.shape
    if len(seq_ids) != B:
        raise ValueError(f"seq_ids has {len(seq_ids)} ids but query has batch size {B}")
    lengths = [cache.seq_len(s) for s in seq_ids]
    for s, n in zip(seq_ids, lengths):
        if n < L:
            raise ValueError(f"sequence {s!r} holds {n} tokens, fewer than the {L} queries: append the new tokens' "
                             "keys and values first")
    S = max(lengths) if lengths else 0
    Hkv = cache.num_kv_heads
    keys = torch.zeros(B, Hkv, S, cache.head_dim, dtype=cache.dtype)
    values = torch.zeros(B, Hkv, S, cache.value_dim, dtype=cache.dtype)
    allowed = torch.zeros(B, 1, L, S, dtype=torch.bool)
    for b, (s, n) in enumerate(zip(seq_ids, lengths)):
        k, v = cache.gather(s)
        # right-align each sequence so that bottom-right causal is the same rule for all of them
        keys[b, :, S - n:], values[b, :, S - n:] = k, v
        rows = torch.arange(L)[:, None] + n - L  # position of each query row in its sequence
        cols = torch.arange(n)[None, :]
        allowed[b, 0, :, S - n:] = cols <= rows
    return tiled_attention(query, keys.to(query.dtype), values.to(query.dtype), attn_mask=allowed,
                           enable_gqa=enable_gqa, scale=scale)


def memory_waste(lengths, *, max_len: int, block_size: int) -> dict:
    """Token slots reserved but unused: a contiguous cache of ``max_len`` per sequence against paging.

    Args:
        lengths: the final length of each sequence (ints, each 0 <= n <= max_len), a list, tuple or 1-D tensor.
        max_len: the contiguous cache's reservation per sequence (int >= 1).
        block_size: P, the paged cache's block (int >= 1).

    Returns:
        A dict of ints and floats (no tensors): ``tokens`` (sum of lengths), ``contiguous_slots``
        (len * max_len), ``paged_slots`` (sum of ceil(n / P) * P), and the wasted fractions
        ``contiguous_waste`` and ``paged_waste`` (1 - tokens / slots).

    Raises:
        TypeError: lengths not a list/tuple/tensor of ints. ValueError: no lengths, a length < 0 or > max_len,
            max_len or block_size < 1.

    Source: Kwon et al. (2023), section 3 and Fig. 2 (20-38 % of a contiguous cache holds tokens in the systems
    they measured); the course's own measurement.
    """
    max_len = check_int("max_len", max_len, minimum=1)
    block_size = check_int("block_size", block_size, minimum=1)
    values = lengths.tolist() if isinstance(lengths, torch.Tensor) else lengths
    if not isinstance(values, (list, tuple)):
        raise TypeError(f"lengths must be a list, tuple or 1-D tensor of ints, got {type(lengths).__name__}")
    if not values:
        raise ValueError("lengths is empty: give at least one sequence length")
    values = [check_int(f"lengths[{i}]", n, minimum=0, maximum=max_len) for i, n in enumerate(values)]
    tokens = sum(values)
    contiguous = len(values) * max_len
    paged = sum(-(-n // block_size) * block_size for n in values)
    return {"tokens": tokens, "contiguous_slots": contiguous, "paged_slots": paged,
            "contiguous_waste": 1 - tokens / contiguous, "paged_waste": 1 - tokens / paged if paged else 0.0}
