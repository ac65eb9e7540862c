"""The teacher's kit (docs/teaching/) stays true to the course: the committed quizzes are what the question registry
generates, every question id and notebook section the pages name exists, every lab of the plan has its quiz and its
misconceptions, and the syllabus's weights add up."""

import json
import re

import pytest

from attn_lib import REPO_ROOT
from attn_lib.course.exercises.concepts import QUESTIONS, _load_all
from classroom import quizzes
from classroom.labs import labs

KIT = REPO_ROOT / "docs" / "teaching"
NOTEBOOKS = REPO_ROOT / "notebooks"


def _headings(stem: str) -> set[str]:
    nb = json.loads((NOTEBOOKS / f"{stem}.ipynb").read_text())
    return {line.lstrip("#").strip() for c in nb["cells"] if c["cell_type"] == "markdown"
            for line in "".join(c["source"]).splitlines() if line.startswith("#")}


# `NN_notebook` › “heading”
SECTION = re.compile(r"`(\d\d_[a-z0-9_]+)` › “([^”]+)”")
QUESTION = re.compile(r"`(\d\d\.[a-z0-9_]+)`")


def test_committed_quizzes_match_the_registry():
    committed = quizzes.QUIZZES_MD.read_text()
    assert committed == quizzes.quizzes_markdown(), "regenerate: python -m classroom.quizzes --write"


def test_every_lab_has_a_quiz_and_every_question_is_in_one():
    sets = quizzes.quiz_sets()
    plan = labs()
    assert [t.split(" ·")[0] for t, _, _ in sets[:len(plan)]] == [lab.slug for lab in plan]
    _load_all()
    asked = [q.id for _, _, qs in sets for q in qs]
    assert sorted(asked) == sorted(QUESTIONS)  # each question once
    for lab, (_, prefixes, qs) in zip(plan, sets):
        assert qs, f"{lab.slug} has no question"
        assert all(q.id[:2] in lab.prefixes for q in qs)


def test_a_quiz_hand_out_has_no_answers(tmp_path):
    paths = quizzes.write_handouts(tmp_path)
    hand_out = (tmp_path / "lab-03.md").read_text()
    key = (tmp_path / "lab-03-key.md").read_text()
    assert "03.scale_by_dk" in hand_out and "Answer key" not in hand_out and "flattens" not in hand_out
    assert "Answer key" in key and "**b**" in key
    assert len(paths) == 2 * len(quizzes.quiz_sets())


@pytest.mark.parametrize("page", ["misconceptions.md", "rubrics.md"])
def test_every_reference_exists(page):
    text = (KIT / page).read_text()
    sections = SECTION.findall(text)
    assert sections, page
    for stem, heading in sections:
        assert (NOTEBOOKS / f"{stem}.ipynb").exists(), stem
        assert heading in _headings(stem), f"{page}: {stem} has no heading {heading!r}"
    _load_all()
    for qid in QUESTION.findall(text):
        assert qid in QUESTIONS, f"{page}: no registered question {qid}"


def test_every_lab_has_misconceptions_tied_to_its_notebooks():
    text = (KIT / "misconceptions.md").read_text()
    parts = re.split(r"^## ", text, flags=re.M)[1:]
    by_lab = {int(m.group(1)): p for p in parts if (m := re.match(r"Lab (\d+) ·", p))}
    for lab in labs():
        part = by_lab.get(lab.number)
        assert part is not None, f"misconceptions.md has no section for lab {lab.number}"
        items = [ln for ln in part.splitlines() if ln.startswith("- **")]
        refs = re.findall(r"\*Addressed by:\*([^\n]+(?:\n  [^\n-][^\n]*)*)", part)
        assert len(items) >= 2 and len(refs) == len(items), (lab.number, len(items), len(refs))
        for ref in refs:  # each item names a question or a section of this lab's notebooks
            named = [q[:2] for q in QUESTION.findall(ref)] + [s[:2] for s, _ in SECTION.findall(ref)]
            assert named and all(n in lab.prefixes for n in named), (lab.number, ref)


def test_syllabus_weights_add_up_and_the_schedule_names_every_lab():
    text = (KIT / "syllabus.md").read_text()
    weights = [int(w) for w in re.findall(r"^\|[^|]+\|\s*(\d+) %\s*\|", text, flags=re.M)]
    assert len(weights) >= 3 and sum(weights) == 100, weights
    for lab in labs():
        assert f"| {lab.title} |" in text, lab.title


def test_the_kit_is_linked_from_the_guide_and_the_readme():
    assert "teaching/README.md" in (REPO_ROOT / "docs" / "teaching.md").read_text()
    assert "docs/teaching/README.md" in (REPO_ROOT / "README.md").read_text()
    index = (KIT / "README.md").read_text()
    for page in ("syllabus.md", "rubrics.md", "quizzes.md", "misconceptions.md"):
        assert f"]({page})" in index and (KIT / page).exists()
