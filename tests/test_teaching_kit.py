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


def test_committed_quizzes_match_the_bank():
    committed = quizzes.QUIZZES_MD.read_text()
    assert committed == quizzes.quizzes_markdown(), "regenerate: python -m classroom.quizzes --write"


def test_every_notebook_on_disk_is_in_exactly_one_lab_and_the_capstone_in_its_own():
    """Reads notebooks/: a new notebook fails here until the plan (docs/teaching.md) has a lab for it."""
    on_disk = sorted(p.stem for p in NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))
    in_labs = [nb for lab in labs() for nb in lab.notebooks]
    assert sorted(in_labs) == on_disk, f"in no lab: {sorted(set(on_disk) - set(in_labs))}; twice: " \
        f"{sorted({n for n in in_labs if in_labs.count(n) > 1})}"
    (capstone,) = [lab for lab in labs() if any("capstone" in n for n in lab.notebooks)]
    assert len(capstone.notebooks) == 1 and not capstone.optional


def test_every_lab_has_a_quiz_bank():
    for lab in labs():
        assert len(quizzes.bank(lab)) >= quizzes.QUIZ_SIZE, lab.slug
        assert f"## {lab.slug} · " in quizzes.QUIZZES_MD.read_text()


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


def _sections(text: str) -> dict[int, str]:
    parts = re.split(r"^## ", text, flags=re.M)[1:]
    return {int(m.group(1)): p for p in parts if (m := re.match(r"Lab (\d+) ·", p))}


def test_every_lab_has_instructor_notes():
    """Minutes per part adding up to the 90-minute lab, the board, two discussion prompts, and stumbles that are
    misconceptions listed for that lab."""
    notes = _sections((KIT / "instructor_notes.md").read_text())
    misconceptions = _sections((KIT / "misconceptions.md").read_text())
    for lab in labs():
        part = notes.get(lab.number)
        assert part is not None, f"instructor_notes.md has no section for lab {lab.number}"
        minutes = [int(m) for m in re.findall(r"^\|[^|]+\|\s*(\d+)\s*\|$", part, flags=re.M)]
        assert len(minutes) >= 3 and sum(minutes) == 90, (lab.number, minutes)
        board = re.search(r"\*\*On the board\.\*\* (\S.{40,})", part)
        assert board, f"lab {lab.number}: no board plan"
        prompts = part.split("**Discussion prompts.**")[1].split("**Common stumbles.**")[0]
        assert re.findall(r"^\d\. ", prompts, flags=re.M) == ["1. ", "2. "], lab.number
        stumbles = re.findall(r"^- (\*\*.+?\*\*)", part.split("**Common stumbles.**")[1], flags=re.M)
        known = re.findall(r"^- (\*\*.+?\*\*)", misconceptions[lab.number], flags=re.M)
        assert len(stumbles) >= 2, lab.number
        for s in stumbles:
            assert s in known, f"lab {lab.number}: {s} is not a misconception of misconceptions.md's lab {lab.number}"
    assert set(notes) == {lab.number for lab in labs()}


def test_syllabus_weights_add_up_and_the_schedule_names_every_lab():
    text = (KIT / "syllabus.md").read_text()
    weights = [int(w) for w in re.findall(r"^\|[^|]+\|\s*(\d+) %\s*\|", text, flags=re.M)]
    assert len(weights) >= 3 and sum(weights) == 100, weights
    for lab in labs():
        assert f"| {lab.title} |" in text, lab.title


def _duration(seconds: float) -> str:
    return f"{seconds / 3600:.1f} h" if seconds >= 3600 else f"{round(seconds / 60)} min"


def test_the_grading_budget_is_the_measured_figure_times_the_class():
    """docs/teaching.md's budget table is arithmetic on the measured figures (wall time / 30 submissions, before and
    after the grader stopped re-running what no check needs)."""
    guide = (REPO_ROOT / "docs" / "teaching.md").read_text()
    walls = re.search(r"\| wall time, 30 submissions, 2 at once \| (\d+) s \| (\d+) s \|", guide)
    before, per = int(walls.group(1)) / 30, int(walls.group(2)) / 30
    assert f"| **{before:.1f} s** | **{per:.1f} s** |" in guide
    assert f"**{per:.1f} s per student-notebook**" in guide
    notebooks = len(list(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb")))
    section = guide.split("#### The grading budget")[1]
    rows = re.findall(r"^\| ([\d,]+) \| ([\d ]+) \| (.+?) \| (.+?) \| (.+?) \|$", section, flags=re.M)
    assert [int(r[0].replace(",", "")) for r in rows] == [30, 300, 1000]
    for students, sn, two_before, two, sixteen in rows:
        n = int(students.replace(",", ""))
        assert int(sn.replace(" ", "")) == n * notebooks
        assert two_before == _duration(n * notebooks * round(before, 1)), (n, two_before)
        assert two == _duration(n * notebooks * round(per, 1)), (n, two)
        assert sixteen == _duration(n * notebooks * round(per, 1) / 8), (n, sixteen)


def test_the_kit_is_linked_from_the_guide_and_the_readme():
    assert "teaching/README.md" in (REPO_ROOT / "docs" / "teaching.md").read_text()
    assert "docs/teaching/README.md" in (REPO_ROOT / "README.md").read_text()
    index = (KIT / "README.md").read_text()
    for page in ("syllabus.md", "rubrics.md", "quizzes.md", "misconceptions.md", "instructor_notes.md",
                 "ai_policy.md", "ta_guide.md", "install_faq.md"):
        assert f"]({page})" in index and (KIT / page).exists()
