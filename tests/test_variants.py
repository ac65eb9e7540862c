"""attn_lib.variants.VariantAttention equals transformers' Mistral (sliding window), Qwen3 (QK-norm), Gemma 2
(soft-capping, windows), Gemma 3 (QK-norm with 1 + w, local RoPE base), gpt-oss (learned sinks) and Gemma 3n (KV
sharing) attention modules in float64 to 1e-10, fed the same hidden states, RoPE angles and the masks the models
themselves build (notebook 11, issue #25)."""

from __future__ import annotations

import pytest
import torch

from attn_lib.course.hf_equal import captured_attention_masks, float64_reference, hf_cos_sin
from attn_lib.masks import causal_mask
from attn_lib.variants import VariantAttention, max_logit, softcap
from attn_lib.windows import sliding_window_mask

TOL = {"rtol": 0, "atol": 1e-10}
COMMON = dict(vocab_size=50, hidden_size=32, intermediate_size=32, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, head_dim=8, attn_implementation="eager", bos_token_id=None, eos_token_id=None,
              pad_token_id=None)


def _case(name):
    import transformers as T

    return {
        "mistral": (T.MistralConfig, T.MistralForCausalLM, dict(sliding_window=3, rope_theta=100.0)),
        "qwen3": (T.Qwen3Config, T.Qwen3ForCausalLM, dict(rope_theta=100.0)),
        "gemma2": (T.Gemma2Config, T.Gemma2ForCausalLM, dict(sliding_window=3, attn_logit_softcapping=2.0,
                                                            query_pre_attn_scalar=6, rope_theta=100.0)),
        "gemma3": (T.Gemma3TextConfig, T.Gemma3ForCausalLM, dict(sliding_window=3, query_pre_attn_scalar=6,
                                                                 rope_theta=100.0, sliding_window_pattern=2)),
        "gpt_oss": (T.GptOssConfig, T.GptOssForCausalLM, dict(sliding_window=3, num_local_experts=2,
                                                             num_experts_per_tok=1, rope_theta=100.0)),
    }[name]


@pytest.mark.parametrize("name", ["mistral", "qwen3", "gemma2", "gemma3", "gpt_oss"])
def test_variant_attention_equals_transformers(name):
    config_cls, model_cls, extra = _case(name)
    torch.manual_seed(0)
    model = model_cls(config_cls(**COMMON, **extra)).eval()
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "norm" in n or "sinks" in n:
                p.normal_(0, 0.5)  # the init (ones, zeros) would hide a missing norm weight or sink
    masks = captured_attention_masks(model, torch.randint(0, 50, (2, 9)))  # the masks the model builds (float32 model:
    model = model.double()  # gpt-oss's grouped-mm experts refuse float64)
    kinds = set()
    for i, layer in enumerate(model.model.layers):
        hf = layer.self_attn
        ours = VariantAttention.from_hf(hf)
        kinds.add((ours.sliding_window, ours.softcap, ours.q_norm is not None, ours.sinks is not None))
        x = torch.randn(2, 9, 32, dtype=torch.float64)
        cos, sin = hf_cos_sin(torch.arange(9), 8, base=ours.rope_base, batch=2, half=name == "gpt_oss")
        with torch.no_grad():
            with float64_reference():
                ref = hf(x, position_embeddings=(cos, sin), attention_mask=masks[i])[0]
            torch.testing.assert_close(ours(x), ref, **TOL)
            if ours.sliding_window is not None:  # the window matters here: without it the result differs
                ours.sliding_window = None
                assert (ours(x) - ref).abs().max() > 1e-6
    expected = {"mistral": {(3, None, False, False)}, "qwen3": {(None, None, True, False)},
                "gemma2": {(3, 2.0, False, False), (None, 2.0, False, False)},
                "gemma3": {(3, None, True, False), (None, None, True, False)},
                "gpt_oss": {(3, None, False, True), (None, None, False, True)}}[name]
    assert kinds == expected


def test_gemma3n_kv_sharing_equals_transformers():
    import transformers as T
    from transformers.models.gemma3n.modeling_gemma3n import Gemma3nTextAttention

    torch.manual_seed(0)
    cfg = T.Gemma3nTextConfig(vocab_size=50, hidden_size=32, intermediate_size=32, num_hidden_layers=4,
                              num_attention_heads=4, num_key_value_heads=2, head_dim=8, sliding_window=3,
                              layer_types=["sliding_attention", "full_attention"] * 2, num_kv_shared_layers=2,
                              attn_implementation="eager")
    assert cfg.kv_sharing_modes == ["store", "store", "reuse", "reuse"]
    layers = [Gemma3nTextAttention(cfg, i).double().eval() for i in range(4)]
    with torch.no_grad():
        for layer in layers:
            for p in layer.parameters():
                p.normal_(0, 0.4)
    x = torch.randn(2, 9, 32, dtype=torch.float64)
    theirs_shared, ours_shared = {}, {}
    for layer in layers:
        ours = VariantAttention.from_hf(layer)
        assert ours.kv_shared == layer.is_kv_shared_layer and ours.scale == 1.0
        assert not hasattr(ours, "k_proj") or not ours.kv_shared  # a sharing layer has no k/v weights
        keep = sliding_window_mask(9, window=3) if layer.is_sliding else causal_mask(9)
        mask = torch.zeros(1, 1, 9, 9, dtype=torch.float64).masked_fill(~keep, torch.finfo(torch.float64).min)
        cos, sin = hf_cos_sin(torch.arange(9), 8, base=ours.rope_base, batch=2)
        with torch.no_grad(), float64_reference():
            ref = layer(x, (cos, sin), mask, shared_kv_states=theirs_shared)[0]
            if ours.kv_shared:
                out = ours(x, shared_kv=ours_shared[layer.layer_type])
            else:
                out, ours_shared[layer.layer_type] = ours(x, return_kv=True)
        torch.testing.assert_close(out, ref, **TOL)
    with pytest.raises(ValueError, match="shared_kv"):
        VariantAttention.from_hf(layers[3])(x)


def test_sinks_are_one_more_term_in_the_denominator_and_softcap_bounds():
    torch.manual_seed(0)
    m = VariantAttention(8, 2, 1, 4, sinks=True, dtype=torch.float64)
    with torch.no_grad():
        m.sinks.copy_(torch.tensor([0.5, -1.0], dtype=torch.float64))
    q, k, v = (torch.randn(1, h, 5, 4, dtype=torch.float64) for h in (2, 1, 1))
    keep = causal_mask(5)
    scores = (q @ k.transpose(-2, -1) / 2).masked_fill(~keep, float("-inf"))
    e = scores.exp()
    by_hand = (e / (e.sum(-1, keepdim=True) + m.sinks.exp()[:, None, None])) @ v
    torch.testing.assert_close(m.attend(q, k, v, keep), by_hand, **TOL)
    s = torch.linspace(-10, 10, 11, dtype=torch.float64)
    assert softcap(s, 5.0).abs().max() < 5.0 and (softcap(s, 5.0).diff() > 0).all()
    assert softcap(torch.tensor([1e4], dtype=torch.float64), 5.0).item() <= 5.0  # bounded, saturating
    assert max_logit(q, k) == pytest.approx(float((q @ k.transpose(-2, -1)).abs().max()) / 2)
    with pytest.raises(ValueError, match="cap"):
        softcap(s, 0.0)
    with pytest.raises(ValueError, match="num_kv_heads=3 must divide num_heads=4"):
        VariantAttention(8, 4, 3, 2)


def test_forward_refuses_a_bad_cache_shared_kv_or_dtype():
    d, H, Hkv, E = 8, 2, 1, 4
    m = VariantAttention(d, H, Hkv, E, dtype=torch.float64)
    shared = VariantAttention(d, H, Hkv, E, kv_shared=True, dtype=torch.float64)
    x = torch.randn(2, 5, d, dtype=torch.float64)
    with pytest.raises(TypeError, match=r"x must have the layer's dtype torch.float64, got torch.float32"):
        m(x.float())
    with pytest.raises(TypeError, match="cache must be None, a KVCache or a RingKVCache, got dict"):
        m(x, cache={})
    _, (k, v) = m(x, return_kv=True)
    assert k.shape == (2, Hkv, 5, E)
    shared(x, shared_kv=(k, v))  # the right pair is accepted
    with pytest.raises(TypeError, match="shared_kv must be a pair"):
        shared(x, shared_kv=k)
    with pytest.raises(ValueError, match=r"shared_kv keys must be \(B, Hkv, S, head_dim\) = \(2, 1, S >= 5, 4\).*\(2, 1, 3, 4\)"):
        shared(x, shared_kv=(k[:, :, :3], v[:, :, :3]))  # fewer shared positions than queries
    with pytest.raises(ValueError, match=r"shared_kv values must be .*got \(1, 1, 5, 4\)"):
        shared(x, shared_kv=(k, v[:1]))
    with pytest.raises(TypeError, match="shared_kv keys must have x's dtype torch.float64, got torch.float32"):
        shared(x, shared_kv=(k.float(), v))


# ----------------------------------------------------------------------------------------------
# issue 38: empty inputs, dtype edges, caches that cannot serve the layer
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("B,L", [(2, 0), (0, 5)])
def test_variant_attention_empty_input_gives_an_empty_output(B, L):
    from attn_lib.kv_cache import KVCache

    layer, cache = VariantAttention(16, 2, 1, 8, sliding_window=3, sinks=True), KVCache()
    out, (k, v) = layer(torch.randn(B, L, 16), cache=cache, return_kv=True)
    assert out.shape == (B, L, 16) and k.shape == v.shape == (B, 1, 0, 8) and cache.seq_len == 0


@pytest.mark.parametrize("kwargs,exc,words", [
    (dict(dtype=torch.int64), ValueError, "dtype must be a floating dtype"),
    (dict(softcap=1e39), ValueError, r"softcap must be a number in \[1.18e-38, 3.4e\+38\]"),
    (dict(softcap=1e-50), ValueError, "softcap must be a number in"),
    (dict(softcap=1e39, dtype=torch.float64), None, None),  # float64 holds it
])
def test_variant_attention_refuses_a_bad_dtype_or_a_cap_the_dtype_cannot_hold(kwargs, exc, words):
    if exc is None:
        VariantAttention(16, 2, 1, 8, **kwargs)
        return
    with pytest.raises(exc, match=words):
        VariantAttention(16, 2, 1, 8, **kwargs)


@pytest.mark.parametrize("cap", [1e39, 1e-50])
def test_softcap_refuses_caps_outside_the_dtypes_normal_range(cap):
    with pytest.raises(ValueError, match="cap must be a number in"):
        softcap(torch.randn(3), cap)  # 1e39 gave NaN (inf * 0), 1e-50 a cap of 0
    torch.testing.assert_close(softcap(torch.tensor([0.5], dtype=torch.float64), 1e39),
                               torch.tensor([0.5], dtype=torch.float64))


def test_variant_attention_refuses_ring_caches_that_cannot_serve_it_and_nan_sinks():
    from attn_lib.kv_cache import KVCache
    from attn_lib.windows import RingKVCache

    x = torch.randn(1, 5, 16)
    with pytest.raises(ValueError, match=r"RingKVCache\(window=2\) keeps fewer tokens than the layer's "
                                         r"sliding_window=3"):
        VariantAttention(16, 2, 1, 8, sliding_window=3)(x, cache=RingKVCache(2))
    with pytest.raises(ValueError, match="this layer has no sliding_window"):
        VariantAttention(16, 2, 1, 8)(x, cache=RingKVCache(8))
    VariantAttention(16, 2, 1, 8, sliding_window=3)(x, cache=RingKVCache(4))  # a larger ring is fine
    layer = VariantAttention(16, 2, 1, 8, sinks=True)
    with torch.no_grad():
        layer.sinks.fill_(float("nan"))
    with pytest.raises(ValueError, match=r"sinks \(the layer's parameter\) contains NaN"):
        layer(x)
    cache, first = KVCache(), VariantAttention(16, 2, 1, 8)
    first(x, cache=cache)
    with pytest.raises(ValueError, match="already holds the keys of another layer"):
        VariantAttention(16, 2, 1, 8)(x, cache=cache)


@pytest.mark.parametrize("q,k,kwargs,exc,words", [
    (torch.randn(0, 4), torch.randn(3, 4), {}, ValueError, "at least one query and one key"),
    (torch.randn(2, 4), torch.randn(3, 4, dtype=torch.float64), {}, TypeError, "must share one dtype"),
    (torch.randn(2, 4), torch.randn(3, 4), dict(scale="a"), TypeError, "scale must be a number"),
    (torch.randn(2, 4), torch.randn(3, 4), dict(scale=-1.0), ValueError, "scale must be None or a finite number > 0"),
    (torch.tensor([[float("nan"), 0.0]]), torch.randn(3, 2), {}, ValueError, "q contains NaN"),  # was a NaN
    (torch.full((2, 2), 3e38), torch.full((3, 2), 3e38), {}, ValueError, "overflow"),  # was NaN (inf - inf)
])
def test_max_logit_refuses_bad_input(q, k, kwargs, exc, words):
    with pytest.raises(exc, match=words):
        max_logit(q, k, **kwargs)
# ----------------------------------------------------------------- issue 35: decoding, gated attention, converters
def _chunks(x, sizes):
    """x (B, L, d) split along L into pieces of the given sizes (they sum to L)."""
    assert sum(sizes) == x.shape[1]
    return list(torch.split(x, sizes, dim=1))


def _decode(ours, x, sizes):
    """ours run over x piece by piece through the course's cache (a RingKVCache for a windowed layer)."""
    from attn_lib.kv_cache import KVCache
    from attn_lib.windows import RingKVCache

    cache = RingKVCache(ours.sliding_window) if ours.sliding_window is not None else KVCache()
    return torch.cat([ours(piece, cache=cache) for piece in _chunks(x, sizes)], dim=1)


PIECES = {"token by token": [1] * 9, "in chunks": [3, 1, 4, 1]}


@pytest.mark.parametrize("kv_heads", [4, 2, 1])  # GQA ratios 1, 2, 4
@pytest.mark.parametrize("name", ["mistral", "qwen3", "gemma2", "gemma3", "gpt_oss"])
def test_decoding_through_the_cache_equals_the_transformers_full_forward(name, kv_heads):
    config_cls, model_cls, extra = _case(name)
    torch.manual_seed(1)
    model = model_cls(config_cls(**{**COMMON, "num_key_value_heads": kv_heads}, **extra)).eval()
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "norm" in n or "sinks" in n:
                p.normal_(0, 0.5)
    masks = captured_attention_masks(model, torch.randint(0, 50, (3, 9)))
    model = model.double()
    for i, layer in enumerate(model.model.layers):
        hf, ours = layer.self_attn, VariantAttention.from_hf(layer.self_attn)
        assert ours.num_heads // ours.num_kv_heads == 4 // kv_heads
        x = torch.randn(3, 9, 32, dtype=torch.float64)  # a batch of 3
        cos, sin = hf_cos_sin(torch.arange(9), 8, base=ours.rope_base, batch=3, half=name == "gpt_oss")
        with torch.no_grad():
            with float64_reference():
                ref = hf(x, position_embeddings=(cos, sin), attention_mask=masks[i])[0]
            for how, sizes in PIECES.items():
                torch.testing.assert_close(_decode(ours, x, sizes), ref, **TOL, msg=f"layer {i}, {how}")


def _qwen3_next_attention(kv_heads, family="qwen3_next", partial=0.25):
    import transformers as T

    if family == "qwen3_next":
        from transformers.models.qwen3_next.modeling_qwen3_next import Qwen3NextAttention as Attn
        cfg_cls = T.Qwen3NextConfig
    else:
        from transformers.models.qwen3_5.modeling_qwen3_5 import Qwen3_5Attention as Attn
        cfg_cls = T.Qwen3_5TextConfig
    cfg = cfg_cls(vocab_size=50, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=kv_heads, head_dim=8, attn_implementation="eager",
                  rope_parameters={"rope_type": "default", "rope_theta": 100.0, "partial_rotary_factor": partial})
    layer = Attn(cfg, 1).double().eval()
    with torch.no_grad():
        for p in layer.parameters():
            p.normal_(0, 0.4)  # the init (zeros for Qwen3-Next's 1 + w norms) would hide a missing weight
    return layer


@pytest.mark.parametrize("kv_heads", [4, 2, 1])
@pytest.mark.parametrize("family", ["qwen3_next", "qwen3_5"])
def test_gated_attention_equals_qwen3_next_in_full_and_decoding(family, kv_heads):
    torch.manual_seed(2)
    hf = _qwen3_next_attention(kv_heads, family)
    ours = VariantAttention.from_hf(hf)
    assert ours.output_gate and ours.rotary_dim == 2 and ours.q_proj.out_features == 2 * 4 * 8
    x = torch.randn(2, 9, 32, dtype=torch.float64)
    mask = torch.zeros(1, 1, 9, 9, dtype=torch.float64).masked_fill(~causal_mask(9), torch.finfo(torch.float64).min)
    cos, sin = hf_cos_sin(torch.arange(9), 2, base=100.0, batch=2)  # partial RoPE: angles for 2 of the 8 dims
    with torch.no_grad():
        with float64_reference():
            ref = hf(x, (cos, sin), mask)[0]
        torch.testing.assert_close(ours(x), ref, **TOL)
        for how, sizes in PIECES.items():
            torch.testing.assert_close(_decode(ours, x, sizes), ref, **TOL, msg=how)
        with float64_reference():
            ref_full_rope = hf(x, hf_cos_sin(torch.arange(9), 8, base=100.0, batch=2), mask)[0]
        assert (ours(x) - ref_full_rope).abs().max() > 1e-3  # partial RoPE matters: rotating all 8 dims differs


def test_gated_attention_gate_is_a_per_head_sigmoid_before_o_proj():
    torch.manual_seed(3)
    m = VariantAttention(16, 2, 1, 4, output_gate=True, dtype=torch.float64)
    x = torch.randn(2, 5, 16, dtype=torch.float64)
    plain = VariantAttention(16, 2, 1, 4, dtype=torch.float64)
    with torch.no_grad():
        w = m.q_proj.weight.view(2, 2, 4, 16)  # (head, query | gate, E, d_model)
        plain.q_proj.weight.copy_(w[:, 0].reshape(8, 16))
        for n in ("k_proj", "v_proj", "o_proj"):
            getattr(plain, n).load_state_dict(getattr(m, n).state_dict())
        plain.o_proj.weight.copy_(torch.eye(16, 8, dtype=torch.float64))
        m.o_proj.weight.copy_(torch.eye(16, 8, dtype=torch.float64))
        gate = torch.sigmoid(x @ w[:, 1].reshape(8, 16).T)  # (B, L, H·E)
        by_hand = plain(x)[..., :8] * gate
        torch.testing.assert_close(m(x)[..., :8], by_hand, **TOL)
        assert (m(x)[..., :8] - plain(x)[..., :8]).abs().max() > 1e-3  # the gate changed something
    with pytest.raises(ValueError, match="rotary_dim must be an even int in \\[2, head_dim=4\\], got 6"):
        VariantAttention(16, 2, 1, 4, rotary_dim=6)
    with pytest.raises(TypeError, match="output_gate"):
        VariantAttention(16, 2, 1, 4, output_gate=1)


def test_gemma3_softcap_held_in_its_config_is_not_applied():
    """Gemma3Attention stores attn_logit_softcapping but its forward never passes it on: from_hf must not apply it."""
    config_cls, model_cls, extra = _case("gemma3")
    torch.manual_seed(4)
    model = model_cls(config_cls(**COMMON, **extra, attn_logit_softcapping=0.5)).eval().double()
    hf = model.model.layers[1].self_attn
    assert hf.attn_logit_softcapping == 0.5  # stored ...
    ours = VariantAttention.from_hf(hf)
    assert ours.softcap is None  # ... and not applied, as in transformers
    x = torch.randn(2, 9, 32, dtype=torch.float64)
    mask = torch.zeros(1, 1, 9, 9, dtype=torch.float64).masked_fill(~causal_mask(9), torch.finfo(torch.float64).min)
    cos, sin = hf_cos_sin(torch.arange(9), 8, base=ours.rope_base, batch=2)
    with torch.no_grad(), float64_reference():
        ref = hf(x, position_embeddings=(cos, sin), attention_mask=mask)[0]
        torch.testing.assert_close(ours(x), ref, **TOL)
        ours.softcap = 0.5  # applying it, as the old converter did, gives another answer
        assert (ours(x) - ref).abs().max() > 1e-3


@pytest.mark.parametrize("how", list(PIECES))
def test_gemma3n_kv_sharing_decodes_at_the_true_positions(how):
    """A KV-sharing layer's queries sit at the shared keys' last positions, not at 0..L-1 (issue 35, §4)."""
    import transformers as T
    from transformers.models.gemma3n.modeling_gemma3n import Gemma3nTextAttention

    from attn_lib.kv_cache import KVCache

    torch.manual_seed(5)
    for kv_heads in (4, 2, 1):
        cfg = T.Gemma3nTextConfig(vocab_size=50, hidden_size=32, intermediate_size=32, num_hidden_layers=4,
                                  num_attention_heads=4, num_key_value_heads=kv_heads, head_dim=8, sliding_window=3,
                                  layer_types=["sliding_attention", "full_attention"] * 2, num_kv_shared_layers=2,
                                  attn_implementation="eager")
        layers = [Gemma3nTextAttention(cfg, i).double().eval() for i in range(4)]
        with torch.no_grad():
            for layer in layers:
                for p in layer.parameters():
                    p.normal_(0, 0.4)
        x = torch.randn(2, 9, 32, dtype=torch.float64)
        theirs_shared, refs = {}, []
        with torch.no_grad(), float64_reference():
            for layer in layers:
                base = VariantAttention.from_hf(layer).rope_base
                keep = sliding_window_mask(9, window=3) if layer.is_sliding else causal_mask(9)
                mask = torch.zeros(1, 1, 9, 9, dtype=torch.float64).masked_fill(~keep, torch.finfo(torch.float64).min)
                cos, sin = hf_cos_sin(torch.arange(9), 8, base=base, batch=2)
                refs.append(layer(x, (cos, sin), mask, shared_kv_states=theirs_shared)[0])
        ours = [VariantAttention.from_hf(layer) for layer in layers]
        caches = {i: KVCache() for i, m in enumerate(ours) if not m.kv_shared}  # the storing layers keep every token
        outs = [[] for _ in ours]
        with torch.no_grad():
            for piece in _chunks(x, PIECES[how]):
                shared = {}
                for i, (m, layer) in enumerate(zip(ours, layers)):
                    if m.kv_shared:
                        outs[i].append(m(piece, shared_kv=shared[layer.layer_type]))
                    else:
                        out, shared[layer.layer_type] = m(piece, cache=caches[i], return_kv=True)
                        outs[i].append(out)
        for i, (out, ref) in enumerate(zip(outs, refs)):
            torch.testing.assert_close(torch.cat(out, 1), ref, **TOL, msg=f"Hkv={kv_heads}, layer {i}, {how}")


try:
    from hypothesis import given, settings
    from hypothesis import strategies as st
except ImportError:  # pragma: no cover
    given = None

if given is not None:
    @settings(max_examples=25, deadline=None)
    @given(kv_heads=st.sampled_from([4, 2, 1]), window=st.sampled_from([None, 1, 3]), sinks=st.booleans(),
           cap=st.sampled_from([None, 1.5]), qk_norm=st.booleans(), gate=st.booleans(), rotary=st.sampled_from([None, 2]),
           cuts=st.lists(st.integers(1, 4), min_size=1, max_size=8), seed=st.integers(0, 1000))
    def test_any_switches_decode_in_any_chunks_equal_to_the_full_forward(kv_heads, window, sinks, cap, qk_norm, gate,
                                                                          rotary, cuts, seed):
        """Every combination of the switches, decoded through its cache in random pieces, equals the full forward."""
        torch.manual_seed(seed)
        m = VariantAttention(16, 4, kv_heads, 4, sliding_window=window, sinks=sinks, softcap=cap, qk_norm=qk_norm,
                             output_gate=gate, rotary_dim=rotary, dtype=torch.float64)
        if sinks:
            with torch.no_grad():
                m.sinks.normal_()
        x = torch.randn(2, sum(cuts), 16, dtype=torch.float64)
        with torch.no_grad():
            torch.testing.assert_close(_decode(m, x, cuts), m(x), **TOL)


@pytest.mark.parametrize("norm_eps", [-1e-3, -1.0, float("nan")])
def test_variant_attention_refuses_a_norm_eps_that_gives_nan(norm_eps):
    with pytest.raises(ValueError, match="norm_eps must be"):  # was accepted; a zero head then gave NaN
        VariantAttention(8, 2, 1, 4, qk_norm=True, norm_eps=norm_eps)


# ----------------------------------------------------------------- issue 35: Gemma 4 (k_eq_v, per-layer KV heads)
G4_TYPES = ["sliding_attention", "sliding_attention", "full_attention", "sliding_attention", "full_attention"]


def _gemma4(kv_heads, global_kv_heads, k_eq_v=True, seed=0):
    """A tiny random Gemma 4 text model: 5 layers, the last 2 reuse the K/V of layers 1 (sliding) and 2 (full)."""
    import transformers as T

    cfg = T.Gemma4TextConfig(vocab_size=50, hidden_size=32, intermediate_size=32, num_hidden_layers=5,
                             num_attention_heads=4, num_key_value_heads=kv_heads, head_dim=8, global_head_dim=16,
                             num_global_key_value_heads=global_kv_heads, attention_k_eq_v=k_eq_v,
                             num_kv_shared_layers=2, sliding_window=3, layer_types=list(G4_TYPES),
                             hidden_size_per_layer_input=4, vocab_size_per_layer_input=50,
                             rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 100.0},
                                              "full_attention": {"rope_type": "proportional", "rope_theta": 1000.0,
                                                                 "partial_rotary_factor": 0.5}},
                             attn_implementation="eager", bos_token_id=None, eos_token_id=None, pad_token_id=None)
    assert cfg.kv_sharing_modes == [None, "store", "store", "reuse", "reuse"]
    torch.manual_seed(seed)
    model = T.Gemma4ForCausalLM(cfg).eval()
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "self_attn" in n:
                p.normal_(0, 0.4)  # the init (ones for the norms) would hide a missing norm weight
    return model


def _g4_cos_sin(layer_type, E, L, batch):
    """The RoPE angles transformers' Gemma 4 feeds a layer, derived here in float64: the sliding layers' default
    RoPE (base 100), the full layers' proportional RoPE (base 1000, half the pairs turn, denominator E)."""
    if layer_type == "sliding_attention":
        return hf_cos_sin(torch.arange(L), E, base=100.0, batch=batch)
    i = torch.arange(E // 2, dtype=torch.float64)
    theta = torch.where(i < E // 4, 1.0 / 1000.0 ** (2 * i / E), torch.zeros_like(i))
    angles = torch.arange(L, dtype=torch.float64)[:, None] * theta
    emb = torch.cat([angles, angles], -1).expand(batch, L, E)
    return emb.cos(), emb.sin()


@pytest.mark.parametrize("kv_heads,global_kv_heads,k_eq_v", [(4, 2, True), (2, 1, True), (1, 1, True), (2, 2, False)])
def test_gemma4_attention_equals_transformers_in_full_and_decoding(kv_heads, global_kv_heads, k_eq_v):
    """Every layer of a tiny Gemma 4 (windows, KV sharing, k_eq_v, per-layer head_dim and KV heads, proportional RoPE)
    equals Gemma4TextAttention in float64, over the full sequence and decoded token by token and in chunks."""
    from attn_lib.kv_cache import KVCache
    from attn_lib.variants import Gemma4Attention
    from attn_lib.windows import RingKVCache

    model = _gemma4(kv_heads, global_kv_heads, k_eq_v)
    masks = captured_attention_masks(model, torch.randint(0, 50, (3, 9)))  # the masks Gemma 4 builds itself
    rotary = model.model.rotary_emb
    model = model.double()
    layers = [layer.self_attn for layer in model.model.layers]
    ours = [Gemma4Attention.from_hf(hf) for hf in layers]
    # what the forward applies, read from the module: per-layer E and Hkv, k_eq_v on the full layers only
    expected_kv = {"sliding_attention": kv_heads, "full_attention": global_kv_heads if k_eq_v else kv_heads}
    for m, hf in zip(ours, layers):
        assert m.head_dim == (16 if hf.layer_type == "full_attention" else 8)
        assert m.num_kv_heads == expected_kv[hf.layer_type]
        assert m.k_eq_v == (k_eq_v and hf.layer_type == "full_attention" and not hf.is_kv_shared_layer)
        assert (m.v_proj is m.k_proj) if m.k_eq_v else True
        assert m.sliding_window == (3 if hf.layer_type == "sliding_attention" else None)
        assert m.rotated_pairs == (4 if hf.layer_type == "full_attention" else None)
    for layer_type, E in (("sliding_attention", 8), ("full_attention", 16)):  # our angles are transformers' angles
        cos, _ = _g4_cos_sin(layer_type, E, 9, 1)
        theirs, _ = rotary(torch.zeros(1, dtype=torch.float32), torch.arange(9)[None], layer_type)
        torch.testing.assert_close(cos.float(), theirs, rtol=0, atol=1e-5)
    x = torch.randn(3, 9, 32, dtype=torch.float64)  # a batch of 3
    refs, theirs_shared, ours_shared = [], {}, {}
    with torch.no_grad(), float64_reference():
        for i, (m, hf) in enumerate(zip(ours, layers)):
            refs.append(hf(x, _g4_cos_sin(hf.layer_type, m.head_dim, 9, 3), masks[i],
                           shared_kv_states=theirs_shared)[0])
            if m.kv_shared:
                out = m(x, shared_kv=ours_shared[hf.layer_type])
            else:
                out, ours_shared[hf.layer_type] = m(x, return_kv=True)
            torch.testing.assert_close(out, refs[-1], **TOL, msg=f"layer {i}, full sequence")
    stores = [hf.store_full_length_kv for hf in layers]
    for how, sizes in PIECES.items():
        # the storing layers keep every token (their K/V serve the sharing layers); layer 0 needs only its window
        caches = [None if m.kv_shared else KVCache() if stores[i] or m.sliding_window is None
                  else RingKVCache(m.sliding_window) for i, m in enumerate(ours)]
        outs = [[] for _ in ours]
        with torch.no_grad():
            for piece in _chunks(x, sizes):
                shared = {}
                for i, (m, hf) in enumerate(zip(ours, layers)):
                    if m.kv_shared:
                        outs[i].append(m(piece, shared_kv=shared[hf.layer_type]))
                    else:
                        out, shared[hf.layer_type] = m(piece, cache=caches[i], return_kv=True)
                        outs[i].append(out)
        for i, (out, ref) in enumerate(zip(outs, refs)):
            torch.testing.assert_close(torch.cat(out, 1), ref, **TOL, msg=f"layer {i}, {how}")


def test_gemma4_k_eq_v_and_proportional_rope_matter():
    """Each Gemma 4 switch changes the answer: values from a separate v_proj, or RoPE on all pairs, differ."""
    from attn_lib.variants import Gemma4Attention, proportional_rope

    model = _gemma4(2, 1, True, seed=3).double()
    hf = model.model.layers[2].self_attn  # a storing full-attention layer: k_eq_v and proportional RoPE
    ours = Gemma4Attention.from_hf(hf)
    x = torch.randn(2, 9, 32, dtype=torch.float64)
    mask = torch.zeros(1, 1, 9, 9, dtype=torch.float64).masked_fill(~causal_mask(9), torch.finfo(torch.float64).min)
    with torch.no_grad(), float64_reference():
        ref = hf(x, _g4_cos_sin("full_attention", 16, 9, 2), mask, shared_kv_states={})[0]
        torch.testing.assert_close(ours(x), ref, **TOL)
        ours.rotated_pairs = 8  # every pair turning
        assert (ours(x) - ref).abs().max() > 1e-3
        ours.rotated_pairs = 4
        ours.v_proj = torch.nn.Linear(32, 16, bias=False, dtype=torch.float64)  # separate values
        assert (ours(x) - ref).abs().max() > 1e-3
    t = torch.randn(2, 5, 8, dtype=torch.float64)
    same = proportional_rope(t, torch.arange(5), base=100.0, rotated_pairs=0)
    torch.testing.assert_close(same, t, rtol=0, atol=0)  # no pair turns
    full = proportional_rope(t, torch.arange(5), base=100.0, rotated_pairs=4)
    from attn_lib.positional import apply_rope

    torch.testing.assert_close(full, apply_rope(t, torch.arange(5), base=100.0), **TOL)  # every pair: plain RoPE
    half = proportional_rope(t, torch.arange(5), base=100.0, rotated_pairs=2)
    torch.testing.assert_close(half[..., [2, 3, 6, 7]], t[..., [2, 3, 6, 7]], rtol=0, atol=0)  # the top of each half
    with pytest.raises(ValueError, match=r"rotated_pairs must be an int in \[0, head_dim/2=4\], got 5"):
        proportional_rope(t, torch.arange(5), base=100.0, rotated_pairs=5)
    with pytest.raises(ValueError, match="k_eq_v=True needs the layer's own k_proj"):
        Gemma4Attention(16, 2, 1, 8, k_eq_v=True, kv_shared=True)
    with pytest.raises(TypeError, match="Gemma4Attention.from_hf expects"):
        Gemma4Attention.from_hf(torch.nn.Linear(2, 2))
