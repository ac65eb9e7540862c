"""The learner's pieces of notebooks 08 and 09 (#34): each check rejects the typical wrong answers with its hint,
refuses the library's own implementation, accepts a differently written right answer; the switch replaces
repeat_kv, KVCache, grouped_query_attention and online_softmax_update, and leaves merge_states and tiled_attention's
(replaces=False) alone."""

from __future__ import annotations

import math

import pytest
import torch

import attn_lib
from attn_lib.course import mine
from attn_lib.course.exercises import pieces_fast as P

from exercise_asserts import SOLVED, restore_attn_lib  # noqa: F401 - an autouse fixture
from exercise_asserts import fails_with as _fails_with, solved as _solved

F = torch.nn.functional


# ----------------------------------------------------------------------------------------------------- repeat_kv
def test_repeat_kv_check():
    _fails_with(P.check_piece_repeat_kv(lambda x, n: x.repeat(*([1] * (x.dim() - 3)), n, 1, 1)), "copies cycle")
    _fails_with(P.check_piece_repeat_kv(lambda x, n: x.repeat_interleave(n, dim=-2)), "sequence axis")
    from attn_lib.gqa import repeat_kv as library

    _fails_with(P.check_piece_repeat_kv(lambda x, n: library(x, n)), "called attn_lib.gqa.repeat_kv")
    assert P.check_piece_repeat_kv(lambda x, n: x.repeat_interleave(n, dim=-3)).passed  # another right answer
    assert P.check_piece_repeat_kv(_solved("gqa").repeat_kv).passed


# ----------------------------------------------------------------------------------------------------- GQA
def _gqa(group_of, *, scale_it=True, causal="top_left", nan_rows=False):
    """A from-scratch GQA whose mistakes the arguments choose; group_of(h, Hq, Hkv) is query head h's kv head."""
    def fn(query, key, value, attn_mask=None, *, is_causal=False, scale=None):
        Hq, Hkv, L, S = query.shape[-3], key.shape[-3], query.shape[-2], key.shape[-2]
        idx = torch.tensor([group_of(h, Hq, Hkv) for h in range(Hq)])
        k, v = key.index_select(-3, idx), value.index_select(-3, idx)  # index_select: not a watched repeat
        s = query @ k.transpose(-2, -1)
        if scale_it:
            s = s * (1 / math.sqrt(query.shape[-1]) if scale is None else scale)
        if is_causal:
            attn_mask = torch.ones(L, S, dtype=torch.bool).tril(0 if causal == "top_left" else S - L)
        if attn_mask is not None:
            s = s.masked_fill(~attn_mask, -math.inf) if attn_mask.dtype == torch.bool else s + attn_mask
        w = torch.exp(s - s.amax(-1, keepdim=True))
        w = w / w.sum(-1, keepdim=True)
        if not nan_rows:
            w = w.nan_to_num(0.0)
        return w @ v, w
    return fn


def test_grouped_query_attention_check():
    right = _gqa(lambda h, Hq, Hkv: h // (Hq // Hkv))
    assert P.check_piece_grouped_query_attention(right).passed  # gathers the heads: differently written, accepted
    _fails_with(P.check_piece_grouped_query_attention(_gqa(lambda h, Hq, Hkv: h % Hkv)), "j // G")
    _fails_with(P.check_piece_grouped_query_attention(_gqa(lambda h, Hq, Hkv: h // (Hq // Hkv), scale_it=False)),
                "not scaled")
    _fails_with(P.check_piece_grouped_query_attention(_gqa(lambda h, Hq, Hkv: h // (Hq // Hkv),
                                                           causal="bottom_right")), "top-left")
    _fails_with(P.check_piece_grouped_query_attention(_gqa(lambda h, Hq, Hkv: h // (Hq // Hkv), nan_rows=True)),
                "NaN")

    def torchs(query, key, value, attn_mask=None, *, is_causal=False, scale=None):
        out = F.scaled_dot_product_attention(query, key, value, attn_mask, is_causal=is_causal, scale=scale,
                                             enable_gqa=True)
        return out, torch.zeros(1)

    _fails_with(P.check_piece_grouped_query_attention(torchs), "called torch.nn.functional.scaled_dot_product")

    def repeated(query, key, value, attn_mask=None, *, is_causal=False, scale=None):
        G = query.shape[-3] // key.shape[-3]
        return _solved("attention").scaled_dot_product_attention(
            query, key.repeat_interleave(G, -3), value.repeat_interleave(G, -3), attn_mask, is_causal=is_causal,
            scale=scale)

    _fails_with(P.check_piece_grouped_query_attention(repeated), "repeat_interleave")
    from attn_lib.gqa import grouped_query_attention as library

    _fails_with(P.check_piece_grouped_query_attention(library), "called attn_lib.gqa.grouped_query_attention")
    assert P.check_piece_grouped_query_attention(_solved("gqa").grouped_query_attention).passed


# ----------------------------------------------------------------------------------------------------- KVCache
class ListCache:
    """A differently written right answer: the chunks in a list, concatenated when asked."""

    def __init__(self):
        self._k, self._v = [], []

    keys = property(lambda self: torch.cat(self._k, 2) if self._k else None)
    values = property(lambda self: torch.cat(self._v, 2) if self._v else None)
    seq_len = property(lambda self: sum(k.shape[2] for k in self._k))

    def __len__(self):
        return self.seq_len

    def nbytes(self):
        return sum(t.numel() * t.element_size() for t in self._k + self._v)

    def reset(self):
        self._k, self._v = [], []

    def check(self, key, value):
        if not (key.is_floating_point() and value.is_floating_point()) or key.dtype != value.dtype or (
                self._k and key.dtype != self._k[0].dtype):
            raise TypeError("dtype")
        if key.dim() != 4 or value.dim() != 4 or key.shape[:3] != value.shape[:3]:
            raise ValueError("shape")
        if self._k and (key.shape[:2] != self._k[0].shape[:2] or key.shape[3] != self._k[0].shape[3]
                        or value.shape[3] != self._v[0].shape[3]):
            raise ValueError("shape")

    def update(self, key, value):
        self.check(key, value)
        self._k.append(key)
        self._v.append(value)
        return self.keys, self.values


def _variant(**methods):
    return type("Wrong", (ListCache,), methods)


def test_kv_cache_check():
    assert P.check_piece_kv_cache(ListCache).passed
    assert P.check_piece_kv_cache(_solved("kv_cache").KVCache).passed

    def only_new(self, key, value):
        ListCache.update(self, key, value)
        return key, value

    _fails_with(P.check_piece_kv_cache(_variant(update=only_new)), "only the new keys")
    wrong_axis = _variant(keys=property(lambda self: torch.cat(self._k, 3) if self._k else None))
    _fails_with(P.check_piece_kv_cache(wrong_axis), "dim 2 of (B, Hkv, S, E)")
    _fails_with(P.check_piece_kv_cache(_variant(seq_len=property(lambda self: len(self._k)))), "update calls")
    _fails_with(P.check_piece_kv_cache(_variant(nbytes=lambda self: sum(k.numel() * 8 for k in self._k))),
                "both of them")
    _fails_with(P.check_piece_kv_cache(_variant(check=lambda self, k, v: None)), "no silent promotion")

    def loose(self, key, value):
        if key.dtype != value.dtype or (self._k and key.dtype != self._k[0].dtype):
            raise TypeError("dtype")

    _fails_with(P.check_piece_kv_cache(_variant(check=loose)), "2 key/value heads after 3")
    _fails_with(P.check_piece_kv_cache(_variant(reset=lambda self: None)), "reset() empties")
    _fails_with(P.check_piece_kv_cache(_variant(nbytes=None)), "KVCacheProtocol")


# ----------------------------------------------------------------------------------------------------- 09
def test_online_softmax_update_check():
    tiled = _solved("tiled")
    assert P.check_piece_online_softmax_update(tiled.online_softmax_update).passed

    def via_logsumexp(m_old, l_old, acc_old, scores, values):  # differently written: the state as log-sums
        m_new = torch.maximum(m_old, scores.amax(-1))
        ref = torch.where(m_new == -math.inf, 0.0, m_new)
        l_new = torch.logaddexp(torch.log(l_old) + m_old, scores.logsumexp(-1)).sub(ref).exp()
        acc_new = torch.exp(m_old - ref)[:, None] * acc_old + torch.exp(scores - ref[:, None]) @ values
        return m_new, l_new, acc_new

    assert P.check_piece_online_softmax_update(via_logsumexp).passed

    def no_rescale(m_old, l_old, acc_old, scores, values):
        m_new = torch.maximum(m_old, scores.amax(-1))
        p = torch.exp(scores - m_new[:, None])
        return m_new, l_old + p.sum(-1), acc_old + p @ values

    _fails_with(P.check_piece_online_softmax_update(no_rescale), "not rescaled")
    from attn_lib.tiled import online_softmax_update as library

    _fails_with(P.check_piece_online_softmax_update(lambda *a: library(*a)),
                "called attn_lib.tiled.online_softmax_update")


def test_merge_states_check():
    assert P.check_piece_merge_states(_solved("tiled").merge_states).passed

    def via_logaddexp(m_a, l_a, acc_a, m_b, l_b, acc_b):  # differently written
        m = torch.maximum(m_a, m_b)
        ref = torch.where(m == -math.inf, 0.0, m)
        a, b = torch.exp(m_a - ref), torch.exp(m_b - ref)
        return m, torch.logaddexp(torch.log(l_a) + m_a, torch.log(l_b) + m_b).sub(ref).exp(), \
            a[:, None] * acc_a + b[:, None] * acc_b

    assert P.check_piece_merge_states(via_logaddexp).passed

    def unsafe(m_a, l_a, acc_a, m_b, l_b, acc_b):
        m = torch.maximum(m_a, m_b)
        a, b = torch.exp(m_a - m), torch.exp(m_b - m)
        return m, a * l_a + b * l_b, a[:, None] * acc_a + b[:, None] * acc_b

    _fails_with(P.check_piece_merge_states(unsafe), "merged into NaN")
    _fails_with(P.check_piece_merge_states(lambda m_a, l_a, acc_a, m_b, l_b, acc_b: (
        torch.maximum(m_a, m_b), l_a + l_b, acc_a + acc_b)),
                "rescale")
    from attn_lib.course.exercises.tiled import merge_states_reference

    _fails_with(P.check_piece_merge_states(lambda *a: merge_states_reference(*a)), "merge_states_reference")


def _key_tiles(query, key, value, *, attn_mask=None, is_causal=False, causal_align="top_left", scale=None,
               enable_gqa=False, return_lse=False, block_k=512, **_unused):
    """A differently written tiled forward: all queries at once, one loop over key tiles, merged as log-sums."""
    H, L, E = query.shape[-3:]
    Hkv, S = key.shape[-3], key.shape[-2]
    G = H // Hkv if enable_gqa else 1
    scale = 1 / math.sqrt(E) if scale is None else scale
    lse = torch.full((*query.shape[:-1], 1), -math.inf, dtype=query.dtype)
    out = torch.zeros(*query.shape[:-1], value.shape[-1], dtype=query.dtype)
    shift = S - L if causal_align == "bottom_right" else 0
    for j0 in range(0, S, block_k):
        j1 = min(j0 + block_k, S)
        k, v = key[..., j0:j1, :].repeat_interleave(G, -3), value[..., j0:j1, :].repeat_interleave(G, -3)
        s = torch.einsum("...le,...se->...ls", query, k) * scale
        if is_causal:
            s = s.masked_fill(torch.arange(j0, j1)[None, :] > torch.arange(L)[:, None] + shift, -math.inf)
        if attn_mask is not None:
            s = s.masked_fill(~attn_mask[..., j0:j1], -math.inf)
        tile_lse = s.logsumexp(-1, keepdim=True)
        new_lse = torch.logaddexp(lse, tile_lse)
        safe = torch.where(new_lse == -math.inf, 0.0, new_lse)
        out = torch.exp(lse - safe) * out + torch.exp(s - safe) @ v
        lse = new_lse
    return (out, lse[..., 0]) if return_lse else out


def _naive(query, key, value, *, is_causal=False, causal_align="top_left", scale=None, return_lse=False, **kw):
    S, L = key.shape[-2], query.shape[-2]
    G = query.shape[-3] // key.shape[-3] if kw.get("enable_gqa") else 1
    k, v = key.repeat_interleave(G, -3), value.repeat_interleave(G, -3)
    s = query @ k.transpose(-2, -1) * (1 / math.sqrt(query.shape[-1]) if scale is None else scale)
    if is_causal:
        s = s.masked_fill(~torch.ones(L, S, dtype=torch.bool).tril(S - L if causal_align == "bottom_right" else 0),
                          -math.inf)
    if kw.get("attn_mask") is not None:
        s = s.masked_fill(~kw["attn_mask"], -math.inf)
    lse = s.logsumexp(-1)
    out = torch.exp(s - lse[..., None]).nan_to_num(0.0) @ v
    return (out, lse) if return_lse else out


def test_tiled_attention_check():
    assert P.check_piece_tiled_attention(_solved("tiled").tiled_attention).passed
    assert P.check_piece_tiled_attention(_key_tiles).passed
    _fails_with(P.check_piece_tiled_attention(_naive), "scores against all S")

    def top_left_only(query, key, value, **kw):
        return _key_tiles(query, key, value, **{**kw, "causal_align": "top_left"})

    _fails_with(P.check_piece_tiled_attention(top_left_only), "causal_align='bottom_right'")

    def torchs(query, key, value, *, return_lse=False, is_causal=False, scale=None, **kw):
        out = F.scaled_dot_product_attention(query, key, value, is_causal=is_causal, scale=scale)
        return (out, out[..., 0]) if return_lse else out

    _fails_with(P.check_piece_tiled_attention(torchs), "called torch.nn.functional.scaled_dot_product_attention")
    from attn_lib.tiled import tiled_attention as library

    _fails_with(P.check_piece_tiled_attention(lambda q, k, v, **kw: library(q, k, v, **kw)),
                "called attn_lib.tiled.tiled_attention")

    def log2_lse(query, key, value, **kw):
        out = _key_tiles(query, key, value, **kw)
        return (out[0], out[1] / math.log(2)) if kw.get("return_lse") else out

    _fails_with(P.check_piece_tiled_attention(log2_lse), "natural log")


# ----------------------------------------------------------------------------------------------------- the switch
def test_the_switch_replaces_08s_pieces_and_keeps_09s_subset_out(capsys):
    import attn_lib.gqa as gqa
    import attn_lib.kv_cache as kv
    import attn_lib.mla as mla
    import attn_lib.tiled as tiled
    from attn_lib.mha import MultiHeadAttention

    original_tiled = tiled.tiled_attention
    statuses = mine.use_mine(SOLVED, quiet=True)
    assert all(s.status == "passes" for s in statuses)
    import my_attn.gqa
    import my_attn.kv_cache
    import my_attn.tiled

    assert kv.KVCache is my_attn.kv_cache.KVCache and mla.KVCache is my_attn.kv_cache.KVCache
    assert gqa.repeat_kv is my_attn.gqa.repeat_kv and tiled.online_softmax_update is my_attn.tiled.online_softmax_update
    assert tiled.tiled_attention is original_tiled  # replaces=False: a subset of attn_lib's options

    def no_rescale(m_old, l_old, acc_old, scores, values):
        m_new = torch.maximum(m_old, scores.amax(-1))
        p = torch.exp(scores - m_new[:, None])
        return m_new, l_old + p.sum(-1), acc_old + p @ values

    # after the switch the checks still compare with attn_lib's own pieces, not with the learner's
    _fails_with(P.check_piece_online_softmax_update(no_rescale), "not rescaled")
    _fails_with(P.check_piece_repeat_kv(lambda x, n: x.repeat(*([1] * (x.dim() - 3)), n, 1, 1)), "copies cycle")
    assert not P.check_piece_kv_cache(_variant(seq_len=property(lambda self: len(self._k)))).passed
    # attn_lib's layer decodes with the learner's cache exactly as its full forward
    torch.manual_seed(0)
    layer = MultiHeadAttention(16, 4, num_kv_heads=2, rope_base=10000.0).double().eval()
    x = torch.randn(1, 5, 16, dtype=torch.float64)
    cache = kv.KVCache()
    with torch.no_grad():
        steps = torch.cat([layer(x[:, t:t + 1], is_causal=True, kv_cache=cache)[0] for t in range(5)], dim=1)
        assert torch.allclose(steps, layer(x, is_causal=True)[0], atol=1e-10)
    mine.use_attn_lib()
    assert kv.KVCache is not my_attn.kv_cache.KVCache


# ----------------------------------------------------------------------------------------------------- Triton
triton = pytest.importorskip("triton")
tl = pytest.importorskip("triton.language")


@triton.jit
def _exp2_kernel(Q, K, V, O, LSE, L, S, scale_log2, H: tl.constexpr, D: tl.constexpr, BLOCK_M: tl.constexpr,
                 BLOCK_N: tl.constexpr, IS_CAUSAL: tl.constexpr):
    """A differently written right answer: base-2 exponentials (FlashAttention-2's), contiguous (B, H, ·, D) only."""
    pid_m, bh = tl.program_id(0), tl.program_id(1)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    d = tl.arange(0, D)
    q = tl.load(Q + bh * L * D + rows[:, None] * D + d[None, :], mask=rows[:, None] < L, other=0.0)
    m = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, D], dtype=tl.float32)
    for j in range(0, S, BLOCK_N):
        cols = j + tl.arange(0, BLOCK_N)
        k = tl.load(K + bh * S * D + cols[:, None] * D + d[None, :], mask=cols[:, None] < S, other=0.0)
        v = tl.load(V + bh * S * D + cols[:, None] * D + d[None, :], mask=cols[:, None] < S, other=0.0)
        s = tl.dot(q, tl.trans(k), input_precision="ieee") * scale_log2  # in log2 units
        ok = cols[None, :] < S
        if IS_CAUSAL:
            ok = ok & (cols[None, :] <= rows[:, None])
        s = tl.where(ok, s, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, 1))
        p = tl.exp2(s - m_new[:, None])
        alpha = tl.exp2(m - m_new)
        l = l * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.dot(p, v, input_precision="ieee")
        m = m_new
    tl.store(O + bh * L * D + rows[:, None] * D + d[None, :], acc / l[:, None], mask=rows[:, None] < L)
    tl.store(LSE + bh * L + rows, (m + tl.log2(l)) * 0.6931471805599453, mask=rows < L)


def _exp2_forward(query, key, value, *, is_causal=False, scale=None, block_m=16, block_n=16):
    from my_attn._triton import launch

    B, H, L, D = query.shape
    scale = 1 / math.sqrt(D) if scale is None else scale
    out, lse = torch.empty_like(query), torch.empty(B, H, L)
    launch(_exp2_kernel, (triton.cdiv(L, block_m), B * H), query.contiguous(), key.contiguous(), value.contiguous(),
           out, lse, L, key.shape[2], scale / math.log(2), H=H, D=D, BLOCK_M=block_m, BLOCK_N=block_n,
           IS_CAUSAL=is_causal)
    return out, lse


def test_flash_forward_check():
    solved = _solved("flash").flash_forward
    assert P.check_piece_flash_forward(solved).passed
    assert P.check_piece_flash_forward(_exp2_forward).passed

    def unscaled(q, k, v, *, is_causal=False, scale=None, block_m=16, block_n=16):
        return solved(q, k, v, is_causal=is_causal, scale=1.0, block_m=block_m, block_n=block_n)

    _fails_with(P.check_piece_flash_forward(unscaled), "not scaled")

    def log2_lse(q, k, v, **kw):
        out, lse = solved(q, k, v, **kw)
        return out, lse / math.log(2)

    _fails_with(P.check_piece_flash_forward(log2_lse), "natural log")

    def in_torch(q, k, v, *, is_causal=False, scale=None, block_m=16, block_n=16):
        out = F.scaled_dot_product_attention(q, k, v, is_causal=is_causal, scale=scale)
        return out, torch.zeros(out.shape[:-1])

    _fails_with(P.check_piece_flash_forward(in_torch), "called torch.nn.functional.scaled_dot_product_attention")

    def no_kernel(q, k, v, *, is_causal=False, scale=None, block_m=16, block_n=16):
        return torch.zeros_like(q), torch.zeros(q.shape[:-1])

    _fails_with(P.check_piece_flash_forward(no_kernel), "no Triton kernel ran")
    from attn_lib.flash import flash_attention

    def library(q, k, v, *, is_causal=False, scale=None, block_m=16, block_n=16):
        return flash_attention(q, k, v, is_causal=is_causal, scale=scale, return_lse=True)

    _fails_with(P.check_piece_flash_forward(library), "called attn_lib.flash.flash_attention")


def test_flash_forward_check_under_triton_interpret(tmp_path):
    """TRITON_INTERPRET=1 before triton's import (Triton's own way): the kernel is interpreted as it is decorated."""
    import os
    import subprocess
    import sys

    code = ("from attn_lib.course import mine; from attn_lib.course.exercises import pieces_fast as P\n"
            f"mine.check_mine({str(SOLVED)!r}); import my_attn.flash as f\n"
            "assert type(f._flash_fwd_kernel).__name__ == 'InterpretedFunction'\n"
            "r = P.check_piece_flash_forward(f.flash_forward); print(r.message); assert r.passed\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600,
                         env={**os.environ, "TRITON_INTERPRET": "1"})
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
