"""attn_lib.flash: the Triton kernel run through Triton's interpreter on the CPU.

The interpreter executes the kernel's Python source with NumPy, one program at a time, so these
tests keep the inputs small (together well under a minute). Outputs start as NaN
(``_POISON_OUTPUTS``): an element the kernel does not store fails. Tests marked ``slow`` compile
the kernel for a GPU architecture (no GPU needed) or start a fresh Python process; deselect them
with ``-m "not slow"``. On a machine with a CUDA GPU, the compiled path is checked too.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import textwrap

import pytest
import torch

import attn_lib.flash as flash_mod
import attn_lib._tiling as tiling_mod
from attn_lib.flash import flash_attention, kernel_source
from attn_lib.tiled import tiled_attention
from references import _flex, sdpa_reference, window_reference

pytest.importorskip("triton")  # Linux only; on macOS the module imports but has no kernel

F = torch.nn.functional
TOL = {torch.float32: dict(atol=1e-5, rtol=1e-5), torch.float16: dict(atol=2e-3, rtol=2e-3),
       torch.bfloat16: dict(atol=1.6e-2, rtol=1.6e-2)}
# (L, S, head_dim, is_causal, dtype): every length in {1, 17, 64, 100, 130} as L and as S, every
# head_dim in {16, 32, 48, 64, 128}, L != S, causal on and off, float32 and float16
INTERP_CASES = [
    (1, 17, 16, True, torch.float32),
    (17, 1, 32, False, torch.float16),
    (40, 50, 48, True, torch.float16),
    (50, 40, 64, False, torch.float32),
    (70, 17, 128, True, torch.float32),
    (17, 70, 24, False, torch.float16),
]


@pytest.fixture(autouse=True)
def poison(monkeypatch):
    monkeypatch.setattr(tiling_mod, "_POISON_OUTPUTS", True)  # _new_output lives in attn_lib._tiling


def _qkv(B, H, L, S, D, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(B, H, n, D, generator=g, dtype=torch.float64).to(dtype) for n in (L, S, S))


def _ref(q, k, v, is_causal):
    q, k, v = q.double(), k.double(), v.double()
    out = F.scaled_dot_product_attention(q, k, v, is_causal=is_causal)
    s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if is_causal:
        s = s.masked_fill(~torch.ones(s.shape[-2:], dtype=torch.bool).tril(), -math.inf)
    return out, torch.logsumexp(s, dim=-1)


@pytest.mark.parametrize("L,S,D,is_causal,dtype", INTERP_CASES)
def test_interpreted_kernel_matches_torch(L, S, D, is_causal, dtype):
    q, k, v = _qkv(1, 2, L, S, D, dtype, seed=L * 7 + S + D)
    ref, ref_lse = _ref(q, k, v, is_causal)
    out, lse = flash_attention(q, k, v, is_causal=is_causal, backend="triton", return_lse=True, block_m=32, block_n=32)
    assert out.dtype == dtype and out.shape == ref.shape and lse.dtype == torch.float32
    torch.testing.assert_close(out.double(), ref, **TOL[dtype])
    torch.testing.assert_close(lse.double(), ref_lse, atol=1e-4, rtol=1e-5)


def test_default_interpreter_tiles_and_odd_batch_layout():
    # (B, L, H, D) transposed to (B, H, L, D): non-contiguous input, default 64-row tiles, ragged
    g = torch.Generator().manual_seed(1)
    x = torch.randn(2, 70, 3, 3, 24, generator=g)
    q, k, v = (x[:, :, :, i].transpose(1, 2) for i in range(3))
    out = flash_attention(q, k, v, backend="triton", scale=0.2)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, scale=0.2), atol=1e-5, rtol=1e-5)


def test_bfloat16_is_upcast_in_the_interpreter():
    q, k, v = _qkv(1, 1, 40, 33, 16, torch.bfloat16, seed=2)
    out = flash_attention(q, k, v, backend="triton", is_causal=True)
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out.double(), _ref(q, k, v, True)[0], **TOL[torch.bfloat16])


def test_causal_kernel_never_reads_blocks_above_the_diagonal(monkeypatch):
    # NaN in the values no row may see: if the kernel loaded those blocks, 0 * NaN = NaN would show.
    # NaN inputs are refused at the door, so the check is switched off for this test only.
    monkeypatch.setattr(tiling_mod, "check_qkv", lambda *args, **kwargs: None)
    q, k, v = _qkv(1, 1, 32, 96, 16, torch.float32, seed=3)
    v_poisoned = v.clone()
    v_poisoned[..., 32:, :] = math.nan  # keys no row may see (top-left causal, L < S)
    out = flash_attention(q, k, v_poisoned, is_causal=True, backend="triton", block_m=16, block_n=16)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, is_causal=True), atol=1e-5, rtol=1e-5)
    # when not causal those keys are read, and the NaN shows: the test can fail
    assert torch.isnan(flash_attention(q, k, v_poisoned, backend="triton", block_m=16, block_n=16)).all()


def test_auto_backend_on_cpu_is_tiled_attention():
    q, k, v = _qkv(2, 2, 50, 70, 24, torch.float32, seed=4)
    assert torch.equal(flash_attention(q, k, v, is_causal=True), tiled_attention(q, k, v, is_causal=True))
    assert torch.equal(flash_attention(q, k, v, backend="tiled"), tiled_attention(q, k, v))
    assert flash_mod._AUTOTUNED == {}  # autotuning is only ever set up for a GPU



def _gqa(B, H, Hkv, L, S, E, Ev, seed, requires_grad=False):
    g = torch.Generator().manual_seed(seed)
    ts = (torch.randn(B, H, L, E, generator=g), torch.randn(B, Hkv, S, E, generator=g),
          torch.randn(B, Hkv, S, Ev, generator=g))
    return tuple(t.requires_grad_(requires_grad) for t in ts)


# (H, Hkv, L, S, E, Ev, align): GQA 8/2, MQA 4/1, MHA; L < S, L = S, L > S; head_dims not powers of two, Ev != E
KERNEL_CASES = [
    (8, 2, 9, 21, 24, 16, "bottom_right"),
    (4, 1, 21, 21, 16, 40, "bottom_right"),
    (4, 1, 25, 9, 40, 24, "bottom_right"),
    (2, 2, 21, 9, 24, 24, "top_left"),
]


@pytest.mark.parametrize("H,Hkv,L,S,E,Ev,align", KERNEL_CASES)
def test_kernels_forward_and_backward_with_gqa_padding_alibi(H, Hkv, L, S, E, Ev, align):
    # forward AND the three backward kernels, interpreted, against autograd of a float64 torch reference
    q, k, v = _gqa(2, H, Hkv, L, S, E, Ev, seed=L * 3 + S + H, requires_grad=True)
    pad = (torch.arange(S) < torch.tensor([S, max(1, S - 6)])[:, None])[:, None, None, :]  # lengths differ per batch
    slopes = torch.linspace(0.4, 0.0, H)
    kw = dict(attn_mask=pad, is_causal=True, causal_align=align, enable_gqa=H != Hkv, alibi_slopes=slopes)
    out, lse = flash_attention(q, k, v, backend="triton", return_lse=True, block_m=16, block_n=16, **kw)
    q64, k64, v64 = (t.detach().double().requires_grad_() for t in (q, k, v))
    ref = sdpa_reference(q64, k64, v64, **kw)
    torch.testing.assert_close(out.double(), ref, atol=1e-5, rtol=1e-5)
    assert not torch.isnan(lse).any()
    if align == "bottom_right" and L > S:
        assert (out[:, :, : L - S] == 0).all()  # rows that see no key: 0, not NaN
    d_out = torch.randn(out.shape, generator=torch.Generator().manual_seed(1))
    grads = torch.autograd.grad(out, (q, k, v), d_out)
    ref_grads = torch.autograd.grad(ref, (q64, k64, v64), d_out.double())
    for name, got, want in zip("qkv", grads, ref_grads):
        assert got.shape == want.shape, name  # dk, dv have Hkv heads: summed over each query group
        torch.testing.assert_close(got.double(), want, atol=2e-5, rtol=1e-4, msg=f"d{name}")


def test_kernels_float_mask_and_top_left_causal_gradients():
    q, k, v = _gqa(1, 2, 2, 20, 30, 16, 16, seed=9, requires_grad=True)
    add = torch.randn(20, 30, generator=torch.Generator().manual_seed(2))  # (L, S), broadcast over heads
    out = flash_attention(q, k, v, backend="triton", attn_mask=add, is_causal=True, block_m=16, block_n=16)
    q64, k64, v64 = (t.detach().double().requires_grad_() for t in (q, k, v))
    keep = torch.ones(20, 30, dtype=torch.bool).tril()
    ref = F.scaled_dot_product_attention(q64, k64, v64, attn_mask=add.double().masked_fill(~keep, -math.inf))
    torch.testing.assert_close(out.double(), ref, atol=1e-5, rtol=1e-5)
    g = torch.autograd.grad(out.sum(), (q, k, v))
    gr = torch.autograd.grad(ref.sum(), (q64, k64, v64))
    for got, want in zip(g, gr):
        torch.testing.assert_close(got.double(), want, atol=2e-5, rtol=1e-4)


def test_gradient_through_lse_matches_tiled():
    q, k, v = _gqa(1, 2, 1, 12, 18, 16, 16, seed=3, requires_grad=True)
    out, lse = flash_attention(q, k, v, backend="triton", enable_gqa=True, return_lse=True, block_m=16, block_n=16)
    g = torch.autograd.grad(out.sum() + lse.sum(), (q, k, v))
    q64, k64, v64 = (t.detach().double().requires_grad_() for t in (q, k, v))
    out64, lse64 = tiled_attention(q64, k64, v64, enable_gqa=True, return_lse=True)
    lse_ref = torch.logsumexp(q64 @ k64.repeat_interleave(2, 1).transpose(-2, -1) / 4, -1)  # 1/sqrt(16)
    torch.testing.assert_close(lse64, lse_ref)
    gr = torch.autograd.grad(out64.sum() + lse64.sum(), (q64, k64, v64))
    for got, want in zip(g, gr):
        torch.testing.assert_close(got.double(), want, atol=2e-5, rtol=1e-4)


def test_no_keys_refused_in_every_backend():
    q = torch.randn(1, 2, 3, 16)
    empty = torch.zeros(1, 2, 0, 16)
    for backend in ("triton", "tiled", "auto"):
        with pytest.raises(ValueError, match="S >= 1"):
            flash_attention(q, empty, empty, backend=backend)


def test_nan_inputs_refused_before_the_kernel():
    q = torch.randn(1, 1, 4, 16)
    bad = q.clone()
    bad[0, 0, 1, 3] = math.nan
    with pytest.raises(ValueError, match=r"key contains NaN \(1 value\)"):
        flash_attention(q, bad, q, backend="triton")


def test_cuda_backend_without_a_gpu_says_what_to_use(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    q = torch.randn(1, 1, 4, 16)
    with pytest.raises(ValueError, match="backend='tiled'.*backend='triton'"):
        flash_attention(q, q, q, backend="cuda")


def test_interpreter_leaves_triton_as_it_found_it():
    import triton
    import triton.language as tl
    from triton.runtime.jit import JITFunction

    before = {name: getattr(tl, name) for name in ("max", "sum", "zeros", "dot", "load", "where")}
    env_before = os.environ.get("TRITON_INTERPRET")
    q = torch.randn(1, 1, 9, 16)
    flash_attention(q, q, q, backend="triton")
    assert {name: getattr(tl, name) for name in before} == before
    assert isinstance(tl.max, JITFunction) and not triton.knobs.runtime.interpret
    assert os.environ.get("TRITON_INTERPRET") == env_before


def test_triton_internals_the_interpreter_twin_relies_on():
    """attn_lib._triton_interp builds on these Triton internals: this test fails first when a release changes them."""
    import inspect

    import triton
    import triton.language as tl
    from triton.runtime import interpreter
    from triton.runtime.jit import JITFunction

    assert isinstance(interpreter.InterpretedFunction, type)
    assert list(inspect.signature(interpreter.InterpretedFunction.__init__).parameters)[:2] == ["self", "fn"]
    assert isinstance(tl.standard.max, JITFunction) or isinstance(tl.max, JITFunction)  # helpers are jitted
    assert callable(flash_mod._attn_fwd_kernel.fn) and hasattr(flash_mod._attn_fwd_kernel.fn, "__globals__")
    runtime = triton.knobs.runtime
    assert hasattr(runtime, "interpret") and callable(runtime.scope)
    for mod in (tl, tl.core, tl.math, tl.standard):  # the namespaces interpreter_mode snapshots and restores
        assert isinstance(vars(mod), dict)


@pytest.mark.slow
def test_works_when_triton_was_imported_in_interpret_mode():
    # a fresh process where the user did set TRITON_INTERPRET=1 before importing triton
    code = textwrap.dedent("""
        import torch, triton
        from attn_lib.flash import flash_attention, _kernel_is_interpreted
        assert _kernel_is_interpreted()
        q, k, v = (torch.randn(1, 2, n, 48, generator=torch.Generator().manual_seed(n)) for n in (30, 45, 45))
        out = flash_attention(q, k, v, is_causal=True, backend="triton", block_m=16, block_n=16)
        ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
        print("ok")
    """)
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    res = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=180)
    assert res.returncode == 0 and res.stdout.strip() == "ok", res.stderr[-2000:]


@pytest.mark.slow
def test_kernel_compiles_for_hopper_after_an_interpreted_run():
    # no GPU needed: Triton compiles to PTX and a cubin with its bundled ptxas. Running the
    # interpreter first checks that it left triton.language fit to compile again.
    q = torch.randn(1, 1, 9, 48)
    flash_attention(q, q, q, backend="triton")
    compiled = flash_mod.compile_kernel(torch.bfloat16, 48, is_causal=True, arch=90, block_m=64, block_n=64)
    ptx = compiled.asm["ptx"]
    assert ".target sm_90a" in ptx
    assert "wgmma.mma_async" in ptx  # Hopper's warpgroup matrix instructions
    assert "cp.async" in ptx  # K and V tiles are prefetched (software pipelining)


@pytest.mark.slow
@pytest.mark.parametrize("arch", [80, 90])
@pytest.mark.parametrize("kernel", ["forward", "preprocess", "dkdv", "dq"])
def test_every_kernel_compiles_ahead_of_time_for_a100_and_h100(kernel, arch):
    # what the README claims without a GPU: all four kernels compile for sm_80 and sm_90 (PTX and a cubin)
    compiled = flash_mod.compile_kernel(torch.float16, 64, kernel=kernel, is_causal=True,
                                        mask_kind=flash_mod.MASK_FLOAT, alibi=True, window=True, softcap=True,
                                        sinks=True, arch=arch)
    assert f".target sm_{arch}" in compiled.asm["ptx"]
    assert len(compiled.asm["cubin"]) > 1000


@pytest.mark.slow
@pytest.mark.parametrize("kernel", ["preprocess", "dkdv", "dq"])
def test_backward_kernels_compile_for_hopper(kernel):
    compiled = flash_mod.compile_kernel(torch.bfloat16, 64, kernel=kernel, is_causal=True, mask_kind=flash_mod.MASK_BOOL,
                                        alibi=True, arch=90, block_m=64, block_n=64)
    ptx = compiled.asm["ptx"]
    assert ".target sm_90a" in ptx
    if kernel != "preprocess":
        assert "wgmma.mma_async" in ptx or "mma.sync" in ptx  # the products run on tensor cores


@pytest.mark.parametrize("kwargs,exc,words", [
    (dict(arch=7), ValueError, "arch must be one of 80, 86"),  # aborted the whole process inside LLVM
    (dict(arch="90"), TypeError, "arch must be one of"),
    (dict(num_warps=0), ValueError, "num_warps must be one of 1, 2, 4"),
    (dict(num_warps=3), ValueError, "num_warps"),
    (dict(num_stages=0), ValueError, "num_stages must be an int >= 1"),
    (dict(is_causal="yes"), TypeError, "is_causal must be a bool"),
    (dict(alibi=1), TypeError, "alibi must be a bool"),
    (dict(window=1), TypeError, "window must be a bool"),
    (dict(softcap=30.0), TypeError, "softcap must be a bool"),
    (dict(sinks=None), TypeError, "sinks must be a bool"),
])
def test_compile_kernel_refuses_what_would_crash_or_give_raw_errors(kwargs, exc, words):
    with pytest.raises(exc, match=words):
        flash_mod.compile_kernel(torch.float16, 64, **kwargs)


def test_compile_kernel_refuses_bad_settings():
    with pytest.raises(ValueError, match="head_dim must be an int >= 1, got 0"):
        flash_mod.compile_kernel(torch.float16, 0)
    with pytest.raises(ValueError, match="kernel"):
        flash_mod.compile_kernel(torch.float16, 64, kernel="backward")
    with pytest.raises(ValueError, match="power of two"):
        flash_mod.compile_kernel(torch.float16, 64, block_m=48)


def test_kernel_source_uses_pointer_arithmetic_not_block_pointers():
    for name in flash_mod.KERNELS:
        src = kernel_source(name)
        assert src.startswith("@triton.jit")
        assert "make_block_ptr" not in src and "advance" not in src  # removed in Triton 3.9
    for piece in ("tl.exp2", "tl.float32", "tl.store(LSE", "mask=", "h // GROUP"):
        assert piece in kernel_source()
    assert "for g in range(0, GROUP)" in kernel_source("dkdv")  # dK, dV summed over the query group


@pytest.mark.parametrize(
    "kwargs,exc,words",
    [
        (dict(backend="gpu"), ValueError, "backend must be one of"),
        (dict(backend="triton", block_m=48), ValueError, "power of two"),
        (dict(backend="triton", block_n=8), ValueError, "power of two"),
        (dict(backend="triton", value=torch.ones(1, 4, 16)), ValueError, "same number of positions S"),
        (dict(backend="triton", block_m=32.0), TypeError, "block_m"),
        (dict(backend="triton", dtype=torch.float64), TypeError, "float64"),
        (dict(is_causal="yes"), TypeError, "is_causal"),
    ],
)
def test_bad_arguments_raise_clear_errors(kwargs, exc, words):
    dtype = kwargs.pop("dtype", torch.float32)
    q, k = torch.ones(1, 3, 16, dtype=dtype), torch.ones(1, 5, 16, dtype=dtype)
    v = kwargs.pop("value", torch.ones(1, 5, 16, dtype=dtype)).to(dtype)
    with pytest.raises(exc, match=words):
        flash_attention(q, k, v, **kwargs)


@pytest.mark.parametrize("backend", ["auto", "tiled", "triton"])
@pytest.mark.parametrize("name,value,words", [("block_m", 0, r"block_m must be a power of two >= 16 .*got 0"),
                                              ("block_n", 0, r"block_n must be a power of two >= 16 .*got 0"),
                                              ("block_m", 17, "block_m must be a power of two"),
                                              ("block_m", -1, r"block_m must be a power of two >= 16 .*got -1")])
def test_block_sizes_follow_one_rule_in_every_backend(backend, name, value, words):
    q = torch.ones(1, 1, 3, 16)
    with pytest.raises(ValueError, match=words):
        flash_attention(q, q, q, backend=backend, **{name: value})


def test_finite_extremes_of_mask_and_slopes_are_not_nan_in_the_kernel():
    q, k, v = _qkv(1, 2, 4, 5, 8, torch.float32)
    mask = torch.zeros(4, 5)
    mask[1] = 3e38  # a finite float mask: a whole row shifted, which softmax ignores
    for kw in (dict(attn_mask=mask), dict(alibi_slopes=torch.tensor([3e38, 3e38]))):
        out = flash_attention(q, k, v, backend="triton", **kw)
        torch.testing.assert_close(out, tiled_attention(q, k, v, **kw), atol=1e-5, rtol=1e-5)
        assert torch.isfinite(out).all(), kw


def test_per_batch_alibi_slopes_in_the_kernel():
    q, k, v = _qkv(3, 2, 5, 7, 16, torch.float32)
    slopes = torch.rand(3, 2)
    for kw in (dict(), dict(is_causal=True, causal_align="bottom_right")):
        qs, ks, vs, sl = (t.clone().requires_grad_() for t in (q, k, v, slopes))
        out = flash_attention(qs, ks, vs, alibi_slopes=slopes, backend="triton", **kw)
        ref = tiled_attention(qs, ks, vs, alibi_slopes=slopes, **kw)
        torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
        grads = torch.autograd.grad(out.sum(), (qs, ks, vs))
        grads_ref = torch.autograd.grad(ref.sum(), (qs, ks, vs))
        for g, g_ref in zip(grads, grads_ref):
            torch.testing.assert_close(g, g_ref, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("name", ["attn_mask", "alibi_slopes"])
def test_triton_refuses_a_mask_or_slopes_that_need_a_gradient(name):
    q, k, v = _qkv(1, 2, 4, 5, 16, torch.float32)
    t = (torch.zeros(4, 5) if name == "attn_mask" else torch.rand(2)).requires_grad_()
    with pytest.raises(ValueError, match=f"{name} requires grad.*backend='tiled'"):
        flash_attention(q, k, v, backend="triton", **{name: t})
    out = flash_attention(q, k, v, backend="auto", **{name: t})  # on the CPU: tiled, which differentiates it
    out.sum().backward()
    assert t.grad is not None and torch.isfinite(t.grad).all()


def test_triton_double_backward_says_it_is_not_supported():
    q, k, v = (t.requires_grad_() for t in _qkv(1, 1, 4, 4, 16, torch.float32))
    out = flash_attention(q, k, v, backend="triton")
    with pytest.raises(RuntimeError, match="no double backward.*backend='tiled'"):
        torch.autograd.grad(out.sum(), q, create_graph=True)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("L,S,D,is_causal", [(1, 1, 64, True), (100, 130, 48, False), (1000, 777, 128, True)])
def test_compiled_kernel_on_gpu(L, S, D, is_causal, dtype):  # pragma: no cover - no GPU in CI
    q, k, v = (t.cuda() for t in _qkv(2, 3, L, S, D, dtype, seed=L + S))
    out = flash_attention(q, k, v, is_causal=is_causal)
    ref = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), is_causal=is_causal)
    assert torch.isfinite(out).all()
    assert ((out.double() - ref).norm() / ref.norm()).item() < (1e-2 if dtype == torch.float16 else 3e-2)


# ----------------------------------------------------------------------------------------------
# window_size, softcap and sinks in the four kernels (issue 25): interpreted, small
# ----------------------------------------------------------------------------------------------
# (H, Hkv, L, S, window, softcap, sinks, is_causal, align): GQA and MHA, L < S and L > S, both alignments
WINDOW_CASES = [
    (4, 2, 13, 40, (5, 2), None, False, False, "top_left"),
    (4, 2, 13, 40, (7, -1), 3.0, True, True, "bottom_right"),
    (2, 1, 40, 13, (-1, 3), 2.0, True, True, "top_left"),
]


@pytest.mark.parametrize("H,Hkv,L,S,window,cap,sink,is_causal,align", WINDOW_CASES)
def test_kernels_window_softcap_sinks_forward_and_backward(H, Hkv, L, S, window, cap, sink, is_causal, align):

    g = torch.Generator().manual_seed(L + S)
    q, k, v = (torch.randn(2, h, n, 16, generator=g).requires_grad_() for h, n in ((H, L), (Hkv, S), (Hkv, S)))
    z = (torch.randn(H, generator=g) * 2).requires_grad_() if sink else None
    pad = (torch.arange(S) < torch.tensor([S, S - 4])[:, None])[:, None, None, :]
    kw = dict(window_size=window, softcap=cap, sinks=z, is_causal=is_causal, causal_align=align, enable_gqa=H != Hkv,
              attn_mask=pad)
    out, lse = flash_attention(q, k, v, backend="triton", return_lse=True, block_m=16, block_n=16, **kw)
    inputs = (q, k, v) + ((z,) if sink else ())
    inputs64 = tuple(t.detach().double().requires_grad_() for t in inputs)
    ref, ref_lse = window_reference(*inputs64[:3], **{**kw, "sinks": inputs64[3] if sink else None})
    torch.testing.assert_close(out.double(), ref, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(lse.double(), ref_lse, atol=1e-5, rtol=1e-5)
    d_out = torch.randn(out.shape, generator=g)

    def loss(o, l_):
        return (o * d_out.to(o.dtype)).sum() + l_.masked_fill(l_ == -math.inf, 0.0).sum()

    for name, got, want in zip(["q", "k", "v", "sinks"], torch.autograd.grad(loss(out, lse), inputs),
                               torch.autograd.grad(loss(ref, ref_lse), inputs64)):
        assert got.shape == want.shape, name
        torch.testing.assert_close(got.double(), want, atol=5e-5, rtol=1e-4, msg=f"d{name}")


def test_kernels_window_and_softcap_match_flex_attention():

    g = torch.Generator().manual_seed(11)
    q, k, v = (torch.randn(1, 2, n, 16, generator=g) for n in (20, 30, 30))
    out, lse = flash_attention(q, k, v, backend="triton", window_size=(6, 1), softcap=2.5, return_lse=True,
                               block_m=16, block_n=16)
    flex, flex_lse = _flex(q.double(), k.double(), v.double(), window_size=(6, 1), softcap=2.5)
    torch.testing.assert_close(out.double(), flex, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(lse.double(), flex_lse, atol=1e-5, rtol=1e-5)


@pytest.mark.filterwarnings("ignore:All-NaN slice encountered:RuntimeWarning")  # the interpreter's max over NaN tiles
def test_kernels_never_read_tiles_outside_the_window(monkeypatch):
    # NaN in every tile window_tiles says is skipped: a kernel that read one would spread 0 * NaN = NaN.
    from attn_lib.tiled import skipped_tiles, window_tiles

    monkeypatch.setattr(tiling_mod, "check_qkv", lambda *args, **kwargs: None)  # NaN inputs are refused otherwise
    g = torch.Generator().manual_seed(4)
    # forward and dQ: 16 queries at positions 80..95, window 16 back: key blocks 4, 5 computed, 0..3 skipped
    q, k, v = (torch.randn(1, 1, n, 16, generator=g) for n in (16, 96, 96))
    assert window_tiles(16, 96, 16, 16, window_size=(16, 0)) == [(0, 4), (0, 5)]
    assert skipped_tiles(16, 96, 16, 16, window_size=(16, 0)) == 4
    k_bad, v_bad = k.clone(), v.clone()
    k_bad[..., :64, :], v_bad[..., :64, :] = math.nan, math.nan
    q.requires_grad_()
    out = flash_attention(q, k_bad, v_bad, backend="triton", window_size=(16, 0), block_m=16, block_n=16)
    want = flash_attention(q, k, v, backend="triton", window_size=(16, 0), block_m=16, block_n=16)
    torch.testing.assert_close(out, want)
    (dq,) = torch.autograd.grad(out.sum(), q)
    assert dq.isfinite().all()
    # dK/dV: 96 queries, 16 keys; rows 0..79 sit before key 0 (window (-1, 0)): query blocks 0..4 skipped
    q, k, v = (torch.randn(1, 1, n, 16, generator=g) for n in (96, 16, 16))
    assert skipped_tiles(96, 16, 16, 16, window_size=(-1, 0)) == 5
    q_bad = q.clone()
    q_bad[..., :80, :] = math.nan
    k.requires_grad_()
    v.requires_grad_()
    out = flash_attention(q_bad, k, v, backend="triton", window_size=(-1, 0), block_m=16, block_n=16)
    assert (out[..., :80, :] == 0).all() and out.isfinite().all()
    dk, dv = torch.autograd.grad(out.sum(), (k, v))
    assert dk.isfinite().all() and dv.isfinite().all()
    # not windowed, those tiles are read, and the NaN shows: the test can fail
    assert flash_attention(q_bad, k, v, backend="triton", block_m=16, block_n=16).isnan().any()


@pytest.mark.parametrize("kwargs,exc,words", [
    (dict(window_size=(1, -2)), ValueError, "window_size"),
    (dict(softcap=-2.0), ValueError, "softcap must be a number >= 0"),
    (dict(sinks=torch.zeros(5)), ValueError, r"sinks must have shape \(H,\)"),
])
def test_triton_window_softcap_sinks_bad_arguments(kwargs, exc, words):
    q = torch.randn(1, 2, 5, 16)
    with pytest.raises(exc, match=words):
        flash_attention(q, q, q, backend="triton", **kwargs)


# ----------------------------------------------------------------------------------------------
# issue 38: the kernels' soft-cap keeps float32's precision for every cap (it used to be uniform at 1e30)
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("cap", [1.0, 50.0, 1e4, 1e6, 1e30])
def test_kernels_softcap_is_precise_for_small_and_huge_caps(cap):
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(1, 2, 20, 16, generator=g) * 3 for _ in range(3))
    q.requires_grad_()
    k.requires_grad_()
    out = flash_attention(q, k, v, backend="triton", softcap=cap, block_m=16, block_n=16)
    q64, k64 = q.detach().double().requires_grad_(), k.detach().double().requires_grad_()
    ref, _ = window_reference(q64, k64, v.double(), softcap=cap)  # cap * torch.tanh in float64
    torch.testing.assert_close(out.double(), ref, atol=2e-5, rtol=2e-5)
    # without a cap the scores reach about 30, so a cap of 1e4 or more must leave them nearly unchanged
    if cap >= 1e4:
        torch.testing.assert_close(out, flash_attention(q, k, v, backend="triton", block_m=16, block_n=16),
                                   atol=2e-5, rtol=2e-5)
    d_out = torch.randn(out.shape, generator=g)
    got = torch.autograd.grad((out * d_out).sum(), (q, k))
    want = torch.autograd.grad((ref * d_out.double()).sum(), (q64, k64))
    for name, a, b in zip("qk", got, want):
        torch.testing.assert_close(a.double(), b, atol=1e-4, rtol=1e-4, msg=f"d{name}")


@pytest.mark.parametrize("kwargs,words", [
    (dict(softcap=1e39), r"softcap must be None, 0 \(off\) or a number in"),
    (dict(sinks=torch.full((2,), 1e39, dtype=torch.float64)), r"sinks holds 1e\+39, more than torch.float32"),
    (dict(attn_mask=torch.full((5, 5), 1e39, dtype=torch.float64)), r"attn_mask holds 1e\+39"),
    (dict(sinks=torch.zeros(2, device="meta")), "sinks must be on the query's device cpu, got meta"),
    (dict(alibi_slopes=torch.zeros(2, device="meta")), "alibi_slopes must be on the query's device"),
])
def test_triton_refuses_side_values_the_dtype_cannot_hold_and_other_devices(kwargs, words):
    q = torch.randn(1, 2, 5, 16)
    with pytest.raises(ValueError, match=words):
        flash_attention(q, q, q, backend="triton", **kwargs)


def test_triton_huge_window_sides_and_values_near_the_float32_maximum():
    g = torch.Generator().manual_seed(38)
    q = torch.randn(1, 2, 20, 16, generator=g)
    # a side of 2**63 wrapped around in the kernels' integers and blocked every key (output 0)
    torch.testing.assert_close(flash_attention(q, q, q, backend="triton", window_size=(2**63, 2**63), block_m=16,
                                               block_n=16),
                               flash_attention(q, q, q, backend="triton", block_m=16, block_n=16))
    v = torch.full((1, 2, 20, 16), 3e38)  # the running sum of 20 such values overflowed to inf
    out = flash_attention(q, q, v, backend="triton", block_m=16, block_n=16)
    ref = torch.softmax(q.double() @ q.double().transpose(-1, -2) / 4, -1) @ v.double()
    torch.testing.assert_close(out.double(), ref, rtol=1e-5, atol=0)
