"""Your FlashAttention-2 forward kernel in Triton (notebook 09, optional section; attn_lib.flash is the course's).

Shapes: B batch, H heads, L queries, S keys, D head_dim (of query, key and value).
"""

from __future__ import annotations

import torch

from my_attn._todo import todo
from my_attn._triton import launch  # noqa: F401  (your launcher runs your kernel through it)

# Write your kernel here, e.g.
#
# import triton
# import triton.language as tl
#
# @triton.jit
# def _flash_fwd_kernel(Q, K, V, O, LSE, ..., BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, ...):
#     ...   # one program: BLOCK_M query rows of one (batch, head); loop over BLOCK_N keys at a time


def flash_forward(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, *, is_causal: bool = False,
                  scale: float | None = None, block_m: int = 16, block_n: int = 16):
    """FlashAttention-2's forward (Algorithm 1) as YOUR ``@triton.jit`` kernel, launched with ``launch``.

    One program per (block of ``block_m`` query rows, batch·head): load its query tile once, loop over the keys
    ``block_n`` at a time keeping the running max m, sum l and accumulator (float32) of the online softmax, divide
    once at the end, store the output tile and the log-sum-exp m + log(l). Do not compute the attention in torch:
    the launcher only allocates the outputs and launches the kernel.

    Args:
        query: (B, H, L, D), key: (B, H, S, D), value: (B, H, S, D); float32, contiguous; D a power of two >= 16
            (tl.arange needs a power of two, tl.dot at least 16); L and S any (mask the loads of the last tiles).
        is_causal: top-left causal mask, as torch's (query i sees keys 0..i).
        scale: multiplies the scores; default 1/sqrt(D).
        block_m, block_n: the tile sizes, powers of two >= 16.

    Returns:
        (output (B, H, L, D) float32, lse (B, H, L) float32, natural log). On CPU tensors the kernel runs in Triton's
        interpreter (through ``launch``); on a GPU it compiles.
    """
    todo("flash_forward", "09", "Optional: the Triton kernel, line by line (pointers, strides, PTX)")
