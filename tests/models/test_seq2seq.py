"""The Transformer blocks and the three architectures of notebook 07.

Blocks are proven equal to torch.nn.TransformerEncoderLayer / TransformerDecoderLayer (weights copied,
float64). The models are tested for the properties the notebook relies on: causality of the decoder,
cross-attention reading every real source token and no padding token, batching not changing results,
greedy decoding agreeing with teacher forcing, and clear errors for bad input."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from attn_lib.course.data import SOURCE_VOCAB, TARGET_VOCAB
from attn_lib.masks import causal_mask, padding_mask, to_torch_key_padding_mask
from attn_lib.mha import MultiHeadAttention
from attn_lib.models import DecoderBlock, DecoderLM, EncoderBlock, EncoderOnly, FeedForward, Seq2SeqTransformer
from references import batch, model  # noqa: F401  (the date model and batch fixtures both files use)

D, H, FF = 16, 4, 32


def _copy_ff(ours: FeedForward, layer):
    ours.linear1.load_state_dict(layer.linear1.state_dict())
    ours.linear2.load_state_dict(layer.linear2.state_dict())


def _encoder_pair(norm_first: bool):
    torch.manual_seed(0)
    theirs = nn.TransformerEncoderLayer(D, H, FF, dropout=0.0, batch_first=True, norm_first=norm_first).double()
    ours = EncoderBlock(D, H, FF, norm_first=norm_first).double()
    ours.self_attn = MultiHeadAttention.from_torch(theirs.self_attn)
    _copy_ff(ours.ff, theirs)
    ours.norm1.load_state_dict(theirs.norm1.state_dict())
    ours.norm2.load_state_dict(theirs.norm2.state_dict())
    return ours, theirs


def _decoder_pair(norm_first: bool):
    torch.manual_seed(1)
    theirs = nn.TransformerDecoderLayer(D, H, FF, dropout=0.0, batch_first=True, norm_first=norm_first).double()
    ours = DecoderBlock(D, H, FF, norm_first=norm_first).double()
    ours.self_attn = MultiHeadAttention.from_torch(theirs.self_attn)
    ours.cross_attn = MultiHeadAttention.from_torch(theirs.multihead_attn)
    _copy_ff(ours.ff, theirs)
    for i in (1, 2, 3):
        getattr(ours, f"norm{i}").load_state_dict(getattr(theirs, f"norm{i}").state_dict())
    return ours, theirs


@pytest.mark.parametrize("norm_first", [False, True])
@settings(max_examples=25)
@given(lengths=st.lists(st.integers(1, 7), min_size=1, max_size=4))
def test_encoder_block_equals_torch(norm_first, lengths):
    ours, theirs = _encoder_pair(norm_first)
    S = max(lengths)
    x = torch.randn(len(lengths), S, D, dtype=torch.float64, generator=torch.Generator().manual_seed(S))
    pad = padding_mask(lengths)  # (B, S) True = real
    got, w = ours(x, pad, need_weights=True)
    want = theirs(x, src_key_padding_mask=to_torch_key_padding_mask(pad))  # torch: True = ignore
    real = pad[..., None].expand_as(got)
    torch.testing.assert_close(got[real], want[real])
    assert w.shape == (len(lengths), H, S, S)


@pytest.mark.parametrize("norm_first", [False, True])
@settings(max_examples=25)
@given(tgt_len=st.integers(1, 6), src_lengths=st.lists(st.integers(1, 7), min_size=1, max_size=3))
def test_decoder_block_equals_torch(norm_first, tgt_len, src_lengths):
    ours, theirs = _decoder_pair(norm_first)
    B, S = len(src_lengths), max(src_lengths)
    g = torch.Generator().manual_seed(tgt_len * 10 + S)
    y = torch.randn(B, tgt_len, D, dtype=torch.float64, generator=g)
    memory = torch.randn(B, S, D, dtype=torch.float64, generator=g)
    pad = padding_mask(src_lengths)
    got, sw, cw = ours(y, memory, memory_padding_mask=pad, need_weights=True)
    want = theirs(y, memory, tgt_mask=~causal_mask(tgt_len), memory_key_padding_mask=~pad)  # torch: True = blocked
    torch.testing.assert_close(got, want)
    assert sw.shape == (B, H, tgt_len, tgt_len) and cw.shape == (B, H, tgt_len, S)


def test_feed_forward_is_position_wise():
    torch.manual_seed(0)
    ff = FeedForward(D, FF)
    x = torch.randn(2, 5, D)
    torch.testing.assert_close(ff(x)[:, 3], ff(x[:, 3:4])[:, 0])
    expected = ff.linear2(torch.relu(ff.linear1(x)))  # FFN(x) = max(0, x W1 + b1) W2 + b2
    torch.testing.assert_close(ff(x), expected)


def test_block_errors():
    with pytest.raises(ValueError, match=r"d_model \(16\) must be divisible by num_heads \(3\)"):
        EncoderBlock(16, 3)
    with pytest.raises(ValueError, match=r"dropout must be a number in \[0, 1\), got 1.0"):
        EncoderBlock(16, 4, dropout=1.0)
    with pytest.raises(ValueError, match="activation"):
        FeedForward(8, 16, activation="tanh")
    block = DecoderBlock(D, H, FF)
    with pytest.raises(ValueError, match="memory"):
        block(torch.randn(1, 3, D))
    with pytest.raises(ValueError, match=r"memory must be \(B, S, D\)"):
        block(torch.randn(2, 3, D), torch.randn(1, 4, D))
    gpt_block = DecoderBlock(D, H, FF, cross_attention=False)
    assert gpt_block.cross_attn is None
    with pytest.raises(ValueError, match="no cross-attention"):
        gpt_block(torch.randn(1, 3, D), torch.randn(1, 4, D))


# --------------------------------------------------------------------------- the encoder-decoder
def test_decoder_is_causal(model, batch):
    """Changing the target tokens after position t leaves the teacher-forced output at 0..t unchanged,
    for every t (all variants in one batch), and does change some later position."""
    B, T = batch.tgt_in.shape
    g = torch.Generator().manual_seed(0)
    variants = []
    for t in range(T - 1):
        changed = batch.tgt_in.clone()
        changed[:, t + 1:] = 3 + (changed[:, t + 1:] - 3 + torch.randint(1, 11, (B, T - t - 1), generator=g)) % 11
        variants.append(changed)
    tgt = torch.cat(variants)  # ((T-1)*B, T)
    rep = T - 1
    with torch.no_grad():
        before = model(batch.src, batch.tgt_in, batch.src_padding_mask).logits
        after = model(batch.src.repeat(rep, 1), tgt, batch.src_padding_mask.repeat(rep, 1)).logits
    for t in range(T - 1):
        got = after[t * B:(t + 1) * B]
        torch.testing.assert_close(got[:, : t + 1], before[:, : t + 1], rtol=0, atol=1e-5)
        assert not torch.allclose(got[:, t + 1:], before[:, t + 1:]), f"positions after {t} should see the change"


def test_cross_attention_reads_every_source_token(model, batch):
    """Changing any one real source character changes the decoder output at every target position
    (all single-character changes of all examples in one batch)."""
    rows, src, mask, tgt = [], [], [], []
    for b in range(batch.src.shape[0]):
        for s in range(int(batch.src_padding_mask[b].sum())):
            changed = batch.src[b].clone()
            changed[s] = 3 + (changed[s] - 3 + 7) % (len(SOURCE_VOCAB) - 3)  # another ordinary character
            rows.append((b, s))
            src.append(changed)
            mask.append(batch.src_padding_mask[b])
            tgt.append(batch.tgt_in[b])
    with torch.no_grad():
        before = model(batch.src, batch.tgt_in, batch.src_padding_mask).logits
        after = model(torch.stack(src), torch.stack(tgt), torch.stack(mask)).logits
    for i, (b, s) in enumerate(rows):
        diff = (after[i] - before[b]).abs().amax(-1)  # (T,)
        assert (diff > 1e-6).all(), (b, s, diff)


def test_padding_gets_zero_weight_and_changes_nothing(model, batch):
    with torch.no_grad():
        out = model(batch.src, batch.tgt_in, batch.src_padding_mask, need_weights=True)
        pad = ~batch.src_padding_mask  # (B, S) True = padding
        assert pad.any(), "the batch must contain padding"
        for w in out.cross_attentions:  # (B, H, T, S)
            assert (w * pad[:, None, None, :]).abs().sum() == 0  # weight on padded source positions
            torch.testing.assert_close(w.sum(-1), torch.ones(w.shape[:-1]))
        for w in out.encoder_attentions:  # (B, H, S, S): no real or padded query looks at a padded key
            assert (w * pad[:, None, None, :]).abs().sum() == 0
        for w in out.decoder_self_attentions:  # (B, H, T, T): nothing above the diagonal
            assert (w * ~causal_mask(w.shape[-1])).abs().sum() == 0
        # whatever ids sit in the padded positions, the output is the same
        src = batch.src.clone()
        src[pad] = 5
        again = model(src, batch.tgt_in, batch.src_padding_mask).logits
    torch.testing.assert_close(again, out.logits, rtol=0, atol=1e-6)


def test_batched_equals_one_at_a_time(model, batch):
    with torch.no_grad():
        together = model(batch.src, batch.tgt_in, batch.src_padding_mask).logits
        for b in range(batch.src.shape[0]):
            n = int(batch.src_padding_mask[b].sum())
            alone = model(batch.src[b:b + 1, :n], batch.tgt_in[b:b + 1]).logits
            torch.testing.assert_close(alone[0], together[b], rtol=1e-4, atol=1e-5)


def test_greedy_generate_agrees_with_teacher_forcing(model, batch):
    out = model.generate(batch.src, batch.src_padding_mask, max_new_tokens=11)  # (B, T)
    tgt_in = torch.cat([torch.full((out.shape[0], 1), TARGET_VOCAB.bos_id), out[:, :-1]], dim=1)
    with torch.no_grad():
        again = model(batch.src, tgt_in, batch.src_padding_mask).logits.argmax(-1)
    for b in range(out.shape[0]):
        row = out[b].tolist()
        n = row.index(TARGET_VOCAB.eos_id) + 1 if TARGET_VOCAB.eos_id in row else len(row)
        assert again[b, :n].tolist() == row[:n]
        assert all(i == TARGET_VOCAB.pad_id for i in row[n:])


def test_model_input_errors(model, batch):
    with pytest.raises(ValueError, match=r"src holds ids \[999\] outside the vocabulary"):
        model(torch.tensor([[5, 999]]), batch.tgt_in[:1])
    with pytest.raises(TypeError, match="integer token ids"):
        model(batch.src.float(), batch.tgt_in)
    with pytest.raises(ValueError, match=r"\(B, L\)"):
        model(batch.src[0], batch.tgt_in)
    with pytest.raises(TypeError, match="src_padding_mask must be bool .True = real token. or 0/1 integers"):
        model(batch.src, batch.tgt_in, batch.src_padding_mask.float())
    torch.testing.assert_close(model(batch.src, batch.tgt_in, batch.src_padding_mask.long()).logits,
                               model(batch.src, batch.tgt_in, batch.src_padding_mask).logits)  # 0/1 ints, as HF's
    with pytest.raises(ValueError, match="max_len"):
        model(torch.ones(1, 100, dtype=torch.long), batch.tgt_in[:1])
    with pytest.raises(ValueError, match="max_new_tokens must be an int >= 0, got -1"):
        model.generate(batch.src, max_new_tokens=-1)
    # one rule for every decoder (attn_lib.models.decoding): 0 new tokens is allowed and gives none,
    # <s> plus the new tokens must fit in max_len, and the ids of <s> and </s> must be target ids
    assert model.generate(batch.src, max_new_tokens=0).shape == (batch.src.shape[0], 0)
    with pytest.raises(ValueError, match=f"max_new_tokens must be <= max_len - prompt length = {model.max_len} - 1"):
        model.generate(batch.src, max_new_tokens=model.max_len)
    with pytest.raises(ValueError, match="bos_id must be an int in"):
        model.generate(batch.src, bos_id=99)


def test_encoder_only_is_bidirectional_and_decoder_only_causal():
    """Notebook 07's two single-stack members: BERT-like EncoderOnly sees the last token from the first position;
    the GPT-like member, DecoderLM, does not (changing a later token never changes an earlier logit), and its
    weights are zero above the diagonal."""
    torch.manual_seed(0)
    bert = EncoderOnly(20, 7, d_model=16, num_heads=2).eval()
    gpt = DecoderLM(20, d_model=16, num_heads=2, max_len=64).eval()
    ids = torch.randint(3, 20, (2, 9))
    changed = ids.clone()
    changed[:, -1] = 3 + (changed[:, -1] - 3 + 1) % 17  # change only the last token
    with torch.no_grad():
        assert not torch.allclose(bert(ids).logits[:, 0], bert(changed).logits[:, 0]), "BERT: the first position sees the last"
        torch.testing.assert_close(gpt(ids)[:, :-1], gpt(changed)[:, :-1], rtol=0, atol=1e-6)
        assert not torch.allclose(gpt(ids)[:, -1], gpt(changed)[:, -1])  # the last position does see it
    weights = gpt.attention_weights(ids)
    assert bert(ids).logits.shape == (2, 9, 7) and gpt(ids).shape == (2, 9, 20)
    assert len(weights) == 2 and all((w * ~causal_mask(9)).abs().sum() == 0 for w in weights)


def test_decoder_lm_right_padding_changes_no_real_position():
    """The decoder-only framing of the date task right-pads its rows (attn_lib.course.train.decoder_only_inputs): with causal
    attention and RoPE's positions counted from the start, the logits of a row's real tokens are the same padded or
    alone."""
    torch.manual_seed(0)
    gpt = DecoderLM(20, d_model=16, num_heads=2, max_len=64, init_std=0.3).eval()
    rows = [[5, 6, 7], [8, 9, 10, 11, 12, 13], [4]]
    batch = torch.zeros(3, 6, dtype=torch.long)
    for b, r in enumerate(rows):
        batch[b, : len(r)] = torch.tensor(r)
    with torch.no_grad():
        padded = gpt(batch)
        for b, r in enumerate(rows):
            torch.testing.assert_close(padded[b, : len(r)], gpt(torch.tensor([r]))[0], rtol=0, atol=1e-5)


def test_decoding_turns_dropout_off_and_restores_the_mode():
    """A model left in training mode with dropout still decodes greedily (the same tokens twice, as in eval mode),
    and stays in training mode afterwards; DecoderLM (no dropout) also restores the mode."""
    torch.manual_seed(0)
    gpt = DecoderLM(20, d_model=16, num_heads=2).train()
    s2s = Seq2SeqTransformer(12, 12, d_model=16, num_heads=2, dropout=0.5).train()
    src = torch.randint(3, 12, (2, 6), generator=torch.Generator().manual_seed(1))
    gpt.generate([[5, 6, 7], [4, 4, 4]], 5)
    decoded = [s2s.generate(src, max_new_tokens=5) for _ in range(2)]
    assert gpt.training and s2s.training
    assert torch.equal(decoded[0], decoded[1]) and torch.equal(decoded[0], s2s.eval().generate(src, max_new_tokens=5))


def test_pad_id_outside_the_vocabulary_is_a_clear_error():
    import pytest

    from attn_lib.models.seq2seq import Seq2SeqTransformer

    for bad in (20, -1):
        with pytest.raises(ValueError, match="pad_id must be an int in 0..9"):
            Seq2SeqTransformer(10, 10, pad_id=bad)
    for bad in (1.0, True, "0"):  # a wrong type is a TypeError, as everywhere in attn_lib
        with pytest.raises(TypeError, match="pad_id must be an int in 0..9"):
            Seq2SeqTransformer(10, 10, pad_id=bad)


def test_model_sizes_of_the_wrong_type_are_type_errors():
    with pytest.raises(TypeError, match="d_model must be an int >= 1, got float 16.0"):
        Seq2SeqTransformer(10, 10, d_model=16.0)
    with pytest.raises(ValueError, match="num_layers must be an int >= 1, got 0"):
        EncoderOnly(10, 5, num_layers=0)


@pytest.mark.parametrize("kwargs, match", [
    (dict(d_model=16.0, num_heads=4), "d_model must be an int >= 1, got float 16.0"),
    (dict(d_model=16, num_heads=4.0), "num_heads must be an int >= 1, got float 4.0"),
    (dict(d_model=16, num_heads=True), "num_heads must be an int >= 1, got bool True"),
    (dict(d_model=16, num_heads=4, d_ff="64"), "d_ff must be an int >= 1, got str"),
    (dict(d_model=16, num_heads=4, dropout="0.1"), "dropout must be a number"),
])
def test_block_sizes_of_the_wrong_type_are_type_errors(kwargs, match):
    """_check_dims uses attn_lib._checks: a size of the wrong type is a TypeError, as everywhere in attn_lib."""
    for block in (EncoderBlock, DecoderBlock):
        with pytest.raises(TypeError, match=match):
            block(**kwargs)


def test_feed_forward_sizes_of_the_wrong_type_are_type_errors():
    with pytest.raises(TypeError, match="d_model must be an int >= 1, got float 8.0"):
        FeedForward(8.0, 16)
    with pytest.raises(TypeError, match="d_ff must be an int >= 1, got float 16.0"):
        FeedForward(8, 16.0)
    with pytest.raises(TypeError, match="dropout must be a number"):
        FeedForward(8, 16, dropout=None)
    with pytest.raises(ValueError, match="d_ff must be an int >= 1, got 0"):
        FeedForward(8, 0)
