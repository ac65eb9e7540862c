"""Conceptual "predict, then check" exercises: ``check_prediction(question_id, answer)``.

A notebook asks a question before the learner runs the code that answers it ("what happens to the
weights if you divide by d_k instead of sqrt(d_k)?"). The learner writes a prediction -- a letter
for a multiple-choice question, or a number -- and ``check_prediction`` says whether it is right,
with a hint aimed at the wrong choice made. The questions live in one data module,
``attn_lib/course/exercises/predict_questions.py``, a section per notebook, each question a call of :func:`register`
with an id ``"NN.slug"`` (``NN`` the notebook's number); they are collected here, so a teacher can list every
question with its answer::

    from attn_lib.course.exercises.concepts import QUESTIONS
    for q in QUESTIONS.values(): print(q.id, q.answer, q.explanation)

Writing a question (in its notebook's section of ``predict_questions.py``)::

    from attn_lib.course.exercises.concepts import Question, register
    register(Question(
        id="03.scale_by_dk",
        prompt="Divide the scores by d_k instead of sqrt(d_k). The weights become ...",
        choices={"a": "sharper (closer to one-hot)", "b": "flatter (closer to uniform)", "c": "unchanged"},
        answer="b",
        hints={"a": "Dividing by a larger number shrinks the scores; smaller scores ...",
               "c": "The softmax is not scale-invariant: ..."},
        explanation="d_k > sqrt(d_k) for d_k > 1, so the scores shrink and the softmax flattens.",
    ))

A number question gives ``answer`` as a float and ``tolerance`` (absolute), and no ``choices``.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
from dataclasses import dataclass, field

from attn_lib.course.exercises._core import CheckResult

__all__ = ["Question", "register", "check_prediction", "QUESTIONS", "questions_for"]


@dataclass(frozen=True)
class Question:
    """One conceptual question.

    Attributes:
        id: ``"NN.slug"``, NN the notebook's number (``"04.left_padding_nan"``).
        prompt: the question, as the notebook shows it.
        answer: the right choice's key (``"b"``) or, for a number question, the value.
        choices: key -> text for a multiple-choice question; empty for a number question.
        hints: wrong choice key -> hint (multiple choice); ``"low"``/``"high"`` -> hint (number).
        explanation: why the answer is right; shown when the prediction is right, and in the teacher's guide.
        tolerance: absolute tolerance of a number answer.
        reveals: what would give the answer away if the notebook showed it before the question: each a string
            (found case-insensitively, whitespace collapsed) or a compiled regular expression, searched in the
            source and text outputs of every cell above the question (tests/course/test_prediction_order.py).
    """

    id: str
    prompt: str
    answer: str | float | None  # None: withheld (the student edition; classroom/edition.py)
    explanation: str
    choices: dict[str, str] = field(default_factory=dict)
    hints: dict[str, str] = field(default_factory=dict)
    tolerance: float = 0.0
    reveals: tuple[str | re.Pattern, ...] = ()

    def __post_init__(self):
        if self.answer is None:
            return
        if self.choices and self.answer not in self.choices:
            raise ValueError(f"question {self.id}: answer {self.answer!r} is not one of its choices {list(self.choices)}")
        if not self.choices and isinstance(self.answer, str):
            raise ValueError(f"question {self.id}: a question without choices needs a number answer")


QUESTIONS: dict[str, Question] = {}


def register(question: Question) -> Question:
    """Add ``question`` to :data:`QUESTIONS` (ids are unique)."""
    if question.id in QUESTIONS and QUESTIONS[question.id] != question:
        raise ValueError(f"question id {question.id!r} is registered twice")
    QUESTIONS[question.id] = question
    return question


def _load_all() -> None:
    import attn_lib.course.exercises as package

    for info in pkgutil.iter_modules(package.__path__):
        if info.name.startswith("predict_"):
            importlib.import_module(f"attn_lib.course.exercises.{info.name}")


def questions_for(notebook: int) -> list[Question]:
    """The questions of notebook number ``notebook``, in the order they were registered."""
    _load_all()
    return [q for q in QUESTIONS.values() if q.id.startswith(f"{notebook:02d}.")]


def check_prediction(question_id: str, answer) -> CheckResult:
    """Check a prediction: ``answer`` is a choice's key (``"b"``, case-insensitive) or a number.

    Returns a :class:`~attn_lib.course.exercises.CheckResult`: ✅ with the explanation, or ❌ with the hint for
    that choice. An answer left as ``...`` or ``None`` says "not answered yet".

    Raises:
        KeyError: no question has this id (the message lists the notebook's ids).
    """
    _load_all()
    name = f"check_prediction({question_id!r})"
    if question_id not in QUESTIONS:
        known = ", ".join(sorted(QUESTIONS)) or "none"
        raise KeyError(f"no question {question_id!r}; known questions: {known}")
    q = QUESTIONS[question_id]
    if answer is None or answer is Ellipsis:
        return CheckResult(name, False, f"❌ {name}: not answered yet: replace ... with your prediction.")
    withheld = (f"✅ {name}: your prediction {answer!r} is recorded. This edition of the course does not include "
                "the answers: your teacher discusses them in class.")
    if q.choices:
        key = answer.strip().lower() if isinstance(answer, str) else answer
        if key not in q.choices:
            options = ", ".join(repr(k) for k in q.choices)
            return CheckResult(name, False, f"❌ {name}: answer with one of {options}, got {answer!r}.")
        if q.answer is None:
            return CheckResult(name, True, withheld)
        if key == q.answer:
            return CheckResult(name, True, f"✅ {name}: right. {q.explanation}")
        hint = q.hints.get(key, "not this one; run the cell below and look again.")
        return CheckResult(name, False, f"❌ {name}: not yet. {hint}")
    if isinstance(answer, bool) or not isinstance(answer, (int, float)):
        return CheckResult(name, False, f"❌ {name}: answer with a number, got {type(answer).__name__} {answer!r}.")
    if q.answer is None:
        return CheckResult(name, True, withheld)
    if abs(float(answer) - float(q.answer)) <= q.tolerance:
        return CheckResult(name, True, f"✅ {name}: right. {q.explanation}")
    side = "low" if answer < q.answer else "high"
    hint = q.hints.get(side, f"too {side}.")
    return CheckResult(name, False, f"❌ {name}: not yet. {hint}")


def answers_markdown() -> str:
    """Every question with its answer and reasoning, as Markdown (the teacher's guide includes this).

    ``python -m attn_lib.course.exercises.concepts`` prints it.
    """
    _load_all()
    lines = []
    for qid in sorted(QUESTIONS):
        q = QUESTIONS[qid]
        answer = f"**{q.answer}** ({q.choices[q.answer]})" if q.choices else f"**{q.answer:g}**"
        lines.append(f"- `{qid}` — {q.prompt}\n  Answer: {answer}. {q.explanation}")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":  # pragma: no cover
    # run as a script this file is a second module: use the one the package imported (where questions register)
    from attn_lib.course.exercises import concepts as _imported

    print(_imported.answers_markdown())
