"""attn_lib.mha: MultiHeadAttention and KVCache against torch.nn.MultiheadAttention, torch's
scaled_dot_product_attention(enable_gqa=True), HuggingFace's repeat_kv, and every attention layer
of the bundled all-MiniLM-L6-v2."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from attn_lib.kv_cache import KVCache
from attn_lib.mha import MultiHeadAttention, merge_heads, split_heads


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _randn(*shape, seed=0, dtype=torch.float32):
    return torch.randn(*shape, generator=_gen(seed), dtype=dtype)


def _torch_mha(E, H, *, kdim=None, vdim=None, batch_first=True, bias=True, seed=0, dtype=torch.float32):
    torch.manual_seed(seed)
    m = torch.nn.MultiheadAttention(E, H, kdim=kdim, vdim=vdim, batch_first=batch_first, bias=bias)
    with torch.no_grad():  # non-zero biases, so that a bias copied to the wrong place shows
        for p in m.parameters():
            if p.dim() == 1:
                p.uniform_(-0.5, 0.5)
    return m.to(dtype).eval()


def _padding(B, S, seed):
    """(B, S) bool, True = real; every row keeps at least its first key (torch gives NaN for empty rows)."""
    lengths = torch.randint(1, S + 1, (B,), generator=_gen(seed))
    lengths[0] = S
    return torch.arange(S)[None, :] < lengths[:, None]


# ---------------------------------------------------------------------------------------------
# equal to torch.nn.MultiheadAttention
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("batch_first", [True, False])
@pytest.mark.parametrize("kind", ["self", "cross_same_dims", "cross_kdim_vdim"])
@pytest.mark.parametrize("padded", [False, True])
@pytest.mark.parametrize("bias", [True, False])
def test_from_torch_matches_torch(batch_first, kind, padded, bias):
    E, H, B, L, S = 24, 4, 3, 5, 7  # L != S: a swapped batch/sequence axis would not go unnoticed
    kdim, vdim = (10, 6) if kind == "cross_kdim_vdim" else (None, None)
    theirs = _torch_mha(E, H, kdim=kdim, vdim=vdim, batch_first=batch_first, bias=bias)
    ours = MultiHeadAttention.from_torch(theirs)
    assert not ours.training
    q = _randn(B, L, E, seed=1)
    if kind == "self":
        k = v = q
        S = L
    else:
        k = _randn(B, S, kdim or E, seed=2)
        v = _randn(B, S, vdim or E, seed=3)
    pad = _padding(B, S, seed=4) if padded else None

    def tb(x):  # to torch's layout
        return x if batch_first else x.transpose(0, 1)

    with torch.no_grad():
        out_t, w_t = theirs(tb(q), tb(k), tb(v), key_padding_mask=None if pad is None else ~pad,
                            need_weights=True, average_attn_weights=True)
        _, w_t_heads = theirs(tb(q), tb(k), tb(v), key_padding_mask=None if pad is None else ~pad,
                              need_weights=True, average_attn_weights=False)
        if kind == "self":
            out, w = ours(q, padding_mask=pad, need_weights=True)
        else:
            out, w = ours(q, k, v, padding_mask=pad, need_weights=True)
    assert out.shape == (B, L, E) and w.shape == (B, H, L, S)
    torch.testing.assert_close(out, tb(out_t) if batch_first else out_t.transpose(0, 1), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(w.mean(dim=1), w_t, atol=1e-5, rtol=1e-5)  # averaged over heads
    torch.testing.assert_close(w, w_t_heads, atol=1e-5, rtol=1e-5)  # and head by head
    if pad is not None:
        assert (w[~pad[:, None, None, :].expand_as(w)] == 0).all()


@pytest.mark.parametrize("mask_kind", ["bool", "float", "causal"])
def test_attn_mask_matches_torch(mask_kind):
    E, H, B, L = 16, 2, 2, 6
    theirs = _torch_mha(E, H, seed=5)
    ours = MultiHeadAttention.from_torch(theirs)
    x = _randn(B, L, E, seed=6)
    pad = _padding(B, L, seed=7)
    if mask_kind == "bool":
        allowed = torch.rand(L, L, generator=_gen(8)) > 0.4
        allowed |= torch.eye(L, dtype=torch.bool)  # no empty row
        torch_kwargs, our_kwargs = {"attn_mask": ~allowed}, {"attn_mask": allowed}  # torch: True = blocked
    elif mask_kind == "float":
        bias = _randn(L, L, seed=9)
        torch_kwargs, our_kwargs = {"attn_mask": bias}, {"attn_mask": bias}
        # torch wants both masks of one type here: its float padding mask is -inf at padding
        torch_kwargs["key_padding_mask"] = torch.zeros(B, L).masked_fill(~pad, float("-inf"))
    else:
        causal = torch.ones(L, L).triu(1).bool()
        torch_kwargs = {"attn_mask": causal, "is_causal": True}
        our_kwargs = {"is_causal": True}
    with torch.no_grad():
        torch_kwargs.setdefault("key_padding_mask", ~pad)
        out_t, w_t = theirs(x, x, x, need_weights=True, **torch_kwargs)
        out, w = ours(x, padding_mask=pad, need_weights=True, **our_kwargs)
    torch.testing.assert_close(out, out_t, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(w.mean(1), w_t, atol=1e-5, rtol=1e-5)


def test_attn_mask_per_batch_and_head_shapes():
    E, H, B, L, S = 16, 4, 2, 3, 5
    ours = MultiHeadAttention(E, H)
    q, kv = _randn(B, L, E, seed=1), _randn(B, S, E, seed=2)
    per_head = torch.rand(B, H, L, S, generator=_gen(3)) > 0.3
    per_head[..., 0] = True
    with torch.no_grad():
        _, w = ours(q, kv, attn_mask=per_head, need_weights=True)
        _, w3 = ours(q, kv, attn_mask=per_head[:, 0], need_weights=True)  # (B, L, S): same for every head
    assert (w[~per_head] == 0).all() and (w[per_head] > 0).all()
    assert (w3[~per_head[:, :1].expand_as(w3)] == 0).all()


def test_gradients_match_torch():
    E, H, B, L, S = 12, 3, 2, 4, 5
    theirs = _torch_mha(E, H, dtype=torch.float64, seed=11)
    ours = MultiHeadAttention.from_torch(theirs)
    q, kv = _randn(B, L, E, seed=12, dtype=torch.float64), _randn(B, S, E, seed=13, dtype=torch.float64)
    theirs(q.transpose(0, 1) if not theirs.batch_first else q, kv, kv)[0].square().sum().backward()
    ours(q, kv)[0].square().sum().backward()
    g_in = torch.cat([ours.q_proj.weight.grad, ours.k_proj.weight.grad, ours.v_proj.weight.grad])
    torch.testing.assert_close(g_in, theirs.in_proj_weight.grad)
    torch.testing.assert_close(ours.out_proj.weight.grad, theirs.out_proj.weight.grad)


def test_fully_masked_row_is_zero_not_nan():
    ours = MultiHeadAttention(8, 2)
    x = _randn(2, 3, 8, seed=1)
    pad = torch.tensor([[True, True, True], [False, False, False]])
    with torch.no_grad():
        out, w = ours(x, padding_mask=pad, need_weights=True)
    assert torch.isfinite(out).all()
    assert (w[1] == 0).all()
    torch.testing.assert_close(out[1], ours.out_proj.bias.expand(3, 8))  # no head contributes: only W_O's bias


def test_split_and_merge_heads_layout():
    x = torch.arange(2 * 3 * 8.0).reshape(2, 3, 8)
    h = split_heads(x, 4)
    assert h.shape == (2, 4, 3, 2)
    torch.testing.assert_close(h[1, 2, 0], x[1, 0, 4:6])  # head 2 = features 4..5 of each token
    torch.testing.assert_close(merge_heads(h), x)
    with pytest.raises(ValueError, match=r"\(8\).*\(3\)"):
        split_heads(x, 3)


# ---------------------------------------------------------------------------------------------
# equal to the real model (all 6 layers of all-MiniLM-L6-v2, eager attention)
# ---------------------------------------------------------------------------------------------
def test_from_hf_matches_every_layer_of_the_real_model(pretrained):
    tokenizer, model = pretrained
    texts = ["The quick brown fox jumps over the lazy dog.", "the cat sat on the mat."]
    enc = tokenizer(texts, return_tensors="pt", padding=True)
    assert not enc["attention_mask"].all()  # the second sentence is padded: the padding path is exercised
    captured = {}
    hooks = []
    for i, layer in enumerate(model.encoder.layer):
        hooks.append(layer.attention.self.register_forward_hook(
            lambda mod, args, kwargs, out, i=i: captured.__setitem__(
                ("self", i), (args[0] if args else kwargs["hidden_states"], out[0])), with_kwargs=True))
        hooks.append(layer.attention.output.dense.register_forward_hook(
            lambda mod, args, out, i=i: captured.__setitem__(("dense", i), out)))
        hooks.append(layer.attention.register_forward_hook(
            lambda mod, args, out, i=i: captured.__setitem__(("sublayer", i), out[0])))
    try:
        with torch.no_grad():
            outputs = model(**enc, output_attentions=True)
    finally:
        for h in hooks:
            h.remove()
    assert len(outputs.attentions) == 6
    for i, layer in enumerate(model.encoder.layer):
        hidden, hf_context = captured[("self", i)]
        mha = MultiHeadAttention.from_hf(layer.attention.self)
        assert (mha.num_heads, mha.head_dim) == (12, 32)
        full = MultiHeadAttention.from_hf(layer.attention)  # with W_O = attention.output.dense
        with torch.no_grad():
            out, w = mha(hidden, padding_mask=enc["attention_mask"], need_weights=True)
            out_full, _ = full(hidden, padding_mask=enc["attention_mask"])
        torch.testing.assert_close(out, hf_context, atol=1e-5, rtol=1e-5, msg=f"layer {i} context")
        torch.testing.assert_close(w, outputs.attentions[i], atol=1e-5, rtol=1e-5, msg=f"layer {i} weights")
        torch.testing.assert_close(out_full, captured[("dense", i)], atol=1e-5, rtol=1e-5, msg=f"layer {i} W_O")
        # BERT's attention sublayer = LayerNorm(dropout(W_O · heads) + input): reproduce its output too
        with torch.no_grad():
            sub = layer.attention.output.LayerNorm(out_full + hidden)
        torch.testing.assert_close(sub, captured[("sublayer", i)], atol=1e-5, rtol=1e-5, msg=f"layer {i} sublayer")


def test_from_hf_rejects_other_modules():
    with pytest.raises(TypeError, match="HuggingFace attention block: BERT"):
        MultiHeadAttention.from_hf(torch.nn.Linear(4, 4))


# ---------------------------------------------------------------------------------------------
# grouped-query / multi-query attention
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("num_kv_heads", [1, 2, 4, 8])
def test_gqa_matches_torch_sdpa_enable_gqa(num_kv_heads):
    d_model, H, B, L = 64, 8, 2, 7
    mha = MultiHeadAttention(d_model, H, num_kv_heads=num_kv_heads).double().eval()
    hd = d_model // H
    assert mha.k_proj.out_features == num_kv_heads * hd == mha.v_proj.out_features
    x = _randn(B, L, d_model, seed=21, dtype=torch.float64)
    pad = _padding(B, L, seed=22)
    with torch.no_grad():
        out, _ = mha(x, padding_mask=pad, is_causal=True)
        q = mha.q_proj(x).view(B, L, H, hd).transpose(1, 2)
        k = mha.k_proj(x).view(B, L, num_kv_heads, hd).transpose(1, 2)
        v = mha.v_proj(x).view(B, L, num_kv_heads, hd).transpose(1, 2)
        allowed = torch.ones(L, L, dtype=torch.bool).tril() & pad[:, None, None, :]
        ref = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, enable_gqa=True)
        ref = mha.out_proj(ref.transpose(1, 2).reshape(B, L, d_model))
    torch.testing.assert_close(out, ref)


def test_gqa_follows_hf_repeat_kv():
    """Query head j uses key/value head j // (H / Hkv): the same as an MHA whose k/v heads are
    HuggingFace's repeat_kv copies (each kv head repeated in place, not the set tiled)."""
    from transformers.models.llama.modeling_llama import repeat_kv

    d_model, H, Hkv, B, L = 48, 6, 2, 2, 5
    hd = d_model // H
    gqa = MultiHeadAttention(d_model, H, num_kv_heads=Hkv).double()
    mha = MultiHeadAttention(d_model, H).double()
    with torch.no_grad():
        mha.q_proj.load_state_dict(gqa.q_proj.state_dict())
        mha.out_proj.load_state_dict(gqa.out_proj.state_dict())
        for big, small in ((mha.k_proj, gqa.k_proj), (mha.v_proj, gqa.v_proj)):
            w = repeat_kv(small.weight.view(1, Hkv, hd, d_model), H // Hkv).reshape(H * hd, d_model)
            b = repeat_kv(small.bias.view(1, Hkv, 1, hd), H // Hkv).reshape(H * hd)
            big.weight.copy_(w)
            big.bias.copy_(b)
        x = _randn(B, L, d_model, seed=23, dtype=torch.float64)
        out_g, w_g = gqa(x, need_weights=True)
        out_m, w_m = mha(x, need_weights=True)
        # the tiled convention (head j uses kv head j % Hkv) gives something else
        tiled = MultiHeadAttention(d_model, H).double()
        tiled.load_state_dict(mha.state_dict())
        for big, small in ((tiled.k_proj, gqa.k_proj), (tiled.v_proj, gqa.v_proj)):
            big.weight.copy_(small.weight.view(Hkv, hd, d_model).repeat(H // Hkv, 1, 1).reshape(H * hd, d_model))
            big.bias.copy_(small.bias.view(Hkv, hd).repeat(H // Hkv, 1).reshape(H * hd))
        out_tiled, _ = tiled(x)
    torch.testing.assert_close(out_g, out_m)
    torch.testing.assert_close(w_g, w_m)
    assert not torch.allclose(out_g, out_tiled)


# ---------------------------------------------------------------------------------------------
# KV cache: token by token and chunked decoding equal the full causal forward
# ---------------------------------------------------------------------------------------------
def _decode(mha, x, chunks, pad=None):
    cache = KVCache()
    outs, start = [], 0
    for size in chunks:
        piece = x[:, start:start + size]
        p = None if pad is None else pad[:, : start + size]
        outs.append(mha(piece, is_causal=True, kv_cache=cache, padding_mask=p, need_weights=True))
        start += size
    return torch.cat([o for o, _ in outs], dim=1), [w for _, w in outs], cache


@pytest.mark.parametrize("rope_base", [None, 10000.0])
@pytest.mark.parametrize("num_kv_heads", [4, 2, 1])
@pytest.mark.parametrize("chunks", [[1] * 9, [4, 1, 3, 1], [9]])
def test_kv_cache_equals_full_causal_forward(rope_base, num_kv_heads, chunks):
    d_model, H, B, T = 32, 4, 2, 9
    torch.manual_seed(31)
    mha = MultiHeadAttention(d_model, H, num_kv_heads=num_kv_heads, rope_base=rope_base).double().eval()
    x = _randn(B, T, d_model, seed=32, dtype=torch.float64)
    with torch.no_grad():
        full, w_full = mha(x, is_causal=True, need_weights=True)
        out, ws, cache = _decode(mha, x, chunks)
    torch.testing.assert_close(out, full, atol=1e-10, rtol=1e-10)
    start = 0
    for size, w in zip(chunks, ws):  # each chunk's weights are the matching rows of the full weights
        torch.testing.assert_close(w, w_full[:, :, start:start + size, : start + size], atol=1e-10, rtol=1e-10)
        start += size
    hd = d_model // H
    assert cache.seq_len == T == len(cache)
    assert cache.keys.shape == cache.values.shape == (B, num_kv_heads, T, hd)  # stores only Hkv heads
    assert cache.nbytes() == 2 * B * num_kv_heads * T * hd * 8  # float64 = 8 bytes


def test_kv_cache_with_padding_mask():
    d_model, H, B, T = 16, 2, 3, 6
    mha = MultiHeadAttention(d_model, H, num_kv_heads=1, rope_base=500.0).double().eval()
    x = _randn(B, T, d_model, seed=33, dtype=torch.float64)
    pad = torch.ones(B, T, dtype=torch.bool)
    pad[1, 1] = pad[2, 0] = False  # some keys masked out (e.g. left padding)
    with torch.no_grad():
        full, _ = mha(x, is_causal=True, padding_mask=pad)
        out, _, _ = _decode(mha, x, [2, 1, 3], pad=pad)
    torch.testing.assert_close(out, full)


def test_rope_rotates_queries_and_keys_at_their_positions():
    from attn_lib.positional import apply_rope

    d_model, H, B, L = 16, 2, 2, 5
    mha = MultiHeadAttention(d_model, H, rope_base=100.0).double().eval()
    plain = MultiHeadAttention(d_model, H).double().eval()
    plain.load_state_dict(mha.state_dict())
    x = _randn(B, L, d_model, seed=34, dtype=torch.float64)
    with torch.no_grad():
        out, w = mha(x, need_weights=True)
        _, w_plain = plain(x, need_weights=True)
        q = apply_rope(split_heads(mha.q_proj(x), H), base=100.0)
        k = apply_rope(split_heads(mha.k_proj(x), H), base=100.0)
        v = split_heads(mha.v_proj(x), H)
        ref = mha.out_proj(merge_heads(F.scaled_dot_product_attention(q, k, v)))
    torch.testing.assert_close(out, ref)
    assert not torch.allclose(w, w_plain)  # RoPE changed something


def test_kv_cache_update_and_errors():
    cache = KVCache()
    assert cache.seq_len == 0 and cache.nbytes() == 0 and cache.keys is None
    k, v = torch.zeros(1, 2, 3, 4), torch.ones(1, 2, 3, 4)
    keys, values = cache.update(k, v)
    assert keys.shape == (1, 2, 3, 4)
    keys, values = cache.update(k[:, :, :1], v[:, :, :1])
    assert keys.shape == values.shape == (1, 2, 4, 4) and cache.nbytes() == 2 * 2 * 4 * 4 * 4
    with pytest.raises(ValueError, match=r"\(1, 3, 1, 4\)"):
        cache.update(torch.zeros(1, 3, 1, 4), torch.zeros(1, 3, 1, 4))
    with pytest.raises(ValueError, match="B, Hkv, S_new, head_dim"):
        cache.update(torch.zeros(2, 1, 4), torch.zeros(2, 1, 4))
    assert cache.seq_len == 4  # failed updates left it unchanged
    cache.reset()
    assert cache.seq_len == 0


def test_cache_from_another_layer_shape_is_rejected_before_it_changes():
    mha = MultiHeadAttention(16, 4, num_kv_heads=2)
    cache = KVCache()
    x = _randn(1, 3, 16, seed=1)
    with torch.no_grad():
        cache.update(_randn(1, 4, 3, 4, seed=2), _randn(1, 4, 3, 4, seed=3))  # 4 kv heads, filled by hand
        with pytest.raises(ValueError, match="do not match the cached"):
            mha(x, kv_cache=cache, is_causal=True)
    assert cache.seq_len == 3
    # filled by another layer (of the same shapes or not), the cache is refused before anything else (issue 38)
    other = MultiHeadAttention(16, 4, num_kv_heads=2)
    cache = KVCache()
    with torch.no_grad():
        other(x, kv_cache=cache, is_causal=True)
        with pytest.raises(ValueError, match="kv_cache already holds the keys of another layer"):
            mha(x, kv_cache=cache, is_causal=True)
        assert cache.seq_len == 3
        cache.reset()  # emptied, it may serve a new layer
        mha(x, kv_cache=cache, is_causal=True)


# ---------------------------------------------------------------------------------------------
# property tests over shapes
# ---------------------------------------------------------------------------------------------
@settings(max_examples=60)
@given(
    B=st.integers(1, 3), L=st.integers(1, 6), S=st.integers(1, 6), H=st.sampled_from([1, 2, 3, 4]),
    hd=st.sampled_from([1, 2, 4]), cross=st.booleans(), padded=st.booleans(), batch_first=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_property_matches_torch_mha(B, L, S, H, hd, cross, padded, batch_first, seed):
    E = H * hd
    theirs = _torch_mha(E, H, batch_first=batch_first, seed=seed, dtype=torch.float64)
    ours = MultiHeadAttention.from_torch(theirs)
    S = S if cross else L
    q = _randn(B, L, E, seed=seed, dtype=torch.float64)
    kv = _randn(B, S, E, seed=seed + 1, dtype=torch.float64) if cross else q
    pad = _padding(B, S, seed) if padded else None
    t = (lambda a: a) if batch_first else (lambda a: a.transpose(0, 1))
    with torch.no_grad():
        out_t, w_t = theirs(t(q), t(kv), t(kv), key_padding_mask=None if pad is None else ~pad)
        out, w = ours(q, kv if cross else None, padding_mask=pad, need_weights=True)
    torch.testing.assert_close(out, t(out_t), atol=1e-10, rtol=1e-10)
    torch.testing.assert_close(w.mean(1), w_t, atol=1e-10, rtol=1e-10)
    torch.testing.assert_close(w.sum(-1), torch.ones(B, H, L, dtype=torch.float64))


@settings(max_examples=40)
@given(
    T=st.integers(1, 8), Hkv=st.sampled_from([1, 2, 4]), rope=st.booleans(),
    cuts=st.lists(st.integers(1, 8), min_size=1, max_size=8), seed=st.integers(0, 2**16),
)
def test_property_chunked_decoding(T, Hkv, rope, cuts, seed):
    torch.manual_seed(seed)
    mha = MultiHeadAttention(16, 4, num_kv_heads=Hkv, rope_base=10000.0 if rope else None).double().eval()
    x = _randn(2, T, 16, seed=seed, dtype=torch.float64)
    chunks, left = [], T
    for c in cuts:
        if left == 0:
            break
        chunks.append(min(c, left))
        left -= chunks[-1]
    if left:
        chunks.append(left)
    with torch.no_grad():
        full, _ = mha(x, is_causal=True)
        out, _, cache = _decode(mha, x, chunks)
    torch.testing.assert_close(out, full, atol=1e-10, rtol=1e-10)
    assert cache.keys.shape == (2, Hkv, T, 4)


# ---------------------------------------------------------------------------------------------
# dropout, cross-attention defaults
# ---------------------------------------------------------------------------------------------
def test_dropout_only_in_training():
    mha = MultiHeadAttention(16, 2, dropout=0.5).double()
    x = _randn(2, 6, 16, seed=41, dtype=torch.float64)
    mha.eval()
    with torch.no_grad():
        out_eval, w_eval = mha(x, need_weights=True)
        out_eval2, _ = mha(x)
    torch.testing.assert_close(out_eval, out_eval2)  # deterministic in eval
    torch.testing.assert_close(w_eval.sum(-1), torch.ones(2, 2, 6, dtype=torch.float64))
    mha.train()
    torch.manual_seed(0)
    with torch.no_grad():
        out_train, w_train = mha(x, need_weights=True)
    dropped = w_train == 0
    assert 0.2 < dropped.double().mean() < 0.8  # about half of the weights dropped
    # the kept weights are scaled by 1 / (1 - p) = 2
    torch.testing.assert_close(w_train[~dropped], 2 * w_eval[~dropped])
    assert not torch.allclose(out_train, out_eval)


def test_cross_attention_is_not_causal_by_default_and_causal_when_asked():
    mha = MultiHeadAttention(8, 2).double()
    q, kv = _randn(1, 3, 8, seed=1, dtype=torch.float64), _randn(1, 5, 8, seed=2, dtype=torch.float64)
    with torch.no_grad():
        _, w = mha(q, kv, need_weights=True)
        _, w_causal = mha(q, kv, need_weights=True, is_causal=True)
    assert (w > 0).all()
    # without a cache, is_causal is aligned top-left like torch's: query i sees keys 0..i
    torch.testing.assert_close(w_causal != 0, torch.ones(3, 5, dtype=torch.bool).tril().expand(1, 2, 3, 5))


def test_need_weights_false_returns_none():
    mha = MultiHeadAttention(8, 2)
    out, w = mha(torch.zeros(1, 2, 8))
    assert w is None and out.shape == (1, 2, 8)


# ---------------------------------------------------------------------------------------------
# clear errors
# ---------------------------------------------------------------------------------------------
def test_constructor_errors_name_the_numbers():
    with pytest.raises(ValueError, match=r"d_model \(10\).*num_heads \(3\)"):
        MultiHeadAttention(10, 3)
    with pytest.raises(ValueError, match=r"num_kv_heads must divide num_heads=8, got num_kv_heads=3; possible values: \[1, 2, 4, 8\]"):
        MultiHeadAttention(64, 8, num_kv_heads=3)
    with pytest.raises(ValueError, match="dropout"):
        MultiHeadAttention(8, 2, dropout=1.5)
    with pytest.raises(ValueError, match="head_dim 3"):
        MultiHeadAttention(6, 2, rope_base=10000.0)
    with pytest.raises(TypeError, match="num_heads must be an int"):
        MultiHeadAttention(8, 2.0)


def test_forward_errors_name_the_shapes():
    mha = MultiHeadAttention(8, 2)
    with pytest.raises(ValueError, match=r"query must be \(B, L, d_model=8\).*\(2, 3, 7\)"):
        mha(torch.zeros(2, 3, 7))
    with pytest.raises(ValueError, match=r"query must be .*\(3, 8\)"):
        mha(torch.zeros(3, 8))
    with pytest.raises(ValueError, match=r"batch size"):
        mha(torch.zeros(2, 3, 8), torch.zeros(1, 3, 8))
    with pytest.raises(ValueError, match=r"key .*\(2, 4, 8\).*value .*\(2, 5, 8\)"):
        mha(torch.zeros(2, 3, 8), torch.zeros(2, 4, 8), torch.zeros(2, 5, 8))
    with pytest.raises(ValueError, match=r"padding_mask must be \(B, S\) = \(2, 3\).*\(2, 4\)"):
        mha(torch.zeros(2, 3, 8), padding_mask=torch.ones(2, 4, dtype=torch.bool))
    with pytest.raises(TypeError, match="padding_mask must be bool"):
        mha(torch.zeros(2, 3, 8), padding_mask=torch.ones(2, 3))
    with pytest.raises(ValueError, match=r"attn_mask must be .*L=3, S=3.*\(4, 4\)"):
        mha(torch.zeros(2, 3, 8), attn_mask=torch.ones(4, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match="value was given without key"):
        mha(torch.zeros(2, 3, 8), value=torch.zeros(2, 3, 8))


def test_from_torch_errors():
    with pytest.raises(TypeError, match="MultiheadAttention"):
        MultiHeadAttention.from_torch(torch.nn.Linear(2, 2))
    with pytest.raises(ValueError, match="add_bias_kv"):
        MultiHeadAttention.from_torch(torch.nn.MultiheadAttention(8, 2, add_bias_kv=True))


def test_lazy_export_from_package():
    import attn_lib

    assert attn_lib.MultiHeadAttention is MultiHeadAttention and attn_lib.KVCache is KVCache


def test_dtype_mismatch_and_bad_cache_get_clear_errors():
    import pytest

    from attn_lib.mha import MultiHeadAttention

    m = MultiHeadAttention(8, 2)
    with pytest.raises(TypeError, match="float64 but the module's weights are torch.float32"):
        m(torch.randn(2, 3, 8, dtype=torch.float64))
    with pytest.raises(TypeError, match="kv_cache must be a KVCache"):
        m(torch.randn(2, 3, 8), kv_cache={})


# ---------------------------------------------------------------------------------------------
# issue 38: integer masks, side tensors on another device, empty inputs
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("kwargs,exc,words", [
    (dict(attn_mask=torch.zeros(3, 3, dtype=torch.int64)), TypeError, "attn_mask must be bool .* got dtype torch.int64"),
    (dict(attn_mask=torch.ones(3, 3, dtype=torch.bool, device="meta")), ValueError,
     "attn_mask must be on the query's device cpu, got meta"),
    (dict(padding_mask=torch.ones(2, 3, dtype=torch.bool, device="meta")), ValueError,
     "padding_mask must be on the query's device cpu, got meta"),
    (dict(attn_mask=torch.full((3, 3), 1e39, dtype=torch.float64)), ValueError, "attn_mask holds 1e\\+39"),
])
def test_mha_refuses_integer_masks_and_side_tensors_it_cannot_use(kwargs, exc, words):
    # an int64 mask used to be added to the scores (torch's SDPA refuses it); 1e39 became +inf in float32
    with pytest.raises(exc, match=words):
        MultiHeadAttention(8, 2)(_randn(2, 3, 8), **kwargs)


def test_mha_empty_inputs():
    mha = MultiHeadAttention(8, 2)
    x = _randn(2, 3, 8)
    for query, key in ((x[:, :0], None), (x[:, :0], _randn(2, 4, 8)), (x[:0], None)):
        out, w = mha(query, key, need_weights=True)
        assert out.shape == (*query.shape[:2], 8) and w.shape[:3] == (query.shape[0], 2, query.shape[1])
    for backend in ("naive", "tiled"):  # queries but no key: nothing to average over
        with pytest.raises(ValueError, match=r"key and value need at least one position \(S >= 1\)"):
            mha(x, _randn(2, 0, 8), backend=backend)


def test_merge_heads_refuses_a_non_tensor():
    with pytest.raises(TypeError, match="x must be a torch.Tensor, got list"):
        merge_heads([1, 2])
