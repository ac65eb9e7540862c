"""The student's ``my_attn/`` graded piece by piece in the sandbox (classroom/pieces.py, issue #34): the worked
solution gets full points, the stubs zero without a crash, a broken piece zero with its check's hint while the
others keep theirs, and a module that does not import costs only its own pieces."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from classroom import pieces, sandbox

ROOT = Path(__file__).resolve().parent.parent
SOLVED, STUBS = ROOT / "notebooks" / "solutions" / "my_attn", ROOT / "my_attn"


@pytest.fixture(scope="module")
def library(tmp_path_factory):
    sandbox.bwrap_path()
    return sandbox.library_dir(tmp_path_factory.mktemp("lib"))


def _grade(folder, library):
    result = pieces.grade_pieces(folder, library, cell_timeout=60, budget_s=600, salt="test-pieces")
    assert result["flags"] == [], result["flags"]
    assert set(result["scores"]) == set(pieces.points()), "one grade per graded piece"
    return result


def test_every_piece_is_graded_in_the_sandbox():
    graded = {p.name for p in pieces.graded_pieces()}
    assert {"softmax", "scaled_dot_product_attention", "grouped_query_attention", "tiled_attention",
            "MultiHeadAttention", "KVCache", "flash_forward"} <= graded
    assert pieces.ungraded_pieces() == []  # tests_class/test_pieces_classes.py: the classes; test_pieces_triton.py
    pts = pieces.points()
    assert pts.pop(pieces.DECODER_ID) == pieces.DECODER_POINTS
    assert all(v == pieces.PIECE_POINTS for v in pts.values())


def test_the_worked_solution_gets_full_points(library):
    result = _grade(SOLVED, library)
    assert result["scores"] == result["max"], {k: result["messages"][k] for k in result["scores"]
                                               if result["scores"][k] != result["max"][k]}


def test_the_stubs_get_zero_and_say_not_written(library):
    result = _grade(STUBS, library)
    assert sum(result["scores"].values()) == 0
    assert all("not written yet" in m for m in result["messages"].values()), result["messages"]


def test_a_broken_piece_loses_its_points_only(library, tmp_path):
    pkg = tmp_path / "my_attn"
    shutil.copytree(SOLVED, pkg)
    attention = (pkg / "attention.py").read_text()
    unscaled = attention.replace("scale = 1.0 / math.sqrt(query.shape[-1]) if scale is None else scale",
                                 "scale = scale or 1.0 / math.sqrt(query.shape[-1])")
    assert unscaled != attention
    (pkg / "attention.py").write_text(unscaled)
    (pkg / "windows.py").write_text("import no_such_module\n")  # does not import: its pieces are not written
    result = _grade(pkg, library)
    lost = {k for k, v in result["scores"].items() if v != result["max"][k]}
    windows = {f"piece_{p.name}" for p in pieces.graded_pieces() if p.module == "windows"}
    assert lost == {"piece_scaled_dot_product_attention"} | windows, lost
    assert "scale=0.0 was treated as the default" in result["messages"]["piece_scaled_dot_product_attention"]
    assert all("not written" in result["messages"][k] for k in windows), [result["messages"][k] for k in windows]


def test_a_broken_block_fails_the_decoder_threshold(library, tmp_path):
    """An LMBlock that drops its attention's output (tokens cannot read each other) trains to about ln 16: the
    decoder's points are lost with the threshold's hint, and the LMBlock piece's with its check's; every other
    piece keeps its points."""
    pkg = tmp_path / "my_attn"
    shutil.copytree(SOLVED, pkg)
    lm = (pkg / "models" / "lm.py").read_text()
    broken = lm.replace("        x = x + a\n", "        x = x + 0 * a\n", 1)
    assert broken != lm
    (pkg / "models" / "lm.py").write_text(broken)
    result = _grade(pkg, library)
    lost = {k for k, v in result["scores"].items() if v != result["max"][k]}
    assert lost == {pieces.DECODER_ID, "piece_LMBlock"}, lost
    assert "the attention must be causal" in result["messages"]["piece_LMBlock"] or \
        "LMBlock" in result["messages"]["piece_LMBlock"], result["messages"]["piece_LMBlock"]
    message = result["messages"][pieces.DECODER_ID]
    assert f"above the threshold {pieces.DECODER_THRESHOLD}" in message and "residual" in message, message


def test_autograde_grades_the_packages_into_the_gradebook(tmp_path):
    """`make autograde` finds SUBMISSIONS/<student>/my_attn/ beside the notebooks and grades it as the assignment
    my_attn: a row per student in the gradebook CSV and nbgrader's gradebook, the worked solution full points, the
    stubs zero."""
    from nbgrader.api import Gradebook

    from classroom.autograde import autograde
    from classroom.release import release

    notebooks = tmp_path / "notebooks"
    (notebooks / "solutions").mkdir(parents=True)
    shutil.copy(ROOT / "notebooks" / "00_welcome.ipynb", notebooks)
    shutil.copy(ROOT / "notebooks" / "solutions" / "00_welcome_solutions.ipynb", notebooks / "solutions")
    shutil.copy(ROOT / "notebooks" / "glossary.md", notebooks)
    release(notebooks, tmp_path / "course", tmp_path / "release", edition=tmp_path / "edition")
    subs = tmp_path / "submissions"
    shutil.copytree(SOLVED, subs / "alice" / "my_attn")
    shutil.copytree(STUBS, subs / "bob" / "my_attn")
    rows = autograde(subs, tmp_path / "course", tmp_path / "grades", student_timeout=600)
    mine = {r.student: r for r in rows if r.notebook == pieces.ASSIGNMENT}
    assert set(mine) == {"alice", "bob"}
    assert mine["alice"].total == sum(pieces.points().values()) and mine["alice"].flags == []
    assert mine["bob"].total == 0 and mine["bob"].flags == []
    assert "my_attn" in (tmp_path / "grades" / "gradebook.csv").read_text()
    with Gradebook(f"sqlite:///{tmp_path / 'course' / 'gradebook.db'}") as gb:
        assert gb.find_submission(pieces.ASSIGNMENT, "alice").score == sum(pieces.points().values())
        assert gb.find_submission(pieces.ASSIGNMENT, "bob").score == 0


def test_the_pieces_inputs_are_salted(monkeypatch):
    """The graded inputs of the pieces come from the run's secret salt, as the notebooks' do (issue 41 §5)."""
    import sys

    import attn_lib.course.mine  # noqa: F401
    from classroom.grade import _salt_checks

    for name, module in list(sys.modules.items()):  # put the unsalted ones back afterwards
        if name.startswith("attn_lib.course.exercises") and hasattr(module, "fresh_generator"):
            monkeypatch.setattr(module, "fresh_generator", module.fresh_generator)
    _salt_checks("a secret")
    for name in ("pieces", "pieces_fast", "pieces_build", "pieces_modern"):
        module = sys.modules[f"attn_lib.course.exercises.{name}"]
        assert getattr(module.fresh_generator, "_salted", False), name


def test_the_teaching_guide_says_what_is_graded():
    text = " ".join((ROOT / "docs" / "teaching.md").read_text().split())
    assert f"{pieces.PIECE_POINTS} points for each piece, function or class" in text
    assert (f"trained for {pieces.DECODER_STEPS} steps in the sandbox, {pieces.DECODER_POINTS:g} points when its "
            f"held-out copy loss is below {pieces.DECODER_THRESHOLD} nats") in text
    assert "The Triton kernel, `flash_forward`, is a function piece like the others" in text
    assert "flash_forward" not in pieces.ungraded_pieces()


def test_package_files_reads_only_regular_modules(tmp_path, monkeypatch):
    pkg = tmp_path / "my_attn"
    shutil.copytree(STUBS, pkg)
    (pkg / "secret.py").symlink_to(ROOT / "notebooks" / "solutions" / "my_attn" / "attention.py")
    (pkg / "huge.py").write_text("x = 1\n" * (pieces.MAX_FILE_BYTES // 6 + 1))
    (pkg / "__pycache__").mkdir(exist_ok=True)
    (pkg / "__pycache__" / "cached.py").write_text("")
    files = pieces.package_files(pkg)
    assert "my_attn/attention.py" in files and "my_attn/models/lm.py" in files
    assert not {"my_attn/secret.py", "my_attn/huge.py", "my_attn/__pycache__/cached.py"} & set(files)
    monkeypatch.setattr(pieces, "MAX_FILES", 3)
    assert len(pieces.package_files(pkg)) == 3
