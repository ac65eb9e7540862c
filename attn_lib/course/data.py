"""The date-translation task of notebook 07: written dates in English and Dutch -> ISO 8601.

A small, real translation task that a tiny Transformer learns on a laptop CPU in seconds, and whose
cross-attention can be checked: every output digit has one place in the source it must read.

    "29 November 2026"            -> "2026-11-29"
    "zondag 29 nov. 2026"         -> "2026-11-29"
    "Sunday, November 29th 2026"  -> "2026-11-29"
    "11/29/26"                    -> "2026-11-29"   (US order month/day/year, two-digit year)
    "29-11-2026"                  -> "2026-11-29"   (Dutch order day-month-year)

Dates run from 1950-01-01 to 2049-12-31; a two-digit year ``yy`` means ``19yy`` when ``yy >= 50``
and ``20yy`` otherwise. Slashes always mean the US order and dashes the Dutch order, so no written
date is ambiguous. Weekdays are the true weekdays of the date (the model may ignore them).

The splits are disjoint by date (a test date never appears in training, in any style) and are
generated deterministically from a seed with Python's :class:`random.Random`; they are saved as
``data/dates/{train,val,test}.tsv`` and :func:`load_splits` checks nothing else is needed:
``make_splits(DEFAULT_SEED)`` regenerates them byte for byte (``python -m attn_lib.course.data``).

Tokens are characters. :class:`CharVocab` adds three special tokens: ``<pad>`` (id 0, fills the
end of shorter sequences in a batch), ``<s>`` (id 1, start: the decoder's first input) and
``</s>`` (id 2, end: the decoder's last target).

Why one module of over 400 lines: the date task is one idea -- its formats, vocabularies, splits and
batching are read together in notebook 07, and none of them is used without the others.
"""

from __future__ import annotations

import datetime as _dt
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator, NamedTuple, Sequence

import torch

from attn_lib.course._setup import DATA_DIR

__all__ = [
    "PAD", "BOS", "EOS", "CharVocab", "SOURCE_VOCAB", "TARGET_VOCAB",
    "STYLES", "FIELDS", "DateExample", "format_date", "make_splits", "save_splits", "load_splits",
    "DateBatch", "collate", "iterate_batches", "DATES_DIR", "DEFAULT_SEED", "SPLIT_SIZES",
    "FIRST_DATE", "LAST_DATE", "target_field_slices",
]

PAD, BOS, EOS = "<pad>", "<s>", "</s>"
SPECIALS = (PAD, BOS, EOS)

DATES_DIR = DATA_DIR / "dates"
DEFAULT_SEED = 0
SPLIT_SIZES = {"train": 20000, "val": 1000, "test": 1000}
FIRST_DATE = _dt.date(1950, 1, 1)
LAST_DATE = _dt.date(2049, 12, 31)
FIELDS = ("year", "month", "day")


# --------------------------------------------------------------------------- vocabularies
@dataclass(frozen=True)
class CharVocab:
    """A character-level vocabulary: ids 0, 1, 2 are ``<pad>``, ``<s>``, ``</s>``, then one id per character.

    Args:
        chars: the ordinary characters, in id order (ids 3, 4, ...); each a single character, no repeats.

    Raises:
        ValueError: a repeated character or an entry that is not one character.

    No tensors: ``encode`` maps a str to a list of int ids, ``decode`` / ``labels`` take ints (or a (L,)
    int64 tensor's rows) back to str.

    Raises (of the methods):
        TypeError: ``encode`` of a non-str. ValueError: ``encode`` of a character outside the vocabulary (named);
        ``decode`` of an id outside 0..len - 1.

    Source: the course's own: notebook 07 (special ids as HuggingFace tokenizers' pad / bos / eos).
    """

    chars: tuple[str, ...]

    pad_id = 0
    bos_id = 1
    eos_id = 2

    def __post_init__(self):
        chars = tuple(self.chars)
        object.__setattr__(self, "chars", chars)
        bad = [c for c in chars if not isinstance(c, str) or len(c) != 1]
        if bad:
            raise ValueError(f"chars must be single characters, got {bad!r}")
        if len(set(chars)) != len(chars):
            dup = sorted({c for c in chars if chars.count(c) > 1})
            raise ValueError(f"chars must not repeat, got repeats {dup!r}")
        object.__setattr__(self, "_index", {c: i + len(SPECIALS) for i, c in enumerate(chars)})

    @property
    def tokens(self) -> tuple[str, ...]:
        """Every token in id order: the three specials, then the characters."""
        return SPECIALS + self.chars

    def __len__(self) -> int:
        return len(SPECIALS) + len(self.chars)

    def unknown_chars(self, text: str) -> list[str]:
        """The distinct characters of ``text`` that are not in the vocabulary, in order of appearance."""
        seen: list[str] = []
        for c in text:
            if c not in self._index and c not in seen:
                seen.append(c)
        return seen

    def encode(self, text: str, *, add_bos: bool = False, add_eos: bool = False) -> list[int]:
        """Character ids of ``text`` (optionally with ``<s>`` first and ``</s>`` last).

        Raises:
            TypeError: ``text`` is not a str.
            ValueError: ``text`` holds characters outside the vocabulary; the message names them.
        """
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__} {text!r}")
        unknown = self.unknown_chars(text)
        if unknown:
            allowed = "".join(self.chars)
            raise ValueError(
                f"text {text!r} has characters outside the vocabulary: {', '.join(map(repr, unknown))}; "
                f"allowed are {allowed!r}"
            )
        ids = [self._index[c] for c in text]
        return ([self.bos_id] if add_bos else []) + ids + ([self.eos_id] if add_eos else [])

    def decode(self, ids: Iterable[int]) -> str:
        """The text of ``ids``: skips ``<pad>`` and ``<s>``, stops at the first ``</s>``.

        Raises:
            ValueError: an id outside ``0 .. len(self) - 1``.
        """
        out = []
        for i in (ids.tolist() if isinstance(ids, torch.Tensor) else ids):
            i = int(i)
            if not 0 <= i < len(self):
                raise ValueError(f"token id {i} is outside the vocabulary (0..{len(self) - 1})")
            if i == self.eos_id:
                break
            if i >= len(SPECIALS):
                out.append(self.chars[i - len(SPECIALS)])
        return "".join(out)

    def labels(self, ids: Iterable[int]) -> list[str]:
        """One readable label per id (special tokens by name, space as ``'␣'``), for plot axes."""
        ids = ids.tolist() if isinstance(ids, torch.Tensor) else ids
        return ["␣" if self.tokens[int(i)] == " " else self.tokens[int(i)] for i in ids]


#: Source characters: every character a written date of this task uses, plus the whole Latin alphabet
#: so that learners can type any (English/Dutch) letter.
SOURCE_VOCAB = CharVocab(tuple(" ',-./0123456789" + "ABCDEFGHIJKLMNOPQRSTUVWXYZ" + "abcdefghijklmnopqrstuvwxyz"))
#: Target characters: an ISO date "YYYY-MM-DD" needs only the digits and the dash.
TARGET_VOCAB = CharVocab(tuple("-0123456789"))


# --------------------------------------------------------------------------- written dates
EN_MONTHS = ("January", "February", "March", "April", "May", "June", "July",
             "August", "September", "October", "November", "December")
EN_MONTHS_ABBR = tuple(m[:3] for m in EN_MONTHS)
EN_WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
NL_MONTHS = ("januari", "februari", "maart", "april", "mei", "juni", "juli",
             "augustus", "september", "oktober", "november", "december")
NL_MONTHS_ABBR = ("jan.", "feb.", "mrt.", "apr.", "mei", "jun.", "jul.", "aug.", "sep.", "okt.", "nov.", "dec.")
NL_WEEKDAYS = ("maandag", "dinsdag", "woensdag", "donderdag", "vrijdag", "zaterdag", "zondag")


def _ordinal_suffix(day: int) -> str:
    if day in (11, 12, 13):
        return "th"
    return {1: "st", 2: "nd", 3: "rd"}.get(day % 10, "th")


def _pieces(style: str, d: _dt.date) -> list[tuple[str, str | None]]:
    """The written date as pieces (text, field); field is "year", "month", "day" or None."""
    day, mon, yyyy, yy = str(d.day), d.month - 1, str(d.year), f"{d.year % 100:02d}"
    wd = d.weekday()
    dd, mm = f"{d.day:02d}", f"{d.month:02d}"
    table = {
        # English
        "en_day_month_year": [(day, "day"), (" ", None), (EN_MONTHS[mon], "month"), (" ", None), (yyyy, "year")],
        "en_month_day_year": [(EN_MONTHS[mon], "month"), (" ", None), (day, "day"), (", ", None), (yyyy, "year")],
        "en_weekday_ordinal": [(EN_WEEKDAYS[wd] + ", ", None), (EN_MONTHS[mon], "month"), (" ", None),
                               (day, "day"), (_ordinal_suffix(d.day) + " ", None), (yyyy, "year")],
        "en_abbr": [(EN_MONTHS_ABBR[mon], "month"), (" ", None), (day, "day"), (", ", None), (yyyy, "year")],
        "en_slash": [(str(d.month), "month"), ("/", None), (day, "day"), ("/", None), (yy, "year")],
        "en_weekday_abbr": [(EN_WEEKDAYS[wd][:3] + " ", None), (day, "day"), (" ", None),
                            (EN_MONTHS_ABBR[mon], "month"), (" ", None), (yyyy, "year")],
        "en_the_of": [("the ", None), (day, "day"), (_ordinal_suffix(d.day) + " of ", None),
                      (EN_MONTHS[mon], "month"), (" ", None), (yyyy, "year")],
        "en_upper": [(dd, "day"), (" ", None), (EN_MONTHS_ABBR[mon].upper(), "month"), (" ", None), (yyyy, "year")],
        # Dutch
        "nl_long": [(day, "day"), (" ", None), (NL_MONTHS[mon], "month"), (" ", None), (yyyy, "year")],
        "nl_weekday_long": [(NL_WEEKDAYS[wd] + " ", None), (day, "day"), (" ", None),
                            (NL_MONTHS[mon], "month"), (" ", None), (yyyy, "year")],
        "nl_weekday_abbr": [(NL_WEEKDAYS[wd] + " ", None), (day, "day"), (" ", None),
                            (NL_MONTHS_ABBR[mon], "month"), (" ", None), (yyyy, "year")],
        "nl_dash": [(dd, "day"), ("-", None), (mm, "month"), ("-", None), (yyyy, "year")],
        "nl_apostrophe": [(day, "day"), (" ", None), (NL_MONTHS_ABBR[mon], "month"), (" '", None), (yy, "year")],
    }
    return table[style]


STYLES: tuple[str, ...] = (
    "en_day_month_year", "en_month_day_year", "en_weekday_ordinal", "en_abbr", "en_slash",
    "en_weekday_abbr", "en_the_of", "en_upper",
    "nl_long", "nl_weekday_long", "nl_weekday_abbr", "nl_dash", "nl_apostrophe",
)
"""The written styles, e.g. ``format_date(date(2026, 11, 29), s).source`` for each s:
"29 November 2026", "November 29, 2026", "Sunday, November 29th 2026", "Nov 29, 2026", "11/29/26",
"Sun 29 Nov 2026", "the 29th of November 2026", "29 NOV 2026", "29 november 2026",
"zondag 29 november 2026", "zondag 29 nov. 2026", "29-11-2026", "29 nov. '26"."""


@dataclass(frozen=True)
class DateExample:
    """One pair of the task.

    Attributes:
        source: the written date, e.g. "zondag 29 nov. 2026".
        target: the ISO date "YYYY-MM-DD".
        style: one of :data:`STYLES`.
        spans: field -> (start, end) character span of the source holding that field
            (``source[start:end]``), for "year", "month" and "day".

    No tensors: source, target, style are str; spans maps str to (start, end) int pairs.

    Raises:
        nothing (a dataclass).

    Source: the course's own: notebook 07 (the date-normalisation task).
    """

    source: str
    target: str
    style: str
    spans: dict

    def span_text(self, field: str) -> str:
        start, end = self.spans[field]
        return self.source[start:end]


def target_field_slices() -> dict[str, slice]:
    """Where each field sits in the ISO target "YYYY-MM-DD": year 0:4, month 5:7, day 8:10.

    No tensors: returns a dict of str to slice (of int positions).

    Raises:
        nothing.

    Source: ISO 8601's calendar date YYYY-MM-DD; the course's own: notebook 07.
    """
    return {"year": slice(0, 4), "month": slice(5, 7), "day": slice(8, 10)}


def format_date(date: _dt.date, style: str) -> DateExample:
    """Write ``date`` in ``style`` and return the pair (source, ISO target) with the field spans.

    Raises:
        TypeError: ``date`` is not a ``datetime.date``.
        ValueError: ``style`` is not one of :data:`STYLES`, or the date is outside 1950-01-01 .. 2049-12-31
            (where two-digit years would be ambiguous).

    No tensors: a datetime.date and a str in; a DateExample (str fields, int spans) out.

    Source: the course's own: notebook 07.
    """
    if not isinstance(date, _dt.date) or isinstance(date, _dt.datetime):
        raise TypeError(f"date must be a datetime.date, got {type(date).__name__} {date!r}")
    if style not in STYLES:
        raise ValueError(f"style must be one of {STYLES}, got {style!r}")
    if not FIRST_DATE <= date <= LAST_DATE:
        raise ValueError(f"date must be between {FIRST_DATE} and {LAST_DATE}, got {date}")
    text, spans = "", {}
    for piece, field in _pieces(style, date):
        if field is not None:
            spans[field] = (len(text), len(text) + len(piece))
        text += piece
    return DateExample(text, date.isoformat(), style, spans)


def make_splits(seed: int = DEFAULT_SEED, sizes: dict | None = None) -> dict[str, list[DateExample]]:
    """Generate the train / val / test splits, deterministically from ``seed``.

    Every date of 1950..2049 is shuffled with ``random.Random(seed)``; the first ``sizes["train"]``
    dates go to train, the next to val, then test, so the splits share no date. Each date gets one
    style drawn uniformly from :data:`STYLES` with the same generator.

    Args:
        seed: int seed (the course uses :data:`DEFAULT_SEED`).
        sizes: {"train": n, "val": n, "test": n}; default :data:`SPLIT_SIZES` (20000 / 1000 / 1000).

    Returns:
        {"train": [...], "val": [...], "test": [...]} lists of :class:`DateExample`.

    Raises:
        TypeError: ``seed`` not an int. ValueError: bad sizes or more dates asked than exist (36525).

    No tensors: seed an int, sizes a dict of str to int; DateExample lists (str fields) out.

    Source: the course's own: notebook 07.
    """
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TypeError(f"seed must be an int, got {type(seed).__name__} {seed!r}")
    sizes = dict(SPLIT_SIZES if sizes is None else sizes)
    if set(sizes) != {"train", "val", "test"} or any(
        isinstance(n, bool) or not isinstance(n, int) or n < 0 for n in sizes.values()
    ):
        raise ValueError(f"sizes must map 'train', 'val', 'test' to ints >= 0, got {sizes!r}")
    n_days = (LAST_DATE - FIRST_DATE).days + 1
    if sum(sizes.values()) > n_days:
        raise ValueError(f"sizes ask for {sum(sizes.values())} dates but only {n_days} exist")
    rng = random.Random(seed)
    dates = [FIRST_DATE + _dt.timedelta(days=i) for i in range(n_days)]
    rng.shuffle(dates)
    splits, start = {}, 0
    for name in ("train", "val", "test"):
        chosen = dates[start:start + sizes[name]]
        start += sizes[name]
        splits[name] = [format_date(d, rng.choice(STYLES)) for d in chosen]
    return splits


_HEADER = "source\ttarget\tstyle\tyear_span\tmonth_span\tday_span"


def _to_line(ex: DateExample) -> str:
    spans = "\t".join(f"{ex.spans[f][0]}:{ex.spans[f][1]}" for f in FIELDS)
    return f"{ex.source}\t{ex.target}\t{ex.style}\t{spans}"


def _from_line(line: str, where: str) -> DateExample:
    parts = line.split("\t")
    if len(parts) != 6:
        raise ValueError(f"{where}: expected 6 tab-separated columns ({_HEADER!r}), got {len(parts)}")
    spans = {}
    for field, text in zip(FIELDS, parts[3:]):
        a, b = text.split(":")
        spans[field] = (int(a), int(b))
    return DateExample(parts[0], parts[1], parts[2], spans)


def save_splits(splits: dict[str, list[DateExample]], folder: Path | str = DATES_DIR) -> list[Path]:
    """Write each split as ``<folder>/<name>.tsv`` (header line, then one example a line); returns the paths.

    No tensors: DateExample lists (str fields) in; folder a str or Path; a list of Path out.

    Raises:
        nothing of its own: OSError from the file system, KeyError for a DateExample without all three spans.

    Source: the course's own: notebook 07 (data/dates/*.tsv).
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, examples in splits.items():
        path = folder / f"{name}.tsv"
        path.write_text("\n".join([_HEADER, *map(_to_line, examples)]) + "\n", encoding="utf-8")
        paths.append(path)
    return paths


def load_splits(folder: Path | str = DATES_DIR) -> dict[str, list[DateExample]]:
    """Read the splits saved by :func:`save_splits`; regenerate them (seed :data:`DEFAULT_SEED`) if absent.

    Raises:
        ValueError: a file does not have the expected header or columns (the message names the file and line).

    No tensors: folder a str or Path; returns a dict of str to DateExample lists. An unreadable file
    raises OSError; an int span that does not parse, ValueError too.

    Source: the course's own: notebook 07 (data/dates/*.tsv).
    """
    folder = Path(folder)
    if not all((folder / f"{n}.tsv").exists() for n in SPLIT_SIZES):
        return make_splits(DEFAULT_SEED)
    splits = {}
    for name in SPLIT_SIZES:
        path = folder / f"{name}.tsv"
        lines = path.read_text(encoding="utf-8").splitlines()
        if not lines or lines[0] != _HEADER:
            raise ValueError(f"{path}: the first line must be the header {_HEADER!r}")
        splits[name] = [_from_line(line, f"{path}:{i + 2}") for i, line in enumerate(lines[1:])]
    return splits


# --------------------------------------------------------------------------- batches
class DateBatch(NamedTuple):
    """A padded batch (right padding; id 0 = ``<pad>``).

    Attributes:
        src: long (B, S) source character ids.
        src_padding_mask: bool (B, S), True = real character (attn_lib's convention).
        tgt_in: long (B, L) decoder input: ``<s>`` then the target characters (teacher forcing).
        tgt_out: long (B, L) what the decoder must predict: the target characters then ``</s>``.
        tgt_padding_mask: bool (B, L), True = real position of ``tgt_in``/``tgt_out``.

    Raises:
        nothing (a NamedTuple).

    Source: the course's own: notebook 07 (right padding and bool masks as HuggingFace tokenizers' attention_mask).
    """

    src: torch.Tensor
    src_padding_mask: torch.Tensor
    tgt_in: torch.Tensor
    tgt_out: torch.Tensor
    tgt_padding_mask: torch.Tensor


def _pad(seqs: Sequence[Sequence[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    from attn_lib.masks import padding_mask

    lengths = [len(s) for s in seqs]
    mask = padding_mask(lengths)  # (B, L) True = real
    width = mask.shape[1]
    # one tensor from padded lists (one torch call per batch, not one per sequence: collate runs every step)
    ids = torch.tensor([list(s) + [pad_id] * (width - len(s)) for s in seqs], dtype=torch.long).reshape(mask.shape)
    return ids, mask


def collate(
    pairs: Sequence[DateExample | tuple[str, str]],
    src_vocab: CharVocab = SOURCE_VOCAB,
    tgt_vocab: CharVocab = TARGET_VOCAB,
) -> DateBatch:
    """Encode and pad a list of examples (or (source, target) string pairs) into a :class:`DateBatch`.

    Returns:
        a :class:`DateBatch`: src (B, S), tgt_in / tgt_out (B, L) long ids and their bool padding masks
        (True = real token); S and T are the longest source and target (+1 for ``<s>``/``</s>``).

    Raises:
        TypeError: pairs not a list, an entry neither a DateExample nor a (source, target) pair of str.
        ValueError: empty list; an empty source (the encoder would have no key to attend to: a softmax
            over zero keys); a character outside a vocabulary (the message names it).

    Source: the course's own: notebook 07; the batch layout of a HuggingFace tokenizer with ``padding=True``.
    """
    if isinstance(pairs, (str, bytes)) or not isinstance(pairs, Sequence):
        raise TypeError(f"pairs must be a list of DateExample or (source, target) pairs, got {type(pairs).__name__}")
    if len(pairs) == 0:
        raise ValueError("pairs must hold at least one example, got an empty list")
    for i, p in enumerate(pairs):
        if not isinstance(p, DateExample) and not (
                isinstance(p, (tuple, list)) and len(p) == 2 and all(isinstance(t, str) for t in p)):
            raise TypeError(f"pairs[{i}] must be a DateExample or a (source, target) pair of str, got {p!r}"[:200])
    sources = [p.source if isinstance(p, DateExample) else p[0] for p in pairs]
    targets = [p.target if isinstance(p, DateExample) else p[1] for p in pairs]
    for i, src_text in enumerate(sources):
        if not src_text:
            raise ValueError(f"pairs[{i}] has an empty source {src_text!r}; expected at least one character "
                             f"(attention over zero source positions is undefined)")
    src, src_mask = _pad([src_vocab.encode(s) for s in sources], src_vocab.pad_id)
    tgt_ids = [tgt_vocab.encode(t) for t in targets]
    tgt_in, tgt_mask = _pad([[tgt_vocab.bos_id] + t for t in tgt_ids], tgt_vocab.pad_id)
    tgt_out, _ = _pad([t + [tgt_vocab.eos_id] for t in tgt_ids], tgt_vocab.pad_id)
    return DateBatch(src, src_mask, tgt_in, tgt_out, tgt_mask)


def iterate_batches(
    examples: Sequence[DateExample],
    batch_size: int,
    *,
    shuffle: bool = False,
    generator: torch.Generator | None = None,
) -> Iterator[DateBatch]:
    """Yield :class:`DateBatch` es of ``batch_size`` examples (the last one may be smaller).

    Args:
        examples: a sequence of DateExample. batch_size: an int >= 1. generator: a torch.Generator or None.
        shuffle: visit the examples in a random order drawn from ``generator`` (a fresh order per call).

    Yields:
        :class:`DateBatch`: src (B, S) int64 ids, tgt_in / tgt_out (B, L) int64, bool padding masks.

    Raises:
        ValueError: batch_size not an int >= 1 (a non-int too: ValueError, not TypeError); :func:`collate`'s
            TypeError/ValueError.

    Source: the course's own: notebook 07.
    """
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be an int >= 1, got {batch_size!r}")
    order = torch.randperm(len(examples), generator=generator).tolist() if shuffle else range(len(examples))
    order = list(order)
    for i in range(0, len(order), batch_size):
        yield collate([examples[j] for j in order[i:i + batch_size]])


if __name__ == "__main__":  # python -m attn_lib.course.data: (re)write data/dates/*.tsv
    for p in save_splits(make_splits(DEFAULT_SEED)):
        print(f"wrote {p}")
