"""The predict-then-check questions of notebooks 05, 06 and 10: the right answer passes, each wrong
choice gets its own hint, and the numbers the explanations state are derived here."""

import pytest
import torch

from attn_lib.exercises.concepts import QUESTIONS, check_prediction, questions_for


@pytest.mark.parametrize("notebook, ids", [
    (5, ["05.params_of_heads"]),
    (6, ["06.lazy_dog_by_position", "06.cls_weight_is_influence"]),
    (10, ["10.cache_query_rows", "10.gqa_cache_size"]),
])
def test_questions_registered(notebook, ids):
    assert [q.id for q in questions_for(notebook)] == ids


@pytest.mark.parametrize("qid", ["05.params_of_heads", "06.lazy_dog_by_position", "06.cls_weight_is_influence",
                                 "10.gqa_cache_size"])
def test_choice_questions(qid):
    q = QUESTIONS[qid]
    right = check_prediction(qid, q.answer.upper())
    assert right and q.explanation in right.message
    for key in q.choices:
        if key != q.answer:
            wrong = check_prediction(qid, key)
            assert not wrong and q.hints[key] in wrong.message
    assert not check_prediction(qid, ...)


def test_number_question():
    assert check_prediction("10.cache_query_rows", 1)
    wrong = check_prediction("10.cache_query_rows", 20)
    assert not wrong and QUESTIONS["10.cache_query_rows"].hints["high"] in wrong.message


def test_parameter_count_of_the_explanation():
    mha = torch.nn.MultiheadAttention(512, 8)
    single = torch.nn.MultiheadAttention(512, 1)
    n = sum(p.numel() for p in mha.parameters())
    assert n == sum(p.numel() for p in single.parameters()) == 1_050_624


def test_kv_cache_halves_with_two_kv_heads():
    from attn_lib import KVCache

    sizes = []
    for hkv in (4, 2):
        cache = KVCache()
        cache.update(torch.zeros(1, hkv, 19, 16), torch.zeros(1, hkv, 19, 16))
        sizes.append(cache.nbytes())
    assert sizes[1] * 2 == sizes[0]
