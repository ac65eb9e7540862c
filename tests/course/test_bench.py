"""attn_lib.course.bench: the benchmark CLI at tiny sizes (the real runs are not tests), its FLOP count, the recorded
figures the docs quote, and measure_peak_memory's exactness."""

from __future__ import annotations

import torch

from attn_lib.course.bench import measure_peak_memory


def test_measure_peak_memory_counts_the_bytes_a_call_holds():
    # one float32 (1000, 1000) tensor: exactly 4,000,000 bytes; two alive at once: twice that
    exact, out = measure_peak_memory(lambda: torch.empty(1000, 1000, dtype=torch.float32))
    assert exact == 4_000_000 and out.shape == (1000, 1000)
    two, _ = measure_peak_memory(lambda: (torch.empty(1000, 1000), torch.empty(1000, 1000)))
    assert two == 8_000_000
    freed, _ = measure_peak_memory(lambda: [torch.empty(1000, 1000) for _ in range(3)][-1])  # the list dies at once
    assert freed <= 12_000_000


def test_no_old_import_path_remains():
    """#33: the figure and the measurement live in the course machinery only; the core keeps no alias."""
    import attn_lib.tiled as tiled

    assert not hasattr(tiled, "measure_peak_memory") and not hasattr(tiled, "plot_online_softmax_step")


def test_bench_cpu_smoke(tmp_path, capsys):
    import json

    from attn_lib.course import bench

    out = tmp_path / "cpu.json"
    threads = torch.get_num_threads()
    assert bench.main(["cpu", "--sizes", "32", "64", "--repeats", "1", "--no-compile", "--out", str(out)]) == 0
    assert torch.get_num_threads() == threads  # restored after the run
    printed = capsys.readouterr().out
    assert "tiled/torch cpu" in printed and f"wrote {out}" in printed
    result = json.loads(out.read_text())
    assert [row["n"] for row in result["rows"]] == [32, 64] and result["torch_threads"] == 1
    for row in result["rows"]:
        assert max(row["max_abs_diff_vs_torch"].values()) < 1e-4  # the three compute the same thing
        assert row["ratios"]["tiled_memory_over_naive"] == row["tiled"]["peak_bytes"] / row["naive"]["peak_bytes"]
    assert bench.markdown_cpu_table(result).count("\n") == 3


def test_bench_gpu_without_cuda_says_so_and_exits_0():
    import subprocess
    import sys

    res = subprocess.run([sys.executable, "-m", "attn_lib.course.bench", "gpu", "--no-save"], capture_output=True,
                         text=True, timeout=300, env={**__import__("os").environ, "CUDA_VISIBLE_DEVICES": ""})
    assert res.returncode == 0, res.stderr[-2000:]
    assert "No CUDA GPU is available" in res.stdout


def test_attention_flops():
    from attn_lib.course.bench import attention_flops

    # two matrix products (Q K^T and P V) of 2 N^2 D multiply-adds each, per head and batch element
    assert attention_flops(4, 32, 1024, 128, False) == 2 * 2 * 4 * 32 * 1024 * 1024 * 128
    assert attention_flops(4, 32, 1024, 128, True) == attention_flops(4, 32, 1024, 128, False) / 2


def test_recorded_cpu_benchmark_is_what_the_docs_quote():
    import json

    from attn_lib import REPO_ROOT
    from attn_lib.course.bench import markdown_cpu_table

    result = json.loads((REPO_ROOT / "docs" / "benchmarks_cpu.json").read_text())
    assert markdown_cpu_table(result) in (REPO_ROOT / "docs" / "benchmarks.md").read_text()
    assert [row["n"] for row in result["rows"]] == [1024, 2048, 4096, 8192]
    # memory is exact (allocator bytes), so its recorded claims must hold in the recorded file
    naive_8k = result["rows"][-1]["naive"]["peak_bytes"]
    assert naive_8k >= 2 * 8 * 8192 * 8192 * 4  # scores and their softmax, float32
    assert result["targets"]["tiled_memory_within_1.5x_of_torch"] and result["targets"]["tiled_memory_at_most_quarter_of_naive"]
