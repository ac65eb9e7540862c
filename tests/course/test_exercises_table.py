"""A table of answers for every exercise check (issue #19): two differently written right answers per
check, which must pass, and the wrong answers that used to pass or got a misleading message, each of
which must be rejected with its specific hint."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest
import torch

import attn_lib
import attn_lib.course.exercises as ex
import attn_lib.tiled
from attn_lib.course.exercises import attention as X3
from attn_lib.course.exercises import cross_attention as X7
from attn_lib.course.exercises import gqa as X8
from attn_lib.course.exercises import masking as X4
from attn_lib.course.exercises import positional as X2
from attn_lib.course.exercises import tiled as X9
from attn_lib.course.exercises import tokens as X1
from attn_lib.course.exercises import welcome as X0
from attn_lib.course.exercises._core import HINT_DOT_T


# ------------------------------------------------------------------ right answers, written two ways
def softmax_a(x):
    e = torch.exp(x - x.max(dim=-1, keepdim=True).values)
    return e / e.sum(dim=-1, keepdim=True)


def softmax_b(x):
    return torch.exp(x - torch.logsumexp(x, dim=-1, keepdim=True))


def merges_a(word, merges):
    # written differently from tests/course/test_exercises_01_02.py's merges_right: one pass that glues each symbol
    # onto the one before it, never onto a symbol this pass has just made (so "aaa" gives ["aa", "a"])
    symbols = list(word)
    for a, b in merges:
        out, just_made = [], False
        for s in symbols:
            if out and not just_made and out[-1] == a and s == b:
                out[-1], just_made = a + b, True
            else:
                out.append(s)
                just_made = False
        symbols = out
    return symbols


def merges_b(word, merges):  # recursion on the first pair found, one merge at a time
    symbols = tuple(word)
    for a, b in merges:
        i = 0
        while i < len(symbols) - 1:
            if (symbols[i], symbols[i + 1]) == (a, b):
                symbols = symbols[:i] + (a + b,) + symbols[i + 2:]
            i += 1
    return list(symbols)


def mfp_a(word_counts):
    counts = Counter()
    for w, f in word_counts.items():
        for p in zip(w, w[1:]):
            counts[p] += f
    top = max(counts.values())
    return min(p for p, c in counts.items() if c == top)


def mfp_b(word_counts):
    counts = {}
    for w, f in word_counts.items():
        for i in range(len(w) - 1):
            counts[(w[i], w[i + 1])] = counts.get((w[i], w[i + 1]), 0) + f
    return list(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[0][0])  # a list pair is accepted


def sinusoidal_a(P, D):
    pos = torch.arange(P, dtype=torch.float64)[:, None]
    angle = pos / 10000 ** (torch.arange(0, D, 2, dtype=torch.float64) / D)
    pe = torch.zeros(P, D, dtype=torch.float64)
    pe[:, 0::2], pe[:, 1::2] = angle.sin(), angle.cos()
    return pe


def sinusoidal_b(P, D):  # NumPy, float64
    pos = np.arange(P)[:, None]
    angle = pos / 10000 ** (np.arange(D // 2) * 2 / D)
    return np.stack([np.sin(angle), np.cos(angle)], axis=-1).reshape(P, D)


def rope_a(x, positions):
    half = x.shape[-1] // 2
    theta = 10000.0 ** (-2 * torch.arange(half, dtype=torch.float64) / x.shape[-1])
    angle = positions[:, None].double() * theta
    cos, sin = angle.cos().to(x.dtype), angle.sin().to(x.dtype)
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)


def rope_b(x, positions):  # complex multiplication
    half = x.shape[-1] // 2
    theta = 10000.0 ** (-torch.arange(0, x.shape[-1], 2, dtype=torch.float64) / x.shape[-1])
    z = torch.complex(x[..., :half], x[..., half:]) * torch.polar(torch.ones(1, dtype=torch.float64),
                                                                  positions[:, None] * theta)
    return torch.cat((z.real, z.imag), dim=-1).to(x.dtype)


def slopes_a(n):
    def pow2(k):
        return [2 ** (-8 / k * (i + 1)) for i in range(k)]

    if math.log2(n).is_integer():
        return torch.tensor(pow2(n), dtype=torch.float64)
    p = 2 ** math.floor(math.log2(n))
    return torch.tensor(pow2(p) + pow2(2 * p)[0::2][: n - p], dtype=torch.float64)


def slopes_b(n):  # NumPy
    p = 1 << (n.bit_length() - 1)
    base = 2.0 ** (-8.0 / p * np.arange(1, p + 1))
    extra = 2.0 ** (-4.0 / p * np.arange(1, 2 * (n - p) + 1, 2))
    return np.concatenate([base, extra])


def input_vectors_a(ids, tok, pos):
    return tok[ids] + pos[: ids.shape[1]]


def input_vectors_b(ids, tok, pos):  # NumPy
    return tok.numpy()[ids.numpy()] + pos.numpy()[np.arange(ids.shape[1])][None]


def weights_a(q, k):
    return torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1)


def weights_b(q, k):
    return torch.einsum("...ld,...sd->...ls", q * q.shape[-1] ** -0.5, k).softmax(-1)


def attention_a(q, k, v, scale=None, bias=None):
    if scale is None:
        return weights_a(q, k) @ v if bias is None else torch.softmax(q @ k.mT / math.sqrt(q.shape[-1]) + bias, -1) @ v
    scores = q @ k.transpose(-2, -1) * scale
    return torch.softmax(scores if bias is None else scores + bias, dim=-1) @ v


def attention_b(q, k, v, scale=None, bias=None):  # NumPy, with the row max subtracted
    s = q.numpy() @ np.swapaxes(k.numpy(), -1, -2) * (q.shape[-1] ** -0.5 if scale is None else scale)
    s = s + (0 if bias is None else bias.numpy())
    e = np.exp(s - s.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True) @ v.numpy()


def self_attention_a(x, wq, wk, wv):
    return attention_a(x @ wq, x @ wk, x @ wv)


def self_attention_b(x, wq, wk, wv):
    q, k, v = (torch.matmul(x, w) for w in (wq, wk, wv))
    return torch.softmax(q @ k.mT / math.sqrt(wq.shape[1]), -1) @ v


def masked_a(q, k, v, mask):
    s = (q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])).masked_fill(~mask, float("-inf"))
    return torch.nan_to_num(torch.softmax(s, -1), nan=0.0) @ v


def masked_b(q, k, v, mask):  # a big negative number, and the fully masked rows zeroed
    s = torch.where(mask, q @ k.mT / math.sqrt(q.shape[-1]), torch.finfo(q.dtype).min)
    return torch.where(mask.any(-1, keepdim=True), torch.softmax(s, -1), 0.0) @ v


def decoder_a(lengths, T):
    real = torch.arange(T)[None, :] < torch.tensor(lengths)[:, None]
    return real[:, None, :] & torch.ones(T, T, dtype=torch.bool).tril()


def decoder_b(lengths, T):
    j = torch.arange(T)
    return torch.stack([(j[None, :] <= j[:, None]) & (j[None, :] < n) for n in lengths])


def split_a(x, H):
    B, T, D = x.shape
    return x.view(B, T, H, D // H).transpose(1, 2)


def split_b(x, H):
    return torch.stack(x.chunk(H, dim=-1), dim=1)


def mha_a(x, wq, wk, wv, wo, H):
    B, T, D = x.shape
    q, k, v = (split_a(x @ w, H) for w in (wq, wk, wv))
    return (weights_a(q, k) @ v).transpose(1, 2).reshape(B, T, D) @ wo


def mha_b(x, wq, wk, wv, wo, H):
    heads = [attention_a(q, k, v) for q, k, v in zip(*((x @ w).chunk(H, -1) for w in (wq, wk, wv)))]
    return torch.cat(heads, dim=-1) @ wo


def contributions_a(heads, w_o):
    return heads @ w_o.view(heads.shape[1], heads.shape[-1], -1)


def contributions_b(heads, w_o):
    return torch.stack([h @ w for h, w in zip(heads.unbind(1), w_o.chunk(heads.shape[1], dim=0))], dim=1)


def importance_a(heads, w_o, grad_output):
    return (contributions_a(heads, w_o) * grad_output[:, None]).sum((-2, -1)).abs().mean(0)


def importance_b(heads, w_o, grad_output):
    back = (grad_output @ w_o.T).unflatten(-1, (heads.shape[1], heads.shape[-1]))  # dL/d(concat), per head
    return torch.einsum("bhte,bthe->bh", heads, back).abs().mean(0)


def shift_a(t, bos):
    return torch.cat([torch.full_like(t[:, :1], bos), t[:, :-1]], dim=1)


def shift_b(t, bos):
    out = t.roll(1, dims=1)
    out[:, 0] = bos
    return out


def cross_a(x, mem, wq, wk, wv, pad):
    q, k, v = x @ wq, mem @ wk, mem @ wv
    w = torch.softmax((q @ k.mT / math.sqrt(x.shape[-1])).masked_fill(~pad[:, None, :], -math.inf), -1)
    return w @ v, w


def cross_b(x, mem, wq, wk, wv, pad):  # a list pair
    out, w = cross_a(x, mem, wq, wk, wv, pad)
    return [out, w]


def read_a(w, tokens):
    return [tokens[i] for i in w.argmax(-1).tolist()]


def read_b(w, tokens):
    return tuple(tokens[int(torch.argmax(row))] for row in w)


def kv_a(L, H, d, s, b, e):
    return 2 * L * H * d * s * b * e


def kv_b(L, H, d, s, b, e):
    return torch.tensor(float(L * H * d * s * b * e * 2))


def repeat_a(x, n):
    return x.repeat_interleave(n, dim=1)


def repeat_b(x, n):
    B, H, S, D = x.shape
    return x[:, :, None].expand(B, H, n, S, D).reshape(B, H * n, S, D)


def pool_a(w, H, K):
    rows, d_in = w.shape
    return w.reshape(K, H // K, rows // H, d_in).mean(1).reshape(-1, d_in)


def pool_b(w, H, K):
    D = w.shape[0] // H
    G = H // K
    return torch.cat([sum(w[(g * G + i) * D:(g * G + i + 1) * D] for i in range(G)) / G for g in range(K)])


def fq_a(x, bits):
    qmax = 2 ** (bits - 1) - 1
    amax = x.abs().amax(-1, keepdim=True)
    scale = torch.where(amax > 0, amax / qmax, torch.ones_like(amax))
    return torch.round(x / scale).clamp(-qmax, qmax) * scale


def fq_b(x, bits):
    qmax = 2 ** (bits - 1) - 1
    scale = x.abs().max(dim=-1, keepdim=True).values / qmax
    return torch.nan_to_num(torch.round(x / scale) * scale, nan=0.0)


def update_a(m_old, l_old, acc_old, s, v):
    m_new = torch.maximum(m_old, s.amax(-1))
    m_safe = torch.where(m_new == -math.inf, 0.0, m_new)
    alpha = torch.exp(m_old - m_safe)
    p = torch.exp(s - m_safe[:, None])
    return m_new, alpha * l_old + p.sum(-1), alpha[:, None] * acc_old + p @ v


def update_b(m_old, l_old, acc_old, s, v):  # a list, the fully masked rows handled by nan_to_num
    m_new = torch.max(torch.stack([m_old, s.max(-1).values]), dim=0).values
    alpha = torch.nan_to_num(torch.exp(m_old - m_new), nan=0.0)
    p = torch.nan_to_num(torch.exp(s - m_new.unsqueeze(-1)), nan=0.0)
    return [m_new, l_old * alpha + p.sum(-1), acc_old * alpha.unsqueeze(-1) + p @ v]


def merge_a(m_a, l_a, acc_a, m_b, l_b, acc_b):
    m = torch.maximum(m_a, m_b)
    a, b = torch.exp(m_a - m), torch.exp(m_b - m)
    return m, a * l_a + b * l_b, a[:, None] * acc_a + b[:, None] * acc_b


def merge_b(m_a, l_a, acc_a, m_b, l_b, acc_b):
    m = torch.where(m_a > m_b, m_a, m_b)
    wa, wb = (m_a - m).exp(), (m_b - m).exp()
    return [m, torch.addcmul(wb * l_b, wa, l_a), wa.unsqueeze(1) * acc_a + wb.unsqueeze(1) * acc_b]


def tiles_a(q_len, kv_len, bq, bk):
    return [(i, j) for i in range(math.ceil(q_len / bq)) for j in range(math.ceil(kv_len / bk))
            if j * bk <= min((i + 1) * bq, q_len) - 1]


def tiles_b(q_len, kv_len, bq, bk):  # from the mask itself, as lists
    mask = torch.ones(q_len, kv_len, dtype=torch.bool).tril()
    return [[i, j] for i in range(-(-q_len // bq)) for j in range(-(-kv_len // bk))
            if mask[i * bq:(i + 1) * bq, j * bk:(j + 1) * bk].any()]


def step_a(state, query, key, value, log_decay):
    new = torch.exp(log_decay)[..., None, None] * state + key.unsqueeze(-1) * value.unsqueeze(-2)
    return (new * query.unsqueeze(-1)).sum(-2), new


def step_b(state, query, key, value, log_decay):  # einsum, a list
    new = torch.einsum("...,...ev->...ev", log_decay.exp(), state) + torch.einsum("...e,...v->...ev", key, value)
    return [torch.einsum("...ev,...e->...v", new, query), new]


def fft_conv_a(u, k):  # real FFTs of 2L points, the first L values
    L = u.shape[-1]
    return torch.fft.irfft(torch.fft.rfft(u, n=2 * L) * torch.fft.rfft(k, n=2 * L), n=2 * L)[..., :L]


def fft_conv_b(u, k):  # complex FFTs of exactly L + K - 1 points (the least that does not wrap), the real part
    L, K = u.shape[-1], k.shape[-1]
    n = L + K - 1
    y = torch.fft.ifft(torch.fft.fft(u, n=n) * torch.fft.fft(k, n=n), n=n).real
    return y.narrow(-1, 0, L).to(u.dtype)


def block_a(x, block):  # notebook 10: the pre-norm decoder block
    x = x + block.attn(block.norm1(x), is_causal=True)[0]
    return x + block.ffn(block.norm2(x))


def block_b(x, block):
    h, _ = block.attn(block.norm1(x), is_causal=True, need_weights=True)
    y = x + h
    return y + block.ffn(block.norm2(y))


def train_step_a(model, optimizer, batch):
    from attn_lib.course.capstone import copy_loss

    optimizer.zero_grad()
    loss = copy_loss(model, batch)
    loss.backward()
    optimizer.step()
    return loss.item()


def train_step_b(model, optimizer, batch):
    inputs, targets = batch
    for p in model.parameters():
        p.grad = None
    loss = torch.nn.functional.cross_entropy(model(inputs).reshape(-1, model.vocab_size), targets.reshape(-1),
                                             ignore_index=-100)
    loss.backward()
    optimizer.step()
    return float(loss.detach())


def sample_a(logits, temperature, top_k, generator):
    from attn_lib.models.decoding import sample_next

    return sample_next(logits, temperature=temperature, top_k=top_k, generator=generator)


def sample_b(logits, temperature, top_k, generator):
    if temperature == 0:
        return torch.argmax(logits, dim=1)
    z = logits / temperature
    if top_k:
        top = torch.topk(z, top_k, dim=1)
        z = torch.full_like(z, -math.inf).scatter(1, top.indices, top.values)
    return torch.multinomial(torch.softmax(z, dim=1), 1, generator=generator)[:, 0]


def merge_two_a(out_a, lse_a, out_b, lse_b):
    lse = torch.logaddexp(lse_a, lse_b)
    ref = torch.where(lse == -math.inf, torch.zeros_like(lse), lse)
    return torch.exp(lse_a - ref)[..., None] * out_a + torch.exp(lse_b - ref)[..., None] * out_b, lse


def merge_two_b(out_a, lse_a, out_b, lse_b):
    both = torch.stack([lse_a, lse_b])
    lse = torch.logsumexp(both, 0)
    w = torch.nan_to_num(torch.softmax(both, 0), nan=0.0)  # rows with no key: weights 0, not NaN
    return w[0][..., None] * out_a + w[1][..., None] * out_b, lse


def ring_step_a(query, key, value, out, lse, q_pos, k_pos):
    visible = k_pos[None, :] <= q_pos[:, None]
    if not bool(visible.any()):
        return out, lse
    o, s = attn_lib.tiled.tiled_attention(query, key, value, attn_mask=visible, return_lse=True)
    return merge_two_a(out, lse, o, s)


def ring_step_b(query, key, value, out, lse, q_pos, k_pos):
    logits = (query @ key.transpose(-2, -1) / math.sqrt(query.shape[-1]))
    logits = logits.masked_fill(k_pos[None, :] > q_pos[:, None], -math.inf)
    s = torch.logsumexp(logits, -1)
    o = torch.nan_to_num(torch.softmax(logits, -1), nan=0.0) @ value
    return merge_two_b(out, lse, o, s)
def kda_a(state, query, key, value, log_decay, beta):
    s = torch.exp(log_decay).unsqueeze(-1) * state
    s = s + beta[..., None, None] * torch.einsum("...e,...v->...ev", key, value - torch.einsum("...e,...ev->...v", key, s))
    return torch.einsum("...e,...ev->...v", query, s), s


def kda_b(state, query, key, value, log_decay, beta):
    s = state * log_decay.exp()[..., None]
    err = value - (key[..., None] * s).sum(-2)
    s = s + (beta[..., None] * err)[..., None, :] * key[..., None]
    return (query[..., None] * s).sum(-2), s


def absorbed_a(q_c, q_r, c_kv, k_r, w_uk, w_uv, *, scale):  # W_UK into the query, W_UV after the softmax
    q = torch.cat([torch.einsum("bhld,hdr->bhlr", q_c, w_uk), q_r], -1)
    s = q @ torch.cat([c_kv, k_r], -1).transpose(-1, -2) * scale
    L, S = s.shape[-2:]
    p = torch.softmax(s.masked_fill(~torch.ones(L, S, dtype=torch.bool).tril(S - L), float("-inf")), -1)
    return torch.einsum("bhlr,hvr->bhlv", p @ c_kv, w_uv)


def absorbed_b(q_c, q_r, c_kv, k_r, w_uk, w_uv, *, scale):  # the expanded per-head keys and values: the same
    k = torch.einsum("bxsr,hdr->bhsd", c_kv, w_uk)
    v = torch.einsum("bxsr,hvr->bhsv", c_kv, w_uv)
    s = (q_c @ k.transpose(-1, -2) + q_r @ k_r.transpose(-1, -2)) * scale
    L, S = s.shape[-2:]
    return torch.softmax(s.masked_fill(~torch.ones(L, S, dtype=torch.bool).tril(S - L), float("-inf")), -1) @ v


def moba_a(query, key, block_size, topk):  # padded block sums over the real sizes, +inf / -inf gates, one topk
    S, L = key.shape[-2], query.shape[-2]
    n = -(-S // block_size)
    pad = torch.nn.functional.pad(key, (0, 0, 0, n * block_size - S)).unflatten(-2, (n, block_size))
    sizes = torch.tensor([min(block_size, S - j * block_size) for j in range(n)], dtype=key.dtype)
    gate = query @ (pad.sum(-2) / sizes[:, None]).mT
    own, j = torch.arange(S - L, S) // block_size, torch.arange(n)
    gate = gate.masked_fill(j > own[:, None], -math.inf).masked_fill(j == own[:, None], math.inf)
    top = gate.topk(min(topk, n), dim=-1)
    return torch.zeros_like(gate, dtype=torch.bool).scatter(-1, top.indices, top.values > -math.inf)


def moba_b(query, key, block_size, topk):  # a loop over queries: own block, then the best earlier ones by sort
    B, H, L, _ = query.shape
    S = key.shape[-2]
    n = -(-S // block_size)
    out = torch.zeros(B, H, L, n, dtype=torch.bool)
    means = torch.stack([key[..., j * block_size:(j + 1) * block_size, :].mean(-2) for j in range(n)], -2)
    for i in range(L):
        own = (S - L + i) // block_size
        out[..., i, own] = True
        if own and topk > 1:
            scores = (query[..., i, None, :] * means[..., :own, :]).sum(-1)  # (B, H, own)
            best = scores.argsort(-1, descending=True)[..., : topk - 1]
            out[..., i, :own] = torch.zeros_like(scores, dtype=torch.bool).scatter(-1, best, True)
    return out

RIGHT = {
    "check_softmax": (softmax_a, softmax_b),
    "check_apply_merges": (merges_a, merges_b),
    "check_most_frequent_pair": (mfp_a, mfp_b),
    "check_input_vectors": (input_vectors_a, input_vectors_b),
    "check_sinusoidal": (sinusoidal_a, sinusoidal_b),
    "check_rope": (rope_a, rope_b),
    "check_alibi_slopes": (slopes_a, slopes_b),
    "check_attention_weights": (weights_a, weights_b),
    "check_attention": (attention_a, attention_b),
    "check_self_attention": (self_attention_a, self_attention_b),
    "check_causal_mask": (lambda n: torch.ones(n, n, dtype=torch.bool).tril(),
                          lambda n: np.tril(np.ones((n, n), dtype=bool))),
    "check_window_mask": (lambda lengths, T, w: torch.stack([
                              torch.ones(T, T, dtype=torch.bool).tril().triu(1 - w) & (torch.arange(T) >= T - n)
                              for n in lengths]),
                          lambda lengths, T, w: np.array([[[T - n <= j <= i < j + w for j in range(T)] for i in range(T)]
                                                          for n in lengths])),
    "check_masked_attention": (masked_a, masked_b),
    "check_decoder_mask": (decoder_a, decoder_b),
    "check_head_contributions": (contributions_a, contributions_b),
    "check_multi_head_attention": (mha_a, mha_b),
    "check_head_importance": (importance_a, importance_b),
    "check_shift_right": (shift_a, shift_b),
    "check_cross_attention": (cross_a, cross_b),
    "check_most_read_source": (read_a, read_b),
    "check_kv_cache_bytes": (kv_a, kv_b),
    "check_repeat_kv": (repeat_a, repeat_b),
    "check_mean_pool_kv_heads": (pool_a, pool_b),
    "check_fake_quantize": (fq_a, fq_b),
    "check_online_softmax_update": (update_a, update_b),
    "check_merge_states": (merge_a, merge_b),
    "check_causal_tiles": (tiles_a, tiles_b),
    "check_mla_cache_bytes": (lambda L, H, r, dn, dr, s, e: L * s * (r + dr) * e,
                              lambda L, H, r, dn, dr, s, e: sum(s * e * (r + dr) for _ in range(L))),
    "check_ring_slot_positions": (lambda n, w: [max([p for p in range(n) if p % w == j], default=-1) for j in range(w)],
                                  lambda n, w: [next((p for p in range(n - 1, -1, -1) if p % w == j), -1)
                                                for j in range(w)]),
    "check_recurrent_step": (step_a, step_b),
    "check_decoder_block": (block_a, block_b),
    "check_train_step": (train_step_a, train_step_b),
    "check_sample": (sample_a, sample_b),
    "check_fft_long_conv": (fft_conv_a, fft_conv_b),
    "check_block_lookup": (lambda t, p, b: (t[p // b], p % b), lambda t, p, b: (t[divmod(p, b)[0]], divmod(p, b)[1])),
    "check_merge_two": (merge_two_a, merge_two_b),
    "check_verify_mask": (lambda c, k: torch.ones(k, c + k, dtype=torch.bool).tril(diagonal=c),
                          lambda c, k: torch.arange(c + k)[None, :] <= torch.arange(k)[:, None] + c),
    "check_ring_step": (ring_step_a, ring_step_b),
    "check_gated_output": (lambda heads, x, w_gate: heads * torch.sigmoid(x @ w_gate.T),
                           lambda heads, x, w_gate: heads * 0.5 * (1 + torch.tanh(0.5 * (x @ w_gate.mT)))),
    "check_kda_step": (kda_a, kda_b),
    "check_absorbed_attention": (absorbed_a, absorbed_b),
    "check_moba_block_choice": (moba_a, moba_b),
    "check_nsa_combine": (lambda a, b, c, g: (g.sigmoid()[..., :1] * a + g.sigmoid()[..., 1:2] * b
                                              + g.sigmoid()[..., 2:] * c),
                          lambda a, b, c, g: torch.einsum("...ec,...c->...e", torch.stack([a, b, c], -1),
                                                          1 / (1 + torch.exp(-g)))),
    "check_nsa_keys_read": (lambda S, l, d, ls, n, w: max(0, (S - l) // d + 1) + min(S, n * ls) + min(S, w),
                            lambda S, l, d, ls, n, w: len(range(l - 1, S, d)) + min(S, n * ls) + min(S, w)),
}
ALL_CHECKS = sorted(RIGHT)


def test_the_table_covers_every_check():
    names = sorted(n for n in dir(ex) if n.startswith("check_") and n != "check_prediction")
    assert names == ALL_CHECKS


@pytest.mark.parametrize("name", ALL_CHECKS)
@pytest.mark.parametrize("which", [0, 1])
def test_right_answers_pass(name, which):
    result = getattr(ex, name)(RIGHT[name][which])
    assert result and repr(result).startswith(f"✅ {name}: passed"), result


# ------------------------------------------------------------------ wrong answers and their hints
def _naive_update(m_old, l_old, acc_old, s, v):  # the old notebook solution: NaN for a fully masked row
    m_new = torch.maximum(m_old, s.amax(-1))
    alpha = torch.exp(m_old - m_new)
    p = torch.exp(s - m_new[:, None])
    return m_new, alpha * l_old + p.sum(-1), alpha[:, None] * acc_old + p @ v


def _update_no_column(m_old, l_old, acc_old, s, v):  # alpha * acc_old without [:, None]
    m_new = torch.maximum(m_old, s.amax(-1))
    m_safe = torch.where(m_new == -math.inf, 0.0, m_new)
    alpha = torch.exp(m_old - m_safe)
    p = torch.exp(s - m_safe[:, None])
    return m_new, alpha * l_old + p.sum(-1), alpha * acc_old + p @ v


def _bool_index_masked(q, k, v, mask):
    s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    s[~mask] = -math.inf
    return torch.nan_to_num(torch.softmax(s, -1), nan=0.0) @ v


def _big_negative(value):
    def fn(q, k, v, mask):
        s = (q @ k.mT / math.sqrt(q.shape[-1])).masked_fill(~mask, value)
        return torch.softmax(s, -1) @ v

    return fn


def _joined_chars(word_counts):
    return mfp_a({tuple("".join(w)): f for w, f in word_counts.items()})


def _right_to_left(word, merges):
    return X1._apply_right_to_left(list(word), merges)


def _softmax_in_place(x):
    x -= x.max(dim=-1, keepdim=True).values
    return x.exp_() / x.sum(-1, keepdim=True)


def _masked_in_place(q, k, v, mask):
    mask.logical_not_()  # "invert once, use masked_fill" -- but it changes the caller's mask
    s = (q @ k.mT / math.sqrt(q.shape[-1])).masked_fill(mask, -math.inf)
    return torch.nan_to_num(torch.softmax(s, -1), nan=0.0) @ v


def _merges_in_place(word, merges):
    out = merges_a(word, merges)
    merges.clear()
    return out


def _no_return(x):
    softmax_a(x)


def _slopes_next_pow2(n):
    return ex.positional.alibi_slopes(1 << (n - 1).bit_length(), dtype=torch.float64)[:n]


WRONG = [
    # (check, label, function, words the message must contain)
    ("check_softmax", "dim=1", lambda x: torch.softmax(x, dim=1), ["LAST dimension", "dim 1"]),
    ("check_softmax", "float64 out", lambda x: softmax_a(x.double()), ["dtype torch.float64", "expected torch.float32"]),
    ("check_softmax", "float32 out", lambda x: softmax_a(x.float()), ["dtype torch.float32", "expected torch.float64"]),
    ("check_softmax", "in place", _softmax_in_place, ["changed its input x in place"]),
    ("check_softmax", "no return", _no_return, ["returned None", "return"]),
    ("check_softmax", "keepdim missing", lambda x: torch.exp(x) / torch.exp(x).sum(-1), ["Your function got x", "keepdim"]),
    ("check_apply_merges", "right to left", _right_to_left, [X1.HINT_RIGHT_TO_LEFT]),
    ("check_apply_merges", "joined str", lambda w, m: "".join(merges_a(w, m)), ["list of str tokens, got str"]),
    ("check_apply_merges", "mutates merges", _merges_in_place, ["changed its input merges in place"]),
    ("check_most_frequent_pair", "joined characters", _joined_chars, [X1.HINT_JOINED_CHARS]),
    ("check_input_vectors", "float64 out", lambda i, t, p: input_vectors_a(i, t, p).double(), ["dtype torch.float64"]),
    ("check_input_vectors", "whole position table", lambda i, t, p: t[i] + p, ["Your function got token_ids"]),
    ("check_rope", "contiguous positions", lambda x, p: rope_a(x, p[0] + torch.arange(x.shape[-2])),
     [X2.HINT_CONSECUTIVE]),
    ("check_rope", "float32 out", lambda x, p: rope_a(x, p).float(), ["dtype torch.float32", "expected torch.float64"]),
    ("check_alibi_slopes", "next power of two, truncated", _slopes_next_pow2, [X2.HINT_NEXT_POW2]),
    ("check_attention_weights", "key.T on a batched key",
     lambda q, k: torch.softmax(q @ k.T / math.sqrt(q.shape[-1]), -1), [HINT_DOT_T, "Your function got query"]),
    ("check_attention", "float32 out", lambda q, k, v, scale=None, bias=None: attention_a(q, k, v, scale, bias).float(),
     ["dtype torch.float32", "expected torch.float64"]),
    ("check_attention", "bias before the scaling",
     lambda q, k, v, scale=None, bias=None: attention_a(q, k, v, scale) if bias is None else
     torch.softmax((q @ k.mT + bias) * (q.shape[-1] ** -0.5 if scale is None else scale), -1) @ v,
     [X3.HINT_BIAS_BEFORE_SCALE]),
    ("check_causal_mask", "tril(1)", lambda n: torch.ones(n, n, dtype=torch.bool).tril(1),
     ["off by one", "query row 0, key column 1", "expected False, got True"]),
    ("check_causal_mask", "a few wrong cells", lambda n: torch.ones(n, n, dtype=torch.bool).tril() & ~torch.eye(n, dtype=torch.bool).roll(1, 0),
     ["cells are wrong; the first is", "query row"]),
    ("check_masked_attention", "scores[~mask] = -inf", _bool_index_masked,
     ["IndexError", "mask (5, 5) bool", "masked_fill"]),
    ("check_masked_attention", "-1e9", _big_negative(-1e9), [X4.HINT_BIG_NEGATIVE]),
    ("check_masked_attention", "finfo.min", _big_negative(torch.finfo(torch.float32).min), [X4.HINT_BIG_NEGATIVE]),
    ("check_masked_attention", "mask inverted in place", _masked_in_place, ["changed its input mask in place"]),
    ("check_decoder_mask", "<= for <",
     lambda lengths, T: (torch.arange(T)[None, :] <= torch.tensor(lengths)[:, None])[:, None, :]
     & torch.ones(T, T, dtype=torch.bool).tril(), ["off by one", "key column", "expected False, got True"]),
    ("check_head_importance", "float32 out", lambda *a: importance_a(*a).float(), ["dtype torch.float32"]),
    ("check_shift_right", "float ids", lambda t, bos: shift_a(t.float(), bos), ["must be long"]),
    ("check_cross_attention", "one tensor", lambda *a: cross_a(*a)[0], ["return a pair (output, weights)"]),
    ("check_most_read_source", "a str", lambda w, t: "".join(read_a(w, t)), ["not one str"]),
    ("check_most_read_source", "positions", lambda w, t: w.argmax(-1).tolist(), ["those are positions"]),
    ("check_fake_quantize", "no zero guard", lambda x, b: (lambda q, s: torch.round(x / s).clamp(-q, q) * s)(
        2 ** (b - 1) - 1, x.abs().amax(-1, keepdim=True) / (2 ** (b - 1) - 1)), [X8.HINT_ZERO_TOKEN]),
    ("check_fake_quantize", "float32 out", lambda x, b: fq_a(x, b).float(), ["dtype torch.float32"]),
    ("check_online_softmax_update", "the old notebook solution", _naive_update, [X9.HINT_MASKED_ROW]),
    ("check_online_softmax_update", "missing [:, None]", _update_no_column, ["[:, None]", "Your function got m_old"]),
    ("check_merge_states", "float32 l", lambda *a: (lambda m, l, acc: (m, l.float(), acc))(*merge_a(*a)),
     ["l has dtype torch.float32"]),
    ("check_causal_tiles", "all tiles", lambda q, k, bq, bk: [(i, j) for i in range(-(-q // bq)) for j in range(-(-k // bk))],
     ["all the tiles"]),
    ("check_mla_cache_bytes", "per head", lambda L, H, r, dn, dr, s, e: H * L * s * (r + dr) * e, ["num_heads"]),
    ("check_absorbed_attention", "no causal mask", lambda *a, scale: absorbed_a(*a, scale=scale) if a[0].shape[2] == 1
     else torch.einsum("bhlr,hvr->bhlv", torch.softmax(torch.cat([torch.einsum("bhld,hdr->bhlr", a[0], a[4]), a[1]], -1)
                                                       @ torch.cat([a[2], a[3]], -1).transpose(-1, -2) * scale, -1)
                       @ a[2], a[5]), ["mask the future keys"]),
    ("check_fft_long_conv", "no zero-padding", lambda u, k: torch.fft.irfft(
        torch.fft.rfft(u, n=u.shape[-1]) * torch.fft.rfft(k, n=u.shape[-1]), n=u.shape[-1]), ["wrapped around"]),
    ("check_ring_slot_positions", "in time order", lambda n, w: list(range(max(0, n - w), n)) + [-1] * max(0, w - n),
     ["p % window"]),
]


@pytest.mark.parametrize("name, label, fn, words", WRONG, ids=[f"{w[0]}-{w[1]}" for w in WRONG])
def test_wrong_answers_get_their_hint(name, label, fn, words):
    result = getattr(ex, name)(fn)
    assert not result, (label, result)
    assert repr(result).startswith(f"❌ {name}: "), result
    for w in words:
        assert w in result.message, (label, w, result.message)


def test_fixed_slopes_hint_is_true_for_every_head_count():
    # 2^-1, 2^-2, ... is right for 8 heads; for 4 heads it gets HINT_FIXED, which must not claim
    # that every head count starts at 2^(-8/num_heads) (6 heads starts at 2^(-8/4))
    result = ex.check_alibi_slopes(lambda n: [2.0 ** -(k + 1) for k in range(n)])
    assert not result and X2.HINT_FIXED in result.message
    assert "power of two" in X2.HINT_FIXED
    assert slopes_a(6)[0] == 2 ** (-8 / 4)  # the paper's first slope for 6 heads


def test_masked_attention_tries_a_broadcast_mask():
    # a function that only works for masks of the queries' full shape must fail somewhere
    def full_shape_only(q, k, v, mask):
        assert mask.shape == q.shape[:-1] + (k.shape[-2],), "broadcast mask"
        return masked_a(q, k, v, mask)

    result = ex.check_masked_attention(full_shape_only)
    assert not result and "broadcast mask" in result.message


def test_old_notebook_online_softmax_solution_is_nan_where_the_library_is_zero():
    # the reason for the fully masked row: derive both results on such a row
    from attn_lib.tiled import online_softmax_update

    m = torch.full((1,), -math.inf, dtype=torch.float64)
    args = (m, torch.zeros(1, dtype=torch.float64), torch.zeros(1, 2, dtype=torch.float64),
            torch.full((1, 3), -math.inf, dtype=torch.float64), torch.ones(3, 2, dtype=torch.float64))
    assert torch.isnan(_naive_update(*args)[1]).all()
    lib = online_softmax_update(*args)
    assert lib[1].item() == 0.0 and torch.equal(lib[2], torch.zeros(1, 2, dtype=torch.float64))
    assert torch.equal(update_a(*args)[1], lib[1])
