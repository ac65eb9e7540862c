"""A prediction is asked before anything in its notebook answers it, and it shows its question (issue #34).

Every "predict, then check" question of ``attn_lib/course/exercises/predict_questions.py`` lists in ``reveals`` what
would give its answer away (the number, the phrase, the function that computes it). For each notebook and each
``check_prediction("NN.id", ...)`` cell:

- no cell above it, in its source or its text outputs, matches any of the question's ``reveals``. The markdown cell
  that asks the question is searched up to its "Predict, then check" (the question and its choices, which name the
  wrong answers too, come after it);
- the question is shown: the markdown cell right before it (or the cell itself) holds most of the words of the
  registered prompt, and every choice's letter.

The solutions twins are not searched: their cells above a prediction answer the earlier predictions on purpose.
"""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

from attn_lib.course.exercises.concepts import QUESTIONS, Question, _load_all

_load_all()
NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
PREDICTION = re.compile(r'check_prediction\(\s*"([0-9]{2}\.\w+)"')
MARKER = re.compile(r"predict,\s*then\s*check", re.I)

# (notebook, question id) pairs whose answer the notebook gives before it asks, today; other helpers' branches fix
# them (04, 05, 06: branches `early` and `nb0506`); the coordinator empties this set after merging them. The test
# below fails for a pair in this set that no longer violates, so the set cannot go stale.
KNOWN_ORDER_VIOLATIONS: set[tuple[str, str]] = set()


def _normalise(text: str, markdown: bool) -> str:
    if markdown:
        text = text.replace("*", "").replace("`", "")
    return " ".join(text.split())


def _cell_text(cell) -> str:
    parts = [cell.source]
    for out in cell.get("outputs", []):
        if "text" in out:
            parts.append(out["text"])
        for kind in ("text/plain", "text/markdown"):
            parts.append(out.get("data", {}).get(kind, ""))
    return _normalise("\n".join(parts), cell.cell_type == "markdown")


def matches(reveal, text: str) -> re.Match | None:
    """Where ``reveal`` (a string, found case-insensitively, or a compiled pattern) occurs in ``text``."""
    if isinstance(reveal, re.Pattern):
        return reveal.search(text)
    return re.search(re.escape(" ".join(reveal.split())), text, re.I)


def predictions(path: Path) -> list[tuple[int, str]]:
    cells = nbformat.read(path, as_version=4).cells
    return [(i, m.group(1)) for i, c in enumerate(cells) if c.cell_type == "code"
            for m in [PREDICTION.search(c.source)] if m]


def answers_above(cells, index: int, question: Question) -> list[str]:
    """Every place above cell ``index`` where one of the question's ``reveals`` occurs, as 'cell N: ...text...'."""
    found = []
    for i in range(index):
        text = _cell_text(cells[i])
        if i == index - 1 and cells[i].cell_type == "markdown":
            marker = MARKER.search(text)
            text = text[:marker.start()] if marker else text
        for reveal in question.reveals:
            hit = matches(reveal, text)
            if hit:
                found.append(f"cell {i}: ...{text[max(0, hit.start() - 60):hit.end() + 60]}...")
    return found


def _words(text: str) -> set[str]:
    return {w for w in re.findall(r"[a-z0-9_]+", text.replace("\\", "").lower()) if len(w) >= 3}


def question_shown(cells, index: int, question: Question) -> list[str]:
    """What of the question the cells at ``index`` (and the markdown right before) do not show; empty if shown."""
    shown_text = cells[index].source + "\n" + (cells[index - 1].source if cells[index - 1].cell_type == "markdown"
                                               else "")
    missing = []
    prompt, shown = _words(question.prompt), _words(shown_text)
    if len(prompt & shown) < 0.6 * len(prompt):
        missing.append(f"the prompt (shows {len(prompt & shown)} of its {len(prompt)} words: "
                       f"{sorted(prompt - shown)})")
    flat = _normalise(shown_text, markdown=True)
    for key in question.choices:
        if not re.search(rf"(\(|\b){key}(\)|\b)[:.]?\s", flat):
            missing.append(f"choice {key}")
    if not MARKER.search(flat):
        missing.append('the words "Predict, then check"')
    return missing


NOTEBOOK_PATHS = sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))
CASES = [(path.stem, index, qid) for path in NOTEBOOK_PATHS for index, qid in predictions(path)]


def test_every_question_has_reveals_and_is_asked_once():
    assert {qid for _, _, qid in CASES} == set(QUESTIONS), "a registered question no notebook asks, or vice versa"
    assert len(CASES) == len(QUESTIONS), "a question asked twice"
    for q in QUESTIONS.values():
        assert q.reveals, f"{q.id}: fill its reveals (what would give its answer away)"
        assert q.id[:2] == next(stem for stem, _, qid in CASES if qid == q.id)[:2]


@pytest.mark.parametrize("stem, index, qid", CASES, ids=[f"{s[:2]}-{q}" for s, _, q in CASES])
def test_prediction_is_asked_before_anything_answers_it(stem, index, qid):
    cells = nbformat.read(NOTEBOOKS / f"{stem}.ipynb", as_version=4).cells
    found = answers_above(cells, index, QUESTIONS[qid])
    if (stem, qid) in KNOWN_ORDER_VIOLATIONS:
        assert found, f"{stem} no longer answers {qid} early: remove it from KNOWN_ORDER_VIOLATIONS"
        pytest.xfail(f"known: {found[0]}")
    assert not found, f"{stem} answers {qid} before cell {index} asks it:\n" + "\n".join(found)


@pytest.mark.parametrize("stem, index, qid", CASES, ids=[f"{s[:2]}-{q}" for s, _, q in CASES])
def test_prediction_shows_its_question(stem, index, qid):
    cells = nbformat.read(NOTEBOOKS / f"{stem}.ipynb", as_version=4).cells
    missing = question_shown(cells, index, QUESTIONS[qid])
    assert not missing, f"{stem}, cell {index} ({qid}) does not show " + "; ".join(missing)


@pytest.mark.parametrize("qid", sorted(QUESTIONS))
def test_reveals_do_not_fire_on_the_question_itself_but_on_its_explanation(qid):
    """A reveal that matched the prompt would flag every notebook; one that matched nothing the course says about the
    answer could never fail. Each question's reveals miss its own prompt, and at least one finds the explanation or
    the right choice (written as a notebook would say it)."""
    q = QUESTIONS[qid]
    for reveal in q.reveals:
        assert not matches(reveal, " ".join(q.prompt.split())), (qid, reveal)
    answer_text = " ".join(f"{q.explanation} {q.choices.get(q.answer, '')} {q.hints}".split())
    assert any(matches(r, answer_text) for r in q.reveals) or qid in EXPLANATION_SAYS_IT_OTHERWISE, (
        f"{qid}: no reveal finds its own explanation: {answer_text[:200]}")


# Questions whose explanation words the answer differently from the notebook phrasings their reveals target.
EXPLANATION_SAYS_IT_OTHERWISE: set[str] = set()


def test_the_order_check_fails_when_the_answer_comes_first():
    """Move 10's cache cell (it prints the 2-head cache) above the GQA prediction: the check must find it; and a
    prediction cell whose markdown asks a different question is reported as not showing its own."""
    cells = nbformat.read(NOTEBOOKS / "10_capstone_decoder.ipynb", as_version=4).cells
    index = next(i for i, qid in predictions(NOTEBOOKS / "10_capstone_decoder.ipynb") if qid == "10.gqa_cache_size")
    leak = nbformat.v4.new_markdown_cell("With 2 key/value heads, not 4, the cache is half the size.")
    moved = cells[:index - 1] + [leak] + cells[index - 1:]
    assert answers_above(moved, index + 1, QUESTIONS["10.gqa_cache_size"])
    swapped = cells[:index - 1] + [nbformat.v4.new_markdown_cell(QUESTIONS["00.uniform_row"].prompt), cells[index]]
    assert question_shown(swapped, index, QUESTIONS["10.gqa_cache_size"])
