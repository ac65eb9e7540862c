"""Exercise checks for notebook 05 (multi-head attention).

- :func:`check_head_contributions` (05): what each head adds to the output, ``heads_h @ W_O``'s block of rows h;
  the contributions sum to the concatenation times W_O.
- :func:`check_multi_head_attention` (05): a whole multi-head self-attention forward from given weights.
- :func:`check_head_importance` (06): a head's gradient importance |∂L/∂ξ_h| for a gate ξ_h on its output
  (Michel et al. 2019, §4.1), computed by the chain rule, checked against autograd.

Each check compares with attn_lib's own functions (:func:`attn_lib.mha.merge_heads`,
:class:`attn_lib.mha.MultiHeadAttention`, which tests/test_mha.py proves equal to
``torch.nn.MultiheadAttention``) or with torch's autograd on fresh random inputs and names the typical mistakes.
"""

from __future__ import annotations

import math

import torch

from attn_lib.course.exercises._core import as_tensor as _as_tensor
from attn_lib.course.exercises._core import CheckResult, Mismatch, call, expect_close, fresh_generator, run_check
from attn_lib.mha import MultiHeadAttention, merge_heads

__all__ = ["check_head_contributions", "check_multi_head_attention", "check_head_importance"]

HINT_SPLIT_NO_TRANSPOSE = (
    "the features are cut into heads in the wrong places: you reshaped straight to (B, num_heads, T, head_dim). "
    "First view as (B, T, num_heads, head_dim) -- head j is features j*head_dim .. (j+1)*head_dim-1 of each token -- "
    "then swap the T and num_heads axes with .transpose(1, 2)."
)
HINT_SCALE_D_MODEL = (
    "you scaled the scores by 1/sqrt(d_model); each head's queries and keys have head_dim = d_model / num_heads "
    "features, so divide by sqrt(head_dim)."
)
HINT_NO_SCALE = "missing 1/sqrt(head_dim) scale: divide each head's scores Q·Kᵀ by sqrt(head_dim) before the softmax."
HINT_NO_W_O = "the output projection is missing: multiply the concatenated heads by w_o at the end."
HINT_ONE_HEAD = (
    "you computed ONE attention over all d_model features (a single head). Split Q, K and V into num_heads heads "
    "of head_dim features, attend in each head separately, then concatenate."
)
HINT_MERGE_NO_TRANSPOSE = (
    "the heads are concatenated in the wrong layout: transpose (B, num_heads, T, head_dim) to "
    "(B, T, num_heads, head_dim) before reshaping to (B, T, d_model)."
)
HINT_WRONG_AXIS = (
    "softmax over the wrong axis: each query's weights must sum to 1 over the KEYS (dim=-1 of the (B, H, T, T) scores)."
)


# ------------------------------------------------------------------------------------------
HINT_CONTRIB_COLUMNS = (
    "you took head h's block from the COLUMNS of w_o (or from w_o.T). In concat @ w_o, the features "
    "h*head_dim .. (h+1)*head_dim-1 of the concatenation -- head h's -- meet the ROWS h*head_dim .. (h+1)*head_dim-1 "
    "of w_o: head h's contribution is heads[:, h] @ w_o[h*head_dim:(h+1)*head_dim]."
)
HINT_CONTRIB_INTERLEAVED = (
    "you gave head h every num_heads-th row of w_o (w_o[h::num_heads]). The merge puts head h's features in one "
    "contiguous block, h*head_dim .. (h+1)*head_dim-1, so head h meets that block of rows."
)
HINT_CONTRIB_MEAN = (
    "your contributions are num_heads times too small: the output is the plain SUM of the heads' contributions "
    "(concat @ w_o splits into one product per block of rows), not their mean."
)
HINT_CONTRIB_WHOLE = (
    "every head got the whole output merge_heads(heads) @ w_o. Head h's share uses only its own features and its "
    "own block of rows of w_o; the shares then add up to the whole output."
)


def _contributions(heads: torch.Tensor, w_o: torch.Tensor) -> torch.Tensor:
    """(B, H, T, E), (H·E, d_model) -> (B, H, T, d_model): head h times its block of rows of w_o, one at a time."""
    H, E = heads.shape[1], heads.shape[3]
    return torch.stack([heads[:, h] @ w_o[h * E:(h + 1) * E] for h in range(H)], dim=1)


def check_head_contributions(head_contributions) -> CheckResult:
    """Check ``head_contributions(heads, w_o)``: (B, H, T, E), (H·E, d_model) -> (B, H, T, d_model).

    Head h's contribution is ``heads[:, h] @ w_o[h*E:(h+1)*E]``; summed over the heads it is
    ``merge_heads(heads) @ w_o``, the output of multi-head attention before the output bias (the check
    confirms that sum against :func:`attn_lib.mha.merge_heads` on every trial). Tried on 3 fresh float64
    inputs, two with a square w_o (d_model = H·E, where the typical wrong blocks have the right shape) and one
    with d_model != H·E.

    Raises:
        Nothing: a wrong answer is reported in the returned :class:`CheckResult`.

    Source: Vaswani et al. (2017), §3.2.2 (Concat(head_1, ..., head_h) W^O), written per head as in Elhage et
    al. (2021), "A Mathematical Framework for Transformer Circuits" (heads add into the residual stream).
    """
    dims = [(2, 4, 5, 3, 12), (1, 3, 4, 2, 6), (2, 2, 3, 4, 5)]  # (B, H, T, E, d_model)

    def trials():
        for trial, (B, H, T, E, D) in enumerate(dims):
            g = fresh_generator("check_head_contributions", trial)
            heads = torch.randn(B, H, T, E, generator=g, dtype=torch.float64)
            w_o = torch.randn(H * E, D, generator=g, dtype=torch.float64) / math.sqrt(H * E)
            want = _contributions(heads, w_o)
            if not torch.allclose(want.sum(1), merge_heads(heads) @ w_o, atol=1e-12):  # the sum is the output
                raise AssertionError("check_head_contributions: the reference does not add up to concat @ w_o")
            got = _as_tensor(call(head_contributions, {"heads": heads, "w_o": w_o}), "head_contributions")
            whole = (merge_heads(heads) @ w_o)[:, None].expand(B, H, T, D)
            wrong = [(want / H, HINT_CONTRIB_MEAN), (whole, HINT_CONTRIB_WHOLE)]
            if H * E == D:  # the column block (and w_o.T's row block) has the right shape only for a square w_o
                wrong.append((torch.stack([heads[:, h] @ w_o[:, h * E:(h + 1) * E].T for h in range(H)], 1),
                              HINT_CONTRIB_COLUMNS))
            wrong.append((torch.stack([heads[:, h] @ w_o[h::H] for h in range(H)], 1), HINT_CONTRIB_INTERLEAVED))
            expect_close(got, want, what=f"the contributions for heads {(B, H, T, E)} and w_o {(H * E, D)}",
                         wrong_answers=wrong, dtype=heads.dtype, atol=1e-10)
        return len(dims)

    return run_check("check_head_contributions", trials,
                     shape_mistakes="w_o has H·E rows: w_o.view(H, E, d_model)[h] is head h's block, and "
                                    "heads @ w_o.view(H, E, d_model) broadcasts over the batch to (B, H, T, d_model).")

# ------------------------------------------------------------------------------------------
def _reference_mha(x, wq, wk, wv, wo, H):
    """attn_lib's MultiHeadAttention with these weights (nn.Linear stores W transposed: y = x @ W.T)."""
    D = x.shape[-1]
    m = MultiHeadAttention(D, H, bias=False).to(x.dtype)
    with torch.no_grad():
        for lin, w in ((m.q_proj, wq), (m.k_proj, wk), (m.v_proj, wv), (m.out_proj, wo)):
            lin.weight.copy_(w.T)
        return m(x)[0]


def _mha_variants(x, wq, wk, wv, wo, H):
    """Typical wrong answers, each computed from scratch."""
    B, T, D = x.shape
    hd = D // H
    q, k, v = x @ wq, x @ wk, x @ wv

    def attend(qh, kh, vh, scale, dim=-1):
        return torch.softmax(qh @ kh.transpose(-2, -1) * scale, dim=dim) @ vh

    def split(t):
        return t.view(B, T, H, hd).transpose(1, 2)

    def merge(t):
        return t.transpose(1, 2).reshape(B, T, D)

    s = 1 / math.sqrt(hd)
    return [
        (merge(attend(split(q), split(k), split(v), 1 / math.sqrt(D))) @ wo, HINT_SCALE_D_MODEL),
        (merge(attend(split(q), split(k), split(v), 1.0)) @ wo, HINT_NO_SCALE),
        (merge(attend(split(q), split(k), split(v), s)), HINT_NO_W_O),
        (attend(q, k, v, 1 / math.sqrt(D)) @ wo, HINT_ONE_HEAD),
        (attend(q, k, v, s) @ wo, HINT_ONE_HEAD),
        (attend(split(q), split(k), split(v), s).reshape(B, T, D) @ wo, HINT_MERGE_NO_TRANSPOSE),
        (merge(attend(q.reshape(B, H, T, hd), k.reshape(B, H, T, hd), v.reshape(B, H, T, hd), s)) @ wo,
         HINT_SPLIT_NO_TRANSPOSE),
        (merge(attend(split(q), split(k), split(v), s, dim=-2)) @ wo, HINT_WRONG_AXIS),
    ]


def check_multi_head_attention(multi_head_attention) -> CheckResult:
    """Check ``multi_head_attention(x, w_q, w_k, w_v, w_o, num_heads)`` -> (B, T, d_model).

    Self-attention with ``num_heads`` heads and no biases: Q = x @ w_q, K = x @ w_k, V = x @ w_v
    (each (B, T, d_model)), split into heads of head_dim = d_model / num_heads, softmax(Q Kᵀ /
    sqrt(head_dim)) V per head, concatenate, multiply by w_o. All w_* are (d_model, d_model).
    Compared with attn_lib's MultiHeadAttention on 3 fresh inputs.
    """
    dims = [(2, 5, 16, 4), (1, 6, 12, 3), (2, 4, 32, 8)]  # (B, T, d_model, num_heads)

    def trials():
        for trial, (B, T, D, H) in enumerate(dims):
            g = fresh_generator("check_multi_head_attention", trial)
            x = torch.randn(B, T, D, generator=g)
            # scaled so that the scores are large enough for the scale to matter, not so large that softmax is one-hot
            wq, wk, wv, wo = (torch.randn(D, D, generator=g) * (2 / math.sqrt(D)) for _ in range(4))
            want = _reference_mha(x, wq, wk, wv, wo, H)
            got = _as_tensor(
                call(multi_head_attention, {"x": x, "w_q": wq, "w_k": wk, "w_v": wv, "w_o": wo, "num_heads": H}),
                "multi_head_attention",
            )
            expect_close(got, want, what=f"the output for d_model={D}, num_heads={H}",
                         wrong_answers=_mha_variants(x, wq, wk, wv, wo, H), atol=1e-4, dtype=x.dtype)
        return len(dims)

    return run_check("check_multi_head_attention", trials,
                     shape_mistakes="Per head the scores are (B, num_heads, T, T): use k.transpose(-2, -1), not k.T "
                                    "(which reverses all 4 dims); merge the heads back with .transpose(1, 2).reshape(B, "
                                    "T, d_model) -- .view fails after a transpose (use .reshape or .contiguous()).")


# ------------------------------------------------------------------------------------------
HINT_IMP_SIGNED = (
    "some of your importances are negative, or too small: take the absolute value of each sequence's derivative "
    "|dL_b/dxi_h| before averaging. A head that raises the loss on one sentence and lowers it on another matters "
    "for both; the signs must not cancel."
)
HINT_IMP_ABS_PER_TOKEN = (
    "you took the absolute value token by token. The gate xi_h multiplies the head on every token at once, so "
    "dL_b/dxi_h is the SUM over the sequence's tokens of <contribution, grad_output>; take |.| of that sum, "
    "once per sequence."
)
HINT_IMP_ABS_OF_MEAN = (
    "you averaged the derivatives over the batch and then took |.|: signs of different sequences cancel. Take "
    "|dL_b/dxi_h| for each sequence b first, then the mean over the batch."
)
HINT_IMP_SUM_BATCH = (
    "your importances are B times too large: average |dL_b/dxi_h| over the B sequences, do not sum them."
)
HINT_IMP_WHOLE = (
    "every head got the same number: you used the whole output merge_heads(heads) @ w_o. The gate xi_h scales only "
    "head h's share, heads[:, h] @ w_o[h*E:(h+1)*E], so only that share enters dL/dxi_h."
)
HINT_IMP_NO_W_O = (
    "the derivative must go through w_o: the loss sees the layer's output, where head h enters as "
    "heads[:, h] @ w_o[h*E:(h+1)*E]; <heads[:, h], grad_output> skips that product."
)


def _gate_jacobian(heads: torch.Tensor, w_o: torch.Tensor, grad_output: torch.Tensor) -> torch.Tensor:
    """(B, H): dL_b/dxi_h by autograd, for the output merge_heads(xi_h · heads_h) @ w_o and L_b = <out_b, g_b>."""
    B, H = heads.shape[:2]
    gates = torch.ones(H, dtype=heads.dtype, requires_grad=True)
    with torch.enable_grad():
        out = merge_heads(heads * gates[None, :, None, None]) @ w_o  # (B, T, d_model)
        per_sequence = (out * grad_output).sum(dim=(1, 2))  # (B,): L_b, linear in the output near this point
        rows = [torch.autograd.grad(per_sequence[b], gates, retain_graph=True)[0] for b in range(B)]
    return torch.stack(rows).detach()


def check_head_importance(head_importance) -> CheckResult:
    """Check ``head_importance(heads, w_o, grad_output)``: (B, H, T, E), (H·E, d_model), (B, T, d_model) -> (H,).

    A gate xi_h multiplies head h's output (before W_O); the importance of head h is the mean over the batch of
    |dL_b/dxi_h| at xi = 1, where grad_output is dL/d(output) of the layer and L = sum_b L_b. The reference is
    torch's autograd through the gated merge (:func:`attn_lib.mha.merge_heads` then ``@ w_o``); the learner is
    expected to use the chain rule, dL_b/dxi_h = sum_t <heads[b, h, t] @ W_O^h, grad_output[b, t]>. Tried on 3
    fresh float64 inputs of 4 to 5 sequences, so that signs differ between sequences.

    Raises:
        Nothing: a wrong answer is reported in the returned :class:`CheckResult`.

    Source: Michel, Levy & Neubig (2019), "Are Sixteen Heads Really Better than One?", §4.1 (the importance score
    I_h = E_x |dL(x)/dxi_h|, after Molchanov et al. 2017).
    """
    dims = [(4, 4, 5, 3, 12), (5, 3, 4, 2, 6), (4, 2, 3, 4, 5)]  # (B, H, T, E, d_model)

    def trials():
        for trial, (B, H, T, E, D) in enumerate(dims):
            g = fresh_generator("check_head_importance", trial)
            heads = torch.randn(B, H, T, E, generator=g, dtype=torch.float64)
            w_o = torch.randn(H * E, D, generator=g, dtype=torch.float64) / math.sqrt(H * E)
            grad_output = torch.randn(B, T, D, generator=g, dtype=torch.float64)
            jac = _gate_jacobian(heads, w_o, grad_output)  # (B, H)
            want = jac.abs().mean(0)
            got = _as_tensor(call(head_importance, {"heads": heads, "w_o": w_o, "grad_output": grad_output}),
                             "head_importance")
            per_token = torch.einsum("bhtd,btd->bht", _contributions(heads, w_o), grad_output)  # (B, H, T)
            whole = (merge_heads(heads) @ w_o * grad_output).sum(dim=(1, 2)).abs().mean().expand(H)
            wrong = [
                (jac.mean(0), HINT_IMP_SIGNED),
                (per_token.abs().sum(-1).mean(0), HINT_IMP_ABS_PER_TOKEN),
                (jac.mean(0).abs(), HINT_IMP_ABS_OF_MEAN),
                (jac.abs().sum(0), HINT_IMP_SUM_BATCH),
                (whole, HINT_IMP_WHOLE),
            ]
            if E == D:  # heads · grad_output without w_o has a shape only when head_dim = d_model
                wrong.append((torch.einsum("bhte,bte->bh", heads, grad_output).abs().mean(0), HINT_IMP_NO_W_O))
            if H * E == D:
                cols = torch.stack([heads[:, h] @ w_o[:, h * E:(h + 1) * E].T for h in range(H)], 1)
                wrong.append((torch.einsum("bhtd,btd->bh", cols, grad_output).abs().mean(0), HINT_CONTRIB_COLUMNS))
            expect_close(got, want, what=f"the importances for heads {(B, H, T, E)} and w_o {(H * E, D)}",
                         wrong_answers=wrong, dtype=heads.dtype, atol=1e-10)
        return len(dims)

    return run_check("check_head_importance", trials,
                     shape_mistakes="return one number per head, shape (H,): sum <contribution, grad_output> over "
                                    "the tokens and d_model (one derivative per sequence and head, (B, H)), then "
                                    "|.| and the mean over the batch.")

