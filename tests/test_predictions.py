"""Every "predict, then check" question: its right answer passes, every wrong one fails with its hint,
and (for the questions of notebooks 00, 01, 02, 03 and 07) the answer is derived here by computing it."""

import math

import pytest
import torch

from attn_lib.exercises.concepts import QUESTIONS, check_prediction, questions_for

for n in range(12):
    questions_for(n)  # loads every predict_NN.py
ALL = sorted(QUESTIONS)


def test_questions_exist_for_the_coordinators_notebooks():
    for n in (0, 3):
        assert questions_for(n), n


@pytest.mark.parametrize("qid", ALL)
def test_right_answer_passes_and_wrong_ones_get_their_hint(qid):
    q = QUESTIONS[qid]
    assert check_prediction(qid, q.answer if not q.choices else q.answer.upper())
    assert not check_prediction(qid, ...)
    assert "not answered yet" in repr(check_prediction(qid, ...))
    if q.choices:
        for key in q.choices:
            if key != q.answer:
                result = check_prediction(qid, key)
                assert not result
                if key in q.hints:
                    assert q.hints[key] in repr(result)
        assert not check_prediction(qid, "no such choice")
    else:
        off = 10 * q.tolerance + 0.05 * max(1.0, abs(float(q.answer)))
        low, high = check_prediction(qid, q.answer - off), check_prediction(qid, q.answer + off)
        assert not low and not high
        for side, result in (("low", low), ("high", high)):
            if side in q.hints:
                assert q.hints[side] in repr(result)
        assert not check_prediction(qid, "0.1")


def test_unknown_question_names_the_known_ones():
    with pytest.raises(KeyError, match="00.uniform_row"):
        check_prediction("99.nothing", "a")


def test_00_uniform_row_is_the_softmax_of_equal_scores():
    assert torch.softmax(torch.full((9,), 3.7), -1)[0].item() == pytest.approx(QUESTIONS["00.uniform_row"].answer)


def test_03_dividing_by_dk_flattens_the_weights():
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(200, 64, generator=g), torch.randn(200, 9, 64, generator=g)
    scores = torch.einsum("nd,nsd->ns", q, k)

    def entropy(w):
        return -(w * w.clamp_min(1e-30).log()).sum(-1)

    by_sqrt = torch.softmax(scores / math.sqrt(64), -1)
    by_dk = torch.softmax(scores / 64, -1)
    assert (entropy(by_dk) > entropy(by_sqrt)).all()  # flatter: closer to uniform (entropy log 9)
    assert QUESTIONS["03.scale_by_dk"].answer == "b"
    assert "flatter" in QUESTIONS["03.scale_by_dk"].choices["b"]


def test_01_count_after_merge_is_what_bpe_counts():
    from attn_lib.tokenization import count_pairs, merge_pair

    words = {tuple("hug"): 9, tuple("pug"): 6, tuple("pun"): 7, tuple("bun"): 8, tuple("hugs"): 3}
    merged = {tuple(merge_pair(w, ("u", "g"))): c for w, c in words.items()}
    assert count_pairs(merged)[("h", "ug")] == QUESTIONS["01.count_after_merge"].answer


def test_02_rope_scores_depend_only_on_the_offset():
    from attn_lib.positional import apply_rope

    g = torch.Generator().manual_seed(1)
    q, k = torch.randn(8, generator=g, dtype=torch.float64), torch.randn(8, generator=g, dtype=torch.float64)
    seq = torch.stack([q] * 11)[None]  # (1, 11, 8): the same vector at every position
    rq, rk = apply_rope(seq), apply_rope(torch.stack([k] * 11)[None])
    first, second = rq[0, 3] @ rk[0, 1], rq[0, 10] @ rk[0, 8]
    assert torch.allclose(first, second) and not torch.allclose(first, rq[0, 3] @ rk[0, 2])
    assert QUESTIONS["02.rope_offset"].answer == "a"


def test_07_cross_attention_reads_every_real_source_character():
    from attn_lib.data import SOURCE_VOCAB, TARGET_VOCAB, collate, load_splits
    from attn_lib.models.seq2seq import Seq2SeqTransformer

    examples = [e for e in load_splits()["test"] if len(e.source) == 12][:1]
    examples.append(next(e for e in load_splits()["test"] if len(e.source) == 8))
    batch = collate(examples)
    torch.manual_seed(0)
    model = Seq2SeqTransformer(len(SOURCE_VOCAB), len(TARGET_VOCAB), d_model=16, num_heads=2,
                               num_encoder_layers=1, num_decoder_layers=1, d_ff=32, max_len=40).eval()
    with torch.no_grad():
        out = model(batch.src, batch.tgt_in, batch.src_padding_mask, need_weights=True)
    cross = out.cross_attentions[0][1]  # second example: (H, T, S=12)
    assert batch.src.shape[1] == 12
    assert ((cross > 0).sum(-1) == QUESTIONS["07.cross_attention_keys"].answer).all()
