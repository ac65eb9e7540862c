"""`make test-class`: the student release and autograding, end to end, in a temporary course directory.

1. release every course notebook (nbgrader generate_assignment) and check the student version cell by cell;
2. five synthetic students submit notebook 03 (worked solutions; typical wrong answers; a function that raises
   and one that loops forever; an edited locked cell; a patched check function);
3. autograde them (nbgrader autograde + hidden re-checks + feedback);
4. assert the gradebook CSV cell by cell, and the feedback pages.
"""

from __future__ import annotations

import csv
import json
import os
import re
import shutil
import tempfile
import time
from pathlib import Path

import pytest

from classroom import source
from classroom.autograde import autograde
from classroom.release import points_table, release

ROOT = Path(__file__).resolve().parent.parent
NB = "03_scaled_dot_product_attention"
# notebook 03's graded checks in notebook order: the predict-then-check question comes first
P = "check_prediction_03_scale_by_dk"
KEYS = [P, "check_attention_weights", "check_attention", "check_self_attention"]

# ---- the students' answers (notebook 03): one string per answer cell
SOLVED_ATTENTION = '''\
def attention(query, key, value):
    w = torch.softmax(query @ key.transpose(-2, -1) / math.sqrt(query.shape[-1]), dim=-1)
    return w @ value
'''
SOLVED_SELF = '''\
def self_attention(x, w_q, w_k, w_v):
    q, k, v = x @ w_q, x @ w_k, x @ w_v
    return torch.softmax(q @ k.T / math.sqrt(w_q.shape[1]), dim=-1) @ v
'''
NO_SCALE = '''\
def attention_weights(query, key):
    return torch.softmax(query @ key.transpose(-2, -1), dim=-1)
'''
SCALE_D_MODEL = '''\
def self_attention(x, w_q, w_k, w_v):
    q, k, v = x @ w_q, x @ w_k, x @ w_v
    return torch.softmax(q @ k.T / math.sqrt(x.shape[1]), dim=-1) @ v
'''
RAISES = '''\
def attention_weights(query, key):
    raise ValueError("I give up")
'''
# An endless loop in the cell itself (a function that never returns is stopped by the check's own time limit
# instead, with its own message): nbgrader's per-cell time limit stops it, and `attention` is never defined.
LOOPS = '''\
while True:
    pass


def attention(query, key, value):
    return value
'''
PATCHED_CHECK = '''\
def attention_weights(query, key):
    return query @ key.transpose(-2, -1)

attn_lib.exercises.check_attention_weights = lambda fn: attn_lib.exercises.CheckResult("x", True, "✅ passed")
'''
PATCHED_TORCH = '''\
def attention(query, key, value):
    return value

torch.allclose = lambda *args, **kwargs: True
'''
IMPORTS = "import math\n\nimport torch\n\n"


def _cells_by_id(nb):
    return {c["metadata"]["nbgrader"]["grade_id"]: c for c in nb["cells"] if "nbgrader" in c.get("metadata", {})}


def _text(cell):
    return "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    # The gradebook is SQLite and nbgrader commits once per cell: on tmpfs those commits cost no disk sync.
    shm = Path("/dev/shm")
    tmp = Path(tempfile.mkdtemp(prefix="class-test-", dir=shm)) if shm.is_dir() else tmp_path_factory.mktemp("course")
    started = time.monotonic()
    assignments = release(ROOT / "notebooks", tmp / "course", tmp / "release")
    print(f"release: {time.monotonic() - started:.0f} s")
    yield tmp, assignments
    if tmp.parent == shm:
        shutil.rmtree(tmp, ignore_errors=True)


def test_release_has_every_notebook_with_exercises(course):
    tmp, assignments = course
    with_checks = sorted(p.stem for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")
                         if "attn_lib.exercises.check_" in p.read_text())
    assert [a.name for a in assignments] == with_checks
    for a in assignments:
        assert (tmp / "release" / a.name / f"{a.name}.ipynb").exists()


def test_student_version_cell_by_cell(course):
    """Stubs exactly as in the course, graded checks locked with points, no solution and no hidden test."""
    tmp, assignments = course
    for a in assignments:
        course_nb = json.loads(a.notebook.read_text())
        student = json.loads((tmp / "release" / a.name / f"{a.name}.ipynb").read_text())
        cells = _cells_by_id(student)
        assert len(cells) == len(student["cells"]), "every cell carries nbgrader metadata"
        exercises = source.exercises_of(course_nb, json.loads(a.solutions.read_text()))
        for ex in exercises.values():
            answer, test = cells[f"answer_{ex.key}"], cells[ex.key]
            assert _text(answer).rstrip() == ex.stub  # the course's stub, unchanged
            assert answer["metadata"]["nbgrader"]["solution"] and not answer["metadata"]["nbgrader"]["locked"]
            meta = test["metadata"]["nbgrader"]
            assert meta["grade"] and meta["locked"] and meta["points"] == ex.points
            assert f"attn_lib.exercises.{ex.checks[0].name}(" in _text(test)
            assert "HIDDEN" not in _text(test) and "recheck" not in _text(test)
        released_text = json.dumps(student)
        assert "BEGIN SOLUTION" not in released_text
        for ex in exercises.values():  # no solution line survives (a solution's longest line, as a probe)
            probe = max((ln for ln in ex.solution.splitlines() if ln.strip() not in ex.stub), key=len, default="")
            if len(probe.strip()) > 25:
                assert probe.strip() not in released_text, (a.name, probe)
        locked = [c for c in student["cells"] if not c["metadata"]["nbgrader"]["solution"]]
        assert all(c["metadata"]["nbgrader"]["locked"] for c in locked)
        assert len(student["cells"]) == len(course_nb["cells"]) + len(exercises)  # each exercise: answer + check


def test_source_version_has_solution_and_hidden_tests(course):
    tmp, assignments = course
    src = json.loads((tmp / "course" / "source" / NB / f"{NB}.ipynb").read_text())
    cells = _cells_by_id(src)
    assert "### BEGIN SOLUTION" in _text(cells["answer_check_attention_weights"])
    assert "classroom.recheck.recheck('check_attention_weights', attention_weights)" in _text(cells["check_attention_weights"])


def test_teaching_guide_lists_the_points(course):
    _, assignments = course
    guide = (ROOT / "docs" / "teaching.md").read_text()
    assert points_table(assignments) in guide, "regenerate with: python -m classroom.release --points-table"


def _submission(tmp: Path, student: str, answers: dict[str, str], edit=None) -> None:
    nb = json.loads((tmp / "release" / NB / f"{NB}.ipynb").read_text())
    for cell in nb["cells"]:
        gid = cell["metadata"]["nbgrader"]["grade_id"]
        if gid in answers:
            cell["source"] = answers[gid]
    if edit:
        edit(nb)
    path = tmp / "submissions" / student / NB / f"{NB}.ipynb"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(nb))


def _edit_locked(nb):
    cells = nb["cells"]
    test = next(c for c in cells if c["metadata"]["nbgrader"]["grade_id"] == "check_attention_weights")
    test["source"] = "pass  # no check here"
    md = next(c for c in cells if c["cell_type"] == "markdown" and c["metadata"]["nbgrader"]["locked"])
    md["source"] = "I rewrote the introduction."
    victim = [c for c in cells if c["cell_type"] == "markdown"][-1]
    cells.remove(victim)
    nb["_deleted"] = victim["metadata"]["nbgrader"]["grade_id"]


@pytest.fixture(scope="module")
def graded(course):
    tmp, assignments = course
    a = next(a for a in assignments if a.name == NB)
    solutions = {f"answer_{e.key}": e.solution for e in a.exercises}
    _submission(tmp, "s1_solutions", solutions)
    _submission(tmp, "s2_wrong", {"answer_check_attention_weights": IMPORTS + NO_SCALE,
                                  "answer_check_attention": IMPORTS + SOLVED_ATTENTION,
                                  "answer_check_self_attention": IMPORTS + SCALE_D_MODEL})
    _submission(tmp, "s3_raises_loops", {"answer_check_attention_weights": RAISES,
                                         "answer_check_attention": LOOPS,
                                         "answer_check_self_attention": IMPORTS + SOLVED_SELF})
    deleted = {}

    def edit(nb):
        _edit_locked(nb)
        deleted["id"] = nb.pop("_deleted")

    _submission(tmp, "s4_edited_locked", {"answer_check_attention": IMPORTS + SOLVED_ATTENTION,
                                          "answer_check_self_attention": IMPORTS + SOLVED_SELF}, edit=edit)
    _submission(tmp, "s5_patched", {"answer_check_attention_weights": IMPORTS + PATCHED_CHECK,
                                    "answer_check_attention": IMPORTS + PATCHED_TORCH,
                                    "answer_check_self_attention": IMPORTS + SOLVED_SELF})
    (tmp / "submissions" / "s5_patched" / "notes.ipynb").write_text("{}")  # not a course notebook: ignored
    started = time.monotonic()
    rows = autograde(tmp / "submissions", tmp / "course", tmp / "grades", student_timeout=300, jobs=2)
    print(f"autograde of 5 students: {time.monotonic() - started:.0f} s")
    with (tmp / "grades" / "gradebook.csv").open() as f:
        table = {r["student"]: r for r in csv.DictReader(f)}
    return tmp, rows, table, deleted["id"]


def test_gradebook_header(graded):
    tmp, _, _, _ = graded
    header = (tmp / "grades" / "gradebook.csv").read_text().splitlines()[0]
    assert header == "student,notebook," + ",".join(KEYS) + ",total,max_total,failed,flags"


@pytest.mark.parametrize("student, points, failed, flags", [
    ("s1_solutions", [1, 1, 1, 1], [], []),
    ("s2_wrong", [0, 0, 1, 0], [P, "check_attention_weights", "check_self_attention"], []),
    ("s3_raises_loops", [0, 0, 0, 1], [P, "check_attention_weights", "check_attention"],
     ["1 cell(s) ran past the time limit"]),
    ("s4_edited_locked", [0, 0, 1, 1], [P, "check_attention_weights"], ["locked cell check_attention_weights edited",
                                                                       "locked cell locked_", "deleted"]),
    ("s5_patched", [0, 0, 0, 1], [P, "check_attention_weights", "check_attention"],
     ["own code assigns into attn_lib", "own code assigns into torch/math/numpy"]),
])
def test_gradebook_cell_by_cell(graded, student, points, failed, flags):
    _, _, table, deleted = graded
    row = table[student]
    assert row["notebook"] == NB
    assert [int(row[k]) for k in KEYS] == points
    assert (int(row["total"]), int(row["max_total"])) == (sum(points), len(KEYS))
    assert row["failed"] == ";".join(failed)
    if not flags:
        assert row["flags"] == ""
    for flag in flags:
        assert flag in row["flags"], (flag, row["flags"])
    if student == "s4_edited_locked":
        assert f"locked cell {deleted} deleted" in row["flags"]
        assert len(re.findall(r"locked cell locked_\w+ edited", row["flags"])) == 1


def test_feedback_names_the_failing_check_and_its_hint(graded):
    tmp, _, _, _ = graded
    page = (tmp / "grades" / "feedback" / "s2_wrong" / "index.html").read_text()
    assert "check_attention_weights</td><td>0 / 1" in page
    assert "missing 1/sqrt(d_k) scale" in page  # the check's hint for this mistake
    assert "1/sqrt(d_model)" in page  # ... and for exercise 3's
    assert "check_attention</td><td>1 / 1</td><td class='ok'>passed" in page
    s3 = (tmp / "grades" / "feedback" / "s3_raises_loops" / "index.html").read_text()
    assert "I give up" in s3 and "time limit" in s3
    s5 = (tmp / "grades" / "feedback" / "s5_patched" / "index.html").read_text()
    assert "hidden re-check on fresh inputs" in s5
    full = (tmp / "grades" / "feedback" / "s2_wrong" / f"{NB}.html").read_text()
    assert "missing 1/sqrt(d_k) scale" in full
    assert not re.search(r"<script src=\"https?://", full), "feedback must not load scripts from the network"


def test_hidden_tests_use_other_inputs_than_the_visible_check():
    """A function that only knows the visible check's inputs passes it and fails the hidden re-check."""
    import torch

    import attn_lib.exercises
    from classroom.recheck import recheck

    seen = {}

    def attention_weights(query, key):
        ref = torch.softmax(query @ key.transpose(-2, -1) / query.shape[-1] ** 0.5, dim=-1)
        seen.setdefault(tuple(query.flatten()[:3].tolist()), ref)
        return ref

    assert attn_lib.exercises.check_attention_weights(attention_weights)
    memorised = dict(seen)

    def memoriser(query, key):
        return memorised.get(tuple(query.flatten()[:3].tolist()), torch.zeros(query.shape[:-1] + key.shape[-2:-1]))

    assert attn_lib.exercises.check_attention_weights(memoriser)
    with pytest.raises(AssertionError, match="hidden re-check"):
        recheck("check_attention_weights", memoriser)
