"""The exercise check of notebook 06 (a head's gradient importance) accepts right answers written three ways and
names the typical wrong ones; the importance it asks for is first-order right about switching a head off."""

import torch

from attn_lib.course.exercises import check_head_importance
from attn_lib.mha import merge_heads

from exercise_asserts import fails_with as _fails_with, not_written as _not_written


def _importance(heads, w_o, grad_output):  # the solutions notebook's chain rule
    B, H, T, E = heads.shape
    contributions = heads @ w_o.view(H, E, -1)  # (B, H, T, d_model)
    per_sequence = (contributions * grad_output[:, None]).sum(dim=(-2, -1))  # (B, H): dL_b / dxi_h
    return per_sequence.abs().mean(0)


def _importance_einsum(heads, w_o, grad_output):  # the chain rule the other way round: grad_output back through w_o
    H, E = heads.shape[1], heads.shape[-1]
    back = (grad_output @ w_o.T).unflatten(-1, (H, E))  # (B, T, H, E): dL/d(concat), cut into heads
    return torch.einsum("bhte,bthe->bh", heads, back).abs().mean(0)


def _importance_autograd(heads, w_o, grad_output):  # a learner who lets autograd do it, one sequence at a time
    H = heads.shape[1]
    rows = []
    for b in range(heads.shape[0]):
        gates = torch.ones(H, dtype=heads.dtype, requires_grad=True)
        out = merge_heads(heads[b:b + 1] * gates[:, None, None]) @ w_o
        (grad,) = torch.autograd.grad((out * grad_output[b:b + 1]).sum(), gates)
        rows.append(grad.abs())
    return torch.stack(rows).mean(0)


def test_check_head_importance_accepts_right_answers_written_three_ways():
    result = check_head_importance(_importance)
    assert result and "✅" in repr(result) and "3 fresh inputs" in repr(result)
    assert check_head_importance(_importance_einsum)
    assert check_head_importance(_importance_autograd)


def _per_token(heads, w_o, grad_output):  # (B, H, T)
    H, E = heads.shape[1], heads.shape[-1]
    return torch.einsum("bhtd,btd->bht", heads @ w_o.view(H, E, -1), grad_output)


def test_check_head_importance_names_the_typical_mistakes():
    _fails_with(check_head_importance(lambda h, w, g: _per_token(h, w, g).sum(-1).mean(0)), "absolute value")
    _fails_with(check_head_importance(lambda h, w, g: _per_token(h, w, g).abs().sum(-1).mean(0)), "token by token")
    _fails_with(check_head_importance(lambda h, w, g: _per_token(h, w, g).sum(-1).mean(0).abs()), "signs of different")
    _fails_with(check_head_importance(lambda h, w, g: _per_token(h, w, g).sum(-1).abs().sum(0)), "B times too large")
    _fails_with(check_head_importance(
        lambda h, w, g: (merge_heads(h) @ w * g).sum((1, 2)).abs().mean().expand(h.shape[1])), "the same number")

    def columns(h, w, g):
        H, E = h.shape[1], h.shape[-1]
        c = torch.stack([h[:, i] @ w[:, i * E:(i + 1) * E].T for i in range(H)], 1)
        return torch.einsum("bhtd,btd->bh", c, g).abs().mean(0)

    _fails_with(check_head_importance(columns), "COLUMNS of w_o")
    _fails_with(check_head_importance(lambda h, w, g: _importance(h, w, g) + 1e-3), "differs from the reference")
    _fails_with(check_head_importance(lambda h, w, g: _per_token(h, w, g).sum(-1).abs()), "has shape")
    _fails_with(check_head_importance(_not_written), "not written yet")


def test_importance_is_the_first_order_change_of_the_loss_when_a_head_is_switched_off():
    """The exercise's promise, on a real layer with a nonlinear loss: gate xi_h from 1 to 1 - eps changes the loss
    by eps * dL/dxi_h (the importance's sign-free size), and the exact switch-off is what HeadGates measures."""
    g = torch.Generator().manual_seed(0)
    B, H, T, E, D = 3, 4, 5, 2, 8
    heads = torch.randn(B, H, T, E, generator=g, dtype=torch.float64)
    w_o = torch.randn(H * E, D, generator=g, dtype=torch.float64) / 3
    target = torch.randn(B, T, D, generator=g, dtype=torch.float64)

    def loss_per_sequence(gates):  # (B,): a squared error after a tanh, nothing linear about it
        out = torch.tanh(merge_heads(heads * gates[None, :, None, None]) @ w_o)
        return ((out - target) ** 2).sum(dim=(1, 2))

    layer_out = (merge_heads(heads) @ w_o).requires_grad_()  # the layer's output, where grad_output is taken
    (grad_out,) = torch.autograd.grad(((torch.tanh(layer_out) - target) ** 2).sum(), layer_out)
    imp = _importance(heads, w_o, grad_out)
    eps = 1e-6
    for h in range(H):
        gates = torch.ones(H, dtype=torch.float64)
        gates[h] -= eps
        change = (loss_per_sequence(gates) - loss_per_sequence(torch.ones(H, dtype=torch.float64))) / eps  # (B,)
        torch.testing.assert_close(change.abs().mean(), imp[h], rtol=1e-4, atol=1e-8)
