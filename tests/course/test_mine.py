"""The learner's own stack (#34): my_attn's stubs, the checks of its pieces, ``make check-mine``'s table at three
points (stubs only, half done, all done), and the switch that runs the course on the learner's code."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import textwrap

import pytest
import torch

import attn_lib
from attn_lib.course import mine
from attn_lib.course.exercises import pieces

ROOT = attn_lib.REPO_ROOT
STUBS, SOLVED = ROOT / "my_attn", ROOT / "notebooks" / "solutions" / "my_attn"


@pytest.fixture(autouse=True)
def _restore():
    yield
    mine.use_attn_lib()


def _half_done(tmp_path):
    """The stubs with the positional and attention modules solved (02-04's positions, 03's SDPA): half-way through."""
    pkg = tmp_path / "my_attn"
    shutil.copytree(STUBS, pkg)
    for module in ("positional", "attention"):
        shutil.copy(SOLVED / f"{module}.py", pkg / f"{module}.py")
    return pkg


def _package(tmp_path, module: str, source: str):
    """The stubs with ``module`` replaced by ``source``."""
    pkg = tmp_path / "my_attn"
    shutil.copytree(STUBS, pkg, dirs_exist_ok=True)
    (pkg / f"{module}.py").write_text(textwrap.dedent(source))
    return pkg


def test_every_stub_names_its_notebook_and_section():
    statuses = mine.check_mine(STUBS)
    assert [s.status for s in statuses] == ["not written"] * len(mine.PIECES)
    for s in statuses:
        assert f"notebook {s.piece.notebook}" in s.message and s.piece.section in s.message
    import my_attn.attention as stub  # loaded by check_mine from the repository's folder

    with pytest.raises(NotImplementedError, match=r'notebook 03, section "The reference function'):
        stub.scaled_dot_product_attention(torch.ones(1, 2), torch.ones(1, 2), torch.ones(1, 2))


def test_the_stubs_have_attn_libs_signatures():
    import importlib
    import inspect

    mine.check_mine(STUBS)
    for piece in mine.PIECES:
        theirs = getattr(importlib.import_module(f"attn_lib.{piece.module}"), piece.name, None)
        ours = getattr(importlib.import_module(f"my_attn.{piece.module}"), piece.name)
        if theirs is not None:
            assert inspect.signature(ours).parameters.keys() == inspect.signature(theirs).parameters.keys(), piece


def test_progress_table_at_three_points(tmp_path, capsys):
    half_done = _half_done(tmp_path)
    rows = {p: mine.progress_table(mine.check_mine(p)) for p in (STUBS, half_done, SOLVED)}
    assert rows[STUBS].endswith(f"0 of {len(mine.PIECES)} pieces pass.")
    half = rows[half_done]
    assert half.endswith(f"5 of {len(mine.PIECES)} pieces pass.")
    assert "| `attention.scaled_dot_product_attention` | 03 | passes |  |" in half
    assert "| `masks.causal_mask` | 04 | not written | write it: notebook 04, section" in half
    assert rows[SOLVED].endswith(f"{len(mine.PIECES)} of {len(mine.PIECES)} pieces pass.")
    # the command make check-mine runs
    out = subprocess.run([sys.executable, "-m", "attn_lib.course.mine", str(SOLVED)], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0 and out.stdout.strip().endswith("pieces pass."), out.stderr[-2000:]
    # its exit status: 0 while the written pieces pass (stubs are progress), 1 once a written piece fails
    assert mine.main([str(STUBS)]) == 0 and mine.main([str(half_done)]) == 0
    broken = _package(tmp_path / "broken", "masks", """
        import torch
        def causal_mask(q_len, kv_len=None, *, align="top_left", device=None):
            kv_len = q_len if kv_len is None else kv_len
            return torch.ones(q_len, kv_len, dtype=torch.bool).triu()
    """)
    assert mine.main([str(broken)]) == 1
    assert "| `masks.causal_mask` | 04 | fails |" in capsys.readouterr().out


def test_use_mine_replaces_attn_libs_pieces_everywhere_and_undoes(capsys):
    import attn_lib.attention as A
    import attn_lib.mla as mla

    original = A.scaled_dot_product_attention
    statuses = mine.use_mine(SOLVED)
    assert all(s.status == "passes" for s in statuses)
    import my_attn.attention as theirs

    assert A.scaled_dot_product_attention is theirs.scaled_dot_product_attention
    assert mla.scaled_dot_product_attention is theirs.scaled_dot_product_attention  # attn_lib's own users too
    from attn_lib.attention import scaled_dot_product_attention  # a notebook's import after the switch

    assert scaled_dot_product_attention is theirs.scaled_dot_product_attention
    assert "9 of 9 pieces are yours and in use" in capsys.readouterr().out.replace(str(len(mine.PIECES)), "9")
    assert pieces._ref_sdpa is original  # the checks keep comparing with attn_lib's own
    assert pieces.check_piece_scaled_dot_product_attention(theirs.scaled_dot_product_attention).passed
    mine.use_attn_lib()
    assert A.scaled_dot_product_attention is original and mla.scaled_dot_product_attention is original


def test_a_missing_or_failing_piece_falls_back_with_one_line_each(tmp_path, capsys):
    pkg = _package(tmp_path, "masks", """
        import torch
        def causal_mask(q_len, kv_len=None, *, align="top_left", device=None):
            kv_len = q_len if kv_len is None else kv_len
            return torch.ones(q_len, kv_len, dtype=torch.bool).triu()   # the mistake: the upper triangle
        def padding_mask(lengths, max_len=None):
            raise NotImplementedError
    """)
    import attn_lib.masks as M

    original = M.causal_mask
    mine.use_mine(pkg)
    out = capsys.readouterr().out
    assert M.causal_mask is original
    assert "04 causal_mask: fails its check; attn_lib's is used. ❌ causal_mask: not yet." in out
    assert "04 padding_mask: not written yet; attn_lib's is used." in out


SOFTMAX_WRONG = {
    "calls torch.softmax": ("return torch.softmax(scores, dim)", "called torch.softmax"),
    "calls F.softmax": ("return torch.nn.functional.softmax(scores, dim=dim)", "called"),
    "calls the Tensor method": ("return scores.softmax(dim)", "called Tensor.softmax"),
    "log_softmax then exp": ("return scores.log_softmax(dim).exp()", "called Tensor.log_softmax"),
    "no max subtracted": ("e = scores.exp()\n    return e / e.sum(dim, keepdim=True)", "overflows"),
    "wrong axis": ("m = scores.amax(0, keepdim=True)\n    e = (scores - m).exp()\n    return e / e.sum(0, keepdim=True)",
                   "wrong axis"),
}


@pytest.mark.parametrize("case", sorted(SOFTMAX_WRONG))
def test_softmax_check_rejects_the_typical_wrong_answers(tmp_path, case):
    body, hint = SOFTMAX_WRONG[case]
    src = f"import torch\ndef softmax(scores, dim=-1):\n    {body}\n"
    ns: dict = {}
    exec(src, ns)  # noqa: S102 - the learner's code, as a test input
    result = pieces.check_piece_softmax(ns["softmax"])
    assert not result.passed and hint in result.message, result.message


def test_softmax_check_accepts_a_differently_written_right_answer():
    def softmax(scores, dim=-1):  # through log-sum-exp: no library softmax, stable
        return (scores - scores.logsumexp(dim, keepdim=True)).exp()

    assert pieces.check_piece_softmax(softmax).passed


def test_sdpa_check_rejects_torchs_function_and_the_typical_mistakes():
    F = torch.nn.functional

    def borrowed(q, k, v, attn_mask=None, *, is_causal=False, dropout_p=0.0, scale=None, enable_gqa=False):
        w = torch.zeros(1)
        return F.scaled_dot_product_attention(q, k, v, attn_mask, is_causal=is_causal, scale=scale), w

    r = pieces.check_piece_scaled_dot_product_attention(borrowed)
    assert not r.passed and "called torch.nn.functional.scaled_dot_product_attention" in r.message

    def unscaled(q, k, v, attn_mask=None, *, is_causal=False, dropout_p=0.0, scale=None, enable_gqa=False):
        s = q @ k.transpose(-2, -1)
        w = (s - s.amax(-1, keepdim=True)).exp()
        w = w / w.sum(-1, keepdim=True)
        return w @ v, w

    r = pieces.check_piece_scaled_dot_product_attention(unscaled)
    assert not r.passed and "not scaled" in r.message


def _hand_softmax(s, dim=-1):
    e = (s - s.amax(dim, keepdim=True)).exp()
    return e / e.sum(dim, keepdim=True)


def _sdpa_after_03(q, k, v, attn_mask=None, *, is_causal=False, dropout_p=0.0, scale=None, enable_gqa=False):
    """What notebook 03 teaches: scale (default 1/sqrt(E)), the float32 upcast; no mask, no dropout, no GQA."""
    half = q.dtype in (torch.float16, torch.bfloat16)
    q, k, v = (x.float() if half else x for x in (q, k, v))
    w = _hand_softmax(q @ k.transpose(-2, -1) * (q.shape[-1] ** -0.5 if scale is None else scale))
    out = w @ v
    return (out.half(), w.half()) if half else (out, w)


def test_sdpa_check_after_notebook_03_says_03_passes_and_names_each_later_option_with_its_notebook():
    """Issue 34's learner trial: a learner after 03 sees that 03's cases pass and which notebook teaches the rest."""
    r = pieces.check_piece_scaled_dot_product_attention(_sdpa_after_03)
    assert not r.passed  # strict: the piece passes only when every case does
    assert "notebook 03's cases pass; case 5 (mask=bool, True = may attend; notebook 04)" in r.message, r.message
    for words in ("is_causal=True", "dropout_p=0.3", "all masked"):
        assert re.search(re.escape(words) + r"[^;]*; notebook 04\)", r.message), (words, r.message)
    assert "enable_gqa=True: query has 4 heads and key 2; repeat each key/value head; notebook 08" in r.message


def test_sdpa_check_names_the_gqa_case_instead_of_a_raw_torch_error():
    def no_gqa(q, k, v, attn_mask=None, *, is_causal=False, dropout_p=0.0, scale=None, enable_gqa=False):
        if enable_gqa:
            return _sdpa_after_03(q, k, v, scale=scale)  # broadcasting 4 heads against 2: torch's size error
        from attn_lib.attention import scaled_dot_product_attention as ref
        return ref(q, k, v, attn_mask, is_causal=is_causal, dropout_p=dropout_p, scale=scale)

    r = pieces.check_piece_scaled_dot_product_attention(no_gqa)
    assert not r.passed
    assert r.message.startswith("❌ scaled_dot_product_attention: not yet. "
                                "notebook 03's and notebook 04's cases pass;"), r.message
    assert "case 10 (enable_gqa=True: query has 4 heads and key 2; repeat each key/value head; notebook 08) differs: " \
           "your function raised RuntimeError" in r.message, r.message


def test_sdpa_check_refuses_a_library_softmax_inside_the_learners_softmax_and_float16_without_upcast():
    def lib_softmax(q, k, v, attn_mask=None, *, is_causal=False, dropout_p=0.0, scale=None, enable_gqa=False):
        w = torch.softmax(q @ k.transpose(-2, -1) * q.shape[-1] ** -0.5, -1)
        return w @ v, w

    r = pieces.check_piece_scaled_dot_product_attention(lib_softmax)
    assert not r.passed and "called torch.softmax" in r.message and "YOUR softmax" in r.message

    def no_upcast(q, k, v, attn_mask=None, *, is_causal=False, dropout_p=0.0, scale=None, enable_gqa=False):
        w = _hand_softmax(q @ k.transpose(-2, -1) * (q.shape[-1] ** -0.5 if scale is None else scale))
        return w @ v, w

    r = pieces.check_piece_scaled_dot_product_attention(no_upcast)
    assert not r.passed and "case 4 (float16 in" in r.message and "compute in float32" in r.message, r.message


def test_split_heads_check_names_a_reshape_without_transpose():
    r = pieces.check_piece_split_heads(lambda x, h: x.reshape(x.shape[0], h, x.shape[1], -1))
    assert not r.passed and "transpose(1, 2)" in r.message
    assert pieces.check_piece_split_heads(lambda x, h: x.unflatten(-1, (h, -1)).permute(0, 2, 1, 3)).passed


def test_the_switch_runs_from_the_environment(tmp_path):
    """ATTN_MINE=<folder> before attn_lib.setup(): the learner's function is the one a notebook imports."""
    code = ("import attn_lib; attn_lib.setup()\n"
            "from attn_lib.attention import scaled_dot_product_attention as f\n"
            "print(f.__module__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                         env={**__import__("os").environ, "ATTN_MINE": str(SOLVED)})
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "my_attn.attention"


def test_the_softmax_stub_points_to_the_exercise_that_teaches_it():
    """Issue 34: the stub and its hint named 03's matrix-form section, which uses torch.softmax."""
    import json

    from my_attn import attention as stub

    nb = json.loads((mine.REPO_ROOT / "notebooks" / "03_scaled_dot_product_attention.ipynb").read_text())
    headings = {line.lstrip("#").strip() for c in nb["cells"] if c["cell_type"] == "markdown"
                for line in "".join(c["source"]).splitlines() if line.startswith("#")}
    piece = next(p for p in pieces.PIECES if p.name == "softmax")
    assert piece.section == "Exercise 1 · The weights, with a softmax you write" and piece.section in headings
    with pytest.raises(NotImplementedError, match=r'notebook 03, section "Exercise 1 · The weights, with a softmax'):
        stub.softmax(torch.ones(2))


@pytest.mark.parametrize("stem, first, names", [
    ("03_scaled_dot_product_attention", "### Predict, then check · scaling by d_k",
     ("`my_attn/attention.py`", "`softmax`", "`scaled_dot_product_attention`")),
    ("05_multi_head_attention", "### Exercise 1 · What each head adds",
     ("`my_attn/mha.py`", "`split_heads`", "`merge_heads`", "`MultiHeadAttention.forward`",
      "`attn_lib.positional.apply_rope`")),
])
def test_notebooks_03_and_05_point_to_the_learners_stack(stem, first, names):
    """Issue 34: 04 had a 'Your stack' cell, 03 and 05 none. It comes just before the exercises, in both twins."""
    import json

    root = mine.REPO_ROOT / "notebooks"
    found = []
    for path in (root / f"{stem}.ipynb", root / "solutions" / f"{stem}_solutions.ipynb"):
        cells = ["".join(c["source"]) for c in json.loads(path.read_text())["cells"]]
        i = next(i for i, s in enumerate(cells) if s.startswith("## Your stack: `my_attn`"))
        after = "\n".join(cells[i + 1:i + 3])
        assert first in after, (path.name, after[:200])
        for words in names + ("`make check-mine`", "`ATTN_MINE=1 make lab`"):
            assert words in cells[i], (path.name, words)
        found.append(cells[i])
    assert found[0] == found[1]  # the same cell in the notebook and its solutions twin


def test_sdpa_check_counts_an_option_left_as_not_implemented_as_one_failing_case():
    def gqa_later(q, k, v, attn_mask=None, *, is_causal=False, dropout_p=0.0, scale=None, enable_gqa=False):
        if enable_gqa:
            raise NotImplementedError("notebook 08")
        from attn_lib.attention import scaled_dot_product_attention as ref
        return ref(q, k, v, attn_mask, is_causal=is_causal, dropout_p=dropout_p, scale=scale)

    r = pieces.check_piece_scaled_dot_product_attention(gqa_later)
    assert not r.passed and "not written yet" not in r.message
    assert "notebook 08) differs: your function raised NotImplementedError" in r.message, r.message
