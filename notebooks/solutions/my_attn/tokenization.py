"""Byte-pair encoding, solved (notebook 01)."""

from __future__ import annotations

from collections import Counter

from attn_lib.tokenization import BPETokenizer as _LibBPETokenizer
from attn_lib.tokenization import bytes_to_unicode, count_pairs, merge_pair, pre_tokenize


class BPETokenizer(_LibBPETokenizer):
    """Training, the merge replay, encode and decode are mine; __init__ and tokenize are attn_lib's."""

    @classmethod
    def train(cls, corpus, vocab_size, *, byte_level=False, unk_token="[UNK]", min_frequency=2,
              tie_break="alphabetical", progress=False):
        if tie_break != "alphabetical":
            return super().train(corpus, vocab_size, byte_level=byte_level, unk_token=unk_token,
                                 min_frequency=min_frequency, tie_break=tie_break, progress=progress)
        texts = corpus.items() if isinstance(corpus, dict) else [(corpus, 1)] if isinstance(corpus, str) else \
            [(t, 1) for t in corpus]
        word_counts = Counter()
        for text, n in texts:
            for w in pre_tokenize(text):
                word_counts[w] += n
        if byte_level:
            table = bytes_to_unicode()
            back = {c: b for b, c in table.items()}
            words = {tuple(table[b] for b in w.encode("utf-8")): n for w, n in word_counts.items() if n}
            base = cls([], None, byte_level=True)

            def key(token):
                return bytes(back[c] for c in token)
        else:
            words = {tuple(w): n for w, n in word_counts.items() if n}
            base = cls([], sorted({c for w in words for c in w}), unk_token)

            def key(token):
                return token
        if vocab_size < base.vocab_size:
            raise ValueError(f"vocab_size={vocab_size} is smaller than the starting vocabulary ({base.vocab_size})")

        vocab, merges, counts = set(base.id_to_token), [], []
        bar = None
        if progress:
            from tqdm.auto import tqdm

            bar = tqdm(total=vocab_size - len(vocab), desc="BPE merges")
        while len(vocab) < vocab_size:
            pairs = count_pairs(words)
            if not pairs:
                break
            best = min(pairs, key=lambda p: (-pairs[p], key(p[0]), key(p[1])))  # most frequent, then alphabetical
            if pairs[best] < min_frequency:
                break
            merges.append(best)
            counts.append(pairs[best])
            vocab.add(best[0] + best[1])
            words = {tuple(merge_pair(w, best)): n for w, n in words.items()}
            if bar is not None:
                bar.update(1)
        if bar is not None:
            bar.close()
        tok = cls(merges, None if byte_level else base.alphabet, unk_token, byte_level=byte_level)
        tok.merge_counts = counts
        return tok

    def tokenize_word(self, word):
        if self.byte_level:
            table = bytes_to_unicode()
            symbols = [table[b] for b in word.encode("utf-8")]
        else:
            known = set(self.alphabet)
            symbols = [c if c in known else self.unk_token for c in word]
        rank = self.__dict__.get("_rank_of_merge")
        if rank is None:
            rank = self.__dict__["_rank_of_merge"] = {pair: r for r, pair in enumerate(self.merges)}
        while len(symbols) > 1:
            ranks = [rank[p] for p in zip(symbols, symbols[1:]) if p in rank]
            if not ranks:
                break
            symbols = merge_pair(symbols, self.merges[min(ranks)])  # the earliest learned merge first
        return symbols

    def encode(self, text):
        return [self.vocab[t] for t in self.tokenize(text)]

    def decode(self, ids):
        tokens = self.convert_ids_to_tokens(ids)
        if not self.byte_level:
            return "".join(tokens)
        back = {c: b for b, c in bytes_to_unicode().items()}
        return bytes(back[c] for t in tokens for c in t).decode("utf-8", errors="replace")
