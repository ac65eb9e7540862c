"""attn_lib.course.hf: GQA and KV transforms inside the bundled MiniLM (a HuggingFace BERT), against the model itself."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

pytestmark = pytest.mark.usefixtures("one_thread")

from attn_lib.gqa import to_gqa
from attn_lib.course.hf import GQABertSelfAttention, bert_kv_transform, bert_qkv, bert_to_gqa, mean_pooled_embeddings
from attn_lib.mha import MultiHeadAttention
from attn_lib.quantization import fake_quantize_kv

heads = st.tuples(st.integers(1, 6), st.integers(1, 6))  # (num_kv_heads, group size)


def test_bert_gqa_wrapper_matches_hf_and_to_gqa(pretrained):
    tokenizer, model = pretrained
    layer = model.encoder.layer[2].attention.self
    enc = tokenizer(["the cat sat on the mat.", "hello"], return_tensors="pt", padding=True)
    with torch.no_grad():
        hidden = model.embeddings(input_ids=enc["input_ids"], token_type_ids=enc["token_type_ids"])
        pad = enc["attention_mask"].bool()
        add = torch.zeros(pad.shape, dtype=hidden.dtype).masked_fill(~pad, torch.finfo(hidden.dtype).min)[:, None, None]
        want = layer(hidden, attention_mask=add)[0]
        same = GQABertSelfAttention.from_hf(layer, 12)(hidden, attention_mask=add)[0]
        torch.testing.assert_close(same, want, atol=1e-6, rtol=1e-5)  # 12 KV heads: HF's own layer
        for hkv in (6, 4, 2, 1):
            wrapped = GQABertSelfAttention.from_hf(layer, hkv)
            assert wrapped.key.out_features == hkv * 32
            ours = to_gqa(MultiHeadAttention.from_hf(layer), hkv)
            got = ours(hidden, padding_mask=pad)[0]
            torch.testing.assert_close(wrapped(hidden, attention_mask=add)[0][pad], got[pad], atol=1e-5, rtol=1e-4)
    with pytest.raises(TypeError, match="BertSelfAttention"):
        GQABertSelfAttention.from_hf(torch.nn.Linear(2, 2), 1)


def test_bert_to_gqa_and_kv_transform(pretrained):
    tokenizer, model = pretrained
    sents = ["the cat sat on the mat.", "She drank her tea because she was thirsty"]
    base = mean_pooled_embeddings(tokenizer, model, sents)
    torch.testing.assert_close(base.norm(dim=-1), torch.ones(2))
    same = bert_to_gqa(model, 12)
    torch.testing.assert_close(mean_pooled_embeddings(tokenizer, same, sents), base, atol=1e-5, rtol=1e-4)
    mqa = bert_to_gqa(model, 1)
    assert type(model.encoder.layer[0].attention.self).__name__ == "BertSelfAttention"  # original untouched
    cos = (mean_pooled_embeddings(tokenizer, mqa, sents) * base).sum(-1)
    assert bool((cos < 0.999).all())  # pooling really changes the model
    # transforms: identity is a no-op, hooks are removed afterwards, fp16 rounding barely matters
    with bert_kv_transform(model, lambda t: t):
        torch.testing.assert_close(mean_pooled_embeddings(tokenizer, model, sents), base)
    with bert_kv_transform(model, lambda t: fake_quantize_kv(t, 4)):
        q4 = mean_pooled_embeddings(tokenizer, model, sents, one_by_one=True)
    assert not any(l.attention.self.key._forward_hooks for l in model.encoder.layer)
    assert 0.9 < float((q4 * base).sum(-1).min()) < 0.99999
    with bert_kv_transform(mqa, lambda t: t * 0):
        zeroed = mean_pooled_embeddings(tokenizer, mqa, sents)
    assert all(l.attention.self.kv_transform is None for l in mqa.encoder.layer)
    assert not torch.allclose(zeroed, mean_pooled_embeddings(tokenizer, mqa, sents))
    with pytest.raises(TypeError, match="BertModel"):
        bert_to_gqa(torch.nn.Linear(2, 2), 1)


def test_bert_qkv_reproduces_the_models_attentions(pretrained):
    tokenizer, model = pretrained
    text = "the cat sat on the mat."
    qkv = bert_qkv(tokenizer, model, text)
    with torch.no_grad():
        att = model(**tokenizer(text, return_tensors="pt"), output_attentions=True).attentions
    assert len(qkv) == 6 and qkv[0][1].shape == (1, 12, 9, 32)
    for (q, k, v), a in zip(qkv, att):
        torch.testing.assert_close((q @ k.transpose(-2, -1) / math.sqrt(32)).softmax(-1), a, atol=1e-6, rtol=1e-5)
    assert not any(l.attention.self.key._forward_hooks for l in model.encoder.layer)
