"""Every "predict, then check" question: its right answer passes, every wrong one fails with its hint, and the
answers are derived here by computing them (notebooks 00-10 below; 11 and 12 in tests/course/test_exercises_11.py and
tests/course/test_exercises_12.py, next to their checks)."""

import math

import pytest
import torch

from attn_lib.course.exercises.concepts import QUESTIONS, check_prediction, questions_for
from attn_lib.kv_cache import KVCache
from attn_lib.masks import causal_mask
from attn_lib.tiled import causal_tiles

for n in range(13):
    questions_for(n)  # loads predict_questions.py (notebooks 00-12)
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


def test_01_second_merge_is_what_bpe_learns():
    from attn_lib.tokenization import BPETokenizer, count_pairs, merge_pair

    counts = {"hug": 9, "pug": 6, "pun": 7, "bun": 8, "hugs": 10}
    learned = BPETokenizer.train(counts, vocab_size=11)  # 1 + 7 characters + 3 merges
    assert learned.merges == [("u", "g"), ("h", "ug"), ("u", "n")]
    after = count_pairs({tuple(merge_pair(tuple(w), ("u", "g"))): c for w, c in counts.items()})
    assert after[("h", "ug")] == 19 and after[("u", "n")] == 15 and after[("ug", "s")] == 10
    assert ("h", "u") not in after
    q = QUESTIONS["01.second_merge"]
    assert q.choices[q.answer] == "h + ug" and q.choices["a"].startswith("u + n") and q.choices["c"] == "ug + s"
    # with hugs 3 times (the notebook's corpus) u + n comes second: the question's change is what flips the order
    assert BPETokenizer.train({**counts, "hugs": 3}, vocab_size=11).merges[1] == ("u", "n")


def test_04_rope_scores_depend_on_the_signed_offset():
    from attn_lib.positional import apply_rope

    def score(q, m, k, n):
        return (apply_rope(q[None], torch.tensor([m])) @ apply_rope(k[None], torch.tensor([n])).T).item()

    for seed in range(5):
        g = torch.Generator().manual_seed(seed)
        q, k = torch.randn(8, generator=g, dtype=torch.float64), torch.randn(8, generator=g, dtype=torch.float64)
        first, second = score(q, 5, k, 2), score(q, 2, k, 5)
        assert not math.isclose(first, second, rel_tol=1e-3)  # not "a": the same
        assert not math.isclose(first, -second, rel_tol=1e-3)  # not "c": opposite
        assert math.isclose(second, score(k, 5, q, 2), rel_tol=1e-12)  # swap the vectors too: equal
        assert math.isclose(first, score(q, 13, k, 10), rel_tol=1e-9)  # the same signed offset: equal
    assert QUESTIONS["04.rope_swap"].answer == "b"


def test_07_cross_attention_reads_every_real_source_character():
    from attn_lib.course.data import SOURCE_VOCAB, TARGET_VOCAB, collate, load_splits
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


# ---------------------------------------------------------------- notebook(s) 04: answers derived
def test_left_padding_nan_rows_are_the_padded_queries():
    p, L = 3, 7  # 3 [PAD]s first, then 4 real tokens
    real = torch.tensor([False] * p + [True] * (L - p))
    allowed = causal_mask(L, L) & real[None, :]  # query i may see key j: j <= i and j is a real token
    scores = torch.randn(L, L).masked_fill(~allowed, float("-inf"))
    naive = torch.exp(scores) / torch.exp(scores).sum(-1, keepdim=True)  # 0/0 where a row has no finite score
    nan_rows = torch.isnan(naive).all(-1)
    assert nan_rows.tolist() == [True] * p + [False] * (L - p)
    assert QUESTIONS["04.left_padding_nan"].answer == "a"
    assert "padded queries" in QUESTIONS["04.left_padding_nan"].choices["a"]


# ---------------------------------------------------------------- notebook(s) 05, 06, 10: answers derived
@pytest.mark.parametrize("notebook, ids", [
    (5, ["05.params_of_heads"]),
    (6, ["06.lazy_dog_by_position", "06.cls_weight_is_influence"]),
    (10, ["10.cache_query_rows", "10.gqa_cache_size", "10.self_only_deeper"]),
])
def test_questions_registered(notebook, ids):
    assert [q.id for q in questions_for(notebook)] == ids


def test_a_deeper_self_only_model_still_sees_one_token_and_cannot_beat_ln_16():
    """10.self_only_deeper: at any depth the self-only logits depend on the current token alone, and the best
    predictor from the current token alone (the empirical conditional frequencies) scores about ln 16."""
    import math

    from attn_lib.course import capstone

    torch.manual_seed(0)
    deep = capstone.TinyDecoder(capstone.VOCAB_SIZE, d_model=16, num_layers=8, attend="self").eval()
    x, y = capstone.copy_batch(4, torch.Generator().manual_seed(0), min_words=6, max_words=6)
    other = x.clone()
    other[:, :-1] = torch.randint(0, 16, other[:, :-1].shape, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        torch.testing.assert_close(deep(x)[:, -1], deep(other)[:, -1], rtol=0, atol=1e-5)
    xs, ys = zip(*(capstone.copy_batch(256, torch.Generator().manual_seed(2 + i)) for i in range(40)))
    cur, nxt = torch.cat([a.flatten() for a in xs]), torch.cat([b.flatten() for b in ys])
    keep = nxt != -100
    counts = torch.zeros(17, 17, dtype=torch.float64).index_put_((cur[keep], nxt[keep]), torch.tensor(1.0,
                                                                  dtype=torch.float64), accumulate=True)
    p_next = counts / counts.sum(1, keepdim=True).clamp(min=1)  # the best function of the current token
    loss = -(p_next[cur[keep], nxt[keep]]).log().mean().item()
    assert abs(loss - math.log(16)) < 0.02  # seen on its own data, so even slightly optimistic
    assert QUESTIONS["10.self_only_deeper"].answer == "c"


def test_parameter_count_of_the_explanation():
    mha = torch.nn.MultiheadAttention(512, 8)
    single = torch.nn.MultiheadAttention(512, 1)
    n = sum(p.numel() for p in mha.parameters())
    assert n == sum(p.numel() for p in single.parameters()) == 1_050_624


def test_kv_cache_halves_with_two_kv_heads():
    from attn_lib import KVCache

    sizes = []
    for hkv in (4, 2):
        cache = KVCache()
        cache.update(torch.zeros(1, hkv, 19, 16), torch.zeros(1, hkv, 19, 16))
        sizes.append(cache.nbytes())
    assert sizes[1] * 2 == sizes[0]


# ---------------------------------------------------------------- notebook(s) 08: answers derived
def test_cache_length_after_5_prompt_and_8_new_tokens():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64)
    model = LlamaForCausalLM(config).eval()
    prompt = torch.randint(0, 32, (1, 5))
    out = model.generate(prompt, max_new_tokens=8, min_new_tokens=8, do_sample=False, use_cache=True,
                         return_dict_in_generate=True, pad_token_id=0)
    assert out.sequences.shape[1] == 5 + 8
    assert out.past_key_values.get_seq_length() == QUESTIONS["08.cache_length"].answer == 12

    from attn_lib.models.lm import DecoderLM

    caches = []

    def factory():
        caches.append(KVCache())
        return caches[-1]

    lm = DecoderLM(32, d_model=16, num_heads=2, num_layers=1).eval()
    lm.generate([[1, 2, 3, 4, 5]], 8, cache_factory=factory)
    assert caches and all(c.seq_len == 12 for c in caches)


# ---------------------------------------------------------------- notebook(s) 09: answers derived
def test_causal_tiles_answer_is_derived():
    n = len(causal_tiles(8192, 8192, 128, 128))
    assert n == 64 * 65 // 2 == 2080  # "b": about half of 4096


def test_gqa_dk_answer_is_derived():
    # autograd of torch's enable_gqa: dK of a shared head = sum of the per-query-head gradients
    import torch

    g = torch.Generator().manual_seed(0)
    q = torch.randn(1, 8, 5, 4, generator=g, dtype=torch.float64)
    k = torch.randn(1, 2, 6, 4, generator=g, dtype=torch.float64, requires_grad=True)
    v = torch.randn(1, 2, 6, 4, generator=g, dtype=torch.float64)
    F = torch.nn.functional
    (dk,) = torch.autograd.grad(F.scaled_dot_product_attention(q, k, v, enable_gqa=True).sum(), k)
    k_rep = k.detach().repeat_interleave(4, 1).requires_grad_()
    (dk_rep,) = torch.autograd.grad(F.scaled_dot_product_attention(q, k_rep, v.repeat_interleave(4, 1)).sum(), k_rep)
    torch.testing.assert_close(dk, dk_rep.view(1, 2, 4, 6, 4).sum(2))


# ---------------------------------------------------------------- notebooks 03-05: the choices are shown
@pytest.mark.parametrize("notebook", ["03_scaled_dot_product_attention", "04_masking", "05_multi_head_attention"])
def test_notebook_shows_every_choice_of_its_predictions_as_registered(notebook):
    """A question that asks for a, b or c lists the registry's choices, word for word, in the markdown cell right
    before its check_prediction cell (#27 §4: 04.left_padding_nan once asked for a letter without choices)."""
    import re
    from pathlib import Path

    import nbformat

    path = Path(__file__).resolve().parents[2] / "notebooks" / f"{notebook}.ipynb"
    cells = nbformat.read(path, as_version=4).cells
    asked = 0
    for i, cell in enumerate(cells):
        found = re.search(r'check_prediction\("([0-9]{2}\.\w+)"', cell.source) if cell.cell_type == "code" else None
        if not found:
            continue
        question = QUESTIONS[found.group(1)]
        shown = " ".join(next(c for c in reversed(cells[:i]) if c.cell_type == "markdown").source.split())
        for key, text in question.choices.items():
            assert f"**{key}**" in shown and " ".join(text.split()) in shown, (question.id, key, text)
        asked += 1
    assert asked >= 1
