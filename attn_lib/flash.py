"""FlashAttention-2, forward and backward, as Triton kernels (the "CUDA path" of tiled attention).

Shape legend: B batch, H query heads, Hkv key/value heads, L queries, S keys, E head_dim of query and
key, Ev head_dim of value (the kernels' ``HEAD_DIM`` and ``HEAD_DIM_V``).

:func:`flash_attention` runs the kernels compiled for an NVIDIA GPU when the inputs are CUDA tensors,
and the same kernel source under Triton's interpreter (NumPy on the CPU) when ``backend="triton"`` is
asked for with CPU tensors, so the kernels can be read, stepped through and trained with on a laptop.
With ``backend="auto"`` CPU tensors go to the PyTorch version :func:`attn_lib.tiled.tiled_attention`
(the interpreter is slow).

The kernels themselves, one screen of arithmetic each with the paper's line next to it, are in
:mod:`attn_lib.flash_kernels`; this module checks the arguments (with :mod:`attn_lib._tiling`, as
``tiled_attention`` does), lays the tensors out, launches the kernels (compiled, autotuned on a GPU, or
interpreted) and wraps them for autograd. :func:`compile_kernel` compiles one ahead of time for a GPU
architecture without a GPU, and :func:`kernel_source` returns a kernel's source for notebook 09.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from attn_lib._checks import check_bool, check_choice, check_device, check_int
from attn_lib._tiling import _new_output, _prepare, _value_scale
from attn_lib.tiled import tiled_attention

from attn_lib.flash_kernels import (  # noqa: F401  (LOG2E, LN2, MASK_*, KERNELS and the two helpers are public here)
    KERNELS, LN2, LOG2E, MASK_BOOL, MASK_FLOAT, MASK_NONE, _attn_fwd_kernel, _kernel, kernel_source, triton,
    triton_available,
)

__all__ = ["flash_attention", "compile_kernel", "BACKENDS", "ARCHS"]  # kernel_source, triton_available: flash_kernels

BACKENDS = ("auto", "triton", "tiled", "cuda")
# The compute capabilities compile_kernel accepts: what Triton 3.9's NVIDIA backend supports (8.0 and newer).
ARCHS = (80, 86, 87, 89, 90, 100, 103, 110, 120, 121)

# Interpreter tile sizes: big tiles mean fewer Python-level steps, which is what costs time there.
_INTERPRETER_BLOCK = 32


def _kernel_is_interpreted() -> bool:
    """True when triton was imported with TRITON_INTERPRET=1 (then @triton.jit made interpreted functions)."""
    return type(_attn_fwd_kernel).__name__ == "InterpretedFunction"


# ----------------------------------------------------------------------------------------------
# launching the kernels
# ----------------------------------------------------------------------------------------------
def _block_d(head_dim: int) -> int:
    return max(16, 1 << (head_dim - 1).bit_length())


_AUTOTUNED: dict = {}  # kernel name -> triton.autotune wrapper (built on first GPU use: autotuning needs a GPU)
_TUNE_CONFIGS = {  # (BLOCK_M, BLOCK_N, num_warps, num_stages)
    "forward": [(64, 64, 4, 3), (128, 32, 4, 3), (128, 64, 4, 3), (128, 64, 8, 3), (128, 128, 8, 2), (128, 64, 4, 4)],
    "dkdv": [(32, 128, 4, 3), (64, 64, 4, 3), (32, 64, 4, 3), (64, 128, 8, 2)],
    "dq": [(128, 32, 4, 3), (64, 64, 4, 3), (128, 64, 8, 2)],
}
_TUNE_KEY = ["L", "S", "HEAD_DIM", "HEAD_DIM_V", "IS_CAUSAL", "MASK_KIND", "HAS_ALIBI", "HAS_WINDOW", "SOFTCAP"]


def _autotuned(name: str):
    """The kernel ``name`` wrapped in triton.autotune over a few tile/warp/stage configurations."""
    if name not in _AUTOTUNED:
        configs = [triton.Config({"BLOCK_M": bm, "BLOCK_N": bn}, num_warps=w, num_stages=s)
                   for bm, bn, w, s in _TUNE_CONFIGS[name]]
        _AUTOTUNED[name] = triton.autotune(configs=configs, key=_TUNE_KEY)(_kernel(name))
    return _AUTOTUNED[name]


def _run(name: str, grid, args, consts: dict, interpret: bool, block_m, block_n, tiles: str = "MN") -> None:
    """Launch one kernel: interpreted (CPU tensors), with fixed tiles, or autotuned (GPU, no tiles given).

    ``grid`` is a function of (BLOCK_M, BLOCK_N); ``tiles`` says which of the two the kernel takes.
    """
    if interpret or block_m is not None or block_n is not None or name == "preprocess":
        default = _INTERPRETER_BLOCK if interpret else 64
        bm, bn = block_m or default, block_n or default
        kw = dict(BLOCK_M=bm, **({"BLOCK_N": bn} if "N" in tiles else {}), **consts)
        g = grid(bm, bn)
        if not interpret:
            _kernel(name)[g](*args, **kw)
        elif _kernel_is_interpreted():  # TRITON_INTERPRET=1 was set before triton was imported: the supported way
            _kernel(name)[g](*args, **kw)
        else:  # a compiling process (compile_kernel works here too): the twin kernels of _triton_interp
            from attn_lib import _triton_interp

            with _triton_interp.interpreter_mode() as interp:
                _triton_interp.interpreted(_kernel(name), interp)[g](*args, **kw)
    else:
        _autotuned(name)[lambda meta: grid(meta["BLOCK_M"], meta["BLOCK_N"])](*args, **consts)


@dataclass
class _Launch:
    """Everything the kernels need besides q/k/v: 4-D layouts, mask and ALiBi pointers, constants."""

    B: int
    H: int
    Hkv: int
    L: int
    S: int
    mask: torch.Tensor  # (B, H, L, S) view with 0 strides where broadcast, or a dummy
    mask_kind: int
    alibi: torch.Tensor  # (H,) or (B, H) float32, or a dummy
    alibi_stride: int  # the slopes' batch stride: H for (B, H), 0 for (H,)
    causal_offset: int
    is_causal: bool
    scale: float
    interpret: bool
    block_m: int | None
    block_n: int | None

    has_alibi: bool
    window: tuple = (-1, -1)  # flash-attn's (left, right), -1 unbounded
    softcap: float | None = None
    sinks: torch.Tensor | None = None  # (H,) float32, detached: the kernels' copy

    def consts(self, E: int, Ev: int, dtype) -> dict:
        return dict(HEAD_DIM=E, HEAD_DIM_V=Ev, BLOCK_D=_block_d(E), BLOCK_DV=_block_d(Ev), IS_CAUSAL=self.is_causal,
                    MASK_KIND=self.mask_kind, HAS_ALIBI=self.has_alibi,
                    DOT_PRECISION="ieee" if dtype == torch.float32 else "tf32",
                    HAS_WINDOW=self.window != (-1, -1), SOFTCAP=self.softcap is not None)

    def window_args(self) -> tuple:
        """(win_left, win_right, softcap): -1 (unbounded) becomes L + S, beyond every key; softcap 0.0 when off."""
        far = self.L + self.S
        left, right = (far if w < 0 else w for w in self.window)
        return left, right, self.softcap or 0.0

    def mask_strides(self):
        return self.mask.stride() if self.mask_kind else (0, 0, 0, 0)


def _forward(q, k, v, la: _Launch):
    """q (B, H, L, E), k (B, Hkv, S, E), v (B, Hkv, S, Ev) -> out (B, H, L, Ev), lse (B, H, L) float32."""
    B, H, L, E = q.shape
    Ev = v.shape[-1]
    out = _new_output(B, H, L, Ev, dtype=q.dtype, device=q.device)
    lse = _new_output(B, H, L, dtype=torch.float32, device=q.device)
    sinks = q if la.sinks is None else la.sinks  # a dummy pointer without sinks
    args = (q, k, v, out, lse, la.mask, la.alibi, sinks, *q.stride()[:3], *k.stride()[:3], *v.stride()[:3],
            *out.stride()[:3], *la.mask_strides(), la.alibi_stride, H, L, la.S, H // la.Hkv, la.causal_offset, la.scale,
            *la.window_args())
    _run("forward", lambda bm, bn: (triton.cdiv(L, bm), B * H), args,
         {**la.consts(E, Ev, q.dtype), "HAS_SINKS": la.sinks is not None}, la.interpret, la.block_m, la.block_n)
    return out, lse


def _backward(q, k, v, out, lse, d_out, d_lse, la: _Launch):
    """FlashAttention-2's backward (Algorithm 2) as three kernels; all tensors 4-D and contiguous.

    Returns (dq, dk, dv, d_sinks); d_sinks (H,) float32 = -sum over batch and rows of e^{sink_h - lse} D
    (D = rowsum(dO * O) - d_lse, see attn_lib.tiled._tiled_backward), None without sinks: O(B H L), no kernel.
    """
    B, H, L, E = q.shape
    Ev = v.shape[-1]
    S, Hkv, G = la.S, la.Hkv, H // la.Hkv
    consts = la.consts(E, Ev, q.dtype)
    delta = torch.empty(B, H, L, dtype=torch.float32, device=q.device)
    _run("preprocess", lambda bm, bn: (triton.cdiv(L, bm), B * H), (out, d_out, delta, L),
         dict(HEAD_DIM_V=Ev, BLOCK_DV=consts["BLOCK_DV"]), la.interpret, la.block_m, None, tiles="M")
    if d_lse is not None:  # d lse / d S = P, so dS = P (dP - delta) + d_lse P = P (dP - (delta - d_lse))
        delta -= d_lse
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    common = (*q.stride()[:3], *k.stride()[:3], *v.stride()[:3], *d_out.stride()[:3], *la.mask_strides(),
              la.alibi_stride)
    _run("dkdv", lambda bm, bn: (triton.cdiv(S, bn), B * Hkv),
         (q, k, v, d_out, lse, delta, dk, dv, la.mask, la.alibi, *common, H, Hkv, L, S, G, la.causal_offset,
          la.scale, *la.window_args()), consts, la.interpret, la.block_m, la.block_n)
    _run("dq", lambda bm, bn: (triton.cdiv(L, bm), B * H),
         (q, k, v, d_out, lse, delta, dq, la.mask, la.alibi, *common, H, L, S, G, la.causal_offset,
          la.scale, *la.window_args()), consts, la.interpret, la.block_m, la.block_n)
    d_sinks = None
    if la.sinks is not None:  # d sink_h = -sum_{b, rows} P_sink D, P_sink = exp(sink_h - lse)
        d_sinks = -(torch.exp(la.sinks[None, :, None] - lse) * delta).sum(dim=(0, 2))
    return dq, dk, dv, d_sinks


class _FlashAttentionFunction(torch.autograd.Function):
    """Triton forward; Triton backward (delta, dK/dV, dQ kernels), recomputing P from the saved lse."""

    @staticmethod
    def forward(ctx, q, k, v, sinks, la):
        out, lse = _forward(q, k, v, la)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.la, ctx.sinks_dtype = la, None if sinks is None else sinks.dtype
        return out, lse

    @staticmethod
    def backward(ctx, d_out, d_lse):
        if torch.is_grad_enabled():  # backward(create_graph=True): the kernels' gradients have no gradient
            raise RuntimeError("flash_attention's Triton backward cannot be differentiated again (no double "
                               "backward, create_graph=True); use backend='tiled', whose backward is made of "
                               "differentiable PyTorch operations")
        q, k, v, out, lse = ctx.saved_tensors
        if d_out is None:
            d_out = torch.zeros_like(out)
        dq, dk, dv, d_sinks = _backward(q, k, v, out, lse, d_out.contiguous(), d_lse, ctx.la)
        if d_sinks is not None and ctx.needs_input_grad[3]:
            d_sinks = d_sinks.to(ctx.sinks_dtype)
        else:
            d_sinks = None
        return dq, dk, dv, d_sinks, None


def compile_kernel(
    dtype: torch.dtype = torch.float16,
    head_dim: int = 128,
    *,
    kernel: str = "forward",
    head_dim_v: int | None = None,
    is_causal: bool = False,
    mask_kind: int = MASK_NONE,
    alibi: bool = False,
    window: bool = False,
    softcap: bool = False,
    sinks: bool = False,
    arch: int = 90,
    block_m: int = 128,
    block_n: int = 64,
    num_warps: int = 4,
    num_stages: int = 3,
):
    """Compile one of the kernels ahead of time for an NVIDIA GPU architecture; no GPU needed (Triton's ``compile``).

    Uses the same specialisation a launch would (pointers and row strides divisible by 16, head_dim
    contiguous). Useful to check on a CPU-only machine that the kernels compile for the GPU and to read
    what they became: ``compiled.asm`` holds "ttir", "ttgir", "llir", "ptx" and "cubin"; on Hopper
    (``arch=90``) the PTX uses warpgroup matrix instructions (wgmma).

    Args:
        dtype: float16, bfloat16 or float32 inputs.
        head_dim: E (padded to a power of two inside), int >= 1; head_dim_v: Ev (default E).
        kernel: one of :data:`KERNELS` ("forward", "preprocess", "dkdv", "dq").
        is_causal, mask_kind (0 none, 1 bool, 2 float), alibi, block_m, block_n, num_warps, num_stages:
            the kernel's compile-time settings.
        window, softcap, sinks: the constexprs HAS_WINDOW, SOFTCAP (forward, dK/dV, dQ) and HAS_SINKS (forward
            only: the backward kernels read the sink through the saved lse).
        arch: compute capability as an int, one of :data:`ARCHS` (Triton 3.9 supports compute capability 8.0 and
            newer): 80 (A100), 86/89 (RTX 30xx/40xx, L4, L40), 90 (H100/H200), 100 (B200), 120 (RTX 50xx).
            The tests compile all four kernels for 80 and 90.

    Returns:
        triton.compiler.CompiledKernel.

    Raises:
        RuntimeError: Triton is not installed. TypeError: unsupported dtype; a flag that is not a bool; an
        arch, a block size or num_warps that is not an int. ValueError: head_dim < 1, an unknown kernel or
        mask_kind, an arch not in :data:`ARCHS`, block sizes that are not powers of two >= 16, num_warps not a
        power of two in 1..32, num_stages < 1.

    Source: ``triton.compile`` with a ``GPUTarget`` (Triton's ahead-of-time API), for the kernels of Dao (2023).
    """
    import inspect

    if triton is None:
        raise RuntimeError("Triton is not installed (Linux only)")
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    ty = {torch.float16: "fp16", torch.bfloat16: "bf16", torch.float32: "fp32"}.get(dtype)
    if ty is None:
        raise TypeError(f"dtype must be torch.float16, torch.bfloat16 or torch.float32, got {dtype}")
    check_int("head_dim", head_dim, minimum=1)
    head_dim_v = head_dim if head_dim_v is None else check_int("head_dim_v", head_dim_v, minimum=1)
    check_choice("kernel", kernel, KERNELS)
    check_bool("is_causal", is_causal)
    check_choice("mask_kind", mask_kind, (MASK_NONE, MASK_BOOL, MASK_FLOAT))
    check_bool("alibi", alibi)
    check_bool("window", window)
    check_bool("softcap", softcap)
    check_bool("sinks", sinks)
    # an architecture Triton's NVIDIA backend does not know aborts the whole process inside LLVM: refuse it here
    check_choice("arch", arch, ARCHS)
    _check_tile("block_m", block_m)
    _check_tile("block_n", block_n)
    check_choice("num_warps", num_warps, (1, 2, 4, 8, 16, 32))
    check_int("num_stages", num_stages, minimum=1)
    fn = _kernel(kernel)
    names = list(inspect.signature(fn.fn).parameters)
    consts = dict(HEAD_DIM=head_dim, HEAD_DIM_V=head_dim_v, BLOCK_D=_block_d(head_dim), BLOCK_DV=_block_d(head_dim_v),
                  BLOCK_M=block_m, BLOCK_N=block_n, IS_CAUSAL=is_causal, MASK_KIND=mask_kind, HAS_ALIBI=alibi,
                  DOT_PRECISION="ieee" if dtype == torch.float32 else "tf32", HAS_WINDOW=window, SOFTCAP=softcap,
                  HAS_SINKS=sinks)
    consts = {k: v for k, v in consts.items() if k in names}
    signature, attrs = {}, {}
    for i, name in enumerate(names):
        if name in consts:
            signature[name] = "constexpr"
        elif name in ("LSE", "DELTA", "ALIBI", "SINKS"):
            signature[name] = "*fp32"
        elif name == "MASK":
            signature[name] = "*fp32" if mask_kind == MASK_FLOAT else "*u8"
        elif name in ("Q", "K", "V", "O", "DO", "DQ", "DK", "DV"):
            signature[name] = "*" + ty
        elif name in ("sm_scale", "softcap"):
            signature[name] = "fp32"
        else:
            signature[name] = "i32"
        # what a launch would see: pointers 16-byte aligned, row strides multiples of 16 when head_dims are
        # (the attn_mask's strides are whatever the caller's mask has: left unspecialised)
        if (signature[name].startswith("*") and name != "MASK") or (
                name.startswith("stride") and not name.startswith("stride_m")
                and head_dim % 16 == 0 and head_dim_v % 16 == 0):
            attrs[(i,)] = [["tt.divisibility", 16]]
    src = ASTSource(fn=fn, signature=signature, constexprs={(names.index(k),): v for k, v in consts.items()},
                    attrs=attrs)
    return triton.compile(src, target=GPUTarget("cuda", arch, 32),
                          options=dict(num_warps=num_warps, num_stages=num_stages, enable_fp_fusion=True))


def _check_tile(name: str, b) -> int:
    check_int(name, b)
    if b < 16 or b & (b - 1):
        raise ValueError(f"{name} must be a power of two >= 16 (tl.arange and tl.dot need it), got {b}")
    return b


def flash_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    *,
    attn_mask: torch.Tensor | None = None,
    is_causal: bool = False,
    causal_align: str = "top_left",
    scale: float | None = None,
    enable_gqa: bool = False,
    alibi_slopes: torch.Tensor | None = None,
    return_lse: bool = False,
    backend: str = "auto",
    block_m: int | None = None,
    block_n: int | None = None,
    window_size: tuple[int, int] = (-1, -1),
    softcap: float | None = None,
    sinks: torch.Tensor | None = None,
):
    """FlashAttention-2, forward and backward: the Triton kernels on a GPU, or interpreted on the CPU.

    The same function as :func:`attn_lib.tiled.tiled_attention` (see it for the exact semantics and an
    executable "equivalent to" snippet) and as ``torch.nn.functional.scaled_dot_product_attention``.
    Legend: B batch, H query heads, Hkv key/value heads, L queries, S keys, E, Ev head_dims.

    Args:
        query: (..., H, L, E); float16, bfloat16 or float32 (float64 on the "tiled" path only). E and Ev
            need not be powers of two (48, 96: padded inside the kernels); L and S need not be multiples
            of the tiles.
        key: (..., Hkv, S, E); value: (..., Hkv, S, Ev); Hkv = H unless ``enable_gqa``.
        attn_mask: None, a bool mask broadcastable to (..., H, L, S) (True = may attend; key padding is
            (B, 1, 1, S)) or a float mask added to the logits. The kernels read it through strides (0 where
            broadcast): it is never expanded in memory.
        is_causal, causal_align: causal mask, "top_left" (torch's) or "bottom_right" (FlashAttention-2's,
            the last L of S positions; what a KV cache needs).
        scale: multiplies the logits; default 1/sqrt(E).
        enable_gqa: query head h reads key/value head h // (H / Hkv); K and V are never repeated.
        alibi_slopes: (H,) ALiBi slopes, or (B, H) per batch element (flash-attn's two forms); the bias
            -m_h |r + S - L - c| is computed inside the kernels, with the distance on the padded tensor
            (flash-attn's varlen convention: ``attn_mask=attn_lib.positional.alibi_varlen_mask(...)``).
        return_lse: also return each row's log-sum-exp (natural log, float32, shape (..., H, L)).
        backend: ``"auto"``: CUDA tensors run the compiled kernels, CPU tensors run ``tiled_attention``.
            ``"triton"``: always the Triton kernels; on CPU tensors under Triton's interpreter (slow: small
            inputs only), with no environment variable to set. ``"cuda"``: the compiled kernels only (CUDA
            tensors). ``"tiled"``: always the PyTorch version.
        block_m, block_n: tile sizes (powers of two >= 16, checked for every backend, "auto" and "tiled" too).
            Default: autotuned on a GPU, 32 in the interpreter, ``tiled_attention``'s defaults for "tiled".
        window_size: ``(left, right)``, flash-attn's sliding window: query r (at position r + S - L) may attend key
            c iff ``r + S - L - left <= c <= r + S - L + right``, -1 unbounded, default (-1, -1); ANDed with the
            causal mask and attn_mask. The kernels skip the key blocks (forward, dQ) and query blocks (dK/dV)
            outside the window in their loop bounds (:func:`attn_lib.tiled.window_tiles` lists the tiles computed).
        softcap: flash-attn's / Gemma 2's soft-capping, ``softcap * tanh(scale q . k / softcap)`` before ALiBi and
            the mask; None or 0 = off. The backward kernels multiply dS by 1 - tanh^2.
        sinks: (H,) one logit per query head, gpt-oss's attention sinks: exp(sinks[h]) joins each row's softmax
            denominator with no value, and lse includes it. Differentiable on every path: the Triton path
            computes d sinks = -sum over batch and rows of exp(sink - lse) * D from the saved lse and the
            backward's D = rowsum(dO * O) - d_lse (no extra kernel).
        See :func:`attn_lib.tiled.tiled_attention` for the exact semantics and sources of these three.

    Returns:
        ``output`` (..., H, L, Ev) in the inputs' dtype, or ``(output, lse)`` when ``return_lse``. Rows that
        see no key give 0 (lse -inf), not NaN.

    Autograd: the Triton backward (delta, dK/dV and dQ kernels), which recomputes the probabilities
    from the saved log-sum-exp; with GQA, dK and dV are summed over each group of query heads. A gradient
    through the returned lse is included (it only shifts delta). The Triton paths differentiate query, key
    and value once: a mask or slopes that require grad, and a double backward (create_graph=True), raise
    errors that name backend="tiled", which supports both.

    Notes:
        Triton's interpreter does not compute bfloat16 correctly (it treats the bit patterns as float16),
        so bfloat16 CPU inputs are upcast to float32 for the interpreted run and the output cast back.

    Raises:
        TypeError / ValueError: bad inputs, as :func:`attn_lib.tiled.tiled_attention` (S = 0, NaN/inf
        inputs and overflowing scores included), an unknown backend, bad tile sizes, float64 on a Triton path;
        ValueError: on a Triton path, an attn_mask or alibi_slopes that requires grad;
        RuntimeError: a double backward through the Triton backward;
        ValueError: backend="cuda" without a CUDA GPU (the message suggests backend="tiled" or "triton")
        or with CPU tensors. RuntimeError: a Triton backend but Triton is not installed.

    Source: Dao (2023), "FlashAttention-2", Algorithms 1 and 2.
    """
    check_choice("backend", backend, BACKENDS)
    if backend == "cuda":
        try:
            check_device("device", "cuda")
        except ValueError:
            raise ValueError("backend='cuda' needs an NVIDIA GPU, but torch.cuda.is_available() is False here: use "
                             "backend='tiled' (PyTorch) or backend='triton' with CPU tensors (Triton's interpreter)"
                             ) from None
        if query.device.type != "cuda":
            raise ValueError(f"backend='cuda' runs on CUDA tensors, got query on {query.device}; move them with "
                             ".cuda() or use backend='triton' for the interpreter")
    for name, b in (("block_m", block_m), ("block_n", block_n)):  # one rule for every backend, checked first
        if b is not None:
            _check_tile(name, b)
    on_cuda = isinstance(query, torch.Tensor) and query.device.type == "cuda"
    if backend == "tiled" or (backend == "auto" and not on_cuda):
        return tiled_attention(query, key, value, attn_mask=attn_mask, is_causal=is_causal, causal_align=causal_align,
                               scale=scale, enable_gqa=enable_gqa, alibi_slopes=alibi_slopes, return_lse=return_lse,
                               window_size=window_size, softcap=softcap, sinks=sinks,
                               **({"block_q": block_m} if block_m is not None else {}),
                               **({"block_k": block_n} if block_n is not None else {}))
    p = _prepare(query, key, value, attn_mask, is_causal, causal_align, scale, enable_gqa, alibi_slopes,
                 window_size=window_size, softcap=softcap, sinks=sinks)
    check_bool("return_lse", return_lse)
    if p.q.numel() == 0:  # no heads, no batch or no queries: nothing to launch; empty outputs as torch returns
        return tiled_attention(query, key, value, attn_mask=attn_mask, is_causal=is_causal, causal_align=causal_align,
                               scale=scale, enable_gqa=enable_gqa, alibi_slopes=alibi_slopes, return_lse=return_lse,
                               window_size=window_size, softcap=softcap, sinks=sinks)
    big = _value_scale(value, key.shape[-2])
    if big != 1.0:  # values near the dtype's maximum: attend over value / 2^k (exact), scale the average back
        out = flash_attention(query, key, value / big, attn_mask=attn_mask, is_causal=is_causal,
                              causal_align=causal_align, scale=scale, enable_gqa=enable_gqa, alibi_slopes=alibi_slopes,
                              return_lse=return_lse, backend=backend, block_m=block_m, block_n=block_n,
                              window_size=window_size, softcap=softcap, sinks=sinks)
        return (out[0] * big, out[1]) if return_lse else out * big
    if torch.is_grad_enabled():
        for name, t in (("attn_mask", attn_mask), ("alibi_slopes", alibi_slopes)):
            if isinstance(t, torch.Tensor) and t.requires_grad:
                raise ValueError(f"{name} requires grad, but the Triton kernels do not compute its gradient; expected "
                                 f"{name}.detach(), or backend='tiled', which differentiates {name} too")
    if triton is None:
        raise RuntimeError(f"backend={backend!r} needs Triton, which is not installed (Linux only); "
                           "use backend='tiled'")
    if query.device.type not in ("cuda", "cpu"):
        raise ValueError(f"the Triton kernels run on CUDA tensors or (interpreted) CPU tensors, got {query.device}")
    if query.dtype == torch.float64:
        raise TypeError("the Triton kernels take float16, bfloat16 or float32 inputs, got torch.float64; "
                        "use backend='tiled' for float64")
    interpret, dtype = not on_cuda, query.dtype
    lead, (L, E), (S, Ev) = p.lead, query.shape[-2:], value.shape[-2:]
    H = lead[-1] if lead else 1
    Hkv = key.shape[-3] if enable_gqa else H
    B = math.prod(lead) // H
    # (..., H, L, E) -> (B, H, L, E) contiguous: the backward's kernels assume it, and head_dim stride 1
    q, k, v = (t.reshape(B, n, m, d).contiguous() for t, n, m, d in ((query, H, L, E), (key, Hkv, S, E),
                                                                       (value, Hkv, S, Ev)))
    if interpret and dtype == torch.bfloat16:  # the interpreter mishandles bf16: compute in fp32
        q, k, v = q.float(), k.float(), v.float()
    mask, kind = q, MASK_NONE  # a dummy pointer when there is no mask
    if p.mask is not None:
        kind = MASK_BOOL if p.mask.dtype == torch.bool else MASK_FLOAT
        compact = attn_mask  # the caller's (small, broadcastable) mask, on query's device (_prepare checked), converted once
        compact = compact.view(torch.uint8) if kind == MASK_BOOL else compact.float()
        mask = compact.expand(*lead, L, S).reshape(B, H, L, S)  # a view with 0 strides for 4-D inputs
    alibi, alibi_stride = q, 0  # a dummy pointer without ALiBi
    if alibi_slopes is not None:
        alibi = alibi_slopes.detach().to(torch.float32).contiguous()
        alibi_stride = H if alibi.dim() == 2 else 0
    kernel_sinks = None if sinks is None else sinks.detach().to(torch.float32).contiguous()  # (H,)
    la = _Launch(B=B, H=H, Hkv=Hkv, L=L, S=S, mask=mask, mask_kind=kind, alibi=alibi, alibi_stride=alibi_stride,
                 causal_offset=p.offset, is_causal=is_causal, scale=p.scale, interpret=interpret, block_m=block_m,
                 block_n=block_n, has_alibi=alibi_slopes is not None, window=p.window, softcap=p.softcap,
                 sinks=kernel_sinks)
    needs_grad = [t is not None and t.requires_grad for t in (query, key, value, sinks)]
    if torch.is_grad_enabled() and any(needs_grad):
        out, lse = _FlashAttentionFunction.apply(q, k, v, sinks, la)
    else:
        out, lse = _forward(q, k, v, la)
    out, lse = out.to(dtype).reshape(*lead, L, Ev), lse.reshape(*lead, L)
    return (out, lse) if return_lse else out
