"""The quiz bank (classroom/quiz_bank.py) and its quizzes (classroom/quizzes.py): every numeric answer recomputed
another way, every lab of the plan with a bank of new questions, a student's quiz deterministic and different
from a classmate's, and the Moodle XML export parses and follows the format's rules."""

import math
import random
import re
import xml.etree.ElementTree as ET

import pytest
import torch
import torch.nn.functional as F

from attn_lib import REPO_ROOT
from attn_lib.course.exercises.concepts import QUESTIONS, _load_all
from attn_lib.kv_cache import kv_cache_bytes
from attn_lib.linear import linear_attention
from attn_lib.masks import causal_mask, padding_mask
from attn_lib.positional import alibi_slopes, rope_frequencies, sinusoidal_components, sinusoidal_positional_encoding
from attn_lib.quantization import fake_quantize_kv
from attn_lib.variants import softcap
from attn_lib.windows import ring_slot_positions, sliding_window_mask
from classroom import quizzes
from classroom.labs import labs
from classroom.quiz_bank import TEMPLATES

D = torch.float64
SEEDS = range(6)


def _t(x):
    return torch.tensor(x, dtype=D)


def _meta_params(*modules):
    return sum(p.numel() for m in modules for p in m.parameters())


def _sdpa_1(q, keys, values):  # one query, value width 1, torch's own SDPA
    out = F.scaled_dot_product_attention(_t([[q]]), _t([keys]), _t([[[v] for v in values]]))
    w = torch.softmax(_t([q]) @ _t(keys).T / math.sqrt(len(q)), dim=-1)
    return out.item(), w[0, 0].item()


def _entropy(p):
    return torch.distributions.Categorical(probs=_t(p)).entropy().item()


def _flops_matmul(a, b):
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as fc:
        torch.matmul(a, b)
    return fc.get_total_flops() // 2  # multiply-adds


def _linear_last(p):
    """linear_attention's recurrent form, identity feature map: the query at position 1 reads both tokens."""
    q = _t([p["q"], p["q"]]).reshape(1, 1, 2, 2)
    k = _t(p["keys"]).reshape(1, 1, 2, 2)
    v = _t(p["values"]).reshape(1, 1, 2, 1)
    return linear_attention(q, k, v, feature_map=None, form="recurrent")[0, 0, 1, 0].item()


# template id -> params -> the answer, computed another way
ORACLES = {
    "00.softmax_weight": lambda p: torch.softmax(_t(p["scores"]), 0)[0].item(),
    "01.pair_count": lambda p: sum(c * sum(1 for a, b in zip(w, w[1:]) if (a, b) == ("e", "s"))
                                   for w, c in p["counts"].items()),
    "01.embedding_params": lambda p: _meta_params(torch.nn.Embedding(p["vocab"], p["d_model"], device="meta")),
    "02.sinusoid_value": lambda p: sinusoidal_positional_encoding(p["pos"] + 1, 4, dtype=D)[p["pos"], 2].item(),
    "02.wavelength": lambda p: sinusoidal_components(0, p["pair"], p["d_model"])["wavelength"],
    "02.shift_dot": lambda p: (sinusoidal_positional_encoding(20, 2, dtype=D)[7]
                               @ sinusoidal_positional_encoding(20, 2, dtype=D)[7 + p["k"]]).item(),
    "04.rope_angle": lambda p: p["pos"] * rope_frequencies(8, dtype=D)[1].item(),
    "04.alibi_slope": lambda p: alibi_slopes(p["num_heads"], dtype=D)[p["head"] - 1].item(),
    "03.by_hand_weight": lambda p: _sdpa_1(p["q"], p["keys"], p["values"])[1],
    "03.by_hand_output": lambda p: _sdpa_1(p["q"], p["keys"], p["values"])[0],
    "03.score_spread": lambda p: (torch.randn(40000, p["d_k"], generator=torch.Generator().manual_seed(0), dtype=D) *
                                  torch.randn(40000, p["d_k"], generator=torch.Generator().manual_seed(1), dtype=D)
                                  ).sum(-1).std().item(),
    "03.score_cost": lambda p: _flops_matmul(torch.empty(p["n"], p["d_k"], device="meta"),
                                             torch.empty(p["d_k"], p["n"], device="meta")),
    "04.causal_count": lambda p: causal_mask(p["n"]).sum().item(),
    "04.bottom_right": lambda p: causal_mask(p["q_len"], p["kv_len"], align="bottom_right").sum().item(),
    "04.causal_and_padding": lambda p: (causal_mask(p["n"]) & padding_mask([p["n"] - p["pad"]], p["n"])[0][None, :]
                                        ).sum().item(),
    "05.mha_params": lambda p: _meta_params(torch.nn.MultiheadAttention(p["d_model"], p["num_heads"], device="meta")),
    "05.head_scores_cost": lambda p: _flops_matmul(
        torch.empty(p["num_heads"], p["n"], p["d_model"] // p["num_heads"], device="meta"),
        torch.empty(p["num_heads"], p["d_model"] // p["num_heads"], p["n"], device="meta")),
    "05.ffn_params": lambda p: _meta_params(torch.nn.Linear(p["d_model"], 4 * p["d_model"], device="meta"),
                                            torch.nn.Linear(4 * p["d_model"], p["d_model"], device="meta")),
    "06.uniform_entropy": lambda p: _entropy([1 / p["n"]] * p["n"]),
    "06.two_key_entropy": lambda p: _entropy([p["p"], 1 - p["p"], 0.0, 0.0]),
    "06.bonferroni": lambda p: 0.05 / p["tests"],
    "06.permutation_p": lambda p: (p["beaten"] + 1) / (p["shuffles"] + 1),
    "07.cross_pairs": lambda p: padding_mask([p["src"]], p["src"] + p["pad"])[0].expand(p["tgt"], -1).sum().item(),
    "07.all_pairs": lambda p: (torch.ones(p["src"], p["src"], dtype=torch.bool).sum() + causal_mask(p["tgt"]).sum()
                               + torch.ones(p["tgt"], p["src"], dtype=torch.bool).sum()).item(),
    "08.cache_gib": lambda p: kv_cache_bytes(p["num_layers"], p["num_kv_heads"], p["head_dim"], p["seq_len"],
                                             p["batch"], torch.bfloat16) / 2 ** 30,
    "08.gqa_ratio": lambda p: kv_cache_bytes(1, p["num_heads"], 128, 1, 1, torch.float16)
    / kv_cache_bytes(1, p["num_kv_heads"], 128, 1, 1, torch.float16),
    "08.int8_dequant": lambda p: fake_quantize_kv(_t([[[[p["x"], p["absmax"]]]]]), 8)[0, 0, 0, 0].item(),
    "09.online_sum": lambda p: torch.exp(torch.logsumexp(_t(p["tile1"] + p["tile2"]), 0)
                                         - max(p["tile1"] + p["tile2"])).item(),
    "09.rescale": lambda p: (torch.exp(_t(0.0) - p["m_new"]) / torch.exp(_t(0.0) - p["m_old"])).item(),
    "09.merge": lambda p: (torch.softmax(_t(p["scores"]), 0) @ _t(p["values"])).item(),
    "09.score_matrix_mib": lambda p: torch.empty(p["n"], p["n"], device="meta").nbytes / 2 ** 20,
    "10.uniform_loss": lambda p: F.cross_entropy(torch.zeros(1, p["vocab"], dtype=D), torch.tensor([0])).item(),
    "10.temperature": lambda p: torch.softmax(_t(p["logits"]) / p["temperature"], 0)[0].item(),
    "10.top_k": lambda p: torch.softmax(torch.topk(_t(p["logits"]), p["k"]).values, 0)[0].item(),
    "10.gqa_projection_params": lambda p: _meta_params(*(torch.nn.Linear(p["d_model"], o, bias=False, device="meta")
                                                         for o in (p["d_model"], p["d_model"] // p["num_heads"]
                                                                   * p["num_kv_heads"]) * 2)),
    "11.mla_ratio": lambda p: kv_cache_bytes(1, p["num_heads"], p["head_dim"], 1, 1, torch.float16)
    / ((p["latent"] + p["rope"]) * 2),
    "11.ring_after": lambda p: ring_slot_positions(p["last"] + 1, p["window"])[p["slot"]],
    "11.softcap": lambda p: softcap(_t([p["score"]]), p["cap"]).item(),
    "11.window_pairs": lambda p: sliding_window_mask(p["n"], window=p["window"]).sum().item(),
    "12.state_vs_cache": lambda p: next(n for n in range(1, 10 ** 4) if 2 * p["head_dim"] * n >= p["head_dim"] ** 2),
    "12.recurrent_output": lambda p: _linear_last(p),
    "12.decay": lambda p: math.prod([p["gate"]] * p["steps"]),
    # written ahead of notebooks 13 and 14
    "13.local_global_pairs": lambda p: (
        ((torch.arange(p["n"])[:, None] - torch.arange(p["n"])[None, :]).abs() <= p["window"])
        | (torch.arange(p["n"]) < p["num_global"])[:, None] | (torch.arange(p["n"]) < p["num_global"])[None, :]
    ).sum().item(),
    "13.topk_ratio": lambda p: _flops_matmul(torch.empty(p["n"], 64, device="meta"),
                                             torch.empty(64, p["n"], device="meta"))
    / _flops_matmul(torch.empty(p["n"], 1, 64, device="meta"), torch.empty(p["n"], 64, p["k"], device="meta")),
    "13.block_fraction": lambda p: torch.zeros(p["blocks"], p["blocks"]).scatter_(
        1, torch.arange(p["k"]).expand(p["blocks"], -1), 1.0).mean().item(),
    "14.paged_slots": lambda p: _simulate_pages(p["lengths"], p["page"]),
    "14.ring_transfers": lambda p: _simulate_ring(p["devices"]),
    "14.decode_bound": lambda p: p["bandwidth"] / (p["weights_gb"] + p["cache_gb"]),
}


def _simulate_pages(lengths, page):
    """Append tokens one at a time; a sequence takes a new page when its last one is full."""
    pages = 0
    for n in lengths:
        free = 0
        for _ in range(n):
            if free == 0:
                pages, free = pages + 1, page
            free -= 1
    return pages


def _simulate_ring(devices):
    """Each step every device passes the block it holds to its neighbour; count until device 0 has seen them all."""
    held, seen, received = 0, {0}, 0
    while len(seen) < devices:
        held = (held - 1) % devices
        seen.add(held)
        received += 1
    return received


def test_every_number_template_has_an_oracle_and_every_template_a_lab():
    numeric = {qid for qid, make in TEMPLATES.items() if make(random.Random(0)).kind == "number"}
    assert numeric == set(ORACLES), sorted(numeric ^ set(ORACLES))
    in_labs = {qid for lab in labs() for qid in quizzes.bank(lab)}
    on_disk = {p.name[:2] for p in (REPO_ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")}
    assert in_labs == {qid for qid in TEMPLATES if qid[:2] in on_disk}  # every notebook's questions are asked
    ahead = {qid[:2] for qid in TEMPLATES if qid[:2] not in on_disk}  # written before their notebook
    assert ahead <= {"13", "14"}, ahead


@pytest.mark.parametrize("qid", sorted(ORACLES))
def test_numeric_answers_are_recomputed_another_way(qid):
    for seed in SEEDS:
        item = TEMPLATES[qid](random.Random(seed))
        expected = ORACLES[qid](item.params)
        if qid == "03.score_spread":  # a simulation: within 2 % of √d_k
            assert abs(item.answer - expected) < 0.02 * item.answer, (item.params, item.answer, expected)
        elif qid == "08.int8_dequant":  # fake_quantize keeps its scale in float16; the question's scale is exact
            assert abs(item.answer - expected) < item.params["absmax"] * 1e-3, (item.params, expected)
        else:
            assert math.isclose(item.answer, expected, rel_tol=1e-9, abs_tol=1e-9), (seed, item.params, item.answer,
                                                                                    expected)
        assert item.tolerance < max(abs(item.answer), 1e-9) or item.tolerance < 0.01, (qid, item.tolerance)


def test_choice_questions_have_one_right_answer_and_distinct_choices():
    for qid, make in TEMPLATES.items():
        for seed in SEEDS:
            item = make(random.Random(seed))
            assert item.kind in ("choice", "number") and item.explanation and item.text.strip()
            if item.kind == "choice":
                assert len(item.choices) >= 3 and len(set(item.choices)) == len(item.choices), qid
                shuffled = item.shuffled(random.Random(seed))
                assert shuffled.choices[shuffled.answer] == item.choices[item.answer]


def test_the_bank_asks_new_questions_not_the_notebooks_predictions():
    _load_all()
    prompts = {q.prompt for q in QUESTIONS.values()}
    for qid in TEMPLATES:
        assert qid not in QUESTIONS, qid
        assert quizzes.draw(qid).text not in prompts, qid


def test_every_lab_has_a_bank_larger_than_a_quiz():
    for lab in labs():
        ids = quizzes.bank(lab)
        assert len(ids) >= quizzes.QUIZ_SIZE, (lab.slug, ids)
        assert {i[:2] for i in ids} == set(lab.prefixes), lab.slug  # every notebook of the lab is asked about


def test_a_student_s_quiz_is_deterministic_and_differs_between_students():
    (lab3,) = [lab for lab in labs() if lab.number == 3]
    a1, a2 = quizzes.student_quiz("alice", lab3), quizzes.student_quiz("alice", lab3)
    assert a1 == a2 and len(a1) == quizzes.QUIZ_SIZE
    others = [quizzes.student_quiz(f"s{i}", lab3) for i in range(20)]
    assert sum(o != a1 for o in others) >= 18  # questions, numbers or choice order differ
    assert len({tuple(i.qid for i in o) for o in others}) > 1  # and the questions themselves
    with pytest.raises(ValueError, match="student"):
        quizzes.student_quiz("", lab3)


def test_a_hand_out_has_no_answers_and_the_key_has_every_student(tmp_path):
    roster = tmp_path / "roster.txt"
    roster.write_text("alice\nbob\n# comment\n\ncarol,Carol C.\n")
    quizzes.write_all(tmp_path / "q", quizzes.read_roster(roster))
    hand_out = (tmp_path / "q" / "students" / "alice" / "lab-03.md").read_text()
    key = (tmp_path / "q" / "keys" / "lab-03.md").read_text()
    assert "Answer key" not in hand_out and "**" not in hand_out.split("\n", 2)[2].replace("**a)**", "").replace(
        "**b)**", "").replace("**c)**", "").replace("**d)**", "")
    assert [ln for ln in key.splitlines() if ln.startswith("## ")] == ["## alice", "## bob", "## carol"]
    for n, item in enumerate(quizzes.student_quiz("bob", [lab for lab in labs() if lab.number == 3][0]), 1):
        assert f"{n}. **{item.answer_text}**" in key
    roster.write_text("../evil\n")
    with pytest.raises(ValueError, match="not a student id"):
        quizzes.read_roster(roster)


# Moodle XML's rules (docs.moodle.org "Moodle XML format", and question/format/xml/format.php's import: a question
# without name/text is an error, trans_format knows these five text formats and takes anything else for html, an
# answer's fraction attribute is a percentage, a numerical answer is a number with a <tolerance> inside <answer>).
MOODLE_FRACTIONS = {"100", "0"}
MOODLE_FORMATS = {"moodle_auto_format", "html", "plain_text", "wiki_like", "markdown"}
NUMBER = re.compile(r"-?\d+(\.\d+)?([eE][-+]?\d+)?")


def test_the_moodle_export_parses_and_follows_the_format():
    text = quizzes.moodle_xml()
    assert text.startswith('<?xml version="1.0" encoding="UTF-8"?>')
    root = ET.fromstring(text.encode("utf-8"))
    assert root.tag == "quiz" and len(root)
    assert {el.get("format") for el in root.iter() if el.get("format")} <= MOODLE_FORMATS
    names, categories, current = set(), [], None
    counts = {}
    for q in root:
        assert q.tag == "question", q.tag
        kind = q.get("type")
        assert kind in ("category", "multichoice", "numerical"), kind
        if kind == "category":
            path = q.find("category/text").text
            assert path.startswith("$course$/"), path
            categories.append(path)
            current = path
            continue
        assert current is not None, "a question before the first category"
        name = q.find("name/text").text
        assert name and name not in names, name
        names.add(name)
        counts[current] = counts.get(current, 0) + 1
        qt = q.find("questiontext")
        assert qt.get("format") == "html" and qt.find("text").text.startswith("<p>")
        assert float(q.find("defaultgrade").text) > 0 and 0 <= float(q.find("penalty").text) <= 1
        answers = q.findall("answer")
        assert answers and all(a.get("fraction") in MOODLE_FRACTIONS for a in answers)
        assert [a.get("fraction") for a in answers].count("100") == 1  # exactly one right answer
        if kind == "multichoice":
            assert q.find("single").text == "true" and q.find("shuffleanswers").text in ("true", "1")
            assert q.find("answernumbering").text in ("abc", "ABCD", "123", "none")
            assert len(answers) >= 3 and len({a.find("text").text for a in answers}) == len(answers)
        else:
            (a,) = answers
            assert NUMBER.fullmatch(a.find("text").text) and NUMBER.fullmatch(a.find("tolerance").text)
            value, tol = float(a.find("text").text), float(a.find("tolerance").text)
            assert math.isfinite(value) and tol >= 0
    assert len(categories) == len(labs()) == len(set(categories))
    assert all(counts.get(c, 0) >= quizzes.QUIZ_SIZE for c in categories), counts


def test_the_moodle_numeric_answer_is_the_bank_s():
    (lab8,) = [lab for lab in labs() if lab.number == 8]
    root = ET.fromstring(quizzes.moodle_xml([lab8]).encode())
    by_name = {q.find("name/text").text: q for q in root if q.get("type") == "numerical"}
    item = quizzes.draw("08.cache_gib", 1)
    a = by_name["08.cache_gib v2"].find("answer")
    assert float(a.find("text").text) == item.answer and float(a.find("tolerance").text) == item.tolerance
