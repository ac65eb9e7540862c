"""Speculative decoding: a small draft model proposes k tokens, the target checks them all in one forward.

Shape legend: V vocabulary, k drafted tokens, L new tokens of a verify forward, S = cached + L keys, N nodes of
a draft tree.

- **The verify step.** The target runs once on the k drafted tokens after its cache: their queries are the last
  L of S positions, so the mask is causal aligned bottom-right (:func:`verify_mask`). One forward scores every
  drafted token. Several drafts at once form a tree; each node sees the cache, its ancestors and itself
  (:func:`tree_mask`): **tree attention**.
- **The acceptance rule.** Drafted token x (draft probability q(x), target p(x)) is kept with probability
  min(1, p(x) / q(x)); at the first rejection a token is drawn from the residual max(0, p - q), normalised, and
  the rest of the draft is dropped; if all k are kept, one more token comes from the target's next distribution.
  The emitted token is distributed exactly as p (:func:`emitted_distribution` computes it): speculative
  decoding changes the cost, never the samples' distribution.

Source: Leviathan, Kalman, Matias, "Fast Inference from Transformers via Speculative Decoding" (ICML 2023),
section 2.3 and Appendix A.1 (the proof); Chen et al., "Accelerating Large Language Model Decoding with
Speculative Sampling" (2023), Algorithm 2; Miao et al., "SpecInfer" (2024), section 4 (tree attention).
"""

from __future__ import annotations

import torch

from attn_lib._checks import check_int, check_number, check_tensor, shape_of
from attn_lib.masks import causal_mask

__all__ = ["verify_mask", "tree_mask", "emitted_distribution", "speculative_accept", "speculative_generate"]


def verify_mask(cached: int, num_new: int) -> torch.Tensor:
    """(L, S) bool mask of a verify forward: L = num_new new tokens after ``cached`` ones, S = cached + L,
    new token i seeing keys 0..cached + i (causal, bottom-right). True = may attend.

    Raises:
        TypeError: not ints. ValueError: cached < 0 or num_new < 1.

    Source: flash-attn's causal=True for L < S (bottom-right alignment); Leviathan et al. (2023), section 2.3
    (the target scores the k guesses in parallel).
    """
    cached = check_int("cached", cached, minimum=0)
    num_new = check_int("num_new", num_new, minimum=1)
    return causal_mask(num_new, cached + num_new, align="bottom_right")


def tree_mask(parents, cached: int = 0) -> torch.Tensor:
    """(N, cached + N) bool mask of tree attention: node i sees every cached key, its ancestors and itself.

    Args:
        parents: N ints (list, tuple or 1-D int64 tensor); parents[i] is the index of node i's parent, -1 for a
            node that follows the cache directly; every parent comes before its child (parents[i] < i).
        cached: tokens in the cache before the tree (int >= 0).

    Returns:
        (N, cached + N) bool tensor, True = may attend. A chain (parents = [-1, 0, 1, ...]) gives
        :func:`verify_mask`.

    Raises:
        TypeError: parents not a list/tuple/tensor of ints. ValueError: empty, or a parent not in -1..i-1.

    Source: Miao et al., "SpecInfer" (2024), section 4.2 (topology-aware causal mask); Cai et al., "Medusa"
    (2024), section 2.1.2 (tree attention).
    """
    values = parents.tolist() if isinstance(parents, torch.Tensor) else parents
    if not isinstance(values, (list, tuple)):
        raise TypeError(f"parents must be a list, tuple or 1-D tensor of ints, got {type(parents).__name__}")
    if not values:
        raise ValueError("parents is empty: a tree has at least one node")
    cached = check_int("cached", cached, minimum=0)
    N = len(values)
    mask = torch.zeros(N, cached + N, dtype=torch.bool)
    mask[:, :cached] = True
    for i, p in enumerate(values):
        p = check_int(f"parents[{i}]", p, minimum=-1)
        if p >= i:
            raise ValueError(f"parents[{i}] = {p}: a node's parent must come before it (-1..{i - 1})")
        mask[i, cached + i] = True
        if p >= 0:
            mask[i, cached:] |= mask[p, cached:]
    return mask


def _check_probs(name: str, p: torch.Tensor, ndim: int) -> torch.Tensor:
    check_tensor(name, p, floating=True, ndim=ndim)
    if bool((p < 0).any()) or not bool(torch.isfinite(p).all()):
        raise ValueError(f"{name} must hold finite probabilities >= 0")
    if p.numel() and not torch.allclose(p.sum(-1), torch.ones((), dtype=p.dtype), atol=1e-6):
        raise ValueError(f"each row of {name} must sum to 1, got sums {p.sum(-1).tolist()[:4]}")
    return p


def emitted_distribution(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """The distribution of the token the acceptance rule emits at one position, computed exactly.

    P(x) = q(x) min(1, p(x) / q(x)) + (1 - beta) r(x), with beta = sum_x min(p(x), q(x)) the acceptance
    probability and r = max(0, p - q) / sum(max(0, p - q)) the residual. Algebra gives P = p; computed term by
    term it shows it numerically.

    Args:
        p: (V,) the target's probabilities; q: (V,) the draft's; floating (float64 for the proof), rows sum to 1.

    Returns:
        (V,) in p's dtype.

    Raises:
        TypeError: non-floating tensors. ValueError: shapes that differ, negative entries, rows not summing to 1.

    Source: Leviathan et al. (2023), Appendix A.1 (the proof that the samples follow p).
    """
    _check_probs("p", p, 1)
    _check_probs("q", q, 1)
    if p.shape != q.shape:
        raise ValueError(f"p and q must have the same shape (V,), got {shape_of(p)} and {shape_of(q)}")
    accepted = torch.minimum(p, q)  # q(x) min(1, p(x)/q(x))
    beta = accepted.sum()
    residual = (p - q).clamp(min=0)
    if float(residual.sum()) == 0.0:  # p == q: always accepted
        return accepted
    return accepted + (1 - beta) * residual / residual.sum()


def speculative_accept(target_probs: torch.Tensor, draft_probs: torch.Tensor, draft_tokens: torch.Tensor,
                       generator: torch.Generator | None = None) -> tuple[list[int], int]:
    """Apply the acceptance rule to k drafted tokens; return the tokens to emit and how many drafts were kept.

    Args:
        target_probs: (k + 1, V) the target's next-token probabilities at each drafted position and one past
            the last; draft_probs: (k, V) the draft's, from which ``draft_tokens`` were sampled; floating.
        draft_tokens: (k,) int64. generator: the torch.Generator of the uniform draws (None: torch's default).

    Returns:
        ``(tokens, accepted)``: a list of accepted + 1 ints (the kept drafts, then the residual's sample or the
        bonus token) and the number of drafts kept, 0 <= accepted <= k.

    Raises:
        TypeError: non-tensor inputs, draft_tokens not integer. ValueError: shapes that do not fit, rows that
            are not probabilities, a token outside the vocabulary.

    Source: Leviathan et al. (2023), Algorithm 1 (SpeculativeDecodingStep); Chen et al. (2023), Algorithm 2.
    """
    _check_probs("target_probs", target_probs, 2)
    _check_probs("draft_probs", draft_probs, 2)
    check_tensor("draft_tokens", draft_tokens, ndim=1)
    if draft_tokens.is_floating_point():
        raise TypeError(f"draft_tokens must be integer token ids, got dtype {draft_tokens.dtype}")
    k, V = draft_probs.shape
    if target_probs.shape != (k + 1, V) or draft_tokens.shape != (k,):
        raise ValueError(f"for k drafted tokens: target_probs (k + 1, V), draft_probs (k, V), draft_tokens (k,); "
                         f"got {shape_of(target_probs)}, {shape_of(draft_probs)}, {shape_of(draft_tokens)}")
    if k and (int(draft_tokens.min()) < 0 or int(draft_tokens.max()) >= V):
        raise ValueError(f"draft_tokens must be ids in 0..{V - 1}, got {draft_tokens.tolist()}")
    out = []
    for i in range(k):
        x = int(draft_tokens[i])
        p, q = float(target_probs[i, x]), float(draft_probs[i, x])
        u = float(torch.rand((), generator=generator, dtype=torch.float64))
        if q > 0 and u < min(1.0, p / q):
            out.append(x)
            continue
        residual = (target_probs[i] - draft_probs[i]).clamp(min=0)
        if float(residual.sum()) <= 0:  # cannot happen when q(x) > 0 and x was rejected; guard all the same
            residual = target_probs[i]
        out.append(int(torch.multinomial(residual / residual.sum(), 1, generator=generator)))
        return out, i
    out.append(int(torch.multinomial(target_probs[k], 1, generator=generator)))
    return out, k


def _probs(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    logits = logits.double()
    if temperature == 0:
        return torch.nn.functional.one_hot(logits.argmax(-1), logits.shape[-1]).double()
    return torch.softmax(logits / temperature, dim=-1)


@torch.no_grad()
def speculative_generate(target, draft, prompt: torch.Tensor, max_new_tokens: int, *, k: int = 4,
                         temperature: float = 1.0, generator: torch.Generator | None = None) -> tuple[torch.Tensor, dict]:
    """Generate with speculative decoding: the draft proposes k tokens, the target verifies them in one forward.

    Args:
        target, draft: models mapping (1, S) int64 ids to (1, S, V) logits (a :class:`attn_lib.models.lm.DecoderLM`),
            with the same vocabulary.
        prompt: (1, L) int64 ids. max_new_tokens: n >= 1 (int). k: drafted tokens per round (int >= 1).
        temperature: 0 (greedy: one-hot distributions) or > 0 (float). generator: for the draws.

    Returns:
        ``(ids, stats)``: (1, L + n) int64, and a dict of ints: ``target_forwards``, ``draft_forwards``,
        ``drafted`` and ``accepted`` (drafted tokens kept). Without speculation the target would run n times.

    Raises:
        TypeError: prompt not an int64 tensor, non-int sizes. ValueError: prompt not (1, L) with L >= 1,
            max_new_tokens or k < 1, a negative temperature.

    Source: Leviathan et al. (2023), section 3 (the expected number of tokens per target forward); the verify
    forward here recomputes the whole sequence (no cache), which scores the same positions as a cached verify
    with :func:`verify_mask`.
    """
    check_tensor("prompt", prompt, ndim=2)
    if prompt.dtype != torch.int64:
        raise TypeError(f"prompt must be int64 token ids, got dtype {prompt.dtype}")
    if prompt.shape[0] != 1 or prompt.shape[1] < 1:
        raise ValueError(f"prompt must be (1, L) with L >= 1, got {shape_of(prompt)}")
    n = check_int("max_new_tokens", max_new_tokens, minimum=1)
    k = check_int("k", k, minimum=1)
    temperature = check_number("temperature", temperature, minimum=0.0)
    ids = prompt.clone()
    stats = {"target_forwards": 0, "draft_forwards": 0, "drafted": 0, "accepted": 0}
    L0 = prompt.shape[1]
    while ids.shape[1] - L0 < n:
        kk = min(k, n - (ids.shape[1] - L0))
        seq, q_rows = ids, []
        for _ in range(kk):  # the draft proposes kk tokens, one forward each
            q = _probs(draft(seq)[0, -1], temperature)
            stats["draft_forwards"] += 1
            tok = int(torch.multinomial(q, 1, generator=generator))
            q_rows.append(q)
            seq = torch.cat([seq, torch.tensor([[tok]])], dim=1)
        p = _probs(target(seq)[0, -kk - 1:], temperature)  # one verify forward scores all kk + 1 positions
        stats["target_forwards"] += 1
        drafted = seq[0, -kk:]
        tokens, acc = speculative_accept(p, torch.stack(q_rows), drafted, generator)
        stats["drafted"] += kk
        stats["accepted"] += acc
        ids = torch.cat([ids, torch.tensor([tokens])], dim=1)
    return ids[:, :L0 + n], stats
