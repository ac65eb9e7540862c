"""attn_lib.course.train: the training loop, the date task's three framings and their losses, the checkpoint (shipped
and reproduced), translate and span_hit_rate (notebook 07's measurements)."""

from __future__ import annotations

import pytest
import torch

from attn_lib.course.data import SOURCE_VOCAB, TARGET_VOCAB, load_splits
from attn_lib.models import DecoderLM, EncoderOnly, Seq2SeqTransformer
from attn_lib.course.train import (MASK_ID, NUM_SLOTS, decoder_only_inputs, decoder_only_loss, encoder_only_inputs,
                            encoder_only_loss, endless_batches, exact_match, load_model, predict_decoder_only,
                            predict_encoder_only, predict_seq2seq, save_model, seq2seq_loss, span_hit_rate,
                            train_loop, translate)
from references import batch, model  # noqa: F401  (the date model and batch fixtures both files use)


def test_translate_rejects_characters_outside_the_vocabulary(model):
    with pytest.raises(ValueError, match=r"outside the vocabulary: 'é', '!'"):
        translate(model, ["29 nov. 2026", "1 février 2026!"])
    with pytest.raises(TypeError, match="texts"):
        translate(model, 2026)
    with pytest.raises(ValueError, match="empty"):
        translate(model, "  ")


def test_translate_returns_text_and_cross_attention(model):
    res = translate(model, ["29 nov. 2026", "11/29/26"], return_attentions=True)
    assert [r.source for r in res] == ["29 nov. 2026", "11/29/26"]
    for r in res:
        assert r.source_tokens == SOURCE_VOCAB.labels(SOURCE_VOCAB.encode(r.source))
        w = r.cross_attentions  # (layers, H, T_out, S)
        assert w.shape == (2, 4, len(r.output_tokens), len(r.source))
        torch.testing.assert_close(w.sum(-1), torch.ones(w.shape[:-1]))
    assert res[0].output == translate(model, "29 nov. 2026")[0].output, "batching does not change the result"


def test_span_hit_rate_by_construction():
    """Head 0 puts its largest weight inside the answer span, head 1 on position 0 (never in any span
    of these examples), head 2 inside the span for the day only: rates 1, 0, 2/8."""
    exs = [e for e in load_splits()["test"] if min(a for a, _ in e.spans.values()) > 0][:3]
    S = max(len(e.source) for e in exs)
    w = torch.full((len(exs), 1, 3, 11, S), 0.01)
    for b, e in enumerate(exs):
        for field, sl in {"year": slice(0, 4), "month": slice(5, 7), "day": slice(8, 10)}.items():
            start, end = e.spans[field]
            w[b, 0, 0, sl, end - 1] = 1.0
            w[b, 0, 1, sl, 0] = 1.0
            w[b, 0, 2, sl, e.spans["day"][0]] = 1.0
    rate = span_hit_rate(w, exs)
    torch.testing.assert_close(rate, torch.tensor([[1.0, 0.0, 2 / 8]]))
    with pytest.raises(ValueError, match="B=3 but 2 examples"):
        span_hit_rate(w, exs[:2])
    with pytest.raises(ValueError, match=r"\(B, layers, H, T, S\)"):
        span_hit_rate(w[0], exs)


# --------------------------------------------------------------------------- encoder-only and decoder-only
def test_task_framings(batch):
    ids, mask = encoder_only_inputs(batch)
    assert (ids[:, :NUM_SLOTS] == MASK_ID).all() and torch.equal(ids[:, NUM_SLOTS:], batch.src)
    assert mask[:, :NUM_SLOTS].all() and torch.equal(mask[:, NUM_SLOTS:], batch.src_padding_mask)
    ids, labels = decoder_only_inputs(batch)
    for b in range(ids.shape[0]):
        n = ids[b].tolist().index(SOURCE_VOCAB.bos_id)  # the prompt ends with <s>
        assert SOURCE_VOCAB.decode(ids[b, :n]) == SOURCE_VOCAB.decode(batch.src[b])
        assert n == int(batch.src_padding_mask[b].sum())
        answer = [i for i in labels[b].tolist() if i != -100]
        assert SOURCE_VOCAB.decode(answer) == TARGET_VOCAB.decode(batch.tgt_out[b]) and answer[-1] == SOURCE_VOCAB.eos_id
        assert (labels[b, : n] == -100).all(), "no loss on the prompt"
        assert labels[b, n] == ids[b, n + 1], "labels are the next tokens"


def test_short_training_lowers_each_loss():
    """A few steps of each architecture reduce its loss (the wiring trains), and predictions have the right form."""
    exs = load_splits()["train"][:256]
    cases = [
        (Seq2SeqTransformer(len(SOURCE_VOCAB), len(TARGET_VOCAB), d_model=32, num_heads=4, d_ff=64), seq2seq_loss,
         predict_seq2seq),
        (EncoderOnly(len(SOURCE_VOCAB) + 1, len(TARGET_VOCAB), d_model=32, num_heads=4, d_ff=64), encoder_only_loss,
         predict_encoder_only),
        (DecoderLM(len(SOURCE_VOCAB), d_model=32, num_heads=4, d_ff=64, max_len=64), decoder_only_loss,
         predict_decoder_only),
    ]
    for m, loss_fn, predict in cases:
        torch.manual_seed(0)
        res = train_loop(m, endless_batches(exs, 32), loss_fn, steps=25, lr=3e-3, warmup_steps=5, progress=False)
        assert sum(res.losses[-5:]) < sum(res.losses[:5]), type(m).__name__
        preds = predict(m, exs[:20])
        assert len(preds) == 20 and all(isinstance(p, str) for p in preds)
        ev = exact_match(exs[:20], preds)
        assert 0.0 <= ev.accuracy <= 1.0 and len(ev.errors) == round(20 * (1 - ev.accuracy))


def test_predict_decoder_only_equals_one_prompt_at_a_time():
    """predict_decoder_only decodes prompts of different lengths (grouped by length, kept in order) and stops at
    </s>: the same answers as a plain greedy loop over the full forward pass, one prompt at a time. The model gets
    large random weights so that its tokens depend on the prompt, and a longer </s> vector (embedding and, tied, output
    row) so that some rows stop: with it doubled, 5 of the 12 rows stop, after 0 to 10 tokens."""
    torch.manual_seed(0)
    lm = DecoderLM(len(SOURCE_VOCAB), d_model=32, num_heads=4, d_ff=64, max_len=64, init_std=0.3).eval()
    exs = load_splits()["test"][:12]
    eos = SOURCE_VOCAB.eos_id
    with torch.no_grad():
        lm.embed.weight[eos] *= 2  # tied: the </s> logit doubles
    lengths = {len(ex.source) for ex in exs}
    assert len(lengths) > 2, lengths  # ragged: several groups
    want, stopped = [], 0
    for ex in exs:
        ids = SOURCE_VOCAB.encode(ex.source) + [SOURCE_VOCAB.bos_id]
        new = []
        for _ in range(11):
            with torch.no_grad():
                nxt = int(lm(torch.tensor([ids]))[0, -1].argmax())
            new.append(nxt)
            ids.append(nxt)
            if nxt == eos:
                stopped += 1
                break
        want.append(SOURCE_VOCAB.decode(new))
    assert 0 < stopped < len(exs)  # some rows end early at </s>, others run to 11 tokens: both paths are tested
    assert predict_decoder_only(lm, exs, batch_size=5) == want
    assert len(set(want)) > 1
    for predict in (predict_decoder_only, predict_seq2seq, predict_encoder_only):  # before any model is called
        with pytest.raises(ValueError, match="batch_size must be an int >= 1, got -1"):
            predict(lm, exs, batch_size=-1)  # range() would have returned no batch: no prediction, no error
        with pytest.raises(TypeError, match="batch_size must be an int >= 1, got bool True"):
            predict(lm, exs, batch_size=True)


def test_checkpoint_roundtrip(tmp_path, model, batch):
    path = save_model(model, tmp_path / "m.safetensors")
    again = load_model(path)
    with torch.no_grad():
        torch.testing.assert_close(again(batch.src, batch.tgt_in, batch.src_padding_mask).logits,
                                   model(batch.src, batch.tgt_in, batch.src_padding_mask).logits)
    with pytest.raises(FileNotFoundError, match="make train-dates"):
        load_model(tmp_path / "missing.safetensors")


def test_fused_adamw_is_the_same_training_to_the_last_bits():
    """LIVE_TRAIN_CONFIG trains with fused AdamW (faster a step); the losses of the first 20 steps match the
    default implementation's to float32 rounding (measured: 2.4e-7), so it is the same algorithm, not another
    recipe; the runs part only by chaos over hundreds of steps."""
    from attn_lib.course.train import LIVE_TRAIN_CONFIG, train_date_model

    assert LIVE_TRAIN_CONFIG["fused"] is True
    _, plain = train_date_model(0, progress=False, stop_after=20, steps=900, batch_size=32)
    _, fused = train_date_model(0, progress=False, stop_after=20, steps=900, batch_size=32, fused=True)
    assert max(abs(a - b) for a, b in zip(plain.losses, fused.losses)) < 1e-5
    assert plain.losses[-1] < 0.8 * plain.losses[0]  # and it trains (2.72 -> 1.91 in 20 steps)


def test_train_errors(model):
    with pytest.raises(ValueError, match="steps"):
        train_loop(model, iter([]), seq2seq_loss, steps=0)


def test_shipped_checkpoint_is_what_the_code_trains():
    """data/dates/seq2seq.safetensors has the notebook's config, its stored losses start exactly where a rerun of
    train_date_model() starts (training is deterministic), and it is >= 99% right on the held-out test split."""
    from attn_lib.course.train import DATE_MODEL_CONFIG, DATE_TRAIN_CONFIG, train_date_model

    shipped = load_model()
    assert all(shipped.config[k] == v for k, v in DATE_MODEL_CONFIG.items())
    assert len(shipped.training_losses) == DATE_TRAIN_CONFIG["steps"]
    _, first = train_date_model(0, progress=False, stop_after=5)
    _, again = train_date_model(0, progress=False, stop_after=5)
    assert first.losses == again.losses, "training is deterministic"
    assert max(abs(a - b) for a, b in zip(first.losses, shipped.training_losses)) < 1e-4
    test = load_splits()["test"]
    assert exact_match(test, predict_seq2seq(shipped, test)).accuracy >= 0.99


def _tiny_run(**kwargs):
    """train_loop on a linear model with endless random batches; kwargs replace its arguments."""
    torch.manual_seed(0)
    args = dict(model=torch.nn.Linear(2, 1), batches=iter(lambda: torch.randn(4, 2), None),
                loss_fn=lambda m, b: m(b).pow(2).mean(), steps=3, progress=False) | kwargs
    return train_loop(args.pop("model"), args.pop("batches"), args.pop("loss_fn"), **args)


@pytest.mark.parametrize("kwargs, error, match", [
    # hyper-parameters that trained backwards or not at all (issue 38 §3): before, all ran without an error
    (dict(clip_norm=-1.0), ValueError, "clip_norm must be a number > 0, got -1.0"),  # flipped the gradients
    (dict(clip_norm=0.0), ValueError, "clip_norm must be a number > 0, got 0.0"),  # zeroed them
    (dict(warmup_steps=-5), ValueError, "warmup_steps must be an int >= 0, got -5"),  # lr factor < 0: ascent
    (dict(stop_after=-1), ValueError, "stop_after must be an int >= 1, got -1"),  # returned [] untrained
    (dict(stop_after=0), ValueError, "stop_after must be an int >= 1, got 0"),
    (dict(lr=0.0), ValueError, "lr must be a number > 0, got 0.0"),
    # argument types (issue 38 §4): before, torch's or Python's own errors, or silently accepted
    (dict(lr="x"), TypeError, "lr must be a number, got str 'x'"),  # was "'<=' not supported"
    (dict(threads=0), ValueError, "threads must be an int >= 1, got 0"),  # was set_num_threads' RuntimeError
    (dict(threads=1.5), TypeError, "threads must be an int >= 1, got float 1.5"),
    (dict(batches=[torch.randn(4, 2)] * 3), TypeError, r"batches must be an iterator .*iter\(your_list\)"),
    (dict(batches=iter([torch.randn(4, 2)])), ValueError, "batches ran out after 1 batches; steps=3"),  # StopIteration
    (dict(loss_fn=None), TypeError, "loss_fn must be a function"),  # was 'NoneType' object is not callable
    (dict(loss_fn=lambda m, b: m(b).pow(2)), ValueError, r"scalar loss \(shape \(\)\), got shape \(4, 1\) at step 0"),
    (dict(loss_fn=lambda m, b: 1.0), TypeError, "loss_fn must return a scalar floating tensor"),
    (dict(loss_fn=lambda m, b: torch.tensor(1.0)), ValueError, "does not depend on the model's parameters"),
    (dict(weight_decay=-1.0), ValueError, "weight_decay must be a number >= 0.0"),
    (dict(clip_norm=None), TypeError, "clip_norm must be a number"),
    (dict(warmup_steps=2.5), TypeError, "warmup_steps must be an int"),  # was a fractional warm-up
    (dict(fused="no"), TypeError, "fused must be a bool"),  # was bool("no") = True
    (dict(progress="no"), TypeError, "progress must be a bool"),
    (dict(desc=5), TypeError, "desc must be a str"),
    (dict(steps=2.0), TypeError, "steps must be an int >= 1, got float 2.0"),
    (dict(model=None), TypeError, "model must be a torch.nn.Module"),
    (dict(model=torch.nn.ReLU()), ValueError, "no trainable parameters"),
])
def test_train_loop_refuses_bad_arguments_by_name(kwargs, error, match):
    with pytest.raises(error, match=match):
        _tiny_run(**kwargs)


def test_train_loop_edges_that_stay_valid():
    assert len(_tiny_run(clip_norm=float("inf")).losses) == 3  # no clipping
    assert len(_tiny_run(warmup_steps=0).losses) == 3  # no warm-up
    assert len(_tiny_run(stop_after=2).losses) == 2
    assert len(_tiny_run(threads=None).losses) == 3


@pytest.mark.parametrize("weights, examples, fields, error, match", [
    ("empty", 0, ("year",), ValueError, r"at least one example \(B >= 1\)"),  # was a tensor of NaN
    ("ok", 3, (), ValueError, "fields must name at least one"),  # was NaN
    ("ok", 3, "year", TypeError, r"fields must be a tuple of field names"),  # was an error listing 'y', 'e', ...
    ("nan", 3, ("year",), ValueError, "cross_attentions contains NaN"),  # was a rate of 0.25
    ("int", 3, ("year",), TypeError, "must have a floating dtype"),
    ("S=0", 3, ("year",), ValueError, "at least one layer, head and source position"),  # was IndexError
])
def test_span_hit_rate_refuses_an_empty_set_and_bad_weights(weights, examples, fields, error, match):
    exs = load_splits()["test"][:examples]
    w = {"empty": torch.zeros(0, 1, 1, 10, 5), "ok": torch.rand(3, 1, 1, 10, 30),
         "nan": torch.full((3, 1, 1, 10, 30), float("nan")), "int": torch.ones(3, 1, 1, 10, 30, dtype=torch.long),
         "S=0": torch.rand(3, 1, 1, 10, 0)}[weights]
    with pytest.raises(error, match=match):
        span_hit_rate(w, exs, fields=fields)


def test_other_date_helpers_refuse_bad_input(model):
    from attn_lib.course.train import single_thread, train_date_model, uptrain_date_model

    with pytest.raises(TypeError, match=r"unexpected override\(s\) \['stepz'\]"):
        train_date_model(0, progress=False, stepz=2)  # was ignored: the full 3000 steps ran
    with pytest.raises(TypeError, match=r"unexpected override\(s\) \['lrr'\]"):
        uptrain_date_model(model, progress=False, lrr=1.0)
    with pytest.raises(ValueError, match="threads must be an int >= 1, got 0"):
        with single_thread(0):  # was torch's RuntimeError
            pass
    with pytest.raises(ValueError, match="examples must hold at least one"):
        endless_batches([], 1)  # was "batch_size must be an int in [1, 0]"
    with pytest.raises(TypeError, match="model must be an attn_lib.models.Seq2SeqTransformer"):
        translate(None, "1 Jan 2000")  # was AttributeError
    with pytest.raises(TypeError, match="return_attentions must be a bool"):
        translate(model, "1 Jan 2000", return_attentions="yes")  # was truthy
    with pytest.raises(TypeError, match="predictions must be str .* at index 0"):
        exact_match(load_splits()["test"][:2], [1, 2])  # was an accuracy of 0
    with pytest.raises(TypeError, match="model must have a config dict"):
        save_model(torch.nn.Linear(2, 2), "unused.safetensors")  # was AttributeError


def test_date_helpers_refuse_the_wrong_batch_or_architecture(model):
    """Issue 38 §4: AttributeError ('NoneType' has no attribute 'src'), or the other model's generate signature."""
    exs = load_splits()["test"][:3]
    for fn in (encoder_only_inputs, decoder_only_inputs):
        with pytest.raises(TypeError, match="batch must be an attn_lib.course.data.DateBatch"):
            fn(None)
    with pytest.raises(TypeError, match="batch must be an attn_lib.course.data.DateBatch"):
        seq2seq_loss(model, (1, 2))
    with pytest.raises(TypeError, match="model must be an attn_lib.models.Seq2SeqTransformer, got DecoderLM"):
        predict_seq2seq(DecoderLM(len(SOURCE_VOCAB), d_model=16), exs)  # was generate's 'multiple values' TypeError
    with pytest.raises(TypeError, match="model must be an attn_lib.models.EncoderOnly, got Seq2SeqTransformer"):
        predict_encoder_only(model, exs)  # was a ValueError about src ids outside the vocabulary
    with pytest.raises(TypeError, match="model must be an attn_lib.models.DecoderLM, got Seq2SeqTransformer"):
        predict_decoder_only(model, exs)
    with pytest.raises(TypeError, match="examples must be DateExample items, got str 'a' at index 0"):
        exact_match("ab", ["a", "b"])  # was AttributeError
