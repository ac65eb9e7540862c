"""Your byte-pair encoding (mirrors attn_lib.tokenization; notebook 01, section "Byte-pair encoding, step by step").

No tensors: text is str, ids are ints, merges are (left, right) pairs of str.

Given (attn_lib's, imported below): ``pre_tokenize`` (text -> words, GPT-2's rule), ``bytes_to_unicode`` (byte value ->
the printable character GPT-2 shows for it), ``count_pairs`` ({word as a tuple of symbols: count} -> Counter of
adjacent pairs, weighted by the counts) and ``merge_pair`` (symbols, pair -> symbols with every occurrence merged).
"""

from __future__ import annotations

from attn_lib.tokenization import BPETokenizer as _LibBPETokenizer
from attn_lib.tokenization import bytes_to_unicode, count_pairs, merge_pair, pre_tokenize  # noqa: F401 - for you
from my_attn._todo import todo

_SECTION = "Byte-pair encoding, step by step"


class BPETokenizer(_LibBPETokenizer):
    """Your BPE tokenizer: ``train``, ``tokenize_word``, ``encode`` and ``decode`` are yours.

    Given (inherited from attn_lib.tokenization.BPETokenizer, so the notebook's code works on your class):
    ``__init__(merges, alphabet, unk_token="[UNK]", *, byte_level=False)``, which builds ``self.merges`` (in learned
    order), ``self.alphabet``, ``self.unk_token`` (None in byte-level mode), ``self.byte_level``, ``self.vocab``
    (token -> id: unk_token 0, the alphabet, then one id per merge; byte-level: ids 0..255 are the bytes) and
    ``self.id_to_token``; ``tokenize(text)`` (pre_tokenize, then your tokenize_word on each word);
    ``convert_ids_to_tokens(ids)`` (with the id checks); ``with_merges(k)``.
    """

    @classmethod
    def train(cls, corpus, vocab_size, *, byte_level=False, unk_token="[UNK]", min_frequency=2,
              tie_break="alphabetical", progress=False):
        """Learn merges until the vocabulary has ``vocab_size`` tokens (Sennrich et al. 2016, §3.2).

        1. Words: ``pre_tokenize`` every text of ``corpus`` (a str, an iterable of str, or a dict {text: frequency}:
           each text counts that often) and count the words. Pairs never cross words.
        2. Symbols: each word as its characters (byte-level: the ``bytes_to_unicode`` characters of its UTF-8 bytes).
           The starting vocabulary: ``cls([], sorted characters of the corpus, unk_token)``, or byte-level
           ``cls([], None, byte_level=True)``; ``vocab_size`` below its size is a ValueError.
        3. Repeat while the vocabulary (a set of token strings) is smaller than ``vocab_size``: count the adjacent
           pairs over all words, each word weighted by its count; take the most frequent pair; on a tie, the
           alphabetically first (left, then right token, as str; byte-level: compare the tokens' bytes); stop when
           its count is below ``min_frequency``; record it and its count; merge it in every word.
        4. Return ``cls(merges, alphabet (None byte-level), unk_token, byte_level=byte_level)`` with
           ``merge_counts`` set to the list of counts. With ``progress``, show a ``tqdm.auto`` bar (optional).

        ``tie_break="vocab_order"`` (the ``tokenizers`` library's rule, the notebook's optional section) is given:
        it calls attn_lib's trainer.

        Returns:
            a BPETokenizer of your class (``cls``).

        Raises:
            ValueError: ``vocab_size`` smaller than the starting vocabulary.
        """
        if tie_break != "alphabetical":
            return super().train(corpus, vocab_size, byte_level=byte_level, unk_token=unk_token,
                                 min_frequency=min_frequency, tie_break=tie_break, progress=progress)
        todo("BPETokenizer.train", "01", _SECTION)

    def tokenize_word(self, word):
        """One pre-tokenized word -> its tokens: start from its symbols (characters, an unknown one becoming
        ``self.unk_token``; byte-level: the ``bytes_to_unicode`` characters of its UTF-8 bytes), then repeatedly merge
        (every occurrence of) the adjacent pair that was learned EARLIEST (lowest index in ``self.merges``), until no
        adjacent pair is a merge. Returns a list of str."""
        todo("BPETokenizer.tokenize_word", "01", _SECTION)

    def encode(self, text):
        """Text -> token ids: the ids (``self.vocab``) of ``self.tokenize(text)``. Returns a list of int."""
        todo("BPETokenizer.encode", "01", _SECTION)

    def decode(self, ids):
        """Token ids -> text: ``self.convert_ids_to_tokens(ids)`` joined. Byte-level: map each character back to its
        byte (the inverse of ``bytes_to_unicode``) and decode the bytes as UTF-8 with errors="replace", so
        ``decode(encode(s)) == s`` for every str. Returns a str."""
        todo("BPETokenizer.decode", "01", _SECTION)
