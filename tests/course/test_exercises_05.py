"""The exercise checks of notebook 05 accept correct answers and name typical wrong ones."""

import math

import torch

from attn_lib.course.exercises import check_head_entropy, check_multi_head_attention, check_split_heads


from exercise_asserts import fails_with as _fails_with, not_written as _not_written


# ------------------------------------------------------------------ split_heads
def _split(x, H):
    B, T, D = x.shape
    return x.view(B, T, H, D // H).transpose(1, 2)


def test_check_split_heads():
    result = check_split_heads(_split)
    assert result and "✅" in repr(result) and "4 fresh inputs" in repr(result)
    _fails_with(check_split_heads(lambda x, H: x.reshape(x.shape[0], H, x.shape[1], -1)), "wrong places")
    _fails_with(check_split_heads(lambda x, H: x.reshape(x.shape[0], x.shape[1], H, -1)), "Swap the T and num_heads")
    _fails_with(check_split_heads(lambda x, H: x.reshape(*x.shape[:2], -1, H).permute(0, 3, 1, 2)),
                "every num_heads-th feature")
    _fails_with(check_split_heads(_not_written), "not written yet")
    _fails_with(check_split_heads(lambda x, H: x), "has shape")


# ------------------------------------------------------------------ multi-head attention
def _mha(x, wq, wk, wv, wo, H, *, scale_dim=None, use_wo=True, merge_transpose=True, dim=-1):
    B, T, D = x.shape
    hd = D // H
    q, k, v = (_split(x @ w, H) for w in (wq, wk, wv))
    scale = 1 / math.sqrt(hd if scale_dim is None else scale_dim(D, hd))
    heads = torch.softmax(q @ k.transpose(-2, -1) * scale, dim=dim) @ v
    concat = heads.transpose(1, 2).reshape(B, T, D) if merge_transpose else heads.reshape(B, T, D)
    return concat @ wo if use_wo else concat


def test_check_multi_head_attention():
    assert check_multi_head_attention(_mha)
    _fails_with(check_multi_head_attention(lambda *a: _mha(*a, scale_dim=lambda D, hd: D)), "sqrt(d_model)")
    _fails_with(check_multi_head_attention(lambda *a: _mha(*a, scale_dim=lambda D, hd: 1)), "missing 1/sqrt(head_dim)")
    _fails_with(check_multi_head_attention(lambda *a: _mha(*a, use_wo=False)), "output projection is missing")
    _fails_with(check_multi_head_attention(lambda x, *w: _mha(x, *w[:4], 1)), "ONE attention")
    _fails_with(check_multi_head_attention(lambda *a: _mha(*a, merge_transpose=False)), "concatenated in the wrong layout")
    _fails_with(check_multi_head_attention(lambda *a: _mha(*a, dim=-2)), "wrong axis")
    _fails_with(check_multi_head_attention(lambda *a: _mha(*a) + 0.01), "differs from the reference")
    _fails_with(check_multi_head_attention(_not_written), "not written yet")


def test_check_multi_head_attention_matches_torch_layout():
    """A solution written with torch.nn.MultiheadAttention (weights transposed into it) also passes."""
    def with_torch(x, wq, wk, wv, wo, H):
        D = x.shape[-1]
        m = torch.nn.MultiheadAttention(D, H, bias=False, batch_first=True)
        with torch.no_grad():
            m.in_proj_weight.copy_(torch.cat([wq.T, wk.T, wv.T]))
            m.out_proj.weight.copy_(wo.T)
            return m(x, x, x, need_weights=False)[0]

    assert check_multi_head_attention(with_torch)


# ------------------------------------------------------------------ head entropy
def _entropy(w):
    return -torch.special.xlogy(w, w).sum(-1).mean(-1)


def test_check_head_entropy():
    assert check_head_entropy(_entropy)
    # an independent formula: entropy = -Σ p log p with p log p := 0 where p == 0
    assert check_head_entropy(lambda w: -(torch.where(w > 0, w * w.log(), torch.zeros_like(w))).sum(-1).mean(-1))
    _fails_with(check_head_entropy(lambda w: -(w * w.log()).sum(-1).mean(-1)), "NaN", "0·log 0")
    _fails_with(check_head_entropy(lambda w: _entropy(w) / math.log(2)), "bits")
    _fails_with(check_head_entropy(lambda w: -torch.special.xlogy(w, w).sum(-1).sum(-1)), "mean")
    _fails_with(check_head_entropy(lambda w: -torch.special.xlogy(w, w).sum(-2).mean(-1)), "over the keys")
    _fails_with(check_head_entropy(lambda w: -_entropy(w)), "sign")
    _fails_with(check_head_entropy(_not_written), "not written yet")


def test_entropy_reference_extremes():
    from attn_lib.course.exercises.multihead import reference_head_entropy

    one_hot = torch.eye(5)[None]  # every query looks at one key: entropy 0
    uniform = torch.full((1, 5, 5), 0.2)  # uniform over 5 keys: ln 5
    torch.testing.assert_close(reference_head_entropy(one_hot), torch.zeros(1))
    torch.testing.assert_close(reference_head_entropy(uniform), torch.tensor([math.log(5)]))
