"""Benchmarks of tiled attention: ``python -m attn_lib.course.bench cpu`` or ``python -m attn_lib.course.bench gpu``.

``cpu``: naive attention (full score matrix) vs :func:`attn_lib.tiled.tiled_attention` (eager, and with
``compile_tile=True``: each tile's online-softmax step under ``torch.compile``, the compile time reported)
vs ``torch.nn.functional.scaled_dot_product_attention`` (which runs a flash-style fused kernel on
the CPU), for N = 1k, 2k, 4k, 8k tokens, 8 heads, head_dim 64, float32, one torch thread: median
CPU time and wall time, and peak extra memory (every allocation through PyTorch's CPU allocator
during the call, measured with torch.profiler), plus the ratios measured in the same run. Writes
``docs/benchmarks_cpu.json``.

``gpu`` (needs a CUDA GPU; without one it says so and exits 0): first correctness of the Triton
kernel at ragged lengths in float16 and bfloat16 against a float64 reference, then
``triton.testing.do_bench`` medians for batch 4, 32 heads, head_dim 64 and 128, N = 1k..16k,
causal off/on, for the Triton kernel and torch's FLASH_ATTENTION and CUDNN_ATTENTION backends,
as TFLOP/s = 4 B H N^2 D / time (halved when causal), with a large bfloat16 matrix product as
the ceiling. Writes ``docs/benchmarks_gpu.json``. Takes about 2-3 minutes on one H100/H200.

Both print a table. ``--sizes``, ``--repeats`` and ``--out`` shrink or redirect a run (the tests
run the CLI at tiny sizes).

Why one module of over 400 lines: it is one command, ``python -m attn_lib.course.bench cpu|gpu``; the two halves
share the record format of docs/benchmarks_*.json.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as _dt
import json
import math
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

from attn_lib.course._setup import REPO_ROOT
from attn_lib.tiled import BLOCK_K, BLOCK_Q, naive_attention, tiled_attention


@contextlib.contextmanager
def _quiet_stderr():
    """Silence C-level stderr (the profiler's start/stop log lines) for the duration."""
    try:
        fd = os.dup(2)
    except OSError:  # pragma: no cover - no stderr at all
        yield
        return
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 2)
            try:
                yield
            finally:
                os.dup2(fd, 2)
    finally:
        os.close(fd)


def measure_peak_memory(fn, *args, **kwargs) -> tuple[int, object]:
    """Peak extra CPU memory, in bytes, that torch allocates while running ``fn(*args, **kwargs)``.

    Counts every allocation and free made through PyTorch's CPU allocator during the call (with
    ``torch.profiler``'s memory profiling) and returns the highest running total, i.e. the most
    memory the call held at once beyond what existed before; the returned output counts, the
    inputs do not. Exact and deterministic for a given computation (no RSS noise), but it only
    sees tensors, not the Python interpreter's own memory.

    Returns:
        (peak_bytes, result of the call)
    """
    from torch.profiler import ProfilerActivity, profile

    with _quiet_stderr(), profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        result = fn(*args, **kwargs)
    events = []

    def walk(node):
        extra = node.extra_fields
        if hasattr(extra, "alloc_size"):
            events.append((node.start_time_ns, extra.alloc_size))
        for child in node.children:
            walk(child)

    for root in prof.profiler.kineto_results.experimental_event_tree():
        walk(root)
    events.sort(key=lambda e: e[0])
    total = peak = 0
    for _, size in events:  # frees have negative sizes
        total += size
        peak = max(peak, total)
    return peak, result

DOCS = REPO_ROOT / "docs"
CPU_JSON = DOCS / "benchmarks_cpu.json"
GPU_JSON = DOCS / "benchmarks_gpu.json"
MIB = 2**20


# ----------------------------------------------------------------------------------------------
# shared helpers
# ----------------------------------------------------------------------------------------------
def attention_flops(batch: int, heads: int, n: int, head_dim: int, is_causal: bool) -> float:
    """Matrix-multiply FLOPs of attention: 2 products of 2 N^2 D each per head, halved when causal."""
    flops = 4.0 * batch * heads * n * n * head_dim
    return flops / 2 if is_causal else flops


def _versions() -> dict:
    info = {
        "date_utc": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "platform": platform.platform(),
    }
    try:
        import triton

        info["triton"] = triton.__version__
    except ImportError:
        info["triton"] = None
    return info


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _save(result: dict, out: Path | None) -> None:
    if out is None:
        return
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"\nwrote {out}")


def _ratio(a: float, b: float) -> float:
    return a / b if b > 0 else math.inf


def format_table(headers: list[str], rows: list[list]) -> str:
    """A plain-text table with right-aligned columns."""
    cells = [[str(h) for h in headers]] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = ["  ".join(c.rjust(w) for c, w in zip(r, widths)) for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


# ----------------------------------------------------------------------------------------------
# CPU
# ----------------------------------------------------------------------------------------------
CPU_METHODS = {
    "naive": lambda q, k, v: naive_attention(q, k, v),
    "tiled": lambda q, k, v: tiled_attention(q, k, v),
    "torch": lambda q, k, v: torch.nn.functional.scaled_dot_product_attention(q, k, v),
}
# the fusion lesson: the same tiled loop with each tile's online-softmax step under torch.compile (Inductor)
COMPILED_METHOD = {"tiled_compiled": lambda q, k, v: tiled_attention(q, k, v, compile_tile=True)}


def _compile_info() -> dict:
    """Where torch caches what Inductor compiles (a later process reuses it: its first call compiles faster)."""
    info = {}
    try:
        from torch._inductor import config as inductor_config
        from torch._inductor.runtime.cache_dir_utils import cache_dir

        info = {"inductor_cache_dir": cache_dir(), "fx_graph_cache": bool(inductor_config.fx_graph_cache)}
    except Exception as exc:  # pragma: no cover - private API moved
        info = {"inductor_cache_dir": None, "note": f"cache location unknown: {exc!r}"}
    return info


def run_cpu(sizes=(1024, 2048, 4096, 8192), heads: int = 8, head_dim: int = 64, repeats: int = 3,
            out: Path | None = CPU_JSON, seed: int = 0, threads: int | None = 1, compile_tile: bool = True) -> dict:
    """Time and peak memory of naive, tiled and torch attention on the CPU (float32, batch 1).

    For each N: one profiled call per method measures the peak memory (and warms up), then
    ``repeats`` rounds of timed calls, one per method in turn, give the median times. ``threads``: torch's intra-op threads during the
    run (default 1: on a shared, busy machine multi-threaded timings of code made of many small
    operations, like the tiled loop, mostly measure the other processes; None keeps torch's setting).
    ``compile_tile``: also time ``tiled_attention(..., compile_tile=True)`` ("tiled_compiled"); the wall time of
    its very first call (the compile, plus one run at the first N) is recorded as ``compile.first_call_wall_s``.
    Returns the result dict (also saved as JSON).
    """
    old_threads = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        return _run_cpu(sizes, heads, head_dim, repeats, out, seed, compile_tile)
    finally:
        torch.set_num_threads(old_threads)


def _run_cpu(sizes, heads, head_dim, repeats, out, seed, compile_tile=True) -> dict:
    torch.manual_seed(seed)
    methods = {**CPU_METHODS, **(COMPILED_METHOD if compile_tile else {})}
    result = {
        "mode": "cpu",
        **_versions(),
        "cpu": _cpu_name(),
        "torch_threads": torch.get_num_threads(),
        "load_average_1min_at_start": round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None,
        "command": " ".join(["python -m attn_lib.course.bench", *sys.argv[1:]]) if sys.argv[1:2] == ["cpu"] else None,
        "config": {"batch": 1, "heads": heads, "head_dim": head_dim, "dtype": "float32", "is_causal": False,
                   "repeats": repeats, "tiled_blocks": [BLOCK_Q, BLOCK_K]},
        "time_method": "methods timed in turn, repeats rounds; median over rounds of process CPU time (time.process_time) and of wall time "
                       "(time.perf_counter) per call; with one torch thread, CPU time is the compute time "
                       "even when other processes compete for the cores, wall time is not",
        "memory_method": "peak of the running total of allocations minus frees through PyTorch's CPU allocator "
                         "during one call (torch.profiler, profile_memory=True); inputs excluded, output included",
        "rows": [],
    }
    if compile_tile:
        q, k, v = (torch.randn(1, heads, sizes[0], head_dim) for _ in range(3))
        t0 = time.perf_counter()
        COMPILED_METHOD["tiled_compiled"](q, k, v)  # every tile of every N has one shape: one compile
        result["compile"] = {"first_call_wall_s": time.perf_counter() - t0, "at_n": sizes[0], **_compile_info(),
                             "what": "wall time of the first tiled_attention(compile_tile=True) call of the process: "
                                     "torch.compile (Dynamo + Inductor C++ codegen and build) plus one run"}
        print(f"compile_tile: first call {result['compile']['first_call_wall_s']:.1f} s (compile + one run at "
              f"N={sizes[0]}); Inductor cache {result['compile'].get('inductor_cache_dir')}", flush=True)
    table = []
    for n in sizes:
        q, k, v = (torch.randn(1, heads, n, head_dim) for _ in range(3))
        row = {"n": n}
        outs = {}
        peaks = {}
        for name, fn in methods.items():
            peaks[name], outs[name] = measure_peak_memory(fn, q, k, v)  # also the warm-up call
        # Timed calls round-robin (naive, tiled, torch, naive, ...): the speed of a shared machine drifts by
        # tens of percent within minutes, and interleaving makes the drift hit the three methods alike.
        walls, cpus = ({name: [] for name in methods} for _ in range(2))
        for _ in range(repeats):
            for name, fn in methods.items():
                t0, c0 = time.perf_counter(), time.process_time()
                fn(q, k, v)
                walls[name].append(time.perf_counter() - t0)
                cpus[name].append(time.process_time() - c0)
        for name in methods:
            row[name] = {"cpu_s": statistics.median(cpus[name]), "wall_s": statistics.median(walls[name]),
                         "cpu_s_all": cpus[name], "wall_s_all": walls[name], "peak_bytes": peaks[name]}
        # the three must agree, or the comparison means nothing
        row["max_abs_diff_vs_torch"] = {
            name: float((outs[name] - outs["torch"]).abs().max()) for name in methods if name != "torch"
        }
        row["ratios"] = {
            "tiled_cpu_time_over_torch": _ratio(row["tiled"]["cpu_s"], row["torch"]["cpu_s"]),
            "tiled_wall_time_over_torch": _ratio(row["tiled"]["wall_s"], row["torch"]["wall_s"]),
            "tiled_memory_over_torch": _ratio(row["tiled"]["peak_bytes"], row["torch"]["peak_bytes"]),
            "tiled_memory_over_naive": _ratio(row["tiled"]["peak_bytes"], row["naive"]["peak_bytes"]),
        }
        if compile_tile:
            row["ratios"]["compiled_cpu_time_over_torch"] = _ratio(row["tiled_compiled"]["cpu_s"], row["torch"]["cpu_s"])
            row["ratios"]["compiled_wall_time_over_torch"] = _ratio(row["tiled_compiled"]["wall_s"],
                                                                    row["torch"]["wall_s"])
        result["rows"].append(row)
        r = row["ratios"]
        table.append([
            n,
            *(f"{row[m]['cpu_s']:.3f}" for m in CPU_METHODS),
            *(f"{row[m]['peak_bytes'] / MIB:.1f}" for m in CPU_METHODS),
            f"{r['tiled_cpu_time_over_torch']:.2f}", f"{r['tiled_wall_time_over_torch']:.2f}",
            f"{r['tiled_memory_over_torch']:.2f}", f"{r['tiled_memory_over_naive']:.3f}",
            *([f"{row['tiled_compiled']['cpu_s']:.3f}", f"{r['compiled_cpu_time_over_torch']:.2f}"] if compile_tile else []),
        ])
        print(f"N={n} done", flush=True)
        del q, k, v, outs
    last = result["rows"][-1]["ratios"]
    result["targets"] = {
        "at_n": result["rows"][-1]["n"],
        "tiled_memory_within_1.5x_of_torch": last["tiled_memory_over_torch"] <= 1.5,
        "tiled_memory_at_most_quarter_of_naive": last["tiled_memory_over_naive"] <= 0.25,
        "tiled_cpu_time_within_1.3x_of_torch": last["tiled_cpu_time_over_torch"] <= 1.3,
        "tiled_wall_time_within_1.3x_of_torch": last["tiled_wall_time_over_torch"] <= 1.3,
    }
    if compile_tile:
        result["targets"]["compiled_cpu_time_within_1.3x_of_torch"] = last["compiled_cpu_time_over_torch"] <= 1.3
    headers = ["N", "naive cpu s", "tiled cpu s", "torch cpu s", "naive MiB", "tiled MiB", "torch MiB",
               "tiled/torch cpu", "tiled/torch wall", "tiled/torch mem", "tiled/naive mem"]
    if compile_tile:
        headers += ["compiled cpu s", "compiled/torch cpu"]
    print()
    print(f"CPU: {result['cpu']}, {result['torch_threads']} threads, torch {result['torch']}, {result['date_utc']}")
    print(f"1-minute load average at the start: {result['load_average_1min_at_start']}")
    print(f"batch 1, {heads} heads, head_dim {head_dim}, float32, median of {repeats}; "
          "times are process CPU seconds (wall-clock ratios in their own column)")
    print(format_table(headers, table))
    print("targets at N =", result["targets"]["at_n"], {k: v for k, v in result["targets"].items() if k != "at_n"})
    _save(result, out)
    return result


def markdown_cpu_table(result: dict) -> str:
    """The CPU result as a Markdown table (docs/benchmarks.md quotes it; a test keeps the two in sync)."""
    lines = [
        "| N | naive CPU s | tiled CPU s | torch CPU s | naive MiB | tiled MiB | torch MiB "
        "| tiled/torch CPU time | tiled/torch wall time | tiled/torch memory | tiled/naive memory "
        "| compiled tile CPU s | compiled/torch CPU time |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in result["rows"]:
        r = row["ratios"]
        lines.append(
            f"| {row['n']} | " + " | ".join(f"{row[m]['cpu_s']:.3f}" for m in CPU_METHODS) + " | "
            + " | ".join(f"{row[m]['peak_bytes'] / MIB:.1f}" for m in CPU_METHODS)
            + f" | {r['tiled_cpu_time_over_torch']:.2f} | {r['tiled_wall_time_over_torch']:.2f}"
            f" | {r['tiled_memory_over_torch']:.2f} | {r['tiled_memory_over_naive']:.4f} |"
            + (f" {row['tiled_compiled']['cpu_s']:.3f} | {r['compiled_cpu_time_over_torch']:.2f} |"
               if "tiled_compiled" in row else " – | – |")
        )
    return "\n".join(lines)


# ----------------------------------------------------------------------------------------------
# GPU
# ----------------------------------------------------------------------------------------------
# (L, S, head_dim, is_causal): ragged lengths, L != S, head_dims that are not powers of two
CEILING_MATMUL_N = 8192  # the ceiling: an N x N x N bfloat16 matrix product
GPU_CHECK_CASES = [(1, 1, 64, False), (17, 17, 64, True), (100, 130, 128, False), (130, 100, 48, True),
                   (1000, 1017, 128, True), (777, 2049, 96, False)]


def _gpu_correctness(device) -> list[dict]:
    """Forward and backward of the Triton kernels in fp16 and bf16 against float64 autograd of torch.

    Ragged lengths, L != S; bottom-right causal, GQA (4 query heads on 2 key/value heads) and per-batch key
    padding on every case, so the one short run covers the features the CPU tests check in the interpreter.
    """
    import attn_lib._tiling as tiling_mod
    from attn_lib.flash import flash_attention
    from attn_lib.masks import causal_mask

    rows = []
    tiling_mod._POISON_OUTPUTS = True  # outputs start as NaN: an element the kernel misses shows up
    try:
        for dtype, tol in ((torch.float16, 1e-2), (torch.bfloat16, 3e-2)):
            for L, S, D, causal in GPU_CHECK_CASES:
                g = torch.Generator(device=device).manual_seed(L * 7919 + S * 31 + D)
                q = torch.randn(2, 4, L, D, device=device, generator=g).to(dtype).requires_grad_()
                k = torch.randn(2, 2, S, D, device=device, generator=g).to(dtype).requires_grad_()
                v = torch.randn(2, 2, S, D, device=device, generator=g).to(dtype).requires_grad_()
                pad = (torch.arange(S, device=device) < torch.tensor([S, max(1, S // 2)], device=device)[:, None])
                pad = pad[:, None, None, :]  # (B, 1, 1, S)
                kw = dict(attn_mask=pad, is_causal=causal, causal_align="bottom_right", enable_gqa=True)
                out = flash_attention(q, k, v, backend="cuda", block_m=64, block_n=64, **kw)
                d_out = torch.randn(out.shape, device=device, generator=g).to(dtype)
                grads = torch.autograd.grad(out, (q, k, v), d_out)
                q64, k64, v64 = (t.detach().double().requires_grad_() for t in (q, k, v))
                allowed = pad & causal_mask(L, S, align="bottom_right", device=device) if causal else pad
                seen = allowed.expand(2, 4, L, S).any(-1, keepdim=True)
                ref = torch.nn.functional.scaled_dot_product_attention(
                    q64, k64, v64, attn_mask=allowed | ~seen, enable_gqa=True).masked_fill(~seen, 0.0)
                ref_grads = torch.autograd.grad(ref, (q64, k64, v64), d_out.double())
                rel = {"out": float((out.double() - ref).norm() / ref.norm())}
                for name, got, want in zip(("dq", "dk", "dv"), grads, ref_grads):
                    rel[name] = float((got.double() - want).norm() / want.norm().clamp_min(1e-30))
                finite = bool(torch.isfinite(out).all()) and all(bool(torch.isfinite(t).all()) for t in grads)
                rows.append({"dtype": str(dtype).replace("torch.", ""), "L": L, "S": S, "head_dim": D,
                             "is_causal": causal, "rel_error": rel, "all_finite": finite,
                             "ok": finite and max(rel.values()) < tol})
    finally:
        tiling_mod._POISON_OUTPUTS = False
    return rows


def _tflops(flops: float, ms: float) -> float:
    return flops / (ms * 1e-3) / 1e12


def run_gpu(sizes=(1024, 2048, 4096, 8192, 16384), head_dims=(64, 128), batch: int = 4, heads: int = 32,
            out: Path | None = GPU_JSON) -> dict | None:
    """Correctness, then TFLOP/s of the Triton kernels vs torch's flash and cuDNN backends (bfloat16).

    Forward alone and forward + backward (backward = 2.5 x the forward's FLOPs, as FlashAttention-2 counts)
    for every shape, all in one run. Returns the result dict (also saved as JSON), or None without a GPU.
    """
    if not torch.cuda.is_available():
        print("No CUDA GPU is available on this machine: the GPU benchmark needs one (an NVIDIA GPU "
              "with a CUDA build of PyTorch and Triton). Nothing was measured.")
        return None
    import triton
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from triton.testing import do_bench

    from attn_lib.flash import flash_attention

    device = torch.device("cuda")
    t_start = time.perf_counter()
    props = torch.cuda.get_device_properties(device)
    result = {
        "mode": "gpu", **_versions(),
        "gpu": props.name, "compute_capability": f"{props.major}.{props.minor}",
        "cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version(),
        "command": " ".join(["python -m attn_lib.course.bench", *sys.argv[1:]]) if sys.argv[1:2] == ["gpu"] else None,
        "config": {"batch": batch, "heads": heads, "dtype": "bfloat16", "timing": "triton.testing.do_bench median",
                   "flops": "forward 4 B H N^2 D (halved when causal); forward + backward 3.5 x that"},
    }
    print(f"GPU: {props.name} (sm_{props.major}{props.minor}), torch {torch.__version__}, triton {triton.__version__}")

    print("1) correctness of forward and backward at ragged lengths (GQA, key padding, bottom-right causal)")
    checks = _gpu_correctness(device)
    result["correctness"] = checks
    print(format_table(["dtype", "L", "S", "D", "causal", "out", "dq", "dk", "dv", "ok"],
                       [[c["dtype"], c["L"], c["S"], c["head_dim"], c["is_causal"],
                         *(f"{c['rel_error'][x]:.1e}" for x in ("out", "dq", "dk", "dv")), c["ok"]] for c in checks]))
    if not all(c["ok"] for c in checks):
        print("correctness FAILED: not timing a wrong kernel")
        result["error"] = "correctness failed"
        _save(result, out)
        return result

    n = CEILING_MATMUL_N
    print(f"\n2) ceiling: bfloat16 matrix product {n} x {n} x {n}")
    a = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    result["matmul_bf16_tflops"] = _tflops(2 * n**3, do_bench(lambda: a @ b, warmup=25, rep=100, return_mode="median"))
    print(f"   {result['matmul_bf16_tflops']:.0f} TFLOP/s")
    del a, b

    print("\n3) attention TFLOP/s, forward (fwd) and forward + backward (f+b), bfloat16, do_bench median")
    rows, table = [], []
    sdpa = torch.nn.functional.scaled_dot_product_attention
    impls = {
        "triton": lambda q, k, v, c: flash_attention(q, k, v, is_causal=c, backend="cuda"),
        "torch_flash": lambda q, k, v, c: _with_backend(sdpa_kernel, SDPBackend.FLASH_ATTENTION, sdpa, q, k, v, c),
        "torch_cudnn": lambda q, k, v, c: _with_backend(sdpa_kernel, SDPBackend.CUDNN_ATTENTION, sdpa, q, k, v, c),
    }
    for d in head_dims:
        for causal in (False, True):
            for n in sizes:
                q, k, v = (torch.randn(batch, heads, n, d, device=device, dtype=torch.bfloat16, requires_grad=True)
                           for _ in range(3))
                d_out = torch.randn_like(q)
                flops = attention_flops(batch, heads, n, d, causal)
                row = {"head_dim": d, "is_causal": causal, "n": n}
                ref_out = None
                for name, fn in impls.items():
                    try:
                        with torch.no_grad():
                            o = fn(q, k, v, causal)  # the triton one autotunes here
                        ref_out = o if ref_out is None else ref_out
                        row[f"{name}_rel_diff_vs_triton"] = float((o.float() - ref_out.float()).norm()
                                                                  / ref_out.float().norm())
                        with torch.no_grad():
                            ms = do_bench(lambda: fn(q, k, v, causal), warmup=25, rep=100, return_mode="median")
                        row[f"{name}_fwd_ms"], row[f"{name}_fwd_tflops"] = ms, _tflops(flops, ms)

                        def fwd_bwd():
                            torch.autograd.grad(fn(q, k, v, causal), (q, k, v), d_out)

                        fwd_bwd()  # the backward kernels autotune here
                        ms = do_bench(fwd_bwd, warmup=25, rep=100, return_mode="median")
                        row[f"{name}_fwdbwd_ms"], row[f"{name}_fwdbwd_tflops"] = ms, _tflops(3.5 * flops, ms)
                    except RuntimeError as e:  # backend not available for this GPU/shape/build
                        row[f"{name}_error"] = str(e).splitlines()[0][:200]
                for phase in ("fwd", "fwdbwd"):
                    if row.get(f"torch_flash_{phase}_tflops") and row.get(f"triton_{phase}_tflops"):
                        row[f"triton_over_torch_flash_{phase}"] = (row[f"triton_{phase}_tflops"]
                                                                   / row[f"torch_flash_{phase}_tflops"])
                rows.append(row)
                fmt = lambda x: "n/a" if x is None else f"{x:.0f}"  # noqa: E731
                rat = lambda x: "n/a" if x is None else f"{x:.2f}"  # noqa: E731
                table.append([d, causal, n, *(fmt(row.get(f"{m}_{ph}_tflops")) for ph in ("fwd", "fwdbwd") for m in impls),
                              rat(row.get("triton_over_torch_flash_fwd")), rat(row.get("triton_over_torch_flash_fwdbwd"))])
                print(f"   D={d} causal={causal} N={n} done ({time.perf_counter() - t_start:.0f} s)", flush=True)
                del q, k, v, d_out
                torch.cuda.empty_cache()
    result["rows"] = rows
    print(format_table(["D", "causal", "N", "triton fwd", "flash fwd", "cudnn fwd", "triton f+b", "flash f+b",
                        "cudnn f+b", "triton/flash fwd", "triton/flash f+b"], table))
    result["targets"] = _gpu_targets(rows)
    result["wall_s"] = time.perf_counter() - t_start
    print(f"\nceiling (bf16 matmul): {result['matmul_bf16_tflops']:.0f} TFLOP/s; targets at D=128, N>=4k: "
          f"{result['targets']}; took {result['wall_s']:.0f} s")
    _save(result, out)
    return result


def _with_backend(sdpa_kernel, backend, sdpa, q, k, v, causal):
    with sdpa_kernel(backend):
        return sdpa(q, k, v, is_causal=causal)


def _gpu_targets(rows: list[dict]) -> dict:
    """The issue's targets at head_dim 128, N >= 4096: forward >= 0.8x torch flash, fwd + bwd >= 0.6x."""
    sel = [r for r in rows if r["head_dim"] == 128 and r["n"] >= 4096]
    fwd = [r["triton_over_torch_flash_fwd"] for r in sel if "triton_over_torch_flash_fwd" in r]
    fb = [r["triton_over_torch_flash_fwdbwd"] for r in sel if "triton_over_torch_flash_fwdbwd" in r]
    return {"min_fwd_ratio": min(fwd) if fwd else None, "min_fwdbwd_ratio": min(fb) if fb else None,
            "fwd_at_least_0.8x_flash": bool(fwd) and min(fwd) >= 0.8,
            "fwdbwd_at_least_0.6x_flash": bool(fb) and min(fb) >= 0.6}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m attn_lib.course.bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("mode", choices=["cpu", "gpu"])
    parser.add_argument("--sizes", type=int, nargs="+", help="sequence lengths N (default: the standard set)")
    parser.add_argument("--repeats", type=int, default=3, help="timed calls per point on the CPU (median)")
    parser.add_argument("--out", type=Path, help="JSON file to write (default docs/benchmarks_<mode>.json)")
    parser.add_argument("--no-save", action="store_true", help="print only, write no JSON")
    parser.add_argument("--no-compile", action="store_true",
                        help="cpu: skip tiled_attention(compile_tile=True) (torch.compile needs a C++ compiler)")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch CPU threads for the cpu mode (default 1; 0 keeps torch's default)")
    args = parser.parse_args(argv)
    if args.sizes and any(n < 1 for n in args.sizes):
        parser.error(f"--sizes must be positive, got {args.sizes}")
    if args.repeats < 1:
        parser.error(f"--repeats must be >= 1, got {args.repeats}")
    if args.mode == "cpu":
        out = None if args.no_save else (args.out or CPU_JSON)
        run_cpu(**({"sizes": tuple(args.sizes)} if args.sizes else {}), repeats=args.repeats, out=out,
                threads=args.threads or None, compile_tile=not args.no_compile)
    else:
        default = Path(os.environ["OUT"]) / "benchmarks_gpu.json" if os.environ.get("OUT") else GPU_JSON
        out = None if args.no_save else (args.out or default)
        run_gpu(**({"sizes": tuple(args.sizes)} if args.sizes else {}), out=out)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
