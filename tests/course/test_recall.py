"""attn_lib.course.recall's argument checks (issue 38): the recall model and its accuracy refuse what they answered with a raw
torch error or a wrong number. The task, the models and the shipped curve are tested in tests/test_linear.py."""

from __future__ import annotations

import pytest
import torch

from attn_lib.course.recall import RecallModel, make_recall_batch, recall_accuracy, train_recall


@pytest.fixture(scope="module")
def small():
    torch.manual_seed(0)
    return RecallModel("softmax", d_model=16, num_heads=2, num_layers=1)


def _ids(*shape, high=4, dtype=torch.long):
    return torch.randint(0, high, shape).to(dtype)


@pytest.mark.parametrize("call, error, match", [
    # wrong kinds of module and seeds (issue 38 §4): before, Linear.forward's or Python's own errors
    (lambda m: recall_accuracy(torch.nn.Linear(2, 2), 4), TypeError, "model must be an attn_lib.course.recall.RecallModel"),
    (lambda m: recall_accuracy(None, 4), TypeError, "RecallModel, got NoneType"),  # was AttributeError
    (lambda m: recall_accuracy(m, 4, seed="a"), TypeError, "seed must be an int >= 0, got str 'a'"),
    (lambda m: recall_accuracy(m, 4, seed=-1), ValueError, "seed must be an int >= 0, got -1"),
    (lambda m: recall_accuracy(m, 0), ValueError, "num_pairs must be an int >= 1, got 0"),
    # the forward pass's raw errors: reshape of 0 elements, nn.Embedding's IndexError/RuntimeError, broadcasting
    (lambda m: m(_ids(2, 0), _ids(2, 0)), ValueError, r"keys must be \(B, L\) token ids with L >= 1"),
    (lambda m: m(_ids(0, 3), _ids(0, 3)), ValueError, r"at least one sequence \(B >= 1\)"),
    (lambda m: m(_ids(2, 3, dtype=torch.float32), _ids(2, 3)), TypeError, "keys must hold integer token ids"),
    (lambda m: m(torch.full((2, 3), 999), _ids(2, 3)), ValueError, r"keys holds ids \[999\] outside .*0..127"),
    (lambda m: m(_ids(2, 3), torch.full((2, 3), 65)), ValueError, r"values holds ids \[65\] outside .*0..64"),
    (lambda m: m(_ids(2, 3), _ids(2, 4)), ValueError, r"one shape \(B, L\), got \(2, 3\) and \(2, 4\)"),
    (lambda m: make_recall_batch(2, 3, generator=5), TypeError, "generator must be a torch.Generator"),
    (lambda m: train_recall("softmax", steps=1, lr=0.0), ValueError, "lr must be a number > 0"),  # trained nothing
    (lambda m: train_recall("softmax", steps=1, seed="x"), TypeError, "seed must be an int"),  # was int('x')
    (lambda m: train_recall("softmax", steps=1, progress="x"), TypeError, "progress must be a bool"),
])
def test_recall_refuses_bad_input_by_name(small, call, error, match):
    with pytest.raises(error, match=match):
        call(small)


def test_recall_accuracy_uses_the_models_own_vocabularies():
    """Before issue 38 a model with num_keys=8, num_values=4 got batches of the default 128 keys and 64 values
    (nn.Embedding's IndexError). Now its own: keys < 8, values < 4; a chance-level model recalls about 1/4."""
    torch.manual_seed(0)
    m = RecallModel("softmax", d_model=16, num_heads=2, num_layers=1, num_keys=8, num_values=4)
    acc = recall_accuracy(m, 4, num_examples=2000)
    assert 0.15 < acc < 0.35  # untrained: chance is 1/4 (binomial sd ~0.01 at n = 2000)
    with pytest.raises(ValueError, match="num_pairs must be <= num_keys=8"):
        recall_accuracy(m, 9)


def test_kda_recall_mixer_is_deltanets_with_a_decay_per_channel():
    """With the same decay in every key channel, the "kda" mixer is the "deltanet" one; with different ones it is not."""
    import torch

    from attn_lib.course.recall import _Mixer

    torch.manual_seed(0)
    kda, gdn = _Mixer("kda", 16, 2), _Mixer("deltanet", 16, 2)
    with torch.no_grad():
        kda.qkv.load_state_dict(gdn.qkv.state_dict())
        kda.out.load_state_dict(gdn.out.state_dict())
        b, c = torch.tensor([0.3, -0.2]), torch.tensor([-1.0, 0.5])
        for lin in (kda.beta, kda.gate[0], kda.gate[1], gdn.beta_gate):
            lin.weight.zero_()
        kda.beta.bias.copy_(b)
        kda.gate[1].bias.copy_(c.repeat_interleave(8))  # head h's 8 channels share its decay
        gdn.beta_gate.bias.copy_(torch.cat([b, c]))
        x = torch.randn(2, 7, 16)
        torch.testing.assert_close(kda(x), gdn(x), rtol=1e-5, atol=1e-6)
        kda.gate[1].bias.copy_(torch.linspace(-2, 2, 16))  # a decay per channel: another layer
        assert (kda(x) - gdn(x)).abs().max() > 1e-4


def test_notebook_13s_sparse_mixers_read_what_they_say():
    """"moba" is attn_lib's MoBA (blocks of 4, top-2) and "window" the last 8 keys: each layer's output at the
    query position depends on exactly the keys those rules allow (checked by perturbing one token at a time)."""
    import torch.nn.functional as F

    from attn_lib.block_sparse import moba_attention
    from attn_lib.course.recall import MOBA_BLOCK, MOBA_TOPK, SPARSE_KINDS, _Mixer

    assert SPARSE_KINDS == ("moba", "window") and MOBA_BLOCK * MOBA_TOPK == 8
    torch.manual_seed(0)
    x = torch.randn(2, 13, 16)
    window = _Mixer("window", 16, 2)
    q, k, v = (t.view(2, 13, 2, 8).transpose(1, 2) for t in window.qkv(x).chunk(3, dim=-1))
    with torch.no_grad():
        out = window(x)
        for s in range(13):  # the last query sees positions 5..12 only
            y = x.clone()
            y[:, s] += 1.0
            moved = (window(y)[:, -1] - out[:, -1]).abs().max() > 1e-6
            assert bool(moved) == (s >= 5), s
        moba = _Mixer("moba", 16, 2)
        moba.load_state_dict(window.state_dict())
        want = moba.out(moba_attention(q, k, v, block_size=4, topk=2).transpose(1, 2).reshape(2, 13, 16))
        torch.testing.assert_close(moba(x), want)
        dense = moba.out(F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(2, 13, 16))
        assert (moba(x) - dense).abs().max() > 1e-4  # routing drops keys: another result than dense attention
    m, losses = train_recall("moba", steps=2, batch_size=4, pair_counts=(6,), num_layers=1, d_model=16)
    assert m.layer_kinds == ["moba"] and len(losses) == 2
    with pytest.raises(ValueError, match="kind must be one of"):
        RecallModel("sparse")
