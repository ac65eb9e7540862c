"""attn_lib.course.heads (notebook 06's analysis functions) against independent computations:
plain Python loops, numpy.corrcoef, and a BERT whose value weights of one head are zeroed."""

import copy

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attn_lib.course.heads import HeadGates, head_average, offset_weight, pearson_rows, shuffle_within_groups


def _random_attention(N=3, NL=2, H=4, L=7, seed=0):
    g = torch.Generator().manual_seed(seed)
    A = torch.rand(N, NL, H, L, L, generator=g, dtype=torch.float64).softmax(-1)
    valid = torch.rand(N, L, generator=g) > 0.3
    valid[:, 0] = True
    return A, valid


def test_head_average_equals_a_loop():
    A, valid = _random_attention()
    per_query = A[..., 0]  # (N, NL, H, L): the weight on key 0
    N, NL, H, L = per_query.shape
    expected = torch.zeros(NL, H, dtype=torch.float64)
    for l in range(NL):
        for h in range(H):
            vals = [per_query[n, l, h, i] for n in range(N) for i in range(L) if valid[n, i]]
            expected[l, h] = sum(vals) / len(vals)
    assert torch.allclose(head_average(per_query, valid), expected)


@settings(max_examples=30, deadline=None)
@given(d=st.integers(-6, 6), seed=st.integers(0, 1000))
def test_offset_weight_equals_a_loop(d, seed):
    A, valid = _random_attention(seed=seed)
    N, NL, H, L, _ = A.shape
    expected = torch.zeros(NL, H, dtype=torch.float64)
    count = 0
    for n in range(N):
        for i in range(L):
            j = i + d
            if 0 <= j < L and valid[n, i] and valid[n, j]:
                expected += A[n, :, :, i, j]
                count += 1
    got = offset_weight(A, valid, d)
    if count == 0:
        assert torch.isnan(got).all()
    else:
        assert torch.allclose(got, expected / count)


def test_offset_weight_finds_a_previous_token_head():
    L = 6
    prev = torch.zeros(L, L, dtype=torch.float64)
    prev[0, 0] = 1
    prev[torch.arange(1, L), torch.arange(L - 1)] = 1  # query i -> key i - 1
    A = torch.stack([prev, torch.full((L, L), 1 / L, dtype=torch.float64)])[None, None]  # (1, 1, 2, L, L)
    valid = torch.ones(1, L, dtype=torch.bool)
    assert torch.allclose(offset_weight(A, valid, -1), torch.tensor([[1.0, 1 / L]], dtype=torch.float64))
    assert torch.allclose(offset_weight(A, valid, 1), torch.tensor([[0.0, 1 / L]], dtype=torch.float64))


def test_offset_weight_errors():
    A, valid = _random_attention()
    with pytest.raises(ValueError, match="offset"):
        offset_weight(A, valid, 7)
    with pytest.raises(TypeError, match="valid"):
        offset_weight(A, valid.float(), 1)
    with pytest.raises(ValueError, match="valid"):
        offset_weight(A, valid[:, :3], 1)
    with pytest.raises(ValueError, match="attentions"):
        offset_weight(A[0], valid, 1)


def test_shuffle_within_groups_keeps_groups_and_reaches_every_order():
    groups = torch.tensor([0, 0, 0, 1, 1, 2, 2, 2, 2])
    g = torch.Generator().manual_seed(0)
    seen = set()
    for _ in range(400):
        p = shuffle_within_groups(groups, g)
        assert sorted(p.tolist()) == list(range(len(groups)))  # a permutation
        assert torch.equal(groups[p], groups)  # every item stays in its group
        seen.add(tuple(p[:3].tolist()))
    assert len(seen) == 6  # all 3! orders of group 0 occur


def test_shuffle_within_groups_errors():
    with pytest.raises(ValueError, match="sorted"):
        shuffle_within_groups(torch.tensor([1, 0]))
    with pytest.raises(TypeError, match="integer"):
        shuffle_within_groups(torch.tensor([0.0, 1.0]))


def test_pearson_rows_equals_numpy():
    g = torch.Generator().manual_seed(1)
    x, r = torch.randn(5, 20, generator=g, dtype=torch.float64), torch.randn(20, generator=g, dtype=torch.float64)
    expected = [np.corrcoef(x[m].numpy(), r.numpy())[0, 1] for m in range(5)]
    assert np.allclose(pearson_rows(x, r).numpy(), expected)
    with pytest.raises(ValueError, match="agree in K"):
        pearson_rows(x, r[:3])
    # a constant vector has no correlation (0/0): numpy says NaN, attn_lib says so out loud
    with pytest.raises(ValueError, match="r is constant"):
        pearson_rows(x, torch.full((20,), 3.0, dtype=torch.float64))
    x[3] = 0.5
    with pytest.raises(ValueError, match=r"rows \[3\] of x are constant"):
        pearson_rows(x, r)
    with pytest.raises(TypeError, match="x must"):
        pearson_rows(x.long(), r)


@pytest.fixture(scope="module")
def tiny_bert():
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    config = BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=32, max_position_embeddings=16, attn_implementation="eager")
    return BertModel(config).eval()


def test_head_gates_equal_zeroed_value_weights(tiny_bert):
    ids = torch.randint(0, 50, (3, 6), generator=torch.Generator().manual_seed(2))
    mask = torch.ones(3, 6, dtype=torch.long)
    mask[2, 4:] = 0
    # independent: head 2 of layer 1 outputs weights @ V_2, which is 0 when its value rows are 0
    zeroed = copy.deepcopy(tiny_bert)
    value = zeroed.encoder.layer[1].attention.self.value
    with torch.no_grad():
        value.weight[2 * 4:3 * 4] = 0  # head_dim 4: features 8..11
        value.bias[2 * 4:3 * 4] = 0
        expected = zeroed(ids, attention_mask=mask).last_hidden_state
        plain = tiny_bert(ids, attention_mask=mask).last_hidden_state
        with HeadGates(tiny_bert, batch_size=3) as hg:
            gates = torch.ones(2, 2, 4)
            gates[1, 1, 2] = 0  # variant 1: head 1.2 off
            hg.gates = gates
            both = tiny_bert(ids.repeat(2, 1), attention_mask=mask.repeat(2, 1)).last_hidden_state
        after = tiny_bert(ids, attention_mask=mask).last_hidden_state  # hooks removed on exit
    assert torch.allclose(both[:3], plain, atol=1e-6)  # variant 0: all heads on
    assert torch.allclose(both[3:], expected, atol=1e-6)  # variant 1: as if head 1.2 had zero values
    assert not torch.allclose(both[3:], plain, atol=1e-3)  # and switching it off changed something
    assert torch.equal(after, plain)


def test_head_gates_errors(tiny_bert):
    with pytest.raises(TypeError, match="BERT-style encoder"):
        HeadGates(torch.nn.Linear(2, 2), batch_size=3)
    hg = HeadGates(tiny_bert, batch_size=3)
    with pytest.raises(ValueError, match="gates must have shape"):
        hg.gates = torch.ones(1, 6, 12)
    with hg:
        hg.gates = torch.ones(2, 2, 4)
        with pytest.raises(ValueError, match="V \\* batch_size"):
            tiny_bert(torch.zeros(3, 5, dtype=torch.long))
