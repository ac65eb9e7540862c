"""Exercise checks for notebook 01 (tokens and embeddings).

- :func:`check_apply_merges`: BPE tokenization of one word by replaying merges in learned order.
- :func:`check_most_frequent_pair`: the counting step of BPE training.
- :func:`check_input_vectors`: token ids -> token embedding + position embedding.

Each check runs your function on fresh random inputs, compares it with attn_lib's reference and,
on a mismatch, names the typical mistake it recognises.
"""

from __future__ import annotations

import random
from collections import Counter

import torch

from attn_lib.course.exercises._core import CheckResult, Mismatch, as_tensor, call, expect_close, fresh_generator, run_check
from attn_lib.tokenization import BPETokenizer, apply_merges_in_order, count_pairs, merge_pair

__all__ = ["check_apply_merges", "check_most_frequent_pair", "check_input_vectors"]

HINT_OUT_OF_ORDER = (
    "merges applied out of order: go through the merges list from first to last "
    "(the order they were learned), not in reverse."
)
HINT_LONGEST_FIRST = (
    "merges applied out of order: you preferred the merges that make the longest tokens; BPE "
    "replays the merges in the order they were learned, whatever their length."
)
HINT_FIRST_ONLY = (
    "each merge must replace EVERY occurrence of the pair in the word (left to right), not only the first one."
)
HINT_ONCE = (
    "one pass over the merges is not enough when you stop after the first merge that applies: "
    "apply every merge of the list, each one everywhere in the word."
)
HINT_NO_MERGES = "you returned the characters unchanged: apply the merges."
HINT_RIGHT_TO_LEFT = (
    "each merge must scan the word from LEFT to right: where occurrences overlap ('aaa' with ('a', 'a')), "
    "the leftmost pair merges first, giving ['aa', 'a'], not ['a', 'aa']."
)
HINT_JOINED_CHARS = (
    "you counted pairs of CHARACTERS of the joined word; a word is a tuple of symbols, and after a few merges a "
    "symbol has several characters ('ug'). Count pairs of neighbouring symbols: zip(word, word[1:])."
)
HINT_UNWEIGHTED = (
    "each pair must be counted as often as its word occurs: add the word's count (its frequency), not 1."
)
HINT_SET_PER_WORD = (
    "a pair that appears twice inside one word counts twice (e.g. ('a', 'b') in 'abab'); "
    "don't count each word's pairs as a set."
)
HINT_TIE = "on a tie, return the pair that comes first alphabetically (compare as tuples: min(...) of the tied pairs)."
HINT_LEAST = "that is the least frequent pair; BPE merges the MOST frequent one."
HINT_NO_POSITION = "the position embedding is missing: add position_table[0], position_table[1], ... to the tokens' vectors."
HINT_POSITION_BY_ID = (
    "you looked the positions up with the token ids; the positions are 0, 1, ..., seq_len - 1 "
    "(torch.arange(seq_len))."
)
HINT_POSITION_FROM_1 = "positions start at 0, not 1: the first token gets position_table[0]."
HINT_ONLY_POSITION = "the token embedding is missing: look each id up in token_table and add the position vector."


def _apply_first_only(symbols, merges):
    symbols = list(symbols)
    for a, b in merges:
        for i in range(len(symbols) - 1):
            if symbols[i] == a and symbols[i + 1] == b:
                symbols[i: i + 2] = [a + b]
                break
    return symbols


def _apply_right_to_left(symbols, merges):
    for a, b in merges:
        out, i = [], len(symbols) - 1
        while i >= 0:
            if i >= 1 and symbols[i - 1] == a and symbols[i] == b:
                out.append(a + b)
                i -= 2
            else:
                out.append(symbols[i])
                i -= 1
        symbols = out[::-1]
    return list(symbols)


def _apply_longest_first(symbols, merges):
    order = sorted(merges, key=lambda m: -len(m[0] + m[1]))  # stable: ties keep learned order
    return apply_merges_in_order(symbols, order)


def _stop_after_first(symbols, merges):
    for pair in merges:
        merged = merge_pair(symbols, pair)
        if merged != list(symbols):
            return merged
    return list(symbols)


def _merge_cases(trial: int):
    """(word, merges) cases: hand-made traps with random letters, then words from a trained tokenizer."""
    g = fresh_generator("check_apply_merges", trial)
    rng = random.Random(int(torch.randint(0, 2**31 - 1, (1,), generator=g)))
    a, b, c, d = rng.sample("abcdefghijklmnopqrstuvwxyz", 4)
    cases = [
        # order matters: (a,b) learned before (b,c)
        (a + b + c, [(a, b), (b, c)]),
        (b + c + a + b + c, [(b, c), (a, b), (a, b + c)]),
        # every occurrence: "abab" with (a,b) -> [ab, ab], then (ab, ab) -> abab
        (a + b + a + b + c, [(a, b), (a + b, a + b), (c, a)]),
        # length is not priority: (c,d) then (a,b) then (b,cd)
        (a + b + c + d, [(c, d), (a, b), (b, c + d)]),
        # overlapping occurrences merge left to right: "aaa" with (a, a) -> [aa, a]
        (a + a + a + b, [(a, a), (a + a, a + b)][: 1 + trial % 2]),
    ]
    words = ["".join(rng.choice(a + b + c + d) for _ in range(rng.randint(2, 7))) for _ in range(60)]
    tok = BPETokenizer.train(words, 4 + 1 + 12, min_frequency=1)
    for w in rng.sample(words, 7):
        cases.append((w, tok.merges))
    return cases


def check_apply_merges(apply_merges) -> CheckResult:
    """Check ``apply_merges(word, merges)`` -> the word's BPE tokens.

    ``word`` is a str, ``merges`` a list of (left, right) pairs in learned order. Start from the
    word's characters, then apply the merges in order, each one everywhere in the word.
    Example: ``apply_merges("hugs", [("u", "g"), ("u", "n"), ("h", "ug")])`` -> ``["hug", "s"]``.
    """

    wrong_models = [
        (lambda w, m: list(w), HINT_NO_MERGES),
        (lambda w, m: _apply_right_to_left(list(w), m), HINT_RIGHT_TO_LEFT),
        (lambda w, m: apply_merges_in_order(list(w), m[::-1]), HINT_OUT_OF_ORDER),
        (lambda w, m: _apply_longest_first(list(w), m), HINT_LONGEST_FIRST),
        (lambda w, m: _apply_first_only(list(w), m), HINT_FIRST_ONLY),
        (lambda w, m: _stop_after_first(list(w), m), HINT_ONCE),
    ]

    def trials():
        cases = [case for trial in range(3) for case in _merge_cases(trial)]
        results = []
        for word, merges in cases:
            got = call(apply_merges, {"word": word, "merges": [tuple(m) for m in merges]})
            if type(got) is tuple:
                got = list(got)
            if type(got) is not list:
                raise Mismatch(f"return a list of str tokens, got {type(got).__name__}.")
            if not all(type(t) is str for t in got):
                kinds = sorted({type(t).__name__ for t in got if type(t) is not str})
                raise Mismatch(f"return a list of str tokens; yours holds {', '.join(kinds)}.")
            results.append(got)
        wrong_cases = [(w, m, got) for (w, m), got in zip(cases, results) if got != apply_merges_in_order(list(w), m)]
        if not wrong_cases:
            return len(cases)
        word, merges, got = wrong_cases[0]
        want = apply_merges_in_order(list(word), merges)
        example = (f"(word {word!r}, merges {merges[:4]}{' ...' if len(merges) > 4 else ''}: "
                   f"expected {want}, got {got})")
        # the mistake that explains every answer, else the first that explains this one
        for model, hint in wrong_models:
            if all(model(w, m) == got_ for (w, m), got_ in zip(cases, results)):
                raise Mismatch(f"{hint} {example}")
        for model, hint in wrong_models:
            if model(word, merges) == got:
                raise Mismatch(f"{hint} {example}")
        if "".join(map(str, got)) != word:
            raise Mismatch(f"the tokens of {word!r} must join back to the word; got {got}.")
        raise Mismatch(f"for word {word!r} with merges {merges} expected {want}, got {got}.")

    return run_check("check_apply_merges", trials)


def _reference_most_frequent(word_counts):
    counts = count_pairs(word_counts)
    top = max(counts.values())
    return min(p for p, c in counts.items() if c == top)


def _pair_cases(trial: int):
    g = fresh_generator("check_most_frequent_pair", trial)
    rng = random.Random(int(torch.randint(0, 2**31 - 1, (1,), generator=g)))
    a, b, c, d = rng.sample("abcdefghijklmnopqrstuvwxyz", 4)
    pa, pb = sorted([a, c])  # pa < pb alphabetically
    cases = [
        # frequency matters: (c,d) is in more words, (a,b) in more occurrences
        {(a, b): 10, (c, d, a): 1, (d, c, d): 1, (c, d, c): 1},
        # a pair twice in one word counts twice
        {(a, b, a, b): 3, (c, d): 4},
        # a tie: (pa, x) and (pb, x) both 5 times -> the alphabetically first
        {(pb, d): 5, (pa, d): 5, (b,): 2},
    ]
    # symbols of several characters: ("h", "ug") must be counted as the pair (h, ug), not as h-u, u-g
    ug = c + d
    cases.append({(a, ug): 5, (b, ug): 3, (c, d, a): 2})
    # ties between symbols of several characters, w < x < y < z: the alphabetically first pair compares the
    # left symbols first ("w" < "wx": a prefix comes first), so the answer is (w, zyx). Every other plausible
    # tie rule answers something else here: joined strings ("wxy" < "wzyx") give (wx, y); right symbols first,
    # the shortest pair, or the last pair give (x, w); the first pair seen (dict order, Counter.most_common)
    # gives (wx, y). The second case ties two pairs with the same left symbol: (w, x) before (w, zy).
    w, x, y, z = sorted((a, b, c, d))
    cases.append({(w + x, y): 5, (w, z + y + x): 5, (x, w): 5})
    cases.append({(w, z + y): 4, (y, w, x): 4})
    letters = [a, b, c, d]
    for _ in range(4):
        wc = {}
        for _ in range(rng.randint(2, 6)):
            w = tuple(rng.choice(letters) for _ in range(rng.randint(2, 6)))
            wc[w] = rng.randint(1, 9)
        cases.append(wc)
    return cases


def check_most_frequent_pair(most_frequent_pair) -> CheckResult:
    """Check ``most_frequent_pair(word_counts)`` -> the pair BPE merges next.

    ``word_counts`` maps each word, a tuple of symbols such as ``("h", "u", "g")``, to how often
    it occurs. Count every adjacent pair, weighted by the word's count, and return the most
    frequent pair as a tuple ``(left, right)``; on a tie, the alphabetically first pair.
    """

    def trials():
        count = 0
        for trial in range(3):
            for wc in _pair_cases(trial):
                want = _reference_most_frequent(wc)
                got = call(most_frequent_pair, {"word_counts": dict(wc)})
                count += 1
                if type(got) is list:
                    got = tuple(got)
                if type(got) is not tuple or len(got) != 2 or not all(type(x) is str for x in got):
                    raise Mismatch(f"return the pair as a tuple of two str symbols (left, right), got {got!r}.")
                if got == want:
                    continue
                counts = count_pairs(wc)
                unweighted = count_pairs({w: 1 for w in wc})
                per_word_set = Counter()
                for w, f in wc.items():
                    for p in set(zip(w, w[1:])):
                        per_word_set[p] += f
                top = max(counts.values())
                tied = sorted(p for p, cnt in counts.items() if cnt == top)
                joined = Counter()
                for w, f in wc.items():
                    text = "".join(w)
                    for p in zip(text, text[1:]):
                        joined[p] += f
                if got in tied:  # a most frequent pair, the wrong one of the tie
                    raise Mismatch(f"{HINT_TIE} Tied pairs: {tied}; expected {want}, got {got}.")
                if any(len(s_) > 1 for w in wc for s_ in w) and \
                        got in [p for p, cnt in joined.items() if cnt == max(joined.values())]:
                    raise Mismatch(f"{HINT_JOINED_CHARS} (word counts {wc}: expected {want}, got {got})")
                if got in [p for p, cnt in unweighted.items() if cnt == max(unweighted.values())]:
                    raise Mismatch(f"{HINT_UNWEIGHTED} (word counts {wc}: expected {want}, got {got})")
                if got in [p for p, cnt in per_word_set.items() if cnt == max(per_word_set.values())]:
                    raise Mismatch(f"{HINT_SET_PER_WORD} (word counts {wc}: expected {want}, got {got})")
                if got in counts and counts[got] == min(counts.values()):
                    raise Mismatch(f"{HINT_LEAST} (word counts {wc}: expected {want}, got {got})")
                raise Mismatch(f"for word counts {wc} expected {want} (seen {top} times), got {got!r}.")
        return count

    return run_check("check_most_frequent_pair", trials)


def check_input_vectors(input_vectors) -> CheckResult:
    """Check ``input_vectors(token_ids, token_table, position_table)`` -> the Transformer's input.

    ``token_ids`` (B, L) int64, ``token_table`` (V, D), ``position_table`` (P, D) with P >= L.
    Returns (B, L, D): ``token_table[token_ids[b, i]] + position_table[i]``.
    """
    shapes = [(1, 6, 50, 8, 10), (3, 5, 20, 4, 7), (2, 9, 30, 16, 12)]

    def trials():
        for trial, (B, L, V, D, P) in enumerate(shapes):
            g = fresh_generator("check_input_vectors", trial)
            ids = torch.randint(0, min(V, P), (B, L), generator=g)  # ids < P so the by-id lookup runs
            token_table = torch.randn(V, D, generator=g)
            position_table = torch.randn(P, D, generator=g)
            want = token_table[ids] + position_table[torch.arange(L)]
            got = as_tensor(call(input_vectors, {"token_ids": ids, "token_table": token_table,
                                                 "position_table": position_table}), "the input vectors")
            wrong = [
                (token_table[ids], HINT_NO_POSITION),
                (token_table[ids] + position_table[ids], HINT_POSITION_BY_ID),
                (token_table[ids] + position_table[1: L + 1], HINT_POSITION_FROM_1),
                (position_table[:L].expand(B, L, D), HINT_ONLY_POSITION),
            ]
            expect_close(got, want, what="the input vectors", wrong_answers=wrong, dtype=token_table.dtype)
        return len(shapes)

    return run_check("check_input_vectors", trials,
                     shape_mistakes="token_table[token_ids] is (B, L, D); the position vectors "
                                    "position_table[:L] are (L, D) and broadcast over B. Take L from token_ids.shape[1].")
