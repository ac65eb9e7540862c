"""Byte-pair encoding (BPE) from scratch, and a from-scratch WordPiece for comparison.

A Transformer never sees letters: a tokenizer cuts the text into tokens and a vocabulary table
turns each token into an integer id. BPE (Sennrich et al. 2016, "Neural Machine Translation of
Rare Words with Subword Units", §3.2; byte-level variant: Radford et al. 2019, GPT-2 paper §2.2)
learns its vocabulary from a corpus:

1. start from single characters (or, byte-level, the 256 byte values);
2. count every pair of neighbouring symbols in the corpus, weighted by word frequency;
3. merge the most frequent pair into a new symbol, remember the merge, and repeat until the
   vocabulary has the requested size.

Tokenizing new text replays the learned merges *in the order they were learned*.

Pre-tokenization (shared by training and tokenizing): the text is first cut into words with
GPT-2's rule (:data:`WORD_PATTERN`): runs of letters, of digits, or of other symbols, each
keeping the single space in front of it, so ``"the cat sat."`` -> ``["the", " cat", " sat", "."]``.
Merges never cross these boundaries, and joining the pieces gives back the text exactly.

Special tokens (GPT-2's ``<|endoftext|>``, :class:`BPETokenizer`'s ``special_tokens``) are cut out of the text
before pre-tokenization: each is one token with its own id, never split, never merged across.
:meth:`BPETokenizer.encode_iterable` encodes a stream (a file, line by line) with bounded memory, and
:meth:`BPETokenizer.from_files` loads GPT-2's ``vocab.json`` / ``merges.txt`` with GPT-2's ids.

Why one module of over 400 lines: text to tokens is one idea; BPE (training, encoding, byte level) and
WordPiece share the pre-tokenizers and the normalisation that make them equal to the real tokenizers.
"""

from __future__ import annotations

import unicodedata
from collections import Counter, defaultdict
from functools import lru_cache
from typing import Iterable, Iterator, Sequence

import regex

from attn_lib._checks import check_int

__all__ = [
    "WORD_PATTERN",
    "pre_tokenize",
    "bytes_to_unicode",
    "merge_pair",
    "apply_merges_in_order",
    "count_pairs",
    "BPETokenizer",
    "bpe_summary",
    "basic_split",
    "wordpiece_tokenize",
]

#: GPT-2's pre-tokenization rule, character for character the pattern of GPT-2's ``encoder.py`` and
#: of the ``tokenizers`` library's ``ByteLevel`` pre-tokenizer: English contractions, then a run of
#: letters (Unicode ``\p{L}``), of numbers (``\p{N}``: digits, but also ², ½, Ⅻ) or of other
#: non-space symbols (each with at most one leading space), then runs of whitespace. Every character
#: of any text is matched by exactly one piece. Needs the ``regex`` module (Python's ``re`` has no
#: ``\p{...}``): ``"m²"`` -> ``["m", "²"]``, as in GPT-2.
WORD_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
_WORD_RE = regex.compile(WORD_PATTERN)


def pre_tokenize(text: str) -> list[str]:
    """Cut text into words (see :data:`WORD_PATTERN`); ``"".join(pre_tokenize(t)) == t``.

    Example: ``pre_tokenize("the cat sat on the mat.")`` ->
    ``['the', ' cat', ' sat', ' on', ' the', ' mat', '.']``.

    Raises:
        TypeError: ``text`` is not a str.

    No tensors: a str in, a list of str out.

    Source: GPT-2's pre-tokenizer regex (Radford et al. 2019; HuggingFace's ``ByteLevel`` pre-tokenizer), simplified.
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__} {text!r:.60}")
    return _WORD_RE.findall(text)


@lru_cache(maxsize=1)
def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's table from the 256 byte values to 256 printable characters.

    Printable Latin-1 bytes (``!``..``~``, ``¡``..``¬``, ``®``..``ÿ``) stand for themselves; the
    other 68 bytes (space, control characters, ...) get the characters from U+0100 on, so the
    space byte 0x20 shows as ``Ġ``. Lets byte-level tokens be ordinary, readable strings.
    Same table as GPT-2's ``encoder.py`` and ``tokenizers.pre_tokenizers.ByteLevel.alphabet()``.
    """
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    table = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + extra)
            extra += 1
    return dict(sorted(table.items()))


def _unicode_to_bytes() -> dict[str, int]:
    return {c: b for b, c in bytes_to_unicode().items()}


# ------------------------------------------------------------------ the two BPE building blocks
def merge_pair(symbols: Sequence[str], pair: tuple[str, str]) -> list[str]:
    """Replace every occurrence of ``pair`` in ``symbols`` by the joined symbol, left to right.

    Occurrences do not overlap: ``merge_pair(["a", "a", "a"], ("a", "a"))`` -> ``["aa", "a"]``.

    No tensors: symbols a sequence of str, pair two str; a list of str out.

    Raises:
        nothing of its own (a pair that is not two items raises Python's ValueError on unpacking).

    Source: Sennrich et al. 2016, "Neural Machine Translation of Rare Words with Subword Units", section 3.2
    (Algorithm 1, ``merge_vocab``).
    """
    a, b = pair
    out: list[str] = []
    i = 0
    n = len(symbols)
    while i < n:
        if i + 1 < n and symbols[i] == a and symbols[i + 1] == b:
            out.append(a + b)
            i += 2
        else:
            out.append(symbols[i])
            i += 1
    return out


def apply_merges_in_order(symbols: Sequence[str], merges: Sequence[tuple[str, str]]) -> list[str]:
    """The plain definition of BPE tokenization: go through the merges in learned order and
    apply each one everywhere in the word. (:meth:`BPETokenizer.tokenize_word` gives the same
    result faster; a test checks they agree.)

    No tensors: symbols a sequence of str, merges (str, str) pairs; a list of str out.

    Raises:
        nothing of its own (as :func:`merge_pair`).

    Source: Sennrich et al. 2016, section 3.2: merges applied in the order learned.
    """
    symbols = list(symbols)
    for pair in merges:
        if len(symbols) < 2:
            break
        symbols = merge_pair(symbols, pair)
    return symbols


def count_pairs(word_counts: dict[tuple[str, ...], int]) -> Counter:
    """Count adjacent symbol pairs over words, each word weighted by its frequency.

    Args:
        word_counts: {word as a tuple of symbols: how often the word occurs}.

    Returns:
        Counter {(left, right): count}. ``("a", "a", "a")`` contributes ``("a", "a")`` twice.

    No tensors: keys are tuples of str, counts int.

    Raises:
        nothing of its own (a non-dict raises AttributeError).

    Source: Sennrich et al. 2016, section 3.2 (Algorithm 1, ``get_stats``).
    """
    pairs: Counter = Counter()
    for word, freq in word_counts.items():
        for pair in zip(word, word[1:]):
            pairs[pair] += freq
    return pairs


def _check_text(name: str, text) -> str:
    if not isinstance(text, str):
        raise TypeError(f"{name} must be a str, got {type(text).__name__} {text!r:.60}")
    return text


def _id_list(ids):
    """decode()'s ``ids`` as a list: a 1-D sequence of ids: a list/tuple, or a 1-D tensor / numpy array (as a list of ints)."""
    if hasattr(ids, "ndim") and hasattr(ids, "tolist"):  # torch tensor, numpy array
        if ids.ndim != 1:
            raise ValueError(f"ids must be 1-D (one sequence of token ids), got an array of shape "
                             f"{tuple(ids.shape)}; decode each row separately, e.g. [tok.decode(row) for row in ids]")
        return ids.tolist()
    if ids is None or isinstance(ids, (int, float, str, bytes, dict)) or not hasattr(ids, "__iter__"):
        raise TypeError(f"ids must be a sequence of ints (e.g. [5, 17]), got {type(ids).__name__} {ids!r:.60}")
    return list(ids)


def _check_special_tokens(special_tokens) -> list[str]:
    """``special_tokens`` as a list of distinct non-empty str (None -> [])."""
    if special_tokens is None:
        return []
    if isinstance(special_tokens, (str, bytes)) or not hasattr(special_tokens, "__iter__"):
        raise TypeError(f"special_tokens must be a list of str, e.g. ['<|endoftext|>'], got "
                        f"{type(special_tokens).__name__} {special_tokens!r:.60}")
    specials = list(special_tokens)
    for k, t in enumerate(specials):
        if not isinstance(t, str):
            raise TypeError(f"special_tokens[{k}] must be a str, got {type(t).__name__} {t!r:.60}")
        if not t:
            raise ValueError(f"special_tokens[{k}] is the empty string; a special token needs at least one character")
    seen: dict[str, int] = {}
    for k, t in enumerate(specials):
        if t in seen:
            raise ValueError(f"special_tokens[{k}] {t!r} is a duplicate of special_tokens[{seen[t]}]; list each once")
        seen[t] = k
    return specials


def _special_regex(specials: Sequence[str]):
    """A regex matching any special token, the longest first where several start at the same place."""
    if not specials:
        return None
    return regex.compile("|".join(regex.escape(t) for t in sorted(specials, key=lambda t: (-len(t), t))))


def _split_on_specials(pattern, text: str) -> list[tuple[str, bool]]:
    """``text`` as (piece, is_special) pairs: special tokens (leftmost, then longest) and the text between."""
    if pattern is None:
        return [(text, False)] if text else []
    out: list[tuple[str, bool]] = []
    pos = 0
    for m in pattern.finditer(text):
        if m.start() > pos:
            out.append((text[pos:m.start()], False))
        out.append((m.group(), True))
        pos = m.end()
    if pos < len(text):
        out.append((text[pos:], False))
    return out


#: a pre-token starting fewer than this many characters before the end of the buffered text may still change
#: when more text arrives (the contractions ``'re``/``'ve``/``'ll`` look 3 characters ahead); see encode_iterable
_LOOKAHEAD = 4


class BPETokenizer:
    """Byte-pair encoding tokenizer: learned merges replayed in order, with optional special tokens.

    Vocabulary ids (the default layout): in character mode ``unk_token`` is id 0, then the alphabet
    sorted by code point, then one id per merge in learned order (the same layout as the ``tokenizers``
    library's BPE trainer with ``special_tokens=[unk_token]``). In byte-level mode the ids 0..255 are
    the byte values (shown with GPT-2's :func:`bytes_to_unicode` characters, e.g. ``Ġ`` for a space)
    and there is no unknown token: every text can be encoded. **Special tokens** come last, after the
    merges, in the order given: as GPT-2, whose ``<|endoftext|>`` is its last id, 50256, and as
    tiktoken, whose special tokens follow its mergeable ranks. (CS336's reference vocabulary puts
    its one special token first, at id 0, and the ``tokenizers`` trainer puts its ``special_tokens``
    first too: pass ``vocab=`` for any other layout, as :meth:`from_files` does with GPT-2's
    ``vocab.json``.)

    Special tokens (e.g. ``<|endoftext|>``, which separates documents) are matched in the text
    before anything else, each becomes its one id, and they are never split nor merged with their
    neighbours: the text between two of them is pre-tokenized on its own. Where two special tokens
    overlap, the leftmost wins, and among those starting at the same place the longest (the
    ``tokenizers`` library's rule for added tokens; with ``<|endoftext|>`` and
    ``<|endoftext|><|endoftext|>`` both special, two in a row are the second token).

    Worked example (alphabet ``{b, g, h, n, p, s, u}``, merges ``(u, g)``, ``(u, n)``, ``(h, ug)``)::

        >>> tok = BPETokenizer([("u", "g"), ("u", "n"), ("h", "ug")], "bghnpsu")
        >>> tok.tokenize("bug"), tok.tokenize("hugs"), tok.tokenize("mug")
        (['b', 'ug'], ['hug', 's'], ['[UNK]', 'ug'])

    Args:
        merges: the merge rules in learned order, each a pair of non-empty strings
            ``(left, right)``; both must be in the alphabet or be made by an earlier merge.
        alphabet: the characters the tokenizer knows (a str or an iterable of 1-character strings).
            Must be None in byte-level mode (the alphabet is then the 256 bytes).
        unk_token: the token for a character outside the alphabet (character mode only); one
            ``unk_token`` per unknown character; it is never merged.
        byte_level: work on the UTF-8 bytes of the text (GPT-2) instead of on characters.
        special_tokens: a list of distinct non-empty str, matched in the text as whole tokens
            (None or ``[]``: none). None may equal another token of the vocabulary.
        vocab: ``{token: id}`` to number the tokens otherwise than the default layout above: it must
            hold every token (unk_token, alphabet, merged tokens, special tokens) once, with the ids
            0..vocab_size-1 (e.g. GPT-2's ``vocab.json``). None: the default layout.

    Raises:
        TypeError / ValueError: malformed merges or alphabet (the message names the merge);
            ``special_tokens`` not a list of str (TypeError), an empty, duplicate or already-known
            special token (ValueError); a ``vocab`` that is not ``{str: int}`` (TypeError) or misses a
            token, has an extra one or an id outside 0..vocab_size-1 (ValueError).

    No tensors: text is str, ids are int (lists of int), merges pairs of str; ``num_merges`` / ``vocab_size``
    ints.

    Source: Sennrich et al. 2016, section 3.2 (BPE); byte level as GPT-2 (Radford et al. 2019, section 2.2);
    the id layout of HuggingFace's ``tokenizers`` BPE trainer; special tokens as tiktoken and the
    ``tokenizers`` library's added tokens.
    """

    def __init__(self, merges: Iterable[tuple[str, str]], alphabet: Iterable[str] | str | None = None,
                 unk_token: str = "[UNK]", *, byte_level: bool = False,
                 special_tokens: Iterable[str] | None = None, vocab: dict[str, int] | None = None):
        if not isinstance(byte_level, bool):
            raise TypeError(f"byte_level must be a bool, got {byte_level!r}")
        self.byte_level = byte_level
        if byte_level:
            if alphabet is not None:
                raise ValueError("alphabet must be None when byte_level=True (the alphabet is the 256 byte values)")
            alphabet_list = list(bytes_to_unicode().values())  # in byte order
            self.unk_token = None
            tokens = list(alphabet_list)
        else:
            if alphabet is None:
                raise ValueError("alphabet is required in character mode (byte_level=False)")
            if isinstance(alphabet, str):
                alphabet = list(alphabet)
            try:
                alphabet = list(alphabet)
            except TypeError:
                raise TypeError(f"alphabet must be a str or an iterable of 1-character strings, got "
                                f"{type(alphabet).__name__} {alphabet!r:.60}") from None
            alphabet_list = []
            for c in alphabet:
                if not isinstance(c, str):
                    raise TypeError(f"alphabet entries must be 1-character strings, got {type(c).__name__} {c!r:.60}")
                if len(c) != 1:
                    raise ValueError(f"alphabet entries must be single characters, got {c!r}")
                alphabet_list.append(c)
            alphabet_list = sorted(set(alphabet_list))
            _check_text("unk_token", unk_token)
            if not unk_token or unk_token in alphabet_list:
                raise ValueError(f"unk_token must be a non-empty str outside the alphabet, got {unk_token!r}")
            self.unk_token = unk_token
            tokens = [unk_token, *alphabet_list]
        self.alphabet: list[str] = alphabet_list
        self._alphabet_set = frozenset(alphabet_list)
        specials = _check_special_tokens(special_tokens)

        if isinstance(merges, (str, dict)) or merges is None:
            raise TypeError(f"merges must be a list of (left, right) string pairs (e.g. [] for none), got "
                            f"{type(merges).__name__} {merges!r:.60}")
        try:
            merges = list(merges)
        except TypeError:
            raise TypeError(f"merges must be a list of (left, right) string pairs, got "
                            f"{type(merges).__name__} {merges!r:.60}") from None
        known = set(tokens)
        checked: list[tuple[str, str]] = []
        for k, merge in enumerate(merges):
            if not (isinstance(merge, (tuple, list)) and len(merge) == 2 and all(isinstance(p, str) and p for p in merge)):
                raise ValueError(f"merge {k} must be a pair of non-empty strings (left, right), got {merge!r}")
            left, right = merge
            if self.unk_token is not None and self.unk_token in (left, right):
                raise ValueError(f"merge {k} {(left, right)!r}: the unk_token {self.unk_token!r} is never merged")
            for part in (left, right):
                if part not in known:
                    raise ValueError(
                        f"merge {k} {(left, right)!r}: {part!r} is neither in the alphabet nor made by an earlier merge "
                        "(merges must be listed in the order they were learned)"
                    )
            new = left + right
            if new not in known:
                known.add(new)
                tokens.append(new)
            checked.append((left, right))
        for k, t in enumerate(specials):
            if t in known:
                what = ("the unk_token" if t == self.unk_token else "a character of the alphabet"
                        if t in self._alphabet_set else "a token made by a merge")
                raise ValueError(f"special_tokens[{k}] {t!r} is already {what}; a special token must be a string "
                                 "of its own, so that it has one id")
        tokens.extend(specials)
        self.merges: list[tuple[str, str]] = checked
        self._ranks = {pair: rank for rank, pair in enumerate(checked)}
        #: the special tokens, in the order given (default ids: the last ``len(special_tokens)`` ids)
        self.special_tokens: list[str] = specials
        self._special_set = frozenset(specials)
        self._special_re = _special_regex(specials)
        self._max_special_len = max((len(t) for t in specials), default=0)
        if vocab is not None:
            tokens = self._ids_from_vocab(vocab, tokens)
        self.id_to_token: list[str] = tokens
        self.vocab: dict[str, int] = {t: i for i, t in enumerate(tokens)}
        #: for a trained tokenizer: the pair count at the moment each merge was chosen
        self.merge_counts: list[int] | None = None
        self._cache: dict[str, tuple[str, ...]] = {}

    @staticmethod
    def _ids_from_vocab(vocab, tokens: list[str]) -> list[str]:
        """The tokens in the order of ``vocab``'s ids, after checking that it numbers exactly ``tokens``."""
        if not isinstance(vocab, dict):
            raise TypeError(f"vocab must be a dict {{token: id}}, got {type(vocab).__name__} {vocab!r:.60}")
        for t, i in vocab.items():
            if not isinstance(t, str) or isinstance(i, bool) or not isinstance(i, int):
                raise TypeError(f"vocab must map str tokens to int ids, got {t!r:.40}: {i!r:.40}")
        wanted = set(tokens)
        missing = [t for t in tokens if t not in vocab]
        if missing:
            raise ValueError(f"vocab has no id for the token {missing[0]!r} ({len(missing)} tokens missing)")
        extra = [t for t in vocab if t not in wanted]
        if extra:
            raise ValueError(f"vocab has the token {extra[0]!r} (id {vocab[extra[0]]}), which is neither in the "
                             "alphabet, nor made by a merge, nor a special token")
        by_id: list[str | None] = [None] * len(tokens)
        for t, i in vocab.items():
            if not 0 <= i < len(tokens) or by_id[i] is not None:
                raise ValueError(f"vocab ids must be 0..{len(tokens) - 1}, each once; got id {i} for {t!r:.40}"
                                 + (f" (already {by_id[i]!r:.40})" if 0 <= i < len(tokens) else ""))
            by_id[i] = t
        return by_id  # type: ignore[return-value]

    # ------------------------------------------------------------------ info
    @property
    def vocab_size(self) -> int:
        """Number of tokens (ids 0..vocab_size-1)."""
        return len(self.id_to_token)

    def __len__(self) -> int:
        return self.vocab_size

    def __repr__(self) -> str:
        mode = "byte_level=True" if self.byte_level else f"{len(self.alphabet)} characters"
        specials = f", special_tokens={self.special_tokens!r:.80}" if self.special_tokens else ""
        return f"BPETokenizer(vocab_size={self.vocab_size}, merges={len(self.merges)}, {mode}{specials})"

    def with_merges(self, num_merges: int) -> "BPETokenizer":
        """The same tokenizer with only its first ``num_merges`` merges (training stopped earlier).

        The special tokens stay. Ids: the kept tokens are numbered 0..n-1 in the order of their ids here,
        so the default layout stays the default layout (special tokens right after the kept merges) and
        GPT-2's layout stays GPT-2's.

        Raises:
            TypeError: ``num_merges`` not an int.
            ValueError: ``num_merges`` outside 0..len(merges).
        """
        if isinstance(num_merges, bool) or not isinstance(num_merges, int):
            raise TypeError(f"num_merges must be an int, got {type(num_merges).__name__} {num_merges!r}")
        if not 0 <= num_merges <= len(self.merges):
            raise ValueError(f"num_merges must be in 0..{len(self.merges)}, got {num_merges}")
        alphabet = None if self.byte_level else self.alphabet
        kept = BPETokenizer(self.merges[:num_merges], alphabet, self.unk_token or "[UNK]", byte_level=self.byte_level,
                            special_tokens=self.special_tokens).id_to_token
        order = sorted(kept, key=self.vocab.__getitem__)
        tok = BPETokenizer(self.merges[:num_merges], alphabet, self.unk_token or "[UNK]", byte_level=self.byte_level,
                           special_tokens=self.special_tokens, vocab={t: i for i, t in enumerate(order)})
        if self.merge_counts is not None:
            tok.merge_counts = self.merge_counts[:num_merges]
        return tok

    # ------------------------------------------------------------------ symbols of a word
    def _initial_symbols(self, word: str) -> list[str]:
        """A word as the list of starting symbols: its characters (unknown ones -> unk_token),
        or byte-level, its UTF-8 bytes as GPT-2 characters."""
        if self.byte_level:
            table = bytes_to_unicode()
            try:
                data = word.encode("utf-8")
            except UnicodeEncodeError as e:
                raise ValueError(f"text is not valid Unicode for UTF-8 (lone surrogate?): {word!r:.60}") from e
            return [table[b] for b in data]
        return [c if c in self._alphabet_set else self.unk_token for c in word]

    def tokenize_word(self, word: str) -> list[str]:
        """Tokens of one pre-tokenized word.

        Replays the merges in learned order: repeatedly take the adjacent pair with the
        *earliest* merge (lowest rank) present in the word and merge all its occurrences --
        the same result as :func:`apply_merges_in_order`, the way GPT-2's ``bpe()`` does it.
        The unknown token never takes part in a merge.
        """
        _check_text("word", word)
        cached = self._cache.get(word)
        if cached is not None:
            return list(cached)
        symbols = self._initial_symbols(word)
        while len(symbols) > 1:
            best_rank, best_pair = None, None
            for pair in zip(symbols, symbols[1:]):
                rank = self._ranks.get(pair)
                if rank is not None and (best_rank is None or rank < best_rank):
                    best_rank, best_pair = rank, pair
            if best_pair is None:
                break
            symbols = merge_pair(symbols, best_pair)
        if len(self._cache) < 100_000:
            self._cache[word] = tuple(symbols)
        return symbols

    # ------------------------------------------------------------------ text <-> tokens <-> ids
    def tokenize(self, text: str) -> list[str]:
        """Text -> tokens: special tokens first (each one token), then :func:`pre_tokenize` on the text
        between them and :meth:`tokenize_word` on each word.

        Raises:
            TypeError: ``text`` is not a str.
            ValueError: byte level, a lone surrogate in ``text`` (not valid UTF-8).
        """
        _check_text("text", text)
        tokens: list[str] = []
        for piece, special in _split_on_specials(self._special_re, text):
            if special:
                tokens.append(piece)
            else:
                for word in pre_tokenize(piece):
                    tokens.extend(self.tokenize_word(word))
        return tokens

    def convert_tokens_to_ids(self, tokens: Sequence[str]) -> list[int]:
        """Look tokens up in the vocabulary.

        Raises:
            ValueError: a token is not in the vocabulary (named in the message).
        """
        ids = []
        for t in tokens:
            if t not in self.vocab:
                raise ValueError(f"token {t!r} is not in the vocabulary")
            ids.append(self.vocab[t])
        return ids

    def convert_ids_to_tokens(self, ids: Iterable[int]) -> list[str]:
        """Ids -> tokens.

        Raises:
            TypeError: an id is not an int.
            ValueError: an id is outside 0..vocab_size-1 (the message names both).
        """
        ids = _id_list(ids)
        out = []
        for i in ids:
            if hasattr(i, "item") and not isinstance(i, (int, bool)):
                i = i.item()  # numpy / torch scalars
            if isinstance(i, bool) or not isinstance(i, int):
                raise TypeError(f"ids must be ints, got {type(i).__name__} {i!r}")
            if not 0 <= i < self.vocab_size:
                raise ValueError(f"id {i} is outside the vocabulary: vocab_size={self.vocab_size} (ids 0..{self.vocab_size - 1})")
            out.append(self.id_to_token[i])
        return out

    def encode(self, text: str) -> list[int]:
        """Text -> token ids (``convert_tokens_to_ids(tokenize(text))``); a special token in the text is its id.

        Raises:
            TypeError: ``text`` is not a str.
            ValueError: byte level, a lone surrogate in ``text``.
        """
        return [self.vocab[t] for t in self.tokenize(text)]

    def encode_iterable(self, iterable: Iterable[str]) -> Iterator[int]:
        """Token ids of a stream of text, yielded lazily: ``list(encode_iterable(chunks)) == encode("".join(chunks))``.

        For a file too large to hold in memory: ``for i in tok.encode_iterable(open(path, encoding="utf-8"))``
        reads it line by line. The chunks may be cut anywhere, in the middle of a word or of a special token:
        the text is buffered until what is buffered cannot change any more. Words are emitted once a later
        word has begun at least 4 characters further on (GPT-2's pattern looks 3 characters ahead, for ``'re``);
        a special token once the longest special token would fit after its start. Memory: the buffered tail
        (about one word plus one chunk) and the word cache (at most 100,000 words), not the text.

        Args:
            iterable: an iterable of str, e.g. an open text file or a list of str (not a single str).

        Returns:
            an iterator of int ids (a generator).

        Raises:
            TypeError: ``iterable`` is a str, bytes or not iterable (at the call); an element is not a str
                (e.g. a file opened in binary mode), raised when the iterator reaches it.
            ValueError: byte level, a lone surrogate in the text.

        Source: CS336 assignment 1's ``Tokenizer.encode_iterable`` (Stanford, 2025); the stream is cut only
        where GPT-2's pre-tokenizer (Radford et al. 2019) gives the same words.
        """
        if isinstance(iterable, (str, bytes)) or not hasattr(iterable, "__iter__"):
            hint = "; for one string use encode(text)" if isinstance(iterable, str) else ""
            raise TypeError(f"iterable must be an iterable of str (e.g. an open text file or a list of str), got "
                            f"{type(iterable).__name__} {iterable!r:.40}{hint}")
        return self._encode_stream(iter(iterable))

    def _encode_stream(self, chunks: Iterator) -> Iterator[int]:
        buffer = ""
        for k, chunk in enumerate(chunks):
            if not isinstance(chunk, str):
                hint = " (open the file in text mode)" if isinstance(chunk, (bytes, bytearray)) else ""
                raise TypeError(f"element {k} of iterable must be a str, got {type(chunk).__name__} {chunk!r:.40}{hint}")
            if not chunk:
                continue
            buffer += chunk
            pieces, cut = self._final_pieces(buffer)
            for piece, special in pieces:
                if special:
                    yield self.vocab[piece]
                else:
                    for t in self.tokenize_word(piece):
                        yield self.vocab[t]
            buffer = buffer[cut:]
        yield from self.encode(buffer)

    def _final_pieces(self, buffer: str) -> tuple[list[tuple[str, bool]], int]:
        """The special tokens and words at the start of ``buffer`` that no text appended later can change,
        and where they end."""
        n = len(buffer)
        pieces: list[tuple[str, bool]] = []
        pos = 0
        limit = n
        if self._special_re is not None:
            longest = self._max_special_len
            for m in self._special_re.finditer(buffer):
                if m.start() + longest > n:  # a longer special token may start here
                    break
                pieces.extend((w, False) for w in pre_tokenize(buffer[pos:m.start()]))
                pieces.append((m.group(), True))
                pos = m.end()
            limit = max(pos, n - longest + 1)  # a special token may begin at limit or after
        text = buffer[pos:limit]
        start = 0
        for word in pre_tokenize(text):
            end = start + len(word)
            if end >= len(text) or start + _LOOKAHEAD > len(text):
                break
            pieces.append((word, False))
            start = end
        return pieces, pos + start

    def decode(self, ids: Iterable[int]) -> str:
        """Token ids -> text: the tokens joined.

        Character mode: exact for text whose characters are all in the alphabet; an unknown
        character comes back as ``unk_token``. Byte-level: ``decode(encode(s)) == s`` for every
        str ``s``; ids whose bytes are not valid UTF-8 give U+FFFD (errors="replace"). A special
        token decodes as itself.

        Raises:
            TypeError / ValueError: an id is not an int in 0..vocab_size-1.
        """
        tokens = self.convert_ids_to_tokens(ids)
        if not self.byte_level:
            return "".join(tokens)
        back = _unicode_to_bytes()
        specials = self._special_set
        data = b"".join(t.encode("utf-8") if t in specials else bytes(back[c] for c in t) for t in tokens)
        return data.decode("utf-8", errors="replace")

    # ------------------------------------------------------------------ GPT-2's files
    @classmethod
    def from_files(cls, vocab_filepath, merges_filepath, special_tokens: Iterable[str] | None = None) -> "BPETokenizer":
        """A byte-level tokenizer from GPT-2-style files: ``vocab.json`` ({token: id}) and ``merges.txt``.

        ``merges.txt`` holds one merge per line, ``left right`` in :func:`bytes_to_unicode` characters
        (an optional first line ``#version: ...`` and blank lines are skipped). The ids are those of
        ``vocab.json``: with GPT-2's files, ``"!"`` is 0, ``"Ġt"`` (the first merge) 256 and
        ``<|endoftext|>`` 50256, so :meth:`encode` gives the ids of GPT-2, of tiktoken's ``"gpt2"``
        encoding and of ``transformers``' ``GPT2Tokenizer``.

        Args:
            vocab_filepath: path (str or ``os.PathLike``) of the JSON vocabulary.
            merges_filepath: path of the merges file.
            special_tokens: the special tokens, a list of str. None: every entry of ``vocab.json`` that is
                neither a byte nor made by a merge (GPT-2: ``["<|endoftext|>"]``). A special token that is
                not in ``vocab.json`` gets the next free id, in the order given.

        Returns:
            a byte-level :class:`BPETokenizer` (``vocab_size`` 50257 for GPT-2).

        Raises:
            TypeError: a path is not a str or path; ``special_tokens`` not a list of str; ``vocab.json``
                not a JSON object {str: int}.
            ValueError: a merges line that is not two tokens, a merge of unknown tokens, a vocabulary entry
                that is neither a byte, a merge's token nor a special token (when ``special_tokens`` is
                given), a missing token or ids that are not 0..vocab_size-1 each once.
            OSError: a file cannot be read.

        No tensors: paths and str in; ids are int.

        Source: the file format of GPT-2's ``encoder.py`` (Radford et al. 2019) and of HuggingFace's
        ``tokenizers`` ``BPE.from_file``; CS336 assignment 1's ``Tokenizer.from_files`` (Stanford, 2025).
        """
        import json
        import os

        for name, path in (("vocab_filepath", vocab_filepath), ("merges_filepath", merges_filepath)):
            if not isinstance(path, (str, os.PathLike)):
                raise TypeError(f"{name} must be a str or a path, got {type(path).__name__} {path!r:.60}")
        with open(vocab_filepath, encoding="utf-8") as f:
            vocab = json.load(f)
        if not isinstance(vocab, dict):
            raise TypeError(f"{vocab_filepath}: the vocabulary must be a JSON object {{token: id}}, "
                            f"got {type(vocab).__name__}")
        merges = []
        with open(merges_filepath, encoding="utf-8") as f:
            for n, line in enumerate(f, start=1):
                line = line.rstrip("\r\n")
                if not line or (n == 1 and line.startswith("#version")):
                    continue
                parts = line.split(" ")
                if len(parts) != 2 or not all(parts):
                    raise ValueError(f"{merges_filepath}, line {n}: a merge is two tokens separated by one space, "
                                     f"got {line!r:.60}")
                merges.append((parts[0], parts[1]))
        if special_tokens is None:
            ordinary = set(bytes_to_unicode().values()) | {left + right for left, right in merges}
            specials = [t for t in sorted(vocab, key=lambda t: (vocab[t], t) if isinstance(vocab[t], int) else (0, t))
                        if t not in ordinary]
        else:
            specials = _check_special_tokens(special_tokens)
        vocab = dict(vocab)
        next_id = max((i for i in vocab.values() if isinstance(i, int)), default=-1) + 1
        for t in specials:
            if t not in vocab:
                vocab[t] = next_id
                next_id += 1
        return cls(merges, None, byte_level=True, special_tokens=specials, vocab=vocab)

    # ------------------------------------------------------------------ training
    def _token_key(self, token: str):
        """What tie-breaking compares: the token's string, or byte-level its bytes."""
        if self.byte_level:
            back = _unicode_to_bytes()
            return bytes(back[c] for c in token)
        return token

    @classmethod
    def train(cls, corpus: str | Iterable[str] | dict[str, int], vocab_size: int, *, byte_level: bool = False,
              unk_token: str = "[UNK]", min_frequency: int = 2, tie_break: str = "alphabetical",
              special_tokens: Iterable[str] | None = None, progress: bool = False) -> "BPETokenizer":
        """Learn merges from a corpus until the vocabulary has ``vocab_size`` tokens.

        Each step merges the most frequent adjacent pair of symbols, counted over all words of
        the corpus (a word occurring 5 times counts 5 times; pairs never cross word boundaries of
        :func:`pre_tokenize`). **Ties** (two pairs with the same count) are broken by ``tie_break``:

        - ``"alphabetical"`` (default): the pair that comes first in alphabetical order, comparing
          the left tokens, then the right tokens, as Python strings (code points; byte-level: as bytes).
        - ``"vocab_order"``: the pair whose (left id, right id) is smallest, where merged tokens get
          ids after every single character, in the order they were made -- the rule of the
          ``tokenizers`` library's ``BpeTrainer``. With it, training reproduces that library's merges,
          in character mode and byte-level (where the library numbers the 256 starting symbols by the
          code point of their :func:`bytes_to_unicode` character, so ``Ġ``, the space, comes after
          every printable ASCII byte; attn_lib's ids stay the byte values, only the tie rule follows
          the library).
        - ``"greatest_bytes"``: the pair whose (left, right) is greatest, comparing the tokens as raw
          UTF-8 bytes (byte-level: the bytes they stand for, so the space byte ``Ġ`` = 0x20 sorts before
          ``a`` = 0x61, although the character ``Ġ`` comes after ``a``) -- the rule of Stanford CS336's
          assignment 1 (``max`` over (count, pair of bytes)). With it, byte-level training on CS336's
          ``corpus.en`` (vocab_size 500, ``special_tokens=["<|endoftext|>"]``) gives CS336's reference
          merges, in order.

        Special tokens are cut out of the corpus first (leftmost, longest first, as in :meth:`tokenize`):
        no pair is counted across or inside one, and each gets one id after the merges.

        Training stops early when no pair occurs at least ``min_frequency`` times.

        Args:
            corpus: a str, an iterable of str (e.g. the lines of a file), or a dict
                {text: frequency} (e.g. word counts): each text counts as if it occurred that often.
            vocab_size: the target number of tokens, counting ``unk_token`` and the alphabet
                (every character of the corpus; byte-level: 256 bytes).
            byte_level: learn on UTF-8 bytes (GPT-2) instead of characters.
            unk_token: the unknown token (character mode).
            min_frequency: a pair must occur at least this often to be merged (int >= 1).
            tie_break: ``"alphabetical"``, ``"vocab_order"`` or ``"greatest_bytes"`` (see above).
            special_tokens: a list of distinct non-empty str (e.g. ``["<|endoftext|>"]``); they count in
                ``vocab_size`` and take the last ids.
            progress: show a ``tqdm.auto`` progress bar over merges.

        Returns:
            a :class:`BPETokenizer`; its ``merge_counts`` hold each merge's pair count.

        Raises:
            TypeError: ``corpus`` is not a str, an iterable of str or a dict {str: int};
                ``special_tokens`` not a list of str.
            ValueError: ``vocab_size`` smaller than the starting vocabulary plus the special tokens (named
                in the message), ``min_frequency`` < 1, a negative frequency in a corpus dict, an unknown
                ``tie_break``, an empty or duplicate special token, or one equal to a starting symbol.

        Source: Sennrich et al. 2016, section 3.2 (Algorithm 1); the tie rules of HuggingFace's ``tokenizers``
        ``BpeTrainer`` and of CS336 (Stanford, 2025, assignment 1, ``train_bpe``).
        """
        if isinstance(corpus, str):
            texts = [corpus]
        elif isinstance(corpus, dict):  # {text: frequency}
            texts = []
            for t, n in corpus.items():
                _check_text("each key of a corpus dict", t)
                if isinstance(n, bool) or not isinstance(n, int) or n < 0:
                    raise (ValueError if isinstance(n, int) and not isinstance(n, bool) else TypeError)(
                        f"the values of a corpus dict are word frequencies, ints >= 0; got {n!r} for {t!r:.40}")
        else:
            try:
                texts = list(corpus)
            except TypeError:
                raise TypeError(f"corpus must be a str or an iterable of str, got {type(corpus).__name__}") from None
            for t in texts:
                _check_text("each corpus entry", t)
        if isinstance(vocab_size, bool) or not isinstance(vocab_size, int):
            raise TypeError(f"vocab_size must be an int, got {type(vocab_size).__name__} {vocab_size!r}")
        if isinstance(min_frequency, bool) or not isinstance(min_frequency, int) or min_frequency < 1:
            raise ValueError(f"min_frequency must be an int >= 1, got {min_frequency!r}")
        if tie_break not in ("alphabetical", "vocab_order", "greatest_bytes"):
            raise ValueError(f"tie_break must be 'alphabetical', 'vocab_order' or 'greatest_bytes', got {tie_break!r}")
        specials = _check_special_tokens(special_tokens)
        special_re = _special_regex(specials)

        def words_of(text):
            for piece, special in _split_on_specials(special_re, text):
                if not special:
                    yield from pre_tokenize(piece)

        word_counts: Counter = Counter()
        if isinstance(corpus, dict):
            for t, n in corpus.items():
                for w in words_of(t):
                    word_counts[w] += n
            word_counts = Counter({w: n for w, n in word_counts.items() if n})
        else:
            for t in texts:
                word_counts.update(words_of(t))
        if byte_level:
            base = cls([], None, byte_level=True, special_tokens=specials)
        else:
            base = cls([], sorted({c for w in word_counts for c in w}), unk_token, special_tokens=specials)
        if vocab_size < base.vocab_size:
            what = "256 bytes" if byte_level else f"unk_token + {len(base.alphabet)} characters of the corpus"
            if specials:
                what += f" + {len(specials)} special tokens"
            raise ValueError(f"vocab_size={vocab_size} is smaller than the starting vocabulary ({base.vocab_size}: {what})")
        vocab_size -= len(specials)  # the merges fill the rest

        # words as lists of symbols, with their counts
        words = [base._initial_symbols(w) for w in word_counts]
        freqs = list(word_counts.values())
        pair_counts: Counter = Counter()
        where: defaultdict = defaultdict(set)  # pair -> indices of words containing it
        for idx, symbols in enumerate(words):
            for pair in zip(symbols, symbols[1:]):
                pair_counts[pair] += freqs[idx]
                where[pair].add(idx)

        merges: list[tuple[str, str]] = []
        counts: list[int] = []
        starting = base.id_to_token[:base.vocab_size - len(specials)]  # unk_token, alphabet; no special token
        vocab = set(starting)
        bar = None
        if progress:
            from tqdm.auto import tqdm

            bar = tqdm(total=vocab_size - len(vocab), desc="BPE merges")
        if tie_break == "greatest_bytes":  # token -> its bytes; ties -> the greatest (left, right)
            keys = {t: base._token_key(t) if byte_level else t.encode("utf-8") for t in starting}
        elif tie_break == "alphabetical":  # token -> what ties compare
            keys = {t: base._token_key(t) for t in starting}
        elif byte_level:
            # the tokenizers library numbers its starting alphabet by the code point of the byte-level
            # character, not by byte value: "Ġ" (U+0120, the space byte) comes after every printable
            # ASCII byte. Merged tokens get the next ids, in the order they are made.
            keys = {t: ord(t) for t in starting}
        else:
            keys = {t: base.vocab[t] for t in starting}  # [UNK] 0, then the alphabet by code point: the library's ids
        next_key = max(keys.values()) + 1 if tie_break == "vocab_order" else None

        def rank(item):  # most frequent first; ties -> alphabetically first (left, right)
            (left, right), count = item
            return (-count, keys[left], keys[right])

        def greatest(item):  # most frequent first; ties -> the greatest (left bytes, right bytes)
            (left, right), count = item
            return (count, keys[left], keys[right])

        while len(vocab) < vocab_size and pair_counts:
            if tie_break == "greatest_bytes":
                best, best_count = max(pair_counts.items(), key=greatest)
            else:
                best, best_count = min(pair_counts.items(), key=rank)
            if best_count < min_frequency:
                break
            merges.append(best)
            counts.append(best_count)
            vocab.add(best[0] + best[1])
            if tie_break in ("alphabetical", "greatest_bytes"):
                keys[best[0] + best[1]] = keys[best[0]] + keys[best[1]]
            elif best[0] + best[1] not in keys:
                keys[best[0] + best[1]] = next_key
                next_key += 1
            for idx in where.pop(best, ()):
                old = words[idx]
                new = merge_pair(old, best)
                if len(new) == len(old):
                    continue
                f = freqs[idx]
                for pair in zip(old, old[1:]):  # forget the word's old pairs ...
                    pair_counts[pair] -= f
                    if pair_counts[pair] <= 0:
                        del pair_counts[pair]
                for pair in zip(new, new[1:]):  # ... and count its new ones
                    pair_counts[pair] += f
                    where[pair].add(idx)
                words[idx] = new
            pair_counts.pop(best, None)
            if bar is not None:
                bar.update(1)
        if bar is not None:
            bar.close()

        tok = cls(merges, None if byte_level else base.alphabet, unk_token, byte_level=byte_level,
                  special_tokens=specials)
        tok.merge_counts = counts
        return tok


# ------------------------------------------------------------------ widget logic
def bpe_summary(tokenizer: BPETokenizer, vocab_size: int, sentence: str, *, last: int = 10) -> str:
    """Text for the notebook's BPE widget: the tokenizer cut back to ``vocab_size`` tokens.

    Shows how many merges that leaves, the last ``last`` merges learned (with their counts when
    known) and the tokens of ``sentence``.

    Raises:
        ValueError: ``vocab_size`` outside the range the tokenizer can be cut back to.

    No tensors: a BPETokenizer, an int vocab_size, a str sentence, an int last; a str out.
    Also TypeError: vocab_size not an int, or sentence not a str.

    Source: the course's own: notebook 01 (its BPE widget).
    """
    _check_text("sentence", sentence)
    # the starting symbols: unk_token, the alphabet (byte level: the 256 bytes) and the special tokens
    starting = set(tokenizer.alphabet) | set(tokenizer.special_tokens) | ({tokenizer.unk_token} - {None})
    start = len(starting)
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, int):
        raise TypeError(f"vocab_size must be an int, got {type(vocab_size).__name__} {vocab_size!r}")
    if not start <= vocab_size <= tokenizer.vocab_size:
        raise ValueError(f"vocab_size must be in {start}..{tokenizer.vocab_size} for this tokenizer, got {vocab_size}")
    # merges that recreate an existing token add no new id, so count tokens, not merges
    k, size, seen = 0, start, starting
    while k < len(tokenizer.merges) and size < vocab_size:
        new = "".join(tokenizer.merges[k])
        size += new not in seen
        seen.add(new)
        k += 1
    tok = tokenizer.with_merges(k)
    lines = [f"vocab_size {tok.vocab_size} = {start} starting symbols + {k} merges"]
    shown = range(max(0, k - last), k)
    if k:
        lines.append(f"last {len(shown)} merges:")
        for i in shown:
            left, right = tok.merges[i]
            count = f"  (seen {tok.merge_counts[i]} times)" if tok.merge_counts else ""
            lines.append(f"  {i + 1:4d}. {left!r} + {right!r} -> {left + right!r}{count}")
    tokens = tok.tokenize(sentence)
    lines.append(f"{sentence!r} -> {len(tokens)} tokens:")
    lines.append("  " + " | ".join(tokens))
    return "\n".join(lines)


# ------------------------------------------------------------------ WordPiece (BERT), for comparison
def _is_punctuation(ch: str) -> bool:
    """BERT's punctuation: ASCII punctuation (``$``, ``+``, ``^`` too) or Unicode category P*."""
    cp = ord(ch)
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
        return True
    return unicodedata.category(ch).startswith("P")


#: Unicode's White_Space property (what Rust's ``char::is_whitespace`` tests; Python's ``str.isspace``
#: adds U+001C..U+001F, which BERT deletes as control characters anyway).
_WHITESPACE = frozenset(
    "\t\n\x0b\x0c\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a"
    "\u2028\u2029\u202f\u205f\u3000"
)


def _is_cjk(cp: int) -> bool:
    """The CJK ideograph blocks BERT cuts into one word per character (``_is_chinese_char``)."""
    return (0x4E00 <= cp <= 0x9FFF or 0x3400 <= cp <= 0x4DBF or 0x20000 <= cp <= 0x2A6DF or 0x2A700 <= cp <= 0x2B73F
            or 0x2B740 <= cp <= 0x2B81F or 0x2B820 <= cp <= 0x2CEAF or 0xF900 <= cp <= 0xFAFF
            or 0x2F800 <= cp <= 0x2FA1F)


def _bert_normalize(text: str, lowercase: bool) -> str:
    """BERT's normalizer (``tokenizers``' ``BertNormalizer`` of the MiniLM tokenizer), step by step."""
    out = []
    for c in text:
        # 1. clean: delete NUL, U+FFFD and control/format/private/unassigned characters (category C*,
        #    except tab, newline, carriage return); every whitespace character becomes a plain space
        #    (a control character that is also whitespace, such as U+000B or U+0085, is deleted)
        if c in "\t\n\r":
            out.append(" ")
        elif c == "\ufffd" or unicodedata.category(c).startswith("C"):
            continue
        elif c in _WHITESPACE:
            out.append(" ")
        # 2. a space around each CJK ideograph
        elif _is_cjk(ord(c)):
            out.append(f" {c} ")
        else:
            out.append(c)
    text = "".join(out)
    if lowercase:
        # 3. strip accents (NFD, drop the non-spacing marks), 4. then lowercase, character by character
        text = "".join(c for c in unicodedata.normalize("NFD", text) if unicodedata.category(c) != "Mn")
        text = "".join(c.lower() for c in text)
    return text


def basic_split(text: str, *, lowercase: bool = True) -> list[str]:
    """BERT's basic pre-tokenization: clean, (strip accents and lowercase,) split on whitespace and
    around every punctuation character. ``"The cat sat."`` -> ``["the", "cat", "sat", "."]``.

    Exactly what the bundled MiniLM tokenizer does before WordPiece (``tokenizers``' ``BertNormalizer``
    with ``clean_text``, ``handle_chinese_chars`` and ``lowercase``, then ``BertPreTokenizer``):

    - control and format characters (Unicode category C*: e.g. the soft hyphen U+00AD, the zero-width
      space U+200B, NUL), except tab, newline and carriage return, and U+FFFD are **deleted**, so
      ``"co\u00adoperation"`` is one word ``"cooperation"``; whitespace characters become spaces;
    - every CJK ideograph becomes a word of its own;
    - lowercase: accents stripped (NFD, non-spacing marks dropped), then each character lowercased.

    Raises:
        TypeError: ``text`` is not a str, ``lowercase`` not a bool.

    No tensors: a str and a bool in, a list of str out.

    Source: HuggingFace's ``tokenizers`` ``BertNormalizer`` + ``BertPreTokenizer`` (BERT's ``BasicTokenizer``).
    """
    _check_text("text", text)
    if not isinstance(lowercase, bool):
        raise TypeError(f"lowercase must be a bool (True or False), got {type(lowercase).__name__} {lowercase!r}")
    text = _bert_normalize(text, lowercase)
    words: list[str] = []
    for chunk in text.split(" "):
        current = ""
        for c in chunk:
            if _is_punctuation(c):
                if current:
                    words.append(current)
                    current = ""
                words.append(c)
            else:
                current += c
        if current:
            words.append(current)
    return words


def wordpiece_tokenize(text: str, vocab, *, unk_token: str = "[UNK]", lowercase: bool = True,
                       max_input_chars_per_word: int = 100) -> list[str]:
    """WordPiece tokenization as BERT does it at inference (Devlin et al. 2019; Wu et al. 2016 §4.1).

    After :func:`basic_split`, each word is cut greedily, longest match first: take the longest
    prefix that is in the vocabulary, then the longest vocabulary entry ``"##" + rest`` for what
    follows, and so on. A word that cannot be cut this way becomes a single ``unk_token``.
    Unlike BPE there is no list of merges to replay: only the vocabulary matters.

    Args:
        text: the text.
        vocab: a container of tokens (dict token -> id, set, ...), e.g. ``tokenizer.vocab`` of the
            bundled MiniLM model.

        unk_token: the token for a word that cannot be cut (a str).
        lowercase: lowercase and strip accents first (uncased models such as MiniLM).
        max_input_chars_per_word: a longer word becomes ``unk_token`` (an int >= 1; BERT: 100).

    Returns:
        list of tokens, without [CLS]/[SEP]; equal to the bundled MiniLM tokenizer's ``tokenize``.

    Raises:
        TypeError: ``text`` or ``unk_token`` not a str; ``vocab`` a str (it would match substrings; read
            a vocabulary file into a dict first) or not a container; ``max_input_chars_per_word`` not an int.
        ValueError: ``max_input_chars_per_word`` < 1.

    No tensors: str text and tokens, int ``max_input_chars_per_word``; a list of str out.
    """
    _check_text("text", text)
    if isinstance(vocab, (str, bytes)) or vocab is None or not hasattr(vocab, "__contains__"):
        hint = (" (a str would match any substring; to use a vocab.txt file, read it first: "
                "{line.rstrip('\\n'): i for i, line in enumerate(open(path, encoding='utf-8'))})"
                if isinstance(vocab, str) else "")
        raise TypeError(f"vocab must be a dict {{token: id}} or a set of tokens, got {type(vocab).__name__} "
                        f"{vocab!r:.60}{hint}")
    _check_text("unk_token", unk_token)
    check_int("max_input_chars_per_word", max_input_chars_per_word, minimum=1)
    tokens: list[str] = []
    for word in basic_split(text, lowercase=lowercase):
        if len(word) > max_input_chars_per_word:
            tokens.append(unk_token)
            continue
        pieces: list[str] = []
        start = 0
        while start < len(word):
            end = len(word)
            piece = None
            while start < end:
                candidate = word[start:end] if start == 0 else "##" + word[start:end]
                if candidate in vocab:
                    piece = candidate
                    break
                end -= 1
            if piece is None:
                pieces = [unk_token]
                break
            pieces.append(piece)
            start = end
        tokens.extend(pieces)
    return tokens
