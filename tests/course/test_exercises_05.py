"""The exercise checks of notebook 05 accept correct answers and name typical wrong ones."""

import math

import torch

from attn_lib.course.exercises import check_head_contributions, check_multi_head_attention


from exercise_asserts import fails_with as _fails_with, not_written as _not_written


# ------------------------------------------------------------------ split_heads (used by _mha below)
def _split(x, H):
    B, T, D = x.shape
    return x.view(B, T, H, D // H).transpose(1, 2)


# ------------------------------------------------------------------ what each head adds (exercise 1)
def _contributions(heads, w_o):  # the solutions notebook's way: one broadcast product with w_o's row blocks
    B, H, T, E = heads.shape
    return heads @ w_o.view(H, E, -1)


def _contributions_einsum(heads, w_o):  # written another way: einsum over an explicit (H, E, d_model) view
    H, E = heads.shape[1], heads.shape[-1]
    return torch.einsum("bhte,hed->bhtd", heads, w_o.reshape(H, E, w_o.shape[-1]))


def _contributions_by_masking(heads, w_o):  # and a third: zero every other head, then the usual merge and w_o
    B, H, T, E = heads.shape
    out = []
    for h in range(H):
        only_h = torch.zeros_like(heads)
        only_h[:, h] = heads[:, h]
        out.append(only_h.transpose(1, 2).reshape(B, T, H * E) @ w_o)
    return torch.stack(out, dim=1)


def test_check_head_contributions_accepts_three_right_answers():
    result = check_head_contributions(_contributions)
    assert result and "✅" in repr(result) and "3 fresh inputs" in repr(result)
    assert check_head_contributions(_contributions_einsum)
    assert check_head_contributions(_contributions_by_masking)


def test_head_contributions_add_up_to_the_multi_head_output():
    """The identity the exercise rests on, against torch.nn.MultiheadAttention itself (biases included): the heads
    come from torch's own projection weights and SDPA, and their contributions plus the bias give torch's output."""
    torch.manual_seed(0)
    mha = torch.nn.MultiheadAttention(12, 3, batch_first=True, dtype=torch.float64).eval()
    x = torch.randn(2, 5, 12, dtype=torch.float64)
    with torch.no_grad():
        out, _ = mha(x, x, x, need_weights=False)
        q, k, v = torch.nn.functional.linear(x, mha.in_proj_weight, mha.in_proj_bias).chunk(3, dim=-1)
        heads = torch.nn.functional.scaled_dot_product_attention(_split(q, 3), _split(k, 3), _split(v, 3))
    total = _contributions(heads, mha.out_proj.weight.T).sum(1) + mha.out_proj.bias
    torch.testing.assert_close(total, out)


def test_check_head_contributions_names_the_typical_mistakes():
    def per_head(block):
        return lambda heads, w_o: torch.stack([heads[:, h] @ block(w_o, h, heads.shape[1], heads.shape[-1])
                                               for h in range(heads.shape[1])], 1)

    columns = per_head(lambda w, h, H, E: w[:, h * E:(h + 1) * E].T)
    transposed = per_head(lambda w, h, H, E: w.T[h * E:(h + 1) * E])
    interleaved = per_head(lambda w, h, H, E: w[h::H])
    _fails_with(check_head_contributions(columns), "COLUMNS of w_o")
    _fails_with(check_head_contributions(transposed), "COLUMNS of w_o")
    _fails_with(check_head_contributions(interleaved), "every num_heads-th row")
    _fails_with(check_head_contributions(lambda hd, w: _contributions(hd, w) / hd.shape[1]), "plain SUM")
    _fails_with(check_head_contributions(
        lambda hd, w: (hd.transpose(1, 2).flatten(2) @ w)[:, None].expand(-1, hd.shape[1], -1, -1)), "whole output")
    _fails_with(check_head_contributions(lambda hd, w: _contributions(hd, w) + 1e-3), "differs from the reference")
    _fails_with(check_head_contributions(lambda hd, w: _contributions(hd, w).sum(1)), "has shape")
    _fails_with(check_head_contributions(lambda hd, w: _contributions(hd, w).float()), "dtype torch.float32")
    _fails_with(check_head_contributions(_not_written), "not written yet")


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
