"""FlashAttention's forward pass as one Triton kernel (the "CUDA path" of tiled attention).

:func:`flash_attention` runs the kernel :func:`_flash_attention_kernel` compiled for an NVIDIA GPU
when the inputs are CUDA tensors, and the same kernel source under Triton's interpreter (NumPy
on the CPU) when ``backend="triton"`` is asked for with CPU tensors, so the kernel can be read
and stepped through on a laptop. With ``backend="auto"`` CPU tensors go to the PyTorch version
:func:`attn_lib.tiled.tiled_attention` instead (the interpreter is slow).

The kernel: one program per (block of BLOCK_M query rows, batch * head). It loads its query tile
once, then streams the keys and values through in blocks of BLOCK_N, keeping the online-softmax
state (running max ``m_i``, running sum ``l_i``, accumulator ``acc``) in float32 registers, and
writes the output tile and each row's log-sum-exp once at the end. Scores are kept in base 2:
``exp(x * scale) = exp2(x * scale * log2(e))``, so the kernel calls the cheap ``exp2``.

Written with plain pointer arithmetic and masked loads/stores (no block pointers: they were
removed in Triton 3.9), so it runs on Triton 3.6 through 3.9. Sources: Dao (2023),
"FlashAttention-2", Algorithm 1; Triton's tutorial 06 "Fused Attention" (the same loop order).
"""

from __future__ import annotations

import contextlib
import math
import threading
import types

import torch

import attn_lib.tiled as _tiled
from attn_lib.tiled import (
    _check_block,
    _check_flag,
    _check_qkv,
    _check_scale,
    _tiled_backward,
    tiled_attention,
)

try:  # Triton has no macOS/Windows wheels: the module still imports there (backend="auto" on CPU works)
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover - triton is in the course's Linux requirements
    triton = None
    tl = None

__all__ = ["flash_attention", "triton_available", "kernel_source", "compile_kernel", "BACKENDS"]

BACKENDS = ("auto", "triton", "tiled")
LOG2E = 1.4426950408889634  # log2(e): exp(x) = exp2(x * log2(e))
LN2 = 0.6931471805599453  # ln(2): log(x) = log2(x) * ln(2)

# Interpreter tile sizes: big tiles mean fewer Python-level steps, which is what costs time there.
_INTERPRETER_BLOCK = 64


def triton_available() -> bool:
    """True when Triton imported (Linux); the kernel can then run compiled (CUDA) or interpreted (CPU)."""
    return triton is not None


if triton is not None:

    @triton.jit
    def _flash_attention_kernel(
        Q, K, V, O, LSE,  # pointers to the first element of q, k, v, the output, the log-sum-exp
        stride_qn, stride_ql,  # strides of q viewed as (N = B*H, L, D), in elements; head_dim is contiguous
        stride_kn, stride_ks,  # strides of k (N, S, D)
        stride_vn, stride_vs,  # strides of v (N, S, D)
        stride_on, stride_ol,  # strides of the output (N, L, D)
        L, S,  # number of queries and of keys
        qk_scale,  # softmax scale * log2(e): scores in base 2
        HEAD_DIM: tl.constexpr,  # D, the real head_dim
        BLOCK_D: tl.constexpr,  # D rounded up to a power of two (>= 16): tl.arange needs one
        BLOCK_M: tl.constexpr,  # query rows per program
        BLOCK_N: tl.constexpr,  # keys per step of the inner loop
        IS_CAUSAL: tl.constexpr,  # mask keys after the query (top-left aligned, like torch)
        DOT_PRECISION: tl.constexpr,  # "ieee" for float32 inputs; "tf32" (ignored for fp16/bf16)
    ):
        # --- which tile this program computes --------------------------------------------------
        pid_m = tl.program_id(0)  # block of query rows
        pid_n = tl.program_id(1).to(tl.int64)  # (batch, head) pair; int64 so big offsets don't overflow
        offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)  # (BLOCK_M,) query rows of this tile
        offs_n = tl.arange(0, BLOCK_N)  # (BLOCK_N,) key columns, shifted at each step
        offs_d = tl.arange(0, BLOCK_D)  # (BLOCK_D,) head_dim, padded
        d_ok = offs_d < HEAD_DIM  # padding columns are loaded as 0 and never stored
        # --- load the query tile once: (BLOCK_M, BLOCK_D) ------------------------------------
        q_ptrs = Q + pid_n * stride_qn + offs_m[:, None] * stride_ql + offs_d[None, :]  # (BLOCK_M, BLOCK_D) addresses
        q = tl.load(q_ptrs, mask=(offs_m[:, None] < L) & d_ok[None, :], other=0.0)
        # --- online-softmax state, float32, one entry per query row --------------------------
        m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)  # running max (base-2 scores)
        l_i = tl.zeros([BLOCK_M], dtype=tl.float32)  # running sum of exp2(score - m_i)
        acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)  # running sum of exp2(score - m_i) * v
        # causal: keys at or after the tile's last row + 1 are above the diagonal, never visited
        hi = S
        if IS_CAUSAL:
            hi = tl.minimum(S, (pid_m + 1) * BLOCK_M)
        k_base = K + pid_n * stride_kn + offs_d[None, :]  # (1, BLOCK_D): this head's keys, row 0
        v_base = V + pid_n * stride_vn + offs_d[None, :]
        # --- stream K and V through, BLOCK_N keys at a time ----------------------------------
        for start_n in range(0, hi, BLOCK_N):
            cols = start_n + offs_n  # (BLOCK_N,) key positions of this step
            kv_mask = (cols[:, None] < S) & d_ok[None, :]  # ragged tail and head_dim padding
            k = tl.load(k_base + cols[:, None] * stride_ks, mask=kv_mask, other=0.0)  # (BLOCK_N, BLOCK_D)
            v = tl.load(v_base + cols[:, None] * stride_vs, mask=kv_mask, other=0.0)  # (BLOCK_N, BLOCK_D)
            qk = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION) * qk_scale  # (BLOCK_M, BLOCK_N), base 2
            keep = cols[None, :] < S  # keys past the end do not exist
            if IS_CAUSAL:
                keep = keep & (cols[None, :] <= offs_m[:, None])  # key position <= query position
            qk = tl.where(keep, qk, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(qk, 1))  # m_new = max(m_old, rowmax(S_ij))
            m_ref = tl.where(m_new == float("-inf"), 0.0, m_new)  # a row with no key yet: avoid -inf - -inf
            alpha = tl.exp2(m_i - m_ref)  # 2^(m_old - m_new): rescales what was summed so far
            p = tl.exp2(qk - m_ref[:, None])  # P_ij = 2^(S_ij - m_new), (BLOCK_M, BLOCK_N)
            l_i = l_i * alpha + tl.sum(p, 1)  # l_new = alpha l_old + rowsum(P_ij)
            acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=DOT_PRECISION)  # acc = alpha acc + P V
            m_i = m_new
        # --- final rescale and store -----------------------------------------------------------
        empty = l_i == 0.0  # rows that saw no key (only possible if S == 0): output 0, lse -inf
        l_safe = tl.where(empty, 1.0, l_i)
        out = acc / l_safe[:, None]  # O_i = acc / l
        lse = tl.where(empty, float("-inf"), (m_i + tl.log2(l_safe)) * 0.6931471805599453)  # natural log
        row_ok = offs_m < L
        o_ptrs = O + pid_n * stride_on + offs_m[:, None] * stride_ol + offs_d[None, :]
        tl.store(o_ptrs, out.to(O.dtype.element_ty), mask=row_ok[:, None] & d_ok[None, :])
        tl.store(LSE + pid_n * L + offs_m, lse, mask=row_ok)

else:  # pragma: no cover
    _flash_attention_kernel = None


def kernel_source() -> str:
    """The kernel's Python source (what notebook 09 reads line by line)."""
    import inspect
    import textwrap

    if triton is None:
        raise RuntimeError("Triton is not installed (it has Linux wheels only), so there is no kernel to show")
    return textwrap.dedent(inspect.getsource(_flash_attention_kernel.fn))


# ----------------------------------------------------------------------------------------------
# running the kernel under Triton's interpreter, whatever mode triton was imported in
# ----------------------------------------------------------------------------------------------
_INTERPRET_LOCK = threading.RLock()
_INTERPRETED: dict = {}  # JITFunction -> InterpretedFunction twin


def _language_objects():
    """Modules and classes of triton.language that the interpreter patches while it runs."""
    mods = [tl, tl.core, tl.math, tl.standard]
    classes = [v for m in mods for v in vars(m).values() if isinstance(v, type) and v.__module__.startswith("triton.")]
    seen, objs = set(), []
    for o in mods + classes:
        if id(o) not in seen:
            seen.add(id(o))
            objs.append(o)
    return objs


@contextlib.contextmanager
def _restore_language():
    """Snapshot triton.language's namespaces and restore them afterwards.

    The interpreter swaps triton.language's functions for NumPy versions while a kernel runs; in
    interpret mode proper (TRITON_INTERPRET=1) nothing else ever compiles, so it does not always
    put them back. Here the same process may compile for a GPU next, so everything is restored.
    """
    objs = _language_objects()
    saved = [(o, dict(vars(o))) for o in objs]
    try:
        yield
    finally:
        for o, before in saved:
            now = dict(vars(o))
            for name in now.keys() - before.keys():
                with contextlib.suppress(AttributeError, TypeError):
                    delattr(o, name)
            for name, value in before.items():
                if now.get(name, _MISSING) is not value:
                    with contextlib.suppress(AttributeError, TypeError):
                        setattr(o, name, value)


_MISSING = object()


def _interpreted(jit_fn, interp):
    """The InterpretedFunction twin of a JITFunction (cached).

    The twin runs a clone of the Python function whose globals are a private copy of the original
    module's globals in which every jitted function is replaced by its own twin. So the kernel's
    calls (and triton.language's helpers' calls, e.g. tl.max -> _elementwise_max) reach
    interpreted code, identities match the ones the interpreter checks for its fast NumPy paths,
    and the interpreter's own helper names land in the copy, not in the real modules.
    """
    from triton.runtime.jit import JITFunction

    if jit_fn in _INTERPRETED:
        return _INTERPRETED[jit_fn]
    fn = jit_fn.fn
    namespace: dict = {}  # filled below; lookups happen at call time
    clone = types.FunctionType(fn.__code__, namespace, fn.__name__, fn.__defaults__, fn.__closure__)
    clone.__kwdefaults__, clone.__annotations__ = fn.__kwdefaults__, dict(fn.__annotations__)
    clone.__module__, clone.__qualname__, clone.__doc__ = fn.__module__, fn.__qualname__, fn.__doc__
    twin = _INTERPRETED[jit_fn] = interp.InterpretedFunction(clone)
    namespace.update(fn.__globals__)
    for name, value in fn.__globals__.items():
        if isinstance(value, JITFunction):
            namespace[name] = _interpreted(value, interp)
    return twin


@contextlib.contextmanager
def _interpreter_mode():
    """Run jitted Triton code under the interpreter inside an ordinary (compiling) process.

    Triton decides at decoration time: ``@triton.jit`` gives a compiling JITFunction unless
    TRITON_INTERPRET=1 was set, and triton.language's own helpers (tl.zeros, tl.max, tl.sum, ...)
    were decorated when triton was first imported. This context (1) turns the interpret knob on,
    (2) swaps every jitted helper in triton.language for an interpreted twin, and (3) restores all
    of it on exit. The caller then launches ``_interpreted(kernel)[grid](...)``.
    """
    from triton.runtime import interpreter as interp
    from triton.runtime.jit import JITFunction

    with _INTERPRET_LOCK, _restore_language(), _interpret_knob(), _index_fix(interp):
        for mod in (tl, tl.core, tl.math, tl.standard):
            for name, value in list(vars(mod).items()):
                if isinstance(value, JITFunction):
                    setattr(mod, name, _interpreted(value, interp))
        yield interp


@contextlib.contextmanager
def _index_fix(interp):
    """Let the interpreter use a scalar tensor as a loop bound with NumPy 2 (needed for Triton <= 3.6).

    The interpreter holds scalars as 1-element arrays; Triton 3.6 turns them into Python ints with
    ``int(array)``, which NumPy 2 refuses for arrays that are not 0-dimensional, so ``range(0, S, ...)``
    fails. Triton 3.9 squeezes first; this does the same for older versions, while a kernel runs.
    """
    original = interp._patch_lang

    def patch_lang(fn):
        scope = original(fn)
        scope.set_attr(tl.core.tensor, "__index__", lambda self: int(self.handle.data.reshape(-1)[0]))
        return scope

    interp._patch_lang = patch_lang
    try:
        yield
    finally:
        interp._patch_lang = original


@contextlib.contextmanager
def _interpret_knob():
    """Turn Triton's interpret knob on (and the TRITON_INTERPRET variable it mirrors), then restore both."""
    import os

    runtime = getattr(getattr(triton, "knobs", None), "runtime", None)
    scope = getattr(runtime, "scope", None)
    if scope is not None:  # Triton >= 3.4: knobs.runtime.scope() restores the knobs and the environment
        with scope():
            runtime.interpret = True
            yield
        return
    old = os.environ.get("TRITON_INTERPRET")  # pragma: no cover - older Triton reads the variable
    os.environ["TRITON_INTERPRET"] = "1"
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("TRITON_INTERPRET", None)
        else:
            os.environ["TRITON_INTERPRET"] = old


def _kernel_is_interpreted() -> bool:
    """True when triton was imported with TRITON_INTERPRET=1 (then @triton.jit made interpreted functions)."""
    return type(_flash_attention_kernel).__name__ == "InterpretedFunction"


# ----------------------------------------------------------------------------------------------
# launching the kernel
# ----------------------------------------------------------------------------------------------
def _block_d(head_dim: int) -> int:
    return max(16, 1 << (head_dim - 1).bit_length())


_AUTOTUNED = None


def _autotuned_kernel():
    """The kernel wrapped in triton.autotune (built on first GPU use: autotuning needs a GPU)."""
    global _AUTOTUNED
    if _AUTOTUNED is None:
        configs = [
            triton.Config({"BLOCK_M": bm, "BLOCK_N": bn}, num_warps=w, num_stages=s)
            for bm, bn, w, s in [
                (64, 64, 4, 3),
                (128, 32, 4, 3),
                (128, 64, 4, 3),
                (128, 64, 8, 3),
                (128, 128, 8, 2),
                (128, 64, 4, 4),
            ]
        ]
        _AUTOTUNED = triton.autotune(configs=configs, key=["L", "S", "HEAD_DIM", "IS_CAUSAL"])(_flash_attention_kernel)
    return _AUTOTUNED


def _launch(q, k, v, out, lse, scale: float, is_causal: bool, block_m, block_n, interpret: bool) -> None:
    """Launch the kernel on 3-D q, k, v (N, L|S, D) writing into out (N, L, D) and lse (N, L)."""
    N, L, D = q.shape
    S = k.shape[1]
    strides = (*q.stride()[:2], *k.stride()[:2], *v.stride()[:2], *out.stride()[:2])
    consts = dict(
        HEAD_DIM=D,
        BLOCK_D=_block_d(D),
        IS_CAUSAL=is_causal,
        DOT_PRECISION="ieee" if q.dtype == torch.float32 else "tf32",
    )
    args = (q, k, v, out, lse, *strides, L, S, scale * LOG2E)
    if interpret:
        bm = block_m or _INTERPRETER_BLOCK
        bn = block_n or _INTERPRETER_BLOCK
        grid = (triton.cdiv(L, bm), N)
        if _kernel_is_interpreted():  # TRITON_INTERPRET=1 was set before triton was imported
            from triton.runtime import interpreter as interp

            with _INTERPRET_LOCK, _index_fix(interp):  # nothing compiles in this process: no restore needed
                _flash_attention_kernel[grid](*args, BLOCK_M=bm, BLOCK_N=bn, **consts)
        else:
            with _interpreter_mode() as interp:
                _interpreted(_flash_attention_kernel, interp)[grid](*args, BLOCK_M=bm, BLOCK_N=bn, **consts)
    elif block_m is not None or block_n is not None:  # fixed tiles: no autotuning
        bm, bn = block_m or 128, block_n or 64
        grid = (triton.cdiv(L, bm), N)
        _flash_attention_kernel[grid](*args, BLOCK_M=bm, BLOCK_N=bn, **consts)
    else:
        grid = lambda meta: (triton.cdiv(L, meta["BLOCK_M"]), N)  # noqa: E731
        _autotuned_kernel()[grid](*args, **consts)


def compile_kernel(
    dtype: torch.dtype = torch.float16,
    head_dim: int = 128,
    *,
    is_causal: bool = False,
    arch: int = 90,
    block_m: int = 128,
    block_n: int = 64,
    num_warps: int = 4,
    num_stages: int = 3,
):
    """Compile the kernel ahead of time for an NVIDIA GPU architecture; no GPU needed.

    Uses the same specialisation a launch would (pointers and row strides divisible by 16,
    head_dim contiguous). Useful to check on a CPU-only machine that the kernel compiles for the
    GPU and to read what it became: ``compiled.asm`` holds "ttir", "ttgir", "llir", "ptx" and
    "cubin"; on Hopper (``arch=90``) the PTX uses warpgroup matrix instructions (wgmma).

    Args:
        dtype: float16, bfloat16 or float32 inputs.
        head_dim: D (padded to a power of two inside).
        is_causal, block_m, block_n, num_warps, num_stages: the kernel's compile-time settings.
        arch: compute capability as an int: 80 (A100), 90 (H100/H200).

    Returns:
        triton.compiler.CompiledKernel.

    Raises:
        RuntimeError: Triton is not installed. TypeError: unsupported dtype.
    """
    import inspect

    if triton is None:
        raise RuntimeError("Triton is not installed (Linux only)")
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    ty = {torch.float16: "fp16", torch.bfloat16: "bf16", torch.float32: "fp32"}.get(dtype)
    if ty is None:
        raise TypeError(f"dtype must be torch.float16, torch.bfloat16 or torch.float32, got {dtype}")
    names = list(inspect.signature(_flash_attention_kernel.fn).parameters)
    consts = dict(
        HEAD_DIM=head_dim, BLOCK_D=_block_d(head_dim), BLOCK_M=block_m, BLOCK_N=block_n, IS_CAUSAL=is_causal,
        DOT_PRECISION="ieee" if dtype == torch.float32 else "tf32",
    )
    signature, attrs = {}, {}
    for i, name in enumerate(names):
        if name in consts:
            signature[name] = "constexpr"
        elif name == "LSE":
            signature[name] = "*fp32"
        elif name in ("Q", "K", "V", "O"):
            signature[name] = "*" + ty
        elif name == "qk_scale":
            signature[name] = "fp32"
        else:
            signature[name] = "i32"
        if signature[name].startswith("*") or (name.startswith("stride") and head_dim % 16 == 0):
            attrs[(i,)] = [["tt.divisibility", 16]]
    src = ASTSource(
        fn=_flash_attention_kernel, signature=signature,
        constexprs={(names.index(k),): v for k, v in consts.items()}, attrs=attrs,
    )
    return triton.compile(src, target=GPUTarget("cuda", arch, 32), options=dict(num_warps=num_warps, num_stages=num_stages, enable_fp_fusion=True))


def _flash_forward(q, k, v, scale, is_causal, block_m, block_n, interpret):
    """3-D (N, L, D) inputs -> (out, lse); out is NaN-free only where the kernel wrote it."""
    N, L, D = q.shape
    out = _tiled._new_output(N, L, D, dtype=q.dtype, device=q.device)
    lse = _tiled._new_output(N, L, dtype=torch.float32, device=q.device)
    if L > 0 and N > 0:
        _launch(q, k, v, out, lse, scale, is_causal, block_m, block_n, interpret)
    return out, lse


class _FlashAttentionFunction(torch.autograd.Function):
    """Triton forward; backward = the PyTorch FlashAttention-2 backward of attn_lib.tiled."""

    @staticmethod
    def forward(ctx, q, k, v, scale, is_causal, block_m, block_n, interpret):
        out, lse = _flash_forward(q, k, v, scale, is_causal, block_m, block_n, interpret)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.args = (scale, is_causal)
        return out, lse

    @staticmethod
    def backward(ctx, d_out, d_lse):
        q, k, v, out, lse = ctx.saved_tensors
        scale, is_causal = ctx.args
        if d_out is None:
            d_out = torch.zeros_like(out)
        dq, dk, dv = _tiled_backward(q, k, v, None, out, lse, d_out, d_lse, scale, is_causal, 128, 128)
        return dq, dk, dv, None, None, None, None, None


def flash_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    *,
    is_causal: bool = False,
    scale: float | None = None,
    backend: str = "auto",
    return_lse: bool = False,
    block_m: int | None = None,
    block_n: int | None = None,
):
    """FlashAttention forward pass: the Triton kernel on a GPU, or its interpreted run on the CPU.

    Args:
        query: (..., L, D), e.g. (B, H, L, D); float16, bfloat16 or float32 (float64 on the
            "tiled" path only).
        key: (..., S, D) and value: (..., S, D), same leading dims, same head_dim D. D need not be a
            power of two (48, 96: padded inside the kernel); L and S need not be multiples of the tiles.
        is_causal: mask keys after each query, top-left aligned like torch's is_causal.
        scale: multiplies the logits; default 1/sqrt(D).
        backend: ``"auto"``: CUDA tensors run the compiled Triton kernel, CPU tensors run
            :func:`attn_lib.tiled.tiled_attention`. ``"triton"``: always the Triton kernel;
            on CPU tensors it runs under Triton's interpreter (slow: small inputs only), without any
            environment variable. ``"tiled"``: always the PyTorch version.
        return_lse: also return each row's log-sum-exp (natural log, float32, shape (..., L)).
        block_m, block_n: tile sizes (powers of two, >= 16). Default: autotuned on a GPU, 64 in the
            interpreter, 128 for "tiled".

    Returns:
        ``output`` (..., L, D) in the inputs' dtype, or ``(output, lse)`` when ``return_lse``.

    Autograd: gradients flow through the FlashAttention-2 backward of tiled_attention (PyTorch).

    Notes:
        Triton's interpreter does not compute bfloat16 correctly (it treats the bit patterns as
        float16), so bfloat16 CPU inputs are upcast to float32 for the interpreted run and the
        output is cast back to bfloat16.

    Raises:
        TypeError / ValueError: bad inputs (see tiled_attention), unknown backend, bad tile sizes.
        RuntimeError: backend="triton" but Triton is not installed; a CUDA tensor but no Triton.
    """
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    _check_qkv(query, key, value, same_head_dim_v=backend != "tiled")
    _check_flag("is_causal", is_causal)
    _check_flag("return_lse", return_lse)
    for name, b in (("block_m", block_m), ("block_n", block_n)):
        if b is not None:
            _check_block(name, b)
            if b < 16 or b & (b - 1):
                raise ValueError(f"{name} must be a power of two >= 16 (tl.arange and tl.dot need it), got {b}")
    scale = _check_scale(scale, query.shape[-1])

    on_cuda = query.device.type == "cuda"
    if backend == "tiled" or (backend == "auto" and not on_cuda):
        return tiled_attention(
            query, key, value, is_causal=is_causal, scale=scale, return_lse=return_lse,
            block_q=block_m or 128, block_k=block_n or 128,
        )
    if triton is None:
        raise RuntimeError(
            f"backend={backend!r} on a {query.device.type} tensor needs Triton, which is not installed "
            "(Linux only); use backend='tiled'"
        )
    if query.device.type not in ("cuda", "cpu"):
        raise ValueError(f"the Triton kernel runs on CUDA tensors or (interpreted) CPU tensors, got {query.device}")
    if query.dtype == torch.float64:
        raise TypeError("the Triton kernel takes float16, bfloat16 or float32 inputs, got torch.float64")
    interpret = not on_cuda
    dtype = query.dtype
    lead, L, D, S = tuple(query.shape[:-2]), query.shape[-2], query.shape[-1], key.shape[-2]
    n = math.prod(lead)
    q, k, v = query.reshape(n, L, D), key.reshape(n, S, D), value.reshape(n, S, D)
    if interpret and dtype == torch.bfloat16:  # the interpreter mishandles bf16: compute in fp32
        q, k, v = q.float(), k.float(), v.float()
    # the kernel assumes head_dim is contiguous (stride 1), so its loads can be vectorised
    q, k, v = (t if t.stride(-1) == 1 else t.contiguous() for t in (q, k, v))
    if S == 0:  # no keys at all: every row is fully masked
        out = torch.zeros(*lead, L, D, dtype=dtype, device=query.device)
        lse = torch.full((*lead, L), -math.inf, dtype=torch.float32, device=query.device)
        return (out, lse) if return_lse else out
    fargs = (scale, is_causal, block_m, block_n, interpret)
    if torch.is_grad_enabled() and (query.requires_grad or key.requires_grad or value.requires_grad):
        out, lse = _FlashAttentionFunction.apply(q, k, v, *fargs)
    else:
        out, lse = _flash_forward(q, k, v, *fargs)
    out, lse = out.to(dtype).reshape(*lead, L, D), lse.reshape(*lead, L)
    return (out, lse) if return_lse else out
