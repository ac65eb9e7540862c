"""attn_lib.mha: MultiHeadAttention.from_hf equals HuggingFace's BERT, GPT-2 and Llama attention; head_dim,
average_attn_weights and the argument errors of the module (the decoding Llama is in tests/models/test_lm_from_hf.py).

Tiny random-initialised models built from transformers configs (no download), in float64.
"""

from __future__ import annotations

import pytest
import torch

from attn_lib.mha import MultiHeadAttention

from references import HF_ROPE_TOL, capture as _capture, tiny_llama as _tiny_llama


@pytest.mark.parametrize("head_dim, num_kv_heads, bias", [(None, 2, False), (12, 2, False), (6, 1, True), (8, 4, False)])
def test_from_hf_llama_attention(head_dim, num_kv_heads, bias):
    model = _tiny_llama(head_dim, num_kv_heads, bias=bias)
    layers = model.model.layers
    seen, handles = _capture(model, [layer.self_attn for layer in layers])
    ids = torch.randint(0, 61, (2, 9))
    with torch.no_grad():
        model(ids)
    for h in handles:
        h.remove()
    for i, layer in enumerate(layers):
        ours = MultiHeadAttention.from_hf(layer.self_attn)
        assert ours.head_dim == layer.self_attn.head_dim and ours.num_kv_heads == num_kv_heads
        assert ours.rope_base == 500.0 and ours.q_proj.weight.dtype == torch.float64
        if head_dim == 12:
            assert ours.num_heads * ours.head_dim == 48 != ours.d_model == 32
        x, expected = seen[i]
        out, _ = ours(x, is_causal=True)
        torch.testing.assert_close(out, expected, **HF_ROPE_TOL)
        assert not torch.allclose(ours(x)[0], expected, **HF_ROPE_TOL)  # not causal: differs


def test_from_hf_gpt2_attention():
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    cfg = GPT2Config(vocab_size=50, n_positions=32, n_embd=24, n_layer=2, n_head=3, attn_implementation="eager")
    model = GPT2LMHeadModel(cfg).double().eval()
    blocks = model.transformer.h
    seen, handles = _capture(model, [b.attn for b in blocks])
    with torch.no_grad():
        model(torch.randint(0, 50, (2, 7)))
    for h in handles:
        h.remove()
    for i, block in enumerate(blocks):
        ours = MultiHeadAttention.from_hf(block.attn)
        # Conv1D stores (in, out): our nn.Linear weight is its transpose
        torch.testing.assert_close(ours.q_proj.weight, block.attn.c_attn.weight[:, :24].T)
        x, expected = seen[i]
        out, _ = ours(x, is_causal=True)
        torch.testing.assert_close(out, expected, rtol=1e-12, atol=1e-12)
        # without the causal mask it differs: the comparison can fail
        assert not torch.allclose(ours(x)[0], expected)


def test_from_hf_tiny_random_bert():
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=40, hidden_size=24, num_hidden_layers=2, num_attention_heads=4,
                     intermediate_size=32, attn_implementation="eager")
    model = BertModel(cfg).double().eval()
    layers = model.encoder.layer
    seen, handles = _capture(model, [layer.attention.self for layer in layers])
    mask = torch.tensor([[1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0]])
    with torch.no_grad():
        model(torch.randint(0, 40, (2, 6)), attention_mask=mask)
    for h in handles:
        h.remove()
    for i, layer in enumerate(layers):
        x, expected = seen[i]
        out, _ = MultiHeadAttention.from_hf(layer.attention.self)(x, padding_mask=mask)
        torch.testing.assert_close(out, expected, rtol=1e-12, atol=1e-12)


def test_from_hf_refuses_what_it_cannot_copy():
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

    gpt2 = GPT2LMHeadModel(GPT2Config(n_embd=8, n_layer=1, n_head=2, vocab_size=10, scale_attn_by_inverse_layer_idx=True))
    with pytest.raises(ValueError, match="scale_attn_by_inverse_layer_idx"):
        MultiHeadAttention.from_hf(gpt2.transformer.h[0].attn)
    with pytest.raises(ValueError, match="out_proj is only for BERT"):
        MultiHeadAttention.from_hf(gpt2.transformer.h[0].attn, torch.nn.Linear(8, 8))
    cfg = LlamaConfig(vocab_size=10, hidden_size=8, intermediate_size=8, num_hidden_layers=1, num_attention_heads=2,
                      rope_parameters={"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0})
    with pytest.raises(ValueError, match="rope_type 'linear'"):
        MultiHeadAttention.from_hf(LlamaForCausalLM(cfg).model.layers[0].self_attn)


# ---------------------------------------------------------------- head_dim, average_attn_weights


def test_explicit_head_dim_matches_sdpa_by_hand():
    torch.manual_seed(0)
    m = MultiHeadAttention(16, 4, head_dim=6, num_kv_heads=2, dtype=torch.float64)
    assert m.q_proj.weight.shape == (24, 16) and m.k_proj.weight.shape == (12, 16) and m.out_proj.weight.shape == (16, 24)
    x = torch.randn(2, 5, 16, dtype=torch.float64)
    q = m.q_proj(x).view(2, 5, 4, 6).transpose(1, 2)
    k = m.k_proj(x).view(2, 5, 2, 6).transpose(1, 2)
    v = m.v_proj(x).view(2, 5, 2, 6).transpose(1, 2)
    heads = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    expected = m.out_proj(heads.transpose(1, 2).reshape(2, 5, 24))
    torch.testing.assert_close(m(x, is_causal=True)[0], expected)


@pytest.mark.parametrize("average", [True, False])
def test_average_attn_weights_like_torch(average):
    torch.manual_seed(0)
    ref = torch.nn.MultiheadAttention(12, 3, batch_first=True, dtype=torch.float64)
    ours = MultiHeadAttention.from_torch(ref)
    x = torch.randn(2, 4, 12, dtype=torch.float64)
    _, w_ref = ref(x, x, x, need_weights=True, average_attn_weights=average)
    _, w = ours(x, need_weights=True, average_attn_weights=average)
    assert w.shape == ((2, 4, 4) if average else (2, 3, 4, 4))
    torch.testing.assert_close(w, w_ref)


# ---------------------------------------------------------------- argument errors (issues #12, #19)


@pytest.mark.parametrize(
    "call, error, words",
    [
        (lambda m, x: m(x, is_causal="yes"), TypeError, ["is_causal", "bool", "'yes'"]),
        (lambda m, x: m(x, is_causal=1), TypeError, ["is_causal", "bool", "int 1"]),
        (lambda m, x: m(x, need_weights="no"), TypeError, ["need_weights", "'no'"]),
        (lambda m, x: m(x, need_weights=True, average_attn_weights=1), TypeError, ["average_attn_weights"]),
        (lambda m, x: m(x, padding_mask=torch.tensor([[1, 2, 1]])), ValueError, ["padding_mask", "0", "1", "[2]"]),
        (lambda m, x: m(x.masked_fill(x > 1, float("nan"))), ValueError, ["query", "NaN", "(1, 3, 8)"]),
        (lambda m, x: m(x, x.masked_fill(x > 1, float("inf"))), ValueError, ["key", "+inf"]),
        (lambda m, x: m(x, attn_mask=torch.full((3, 3), float("nan"))), ValueError, ["attn_mask", "NaN"]),
        (lambda m, x: m(x.long()), TypeError, ["query", "floating"]),
        (lambda m, x: MultiHeadAttention(8, 2, bias="no"), TypeError, ["bias", "bool", "'no'"]),
        (lambda m, x: MultiHeadAttention(8, 2, rope_base=float("inf")), ValueError, ["rope_base", "inf"]),
        (lambda m, x: MultiHeadAttention(8, 2, rope_base=1.0), ValueError, ["rope_base", "> 1"]),
        (lambda m, x: MultiHeadAttention(8, 2, rope_base="10000"), TypeError, ["rope_base", "'10000'"]),
        (lambda m, x: MultiHeadAttention(8, 2, dropout=1.0), ValueError, ["dropout", "[0, 1)", "1.0"]),
        (lambda m, x: MultiHeadAttention(8, 2, device="gpu"), ValueError, ["device", "'gpu'"]),
        (lambda m, x: MultiHeadAttention(8, 2, device=0.5), TypeError, ["device", "0.5"]),
        (lambda m, x: MultiHeadAttention(8, 2, dtype=torch.int64), ValueError, ["dtype", "int64"]),
        (lambda m, x: MultiHeadAttention(8, 2, head_dim=0), ValueError, ["head_dim", ">= 1", "0"]),
        (lambda m, x: MultiHeadAttention(8, 2, head_dim=3, rope_base=100.0), ValueError, ["head_dim 3", "even"]),
    ],
)
def test_argument_errors(call, error, words):
    torch.manual_seed(0)
    m, x = MultiHeadAttention(8, 2), torch.randn(1, 3, 8) * 2
    with pytest.raises(error) as info:
        call(m, x)
    for word in words:
        assert word in str(info.value), (word, str(info.value))


def test_nan_weights_are_reported_in_the_users_shapes():
    m = MultiHeadAttention(8, 2)
    with torch.no_grad():
        m.q_proj.weight[0, 0] = float("nan")
    with pytest.raises(ValueError) as info:
        m(torch.randn(1, 3, 8))
    assert "q_proj(query)" in str(info.value) and "(1, 3, 8)" in str(info.value)  # (B, L, H*hd), not (B, H, L, hd)


def test_integer_padding_mask_of_zeros_and_ones_and_device_string():
    m = MultiHeadAttention(8, 2, device="cpu", dtype="float64")
    x = torch.randn(2, 3, 8, dtype=torch.float64)
    pm = torch.tensor([[1, 1, 0], [1, 1, 1]])
    torch.testing.assert_close(m(x, padding_mask=pm)[0], m(x, padding_mask=pm.bool())[0])
