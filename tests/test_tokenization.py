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
