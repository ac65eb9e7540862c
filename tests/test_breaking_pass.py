"""Issue #38, the third breaking pass: each case here returned NaN/inf, a raw torch error or a silently wrong answer
before, and now gives the right answer or a TypeError/ValueError naming the argument (the style of _checks.py).

Classes: non-finite input passed through silently (softcap, elu_feature_map, l2_normalize, direct_long_conv), finite
input overflowing on the way (l2_normalize, the long convolutions), side tensors on another device (a meta tensor:
shapes, no values) reaching torch before the device check, the unchecked recurrent steps (decayed_step,
delta_rule_step), and the tiled/Triton paths' sinks and ALiBi slopes with a query that has no heads dim.
"""

from __future__ import annotations

import math

import pytest
import torch

from attn_lib.deltanet import delta_rule_step, gated_delta_rule, kimi_delta_rule, l2_normalize
from attn_lib.kv_cache import KVCache
from attn_lib.linear import decayed_attention, decayed_step, direct_long_conv, elu_feature_map, fft_long_conv, \
    linear_attention
from attn_lib.mla import MultiHeadLatentAttention
from attn_lib.models.decoding import sample_next
from attn_lib.tiled import tiled_attention
from attn_lib.variants import VariantAttention, softcap
from attn_lib.windows import RingKVCache

NAN, INF = math.nan, math.inf
META = "meta"


# ------------------------------------------------------------------ 1. NaN in, NaN out -> refused
def _with(value, shape=(3, 4), at=(1, 2)):
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(0))
    x[at] = value
    return x


@pytest.mark.parametrize("fn,name", [(lambda x: softcap(x, 5.0), "scores"), (elu_feature_map, "x"),
                                     (l2_normalize, "x")])
@pytest.mark.parametrize("bad,word", [(NAN, "NaN"), (INF, r"\+inf"), (-INF, "-inf")])
def test_elementwise_helpers_refuse_nan_and_inf(fn, name, bad, word):
    with pytest.raises(ValueError, match=rf"{name} contains {word} \(1 value\), first at index \(1, 2\)"):
        fn(_with(bad))


@pytest.mark.parametrize("fn,name", [(lambda x: softcap(x, 5.0), "scores"), (elu_feature_map, "x"),
                                     (l2_normalize, "x")])
def test_elementwise_helpers_refuse_integer_and_meta_tensors(fn, name):
    with pytest.raises(TypeError, match=f"{name} must have a floating dtype"):
        fn(torch.ones(3, 4, dtype=torch.long))
    with pytest.raises(ValueError, match=f"{name} is on the meta device"):
        fn(torch.empty(3, 4, device=META))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_l2_normalize_is_exact_for_huge_and_tiny_rows(dtype):
    big = torch.finfo(dtype).max / 2  # Σx² overflowed to inf: rsqrt(inf) = 0 gave a row of zeros
    torch.testing.assert_close(l2_normalize(torch.full((4,), big, dtype=dtype)), torch.full((4,), 0.5, dtype=dtype))
    tiny = torch.finfo(dtype).tiny * 4  # Σx² underflowed to 0: with eps = 0, x * inf = inf
    torch.testing.assert_close(l2_normalize(torch.full((4,), tiny, dtype=dtype), eps=0.0),
                               torch.full((4,), 0.5, dtype=dtype))
    assert torch.equal(l2_normalize(torch.zeros(2, 3, dtype=dtype), eps=0.0), torch.zeros(2, 3, dtype=dtype))  # was NaN


def test_l2_normalize_is_unchanged_on_ordinary_rows():
    x = torch.randn(3, 5, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    want = x / torch.sqrt((x * x).sum(-1, keepdim=True) + 1e-6)  # the formula of transformers' l2norm
    torch.testing.assert_close(l2_normalize(x), want, rtol=1e-15, atol=0)
    y = x.clone().requires_grad_()
    l2_normalize(y).sum().backward()  # the power-of-two scale is a constant: the gradient is the formula's
    y2 = x.clone().requires_grad_()
    (y2 / torch.sqrt((y2 * y2).sum(-1, keepdim=True) + 1e-6)).sum().backward()
    torch.testing.assert_close(y.grad, y2.grad)


def test_linear_attention_refuses_a_feature_map_that_makes_nan():
    q = torch.randn(1, 2, 5, 4)
    with pytest.raises(ValueError, match=r"feature_map\(query\) contains NaN"):
        linear_attention(q, q.abs(), q, feature_map=torch.log)


@pytest.mark.parametrize("conv", [direct_long_conv, fft_long_conv])
def test_long_convolutions_near_the_maximum_are_finite_and_exact(conv):
    u = torch.full((1, 4), 3e38)  # the sums of two 1.5e38 terms, and the FFT's spectra, overflowed float32
    k = torch.tensor([[0.5, 0.5, 0.0, 0.0]])
    want = torch.tensor([[1.5e38, 3e38, 3e38, 3e38]], dtype=torch.float64)
    torch.testing.assert_close(conv(u, k).double(), want, rtol=1e-5, atol=0)
    with pytest.raises(ValueError, match="overflows torch.float32"):  # the true result 6e38 does not fit
        conv(u, torch.ones(1, 4))


# ------------------------------------------------------------------ 2. devices, before any value is read
def _meta_cache(cache, *shapes):
    for name, shape in zip(("keys", "values"), shapes):
        setattr(cache, name, torch.empty(*shape, device=META))
    if isinstance(cache, RingKVCache):
        cache.positions = torch.empty(cache.window, dtype=torch.long, device=META)
    return cache


def _device_calls():
    q, ld, beta = torch.randn(1, 2, 5, 4), -torch.rand(1, 2, 5, 4), torch.rand(1, 2, 5)
    m4, m3 = torch.empty(1, 2, 5, 4, device=META), torch.empty(1, 2, 5, device=META)
    va = VariantAttention(16, 4, 2, 8, sinks=True, sliding_window=3)
    va_meta_sinks = VariantAttention(16, 4, 2, 8, sinks=True)
    va_meta_sinks.sinks = torch.nn.Parameter(torch.empty(4, device=META))
    mla = MultiHeadLatentAttention(16, 2, kv_lora_rank=8, qk_nope_head_dim=4, qk_rope_head_dim=4, v_head_dim=4)
    x, xm = torch.randn(1, 3, 16), torch.empty(1, 3, 16, device=META)
    ring = RingKVCache(4)
    ring.update(torch.randn(1, 2, 2, 8), torch.randn(1, 2, 2, 8))
    kv = KVCache()
    kv.update(torch.randn(1, 2, 2, 8), torch.randn(1, 2, 2, 8))
    return [
        (lambda: linear_attention(q, m4, q), "query, key, value must be on one device"),
        (lambda: linear_attention(m4, q, q), "query, key, value must be on one device"),
        (lambda: direct_long_conv(torch.randn(2, 6), torch.empty(2, 6, device=META)), "u, k must be on one device"),
        (lambda: fft_long_conv(torch.randn(2, 6), torch.empty(2, 6, device=META)), "u, k must be on one device"),
        (lambda: kimi_delta_rule(q, q, q, ld, m3), "beta on meta"),
        (lambda: kimi_delta_rule(q, q, m4, ld, beta), "value on meta"),
        (lambda: gated_delta_rule(q, q, q, ld[..., 0], m3), "beta on meta"),
        (lambda: gated_delta_rule(m4, q, q, ld[..., 0], beta), "query on meta"),
        (lambda: sample_next(torch.empty(2, 5, device=META)), "logits is on the meta device"),
        (lambda: sample_next(torch.empty(2, 5, device=META), temperature=1.0), "logits is on the meta device"),
        (lambda: va(xm), "x must be on the layer's device cpu, got meta"),
        (lambda: va_meta_sinks(x), r"sinks \(the layer's parameter\) must be on the layer's device cpu, got meta"),
        (lambda: va(x, cache=_meta_cache(KVCache(), (1, 2, 2, 8), (1, 2, 2, 8))),
         "KVCache.update: new key and value are on cpu, but the cache is on meta"),
        (lambda: va(x, cache=_meta_cache(RingKVCache(4), (1, 2, 4, 8), (1, 2, 4, 8))),
         "RingKVCache.update: new key and value are on cpu, but the cache is on meta"),
        (lambda: ring.update(torch.empty(1, 2, 1, 8, device=META), torch.empty(1, 2, 1, 8, device=META)),
         "RingKVCache.update: new key and value are on meta, but the cache is on cpu"),
        (lambda: kv.update(torch.empty(1, 2, 1, 8, device=META), torch.empty(1, 2, 1, 8, device=META)),
         "KVCache.update: new key and value are on meta, but the cache is on cpu"),
        (lambda: mla(xm), "x must be on the layer's device cpu, got meta"),
        (lambda: mla(x, cache=_meta_cache(KVCache(), (1, 1, 2, 8), (1, 1, 2, 4))),
         "KVCache.update: new key and value are on cpu, but the cache is on meta"),
        (lambda: mla.latents(x, torch.arange(3, device=META)), "positions must be on x's device cpu, got meta"),
        (lambda: mla.queries(x, torch.arange(3, device=META)), "positions must be on x's device cpu, got meta"),
        (lambda: mla.latents(xm, torch.arange(3)), "x must be on the layer's device cpu, got meta"),
        (lambda: decayed_step(torch.zeros(2, 4, 3), torch.randn(2, 4), torch.empty(2, 4, device=META),
                              torch.randn(2, 3), torch.zeros(2)), "key on meta"),
        (lambda: delta_rule_step(torch.zeros(2, 4, 3), torch.randn(2, 4), torch.randn(2, 4), torch.randn(2, 3),
                                 torch.zeros(2), torch.empty(2, device=META)), "beta on meta"),
    ]


@pytest.mark.parametrize("i", range(23))
def test_a_tensor_on_another_device_is_named_before_its_values_are_read(i):
    call, words = _device_calls()[i]
    with pytest.raises(ValueError, match=words):  # each was torch's RuntimeError (or NotImplementedError) before
        call()


def test_mla_queries_and_latents_check_their_arguments():
    mla = MultiHeadLatentAttention(16, 2, kv_lora_rank=8, qk_nope_head_dim=4, qk_rope_head_dim=4, v_head_dim=4)
    with pytest.raises(ValueError, match=r"x must be \(B, L, d_model=16\), got shape \(1, 3, 15\)"):
        mla.latents(torch.randn(1, 3, 15), torch.arange(3))  # was torch's "mat1 and mat2 shapes cannot be multiplied"
    with pytest.raises(TypeError, match="positions must be an integer tensor"):
        mla.queries(torch.randn(1, 3, 16), torch.ones(3))
    with pytest.raises(ValueError, match=r"positions must have shape \(L,\) = \(3,\)"):
        mla.latents(torch.randn(1, 3, 16), torch.arange(4))


# ------------------------------------------------------------------ 4. the recurrent steps
def _step_args(**change):
    g = torch.Generator().manual_seed(3)
    args = dict(state=torch.randn(2, 4, 3, generator=g), query=torch.randn(2, 4, generator=g),
                key=torch.randn(2, 4, generator=g), value=torch.randn(2, 3, generator=g),
                log_decay=-torch.rand(2, generator=g), beta=torch.rand(2, generator=g))
    args.update(change)
    return args


_STEP_CASES = [
    (dict(query=[1.0, 2.0]), TypeError, "query must be a torch.Tensor"),
    (dict(key=torch.ones(2, 4, dtype=torch.long)), TypeError, "key must have a floating dtype"),
    (dict(state=torch.zeros(2, 4, 3, dtype=torch.float64)), TypeError, "must share one dtype"),  # promoted before
    (dict(log_decay=-0.1), TypeError, "log_decay must be a torch.Tensor"),
    (dict(state=torch.zeros(4)), ValueError, "state must have at least 2 dims"),
    (dict(value=torch.randn(2, 4)), ValueError, r"value must have shape \(2, 3\)"),
    (dict(query=torch.randn(2, 5)), ValueError, r"query must have shape \(2, 4\)"),
    (dict(query=torch.randn(4)), ValueError, r"query must have shape \(2, 4\)"),  # broadcast silently before
    (dict(log_decay=torch.zeros(3)), ValueError, r"log_decay must have shape \(2,\)"),
    (dict(log_decay=torch.full((2,), 0.5)), ValueError, "log_decay must be <= 0"),
    (dict(query=torch.full((2, 4), NAN)), ValueError, "query contains NaN"),
    (dict(state=torch.full((2, 4, 3), INF)), ValueError, r"state contains \+inf"),
    (dict(log_decay=torch.full((2,), -INF)), ValueError, "log_decay contains -inf"),
]


@pytest.mark.parametrize("step", ["decayed_step", "delta_rule_step"])
@pytest.mark.parametrize("change,exc,words", _STEP_CASES)
def test_recurrent_steps_check_their_arguments(step, change, exc, words):
    args = _step_args(**change)
    fn = decayed_step if step == "decayed_step" else delta_rule_step
    if step == "decayed_step":
        del args["beta"]
    with pytest.raises(exc, match=words):
        fn(*args.values())


@pytest.mark.parametrize("beta,exc,words", [
    (torch.full((2,), 1.5), ValueError, r"beta must be in \[0, 1\]"),
    (torch.full((2,), -0.1), ValueError, r"beta must be in \[0, 1\]"),
    (torch.full((2,), NAN), ValueError, "beta contains NaN"),
    (torch.rand(3), ValueError, r"beta must have shape \(2,\)"),
])
def test_delta_rule_step_checks_beta(beta, exc, words):
    with pytest.raises(exc, match=words):
        delta_rule_step(*_step_args(beta=beta).values())


@pytest.mark.parametrize("fn", [gated_delta_rule, kimi_delta_rule])
def test_sequence_delta_rules_refuse_beta_outside_0_1(fn):
    q, beta = torch.randn(1, 2, 5, 4), torch.rand(1, 2, 5)
    ld = -torch.rand(1, 2, 5, 4) if fn is kimi_delta_rule else -torch.rand(1, 2, 5)
    with pytest.raises(ValueError, match=r"beta must be in \[0, 1\]"):  # the docstring said so; the code let 2.0 by
        fn(q, q, q, ld, beta + 1.0)


def test_checked_steps_equal_the_sequence_forms_they_are_the_update_of():
    g = torch.Generator().manual_seed(4)
    q, k, v = (torch.randn(1, 2, 6, 4, generator=g, dtype=torch.float64) for _ in range(3))
    ld, beta = -torch.rand(1, 2, 6, generator=g, dtype=torch.float64), torch.rand(1, 2, 6, generator=g,
                                                                                   dtype=torch.float64)
    k = k / k.norm(dim=-1, keepdim=True)
    s1 = s2 = torch.zeros(1, 2, 4, 4, dtype=torch.float64)
    outs1, outs2 = [], []
    for t in range(6):
        o1, s1 = decayed_step(s1, q[:, :, t], k[:, :, t], v[:, :, t], ld[:, :, t])
        o2, s2 = delta_rule_step(s2, q[:, :, t] * 0.5, k[:, :, t], v[:, :, t], ld[:, :, t], beta[:, :, t])
        outs1.append(o1)
        outs2.append(o2)
    torch.testing.assert_close(torch.stack(outs1, 2), decayed_attention(q, k, v, ld, form="chunked", chunk_size=4))
    out, state = gated_delta_rule(q, k, v, ld, beta, form="chunked", chunk_size=4)  # scale 4 ** -0.5 = 0.5
    torch.testing.assert_close(torch.stack(outs2, 2), out)
    torch.testing.assert_close(s2, state)


# ------------------------------------------------------------------ 3. tiled / Triton side arguments
@pytest.mark.parametrize("kw,name", [(dict(sinks=torch.zeros(1)), "sinks"),
                                     (dict(alibi_slopes=torch.zeros(1)), "alibi_slopes")])
def test_sinks_and_slopes_need_a_heads_dim(kw, name):
    q = torch.randn(5, 8)
    with pytest.raises(ValueError, match=rf"{name} need a query with a heads dim, \(..., H, L, E\)"):
        tiled_attention(q, q, q, **kw)  # said "must have shape (H,) = (1,), got shape (1,)" before


# ------------------------------------------------------------------ 3. models/lm, course/train, course/recall
def _lm():
    from attn_lib.models.lm import DecoderLM
    torch.manual_seed(0)
    return DecoderLM(50, d_model=16, num_heads=2, num_layers=2, max_len=32)


def test_lm_refuses_caches_holding_different_numbers_of_positions():
    lm, ids = _lm(), torch.randint(50, (2, 5), generator=torch.Generator().manual_seed(0))
    caches = lm.new_kv_caches()
    lm(ids[:, :3], caches)
    caches[1].update(torch.randn(2, 2, 1, 8), torch.randn(2, 2, 1, 8))  # one layer a token ahead
    with pytest.raises(ValueError, match=r"same number of positions in every layer, got \[3, 4\]"):
        lm(ids[:, 3:4], caches)  # layer 1's new key went to position 3 while its cache said 4: silently misplaced


@pytest.mark.parametrize("call,words", [
    (lambda lm: lm(torch.zeros(2, 5, dtype=torch.long, device=META)), "input_ids is on the meta device"),
    (lambda lm: lm.generate(torch.zeros(2, 5, dtype=torch.long, device=META), 2), "prompt_ids is on the meta device"),
    (lambda lm: lm.layers[0](torch.empty(1, 3, 16, device=META)), "x must be on the layer's device cpu, got meta"),
    (lambda lm: lm.layers[0](torch.full((1, 3, 16), NAN)), r"x contains NaN \(48 values\)"),  # named query before
    (lambda lm: lm.layers[0](torch.full((1, 3, 16), 3e38)), "too large for RMSNorm"),  # normalised to 0 silently
])
def test_lm_and_its_blocks_name_bad_inputs(call, words):
    with pytest.raises(ValueError, match=words):
        call(_lm())


def test_lm_refuses_an_init_std_whose_weights_would_be_inf():
    from attn_lib.models.lm import DecoderLM
    with pytest.raises(ValueError, match=r"init_std must be a number in \[0.0, 4.25"):
        DecoderLM(10, init_std=1e300)  # made inf weights, and NaN at the first forward


def _tiny_training(**kw):
    from attn_lib.course.train import train_loop
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1)

    def batches():
        while True:
            yield torch.randn(4, 3)
    loss_fn = kw.pop("loss_fn", lambda m, b: m(b).pow(2).mean())
    return train_loop(model, batches(), loss_fn, **{"steps": 3, "progress": False, **kw}), model


def test_train_loop_refuses_a_weight_decay_that_flips_the_weights():
    with pytest.raises(ValueError, match="lr \\* weight_decay must be < 1"):
        _tiny_training(weight_decay=1e6)  # each step multiplied the weights by 1 - 3e3


def test_train_loop_stops_before_an_infinite_gradient_reaches_the_weights():
    sqrt_at_zero = lambda m, b: m(b).mean() * 0 + (m.bias - m.bias.detach()).sqrt().sum()  # finite 0, slope inf
    with pytest.raises(ValueError, match="the gradients at step 0 are not finite"):
        _tiny_training(loss_fn=sqrt_at_zero)  # the weights became NaN, and step 1 was blamed


@pytest.mark.parametrize("call,exc,words", [
    (lambda R: R.make_recall_batch(2, 3, generator=None, num_keys=10**13), ValueError,
     r"batch_size \* num_keys must be at most"),  # tried to allocate 80 TB
    (lambda R: R.recall_accuracy(R.RecallModel("linear", d_model=8, num_heads=2, num_layers=1), 3, num_examples=0),
     ValueError, "num_examples must be an int >= 1"),  # named batch_size
    (lambda R: R.train_recall("linear", steps=1, pair_counts={4, 8}), TypeError,
     "pair_counts must be a list, tuple or range"),  # 'set' object is not subscriptable
    (lambda R: R.train_recall("linear", steps=1, pair_counts=(4, 200)), ValueError, r"pair_counts\[1\] must be"),
    (lambda R: R.train_recall("linear", steps=1, lr=1e3), ValueError, r"lr must be a number <= 99.0, got 1000.0"),
    (lambda R: R.RecallModel("linear", d_model=8, num_heads=2, num_layers=1)(
        torch.zeros(2, 3, dtype=torch.long, device=META), torch.zeros(2, 3, dtype=torch.long)), ValueError,
     "keys is on the meta device"),
    (lambda R: R.run_recall_curve(1, out=3), TypeError, "out must be None or a path"),  # after minutes of training
    (lambda R: R.run_recall_curve(1, out="/nonexistent-folder/x.json"), ValueError, "does not exist"),
])
def test_recall_refusals(call, exc, words):
    from attn_lib.course import recall
    with pytest.raises(exc, match=words):
        call(recall)


def test_train_recall_names_the_step_where_training_diverged(monkeypatch):
    from attn_lib.course import recall
    real = recall.RecallModel.forward
    monkeypatch.setattr(recall.RecallModel, "forward", lambda self, k, v: real(self, k, v) * math.inf)
    with pytest.raises(ValueError, match="training diverged at step 0: loss"):  # returned NaN losses before
        recall.train_recall("linear", steps=2, batch_size=4)

    def overflowing(self, k, v):
        raise ValueError("query contains NaN (16640 values)")  # what linear_attention said at lr=1e30
    monkeypatch.setattr(recall.RecallModel, "forward", overflowing)
    with pytest.raises(ValueError, match=r"training diverged at step 0 \(lr=0.003\): query contains NaN"):
        recall.train_recall("linear", steps=2, batch_size=4)


# ------------------------------------------------------------------ fresh pass: windows, capstone
def test_a_window_of_2_to_the_63_reaches_every_key():
    from attn_lib.windows import window_mask_from_positions
    causal = torch.ones(3, 3, dtype=torch.bool).tril()
    assert torch.equal(window_mask_from_positions(torch.arange(3), torch.arange(3), window=2**63), causal)  # was all False
    x = torch.randn(1, 5, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    huge = VariantAttention(16, 4, 2, 8, sliding_window=2**63, dtype=torch.float64)
    plain = VariantAttention(16, 4, 2, 8, dtype=torch.float64)
    plain.load_state_dict(huge.state_dict())
    torch.testing.assert_close(huge(x), plain(x))  # the layer attended to nothing and returned o_proj(0)


@pytest.mark.parametrize("targets,exc,words", [
    (torch.full((2, 5), 999), ValueError, r"targets hold \[999\], outside the model's vocabulary"),
    (torch.full((2, 5), -5), ValueError, r"targets hold \[-5\]"),  # both were torch's IndexError
    (torch.zeros(2, 5), TypeError, "targets must hold integer token ids"),
    (torch.zeros(2, 5, dtype=torch.long, device=META), ValueError, "targets are on the meta device"),
])
def test_copy_loss_checks_its_targets(targets, exc, words):
    from attn_lib.course import capstone
    torch.manual_seed(0)
    model = capstone.TinyDecoder(capstone.VOCAB_SIZE)
    with pytest.raises(exc, match=words):
        capstone.copy_loss(model, (torch.zeros(2, 5, dtype=torch.long), targets))


def test_capstone_helpers_refuse_meta_ids():
    from attn_lib.course import capstone
    with pytest.raises(ValueError, match="ids are on the meta device"):
        capstone.decode(torch.zeros(3, dtype=torch.long, device=META))
    with pytest.raises(ValueError, match="train_ids is on the meta device"):
        capstone.unigram_cross_entropy(torch.zeros(5, dtype=torch.long, device=META), torch.zeros(5, dtype=torch.long), 4)


# ------------------------------------------------------------------ fresh pass: linear, deltanet
def _ssd_args():
    g = torch.Generator().manual_seed(6)
    x = torch.randn(1, 2, 5, 3, generator=g)
    return dict(x=x, dt=torch.rand(1, 2, 5, generator=g) + 0.1, A=-torch.rand(2, generator=g) - 0.1,
                B=torch.randn(1, 2, 5, 4, generator=g), C=torch.randn(1, 2, 5, 4, generator=g))


@pytest.mark.parametrize("change,words", [
    (dict(dt=torch.empty(1, 2, 5, device=META)), "dt on meta"),  # Tensor.item() on a meta tensor before
    (dict(A=torch.empty(2, device=META)), "A on meta"),
    (dict(dt=torch.full((1, 2, 5), NAN)), "dt contains NaN"),  # named value (= x * dt) before
    (dict(A=torch.full((2,), NAN)), "A contains NaN"),
])
def test_ssd_checks_devices_and_values_of_dt_and_a(change, words):
    from attn_lib.linear import ssd
    with pytest.raises(ValueError, match=words):
        ssd(**{**_ssd_args(), **change})


def test_linear_attention_refuses_a_normaliser_that_is_not_positive():
    q = torch.randn(1, 2, 5, 4, generator=torch.Generator().manual_seed(7))
    with pytest.raises(ValueError, match=r"the normaliser .* <= 0"):  # was NaN (0 / 0) or a sign-flipped average
        linear_attention(q, q, q, feature_map=lambda t: t * 0, eps=0.0)
    with pytest.raises(ValueError, match=r"the normaliser .* <= 0"):
        linear_attention(q, -q, q, feature_map=None)
    out = linear_attention(q, -q, q, feature_map=None, normalize=False)  # the unnormalised form has no normaliser
    assert torch.isfinite(out).all()


@pytest.mark.parametrize("call,words", [
    (lambda q: decayed_attention(q, q, q, form="recurrent", return_state=1), "return_state must be a bool"),
    (lambda q: linear_attention(q, q, q, normalize=1), "normalize must be a bool"),
])
def test_linear_flags_are_bools(call, words):
    with pytest.raises(TypeError, match=words):
        call(torch.randn(1, 2, 5, 4))


@pytest.mark.parametrize("fn", [gated_delta_rule, kimi_delta_rule])
def test_chunked_delta_rules_name_the_cpu_half_precision_limit(fn):
    q, beta = torch.randn(1, 2, 5, 4).half(), torch.rand(1, 2, 5).half()
    ld = -torch.rand(1, 2, 5, 4).half() if fn is kimi_delta_rule else -torch.rand(1, 2, 5).half()
    with pytest.raises(TypeError, match="form='chunked' needs float32 or float64"):  # NotImplementedError before
        fn(q, q, q, ld, beta, form="chunked")
    out, _ = fn(q, q, q, ld, beta, form="recurrent")  # the recurrent form has no triangular solve
    assert out.dtype == torch.float16 and torch.isfinite(out).all()


@pytest.mark.parametrize("fn", [gated_delta_rule, kimi_delta_rule])
def test_delta_rules_refuse_an_initial_state_their_dtype_cannot_hold(fn):
    q, beta = torch.randn(1, 2, 5, 4), torch.rand(1, 2, 5)
    ld = -torch.rand(1, 2, 5, 4) if fn is kimi_delta_rule else -torch.rand(1, 2, 5)
    big = torch.full((1, 2, 4, 4), 1e39, dtype=torch.float64)  # inf once cast to float32
    with pytest.raises(ValueError, match="initial_state holds 1e\\+39, more than torch.float32"):
        fn(q, q, q, ld, beta, initial_state=big)


def test_l2_normalize_edges():
    assert l2_normalize(torch.randn(3, 0)).shape == (3, 0)  # amax over an empty dim raised IndexError
    x = torch.tensor([3.0, 4.0])
    torch.testing.assert_close(l2_normalize(x, eps=1e39), x / math.sqrt(25 + 1e39))  # eps above float32's max
    assert torch.equal(l2_normalize(x, eps=1e300), torch.zeros(2))  # 5e-150 rounds to 0 in float32; no error


# ------------------------------------------------------------------ fresh pass: decoding, the date task's helpers
def test_sample_loop_checks_device_and_eos_id():
    from attn_lib.models.decoding import sample_loop
    with pytest.raises(ValueError, match="device must be a device such as"):  # torch's RuntimeError before
        sample_loop(lambda new: torch.randn(2, 3), 2, 3, device="gpu")
    with pytest.raises(ValueError, match=r"eos_id=99 is outside the logits' vocabulary 0..2"):  # never stopped
        sample_loop(lambda new: torch.randn(2, 3), 2, 3, eos_id=99)


def _date_examples(n=8):
    from attn_lib.course.data import make_splits
    return make_splits(sizes={"train": n, "val": 2, "test": 2})["train"]


@pytest.mark.parametrize("call,exc,words", [
    (lambda T, ex: T.endless_batches(["a", "b"], 1), TypeError, "examples must hold DateExample items"),
    (lambda T, ex: T.endless_batches(3, 1), TypeError, "examples must be a sequence"),
    (lambda T, ex: T.exact_match(ex[:2], "ab"), TypeError, "predictions must be a list of str"),  # 2 chars = 2 preds
    (lambda T, ex: T.seq2seq_loss(torch.nn.Linear(2, 2), next(T.endless_batches(ex, 2))), TypeError,
     "model must be an attn_lib.models.Seq2SeqTransformer"),  # Linear.forward() takes 2 positional arguments
    (lambda T, ex: T.uptrain_date_model(torch.nn.Linear(2, 2), progress=False), TypeError,
     "model must be an attn_lib.models.Seq2SeqTransformer"),
    (lambda T, ex: T.load_model(3), TypeError, "path must be a str or os.PathLike"),
    (lambda T, ex: T.save_model(T.load_model(), "/tmp/unused.safetensors", losses=[1.0, NAN]), ValueError,
     r"losses\[1\] must be a finite number"),
])
def test_date_task_helpers_check_their_arguments(call, exc, words):
    from attn_lib.course import train
    with pytest.raises(exc, match=words):
        call(train, _date_examples())


def test_load_model_names_a_file_that_is_no_checkpoint(tmp_path):
    from attn_lib.course import train
    bad = tmp_path / "garbage.safetensors"
    bad.write_text("garbage")
    with pytest.raises(ValueError, match="is not a safetensors checkpoint"):  # safetensors' SafetensorError before
        train.load_model(bad)


# ------------------------------------------------------------------ fresh pass: the transformers layers' forwards
def test_gated_deltanet_forward_checks_its_input_and_its_cache():
    from tests.test_linear import _qwen3_next_gdn
    from attn_lib.deltanet import gated_deltanet_forward
    layer = _qwen3_next_gdn(1)
    x = torch.randn(3, 4, 32, generator=torch.Generator().manual_seed(8))
    with pytest.raises(ValueError, match="hidden_states must be on the layer's device cpu, got meta"):
        gated_deltanet_forward(layer, torch.empty(3, 4, 32, device=META))  # torch's device error before
    with pytest.raises(ValueError, match="hidden_states contains NaN"):  # named query (after conv and norm) before
        gated_deltanet_forward(layer, x.masked_fill(x > 1, NAN))
    with torch.no_grad():
        cache = {}
        gated_deltanet_forward(layer, x, cache=cache)
        with pytest.raises(ValueError, match=r"cache\['conv'\] must be the last K - 1 = 3 inputs"):
            gated_deltanet_forward(layer, x[:2], cache=cache)  # another batch: torch.cat's size error before


def test_unigram_cross_entropy_needs_no_table_of_the_whole_vocabulary():
    from attn_lib.course.capstone import unigram_cross_entropy
    train, ev = torch.tensor([0, 0, 1, 5]), torch.tensor([0, 5, 7])
    V = 10**13  # bincount(minlength=V) tried to allocate 80 TB
    want = -sum(math.log((c + 1) / (4 + V)) for c in (2, 1, 0)) / 3
    assert unigram_cross_entropy(train, ev, V) == pytest.approx(want, rel=1e-12)
    assert unigram_cross_entropy(train, ev, 8) == pytest.approx(-sum(math.log((c + 1) / 12) for c in (2, 1, 0)) / 3,
                                                               rel=1e-12)


def test_the_recurrent_forms_run_the_public_steps_so_a_learners_step_can_stand_in(monkeypatch):
    # attn_lib.course.mine swaps the module's delta_rule_step for the learner's: the recurrent loop must call it
    import attn_lib.deltanet as dn
    import attn_lib.linear as lin
    calls = []
    for module, name in ((dn, "delta_rule_step"), (lin, "decayed_step")):
        real = getattr(module, name)
        monkeypatch.setattr(module, name, lambda *a, real=real, name=name: calls.append(name) or real(*a))
    q, ld, beta = torch.randn(1, 2, 3, 4), -torch.rand(1, 2, 3), torch.rand(1, 2, 3)
    dn.gated_delta_rule(q, q, q, ld, beta, form="recurrent")
    lin.decayed_attention(q, q, q, ld, form="recurrent")
    assert calls == ["delta_rule_step"] * 3 + ["decayed_step"] * 3


def test_copy_batch_refuses_a_batch_too_large_to_allocate():
    from attn_lib.course import capstone
    with pytest.raises(ValueError, match=r"batch_size \* \(2 \* max_words \+ 1\) must be at most 268435456"):
        capstone.copy_batch(2, max_words=10**9)  # allocated 2 x 241 million ids (a random n up to 1e9) before
    inputs, _ = capstone.copy_batch(2, torch.Generator().manual_seed(0), min_words=5, max_words=5)
    assert inputs.shape == (2, 10)


def test_a_ring_cache_too_large_for_memory_is_refused_by_name():
    # the last case of issue 38's third pass: window=2**30 reserved 4,096 GiB and torch's allocator raised
    from attn_lib.windows import RingKVCache

    cache = RingKVCache(2**30)
    key = torch.randn(2, 4, 3, 64)
    with pytest.raises(ValueError, match=r"window: a ring cache of 1073741824 slots .* 4\.1e\+03 GiB"):
        cache.update(key, key)
    assert cache.keys is None  # nothing half-allocated is kept: a later update with a fitting cache starts clean
