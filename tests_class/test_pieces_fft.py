"""Notebook 12's FFT long convolution, ``my_attn.linear.fft_long_conv``, graded in the sandbox (issue #34).

In ``make check-mine`` its check refuses the direct O(L²) sum by watching the learner's code run in its own process
(a loop, a Toeplitz matrix, unfolded windows, conv1d). In the sandbox the runner watches torch's FFTs and
convolutions by name instead (``check_piece_fft_long_conv.sandbox_watch``): the worked solution gets full points, a
direct sum gets 0 with the check's hint, whether it loops over positions (no torch.fft call) or calls conv1d.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from classroom import pieces, sandbox

ROOT = Path(__file__).resolve().parent.parent
SOLVED = ROOT / "notebooks" / "solutions" / "my_attn"
GID = "piece_fft_long_conv"
DIRECT = "summed the convolution directly"

LOOP = '''

def fft_long_conv(u, k):  # the direct sum, one output position at a time: right numbers, O(L²) work
    L, K = u.shape[-1], k.shape[-1]
    out = []
    for t in range(L):
        s = min(t + 1, K)
        out.append((k[..., :s] * u[..., t - s + 1:t + 1].flip(-1)).sum(-1))
    return torch.stack(out, -1)
'''

CONV = '''

def fft_long_conv(u, k):  # the direct sum as one conv1d: right numbers, O(L·K) work
    L = u.shape[-1]
    u, k = torch.broadcast_tensors(u, torch.nn.functional.pad(k, (0, L - k.shape[-1])))
    x = torch.nn.functional.pad(u.reshape(1, -1, L), (L - 1, 0))
    w = k.reshape(-1, 1, L).flip(-1)
    return torch.nn.functional.conv1d(x, w, groups=w.shape[0]).reshape(u.shape)
'''


@pytest.fixture(scope="module")
def library(tmp_path_factory):
    sandbox.bwrap_path()
    return sandbox.library_dir(tmp_path_factory.mktemp("lib"))


def _grade(tmp_path, library, extra: str | None = None) -> dict:
    pkg = tmp_path / "my_attn"
    shutil.copytree(SOLVED, pkg)
    if extra is not None:
        (pkg / "linear.py").write_text((pkg / "linear.py").read_text() + extra)
    result = pieces.grade_pieces(pkg, library, cell_timeout=60, budget_s=300, salt="test-fft", only={GID})
    assert set(result["scores"]) == {GID}, result["scores"]
    return result


def test_the_worked_solution_gets_full_points(library, tmp_path):
    result = _grade(tmp_path, library)
    assert result["scores"][GID] == result["max"][GID] > 0, result["messages"]
    assert not result["flags"], result["flags"]


@pytest.mark.parametrize("source, how", [(LOOP, "no call of torch.fft"), (CONV, "conv1d")])
def test_a_direct_sum_gets_zero_with_the_hint(library, tmp_path, source, how):
    from attn_lib.course.exercises import pieces_modern

    check = pieces_modern.check_piece_fft_long_conv
    namespace: dict = {}
    exec("import torch\n" + source, namespace)  # the same code in make check-mine: refused there too
    assert not check(namespace["fft_long_conv"]).passed
    result = _grade(tmp_path, library, source)
    assert result["scores"][GID] == 0, result["messages"]
    assert DIRECT in result["messages"][GID] and how in result["messages"][GID], result["messages"][GID]
