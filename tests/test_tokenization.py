"""attn_lib.tokenization: BPE from scratch against the worked example, the `tokenizers` library's
BPE trainer and GPT-2's byte table; WordPiece from scratch against the bundled MiniLM tokenizer."""

from __future__ import annotations

import json
from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

import attn_lib
from attn_lib.tokenization import (
    WORD_PATTERN,
    BPETokenizer,
    apply_merges_in_order,
    basic_split,
    bpe_summary,
    bytes_to_unicode,
    count_pairs,
    merge_pair,
    pre_tokenize,
    wordpiece_tokenize,
)

WORKED_MERGES = [("u", "g"), ("u", "n"), ("h", "ug")]


@pytest.fixture(scope="module")
def corpus():
    return (attn_lib.DATA_DIR / "corpus.txt").read_text(encoding="utf-8").splitlines()


def test_corpus_facts_stated_in_data_readme(corpus):
    text = (attn_lib.DATA_DIR / "corpus.txt").read_text(encoding="utf-8")
    assert text.endswith("\n") and "\r" not in text
    assert len(corpus) == 116 and all(corpus)
    assert sum(len(line) for line in corpus) == 5824
    alphabet = {c for line in corpus for c in line}
    assert len(alphabet) == 44 and set("èéïû") <= alphabet
    assert "the cat sat on the mat." in corpus


@pytest.fixture(scope="module")
def trained(corpus):
    return BPETokenizer.train(corpus, 300)


# ---------------------------------------------------------------- the worked example


def test_worked_example():
    tok = BPETokenizer(WORKED_MERGES, "bghnpsu")
    assert tok.tokenize("bug") == ["b", "ug"]
    assert tok.tokenize("hugs") == ["hug", "s"]
    assert tok.tokenize("pun") == ["p", "un"]
    # ids: [UNK], the alphabet sorted, then the merges in order
    assert tok.id_to_token == ["[UNK]", "b", "g", "h", "n", "p", "s", "u", "ug", "un", "hug"]
    assert tok.encode("hugs") == [10, 6]
    assert tok.decode([10, 6]) == "hugs"
    assert tok.vocab_size == len(tok) == 11


def test_unknown_characters_become_unk_one_each():
    tok = BPETokenizer(WORKED_MERGES, {"b", "g", "h", "n", "p", "s", "u"}, unk_token="<?>")
    assert tok.tokenize("mug") == ["<?>", "ug"]
    assert tok.tokenize("thug") == ["<?>", "hug"]
    assert tok.tokenize("xyz") == ["<?>", "<?>", "<?>"]
    assert tok.encode("mug") == [0, 8]
    assert tok.decode(tok.encode("mug")) == "<?>ug"
    # the space is not in this alphabet either: it is unknown, and never merged
    assert tok.tokenize("bug hugs") == ["b", "ug", "<?>", "hug", "s"]


def test_merges_applied_in_learned_order_not_by_length():
    # learned order: (a, b) first, so "abc" -> "ab" + "c" even though (b, c) would also be possible
    tok = BPETokenizer([("a", "b"), ("b", "c")], "abc")
    assert tok.tokenize("abc") == ["ab", "c"]
    # the other order gives the other result
    assert BPETokenizer([("b", "c"), ("a", "b")], "abc").tokenize("abc") == ["a", "bc"]
    # not greedy longest-match: "abcd" with merges (c,d),(a,b),(b,cd)->"bcd" would be longer,
    # but (a,b) is applied before (b,cd) can be
    tok = BPETokenizer([("c", "d"), ("a", "b"), ("b", "cd")], "abcd")
    assert tok.tokenize("abcd") == ["ab", "cd"]
    assert "bcd" in tok.vocab


def test_merge_pair_and_count_pairs():
    assert merge_pair(["a", "a", "a"], ("a", "a")) == ["aa", "a"]
    assert merge_pair(["h", "u", "g", "u", "g"], ("u", "g")) == ["h", "ug", "ug"]
    assert merge_pair([], ("a", "b")) == []
    counts = count_pairs({("h", "u", "g"): 10, ("p", "u", "g"): 5, ("a", "a", "a"): 1})
    assert counts == Counter({("u", "g"): 15, ("h", "u"): 10, ("p", "u"): 5, ("a", "a"): 2})


# ---------------------------------------------------------------- pre-tokenization


def test_pre_tokenize_the_cat_sentence():
    assert pre_tokenize("the cat sat on the mat.") == ["the", " cat", " sat", " on", " the", " mat", "."]
    assert pre_tokenize("don't  stop") == ["don", "'t", " ", " stop"]


@given(st.text())
def test_pre_tokenize_loses_nothing(text):
    assert "".join(pre_tokenize(text)) == text


def test_pre_tokenize_matches_tokenizers_regex(corpus):
    """The `tokenizers` library (Oniguruma regex engine) cuts the corpus exactly like Python's re."""
    from tokenizers import Regex, pre_tokenizers

    split = pre_tokenizers.Split(Regex(WORD_PATTERN), behavior="isolated")
    for line in corpus + ["don't  stop, it's 2024_x!", "naïve café — ok?"]:
        assert [piece for piece, _ in split.pre_tokenize_str(line)] == pre_tokenize(line)


# ---------------------------------------------------------------- training


def test_train_reproduces_worked_example():
    # notebook 01's toy corpus: words hug x9, pug x6, pun x7, bun x8, hugs x3, one word per line (no spaces)
    lines = ["hug"] * 9 + ["pug"] * 6 + ["pun"] * 7 + ["bun"] * 8 + ["hugs"] * 3
    tok = BPETokenizer.train(lines, 100, min_frequency=1)
    # by hand, step 1 pair counts: (u,g) hug+pug+hugs 9+6+3 = 18, (u,n) pun+bun 7+8 = 15,
    # (p,u) pug+pun 6+7 = 13, (h,u) hug+hugs 9+3 = 12, (b,u) 8, (g,s) 3 -> merge (u,g) with 18.
    # Step 2: (u,n) 15; (h,ug) 12; (p,u) falls to 7 ("pug" is now p+ug); (b,u) 8, (p,ug) 6, (ug,s) 3 -> (u,n) 15.
    # Step 3: (h,ug) 12 beats (b,un) 8, (p,un) 7, (p,ug) 6, (ug,s) 3 -> (h,ug) 12. No ties anywhere.
    assert tok.merges[:3] == WORKED_MERGES
    assert tok.merge_counts[:3] == [9 + 6 + 3, 7 + 8, 9 + 3]
    assert tok.alphabet == list("bghnpsu")
    three = tok.with_merges(3)
    assert three.tokenize("bug") == ["b", "ug"] and three.tokenize("hugs") == ["hug", "s"]
    assert tok.tokenize("hugs") == ["hugs"]  # later merges made the whole word one token


def test_ties_are_alphabetical():
    # "ab" and "cd" both occur 3 times: (a, b) wins the tie; then (c, d)
    tok = BPETokenizer.train(["cd", "ab", "cd", "ab", "cd", "ab"], 100)
    assert tok.merges[:2] == [("a", "b"), ("c", "d")]
    assert tok.merge_counts[:2] == [3, 3]
    # the same corpus in another order gives the same merges: only counts and ties decide
    assert BPETokenizer.train(["ab", "cd"] * 3, 100).merges == tok.merges


def test_train_counts_and_vocab_size(trained, corpus):
    assert trained.vocab_size == 300
    alphabet = sorted({c for line in corpus for c in line})
    assert trained.alphabet == alphabet
    assert trained.id_to_token[: len(alphabet) + 1] == ["[UNK]", *alphabet]
    # counts never increase: each step takes the most frequent pair left
    assert all(a >= b for a, b in zip(trained.merge_counts, trained.merge_counts[1:]))
    # the first merge is the most frequent pair of the whole corpus, counted independently
    words = Counter(tuple(w) for line in corpus for w in pre_tokenize(line))
    counts = count_pairs(words)
    top = max(counts.values())
    assert trained.merge_counts[0] == top
    assert trained.merges[0] == min(p for p, c in counts.items() if c == top)
    # the sentence of the course: every word is already one token
    assert trained.tokenize("the cat sat on the mat.") == ["the", " cat", " sat", " on", " the", " mat", "."]


def test_train_stops_at_min_frequency():
    tok = BPETokenizer.train("ab ab cd", 1000, min_frequency=2)
    assert all(c >= 2 for c in tok.merge_counts)
    assert tok.vocab_size < 1000
    assert len(BPETokenizer.train("ab ab cd", 1000, min_frequency=1).merges) > len(tok.merges)


def test_with_merges_equals_shorter_training(corpus, trained):
    for k in (0, 5, 40, len(trained.merges)):
        shorter = BPETokenizer.train(corpus, trained.vocab_size - len(trained.merges) + k)
        assert trained.with_merges(k).merges == shorter.merges


@given(st.lists(st.text(alphabet="abcde ", min_size=1, max_size=12), min_size=1, max_size=12), st.integers(6, 40))
def test_fast_tokenize_equals_plain_definition(corpus_lines, vocab_size):
    """tokenize_word (lowest-rank pair first) == apply every merge in learned order, one by one."""
    tok = BPETokenizer.train(corpus_lines, max(vocab_size, len({c for t in corpus_lines for c in t}) + 1), min_frequency=1)
    for line in corpus_lines + ["abcdeabcde", "eeee aaaa", "badcab"]:
        for word in pre_tokenize(line):
            symbols = [c if c in tok.alphabet else tok.unk_token for c in word]
            assert tok.tokenize_word(word) == apply_merges_in_order(symbols, tok.merges)


def test_matches_tokenizers_bpe_trainer(corpus):
    """Same words, same vocab_size, same min_frequency as `tokenizers`' BpeTrainer.

    With our default tie rule (alphabetical) the first 14 merges agree; merge 15 is a tie that
    the two rules break differently; after it the counts differ and the lists drift apart.
    With tie_break="vocab_order" (the library's rule) every merge, every id and every
    encoding agree.
    """
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers, trainers

    words = [w for line in corpus for w in pre_tokenize(line)]
    hf = Tokenizer(models.BPE(unk_token="[UNK]"))
    hf.pre_tokenizer = pre_tokenizers.Split(Regex(WORD_PATTERN), behavior="isolated")
    trainer = trainers.BpeTrainer(vocab_size=400, min_frequency=2, special_tokens=["[UNK]"], show_progress=False)
    hf.train_from_iterator(words, trainer)
    hf_merges = [tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in json.loads(hf.to_str())["model"]["merges"]]

    ours = BPETokenizer.train(corpus, 400)
    assert len(ours.merges) == len(hf_merges) == 400 - 1 - len(ours.alphabet)
    first_difference = next(i for i, (a, b) in enumerate(zip(ours.merges, hf_merges)) if a != b)
    assert first_difference == 14
    assert ours.merges[14] == (" w", "a") and hf_merges[14] == ("a", "s")
    # ... and it is a tie: after the first 14 merges both pairs occur equally often
    words_now = Counter(tuple(apply_merges_in_order(list(w), ours.merges[:14])) for w in words)
    counts = count_pairs(words_now)
    assert counts[(" w", "a")] == counts[("a", "s")] == max(counts.values()) == ours.merge_counts[14]
    # alphabetically " w" < "a" (space sorts first); by id "a" (a character) < " w" (a merge)
    assert ours.vocab["a"] < ours.vocab[" w"]
    assert 0.5 < len(set(ours.merges) & set(hf_merges)) / len(hf_merges) < 1.0

    same = BPETokenizer.train(corpus, 400, tie_break="vocab_order")
    assert same.merges == hf_merges
    assert same.vocab == hf.get_vocab()
    for text in corpus[:20] + ["the cat sat on the mat.", "tokenization of unhappiness", "zebra 42!"]:
        assert same.encode(text) == hf.encode(text).ids


# ---------------------------------------------------------------- byte level


def test_bytes_to_unicode_matches_gpt2_table():
    from tokenizers import pre_tokenizers

    table = bytes_to_unicode()
    assert len(table) == 256 and len(set(table.values())) == 256
    assert table[ord("a")] == "a" and table[ord(" ")] == "Ġ" and table[ord("\n")] == "Ċ"
    assert set(table.values()) == set(pre_tokenizers.ByteLevel.alphabet())


@pytest.fixture(scope="module")
def byte_tok(corpus):
    return BPETokenizer.train(corpus, 500, byte_level=True)


def test_byte_level_tokens(byte_tok):
    assert byte_tok.vocab_size == 500
    assert byte_tok.id_to_token[:256] == list(bytes_to_unicode().values())
    assert byte_tok.unk_token is None
    assert byte_tok.tokenize("the cat sat on the mat.") == ["the", "Ġcat", "Ġsat", "Ġon", "Ġthe", "Ġmat", "."]
    # an emoji is 4 UTF-8 bytes, never seen in training: 4 byte tokens, no [UNK]
    emoji = byte_tok.tokenize("🙂")
    assert emoji == [bytes_to_unicode()[b] for b in "🙂".encode("utf-8")]
    assert byte_tok.decode(byte_tok.encode("🙂")) == "🙂"


@given(st.text())
def test_byte_level_round_trip_any_text(byte_tok, text):
    ids = byte_tok.encode(text)
    assert all(0 <= i < byte_tok.vocab_size for i in ids)
    assert byte_tok.decode(ids) == text


@given(st.text(alphabet="abc \n", max_size=30), st.text(max_size=30))
def test_byte_level_round_trip_trained_on_anything(train_text, text):
    tok = BPETokenizer.train([train_text, text], 300, byte_level=True, min_frequency=1)
    assert tok.decode(tok.encode(text)) == text


def test_byte_level_bad_ids_and_partial_utf8(byte_tok):
    # the first byte of "é" alone is not valid UTF-8: decoded as U+FFFD, not an exception
    first_byte = bytes_to_unicode()["é".encode()[0]]
    assert byte_tok.decode([byte_tok.vocab[first_byte]]) == "\ufffd"
    with pytest.raises(ValueError, match="lone surrogate"):
        byte_tok.encode("\ud800")


# ---------------------------------------------------------------- errors


@pytest.mark.parametrize(
    "args, kwargs, error, words",
    [
        (([("u", "x")], "bghnpsu"), {}, ValueError, ["merge 0", "'x'", "alphabet"]),
        (([("h", "ug"), ("u", "g")], "bghnpsu"), {}, ValueError, ["merge 0", "'ug'", "earlier merge"]),
        (([("u",)], "bghnpsu"), {}, ValueError, ["merge 0", "pair"]),
        (([], ["ab"]), {}, ValueError, ["alphabet", "'ab'"]),
        (([], "abc"), {"unk_token": "a"}, ValueError, ["unk_token", "'a'"]),
        (([("[UNK]", "a")], "abc"), {}, ValueError, ["merge 0", "unk_token"]),
        (([], None), {}, ValueError, ["alphabet"]),
        (([], "abc"), {"byte_level": True}, ValueError, ["alphabet", "byte_level"]),
    ],
)
def test_constructor_errors(args, kwargs, error, words):
    with pytest.raises(error) as info:
        BPETokenizer(*args, **kwargs)
    for word in words:
        assert word in str(info.value)


def test_method_errors():
    tok = BPETokenizer(WORKED_MERGES, "bghnpsu")
    with pytest.raises(TypeError, match="text must be a str"):
        tok.tokenize(["bug"])
    with pytest.raises(ValueError, match=r"id 11 .*vocab_size=11"):
        tok.decode([1, 11])
    with pytest.raises(ValueError, match="-1"):
        tok.decode([-1])
    with pytest.raises(TypeError, match="ids must be ints"):
        tok.decode(["b"])
    with pytest.raises(ValueError, match="'zz'"):
        tok.convert_tokens_to_ids(["zz"])
    with pytest.raises(ValueError, match=r"vocab_size=5 .*45"):
        BPETokenizer.train((attn_lib.DATA_DIR / "corpus.txt").read_text(), 5)
    with pytest.raises(ValueError, match="256 bytes"):
        BPETokenizer.train("abc", 100, byte_level=True)
    with pytest.raises(TypeError, match="corpus"):
        BPETokenizer.train(42, 100)
    with pytest.raises(ValueError, match="min_frequency"):
        BPETokenizer.train("abc", 100, min_frequency=0)
    with pytest.raises(ValueError, match="tie_break"):
        BPETokenizer.train("abc", 100, tie_break="random")
    with pytest.raises(ValueError, match="num_merges"):
        tok.with_merges(4)


# ---------------------------------------------------------------- widget logic


def test_bpe_summary(trained):
    start = trained.vocab_size - len(trained.merges)
    text = bpe_summary(trained, start, "the cat")
    assert f"vocab_size {start} = {start} starting symbols + 0 merges" in text
    assert "t | h | e |   | c | a | t" in text
    text = bpe_summary(trained, start + 3, "the cat", last=2)
    assert "+ 3 merges" in text and "last 2 merges" in text
    assert "     3. " in text and "     1. " not in text
    assert f"(seen {trained.merge_counts[2]} times)" in text
    assert "the |  cat" in bpe_summary(trained, trained.vocab_size, "the cat")
    with pytest.raises(ValueError, match="vocab_size"):
        bpe_summary(trained, start - 1, "x")


# ---------------------------------------------------------------- WordPiece (the real model's tokenizer)


def test_minilm_wordpiece_ids_cls_sep(pretrained):
    tokenizer, _ = pretrained
    enc = tokenizer("the cat sat on the mat.")
    ids = enc["input_ids"]
    tokens = tokenizer.convert_ids_to_tokens(ids)
    assert tokens == ["[CLS]", "the", "cat", "sat", "on", "the", "mat", ".", "[SEP]"]
    assert ids[0] == tokenizer.cls_token_id == tokenizer.vocab["[CLS]"]
    assert ids[-1] == tokenizer.sep_token_id == tokenizer.vocab["[SEP]"]
    assert ids[1:-1] == [tokenizer.vocab[t] for t in tokens[1:-1]]
    # rare words are cut into pieces; "##" marks a piece that continues a word
    assert tokenizer.tokenize("tokenization") == ["token", "##ization"]


def test_wordpiece_from_scratch_equals_minilm(pretrained, corpus):
    tokenizer, _ = pretrained
    extra = ["Tokenization of UNHAPPINESS, naïve café!", "The Quick Brown Fox.", "xyzzyqx 2024", "a" * 120]
    vocab = tokenizer.get_vocab()  # built once: the .vocab property rebuilds the dict on every access
    for text in corpus + extra:
        assert wordpiece_tokenize(text, vocab) == tokenizer.tokenize(text), text
    assert basic_split("The cat sat.") == ["the", "cat", "sat", "."]


def test_bpe_and_wordpiece_differ_on_the_same_word(pretrained, trained):
    tokenizer, _ = pretrained
    # the same word, two vocabularies: WordPiece marks continuations with ##, BPE marks word starts with a space
    assert tokenizer.tokenize("unhappiness") == ["un", "##ha", "##pp", "##iness"]
    bpe = trained.tokenize(" unhappiness")
    assert bpe[0].startswith(" ") and "".join(bpe) == " unhappiness"


# ---------------------------------------------------------------- exact against the real libraries (issue #13)

from hypothesis import settings  # noqa: E402

# generated text: mixed scripts, digits and other numerals, punctuation, spaces of several kinds,
# control and format characters -- the places where "nearly equal" tokenizers differ
_MIXED = (
    "abcxyzABCXYZ" "0123456789" "²³½¼Ⅻⅷ٣۴" "éèïûçÅÑß" "αβΣςωΩ" "кошкаЖ" "سلام" "中文字国" "ひらカナ" "한글"
    ".,;:!?'\"-_()[]{}$+^`~@#%&*/\\|<>" "—–…«»¿¡" "🙂🐈"
    " \t\n\r\x0b\x0c\xa0\u2003\u3000\u2028" "\x00\x07\x1f\x7f\x85" "\u00ad\u200b\u200d\u2060\ufeff\ufffd\ue000"
)
mixed_text = st.text(alphabet=_MIXED, max_size=40)


def _byte_chars(word: str) -> str:
    table = bytes_to_unicode()
    return "".join(table[b] for b in word.encode("utf-8"))


def test_pre_tokenize_numerals_are_numbers_as_in_gpt2():
    # GPT-2's \p{N}: superscripts, fractions and Roman numerals are numbers, not letters
    assert pre_tokenize("m² of land") == ["m", "²", " of", " land"]
    assert pre_tokenize("Louis XIV, Ⅻ and ½") == ["Louis", " XIV", ",", " Ⅻ", " and", " ½"]
    assert pre_tokenize("x_1") == ["x", "_", "1"]


@settings(max_examples=150, deadline=None)
@given(mixed_text)
def test_pre_tokenize_equals_the_tokenizers_byte_level_pre_tokenizer(text):
    """GPT-2's pre-tokenizer as the `tokenizers` library runs it (Oniguruma), piece for piece."""
    from tokenizers import pre_tokenizers

    real = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    assert [p for p, _ in real.pre_tokenize_str(text)] == [_byte_chars(w) for w in pre_tokenize(text)]


def _hf_byte_level(texts, vocab_size, min_frequency=2):
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    hf = Tokenizer(models.BPE())
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=min_frequency, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    hf.train_from_iterator(texts, trainer)
    merges = [tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in json.loads(hf.to_str())["model"]["merges"]]
    return hf, merges


def test_byte_level_vocab_order_equals_tokenizers_trainer(corpus):
    """Byte-level BPE with tie_break="vocab_order" learns the library's merges, one by one.

    The library numbers its 256 starting symbols by code point of the byte-level character, so "Ġ"
    (U+0120, the space byte) ranks after every printable ASCII byte; ranking by byte value (0x20,
    first) picks ('Ġ', x) where the library picks a letter pair of the same count.
    """
    hf, hf_merges = _hf_byte_level(corpus, 600)
    ours = BPETokenizer.train(corpus, 600, byte_level=True, tie_break="vocab_order")
    assert ours.merges == hf_merges and len(hf_merges) == 600 - 256
    for text in corpus[:20] + ["the cat sat on the mat.", "m² ½ 🙂 naïve"]:
        assert ours.tokenize(text) == hf.encode(text).tokens
    # the space byte does tie with a letter pair at some step: ranking by byte value chooses differently
    by_byte = BPETokenizer.train(corpus, 600, byte_level=True, tie_break="alphabetical")
    k = next(i for i, (a, b) in enumerate(zip(by_byte.merges, hf_merges)) if a != b)
    assert by_byte.merge_counts[k] == ours.merge_counts[k]  # a tie ...
    assert by_byte.merges[k][0].startswith("Ġ") and not hf_merges[k][0].startswith("Ġ")  # ... broken the other way


@settings(max_examples=25, deadline=None)
@given(st.lists(st.text(alphabet="ab c\n", min_size=1, max_size=12), min_size=1, max_size=8))
def test_byte_level_vocab_order_equals_trainer_on_space_ties(lines):
    """Tiny corpora of a, b, c and spaces: the space byte ties with letters all the time."""
    _, hf_merges = _hf_byte_level(lines, 280, min_frequency=1)
    assert BPETokenizer.train(lines, 280, byte_level=True, min_frequency=1, tie_break="vocab_order").merges == hf_merges


def test_train_on_word_frequencies_equals_trainer_fed_repeated_words():
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers, trainers

    freqs = {"low": 5, "lower": 2, "newest": 6, "widest": 3, " the": 7, "cat": 0}
    repeated = [w for w, n in freqs.items() for _ in range(n)]
    hf = Tokenizer(models.BPE(unk_token="[UNK]"))
    hf.pre_tokenizer = pre_tokenizers.Split(Regex(WORD_PATTERN), behavior="isolated")
    trainer = trainers.BpeTrainer(vocab_size=30, min_frequency=2, special_tokens=["[UNK]"], show_progress=False)
    hf.train_from_iterator(repeated, trainer)
    hf_merges = [tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in json.loads(hf.to_str())["model"]["merges"]]
    ours = BPETokenizer.train(freqs, 30, tie_break="vocab_order")
    assert ours.merges == hf_merges and ours.vocab == hf.get_vocab()
    assert BPETokenizer.train(repeated, 30, tie_break="vocab_order").merges == ours.merges
    # the counts matter: (e, s) from newest x6 + widest x3 = 9 is the first merge, not a pair of "low"
    assert ours.merges[0] == ("e", "s") and ours.merge_counts[0] == 9
    assert BPETokenizer.train({"ab": 100, "cd": 1}, 7, min_frequency=1).merges == [("a", "b"), ("c", "d")]
    assert BPETokenizer.train({"ab": 100, "cd": 1}, 7).merges == [("a", "b")]  # cd occurs once < min_frequency 2


def test_wordpiece_deletes_control_and_format_characters_like_minilm(pretrained):
    tokenizer, _ = pretrained
    vocab = tokenizer.get_vocab()
    for text in ["co\u00adoperation", "zero\u200bwidth", "a\x00b\ufffdc", "tab\there\nnew\rline",
                 "m² 中文 ΑΣ\u3000café", "x\x85y\x0bz", "\ufeffstart"]:
        assert wordpiece_tokenize(text, vocab) == tokenizer.tokenize(text), repr(text)
    assert basic_split("co\u00adoperation") == ["cooperation"]
    assert basic_split("zero\u200bwidth") == ["zerowidth"]
    assert basic_split("中文") == ["中", "文"]


@settings(max_examples=200, deadline=None)
@given(mixed_text)
def test_wordpiece_equals_minilm_on_generated_text(pretrained, text):
    tokenizer, _ = pretrained
    assert wordpiece_tokenize(text, _minilm_vocab(tokenizer)) == tokenizer.tokenize(text)


_VOCABS: dict = {}


def _minilm_vocab(tokenizer):
    if id(tokenizer) not in _VOCABS:
        _VOCABS[id(tokenizer)] = tokenizer.get_vocab()
    return _VOCABS[id(tokenizer)]


@settings(max_examples=150, deadline=None)
@given(mixed_text)
def test_byte_level_tokens_equal_trainer_tokens_on_generated_text(corpus_byte_pair, text):
    ours, hf = corpus_byte_pair
    assert ours.tokenize(text) == hf.encode(text).tokens
    assert ours.decode(ours.encode(text)) == text


@pytest.fixture(scope="module")
def corpus_byte_pair(corpus):
    hf, _ = _hf_byte_level(corpus, 400)
    return BPETokenizer.train(corpus, 400, byte_level=True, tie_break="vocab_order"), hf


# ---------------------------------------------------------------- argument errors (issues #12, #19)


@pytest.mark.parametrize(
    "call, error, words",
    [
        (lambda: BPETokenizer(None, "abc"), TypeError, ["merges", "None"]),
        (lambda: BPETokenizer("ab", "abc"), TypeError, ["merges", "str"]),
        (lambda: BPETokenizer([], 5), TypeError, ["alphabet", "int 5"]),
        (lambda: BPETokenizer([], [1, 2]), TypeError, ["alphabet entries", "int 1"]),
        (lambda: BPETokenizer(WORKED_MERGES, "bghnpsu").decode(5), TypeError, ["ids", "int 5", "[5, 17]"]),
        (lambda: BPETokenizer(WORKED_MERGES, "bghnpsu").decode(None), TypeError, ["ids", "None"]),
        (lambda: BPETokenizer(WORKED_MERGES, "bghnpsu").decode(__import__("torch").ones(2, 3, dtype=__import__("torch").long)),
         ValueError, ["ids", "1-D", "(2, 3)", "each row"]),
        (lambda: BPETokenizer.train({"ab": "many"}, 10), TypeError, ["frequencies", "'many'"]),
        (lambda: BPETokenizer.train({"ab": -1}, 10), ValueError, ["frequencies", "-1"]),
        (lambda: wordpiece_tokenize("hello", "hello.txt"), TypeError, ["vocab", "str", "substring", "read it first"]),
        (lambda: wordpiece_tokenize("hello", None), TypeError, ["vocab", "None"]),
        (lambda: wordpiece_tokenize("hello", {"hello": 0}, max_input_chars_per_word="100"), TypeError,
         ["max_input_chars_per_word", "'100'"]),
        (lambda: wordpiece_tokenize("hello", {"hello": 0}, max_input_chars_per_word=0), ValueError,
         ["max_input_chars_per_word", ">= 1", "0"]),
        (lambda: wordpiece_tokenize("hello", {"hello": 0}, unk_token=None), TypeError, ["unk_token", "None"]),
        (lambda: wordpiece_tokenize(None, {"hello": 0}), TypeError, ["text", "None"]),
        (lambda: basic_split("x", lowercase="yes"), TypeError, ["lowercase", "'yes'"]),
    ],
)
def test_argument_errors_name_argument_and_value(call, error, words):
    with pytest.raises(error) as info:
        call()
    for word in words:
        assert word in str(info.value), (word, str(info.value))


def test_decode_accepts_a_1d_tensor_and_a_tuple():
    import torch

    tok = BPETokenizer(WORKED_MERGES, "bghnpsu")
    assert tok.decode(torch.tensor([10, 6])) == tok.decode((10, 6)) == "hugs"


# ---------------------------------------------------------------- special tokens, streams, CS336's ties (issue 38 §5)

import os  # noqa: E402
import tracemalloc  # noqa: E402
from pathlib import Path  # noqa: E402

EOT = "<|endoftext|>"

# Stanford CS336's assignment 1 fixtures (data, MIT licence), outside the project: ../shared/peer-data/cs336 next to
# the repository (ATTN_PEER_DATA overrides the folder). A learner's clone has none, so these tests skip there.
PEER = Path(os.environ.get("ATTN_PEER_DATA",
                           Path(__file__).resolve().parents[1].parent / "shared" / "peer-data")) / "cs336"
needs_peer_data = pytest.mark.skipif(not (PEER / "corpus.en").is_file(), reason=f"no CS336 fixtures at {PEER}")


def test_special_tokens_are_whole_tokens_with_the_last_ids():
    tok = BPETokenizer(WORKED_MERGES, "bghnpsu", special_tokens=["<s>", "</s>"])
    # ids: [UNK], the alphabet, the merges (0..10 as in test_worked_example), then the special tokens in order
    assert tok.id_to_token[:11] == BPETokenizer(WORKED_MERGES, "bghnpsu").id_to_token
    assert tok.id_to_token[11:] == ["<s>", "</s>"] and tok.special_tokens == ["<s>", "</s>"]
    # "<s>" would otherwise be three unknown characters; "hug" and "s" are not merged across "</s>"
    assert tok.tokenize("<s>hug</s>s") == ["<s>", "hug", "</s>", "s"]
    assert tok.encode("<s>hug</s>s") == [11, 10, 12, 6]
    assert tok.decode([11, 10, 12, 6]) == "<s>hug</s>s"
    assert BPETokenizer(WORKED_MERGES, "bghnpsu").tokenize("<s>") == ["[UNK]", "s", "[UNK]"]


def test_byte_level_special_tokens_round_trip_and_split_pre_tokenization():
    merges = [("Ġ", "t"), ("h", "e"), ("Ġt", "he")]
    tok = BPETokenizer(merges, byte_level=True, special_tokens=[EOT, "<|pad|> x"])
    assert tok.vocab[EOT] == 259 and tok.vocab["<|pad|> x"] == 260 and tok.vocab_size == 261
    text = "the end" + EOT + " the<|pad|> x the"
    # without the special tokens, " the" after one would be cut as "|>" + " the"; with them, as " the" alone
    assert tok.tokenize(text) == ["t", "he", "Ġ", "e", "n", "d", EOT, "Ġthe", "<|pad|> x", "Ġthe"]
    assert tok.decode(tok.encode(text)) == text  # a special token with a space decodes as itself, not via Ġ
    plain = BPETokenizer(merges, byte_level=True)
    assert plain.tokenize(EOT) == ["<", "|", "e", "n", "d", "o", "f", "t", "e", "x", "t", "|", ">"]


def test_overlapping_special_tokens_leftmost_then_longest():
    # CS336's case: with both specials, two <|endoftext|> in a row are the longer token
    tok = BPETokenizer([], byte_level=True, special_tokens=[EOT, EOT + EOT])
    tokens = tok.tokenize("Hello, how " + EOT + EOT + " are you?" + EOT)
    assert tokens.count(EOT + EOT) == 1 and tokens.count(EOT) == 1
    assert tok.tokenize(EOT * 3) == [EOT + EOT, EOT]  # leftmost, longest first, then what is left
    # leftmost wins over longest: "ab" starts before "bcd"; where "bcd" starts first it wins
    tok = BPETokenizer([], "abcdx", special_tokens=["bcd", "ab"])
    assert tok.tokenize("abcd") == ["ab", "c", "d"]
    assert tok.tokenize("xbcd") == ["x", "bcd"]


def test_train_never_counts_pairs_across_or_inside_special_tokens():
    text = "ab" + EOT + "ab" + EOT + "cd"
    tok = BPETokenizer.train(text, 100, special_tokens=[EOT], min_frequency=1)
    # the alphabet is that of the text between the special tokens; "b<" / "<|" pairs never appear
    assert tok.alphabet == list("abcd")
    assert tok.merges == [("a", "b"), ("c", "d")] and tok.merge_counts == [2, 1]
    assert tok.id_to_token == ["[UNK]", "a", "b", "c", "d", "ab", "cd", EOT]
    without = BPETokenizer.train(text, 100, min_frequency=1)
    assert ("<", "|") in without.merges and set("<|>") <= set(without.alphabet)  # what the special token prevents
    # vocab_size counts the special tokens; with_merges keeps them, right after the kept merges
    byte = BPETokenizer.train(text * 3, 260, byte_level=True, special_tokens=[EOT, "<|pad|>"], min_frequency=1)
    assert byte.vocab_size == 260 and len(byte.merges) == 2 and byte.id_to_token[258:] == [EOT, "<|pad|>"]
    assert byte.with_merges(1).id_to_token[257:] == [EOT, "<|pad|>"]
    assert byte.with_merges(0).encode(EOT) == [256]


def test_greatest_bytes_tie_rule_by_hand():
    """CS336's rule: among the most frequent pairs, the greatest (left, right) compared as raw bytes.

    The text holds four words twice each: "é" (UTF-8 C3 A9, shown "Ã" "©"), " x" (bytes 20 78, shown "Ġ" "x"),
    "ab" and "ac", between special tokens. Each word is one pair, counted 2: a four-way tie at every step.
    By raw bytes the left tokens order as 0x20 (Ġ) < 0x61 (a) < 0xC3 (Ã), so the greatest first: (Ã, ©), then
    the two pairs with left "a", the greater right first: (a, c) before (a, b), and (Ġ, x) last. Comparing the
    printable characters instead would put "Ġ" (U+0120) first, after all of them.
    """
    text = ("é" + EOT + " x" + EOT + "ab" + EOT + "ac" + EOT) * 2
    expected = [("Ã", "©"), ("a", "c"), ("a", "b"), ("Ġ", "x")]
    tok = BPETokenizer.train(text, 256 + len(expected) + 1, byte_level=True, special_tokens=[EOT],
                             tie_break="greatest_bytes")
    assert tok.merges == expected and tok.merge_counts == [2, 2, 2, 2]
    assert max(["Ã", "a", "Ġ"]) == "Ġ"  # the printable characters order otherwise
    # the other two rules, derived the same way: smallest bytes first; smallest code point of the printable
    # character first (the tokenizers library's ids: "a" U+0061 < "Ã" U+00C3 < "Ġ" U+0120)
    assert BPETokenizer.train(text, 261, byte_level=True, special_tokens=[EOT]).merges == [
        ("Ġ", "x"), ("a", "b"), ("a", "c"), ("Ã", "©")]
    assert BPETokenizer.train(text, 261, byte_level=True, special_tokens=[EOT], tie_break="vocab_order").merges == [
        ("a", "b"), ("a", "c"), ("Ã", "©"), ("Ġ", "x")]
    assert tok.tokenize(text[:len("é" + EOT + " x")]) == ["Ã©", EOT, "Ġx"] and tok.vocab[EOT] == 260
    # character mode: the same rule on the characters' UTF-8 bytes; "cd" beats "ab" on a tie
    assert BPETokenizer.train(["ab", "cd"] * 3, 100, tie_break="greatest_bytes").merges == [("c", "d"), ("a", "b")]


@needs_peer_data
def test_greatest_bytes_training_reproduces_cs336_reference_merges_and_vocab():
    """CS336's test_train_bpe: corpus.en, vocab_size 500, special token <|endoftext|>, no minimum count."""
    import time

    start = time.perf_counter()
    tok = BPETokenizer.train((PEER / "corpus.en").read_text(encoding="utf-8"), 500, byte_level=True,
                             special_tokens=[EOT], tie_break="greatest_bytes", min_frequency=1)
    print(f"trained on corpus.en in {time.perf_counter() - start:.2f} s")  # reported, not asserted
    lines = (PEER / "train-bpe-reference-merges.txt").read_text(encoding="utf-8").splitlines()
    reference = [tuple(line.split(" ")) for line in lines if line]
    assert len(reference) == 243 and tok.merges == reference
    reference_vocab = json.loads((PEER / "train-bpe-reference-vocab.json").read_text(encoding="utf-8"))
    assert set(tok.vocab) == set(reference_vocab) and tok.vocab_size == len(reference_vocab) == 500
    # both number the merges in order; the reference puts the special token first, attn_lib last
    assert reference_vocab[EOT] == 0 and tok.vocab[EOT] == 499
    assert all(reference_vocab["".join(m)] - 257 == tok.vocab["".join(m)] - 256 for m in reference)
    # the tie rule decides: the default rule (smallest first) learns other merges from the same counts
    other = BPETokenizer.train((PEER / "corpus.en").read_text(encoding="utf-8"), 500, byte_level=True,
                               special_tokens=[EOT], min_frequency=1)
    k = next(i for i, (a, b) in enumerate(zip(other.merges, reference)) if a != b)
    assert other.merge_counts[k] == tok.merge_counts[k]  # the same counts so far: a tie, broken the other way
    assert other.merges[k] < reference[k]


# ---------------------------------------------------------------- GPT-2's files: tiktoken and tokenizers agree


@pytest.fixture(scope="module")
def gpt2():
    if not (PEER / "gpt2_vocab.json").is_file():
        pytest.skip(f"no GPT-2 files at {PEER}")
    return BPETokenizer.from_files(PEER / "gpt2_vocab.json", PEER / "gpt2_merges.txt")


@pytest.fixture(scope="module")
def tiktoken_gpt2():
    """tiktoken's GPT-2 encoding built offline (tiktoken.get_encoding("gpt2") downloads its files at first use):
    the ranks are GPT-2's vocab.json ids, keyed by the bytes each token stands for."""
    tiktoken = pytest.importorskip("tiktoken")
    if not (PEER / "gpt2_vocab.json").is_file():
        pytest.skip(f"no GPT-2 files at {PEER}")
    back = {c: b for b, c in bytes_to_unicode().items()}
    vocab = json.loads((PEER / "gpt2_vocab.json").read_text(encoding="utf-8"))
    ranks = {bytes(back[c] for c in t): i for t, i in vocab.items() if t != EOT}
    return tiktoken.Encoding(name="gpt2-local", pat_str=WORD_PATTERN, mergeable_ranks=ranks,
                             special_tokens={EOT: vocab[EOT]})


# CS336's test strings (test_tokenizer.py) and its fixture files
_GPT2_STRINGS = ["", "s", "🙃", "Hello, how are you?", "Héllò hôw are ü? 🙃",
                 "Héllò hôw " + EOT + EOT + " are ü? 🙃" + EOT, "the end" + EOT + "\n\n" + EOT + " it's"]
_GPT2_FILES = ["address.txt", "german.txt", "tinystories_sample.txt", "special_token_trailing_newlines.txt",
               "special_token_double_newlines_non_whitespace.txt"]


def test_gpt2_layout_from_files(gpt2):
    assert gpt2.vocab_size == 50257 and len(gpt2.merges) == 50000 and gpt2.special_tokens == [EOT]
    assert gpt2.vocab[EOT] == 50256 and gpt2.vocab["!"] == 0 and gpt2.vocab["Ġt"] == 256  # vocab.json's ids
    assert gpt2.with_merges(10).vocab[EOT] == 266 and gpt2.with_merges(10).vocab["!"] == 0  # layout kept


def test_gpt2_ids_equal_tiktoken(gpt2, tiktoken_gpt2):
    texts = _GPT2_STRINGS + [(PEER / f).read_text(encoding="utf-8") for f in _GPT2_FILES]
    for text in texts:
        ids = gpt2.encode(text)
        assert ids == tiktoken_gpt2.encode(text, allowed_special="all"), text[:40]
        assert gpt2.decode(ids) == tiktoken_gpt2.decode(ids) == text
    assert EOT in texts[-1] and gpt2.encode(texts[-1]).count(50256) >= 1


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from([EOT, "<|", "|>", " ", "\n", "'s", "'re", "é", "🙃", "ab", " cd", "12"])
                .map("".join) | mixed_text, max_size=6).map("".join))
def test_gpt2_ids_equal_tiktoken_on_generated_text(gpt2, tiktoken_gpt2, text):
    assert gpt2.encode(text) == tiktoken_gpt2.encode(text, allowed_special="all")


def test_gpt2_ids_equal_tokenizers_byte_level_bpe(gpt2):
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = json.loads((PEER / "gpt2_vocab.json").read_text(encoding="utf-8"))
    hf = Tokenizer(models.BPE(vocab=vocab, merges=gpt2.merges))
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    hf.add_special_tokens([EOT])
    for text in _GPT2_STRINGS + [(PEER / f).read_text(encoding="utf-8") for f in _GPT2_FILES]:
        assert gpt2.encode(text) == hf.encode(text).ids, text[:40]


def test_gpt2_overlapping_special_tokens_get_new_ids(gpt2):
    tok = BPETokenizer.from_files(PEER / "gpt2_vocab.json", PEER / "gpt2_merges.txt",
                                  special_tokens=[EOT, EOT + EOT])
    assert tok.vocab[EOT] == 50256 and tok.vocab[EOT + EOT] == 50257  # not in vocab.json: the next id
    text = "Hello, how " + EOT + EOT + " are you?" + EOT
    assert tok.encode(text).count(50257) == 1 and tok.encode(text).count(50256) == 1
    assert tok.decode(tok.encode(text)) == text


# ---------------------------------------------------------------- encode_iterable


@pytest.fixture(scope="module")
def byte_special_tok(corpus):
    return BPETokenizer.train([line + EOT for line in corpus], 400, byte_level=True,
                              special_tokens=[EOT, EOT + EOT, "<|pad|>"])


_STREAM_TEXT = st.lists(st.sampled_from(
    [EOT, "<|", "endoftext", "|>", "<|pad|>", " ", "  ", "\n", "\n\n", "'", "'s", "'re", "'ll", "r", "e", "the",
     " cat", "é", "🙂", "12", "x", ".", "!?"]) | st.text(alphabet="ab '\n<|>é", max_size=4), max_size=25).map("".join)


# merges that join what GPT-2's pattern keeps together only once it has seen 3 characters ('re, 'll) or the
# character after a run of spaces: cut the stream too early and the ids differ (no special tokens, whose own
# margin would hide it)
_CONTRACTIONS = BPETokenizer([("'", "r"), ("'r", "e"), ("'", "l"), ("'l", "l"), ("'", "s"), ("Ġ", "Ġ"), ("Ġ", "Ċ"),
                              ("Ċ", "Ċ"), ("Ġ", "c"), ("a", "t"), ("Ġc", "at")], byte_level=True)


@settings(max_examples=300, deadline=None)
@given(_STREAM_TEXT, st.lists(st.integers(0, 200), max_size=12))
def test_encode_iterable_equals_encode_wherever_the_text_is_cut(byte_special_tok, text, cuts):
    points = sorted({min(c, len(text)) for c in cuts})
    chunks = [text[a:b] for a, b in zip([0, *points], [*points, len(text)])]
    assert "".join(chunks) == text
    for tok in (byte_special_tok, _CONTRACTIONS):
        assert list(tok.encode_iterable(chunks)) == tok.encode(text)
        assert list(tok.encode_iterable(list(text))) == tok.encode(text)  # one character at a time


def test_encode_iterable_waits_for_contractions_and_special_tokens(byte_special_tok):
    for chunks in (["x'r", "e"], ["x'", "ll"], ["a  ", "cat"], ["a \n", "b"]):
        assert list(_CONTRACTIONS.encode_iterable(chunks)) == _CONTRACTIONS.encode("".join(chunks))
    assert _CONTRACTIONS.tokenize("x're") == ["x", "'re"]  # not "'" + "r" + "e": the stream must wait for the "e"
    for chunks in ([EOT, EOT], ["ab <|endof", "text|>"], ["<|pa", "d|>"], [EOT + "<", "|endoftext|>"]):
        assert list(byte_special_tok.encode_iterable(chunks)) == byte_special_tok.encode("".join(chunks))
    assert byte_special_tok.tokenize(EOT + EOT) == [EOT + EOT]


@settings(max_examples=100, deadline=None)
@given(mixed_text, st.lists(st.integers(0, 40), max_size=6))
def test_encode_iterable_equals_encode_character_mode(text, cuts):
    tok = BPETokenizer(WORKED_MERGES, "bghnpsu '", special_tokens=["<s>", "</s>"])
    text = text.replace("x", "<s>").replace("y", "</s>")
    points = sorted({min(c, len(text)) for c in cuts})
    chunks = [text[a:b] for a, b in zip([0, *points], [*points, len(text)])]
    assert list(tok.encode_iterable(chunks)) == tok.encode(text)


def test_encode_iterable_reads_a_file_line_by_line(byte_special_tok, corpus, tmp_path):
    path = tmp_path / "text.txt"
    text = "\n".join(corpus[:30]) + EOT + "\n\n" + EOT + EOT + "it's  the end \n"
    path.write_text(text, encoding="utf-8")
    with open(path, encoding="utf-8") as f:
        assert list(byte_special_tok.encode_iterable(f)) == byte_special_tok.encode(text)
    assert list(byte_special_tok.encode_iterable([])) == [] == list(byte_special_tok.encode_iterable(["", ""]))


def test_encode_iterable_memory_stays_bounded(byte_special_tok, corpus):
    """Encoding a 300 kB stream holds about one line, not the text (tracemalloc's peak of Python allocations)."""
    lines = [line + "\n" for line in corpus]
    reps = 300_000 // sum(len(line) for line in lines)

    def stream():
        for _ in range(reps):
            yield from lines
            yield EOT

    size = reps * (sum(len(line) for line in lines) + len(EOT))
    byte_special_tok.encode("".join(lines) + EOT)  # fill the word cache first: it is bounded, but not by a line
    tracemalloc.start()
    try:
        count = sum(1 for _ in byte_special_tok.encode_iterable(stream()))
        _, streamed = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        text = "".join(stream())
        assert len(byte_special_tok.encode(text)) == count
        _, whole = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert size > 290_000 and count > 100_000
    assert streamed < size / 10, (streamed, size)
    assert whole > size  # the same measurement sees encode() hold the text and its ids


# ---------------------------------------------------------------- bad special tokens, streams, vocabularies and files


@pytest.mark.parametrize(
    "call, error, words",
    [
        (lambda: BPETokenizer([], "abc", special_tokens=EOT), TypeError, ["special_tokens", "list of str", "str"]),
        (lambda: BPETokenizer([], "abc", special_tokens=5), TypeError, ["special_tokens", "int 5"]),
        (lambda: BPETokenizer([], "abc", special_tokens=[EOT, 7]), TypeError, ["special_tokens[1]", "str", "int 7"]),
        (lambda: BPETokenizer([], "abc", special_tokens=[b"<s>"]), TypeError, ["special_tokens[0]", "bytes"]),
        (lambda: BPETokenizer([], "abc", special_tokens=[""]), ValueError, ["special_tokens[0]", "empty"]),
        (lambda: BPETokenizer([], "abc", special_tokens=["<s>", EOT, "<s>"]), ValueError,
         ["special_tokens[2]", "'<s>'", "duplicate", "special_tokens[0]"]),
        (lambda: BPETokenizer([], "abc", special_tokens=["a"]), ValueError, ["special_tokens[0]", "'a'", "alphabet"]),
        (lambda: BPETokenizer([], "abc", special_tokens=["[UNK]"]), ValueError, ["special_tokens[0]", "unk_token"]),
        (lambda: BPETokenizer([("a", "b")], "abc", special_tokens=["ab"]), ValueError, ["'ab'", "merge"]),
        (lambda: BPETokenizer([], byte_level=True, special_tokens=["Ġ"]), ValueError, ["'Ġ'", "alphabet"]),
        (lambda: BPETokenizer.train("abc", 100, special_tokens=EOT), TypeError, ["special_tokens", "str"]),
        (lambda: BPETokenizer.train("abc", 257, byte_level=True, special_tokens=[EOT, "<|pad|>"]), ValueError,
         ["vocab_size=257", "258", "2 special tokens"]),
        (lambda: BPETokenizer.train("abc", 100, tie_break="greatest"), ValueError, ["tie_break", "'greatest_bytes'"]),
        (lambda: BPETokenizer([], "abc").encode_iterable("abc"), TypeError, ["iterable", "str", "encode(text)"]),
        (lambda: BPETokenizer([], "abc").encode_iterable(5), TypeError, ["iterable", "int 5"]),
        (lambda: list(BPETokenizer([], "abc").encode_iterable(["ab", b"c"])), TypeError,
         ["element 1", "bytes", "text mode"]),
        (lambda: BPETokenizer([], "ab", vocab=[("a", 0)]), TypeError, ["vocab", "dict", "list"]),
        (lambda: BPETokenizer([], "ab", vocab={"[UNK]": 0, "a": 1, "b": "2"}), TypeError, ["vocab", "'b'", "'2'"]),
        (lambda: BPETokenizer([], "ab", vocab={"[UNK]": 0, "a": 1}), ValueError, ["vocab", "'b'", "missing"]),
        (lambda: BPETokenizer([], "ab", vocab={"[UNK]": 0, "a": 1, "b": 2, "c": 3}), ValueError,
         ["vocab", "'c'", "id 3"]),
        (lambda: BPETokenizer([], "ab", vocab={"[UNK]": 0, "a": 1, "b": 1}), ValueError, ["ids", "0..2", "id 1", "'b'"]),
        (lambda: BPETokenizer([], "ab", vocab={"[UNK]": 0, "a": 1, "b": 5}), ValueError, ["ids", "0..2", "id 5"]),
        (lambda: BPETokenizer.from_files(None, "m.txt"), TypeError, ["vocab_filepath", "None"]),
    ],
)
def test_special_stream_and_vocab_errors_name_argument_and_value(call, error, words):
    with pytest.raises(error) as info:
        call()
    for word in words:
        assert word in str(info.value), (word, str(info.value))


def test_from_files_small_files_and_their_errors(tmp_path):
    vocab = {c: i for i, c in enumerate(bytes_to_unicode().values())} | {"Ġt": 256, "Ġth": 257, EOT: 258}
    (tmp_path / "vocab.json").write_text(json.dumps(vocab), encoding="utf-8")
    (tmp_path / "merges.txt").write_text("#version: 0.2\nĠ t\n\nĠt h\n", encoding="utf-8")
    tok = BPETokenizer.from_files(tmp_path / "vocab.json", str(tmp_path / "merges.txt"))
    assert tok.merges == [("Ġ", "t"), ("Ġt", "h")] and tok.special_tokens == [EOT]  # found: no merge makes it
    assert tok.encode(" the" + EOT) == [vocab["Ġth"], vocab["e"], 258]
    with pytest.raises(ValueError, match=r"'<\|endoftext\|>' \(id 258\).*special token"):
        BPETokenizer.from_files(tmp_path / "vocab.json", tmp_path / "merges.txt", special_tokens=[])
    (tmp_path / "bad.txt").write_text("Ġ t\nĠt h e\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"bad.txt, line 2: a merge is two tokens.*'Ġt h e'"):
        BPETokenizer.from_files(tmp_path / "vocab.json", tmp_path / "bad.txt")
    (tmp_path / "list.json").write_text("[1, 2]", encoding="utf-8")
    with pytest.raises(TypeError, match="JSON object"):
        BPETokenizer.from_files(tmp_path / "list.json", tmp_path / "merges.txt")
