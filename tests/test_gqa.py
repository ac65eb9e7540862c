"""attn_lib.gqa against torch and HuggingFace.

What is proven here:
- the head grouping equals torch's ``enable_gqa=True`` and HuggingFace's ``repeat_kv`` (LLaMA);
- grouped_query_attention equals torch's SDPA with ``enable_gqa=True``;
- to_gqa is the identity at num_kv_heads == num_heads and equals the model with pooled heads
  repeated; mean_pool_kv_heads equals a loop over the groups.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

pytestmark = pytest.mark.usefixtures("one_thread")

from attn_lib import gqa
from attn_lib.gqa import (grouped_query_attention, kv_head_for_query_head, mean_pool_kv_heads, query_groups,
                          repeat_kv, to_gqa)
from attn_lib.mha import MultiHeadAttention

hf_llama = pytest.importorskip("transformers.models.llama.modeling_llama")

heads = st.tuples(st.integers(1, 6), st.integers(1, 6))  # (num_kv_heads, group size)


# ---------------------------------------------------------------------------------------------
# grouping convention
# ---------------------------------------------------------------------------------------------


@given(heads)
def test_grouping_matches_hf_repeat_kv_and_torch(hg):
    hkv, g = hg
    hq = hkv * g
    owner = kv_head_for_query_head(hq, hkv)
    # label KV head h with the value h and let HuggingFace's repeat_kv say where each one lands
    labels = torch.arange(hkv, dtype=torch.float64).view(1, hkv, 1, 1)
    placed = hf_llama.repeat_kv(labels, g).flatten().long().tolist()
    assert owner == placed
    assert owner == torch.arange(hkv).repeat_interleave(g).tolist()
    groups = query_groups(hq, hkv)
    assert [j for grp in groups for j in grp] == list(range(hq))
    assert all(owner[j] == h for h, grp in enumerate(groups) for j in grp)


def test_describe_grouping():
    assert gqa.describe_grouping(32, 8) == "GQA: 32 query heads in 8 groups of 4; the KV cache is 8/32 = 25% of MHA's"
    assert gqa.describe_grouping(32, 32).startswith("MHA: 32 query heads in 32 groups of 1")
    assert gqa.describe_grouping(32, 1) == "MQA: 32 query heads in 1 group of 32; the KV cache is 1/32 = 3.125% of MHA's"
    with pytest.raises(ValueError, match="must divide"):
        gqa.describe_grouping(32, 3)


def test_grouping_example_and_errors():
    assert query_groups(32, 8)[0] == [0, 1, 2, 3] and query_groups(32, 8)[7] == [28, 29, 30, 31]
    assert kv_head_for_query_head(8, 2) == [0, 0, 0, 0, 1, 1, 1, 1]  # repeated in place, not tiled
    with pytest.raises(ValueError, match="num_kv_heads must divide num_heads=12.*possible values"):
        kv_head_for_query_head(12, 5)
    with pytest.raises(TypeError, match="num_heads"):
        query_groups(8.0, 2)
    with pytest.raises(ValueError, match="num_kv_heads must be an int >= 1, got 0"):
        query_groups(8, 0)


@given(heads, st.integers(1, 2), st.integers(1, 5), st.integers(1, 4))
def test_repeat_kv_equals_hf(hg, b, s, d):
    hkv, g = hg
    x = torch.randn(b, hkv, s, d, dtype=torch.float64)
    got = repeat_kv(x, g)
    assert torch.equal(got, hf_llama.repeat_kv(x, g))
    assert torch.equal(got, x.repeat_interleave(g, dim=1))


def test_repeat_kv_errors():
    with pytest.raises(ValueError, match="at least 3 dims"):
        repeat_kv(torch.zeros(2, 3), 2)
    with pytest.raises(ValueError, match="n_rep must be an int >= 1, got 0"):
        repeat_kv(torch.zeros(1, 2, 3, 4), 0)
    with pytest.raises(TypeError, match="torch.Tensor"):
        repeat_kv([[1.0]], 2)


@st.composite
def gqa_case(draw):
    hkv, g = draw(heads)
    b, L, S, E = draw(st.integers(1, 2)), draw(st.integers(1, 5)), draw(st.integers(1, 6)), draw(st.integers(1, 6))
    kind = draw(st.sampled_from(["none", "causal", "bool_bhls", "bool_b1ls", "float_ls"]))
    return hkv, g, b, L, S, E, kind, draw(st.integers(0, 2**31 - 1))


@settings(max_examples=60)
@given(gqa_case())
def test_grouped_query_attention_equals_torch_enable_gqa(case):
    hkv, g, b, L, S, E, kind, seed = case
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(b, hkv * g, L, E, dtype=torch.float64, generator=gen)
    k = torch.randn(b, hkv, S, E, dtype=torch.float64, generator=gen)
    v = torch.randn(b, hkv, S, E + 1, dtype=torch.float64, generator=gen)
    mask, causal = None, kind == "causal"
    if kind == "bool_bhls":
        mask = torch.rand(b, hkv * g, L, S, generator=gen) > 0.3
        mask[..., 0] = True  # torch's function returns NaN for fully masked rows
    elif kind == "bool_b1ls":
        mask = torch.rand(b, 1, L, S, generator=gen) > 0.3
        mask[..., 0] = True
    elif kind == "float_ls":
        mask = torch.randn(L, S, dtype=torch.float64, generator=gen)
    want = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal, enable_gqa=True)
    got, w = grouped_query_attention(q, k, v, mask, is_causal=causal)
    torch.testing.assert_close(got, want, atol=1e-12, rtol=1e-10)
    # the weights are those of the repeated heads (HF's eager attention with repeat_kv)
    scores = q @ repeat_kv(k, g).transpose(-2, -1) / math.sqrt(E)
    if causal:
        scores = scores.masked_fill(~torch.ones(L, S, dtype=torch.bool).tril(), float("-inf"))
    elif mask is not None:
        scores = scores.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else scores + mask
    ref_w = scores.softmax(-1).nan_to_num(0.0)
    torch.testing.assert_close(w, ref_w, atol=1e-12, rtol=1e-10)


def test_grouped_query_attention_errors():
    q, k = torch.randn(1, 6, 2, 4), torch.randn(1, 4, 3, 4)
    with pytest.raises(ValueError, match=r"query heads H=6 to be a multiple of the number of key/value heads Hkv=4 \(query shape \(1, 6, 2, 4\)"):
        grouped_query_attention(q, k, k)
    with pytest.raises(ValueError, match=r"attn_mask of shape \(5, 3\) must broadcast to the scores. shape \(1, 4, 2, 3\)"):
        grouped_query_attention(torch.randn(1, 4, 2, 4), torch.randn(1, 2, 3, 4), torch.randn(1, 2, 3, 4),
                                torch.ones(5, 3, dtype=torch.bool))
    with pytest.raises(ValueError, match="either attn_mask or is_causal"):
        grouped_query_attention(q, q, q, torch.ones(2, 2, dtype=torch.bool), is_causal=True)


def test_grouped_query_attention_names_the_shapes_the_caller_passed():
    q, k = torch.randn(2, 4, 3, 8), torch.randn(1, 2, 3, 8)
    k3 = torch.randn(3, 2, 3, 8)
    with pytest.raises(ValueError, match=r"broadcastable batch dims .* query shape \(2, 4, 3, 8\) .* key shape \(3, 2, 3, 8\)"):
        grouped_query_attention(q, k3, k3)
    with pytest.raises(TypeError, match="is_causal must be a bool .* got str 'yes'"):
        grouped_query_attention(q, k, k, is_causal="yes")
    with pytest.raises(ValueError, match=r"query contains NaN"):
        grouped_query_attention(q.masked_fill(q > 2, float("nan")), k, k)
    bad = torch.zeros(3, 3)
    bad[0, 1] = float("inf")
    with pytest.raises(ValueError, match=r"attn_mask contains \+inf"):
        grouped_query_attention(q, k, k, bad)
    blocked = torch.zeros(3, 3).masked_fill(~torch.ones(3, 3, dtype=torch.bool).tril(), float("-inf"))
    torch.testing.assert_close(grouped_query_attention(q, k, k, blocked)[0], grouped_query_attention(q, k, k, is_causal=True)[0])
    with pytest.raises(ValueError, match=r"scores query @ keyᵀ \* scale overflow torch.float32"):
        grouped_query_attention(q * 1e20, k * 1e20, k)


def test_mean_pool_kv_heads_refuses_integer_weights():
    with pytest.raises(TypeError, match="weight must have a floating dtype .* got torch.int64"):
        mean_pool_kv_heads(torch.ones(8, 3, dtype=torch.long), 4, 2)


# ---------------------------------------------------------------------------------------------
# converting trained layers: to_gqa and the MiniLM wrapper
# ---------------------------------------------------------------------------------------------


@given(heads, st.integers(1, 3), st.integers(1, 5))
def test_mean_pool_kv_heads_matches_loop(hg, head_dim, d_in):
    hkv, g = hg
    hq = hkv * g
    w = torch.randn(hq * head_dim, d_in, dtype=torch.float64)
    got = mean_pool_kv_heads(w, hq, hkv)
    heads_ = [w[j * head_dim:(j + 1) * head_dim] for j in range(hq)]
    want = torch.cat([sum(heads_[j] for j in grp) / len(grp) for grp in query_groups(hq, hkv)])
    torch.testing.assert_close(got, want)
    b = torch.randn(hq * head_dim, dtype=torch.float64)
    assert mean_pool_kv_heads(b, hq, hkv).shape == (hkv * head_dim,)


def test_to_gqa_identity_and_reference():
    torch.manual_seed(0)
    mha = MultiHeadAttention(48, 6, rope_base=10000.0).double().eval()
    x = torch.randn(2, 5, 48, dtype=torch.float64)
    same = to_gqa(mha, 6)
    assert same is not mha
    for a, b in zip(same.state_dict().values(), mha.state_dict().values()):
        assert torch.equal(a, b)
    torch.testing.assert_close(same(x, is_causal=True)[0], mha(x, is_causal=True)[0], atol=0, rtol=0)
    for hkv in (3, 2, 1):
        small = to_gqa(mha, hkv)
        assert small.num_kv_heads == hkv and small.k_proj.out_features == hkv * 8
        # reference: the original MHA with each pooled head copied back to every head of its group
        ref = MultiHeadAttention(48, 6, rope_base=10000.0).double().eval()
        ref.load_state_dict(mha.state_dict())
        with torch.no_grad():
            for name in ("k_proj", "v_proj"):
                for p in ("weight", "bias"):
                    pooled = mean_pool_kv_heads(getattr(getattr(mha, name), p), 6, hkv)
                    per_head = pooled.reshape(hkv, 8, *pooled.shape[1:]).repeat_interleave(6 // hkv, dim=0)
                    getattr(getattr(ref, name), p).copy_(per_head.reshape(48, *pooled.shape[1:]))
        torch.testing.assert_close(small(x, is_causal=True)[0], ref(x, is_causal=True)[0], atol=1e-12, rtol=1e-10)
    with pytest.raises(ValueError, match="must divide the layer's current num_kv_heads=6"):
        to_gqa(mha, 4)
    with pytest.raises(ValueError, match="must divide the layer's current num_kv_heads=2"):
        to_gqa(to_gqa(mha, 2), 3)
    with pytest.raises(TypeError, match="MultiHeadAttention"):
        to_gqa(torch.nn.Linear(2, 2), 1)


# ---------------------------------------------------------------------------------------------
# model_to_gqa and the uptraining of notebook 08, section 6
# ---------------------------------------------------------------------------------------------
def test_model_to_gqa_converts_every_attention_layer_like_to_gqa():
    from attn_lib.gqa import model_to_gqa, to_gqa
    from attn_lib.models.seq2seq import Seq2SeqTransformer

    torch.manual_seed(0)
    model = Seq2SeqTransformer(11, 13, d_model=32, num_heads=4, num_encoder_layers=1, num_decoder_layers=1,
                               d_ff=64, max_len=12).eval()
    converted = model_to_gqa(model, 2)
    layers = {n: m for n, m in model.named_modules() if isinstance(m, MultiHeadAttention)}
    new_layers = {n: m for n, m in converted.named_modules() if isinstance(m, MultiHeadAttention)}
    assert set(layers) == set(new_layers) and len(layers) == 3  # encoder self, decoder self, cross
    x = torch.randn(2, 5, 32)
    for name, layer in layers.items():
        assert layer.num_kv_heads == 4 and new_layers[name].num_kv_heads == 2  # the original is unchanged
        torch.testing.assert_close(new_layers[name](x, x, x)[0], to_gqa(layer, 2)(x, x, x)[0])
    # everything that is not a key/value projection is copied unchanged
    old, new = model.state_dict(), converted.state_dict()
    for k in old:
        if ".k_proj." in k or ".v_proj." in k:
            assert new[k].shape[0] == old[k].shape[0] // 2
        else:
            torch.testing.assert_close(new[k], old[k])
    # num_kv_heads equal to the layers' is an identical model
    src, tgt = torch.randint(3, 11, (2, 6)), torch.randint(3, 13, (2, 4))
    torch.testing.assert_close(model_to_gqa(model, 4)(src, tgt).logits, model(src, tgt).logits)


def test_model_to_gqa_errors():
    from attn_lib.gqa import model_to_gqa

    with pytest.raises(TypeError, match="model must be a torch.nn.Module"):
        model_to_gqa("a model", 2)
    with pytest.raises(ValueError, match="no attn_lib MultiHeadAttention"):
        model_to_gqa(torch.nn.Linear(4, 4), 2)
    with pytest.raises(ValueError, match="layer 'self_attn'.*num_kv_heads=3 must divide"):
        model_to_gqa(torch.nn.ModuleDict({"self_attn": MultiHeadAttention(16, 4)}), 3)
    single = model_to_gqa(MultiHeadAttention(16, 4), 1)  # the model may itself be one layer
    assert single.num_kv_heads == 1


def test_uptraining_needs_the_pooled_checkpoint_not_just_the_steps():
    """Notebook 08, section 6 says: from random weights the same 150 uptraining steps reach only about 12 % exact
    match (measured: 12.0 % on 500 test dates), against >= 99 % from the mean-pooled checkpoint (asserted in the
    notebook). The first half here."""
    from attn_lib.course.data import SOURCE_VOCAB, TARGET_VOCAB, load_splits
    from attn_lib.gqa import model_to_gqa
    from attn_lib.models.seq2seq import Seq2SeqTransformer
    from attn_lib.course.train import DATE_MODEL_CONFIG, exact_match, predict_seq2seq, uptrain_date_model

    torch.manual_seed(0)
    scratch = model_to_gqa(Seq2SeqTransformer(len(SOURCE_VOCAB), len(TARGET_VOCAB), **DATE_MODEL_CONFIG), 2)
    uptrain_date_model(scratch, progress=False)
    test = load_splits()["test"][:500]
    with torch.no_grad():
        accuracy = exact_match(test, predict_seq2seq(scratch, test)).accuracy
    assert 0.05 < accuracy < 0.25, accuracy
