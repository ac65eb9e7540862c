"""Token ids -> vectors on the real model: MiniLM's three embedding tables, summed, then its
LayerNorm, equal what `model.embeddings(...)` computes."""

from __future__ import annotations

import torch


def test_embedding_tables_shapes(pretrained):
    tokenizer, model = pretrained
    emb = model.embeddings
    assert emb.word_embeddings.weight.shape == (tokenizer.vocab_size, 384) == (30522, 384)
    assert emb.position_embeddings.weight.shape == (512, 384)  # learned positions, BERT-style
    assert emb.token_type_embeddings.weight.shape == (2, 384)  # sentence A / sentence B


def _by_hand(model, input_ids, token_type_ids):
    emb = model.embeddings
    positions = torch.arange(input_ids.shape[1])  # (L,) 0..L-1
    word = emb.word_embeddings.weight[input_ids]  # (B, L, 384): row lookup in the table
    position = emb.position_embeddings.weight[positions]  # (L, 384), broadcast over B
    token_type = emb.token_type_embeddings.weight[token_type_ids]  # (B, L, 384)
    summed = word + position + token_type
    ln = emb.LayerNorm  # normalise each vector over its 384 dims, then scale and shift
    mean = summed.mean(-1, keepdim=True)
    var = summed.var(-1, unbiased=False, keepdim=True)
    return (summed - mean) / torch.sqrt(var + ln.eps) * ln.weight + ln.bias


def test_sum_of_tables_then_layernorm_equals_model_embeddings(pretrained):
    tokenizer, model = pretrained
    batch = tokenizer(
        ["the cat sat on the mat.", "She drank her tea because she was thirsty"],
        ["the dog barked.", "the tea was hot."],  # sentence pairs: token_type_ids 0 then 1
        padding=True, return_tensors="pt",
    )
    assert batch["token_type_ids"].max() == 1  # both tables rows are used
    with torch.no_grad():
        want = model.embeddings(input_ids=batch["input_ids"], token_type_ids=batch["token_type_ids"])
        got = _by_hand(model, batch["input_ids"], batch["token_type_ids"])
    assert got.shape == want.shape == (2, batch["input_ids"].shape[1], 384)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    # and they are the vectors the first encoder layer receives
    with torch.no_grad():
        out = model(**batch, output_hidden_states=True)
    torch.testing.assert_close(out.hidden_states[0], want)
    # a one-hot row vector times the table is the same as looking the row up
    ids = batch["input_ids"][0]
    one_hot = torch.nn.functional.one_hot(ids, tokenizer.vocab_size).float()
    torch.testing.assert_close(one_hot @ model.embeddings.word_embeddings.weight,
                               model.embeddings.word_embeddings.weight[ids])


def test_same_token_different_position_gets_different_vector(pretrained):
    tokenizer, model = pretrained
    batch = tokenizer("the cat sat on the mat.", return_tensors="pt")
    tokens = tokenizer.convert_ids_to_tokens(batch["input_ids"][0])
    first, second = [i for i, t in enumerate(tokens) if t == "the"]
    with torch.no_grad():
        vectors = model.embeddings(**{k: batch[k] for k in ("input_ids", "token_type_ids")})[0]
    assert batch["input_ids"][0, first] == batch["input_ids"][0, second]  # same id, same table row ...
    assert not torch.allclose(vectors[first], vectors[second], atol=1e-3)  # ... different input vectors
