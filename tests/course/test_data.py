"""The date-translation task (attn_lib.course.data): correct targets, disjoint reproducible splits,
character vocabularies with clear errors, and padded batches."""

from __future__ import annotations

import datetime as dt
import re

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from attn_lib.course import data
from attn_lib.course.data import (DATES_DIR, FIELDS, SOURCE_VOCAB, STYLES, TARGET_VOCAB, CharVocab, collate,
                           format_date, iterate_batches, load_splits, make_splits, save_splits)
from attn_lib.course.train import endless_batches

# An independent reader of the written dates, built from the standard library (English names through
# strftime's C locale) and the Dutch names written out here, to check the generator's targets.
EN_MONTHS = [dt.date(2000, m, 1).strftime("%B") for m in range(1, 13)]
EN_WEEKDAYS = [dt.date(2024, 1, d).strftime("%A") for d in range(1, 8)]  # 2024-01-01 was a Monday
NL_MONTHS = "januari februari maart april mei juni juli augustus september oktober november december".split()
NL_ABBR = "jan. feb. mrt. apr. mei jun. jul. aug. sep. okt. nov. dec.".split()
NL_WEEKDAYS = "maandag dinsdag woensdag donderdag vrijdag zaterdag zondag".split()


def _year(text: str) -> int:
    y = int(text)
    if len(text) == 2:  # the task's rule: 50..99 -> 19yy, 00..49 -> 20yy
        return 1900 + y if y >= 50 else 2000 + y
    return y


def _month(name: str) -> int:
    for table in (EN_MONTHS, [m[:3] for m in EN_MONTHS], [m[:3].upper() for m in EN_MONTHS], NL_MONTHS, NL_ABBR):
        if name in table:
            return table.index(name) + 1
    return int(name)


def read_date(source: str) -> tuple[dt.date, int | None]:
    """(date, weekday 0=Monday or None) read from a written date of any style."""
    s = source
    weekday = None
    words = s.replace(",", "").split()
    if words[0] in EN_WEEKDAYS or words[0] in [w[:3] for w in EN_WEEKDAYS] or words[0] in NL_WEEKDAYS:
        w = words.pop(0)
        weekday = next(i for i, names in enumerate(zip(EN_WEEKDAYS, NL_WEEKDAYS))
                       if w in (names[0], names[0][:3], names[1]))
    if words[0] == "the":  # "the 29th of November 2026"
        words = [words[1], words[3], words[4]]
    if len(words) == 1:  # 11/29/26 (US) or 29-11-2026 (Dutch)
        if "/" in words[0]:
            m, d, y = words[0].split("/")
        else:
            d, m, y = words[0].split("-")
        return dt.date(_year(y), int(m), int(d)), weekday
    words = [re.sub(r"^(\d+)(st|nd|rd|th)$", r"\1", w).lstrip("'") for w in words]
    if words[0].isdigit():
        d, m, y = words
    else:
        m, d, y = words
    return dt.date(_year(y), _month(m), int(d)), weekday


@pytest.fixture(scope="module")
def splits():
    return load_splits()


def test_saved_splits_are_regenerated_identically(tmp_path):
    """data/dates/*.tsv are exactly what make_splits(DEFAULT_SEED) writes (byte for byte)."""
    save_splits(make_splits(data.DEFAULT_SEED), tmp_path)
    for name in ("train", "val", "test"):
        assert (tmp_path / f"{name}.tsv").read_bytes() == (DATES_DIR / f"{name}.tsv").read_bytes(), name


def test_load_splits_regenerates_when_files_are_missing(tmp_path, splits):
    assert load_splits(tmp_path / "nowhere") == splits


def test_other_seed_gives_other_splits():
    a = make_splits(1, {"train": 50, "val": 0, "test": 0})["train"]
    b = make_splits(2, {"train": 50, "val": 0, "test": 0})["train"]
    assert a == make_splits(1, {"train": 50, "val": 0, "test": 0})["train"]
    assert [e.target for e in a] != [e.target for e in b]


def test_split_sizes_and_disjoint_dates(splits):
    assert {k: len(v) for k, v in splits.items()} == data.SPLIT_SIZES
    dates = {k: {e.target for e in v} for k, v in splits.items()}
    assert sum(len(d) for d in dates.values()) == sum(data.SPLIT_SIZES.values()), "a date repeats"
    assert not dates["train"] & dates["test"] and not dates["train"] & dates["val"] and not dates["val"] & dates["test"]


def test_every_style_in_every_split(splits):
    for name, examples in splits.items():
        assert {e.style for e in examples} == set(STYLES), name


def test_targets_are_the_iso_dates_read_independently(splits):
    for examples in splits.values():
        for ex in examples:
            date, weekday = read_date(ex.source)
            assert ex.target == date.isoformat(), ex
            assert weekday is None or weekday == date.weekday(), f"wrong weekday in {ex.source!r}"


def test_spans_hold_the_fields(splits):
    for ex in splits["test"] + splits["val"]:
        date = dt.date.fromisoformat(ex.target)
        assert _year(ex.span_text("year")) == date.year, ex
        assert _month(ex.span_text("month")) == date.month, ex
        assert int(ex.span_text("day")) == date.day, ex
        starts = sorted(ex.spans[f] for f in FIELDS)
        assert all(a[1] <= b[0] for a, b in zip(starts, starts[1:])), f"overlapping spans {ex}"


def test_no_written_date_is_ambiguous():
    """Every (style, date) pair gives a distinct source, so each source has one right answer."""
    seen = {}
    day = dt.date(1950, 1, 1)
    while day <= dt.date(2049, 12, 31):
        for style in STYLES:
            src = format_date(day, style).source
            assert seen.setdefault(src, day) == day, f"{src!r} means {seen[src]} and {day}"
        day += dt.timedelta(days=97)  # a spread of dates, all months and many days


def test_styles_documented_example():
    got = [format_date(dt.date(2026, 11, 29), s).source for s in STYLES]
    assert got[:5] == ["29 November 2026", "November 29, 2026", "Sunday, November 29th 2026", "Nov 29, 2026", "11/29/26"]
    assert "zondag 29 nov. 2026" in got and "29-11-2026" in got and "29 nov. '26" in got
    assert len(set(got)) == len(STYLES)


def test_format_date_errors():
    with pytest.raises(ValueError, match="style"):
        format_date(dt.date(2000, 1, 1), "klingon")
    with pytest.raises(ValueError, match="1950-01-01"):
        format_date(dt.date(1949, 12, 31), "nl_long")
    with pytest.raises(TypeError, match="datetime.date"):
        format_date("2000-01-01", "nl_long")


def test_make_splits_errors():
    with pytest.raises(ValueError, match="only 36525"):
        make_splits(0, {"train": 40000, "val": 0, "test": 0})
    with pytest.raises(ValueError, match="sizes"):
        make_splits(0, {"train": 10})
    with pytest.raises(TypeError, match="seed"):
        make_splits("0")


# --------------------------------------------------------------------------- vocabularies
def test_vocab_special_ids():
    for v in (SOURCE_VOCAB, TARGET_VOCAB):
        assert v.tokens[:3] == ("<pad>", "<s>", "</s>")
        assert (v.pad_id, v.bos_id, v.eos_id) == (0, 1, 2)
    assert len(TARGET_VOCAB) == 3 + 11  # '-' and ten digits


def test_every_source_and_target_is_in_the_vocabularies(splits):
    chars = {c for exs in splits.values() for e in exs for c in e.source}
    assert chars <= set(SOURCE_VOCAB.chars)
    assert {c for exs in splits.values() for e in exs for c in e.target} == set(TARGET_VOCAB.chars)


@given(st.text(alphabet="".join(SOURCE_VOCAB.chars), max_size=40))
def test_encode_decode_roundtrip(text):
    ids = SOURCE_VOCAB.encode(text, add_bos=True, add_eos=True)
    assert ids[0] == SOURCE_VOCAB.bos_id and ids[-1] == SOURCE_VOCAB.eos_id and len(ids) == len(text) + 2
    assert SOURCE_VOCAB.decode(ids) == text
    assert SOURCE_VOCAB.decode(ids + [5, 6]) == text, "decode stops at </s>"


@given(st.text(alphabet="".join(SOURCE_VOCAB.chars), max_size=10),
       st.text(alphabet=st.characters(exclude_characters="".join(SOURCE_VOCAB.chars)), min_size=1, max_size=3))
def test_unknown_characters_raise_valueerror_naming_them(good, bad):
    text = good + bad
    with pytest.raises(ValueError) as info:
        SOURCE_VOCAB.encode(text)
    for c in bad:
        assert repr(c) in str(info.value)
    assert "outside the vocabulary" in str(info.value)


def test_vocab_errors():
    with pytest.raises(TypeError, match="str"):
        SOURCE_VOCAB.encode(12)
    with pytest.raises(ValueError, match="outside the vocabulary"):
        TARGET_VOCAB.decode([99])
    with pytest.raises(ValueError, match="repeat"):
        CharVocab(tuple("aba"))
    with pytest.raises(ValueError, match="single characters"):
        CharVocab(("ab",))


# --------------------------------------------------------------------------- batches
def test_collate_pads_real_lengths(splits):
    exs = splits["train"][:50]
    b = collate(exs)
    lengths = [len(e.source) for e in exs]
    assert len(set(lengths)) > 1, "the batch should mix lengths"
    assert b.src.shape == (50, max(lengths))
    assert b.src_padding_mask.sum(1).tolist() == lengths
    assert (b.src[~b.src_padding_mask] == SOURCE_VOCAB.pad_id).all()
    assert (b.src[b.src_padding_mask] != SOURCE_VOCAB.pad_id).all()
    for i, e in enumerate(exs):
        assert SOURCE_VOCAB.decode(b.src[i]) == e.source
        assert TARGET_VOCAB.decode(b.tgt_out[i]) == e.target
    assert (b.tgt_in[:, 0] == TARGET_VOCAB.bos_id).all()
    assert torch.equal(b.tgt_in[:, 1:], b.tgt_out[:, :-1]), "decoder input = target shifted right"
    assert (b.tgt_out[:, -1] == TARGET_VOCAB.eos_id).all()


def test_collate_errors():
    with pytest.raises(ValueError, match="at least one"):
        collate([])
    with pytest.raises(ValueError, match="'€'"):
        collate([("29 € 2026", "2026-11-29")])


def test_iterate_batches_visit_each_example_once(splits):
    exs = splits["val"][:103]
    seen = []
    for b in iterate_batches(exs, 25, shuffle=True, generator=torch.Generator().manual_seed(0)):
        seen += [SOURCE_VOCAB.decode(r) for r in b.src]
    assert sorted(seen) == sorted(e.source for e in exs)


def test_endless_batches_deterministic_and_bucketed(splits):
    exs = splits["train"][:640]
    a = [next(it) for it in [endless_batches(exs, 64, seed=3)] for _ in range(10)]
    b = [next(it) for it in [endless_batches(exs, 64, seed=3)] for _ in range(10)]
    assert all(torch.equal(x.src, y.src) for x, y in zip(a, b))
    seen = sorted(SOURCE_VOCAB.decode(r) for x in a for r in x.src)
    assert seen == sorted(e.source for e in exs), "one epoch visits every example once"
    plain = collate(exs[:64]).src_padding_mask.float().mean()
    bucketed = torch.stack([x.src_padding_mask.float().mean() for x in a]).mean()
    assert bucketed > plain, "bucketing by length should waste less on padding"
    with pytest.raises(ValueError, match=rf"batch_size must be an int in \[1, {len(exs)}\], got 0"):
        endless_batches(exs, 0)  # at the call, not at the first next()
    with pytest.raises(TypeError, match=r"batch_size must be an int in \[1, \d+\], got float 64.0"):
        endless_batches(exs, 64.0)
    with pytest.raises(ValueError, match="bucket must be an int >= 1, got 0"):
        endless_batches(exs, 64, bucket=0)


def test_collate_refuses_an_empty_source_and_bad_entries():
    with pytest.raises(ValueError, match=r"pairs\[1\] has an empty source '' ; expected at least one character".replace(" ;", ";")):
        collate([("may 1 2020", "2020-05-01"), ("", "2020-05-01")])
    with pytest.raises(ValueError, match="at least one example, got an empty list"):
        collate([])
    with pytest.raises(TypeError, match=r"pairs\[0\] must be a DateExample or a \(source, target\) pair of str"):
        collate([("may 1 2020",)])
    with pytest.raises(TypeError, match="pairs must be a list"):
        collate("may 1 2020")
