"""The predict-then-check questions of notebooks 05, 06 and 10: registered, and the numbers the explanations
state are derived here. (The right-answer / wrong-hint test of every question is in tests/test_predictions.py.)"""

import pytest
import torch

from attn_lib.exercises.concepts import QUESTIONS, questions_for


@pytest.mark.parametrize("notebook, ids", [
    (5, ["05.params_of_heads"]),
    (6, ["06.lazy_dog_by_position", "06.cls_weight_is_influence"]),
    (10, ["10.cache_query_rows", "10.gqa_cache_size"]),
])
def test_questions_registered(notebook, ids):
    assert [q.id for q in questions_for(notebook)] == ids


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
