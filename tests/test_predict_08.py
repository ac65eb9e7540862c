"""Notebook 08's predict-then-check questions: the right answer passes, each wrong one gets its own hint."""

from attn_lib.exercises.concepts import QUESTIONS, check_prediction, questions_for


def test_notebook_08_questions():
    questions = questions_for(8)
    assert questions, "no question registered for notebook 08"
    for q in questions:
        right = check_prediction(q.id, q.answer)
        assert right and q.explanation in right.message
        assert not check_prediction(q.id, ...) and "not answered" in check_prediction(q.id, ...).message
        if q.choices:
            for key in q.choices:
                if key != q.answer:
                    wrong = check_prediction(q.id, key.upper())
                    assert not wrong and q.hints[key] in wrong.message
        else:
            assert q.hints["low"] in check_prediction(q.id, q.answer - 1).message
            assert q.hints["high"] in check_prediction(q.id, q.answer + 1).message
            assert not check_prediction(q.id, q.answer + 1)
    assert all(q.id in QUESTIONS for q in questions)
