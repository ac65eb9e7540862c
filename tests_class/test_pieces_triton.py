"""The learner's Triton kernel, ``my_attn.flash.flash_forward``, graded in the sandbox (issue #34; classroom/pieces.py).

Its check (``check_piece_flash_forward``) watches what happens during the call: Triton's interpreter launched a kernel
(``GridExecutor.__call__`` ran) and the launcher computed no attention in torch nor ran attn_lib's kernels. In the
sandbox the runner keeps those watches and reports them by name (classroom/runner.py's ``_NamedWatch``); the grader
turns the names it asked for into the check's verdict. Each test grades only ``piece_flash_forward`` (a focused
notebook of the same machinery: no decoder training), so a student takes a few seconds.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest

pytest.importorskip("triton")

from classroom import pieces, sandbox  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SOLVED, STUBS = ROOT / "notebooks" / "solutions" / "my_attn", ROOT / "my_attn"
GID = "piece_flash_forward"
NO_KERNEL = "no Triton kernel ran"

# a launcher that computes attention in torch and launches nothing: by broadcasting, with none of the torch functions
# the check refuses (matrix products, exp, softmax), so the missing kernel is what it says
TORCH_ONLY = '''
def flash_forward(query, key, value, *, is_causal=False, scale=None, block_m=16, block_n=16):
    L, S, D = query.shape[-2], key.shape[-2], query.shape[-1]
    scale = 1.0 / math.sqrt(D) if scale is None else scale
    s = (query[..., :, None, :] * key[..., None, :, :]).sum(-1) * scale         # (B, H, L, S)
    if is_causal:
        s = s.masked_fill(~torch.ones(L, S, dtype=torch.bool).tril(), float("-inf"))
    m = s.amax(-1, keepdim=True)
    p = math.e ** (s - m)
    l = p.sum(-1, keepdim=True)
    return (p[..., None] * value[..., None, :, :]).sum(-2) / l, (m + l.log())[..., 0]
'''

# a trivial kernel is launched (Triton's launcher runs), but the attention is torch's, in the launcher
TRIVIAL_KERNEL = '''
@triton.jit
def _noop(X):
    pass


def flash_forward(query, key, value, *, is_causal=False, scale=None, block_m=16, block_n=16):
    launch(_noop, (1,), query)
    L, S, D = query.shape[-2], key.shape[-2], query.shape[-1]
    scale = 1.0 / math.sqrt(D) if scale is None else scale
    s = (query @ key.transpose(-2, -1)) * scale
    if is_causal:
        s = s.masked_fill(~torch.ones(L, S, dtype=torch.bool).tril(), float("-inf"))
    return torch.softmax(s, -1) @ value, torch.logsumexp(s, -1)
'''

# attn_lib's own FlashAttention (its Triton kernel, launched through attn_lib.flash)
LIBRARY = '''
def flash_forward(query, key, value, *, is_causal=False, scale=None, block_m=16, block_n=16):
    from attn_lib.flash import flash_attention
    from attn_lib.tiled import tiled_attention

    out = flash_attention(query, key, value, is_causal=is_causal, scale=scale)
    _, lse = tiled_attention(query, key, value, is_causal=is_causal, scale=scale, return_lse=True)
    return out, lse
'''

# fakes of the runner's report, from the student's module (imported in the sandbox before the check runs):
# patching the runner's watch class to claim "a kernel ran", and a GridExecutor.__call__ of the student's own that
# launch() then calls, with no kernel run
PATCH_WATCH = '''
import classroom.runner as _runner
import triton.runtime.interpreter as _interp


def _claim(self, fn, args, kwargs, names):  # the runner's watch, as a student would like it to answer
    return fn(*args, **kwargs), ["triton.runtime.interpreter.GridExecutor.__call__"], True


_runner._NamedWatch._call = _claim
_runner._NamedWatch.call = _claim


def _grid_call(self, *a, **k):
    return None


_interp.GridExecutor.__call__ = _grid_call


@triton.jit
def _noop(X):
    pass


_torch_flash_forward = flash_forward


def flash_forward(query, key, value, **kwargs):
    launch(_noop, (1,), query)
    return _torch_flash_forward(query, key, value, **kwargs)
'''

# a forged reply written to the report channel (the runner's output pipe, named on its command line) during the call,
# claiming the kernel ran and nothing was watched; the runner's own reply then follows
FORGE_CHANNEL = '''
def _forge(result, args):
    import sys

    from classroom import wire

    arrays = []
    wire.send(int(sys.argv[-1]), {"ok": True, "used": [], "watched": ["triton.runtime.interpreter.GridExecutor.__call__"],
                                  "watch_intact": True, "result": wire.encode(result, arrays),
                                  "after": [wire.encode(a, arrays) for a in args]}, arrays)


_torch_flash_forward = flash_forward


def flash_forward(query, key, value, **kwargs):
    result = _torch_flash_forward(query, key, value, **kwargs)
    _forge(result, [query, key, value])
    return result
'''


@pytest.fixture(scope="module")
def library(tmp_path_factory):
    sandbox.bwrap_path()
    return sandbox.library_dir(tmp_path_factory.mktemp("lib"))


def _package(tmp_path, flash_source: str | None = None) -> Path:
    pkg = tmp_path / "my_attn"
    shutil.copytree(SOLVED, pkg)
    if flash_source is not None:
        header = ("import math\n\nimport torch\nimport triton\nimport triton.language as tl\n\n"
                  "from my_attn._triton import launch\n")
        (pkg / "flash.py").write_text(header + flash_source)
    return pkg


def _grade(folder, library, **kw):
    start = time.monotonic()
    result = pieces.grade_pieces(folder, library, cell_timeout=60, budget_s=300, salt="test-triton",
                                 only={GID}, **kw)
    result["seconds"] = time.monotonic() - start
    assert set(result["scores"]) == {GID}, result["scores"]
    return result


def test_source_flags_name_the_graders_tokens_only():
    assert pieces.source_flags(pieces.package_files(SOLVED)) == [] == pieces.source_flags(pieces.package_files(STUBS))
    (flag,) = pieces.source_flags({"my_attn/x.py": "import os; os.dup2(3, 4)  # STUDENT-TEXT"})
    assert "(dup2)" in flag and "STUDENT" not in flag


def test_flash_forward_is_graded_in_the_sandbox():
    assert "flash_forward" in {p.name for p in pieces.graded_pieces()}
    assert "flash_forward" not in pieces.ungraded_pieces() and not pieces.NOT_GRADED_HERE
    assert pieces.points()[GID] == pieces.PIECE_POINTS
    nb = pieces.pieces_notebook(pieces.package_files(SOLVED), {GID})
    graded = [c["metadata"]["nbgrader"]["grade_id"] for c in nb["cells"] if c["metadata"]["nbgrader"].get("grade")]
    assert graded == [GID]


def test_the_plan_asks_for_the_interpreter_and_the_watches():
    from classroom.grade import sandbox_watches

    plan = sandbox_watches({GID: {"checks": [("check_piece_flash_forward", "_mine('flash', 'flash_forward')")]}})
    assert plan["interpret_triton"] is True
    assert plan["watch"]["code"] == ["triton.runtime.interpreter.GridExecutor.__call__"]
    assert {"torch.matmul", "torch.Tensor.__matmul__", "torch.softmax", "torch.exp",
            "torch.nn.functional.scaled_dot_product_attention"} <= set(plan["watch"]["torch"])
    assert sandbox_watches({"x": {"checks": [("check_piece_softmax", "f")]}}) == {}  # other checks: no watch


def test_the_worked_solution_gets_full_points(library):
    result = _grade(SOLVED, library)
    assert result["scores"] == result["max"] == {GID: pieces.PIECE_POINTS}, result["messages"]
    assert result["flags"] == [], result["flags"]
    print(f"the solution's flash_forward graded in {result['seconds']:.1f} s (sandbox start included)")


def test_the_sandbox_runs_triton_interpreted_from_its_first_import(library, tmp_path):
    """TRITON_INTERPRET=1 is set before triton is first imported in the sandbox: @triton.jit makes interpreted
    functions there, and launch() runs them directly (not through attn_lib's interpreter twin)."""
    pkg = _package(tmp_path)
    (pkg / "flash.py").write_text((pkg / "flash.py").read_text() + '''

import os

assert os.environ.get("TRITON_INTERPRET") == "1" and type(_flash_fwd_kernel).__name__ == "InterpretedFunction"
''')
    result = _grade(pkg, library)
    assert result["scores"] == {GID: pieces.PIECE_POINTS}, result["messages"]


def test_the_stub_says_not_written(library):
    result = _grade(STUBS, library)
    assert result["scores"] == {GID: 0}
    assert "not written yet" in result["messages"][GID], result["messages"]


def test_attention_in_torch_without_a_kernel_gets_zero(library, tmp_path):
    result = _grade(_package(tmp_path, TORCH_ONLY), library)
    assert result["scores"] == {GID: 0}
    assert NO_KERNEL in result["messages"][GID], result["messages"]


def test_a_trivial_kernel_beside_torch_attention_gets_zero(library, tmp_path):
    result = _grade(_package(tmp_path, TRIVIAL_KERNEL), library)
    assert result["scores"] == {GID: 0}
    message = result["messages"][GID]
    assert "a torch matrix product" in message and "torch.softmax" in message, message
    assert NO_KERNEL not in message


def test_attn_libs_flash_attention_gets_zero_and_a_flag(library, tmp_path):
    result = _grade(_package(tmp_path, LIBRARY), library)
    assert result["scores"] == {GID: 0}
    assert "attn_lib.flash.flash_attention" in result["messages"][GID], result["messages"]
    assert any("attn_lib.flash.flash_attention" in f for f in result["flags"]), result["flags"]


def test_patching_the_runners_watch_from_the_module_gains_nothing(library, tmp_path):
    """The runner resolved what it watches (and bound its watch) before the student's module was imported: a module
    that rebinds the runner's watch class, Triton's launcher and torch.matmul changes nothing it reports."""
    result = _grade(_package(tmp_path, TORCH_ONLY + PATCH_WATCH), library)
    assert result["scores"] == {GID: 0}
    assert NO_KERNEL in result["messages"][GID], result["messages"]
    assert "the package's source mentions the grader's machinery (classroom, GridExecutor)" in result["flags"][0]


def test_a_reply_forged_on_the_report_channel_gains_nothing(library, tmp_path):
    """A reply written to the runner's pipe during the call is read as the call's reply, but the runner's own reply
    follows it: the next call reads that one (the previous case's output and inputs), so the check fails, and the
    notebook's process is out of step afterwards; the source's mention of the grader's runner is flagged."""
    result = _grade(_package(tmp_path, TORCH_ONLY + FORGE_CHANNEL), library)
    assert result["scores"] == {GID: 0}, result["messages"]
    assert "an unexpected message" in " ".join(result["flags"]), "the runner's own reply, out of step, is noticed"
    assert "the package's source mentions the grader's machinery (classroom, sys.argv, GridExecutor)" in result["flags"][0]


def test_turning_the_watch_off_gains_nothing(library, tmp_path):
    """A launcher that launches a trivial kernel, then turns the profile hooks off (the runner's watches among them)
    before it computes the attention in torch: the runner says its watch was off, the check fails, the grader flags
    it."""
    source = TRIVIAL_KERNEL.replace("    launch(_noop, (1,), query)\n",
                                    "    launch(_noop, (1,), query)\n    import sys\n    sys.setprofile(None)\n")
    assert source != TRIVIAL_KERNEL
    result = _grade(_package(tmp_path, source), library)
    assert result["scores"] == {GID: 0}
    assert "watch of your function was turned off" in result["messages"][GID], result["messages"]
    assert any("watch was turned off" in f for f in result["flags"]), result["flags"]


def test_the_other_pieces_refuse_in_the_sandbox_what_check_mine_refuses(library, tmp_path):
    """The same named watches serve the other checks that watch torch (tiled attention, grouped-query attention):
    a tiled_attention that calls torch's scaled_dot_product_attention on the side loses its points in the sandbox,
    as in make check-mine, whichever pieces the graded notebook holds."""
    pkg = _package(tmp_path)
    tiled = pkg / "tiled.py"
    tiled.write_text(tiled.read_text() + '''

_own_tiled_attention = tiled_attention


def tiled_attention(*args, **kwargs):
    x = torch.ones(1, 1, 2, 4)
    torch.nn.functional.scaled_dot_product_attention(x, x, x)
    return _own_tiled_attention(*args, **kwargs)
''')
    result = pieces.grade_pieces(pkg, library, cell_timeout=60, budget_s=300, salt="test-triton",
                                 only={"piece_tiled_attention"})
    assert result["scores"] == {"piece_tiled_attention": 0}, result["messages"]
    message = result["messages"]["piece_tiled_attention"]
    assert "torch.nn.functional.scaled_dot_product_attention" in message, message


def test_attn_libs_kernel_source_gets_zero(library, tmp_path):
    """Any entry into attn_lib.flash or attn_lib.flash_kernels counts as the library's kernel in the sandbox: here
    kernel_source, whose text of attn_lib's kernel a launcher could exec as its own; the student's own kernel still
    runs."""
    source = (SOLVED / "flash.py").read_text().replace(
        "    grid = (triton.cdiv(L, block_m), B * H)\n",
        "    grid = (triton.cdiv(L, block_m), B * H)\n"
        "    from attn_lib import flash_kernels\n    flash_kernels.kernel_source('forward')\n")
    pkg = _package(tmp_path)
    assert source != (pkg / "flash.py").read_text()
    (pkg / "flash.py").write_text(source)
    result = _grade(pkg, library)
    assert result["scores"] == {GID: 0}
    assert "attn_lib.flash_kernels' code" in result["messages"][GID], result["messages"]


def test_a_crowd_of_harmless_library_calls_hides_nothing(library, tmp_path):
    """The reply's list of entries into attn_lib keeps 20 names; 25 of attn_lib._checks' functions (sorted before
    attn_lib.flash) called first do not push attn_lib.flash out of the watch: the runner matches the check's
    library names against every entry."""
    crowd = LIBRARY.replace("    from attn_lib.flash import flash_attention\n", '''    import inspect

    from attn_lib import _checks
    from attn_lib.flash import flash_attention

    for name, f in sorted(vars(_checks).items()):
        if inspect.isfunction(f) and f.__module__ == "attn_lib._checks":
            try:
                f(None)
            except Exception:
                pass
''')
    import inspect

    from attn_lib import _checks

    assert crowd != LIBRARY
    assert len([f for f in vars(_checks).values() if inspect.isfunction(f) and f.__module__ == _checks.__name__]) > 20
    result = _grade(_package(tmp_path, crowd), library)
    assert result["scores"] == {GID: 0}
    assert "attn_lib.flash's code" in result["messages"][GID], result["messages"]


@pytest.mark.parametrize("source", [TORCH_ONLY, TRIVIAL_KERNEL], ids=["torch-only", "trivial-kernel"])
def test_the_sandbox_says_what_make_check_mine_says(library, tmp_path, source):
    """The same check, in the grader's process on the sandbox's function and in-process on the module itself (as
    make check-mine runs it): the same verdict and the same hint (the refused torch functions, in any order)."""
    import importlib.util
    import re

    from attn_lib.course.exercises.pieces_fast import check_piece_flash_forward

    pkg = _package(tmp_path, source)
    spec = importlib.util.spec_from_file_location("student_flash", pkg / "flash.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    here = check_piece_flash_forward(module.flash_forward)
    there = _grade(pkg, library)
    assert not here.passed and there["scores"] == {GID: 0}

    def hint(message):  # "... called a, b, c: the piece ..." -> {a, b, c}; else the message
        m = re.search(r"called (.*?): the piece", message)
        return set(m.group(1).split(", ")) if m else message

    assert hint(there["messages"][GID]) == hint(here.message), (there["messages"][GID], here.message)
