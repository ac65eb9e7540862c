"""Notebook 12's library (attn_lib.linear, attn_lib.deltanet, attn_lib.course.recall) against brute force and transformers.

Every expected value is computed independently: by explicit loops over positions, by ``transformers``' own code
(Mamba-2's ``mamba2_chunk_scan`` and ``Mamba2Mixer``, Qwen3-Next's gated-delta-rule functions and
``Qwen3NextGatedDeltaNet``), or from the shipped training results' definition.
"""

from __future__ import annotations

import json
import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from attn_lib import DATA_DIR
from attn_lib.deltanet import gated_delta_rule, gated_deltanet_forward, in_float64, l2_normalize
from attn_lib.linear import (FORMS, decayed_attention, decayed_step, direct_long_conv, elu_feature_map,
                             fft_long_conv, linear_attention, mamba2_mixer_forward, recurrent_state_bytes, ssd)

qwen = pytest.importorskip("transformers.models.qwen3_next.modeling_qwen3_next")
mamba = pytest.importorskip("transformers.models.mamba2.modeling_mamba2")
D64 = torch.float64


def _rand(*shape, g, dtype=D64):
    return torch.randn(*shape, generator=g, dtype=dtype)


# ------------------------------------------------------------------ linear attention, three faces
def _brute_linear(q, k, v):  # out_i = Σ_{j<=i} φq_i·φk_j v_j / Σ_{j<=i} φq_i·φk_j, one position at a time
    fq, fk = elu_feature_map(q), elu_feature_map(k)
    out = torch.empty(*v.shape, dtype=v.dtype)
    for i in range(q.shape[-2]):
        w = (fq[..., i:i + 1, :] * fk[..., :i + 1, :]).sum(-1)  # (..., i+1)
        out[..., i, :] = (w[..., None] * v[..., :i + 1, :]).sum(-2) / w.sum(-1, keepdim=True)
    return out


@settings(max_examples=25, deadline=None)
@given(b=st.integers(1, 2), h=st.integers(1, 3), L=st.integers(1, 40), E=st.integers(1, 9), Ev=st.integers(1, 7),
       chunk=st.integers(1, 17), seed=st.integers(0, 10_000))
def test_linear_attention_three_faces_equal_brute_force(b, h, L, E, Ev, chunk, seed):
    g = torch.Generator().manual_seed(seed)
    q, k, v = _rand(b, h, L, E, g=g), _rand(b, h, L, E, g=g), _rand(b, h, L, Ev, g=g)
    want = _brute_linear(q, k, v)
    for form in FORMS:
        got = linear_attention(q, k, v, form=form, chunk_size=chunk)
        assert (got - want).abs().max() < 1e-10, form


@settings(max_examples=25, deadline=None)
@given(L=st.integers(1, 40), E=st.integers(1, 8), Ev=st.integers(1, 6), chunk=st.integers(1, 17),
       seed=st.integers(0, 10_000))
def test_decayed_attention_three_faces_equal_an_explicit_double_sum(L, E, Ev, chunk, seed):
    g = torch.Generator().manual_seed(seed)
    q, k, v = _rand(2, L, E, g=g), _rand(2, L, E, g=g), _rand(2, L, Ev, g=g)
    ld = -torch.rand(2, L, generator=g, dtype=D64) * 2
    want = torch.zeros(2, L, Ev, dtype=D64)
    for i in range(L):
        for j in range(i + 1):
            want[:, i] += math.e ** 0 * torch.exp(ld[:, j + 1:i + 1].sum(-1))[:, None] * (q[:, i] * k[:, j]).sum(-1,
                                                                                              keepdim=True) * v[:, j]
    for form in FORMS:
        assert (decayed_attention(q, k, v, ld, form=form, chunk_size=chunk) - want).abs().max() < 1e-10, form


def test_chunked_state_equals_recurrent_state_and_continues_a_sequence():
    g = torch.Generator().manual_seed(3)
    q, k, v = _rand(2, 30, 4, g=g), _rand(2, 30, 4, g=g), _rand(2, 30, 5, g=g)
    ld = -torch.rand(2, 30, generator=g, dtype=D64)
    _, s_rec = decayed_attention(q, k, v, ld, form="recurrent", return_state=True)
    _, s_chk = decayed_attention(q, k, v, ld, form="chunked", chunk_size=7, return_state=True)
    assert (s_rec - s_chk).abs().max() < 1e-10
    whole = decayed_attention(q, k, v, ld)
    _, s = decayed_attention(q[:, :12], k[:, :12], v[:, :12], ld[:, :12], form="chunked", return_state=True)
    rest = decayed_attention(q[:, 12:], k[:, 12:], v[:, 12:], ld[:, 12:], form="recurrent", initial_state=s)
    assert (rest - whole[:, 12:]).abs().max() < 1e-10


def test_state_has_no_sequence_length():  # the answer of 12.state_growth, derived
    g = torch.Generator().manual_seed(0)
    shapes = set()
    for L in (8, 64):
        q, k, v = _rand(1, 4, L, 16, g=g), _rand(1, 4, L, 16, g=g), _rand(1, 4, L, 16, g=g)
        shapes.add(tuple(decayed_attention(q, k, v, form="recurrent", return_state=True)[1].shape))
    assert shapes == {(1, 4, 16, 16)}


def test_decayed_step_is_the_update_then_the_read():
    g = torch.Generator().manual_seed(1)
    s, q, k, v = _rand(3, 2, g=g), _rand(3, g=g), _rand(3, g=g), _rand(2, g=g)
    out, new = decayed_step(s, q, k, v, torch.tensor(-0.5, dtype=D64))
    expected_state = math.exp(-0.5) * s + torch.outer(k, v)
    assert torch.allclose(new, expected_state) and torch.allclose(out, expected_state.T @ q)


def test_linear_attention_refuses_bad_input():
    x = torch.randn(1, 5, 4)
    with pytest.raises(ValueError, match="form must be one of"):
        linear_attention(x, x, x, form="fast")
    with pytest.raises(ValueError, match="query and key must have the same shape"):
        linear_attention(x, torch.randn(1, 5, 3), x)
    with pytest.raises(TypeError, match="query must have a floating dtype"):
        linear_attention(x.long(), x, x)
    with pytest.raises(ValueError, match="log_decay must be <= 0"):
        decayed_attention(x, x, x, torch.ones(1, 5))
    with pytest.raises(ValueError, match="keeps no state"):
        decayed_attention(x, x, x, return_state=True)
    with pytest.raises(ValueError, match="chunk_size must be an int >= 1"):
        linear_attention(x, x, x, form="chunked", chunk_size=0)
    state = torch.zeros(1, 4, 4)
    with pytest.raises(ValueError, match=r"initial_state must have shape \(\.\.\., E, Ev\) = \(1, 4, 4\).*got \(2, 4, 4\)"):
        decayed_attention(x, x, x, form="recurrent", initial_state=torch.zeros(2, 4, 4))  # another batch
    with pytest.raises(TypeError, match="key, initial_state must share one dtype, got key torch.float32, initial_state torch.float64"):
        decayed_attention(x, x, x, form="chunked", initial_state=state.double())
    with pytest.raises(ValueError, match=r"initial_state contains NaN"):
        decayed_attention(x, x, x, form="chunked", initial_state=state + float("nan"))


# ------------------------------------------------------------------ Mamba-2 (SSD)
def _ssd_inputs(g, Bt=2, L=21, H=4, P=3, N=5, dtype=D64):
    x = _rand(Bt, H, L, P, g=g, dtype=dtype)
    dt = F.softplus(_rand(Bt, H, L, g=g, dtype=dtype))
    A = -torch.rand(H, generator=g, dtype=dtype) * 2 - 0.1
    B, C = _rand(Bt, H, L, N, g=g, dtype=dtype), _rand(Bt, H, L, N, g=g, dtype=dtype)
    return x, dt, A, B, C, torch.rand(H, generator=g, dtype=dtype)


def test_ssd_parallel_equals_its_recurrent_and_chunked_forms():
    args = _ssd_inputs(torch.Generator().manual_seed(0))
    ys = [ssd(*args, form=f, chunk_size=6) for f in FORMS]
    assert max(float((y - ys[0]).abs().max()) for y in ys) < 1e-10
    x, *rest = args
    with pytest.raises(ValueError, match=r"x must have 4 dims \(Bt, H, L, P\)"):
        ssd(x[0], *rest)


def test_ssd_equals_transformers_mamba2_chunk_scan():
    x, dt, A, B, C, D = _ssd_inputs(torch.Generator().manual_seed(1), dtype=torch.float32)
    T = lambda t: t.transpose(1, 2)  # noqa: E731  (B, H, L, ...) -> transformers' (B, L, H, ...)
    ref = mamba.mamba2_chunk_scan(T(x), T(dt), A, T(B), T(C), chunk_size=8, D=D)  # torch path: float32 inside
    got = ssd(x.double(), dt.double(), A.double(), B.double(), C.double(), D.double())
    assert (T(ref).double() - got).abs().max() < 1e-5
    assert (T(ref).double() - got).abs().max() > 0  # float32 against float64: a real comparison, not a copy


def _mamba2_mixer():
    from transformers import Mamba2Config

    cfg = Mamba2Config(hidden_size=16, num_heads=4, head_dim=8, state_size=8, n_groups=2, expand=2, chunk_size=8,
                       num_hidden_layers=1, vocab_size=32, conv_kernel=4)
    torch.manual_seed(0)
    return mamba.Mamba2Mixer(cfg, 0).eval()


def test_mamba2_mixer_rebuilt_from_ssd_equals_transformers():
    mixer = _mamba2_mixer()
    x = torch.randn(2, 19, 16, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        ref = mixer(x)
        for form in FORMS:
            assert (mamba2_mixer_forward(mixer, x, form=form) - ref).abs().max() < 1e-5, form


# ------------------------------------------------------------------ Gated DeltaNet
def _gdn_inputs(g, Bt=2, H=3, L=37, E=8, Ev=6):
    q, k = l2_normalize(_rand(Bt, H, L, E, g=g)), l2_normalize(_rand(Bt, H, L, E, g=g))
    v = _rand(Bt, H, L, Ev, g=g)
    return q, k, v, -torch.rand(Bt, H, L, generator=g, dtype=D64), torch.rand(Bt, H, L, generator=g, dtype=D64)


def test_in_float64_changes_only_the_dtype():
    q, k, v, ld, beta = (t.transpose(1, 2) for t in _gdn_inputs(torch.Generator().manual_seed(0)))
    original = qwen.torch_recurrent_gated_delta_rule(q, k, v, ld, beta)[0]
    copied = in_float64(qwen.torch_recurrent_gated_delta_rule)(q, k, v, ld, beta)[0]
    assert original.dtype == torch.float64 and (original - copied).abs().max() > 1e-12  # the float32 round trip
    assert (original - copied).abs().max() < 1e-5


@pytest.mark.parametrize("chunk", [1, 16, 64])
def test_gated_delta_rule_equals_transformers_to_1e_10(chunk):
    q, k, v, ld, beta = _gdn_inputs(torch.Generator().manual_seed(chunk))
    s0 = _rand(2, 3, 8, 6, g=torch.Generator().manual_seed(9))
    T = lambda t: t.transpose(1, 2)  # noqa: E731
    ref_r, ref_rs = in_float64(qwen.torch_recurrent_gated_delta_rule)(T(q), T(k), T(v), T(ld), T(beta),
                                                                       initial_state=s0, output_final_state=True)
    ref_c, ref_cs = in_float64(qwen.torch_chunk_gated_delta_rule)(T(q), T(k), T(v), T(ld), T(beta), chunk_size=chunk,
                                                                   initial_state=s0, output_final_state=True)
    rec, rec_s = gated_delta_rule(q, k, v, ld, beta, form="recurrent", initial_state=s0)
    chk, chk_s = gated_delta_rule(q, k, v, ld, beta, form="chunked", chunk_size=chunk, initial_state=s0)
    assert (rec - T(ref_r)).abs().max() < 1e-10 and (rec_s - ref_rs).abs().max() < 1e-10
    assert (chk - T(ref_c)).abs().max() < 1e-10 and (chk_s - ref_cs).abs().max() < 1e-10
    assert (rec - chk).abs().max() < 1e-10


def test_delta_rule_with_beta_one_stores_a_key_exactly():
    # one step with beta = 1, no decay, a unit key: the state then maps that key to its value (online regression)
    g = torch.Generator().manual_seed(4)
    k = l2_normalize(_rand(1, 1, 3, 5, g=g), eps=0.0)
    v = _rand(1, 1, 3, 4, g=g)
    _, s = gated_delta_rule(k, k, v, torch.zeros(1, 1, 3, dtype=D64), torch.ones(1, 1, 3, dtype=D64))
    assert (s[0, 0].T @ k[0, 0, -1] - v[0, 0, -1]).abs().max() < 1e-12  # the last key is recalled exactly


def test_gated_deltanet_layer_equals_transformers():
    from transformers import Qwen3NextConfig

    cfg = Qwen3NextConfig(hidden_size=32, linear_num_value_heads=4, linear_num_key_heads=2, linear_key_head_dim=8,
                          linear_value_head_dim=6, linear_conv_kernel_dim=4, num_hidden_layers=1,
                          layer_types=["linear_attention"], num_attention_heads=2, num_key_value_heads=1, head_dim=8,
                          intermediate_size=32, vocab_size=32)
    torch.manual_seed(0)
    layer = qwen.Qwen3NextGatedDeltaNet(cfg, 0).eval()
    x = torch.randn(2, 70, 32, generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        ref = layer(x)
        for form in ("recurrent", "chunked"):
            assert (gated_deltanet_forward(layer, x, form=form) - ref).abs().max() < 1e-5, form


def test_gated_delta_rule_refuses_bad_input():
    q, k, v, ld, beta = _gdn_inputs(torch.Generator().manual_seed(0))
    with pytest.raises(ValueError, match="log_decay must be <= 0"):
        gated_delta_rule(q, k, v, -ld, beta)
    with pytest.raises(ValueError, match=r"beta must have shape \(B, H, L\)"):
        gated_delta_rule(q, k, v, ld, beta[..., :-1])
    with pytest.raises(ValueError, match="query must have 4 dims"):
        gated_delta_rule(q[0], k, v, ld, beta)
    with pytest.raises(TypeError, match=r"query, key, value, log_decay, beta must share one dtype.*beta torch.float32"):
        gated_delta_rule(q, k, v, ld, beta.float())
    nan_beta = beta.clone()
    nan_beta[0, 0, 1] = float("nan")
    with pytest.raises(ValueError, match=r"beta contains NaN \(1 value\), first at index \(0, 0, 1\)"):
        gated_delta_rule(q, k, v, ld, nan_beta)
    for bad in (float("nan"), float("-inf")):  # -inf - -inf would be NaN in the chunked form's cumulative sums
        bad_ld = ld.clone()
        bad_ld[0, 1, 2] = bad
        with pytest.raises(ValueError, match=r"log_decay contains .*first at index \(0, 1, 2\)"):
            gated_delta_rule(q, k, v, bad_ld, beta, form="chunked")
    B, H, L, E = k.shape
    with pytest.raises(ValueError, match=rf"initial_state must have shape \(B, H, E, Ev\) = \({B}, {H}, {E}, {v.shape[-1]}\)"):
        gated_delta_rule(q, k, v, ld, beta, initial_state=torch.zeros(B, H, v.shape[-1], E + 1, dtype=v.dtype))
    with pytest.raises(TypeError, match=r"initial_state must be a torch.Tensor, got list \[\[0.0\]\]"):
        gated_delta_rule(q, k, v, ld, beta, initial_state=[[0.0]])
    with pytest.raises(ValueError, match=r"scale must be None or a finite number > 0.*-1"):
        gated_delta_rule(q, k, v, ld, beta, scale=-1)
    with pytest.raises(TypeError, match="scale must be a"):
        gated_delta_rule(q, k, v, ld, beta, scale="0.5")
    # a given scale is used: doubling the queries with the scale halved changes nothing
    a = gated_delta_rule(q, k, v, ld, beta, scale=0.25)[0]
    b = gated_delta_rule(2 * q, k, v, ld, beta, scale=0.125)[0]
    assert (a - b).abs().max() < 1e-12


# ------------------------------------------------------------------ long convolutions
@settings(max_examples=20, deadline=None)
@given(L=st.integers(1, 300), seed=st.integers(0, 10_000))
def test_fft_convolution_equals_the_direct_sum(L, seed):
    g = torch.Generator().manual_seed(seed)
    u, k = _rand(2, L, g=g), _rand(2, L, g=g)
    assert (fft_long_conv(u, k) - direct_long_conv(u, k)).abs().max() < 1e-9


def test_direct_convolution_is_the_textbook_sum_and_the_padding_matters():
    g = torch.Generator().manual_seed(0)
    u, k = _rand(12, g=g), _rand(12, g=g)
    want = torch.stack([sum(k[s] * u[t - s] for s in range(t + 1)) for t in range(12)])
    assert (direct_long_conv(u, k) - want).abs().max() < 1e-12
    circular = torch.fft.irfft(torch.fft.rfft(u) * torch.fft.rfft(k), n=12)  # without zero padding: wraps around
    assert (circular - want).abs().max() > 1e-3


def test_both_convolutions_follow_one_rule_for_short_long_and_mixed_filters():
    g = torch.Generator().manual_seed(1)
    u, short = _rand(2, 10, g=g), _rand(2, 4, g=g)
    padded = torch.cat([short, torch.zeros(2, 6, dtype=short.dtype)], dim=-1)
    for conv in (direct_long_conv, fft_long_conv):
        # a shorter filter is a longer one with zeros: y_t = sum_{s < 4} k_s u_{t-s}
        want = torch.stack([sum(short[:, s] * u[:, t - s] for s in range(min(t + 1, 4))) for t in range(10)], -1)
        assert (conv(u, short) - want).abs().max() < 1e-9 and (conv(u, short) - conv(u, padded)).abs().max() < 1e-9
        with pytest.raises(ValueError, match="k must be at most as long as u"):
            conv(u, _rand(2, 11, g=g))
        with pytest.raises(TypeError, match="must share one dtype"):
            conv(u, short.float())


def test_fft_cost_grows_faster_than_linear():  # the answer of 12.fft_cost, derived from n log2 n
    ratios = [(2 * n * math.log2(2 * n)) / (n * math.log2(n)) for n in (1024, 4096, 32768)]
    assert all(2 < r < 4 for r in ratios)


def test_recurrent_state_bytes():
    # Qwen3-Next-80B-A3B's Gated DeltaNet: 32 value heads of 128 x 128 (config.json), bf16
    assert recurrent_state_bytes(32, 128, 128, 1, 2) == 32 * 128 * 128 * 2 == 1_048_576
    with pytest.raises(ValueError, match="num_heads must be an int >= 1, got 0"):
        recurrent_state_bytes(0, 128, 128)
    with pytest.raises(TypeError, match="head_k_dim must be an int"):
        recurrent_state_bytes(4, 2.5, 128)


# ------------------------------------------------------------------ associative recall
def test_recall_batches_have_distinct_keys_and_the_right_target():
    from attn_lib.course.recall import make_recall_batch

    keys, values, target = make_recall_batch(50, 16, generator=torch.Generator().manual_seed(0))
    assert keys.shape == values.shape == (50, 17)
    for row in range(50):
        pairs = keys[row, :-1].tolist()
        assert len(set(pairs)) == 16
        assert values[row, pairs.index(int(keys[row, -1]))] == target[row]
    with pytest.raises(ValueError, match="num_pairs must be <= num_keys"):
        make_recall_batch(2, 200, generator=torch.Generator())


def test_shipped_recall_curve_supports_the_notebooks_claims():
    from attn_lib.course.recall import KINDS, RecallModel

    curve = json.loads((DATA_DIR / "recall_curve.json").read_text())
    models = curve["models"]
    assert sorted(models) == sorted(KINDS)
    largest = str(max(curve["pair_counts"]))
    acc = {k: models[k]["accuracy"][largest] for k in KINDS}
    assert acc["softmax"] >= 0.95  # softmax recalls
    assert acc["softmax"] - acc["linear"] >= 0.3  # linear attention's state is outgrown
    small = str(min(curve["pair_counts"]))
    assert models["linear"]["accuracy"][small] - acc["linear"] >= 0.3  # ... it degrades as the pairs grow
    gap_closed = (acc["hybrid"] - acc["deltanet"]) / (acc["softmax"] - acc["deltanet"])
    assert gap_closed >= 0.8  # one softmax layer in four closes most of the gap
    counts = {k: sum(p.numel() for p in RecallModel(k).parameters()) for k in KINDS}
    assert counts == {k: models[k]["parameters"] for k in KINDS}  # the file describes these models
    assert max(counts.values()) / min(counts.values()) < 1.05  # equal parameter count within 5 %


def test_recall_model_and_training_refuse_bad_sizes_and_restore_threads(monkeypatch):
    from attn_lib.course import recall

    with pytest.raises(ValueError, match=r"d_model \(30\) must be divisible by num_heads \(4\)"):
        recall.RecallModel("softmax", d_model=30)
    with pytest.raises(TypeError, match="num_values must be an int"):
        recall.RecallModel("linear", num_values=64.0)
    with pytest.raises(ValueError, match="num_keys must be an int >= 1"):
        recall.RecallModel("linear", num_keys=0)
    with pytest.raises(ValueError, match="pair_counts must hold at least one"):
        recall.train_recall("linear", steps=1, pair_counts=())
    with pytest.raises(ValueError, match=r"pair_counts\[1\] must be an int in"):
        recall.train_recall("linear", steps=1, pair_counts=(4, 500))
    with pytest.raises(ValueError, match="lr must be a number > 0"):  # 0 trains not at all (issue 38)
        recall.train_recall("linear", steps=1, lr=-1e-3)
    with pytest.raises(ValueError, match="kind must be one of"):
        recall.train_recall("mamba", steps=1)
    # run_recall_curve trains on one thread and gives the caller's thread count back, even when training fails
    before = torch.get_num_threads()
    torch.set_num_threads(2)  # not 1, so that a lost restore shows
    seen = []

    def fails(kind, steps):
        seen.append(torch.get_num_threads())
        raise RuntimeError("stop")

    monkeypatch.setattr(recall, "train_recall", fails)
    try:
        with pytest.raises(RuntimeError, match="stop"):
            recall.run_recall_curve(steps=1)
        assert seen == [1] and torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


def _linear_reference_log_space(q, k, v):
    """Normalised causal linear attention with φ = elu + 1 in float64, from log φ: softmax_j(log φ(q_i)·φ(k_j))."""
    q, k, v = q.double(), k.double(), v.double()
    a, b = (torch.where(t < 0, t, torch.log1p(t.clamp(min=0))) for t in (q, k))  # log(elu(x) + 1)
    log_w = torch.logsumexp(a[..., :, None, :] + b[..., None, :, :], dim=-1)  # log φ(q_i)·φ(k_j), (..., L, L)
    L = q.shape[-2]
    log_w = log_w.masked_fill(~torch.ones(L, L, dtype=torch.bool).tril(), -math.inf)
    return torch.softmax(log_w, dim=-1) @ v


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("shift_q,shift_k", [(0.0, 0.0), (-30.0, -30.0), (-200.0, -200.0), (-300.0, 0.0),
                                             (0.0, -1e4)])
@pytest.mark.parametrize("eps", [1e-12, 0.0])
def test_linear_attention_float32_with_very_negative_features_is_the_weighted_average(form, shift_q, shift_k, eps):
    # issue 38: elu(x) + 1 underflowed to 0 in float32 from x = -17, so the output was 0 (NaN with eps=0)
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(2, 3, 9, 4, generator=g) for _ in range(3))
    q, k = q + shift_q, k + shift_k
    out = linear_attention(q, k, v, form=form, chunk_size=4, eps=eps)
    torch.testing.assert_close(out.double(), _linear_reference_log_space(q, k, v), atol=1e-6, rtol=1e-5)


def test_linear_attention_later_keys_that_dwarf_earlier_ones_stay_causal():
    # the running max of the keys' features rescales the state (as the online softmax does): early queries
    # must not see the large later keys, and later queries must weigh every key exactly
    g = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn(1, 2, 10, 4, generator=g) for _ in range(3))
    k[..., :5, :] -= 500.0
    for form in FORMS:
        out = linear_attention(q, k, v, form=form, chunk_size=3)
        # the parallel and chunked forms sum the log-decays: after a jump of 500 the sums are near 500, whose
        # float32 spacing (3e-5) bounds the relative error of the later weights
        torch.testing.assert_close(out.double(), _linear_reference_log_space(q, k, v), atol=1e-5, rtol=1e-4)


def test_elu_feature_map_is_exp_below_zero():
    x = torch.tensor([-80.0, -20.0, -1.0, 0.0, 2.0])
    assert (elu_feature_map(x) > 0).all()  # (exp(x) - 1) + 1 was 0 at -20 and -80 in float32
    want = torch.tensor([math.exp(-80.0), math.exp(-20.0), math.exp(-1.0), 1.0, 3.0], dtype=torch.float64)
    torch.testing.assert_close(elu_feature_map(x).double(), want, rtol=1e-6, atol=0)


# ----------------------------------------------------------------------------------------------
# issue 38: empty sequences, dtypes and devices of the side tensors, causal convolutions and NaN
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("form", FORMS)
def test_empty_sequences_give_empty_outputs(form):
    q = torch.randn(1, 2, 0, 4)
    assert linear_attention(q, q, q, form=form).shape == (1, 2, 0, 4)
    out, state = decayed_attention(q, q, torch.randn(1, 2, 0, 3), form="chunked" if form == "parallel" else form,
                                   return_state=True)
    assert out.shape == (1, 2, 0, 3) and (state == 0).all() and state.shape == (1, 2, 4, 3)
    if form != "parallel":
        out, state = gated_delta_rule(q, q, q, torch.zeros(1, 2, 0), torch.zeros(1, 2, 0), form=form)
        assert out.shape == (1, 2, 0, 4) and state.shape == (1, 2, 4, 4)
    assert fft_long_conv(torch.randn(2, 0), torch.randn(0)).shape == (2, 0)


@pytest.mark.parametrize("call,exc,words", [
    (lambda q: linear_attention(q[..., :0], q[..., :0], q), ValueError, "last dim E >= 1"),
    (lambda q: linear_attention(q, q, q, feature_map=3), TypeError, "feature_map must be a function"),
    (lambda q: decayed_attention(q, q, q, torch.zeros(1, 2, 5, dtype=torch.float64)), TypeError,
     "key, log_decay must share one dtype"),
    (lambda q: decayed_attention(q, q, q, torch.zeros(1, 2, 5, device="meta")), ValueError,
     "must be on one device"),
    (lambda q: fft_long_conv(q.half(), q.half()), TypeError, "u must be float32 or float64"),
    (lambda q: gated_delta_rule(q[..., :0], q[..., :0], q, torch.zeros(1, 2, 5), torch.zeros(1, 2, 5)), ValueError,
     "last dim E >= 1"),
])
def test_linear_functions_refuse_bad_side_tensors(call, exc, words):
    with pytest.raises(exc, match=words):
        call(torch.randn(1, 2, 5, 4))


@pytest.mark.parametrize("D,exc,words", [
    (torch.ones(5), ValueError, r"D must have shape \(H,\) = \(2,\)"),
    (torch.full((2,), math.nan), ValueError, "D contains NaN"),
    (torch.ones(2, dtype=torch.float64), TypeError, "x, D must share one dtype"),
])
def test_ssd_checks_its_skip_weights(D, exc, words):
    x, dt, A = torch.randn(1, 2, 3, 3), torch.ones(1, 2, 3), -torch.ones(2)
    B = C = torch.randn(1, 2, 3, 4)
    with pytest.raises(exc, match=words):
        ssd(x, dt, A, B, C, D=D)


def test_long_convolutions_refuse_nan_and_inf_instead_of_returning_them():
    # direct_long_conv used to pass a NaN through (causally: y_s, y_{s+1}, ... NaN); both now refuse it, as the
    # rest of attn_lib does, naming the argument; the FFT would also carry it backwards
    g = torch.Generator().manual_seed(5)
    u, k = torch.randn(2, 6, generator=g), torch.randn(6, generator=g)
    bad, k_bad = u.clone(), k.clone()
    bad[0, 3], k_bad[4] = math.nan, math.nan
    for conv in (direct_long_conv, fft_long_conv):
        for args, name in (((bad, k), "u"), ((u, k_bad), "k")):
            with pytest.raises(ValueError, match=f"{name} contains NaN"):
                conv(*args)
        with pytest.raises(ValueError, match=r"u contains \+inf"):
            conv(u.index_fill(1, torch.tensor([2]), math.inf), k)


def test_linear_attention_with_values_near_the_float32_maximum_is_finite():
    # the numerator sums up to L x E values of 3e38 before the division: scaled by a power of two first
    g = torch.Generator().manual_seed(6)
    q, k = torch.randn(1, 2, 6, 4, generator=g), torch.randn(1, 2, 6, 4, generator=g)
    v = torch.full((1, 2, 6, 3), 3e38)
    for form in FORMS:
        torch.testing.assert_close(linear_attention(q, k, v, form=form, chunk_size=4), v)


def test_layer_rebuilds_refuse_another_module_and_another_dtype():
    with pytest.raises(TypeError, match="layer must be transformers' Qwen3NextGatedDeltaNet, got object"):
        gated_deltanet_forward(object(), torch.randn(1, 2, 3))
    with pytest.raises(TypeError, match="mixer must be transformers' Mamba2Mixer, got object"):
        mamba2_mixer_forward(object(), torch.randn(1, 2, 3))
    layer = torch.nn.Module()
    for n in ("in_proj_qkvz", "in_proj_ba", "conv1d", "A_log", "dt_bias", "norm"):
        setattr(layer, n, torch.nn.Identity())
    layer.out_proj = torch.nn.Linear(3, 3)
    with pytest.raises(TypeError, match="hidden_states must have the layer's dtype torch.float32, got torch.float64"):
        gated_deltanet_forward(layer, torch.randn(1, 2, 3, dtype=torch.float64))
def _qwen3_next_gdn(ratio, act="silu", seed=0):
    from transformers import Qwen3NextConfig

    cfg = Qwen3NextConfig(hidden_size=32, linear_num_value_heads=2 * ratio, linear_num_key_heads=2,
                          linear_key_head_dim=8, linear_value_head_dim=6, linear_conv_kernel_dim=4,
                          num_hidden_layers=1, layer_types=["linear_attention"], num_attention_heads=2,
                          num_key_value_heads=1, head_dim=8, intermediate_size=32, vocab_size=32, hidden_act=act)
    torch.manual_seed(seed)
    return qwen.Qwen3NextGatedDeltaNet(cfg, 0).eval()


@pytest.mark.parametrize("ratio", [1, 2, 4])  # value heads per key head, Gated DeltaNet's GQA
def test_gated_deltanet_decodes_through_its_cache_equal_to_the_full_forward(ratio):
    layer = _qwen3_next_gdn(ratio)
    x = torch.randn(3, 11, 32, generator=torch.Generator().manual_seed(6))  # a batch of 3
    with torch.no_grad():
        ref = layer(x)
        for sizes in ([1] * 11, [4, 1, 5, 1]):  # token by token; in chunks
            cache = {}
            out = torch.cat([gated_deltanet_forward(layer, p, cache=cache) for p in x.split(sizes, dim=1)], 1)
            assert (out - ref).abs().max() < 1e-5, sizes
            assert cache["conv"].shape == (3, layer.conv_dim, 3)  # K - 1 inputs, however many tokens passed
            assert cache["recurrent"].shape == (3, 2 * ratio, 8, 6)
        with pytest.raises(TypeError, match="cache must be None or a dict"):
            gated_deltanet_forward(layer, x, cache=[])


def test_gated_deltanet_applies_the_configs_activation_after_its_convolution():
    """transformers applies ACT2FN[config.hidden_act] after the convolution, not a fixed silu (issue 35)."""
    layer = _qwen3_next_gdn(2, act="gelu")
    assert layer.activation == "gelu"
    x = torch.randn(2, 9, 32, generator=torch.Generator().manual_seed(7))
    with torch.no_grad():
        ref = layer(x)
        assert (gated_deltanet_forward(layer, x) - ref).abs().max() < 1e-5
        layer.activation = "silu"  # what the old converter assumed: another answer
        assert (gated_deltanet_forward(layer, x) - ref).abs().max() > 1e-4
        layer.activation = "softsign"
        with pytest.raises(ValueError, match="layer.activation must be one of .* got 'softsign'"):
            gated_deltanet_forward(layer, x)


# ----------------------------------------------------------------- Kimi Delta Attention (issue 35, §3)
kimi = pytest.importorskip("transformers.models.kimi_linear.modeling_kimi_linear")
from attn_lib.course.hf_equal import float64_reference  # noqa: E402


def _kda_inputs(g, B=2, H=3, L=20, E=8, Ev=6):
    q, k = l2_normalize(_rand(B, H, L, E, g=g)), l2_normalize(_rand(B, H, L, E, g=g))
    v = _rand(B, H, L, Ev, g=g)
    log_decay = -F.softplus(_rand(B, H, L, E, g=g)) * 0.5  # a decay per key channel, <= 0
    beta = torch.sigmoid(_rand(B, H, L, g=g))
    return q, k, v, log_decay, beta


@pytest.mark.parametrize("chunk", [1, 7, 64])
def test_kimi_delta_rule_equals_transformers_recurrent_and_chunked_to_1e_10(chunk):
    from attn_lib.deltanet import kimi_delta_rule

    q, k, v, ld, beta = _kda_inputs(torch.Generator().manual_seed(chunk))
    s0 = _rand(2, 3, 8, 6, g=torch.Generator().manual_seed(11))
    T = lambda t: t.transpose(1, 2)  # noqa: E731  (B, H, L, ...) -> transformers' (B, L, H, ...)
    ref_r, ref_rs = in_float64(kimi.recurrent_kimi_delta_attention)(T(q), T(k), T(v), T(ld), T(beta),
                                                                   initial_state=s0, output_final_state=True)
    with float64_reference():  # its decay mask also calls .float(): kept in float64 here
        ref_c, ref_cs = in_float64(kimi.chunk_kimi_delta_attention)(T(q), T(k), T(v), T(ld), T(beta),
                                                                   chunk_size=chunk, initial_state=s0,
                                                                   output_final_state=True)
    assert ref_r.dtype == D64 and ref_c.dtype == D64
    rec, rec_s = kimi_delta_rule(q, k, v, ld, beta, form="recurrent", initial_state=s0)
    chk, chk_s = kimi_delta_rule(q, k, v, ld, beta, form="chunked", chunk_size=chunk, initial_state=s0)
    assert (rec - T(ref_r)).abs().max() < 1e-10 and (rec_s - ref_rs).abs().max() < 1e-10
    assert (chk - T(ref_c)).abs().max() < 1e-10 and (chk_s - ref_cs).abs().max() < 1e-10
    # one decay per channel matters: their mean over the channels (Gated DeltaNet's one per head) differs
    mean = ld.mean(-1, keepdim=True).expand_as(ld)
    assert (kimi_delta_rule(q, k, v, mean, beta, initial_state=s0)[0] - rec).abs().max() > 1e-3


def test_kimi_delta_rule_with_one_decay_per_head_is_gated_deltanet():
    from attn_lib.deltanet import kimi_delta_rule

    q, k, v, ld, beta = _kda_inputs(torch.Generator().manual_seed(3))
    per_head = ld[..., 0]  # (B, H, L)
    for form in ("recurrent", "chunked"):
        ours, _ = kimi_delta_rule(q, k, v, per_head[..., None].expand_as(ld), beta, form=form, chunk_size=8)
        gdn, _ = gated_delta_rule(q, k, v, per_head, beta, form=form, chunk_size=8)
        assert (ours - gdn).abs().max() < 1e-12, form
    with pytest.raises(ValueError, match="log_decay must be <= 0"):
        kimi_delta_rule(q, k, v, -ld, beta)
    with pytest.raises(ValueError, match=r"log_decay must be \(B, H, L, E\)|query, key and log_decay"):
        kimi_delta_rule(q, k, v, per_head[..., None], beta)


def _kimi_layer(heads=2, act="silu", seed=0):
    from transformers import KimiLinearConfig

    cfg = KimiLinearConfig(hidden_size=32, linear_num_heads=heads, linear_head_dim=8, linear_conv_kernel_dim=4,
                           num_hidden_layers=1, layer_types=["linear_attention"], num_attention_heads=2,
                           num_key_value_heads=2, vocab_size=32, intermediate_size=32, hidden_act=act)
    torch.manual_seed(seed)
    layer = kimi.KimiLinearDeltaAttention(cfg, 0).eval()
    with torch.no_grad():  # the init leaves A_log and dt_bias empty: draw them, and a norm weight other than ones
        layer.forget_gate.A_log.copy_(torch.empty_like(layer.forget_gate.A_log).uniform_(1, 4).log())
        layer.forget_gate.dt_bias.normal_(0, 0.5)
        layer.o_norm.weight.normal_(1, 0.3)
    return layer


def test_kimi_delta_attention_layer_equals_transformers_in_full_and_decoding():
    from attn_lib.deltanet import kimi_delta_attention_forward

    for heads in (2, 4):
        layer = _kimi_layer(heads)
        x = torch.randn(3, 11, 32, generator=torch.Generator().manual_seed(8))  # a batch of 3
        with torch.no_grad():
            ref = layer(x)
            for form in ("recurrent", "chunked"):
                assert (kimi_delta_attention_forward(layer, x, form=form) - ref).abs().max() < 1e-5, form
            for sizes in ([1] * 11, [4, 1, 5, 1]):  # token by token; in chunks, through the conv + state cache
                cache = {}
                out = torch.cat([kimi_delta_attention_forward(layer, p, cache=cache) for p in x.split(sizes, 1)], 1)
                assert (out - ref).abs().max() < 1e-5, sizes
                assert cache["recurrent"].shape == (3, heads, 8, 8)


@pytest.mark.parametrize("call,exc,words", [
    # second breaking pass (#38): E = 0 divided by zero in the default scale; a non-layer gave AttributeError
    (lambda: __import__("attn_lib.deltanet", fromlist=["x"]).kimi_delta_rule(
        *(torch.randn(1, 2, 5, 0),) * 2, torch.randn(1, 2, 5, 4), -torch.rand(1, 2, 5, 0), torch.rand(1, 2, 5)),
     ValueError, "E >= 1"),
    (lambda: __import__("attn_lib.deltanet", fromlist=["x"]).kimi_delta_attention_forward("x", torch.randn(1, 3, 4)),
     TypeError, "KimiDeltaAttention"),
])
def test_second_pass_deltanet_refusals(call, exc, words):
    with pytest.raises(exc, match=words):
        call()


def _overflow_calls():
    from attn_lib.deltanet import gated_delta_rule, kimi_delta_rule
    from attn_lib.linear import decayed_attention
    q, beta = torch.randn(1, 2, 5, 4), torch.rand(1, 2, 5)
    ld, ldk, big = -torch.rand(1, 2, 5), -torch.rand(1, 2, 5, 4), torch.full((1, 2, 4, 4), 3e38)
    return [
        lambda: decayed_attention(q, q, q, torch.full_like(ld, -1e38)),  # cumsum -inf, then -inf - -inf: NaN
        lambda: decayed_attention(q, q, q, torch.full_like(ld, -1e38), form="chunked"),
        lambda: decayed_attention(q * 1e20, q * 1e20, q),  # q·k = 1e40 > float32's maximum
        lambda: gated_delta_rule(q, q, q, torch.full_like(ld, -1e38), beta, form="chunked"),
        lambda: gated_delta_rule(q, q, q, ld, beta, scale=3e38),
        lambda: gated_delta_rule(q, q, q, ld, beta, initial_state=big),
        lambda: kimi_delta_rule(q, q, q, torch.full_like(ldk, -1e38), beta, form="chunked"),
        lambda: kimi_delta_rule(q, q, q, ldk, beta, initial_state=big),
    ]


@pytest.mark.parametrize("i", range(8))
def test_second_pass_overflow_on_finite_inputs_is_refused_not_nan(i):
    with pytest.raises(ValueError, match="overflows torch.float32"):  # each returned NaN/inf silently before
        _overflow_calls()[i]()


@pytest.mark.parametrize("eps", [-1e-3, -1.0, float("nan")])
def test_l2_normalize_refuses_a_negative_or_nan_eps(eps):
    from attn_lib.deltanet import l2_normalize
    with pytest.raises(ValueError, match="eps must be"):  # was NaN where the sum of squares < -eps
        l2_normalize(torch.zeros(3), eps=eps)


# ------------------------------------------------------------------ issue 35: Mamba-2 decoding
@pytest.mark.parametrize("n_groups", [4, 2, 1])  # heads per B/C group 1, 2, 4: Mamba-2's GQA
@pytest.mark.parametrize("form", ["recurrent", "chunked"])
def test_mamba2_decoding_through_its_state_equals_the_transformers_full_forward(n_groups, form, monkeypatch):
    """In float64 to 1e-10: transformers' gated norm (MambaRMSNormGated) casts to float32, so the test runs it with
    the same formula in the input's dtype (what float64_reference does for the *RMSNorm classes)."""
    from transformers import Mamba2Config

    from attn_lib.course.hf_equal import float64_reference

    from attn_lib.linear import Mamba2State, mamba2_mixer_decode

    cfg = Mamba2Config(hidden_size=16, num_heads=4, head_dim=8, state_size=8, n_groups=n_groups, expand=2,
                       chunk_size=8, num_hidden_layers=1)
    torch.manual_seed(n_groups)
    mixer = mamba.Mamba2Mixer(cfg, 0).double().eval()
    with torch.no_grad():
        mixer.norm.weight.normal_(1.0, 0.3)  # ones would hide a missing norm weight
        mixer.D.normal_()
    x = torch.randn(3, 19, 16, dtype=torch.float64)  # a batch of 3

    def gated_norm64(self, hidden_states, gate=None):
        h = hidden_states * F.silu(gate) if gate is not None else hidden_states
        g = h.view(*h.shape[:-1], -1, self.group_size)
        return self.weight * (g * torch.rsqrt(g.pow(2).mean(-1, keepdim=True) + self.variance_epsilon)).view(h.shape)

    with torch.no_grad():
        ref32 = mixer(x)
        with monkeypatch.context() as mp, float64_reference():
            mp.setattr(mamba.MambaRMSNormGated, "forward", gated_norm64)
            ref = mixer(x)
        assert 1e-12 < (ref - ref32).abs().max() < 1e-5  # only the float32 round trip differed
        ours_full = mamba2_mixer_forward(mixer, x, form="parallel")
        torch.testing.assert_close(ours_full, ref, rtol=0, atol=1e-10)
        for sizes in ([1] * 19, [5, 1, 7, 2, 4]):
            state = Mamba2State()
            out = torch.cat([mamba2_mixer_decode(mixer, piece, state, form=form, chunk_size=3)
                             for piece in torch.split(x, sizes, dim=1)], 1)
            torch.testing.assert_close(out, ref, rtol=0, atol=1e-10, msg=str(sizes))
            assert state.seq_len == 19 and state.ssm.shape == (3, 4, 8, 8) and state.conv.shape == (3, mixer.conv_dim, 3)
            assert state.nbytes() == (3 * mixer.conv_dim * 3 + 3 * 4 * 8 * 8) * 8  # constant in the length
        # the carried state matters: decoding the second half from a fresh state differs
        fresh = mamba2_mixer_decode(mixer, x[:, 10:], Mamba2State(), form=form)
        assert (fresh - ref[:, 10:]).abs().max() > 1e-3


def test_mamba2_decode_refuses_a_bad_state_or_form():
    from attn_lib.linear import Mamba2State, mamba2_mixer_decode

    mixer = _mamba2_mixer()
    x = torch.randn(2, 3, 16)
    with pytest.raises(TypeError, match="state must be an attn_lib.linear.Mamba2State, got dict"):
        mamba2_mixer_decode(mixer, x, {})
    with pytest.raises(ValueError, match="form must be 'recurrent' or 'chunked'"):
        mamba2_mixer_decode(mixer, x, Mamba2State(), form="parallel")
    state = Mamba2State()
    mamba2_mixer_decode(mixer, x, state)
    with pytest.raises(ValueError, match="state holds a batch of 2 sequences, got hidden_states of batch 1"):
        mamba2_mixer_decode(mixer, x[:1], state)
