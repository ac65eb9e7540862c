"""The checks of the class pieces of the learner's stack (issue 34): notebook 01's ``BPETokenizer`` (train, encode,
decode), notebook 05's ``MultiHeadAttention``, notebook 07's ``EncoderBlock`` / ``DecoderBlock`` and notebook 10's
``LMBlock`` / ``DecoderLM``.

Each is a class piece: the learner's class subclasses attn_lib's (whose ``__init__`` creates the submodules, so
``from_torch``, ``from_hf``, checkpoints and every attn_lib model that builds one keep working on it) and writes
``forward``. A check builds attn_lib's module and the learner's with the same arguments, copies the weights
(``load_state_dict``) and compares both results in float64 on fresh inputs, with and without masks.

``MultiHeadAttention`` must run on the learner's OWN ``my_attn.attention.scaled_dot_product_attention``: the check
swaps every reference to it inside the learner's package for a counting wrapper (which calls it) and fails when
``forward`` never calls it; a TorchFunctionMode also refuses torch's fused attention
(``F.scaled_dot_product_attention``, ``F.multi_head_attention_forward``).

Graded in the sandbox (``classroom/pieces.py``), ``cls`` is a proxy of the learner's class, which lives there:
``is_instance`` and ``new_beside`` (``_core``) answer for it, and what these guards watch in this process is
reported by the sandbox's runner instead (``classroom.runner``): the spy reads whether the learner's SDPA ran from
the runner's report, and the grader refuses attn_lib's own ``forward`` (the ``_Refuse`` here) and torch's fused
attention from it (``classroom.grade.REFUSED``).
"""

from __future__ import annotations

import copy
import importlib
import importlib.util
import math
import sys

import torch

import attn_lib.mha as _mha
import attn_lib.models.blocks as _blocks
import attn_lib.models.lm as _lm
import attn_lib.tokenization as _tok
from attn_lib.course.exercises._core import CheckResult, Mismatch, call, expect_close, fresh_generator, run_check
from attn_lib.course.exercises._core import is_instance, new_beside
from attn_lib.course.exercises.pieces import Piece, _watched_call

__all__ = ["PIECES", "check_piece_bpe_tokenizer", "check_piece_multi_head_attention", "check_piece_encoder_block",
           "check_piece_decoder_block", "check_piece_lm_block", "check_piece_decoder_lm"]

# attn_lib's own classes, held in a dict: use_mine() swaps module attributes that ARE attn_lib's class for the
# learner's, and the reference of a check must stay attn_lib's.
_REF = {"MultiHeadAttention": _mha.MultiHeadAttention, "EncoderBlock": _blocks.EncoderBlock,
        "DecoderBlock": _blocks.DecoderBlock, "BPETokenizer": _tok.BPETokenizer,
        "LMBlock": _lm.LMBlock, "DecoderLM": _lm.DecoderLM}
_F = torch.nn.functional
_FUSED = {_F.scaled_dot_product_attention: "torch.nn.functional.scaled_dot_product_attention",
          _F.multi_head_attention_forward: "torch.nn.functional.multi_head_attention_forward"}


def _randn(g, *shape):
    return torch.randn(*shape, generator=g, dtype=torch.float64)


def _twin(cls, ref: torch.nn.Module, *args, **kwargs) -> torch.nn.Module:
    """The learner's ``cls(*args, **kwargs)`` in float64, eval mode, with ``ref``'s weights."""
    with torch.random.fork_rng():
        mine = cls(*args, **kwargs)
    if not is_instance(mine, torch.nn.Module):
        raise Mismatch(f"{cls.__name__}(...) must build an nn.Module (subclass attn_lib's class, as the stub does).")
    mine = mine.double().eval()
    try:
        mine.load_state_dict(ref.state_dict())
    except RuntimeError as e:
        first = str(e).strip().splitlines()[0]
        raise Mismatch(f"attn_lib's weights do not load into your {cls.__name__} ({first}): keep the submodules the "
                       "stub's __init__ creates (subclass attn_lib's class and write forward only).") from None
    return mine


class _SpyOnSdpa:
    """Swap every reference to the learner's SDPA in the learner's package for a wrapper that counts its calls.

    When ``cls`` lives in the grader's sandbox (``classroom.grade.RemoteObject``), nothing is swapped here: the
    sandbox's runner reports each call of the learner's ``my_attn.attention.scaled_dot_product_attention``, and the
    spy counts whether one was reported (``missing`` stays False: a stub SDPA is "not written yet" either way)."""

    OWN = "my_attn.attention.scaled_dot_product_attention"

    def __init__(self, cls):
        self.reports = getattr(type(cls), "_grader_reports", None)
        self.cls = cls
        root = "my_attn" if self.reports else (getattr(cls, "__module__", "") or "").split(".")[0]
        self.root = root if root + ".attention" in sys.modules or root == "my_attn" else "my_attn"
        self.calls, self.missing, self._undo = 0, False, []

    def __enter__(self):
        if self.reports:
            return self
        try:
            attention = importlib.import_module(self.root + ".attention")
        except Exception as e:  # noqa: BLE001 - the learner's module
            raise Mismatch(f"{self.root}.attention does not import ({type(e).__name__}: {e}); MultiHeadAttention "
                           "runs on your scaled_dot_product_attention.") from None
        target = getattr(attention, "scaled_dot_product_attention", None)
        if target is None:
            raise Mismatch(f"{self.root}.attention has no scaled_dot_product_attention (notebook 03).")

        def spy(*args, **kwargs):
            self.calls += 1
            try:
                return target(*args, **kwargs)
            except NotImplementedError:
                self.missing = True
                raise

        for name, module in list(sys.modules.items()):
            if module is None or not (name == self.root or name.startswith(self.root + ".")):
                continue
            for attr, value in list(vars(module).items()):
                if value is target:
                    setattr(module, attr, spy)
                    self._undo.append((module, attr, target))
        return self

    def __exit__(self, *exc):
        if self.reports:
            self.calls = int(self.OWN in self.reports(self.cls))
        while self._undo:
            module, attr, value = self._undo.pop()
            setattr(module, attr, value)
        return False


class _Refuse:
    """Record whether attn_lib's own ``owner.<method>`` (a method the learner re-implements) runs inside the block."""

    def __init__(self, owner, what: str, methods=("forward",)):
        self.owner, self.what, self.methods, self.used, self.originals = owner, what, methods, [], {}

    def __enter__(self):
        for name in self.methods:
            original = self.originals[name] = self.owner.__dict__[name]
            if isinstance(original, classmethod):
                def wrapper(cls_, *args, _f=original.__func__, _n=name, **kwargs):
                    self.used.append(_n)
                    return _f(cls_, *args, **kwargs)
                setattr(self.owner, name, classmethod(wrapper))
            else:
                def wrapper(*args, _f=original, _n=name, **kwargs):
                    self.used.append(_n)
                    return _f(*args, **kwargs)
                setattr(self.owner, name, wrapper)
        return self

    def __exit__(self, *exc):
        for name, original in self.originals.items():
            setattr(self.owner, name, original)
        if exc[0] is None and self.used:
            name = self.used[0]
            raise Mismatch(f"your code called attn_lib's {self.what}.{name} (super().{name}?): that is the piece you "
                           "write; compute it yourself.")
        return False


def _call_mine(owner: str, fn, inputs: dict, watched: dict | None = None, what: str = ""):
    """``call(fn, inputs)`` (or ``_watched_call``) refusing attn_lib's ``owner.forward`` (and DecoderLM's ``_run``)
    inside it."""
    with _Refuse(_REF[owner], owner, ("forward", "_run") if owner == "DecoderLM" else ("forward",)):
        if watched:
            return _watched_call(fn, inputs, watched, what)
        return call(fn, inputs)


# ----------------------------------------------------------------------------------------------------- 01
_BPE_METHODS = ("train", "tokenize_word", "encode", "decode")


def _fresh_text(g, alphabet: str, n_words: int, *, extra: str = "") -> str:
    """Random text: words of 1-6 symbols drawn from ``alphabet`` (and rarely ``extra``), spaces, some punctuation."""
    pool = alphabet + extra
    words = []
    for _ in range(n_words):
        k = int(torch.randint(1, 7, (1,), generator=g))
        idx = torch.randint(0, len(alphabet), (k,), generator=g).tolist()
        word = "".join(alphabet[i] for i in idx)
        if extra and float(torch.rand(1, generator=g)) < 0.2:
            word += pool[int(torch.randint(len(alphabet), len(pool), (1,), generator=g))]
        words.append(word)
        if float(torch.rand(1, generator=g)) < 0.1:
            words.append(".,!?"[int(torch.randint(0, 4, (1,), generator=g))])
    return " ".join(words)


def _train_variant(corpus, vocab_size, *, byte_level=False, min_frequency=2, ties="alphabetical", weighted=True,
                   split=True):
    """A small trainer of the course's own, with one typical mistake switchable: the merges and their counts."""
    texts = corpus.items() if isinstance(corpus, dict) else [(t, 1) for t in corpus]
    counts: dict[str, int] = {}
    for text, n in texts:
        for w in (_tok.pre_tokenize(text) if split else [text]):
            counts[w] = counts.get(w, 0) + n
    table = _tok.bytes_to_unicode()
    back = {c: b for b, c in table.items()}
    words = {(tuple(table[b] for b in w.encode()) if byte_level else tuple(w)): (n if weighted else 1)
             for w, n in counts.items() if n}
    vocab = set(table.values()) if byte_level else {"[UNK]", *{c for w in words for c in w}}

    def key(t):
        return bytes(back[c] for c in t) if byte_level and ties == "alphabetical" else t

    merges, got = [], []
    while len(vocab) < vocab_size:
        pairs = _tok.count_pairs(words)
        if not pairs:
            break
        if ties == "reverse":
            best = max(pairs, key=lambda p: (pairs[p], p[0], p[1]))
        elif ties == "first_seen":
            best = max(pairs, key=lambda p: pairs[p])
        else:
            best = min(pairs, key=lambda p: (-pairs[p], key(p[0]), key(p[1])))
        if pairs[best] < min_frequency:
            break
        merges.append(best)
        got.append(pairs[best])
        vocab.add(best[0] + best[1])
        words = {tuple(_tok.merge_pair(w, best)): n for w, n in words.items()}
    return merges, got


def _greedy_longest(tok, word: str) -> list[str]:
    """The typical wrong tokenizer: the longest vocabulary entry first, left to right."""
    table = _tok.bytes_to_unicode()
    symbols = "".join(table[b] for b in word.encode()) if tok.byte_level else word
    out, i = [], 0
    while i < len(symbols):
        for j in range(len(symbols), i, -1):
            if symbols[i:j] in tok.vocab:
                out.append(symbols[i:j])
                i = j
                break
        else:
            out.append(tok.unk_token)
            i += 1
    return out


def _check_merges(got, want_merges, want_counts, what, variants):
    merges = [tuple(m) for m in getattr(got, "merges", [])]
    if merges != want_merges:
        for variant, hint in variants:
            if variant != want_merges and merges == variant:
                raise Mismatch(f"{what}: your merges differ from attn_lib's. {hint}")
        k = next((i for i, (a, b) in enumerate(zip(merges, want_merges)) if a != b), min(len(merges), len(want_merges)))
        yours = merges[k] if k < len(merges) else "none (you stopped)"
        theirs = want_merges[k] if k < len(want_merges) else "none (stop here)"
        raise Mismatch(f"{what}: merge {k + 1} is {yours}, expected {theirs} (the most frequent adjacent pair, its "
                       f"count weighted by each word's frequency; ties: the alphabetically first pair).")
    if list(getattr(got, "merge_counts", None) or []) != want_counts:
        raise Mismatch(f"{what}: the merges are right but merge_counts is {getattr(got, 'merge_counts', None)!r:.80}; "
                       f"expected {want_counts!r:.80} (the pair's count when it was chosen).")


def check_piece_bpe_tokenizer(cls) -> CheckResult:
    """my_attn.tokenization.BPETokenizer against attn_lib's on fresh small corpora: ``train`` (character and byte
    level, a list, a str and a {text: frequency} corpus, min_frequency 1 and 2): the same merges and merge_counts;
    ``tokenize``/``encode`` of fresh random strings (unknown characters, accents, an emoji) with attn_lib's trained
    merges: the same tokens and ids; ``decode``: attn_lib's text for the same ids, and ``decode(encode(s)) == s``
    (every str byte-level; text of the alphabet in character mode).

    It fails when the learner's methods call attn_lib's own train, tokenize_word, encode or decode.
    No tensors: str and lists of int. Raises: nothing; a wrong answer is a failed CheckResult with a hint
    (ties, frequencies, word boundaries, min_frequency, replay order, unknown characters, bytes).
    Source: Sennrich et al. 2016, §3.2; GPT-2's byte-level BPE (Radford et al. 2019, §2.2).
    """
    Ref = _REF["BPETokenizer"]

    def trials():
        n = 0
        corpora = []
        for t, (alphabet, byte_level) in enumerate((("abcde", False), ("abcdefgh", False), ("abcé", True))):
            g = fresh_generator("BPETokenizer.train", t)
            lines = [_fresh_text(g, alphabet, 12, extra="🙂" if byte_level else "") for _ in range(8)]
            corpora.append((lines, byte_level))
        g = fresh_generator("BPETokenizer.train", 9)
        word_dict = {_fresh_text(g, "xyz", 1): int(torch.randint(1, 9, (1,), generator=g)) for _ in range(12)}
        cases = [(corpora[0][0], False, 25, 2), (corpora[1][0], False, 40, 1), (" ".join(corpora[0][0]), False, 20, 2),
                 (word_dict, False, 12, 1), (corpora[2][0], True, 256 + 20, 2),
                 (corpora[1][0][:2], False, 80, 3)]  # stops early: no pair left occurs 3 times
        for corpus, byte_level, vocab_size, min_frequency in cases:
            kind = ("a dict corpus" if isinstance(corpus, dict) else "a str" if isinstance(corpus, str) else
                    "fresh lines")
            what = (f"train({kind}, vocab_size={vocab_size}, byte_level={byte_level}, min_frequency={min_frequency})")
            want = Ref.train(corpus, vocab_size, byte_level=byte_level, min_frequency=min_frequency)
            with _Refuse(Ref, "BPETokenizer", _BPE_METHODS):
                got = call(lambda c, v: cls.train(c, v, byte_level=byte_level, min_frequency=min_frequency),
                           {"corpus": corpus, "vocab_size": vocab_size})
            if not is_instance(got, Ref):
                raise Mismatch(f"{what} returned {type(got).__name__}; return cls(merges, alphabet, unk_token, "
                               "byte_level=...) (a BPETokenizer) with merge_counts set.")
            as_list = [corpus] if isinstance(corpus, str) else corpus
            kw = dict(byte_level=byte_level, min_frequency=min_frequency)
            variants = [(_train_variant(as_list, vocab_size, **kw, ties="reverse")[0],
                         "On a tie (two pairs with the same count) take the alphabetically FIRST pair: the smallest "
                         "(left, right)."),
                        (_train_variant(as_list, vocab_size, **kw, ties="first_seen")[0],
                         "On a tie take the alphabetically first pair (left token, then right token), not the first "
                         "one counted."),
                        (_train_variant(as_list, vocab_size, **kw, weighted=False)[0],
                         "Weight each pair by its word's frequency: a word seen 5 times counts 5 times."),
                        (_train_variant(as_list, vocab_size, **kw, split=False)[0],
                         "Pairs must not cross words: pre_tokenize each text first and count pairs within words."),
                        (_train_variant(as_list, vocab_size, byte_level=byte_level, min_frequency=1)[0],
                         f"Stop when the most frequent pair occurs fewer than min_frequency={min_frequency} times.")]
            if byte_level:
                variants.append((_train_variant(as_list, vocab_size, **kw, ties="chars")[0],
                                 "byte-level ties compare the tokens' BYTES (map each character back through "
                                 "bytes_to_unicode), not the printable characters that stand for them."))
            _check_merges(got, [tuple(m) for m in want.merges], list(want.merge_counts), what, variants)
            n += 1

        # encode / tokenize / decode with attn_lib's trained merges, on fresh random strings
        for t, (lines, byte_level) in enumerate(corpora):
            ref = Ref.train(lines, 256 + 30 if byte_level else 30, byte_level=byte_level, min_frequency=1)
            mine = cls(ref.merges, None if byte_level else ref.alphabet, byte_level=byte_level)
            g = fresh_generator("BPETokenizer.encode", t)
            alphabet = "".join(sorted({c for line in lines for c in line if c.isalpha()}))
            for k in range(6):
                text = _fresh_text(g, alphabet, 6, extra="qü🙂 ")
                with _Refuse(Ref, "BPETokenizer", _BPE_METHODS):
                    got_tokens = call(lambda s: mine.tokenize(s), {"text": text})
                    got_ids = call(lambda s: mine.encode(s), {"text": text})
                want_tokens = ref.tokenize(text)
                if list(got_tokens) != want_tokens:
                    greedy = [tok for w in _tok.pre_tokenize(text) for tok in _greedy_longest(ref, w)]
                    hint = ("replay the merges in the order they were learned (the earliest learned adjacent pair "
                            "first), not the longest vocabulary entry first." if list(got_tokens) == greedy and
                            greedy != want_tokens else
                            "an unknown character becomes unk_token ([UNK]) and never takes part in a merge."
                            if not byte_level and ref.unk_token in want_tokens and ref.unk_token not in got_tokens
                            else "start from the word's characters (byte-level: the bytes_to_unicode characters of "
                                 "its UTF-8 bytes) and repeatedly merge the adjacent pair learned earliest.")
                    raise Mismatch(f"tokenize({text!r}) (byte_level={byte_level}) gave {list(got_tokens)!r:.120}, "
                                   f"expected {want_tokens!r:.120}: {hint}")
                if list(got_ids) != ref.encode(text):
                    raise Mismatch(f"encode({text!r}) gave {list(got_ids)!r:.100}, expected {ref.encode(text)!r:.100}: "
                                   "the ids of the tokens, looked up in self.vocab.")
                ids = ref.encode(text)
                with _Refuse(Ref, "BPETokenizer", _BPE_METHODS):
                    back = call(lambda i: mine.decode(i), {"ids": ids})
                if back != ref.decode(ids):
                    raise Mismatch(f"decode({ids!r:.60}) gave {back!r:.80}, expected {ref.decode(ids)!r:.80}"
                                   + (": map each character back to its byte (the inverse of bytes_to_unicode), then "
                                      "decode the bytes as UTF-8." if byte_level else ": join the tokens."))
                if byte_level and back != text:
                    raise Mismatch(f"decode(encode(s)) must give s back in byte-level mode; got {back!r:.80} for "
                                   f"{text!r:.80}.")
                n += 1
            if byte_level:  # a lone UTF-8 continuation byte: U+FFFD, as errors="replace" gives
                ids = [0x80, ref.vocab[_tok.bytes_to_unicode()[ord("a")]]]
                with _Refuse(Ref, "BPETokenizer", _BPE_METHODS):
                    back = call(lambda i: mine.decode(i), {"ids": ids})
                if back != ref.decode(ids):
                    raise Mismatch(f"decode([0x80, id of 'a']) gave {back!r}, expected {ref.decode(ids)!r}: bytes that "
                                   "are not valid UTF-8 become U+FFFD (decode with errors=\"replace\").")
        return n

    return run_check("BPETokenizer", trials)


# ----------------------------------------------------------------------------------------------------- 05
def _scaled_query(ref, factor: float):
    """A copy of ``ref`` whose queries are multiplied by ``factor`` (so the scores are too)."""
    out = copy.deepcopy(ref)
    with torch.no_grad():
        out.q_proj.weight.mul_(factor)
        if out.q_proj.bias is not None:
            out.q_proj.bias.mul_(factor)
    return out


def _no_out_proj(ref):
    """A copy of ``ref`` whose out_proj is the identity: the concatenated heads come out."""
    out = copy.deepcopy(ref)
    with torch.no_grad():
        out.out_proj.weight.copy_(torch.eye(out.out_proj.weight.shape[0], dtype=torch.float64))
        out.out_proj.bias.zero_()
    return out


def _bad_splits(ref, query, key, value, kw):
    """The outputs when the projections are reshaped straight to (B, H, L, E) (tokens and heads mixed): with the
    heads merged back by transpose + reshape, and by the same straight reshape."""
    B, L, _ = query.shape
    S = key.shape[1]
    H, Hkv, E = ref.num_heads, ref.num_kv_heads, ref.head_dim
    q = ref.q_proj(query).reshape(B, H, L, E)
    k, v = ref.k_proj(key).reshape(B, Hkv, S, E), ref.v_proj(value).reshape(B, Hkv, S, E)
    mask = ref._build_mask(B, L, S, kw.get("attn_mask"), kw.get("padding_mask"), kw.get("is_causal", False), False,
                           query.device, tuple(query.shape), tuple(key.shape))
    heads, _ = _mha._sdpa(q, k, v, mask, enable_gqa=H != Hkv)
    return ref.out_proj(_mha.merge_heads(heads)), ref.out_proj(heads.reshape(B, L, H * E))


_MHA_CASES = (
    dict(what="self-attention, no mask"),
    dict(what="self-attention, is_causal=True", is_causal=True),
    dict(what="self-attention with a bool padding_mask (B, S)", padding="bool"),
    dict(what="causal self-attention with HuggingFace's 0/1 integer padding_mask", padding="int", is_causal=True),
    dict(what="self-attention with a float attn_mask (L, S)", attn_mask="float"),
    dict(what="self-attention with a bool attn_mask (B, L, S)", attn_mask="bool3"),
    dict(what="cross-attention (kdim 7, vdim 5, L 4, S 6) with a padding_mask", cross=True, padding="bool"),
    dict(what="grouped-query attention (num_kv_heads 1) with RoPE, is_causal=True", gqa=True, is_causal=True),
)


def _mha_case(t: int, case: dict):
    """Fresh float64 inputs and modules for one case: (torch's layer or None, attn_lib's, inputs, keyword args)."""
    g = fresh_generator("multi_head_attention", t)
    B, L, d, H = 2, 5, 12, 3
    S = 6 if case.get("cross") else L
    kdim, vdim = (7, 5) if case.get("cross") else (d, d)
    with torch.random.fork_rng():
        torch.manual_seed(int(torch.randint(0, 2 ** 31 - 1, (1,), generator=g)))
        if case.get("gqa"):
            theirs = None
            ref = _REF["MultiHeadAttention"](d, H, num_kv_heads=1, head_dim=4, rope_base=10000.0,
                                             dtype=torch.float64).eval()
            args, kwargs = (d, H), dict(num_kv_heads=1, head_dim=4, rope_base=10000.0)
        else:
            theirs = torch.nn.MultiheadAttention(d, H, batch_first=True, kdim=kdim, vdim=vdim,
                                                 dtype=torch.float64).eval()
            ref = _REF["MultiHeadAttention"].from_torch(theirs).eval()
            args, kwargs = (d, H), dict(kdim=kdim, vdim=vdim)
    query = _randn(g, B, L, d)
    key, value = (_randn(g, B, S, kdim), _randn(g, B, S, vdim)) if case.get("cross") else (query, query)
    kw = dict(is_causal=case.get("is_causal", False))
    torch_kw = {}
    if case.get("padding"):
        pad = torch.ones(B, S, dtype=torch.bool)
        pad[1, -2:] = False  # the second sequence: its last two keys are padding
        kw["padding_mask"] = pad.long() if case["padding"] == "int" else pad
        torch_kw["key_padding_mask"] = ~pad
    if case.get("attn_mask") == "float":
        kw["attn_mask"] = torch_kw["attn_mask"] = _randn(g, L, S)
    elif case.get("attn_mask") == "bool3":
        m = torch.rand(B, L, S, generator=g) < 0.6
        m[..., 0] = True
        kw["attn_mask"] = m
        theirs = None  # torch's 3-D masks are (B·H, L, S): compare with attn_lib's only
    if kw["is_causal"]:
        torch_kw["attn_mask"] = ~torch.ones(L, S, dtype=torch.bool).tril()  # torch: True = may NOT attend
    return theirs, ref, args, kwargs, (query, key, value), kw, torch_kw


def _unwritten_callee(error: NotImplementedError, cls) -> str | None:
    """The words for a NotImplementedError raised by another stub than ``cls.forward`` (e.g. my_attn's apply_rope,
    still a stub, called by the learner's forward), found in the traceback; None when ``forward`` itself raised it,
    or when it was raised in the grader's sandbox (its message names the stub; there is no traceback to read)."""
    if getattr(error, "_from_sandbox", False):
        return None
    frames = []
    tb = error.__traceback__
    while tb is not None:
        frames.append(tb.tb_frame)
        tb = tb.tb_next
    frames = [f for f in frames if not f.f_code.co_filename.replace("\\", "/").endswith("/_todo.py")]
    if not frames:
        return None
    last = frames[-1]
    module, name = last.f_globals.get("__name__", "?"), last.f_code.co_name
    if name == "forward" and isinstance(last.f_locals.get("self"), cls):
        return None  # the learner's forward is the stub: "not written yet"
    short = module.split(".", 1)[1] if "." in module else module
    from attn_lib.course.mine import PIECES as _ALL

    taught = next((f" (notebook {p.notebook})" for p in _ALL if p.module == short and p.name == name), "")
    lib = importlib.import_module(f"attn_lib.{short}") if importlib.util.find_spec(f"attn_lib.{short}") else None
    meanwhile = (f"; meanwhile import attn_lib's: from attn_lib.{short} import {name}"
                 if lib is not None and hasattr(lib, name) else "")
    return (f"your MultiHeadAttention calls {module}.{name}, which still raises NotImplementedError: write it "
            f"first{taught}{meanwhile}.")


def check_piece_multi_head_attention(cls) -> CheckResult:
    """my_attn.mha.MultiHeadAttention against torch.nn.MultiheadAttention and attn_lib's class, float64, copied
    weights: self- and cross-attention, causal, bool and 0/1 padding masks, float and bool attn_masks, GQA with RoPE;
    the output (B, L, d_model), the per-head weights (B, H, L, S) and the head-averaged ones (B, L, S).

    It fails when ``forward`` never calls the learner's own ``my_attn.attention.scaled_dot_product_attention``
    (every reference to it in the learner's package is swapped for a counting wrapper during the check), and when it
    calls torch's fused attention (a TorchFunctionMode watches ``F.scaled_dot_product_attention`` and
    ``F.multi_head_attention_forward``).

    Raises: nothing; a wrong answer is a failed CheckResult with a hint (scale, out_proj, split, masks).
    Source: Vaswani et al. 2017, §3.2.2; torch.nn.MultiheadAttention.
    """
    def trials():
        spy = _SpyOnSdpa(cls)
        with spy:
            try:
                for t, case in enumerate(_MHA_CASES):
                    _one_mha_case(cls, t, case)
                _mha_eval_dropout_case(cls)
            except NotImplementedError as e:
                if spy.missing:
                    raise Mismatch("your MultiHeadAttention calls your scaled_dot_product_attention, which still "
                                   "raises NotImplementedError: write that first (notebook 03).") from None
                other = _unwritten_callee(e, cls)
                if other is None:
                    raise
                raise Mismatch(other) from None
        if spy.calls == 0:
            raise Mismatch("your forward never called YOUR scaled_dot_product_attention (my_attn.attention): the "
                           "piece is multi-head attention built on your own SDPA and masks, so call it for the "
                           "per-head attention (not attn_lib's, not torch's, not super().forward).")
        return len(_MHA_CASES) + 1

    return run_check("MultiHeadAttention", trials)


def _mha_eval_dropout_case(cls) -> None:
    """A module built with dropout 0.5, in eval mode: no dropout, so the same result as attn_lib's (dropout off)."""
    g = fresh_generator("MultiHeadAttention", len(_MHA_CASES))
    with torch.random.fork_rng():
        torch.manual_seed(int(torch.randint(0, 2**31 - 1, (1,), generator=g)))
        ref = _REF["MultiHeadAttention"](8, 2, dropout=0.5).double().eval()
    mine = _twin(cls, ref, 8, 2, dropout=0.5)
    x = _randn(g, 2, 5, 8)
    with torch.no_grad():
        want, want_w = ref(x, need_weights=True)
        got = _call_mine("MultiHeadAttention", lambda q: mine(q, need_weights=True), {"query": x}, _FUSED,
                         "MultiHeadAttention")
    if not isinstance(got, (tuple, list)) or len(got) != 2:
        raise Mismatch("forward returns a pair (output, weights), as attn_lib's MultiHeadAttention does.")
    for name, a, b in (("output", got[0], want), ("weights", got[1], want_w)):
        if not torch.allclose(torch.as_tensor(a).double(), b, atol=1e-10, rtol=1e-8):
            raise Mismatch(f"the {name} of a module built with dropout=0.5, in eval mode, differs from the same "
                           "module's without dropout: dropout is for training only, so pass your "
                           "scaled_dot_product_attention dropout_p=self.dropout if self.training else 0.0.")


def _one_mha_case(cls, t, case):
    theirs, ref, args, kwargs, (query, key, value), kw, torch_kw = _mha_case(t, case)
    mine = _twin(cls, ref, *args, **kwargs)
    what = case["what"]
    with torch.no_grad():
        want, want_w = ref(query, key, value, need_weights=True, **kw)
        got = _call_mine("MultiHeadAttention", lambda q, k, v: mine(q, k, v, need_weights=True, **kw),
                         {"query": query, "key": key, "value": value}, _FUSED, "MultiHeadAttention")
        if not isinstance(got, (tuple, list)) or len(got) != 2:
            raise Mismatch("forward returns a pair (output, weights), as attn_lib's MultiHeadAttention does.")
        E, d = ref.head_dim, ref.d_model
        split_hint = ("tokens and heads are mixed: view the projection as (B, L, H, head_dim), then transpose(1, 2); "
                      "reshaping straight to (B, H, L, head_dim) cuts across tokens (split_heads does it right).")
        wrong = [(_scaled_query(ref, math.sqrt(E / d))(query, key, value, **kw)[0],
                  f"the scores are divided by sqrt(d_model) = sqrt({d}); each head divides by sqrt(head_dim) = "
                  f"sqrt({E}) (your SDPA does it when scale is None).")]
        wrong += [(bad, split_hint) for bad in _bad_splits(ref, query, key, value, kw)]
        if ref.num_heads * E == d and ref.kdim == d:
            wrong.append((_no_out_proj(ref)(query, key, value, **kw)[0],
                          "out_proj is missing: after merging the heads, apply out_proj (W_O), which mixes them."))
        if any(k_ in kw for k_ in ("padding_mask", "attn_mask")) or kw["is_causal"]:
            wrong.append((ref(query, key, value)[0], "the masks were ignored: build one mask (True = may attend) "
                                                     "from is_causal, padding_mask and attn_mask, and pass it to "
                                                     "your scaled_dot_product_attention."))
        if "padding_mask" in kw:
            flipped = dict(kw, padding_mask=~kw["padding_mask"].bool())
            wrong.append((ref(query, key, value, **flipped)[0], "the padding mask is inverted: in attn_lib, True "
                                                               "(or 1) = a real token that may be attended to "
                                                               "(torch's key_padding_mask is the opposite)."))
        if "padding_mask" in kw and kw["is_causal"]:
            wrong.append((ref(query, key, value, padding_mask=kw["padding_mask"])[0],
                          "is_causal was lost when a padding_mask came too: combine them with & (both must allow)."))
        expect_close(got[0], want, what=f"the output of {what}", atol=1e-10, rtol=1e-8, dtype=torch.float64,
                     wrong_answers=wrong)
        expect_close(got[1], want_w, what=f"the per-head weights (B, H, L, S) of {what} (need_weights=True)",
                     atol=1e-10, rtol=1e-8, dtype=torch.float64, wrong_answers=[
                         (want_w.mean(1), "average_attn_weights=False (the default here) returns the weights of "
                                          "every head, (B, H, L, S), not their mean.")])
        got_avg = _call_mine("MultiHeadAttention",
                             lambda q, k, v: mine(q, k, v, need_weights=True, average_attn_weights=True, **kw),
                             {"query": query, "key": key, "value": value})
        expect_close(got_avg[1], want_w.mean(1), what=f"the head-averaged weights (B, L, S) of {what}",
                     atol=1e-10, rtol=1e-8, dtype=torch.float64)
        got_none = _call_mine("MultiHeadAttention", lambda q, k, v: mine(q, k, v, **kw),
                              {"query": query, "key": key, "value": value})
        if not isinstance(got_none, (tuple, list)) or len(got_none) != 2 or got_none[1] is not None:
            raise Mismatch("with need_weights=False (the default), forward returns (output, None).")
        if theirs is not None:  # torch's own layer: same output, same head-averaged weights
            t_out, t_w = theirs(query, key, value, need_weights=True, **torch_kw)
            expect_close(got[0], t_out, what=f"the output of {what}, against torch.nn.MultiheadAttention",
                         atol=1e-10, rtol=1e-8)
            expect_close(got_avg[1], t_w, what=f"the averaged weights of {what}, against torch.nn.MultiheadAttention",
                         atol=1e-10, rtol=1e-8)


# ----------------------------------------------------------------------------------------------------- 07
def _enc_by_hand(b, x, pad, *, norm_first, residual=True):
    """An encoder block's forward written out (attn_lib's submodules), with one mistake switchable."""
    def sa(h):
        return b.self_attn(h, h, h, padding_mask=pad)[0]

    r = 1.0 if residual else 0.0
    if norm_first:
        x = r * x + sa(b.norm1(x))
        return x + b.ff(b.norm2(x))
    x = b.norm1(r * x + sa(x))
    return b.norm2(x + b.ff(x))


def _dec_by_hand(b, x, memory, pad, mpad, *, norm_first, causal=True, cross_from_x=False):
    """A decoder block's forward written out, with one mistake switchable."""
    def sa(h):
        return b.self_attn(h, h, h, padding_mask=pad, is_causal=causal)[0]

    def ca(h):
        src = h if cross_from_x else memory
        return b.cross_attn(h, src, src, padding_mask=None if cross_from_x else mpad)[0]

    if norm_first:
        x = x + sa(b.norm1(x))
        if b.cross_attn is not None:
            x = x + ca(b.norm2(x))
        return x + b.ff(b.norm3(x))
    x = b.norm1(x + sa(x))
    if b.cross_attn is not None:
        x = b.norm2(x + ca(x))
    return b.norm3(x + b.ff(x))


def _blocks_pair(cls, name, t, **kwargs):
    g = fresh_generator(name, t)
    with torch.random.fork_rng():
        torch.manual_seed(int(torch.randint(0, 2 ** 31 - 1, (1,), generator=g)))
        ref = _REF[name](12, 3, 20, **kwargs).double().eval()
    return g, ref, _twin(cls, ref, 12, 3, 20, **kwargs)


def _norm_hint(norm_first):
    return ("norm_first=True is pre-norm: x = x + Sublayer(LayerNorm(x)); you wrote post-norm." if norm_first else
            "norm_first=False is the paper's post-norm: x = LayerNorm(x + Sublayer(x)); you wrote pre-norm.")


def check_piece_encoder_block(cls) -> CheckResult:
    """my_attn.models.blocks.EncoderBlock against attn_lib's with copied weights, float64, eval mode: post- and
    pre-norm, with and without a padding mask (B, S); x (B, S, D) -> (x (B, S, D), weights (B, H, S, S) or None).

    Raises: nothing; a wrong answer is a failed CheckResult with a hint (norm order, residual, padding).
    Source: Vaswani et al. 2017, §3.1; attn_lib.models.blocks.EncoderBlock (= torch.nn.TransformerEncoderLayer).
    """
    def trials():
        n = 0
        for norm_first in (False, True):
            for padded in (False, True):
                g, ref, mine = _blocks_pair(cls, "EncoderBlock", n, norm_first=norm_first)
                x = _randn(g, 2, 5, 12)
                pad = None
                if padded:
                    pad = torch.ones(2, 5, dtype=torch.bool)
                    pad[0, -2:] = False
                what = (f"the output of the EncoderBlock (norm_first={norm_first}, "
                        f"padding_mask {'given' if padded else 'None'})")
                with torch.no_grad():
                    want, want_w = ref(x, pad, need_weights=True)
                    got = _call_mine("EncoderBlock", lambda x_, p_: mine(x_, p_, need_weights=True),
                                     {"x": x, "padding_mask": pad})
                    if not isinstance(got, (tuple, list)) or len(got) != 2:
                        raise Mismatch("EncoderBlock.forward returns a pair (x, self-attention weights or None).")
                    wrong = [(_enc_by_hand(ref, x, pad, norm_first=not norm_first), _norm_hint(norm_first)),
                             (_enc_by_hand(ref, x, pad, norm_first=norm_first, residual=False),
                              "the residual connection around the self-attention is missing: add x back "
                              "(x + attention) before (post-norm) or after (pre-norm) the LayerNorm.")]
                    if padded:
                        wrong.append((_enc_by_hand(ref, x, None, norm_first=norm_first),
                                      "the padding_mask was not passed to the self-attention."))
                    expect_close(got[0], want, what=what, atol=1e-10, rtol=1e-8, dtype=torch.float64,
                                 wrong_answers=wrong)
                    expect_close(got[1], want_w, what="the self-attention weights (need_weights=True)", atol=1e-10,
                                 rtol=1e-8)
                n += 1
        return n

    return run_check("EncoderBlock", trials)


def check_piece_decoder_block(cls) -> CheckResult:
    """my_attn.models.blocks.DecoderBlock against attn_lib's with copied weights, float64, eval mode: post- and
    pre-norm, with cross-attention to a memory (B, S, D) and padding on both sides, and without cross-attention;
    x (B, L, D) -> (x (B, L, D), self weights (B, H, L, L), cross weights (B, H, L, S) or None).

    Raises: nothing; a wrong answer is a failed CheckResult with a hint (causal mask, memory, norm order).
    Source: Vaswani et al. 2017, §3.1 and §3.2.3; attn_lib.models.blocks.DecoderBlock
    (= torch.nn.TransformerDecoderLayer).
    """
    def trials():
        cases = [(False, True, False), (False, True, True), (True, True, True), (True, False, False),
                 (False, False, True)]
        for n, (norm_first, cross, padded) in enumerate(cases):
            g, ref, mine = _blocks_pair(cls, "DecoderBlock", n, norm_first=norm_first, cross_attention=cross)
            x = _randn(g, 2, 4, 12)
            memory = _randn(g, 2, 6, 12) if cross else None
            pad = mpad = None
            if padded:
                pad = torch.ones(2, 4, dtype=torch.bool)
                pad[1, -1] = False
                if cross:
                    mpad = torch.ones(2, 6, dtype=torch.bool)
                    mpad[0, -3:] = False
            what = (f"the output of the DecoderBlock (norm_first={norm_first}, cross_attention={cross}, "
                    f"padding {'given' if padded else 'None'})")
            with torch.no_grad():
                want, want_sw, want_cw = ref(x, memory, padding_mask=pad, memory_padding_mask=mpad, need_weights=True)
                got = _call_mine("DecoderBlock",
                                 lambda x_, m_, p_, mp_: mine(x_, m_, padding_mask=p_, memory_padding_mask=mp_,
                                                              need_weights=True),
                                 {"x": x, "memory": memory, "padding_mask": pad, "memory_padding_mask": mpad})
                if not isinstance(got, (tuple, list)) or len(got) != 3:
                    raise Mismatch("DecoderBlock.forward returns a triple (x, self-attention weights, "
                                   "cross-attention weights), each weight None unless need_weights.")
                by_hand = dict(norm_first=norm_first)
                wrong = [(_dec_by_hand(ref, x, memory, pad, mpad, norm_first=not norm_first), _norm_hint(norm_first)),
                         (_dec_by_hand(ref, x, memory, pad, mpad, causal=False, **by_hand),
                          "the decoder's self-attention must be causal (is_causal=True): position t may not see "
                          "the later tokens it is trained to predict.")]
                if cross and not padded:
                    wrong.append((_dec_by_hand(ref, x, memory, pad, mpad, cross_from_x=True, **by_hand),
                                  "the cross-attention's keys and values come from memory (the encoder output); "
                                  "only its queries come from x."))
                expect_close(got[0], want, what=what, atol=1e-10, rtol=1e-8, dtype=torch.float64, wrong_answers=wrong)
                expect_close(got[1], want_sw, what="the self-attention weights (need_weights=True)", atol=1e-10,
                             rtol=1e-8)
                if cross:
                    expect_close(got[2], want_cw, what="the cross-attention weights (need_weights=True)",
                                 atol=1e-10, rtol=1e-8)
                elif got[2] is not None:
                    raise Mismatch("a DecoderBlock without cross-attention returns None as its cross weights.")
        return len(cases)

    return run_check("DecoderBlock", trials)


# ----------------------------------------------------------------------------------------------------- 10
_LM_CONFIGS = (dict(d_model=16, num_heads=4, num_kv_heads=2, d_ff=24, rope_base=10000.0),
               dict(d_model=16, num_heads=2, num_kv_heads=1, d_ff=20, rope_base=500.0, ffn="swiglu", head_dim=6))


def _lm_block_pair(cls, t, config):
    g = fresh_generator("LMBlock", t)
    c = dict(config)
    args = (c.pop("d_model"), c.pop("num_heads"), c.pop("num_kv_heads"), c.pop("d_ff"), c.pop("rope_base"))
    with torch.random.fork_rng():
        torch.manual_seed(int(torch.randint(0, 2 ** 31 - 1, (1,), generator=g)))
        ref = _REF["LMBlock"](*args, **c).double().eval()
        with torch.no_grad():  # RMSNorm weights start at 1: make them matter
            for norm in (ref.norm1, ref.norm2):
                norm.weight.copy_(1 + 0.3 * torch.randn(norm.weight.shape, generator=g, dtype=torch.float64))
    return g, ref, _twin(cls, ref, *args, **c)


def _lm_block_by_hand(b, x, *, causal=True, pre_norm=True, ffn_residual=True):
    if pre_norm:
        x = x + b.attn(b.norm1(x), is_causal=causal)[0]
        return (x if ffn_residual else 0) + b.ffn(b.norm2(x))
    x = b.norm1(x + b.attn(x, is_causal=causal)[0])
    return b.norm2(x + b.ffn(x))


def check_piece_lm_block(cls) -> CheckResult:
    """my_attn.models.lm.LMBlock against attn_lib's with copied weights, float64: x (B, L, D) -> (B, L, D), GELU and
    SwiGLU, grouped-query heads, the weights (B, H, L, S) with need_weights, an attn_mask (attend="self"'s diagonal),
    and a KV cache fed in two chunks (equal to attn_lib's block with its own cache, and to the full forward).

    It fails when the learner's forward calls attn_lib's LMBlock.forward.
    Raises: nothing; a wrong answer is a failed CheckResult with a hint (pre-norm, causal, residuals, the cache).
    Source: Touvron et al. 2023 (LLaMA), §2.2; attn_lib.models.lm.LMBlock.
    """
    from attn_lib.kv_cache import KVCache

    def trials():
        n = 0
        for t, config in enumerate(_LM_CONFIGS):
            g, ref, mine = _lm_block_pair(cls, t, config)
            x = _randn(g, 2, 5, config["d_model"])
            with torch.no_grad():
                want = ref(x)
                got = _call_mine("LMBlock", lambda x_: mine(x_), {"x": x})
                expect_close(got, want, what=f"the output of the LMBlock ({config})", atol=1e-10, rtol=1e-8,
                             dtype=torch.float64, wrong_answers=[
                                 (_lm_block_by_hand(ref, x, causal=False), "the attention must be causal: "
                                                                           "is_causal=True."),
                                 (_lm_block_by_hand(ref, x, pre_norm=False), "LMBlock is pre-norm: x + attn(norm1(x)),"
                                                                             " then x + ffn(norm2(x)); you normalised "
                                                                             "after the residual (post-norm)."),
                                 (_lm_block_by_hand(ref, x, ffn_residual=False),
                                  "the residual around the feed-forward is missing: x = x + ffn(norm2(x)).")])
                want, want_w = ref(x, need_weights=True)
                got = _call_mine("LMBlock", lambda x_: mine(x_, need_weights=True), {"x": x})
                if not isinstance(got, (tuple, list)) or len(got) != 2:
                    raise Mismatch("with need_weights=True, LMBlock.forward returns (x, weights).")
                expect_close(got[1], want_w, what="the weights (need_weights=True)", atol=1e-10, rtol=1e-8)
                diag = torch.eye(5, dtype=torch.bool)
                want = ref(x, attn_mask=diag)
                got = _call_mine("LMBlock", lambda x_, m_: mine(x_, attn_mask=m_), {"x": x, "attn_mask": diag})
                expect_close(got, want, what="the output with attn_mask (the diagonal: each token sees itself)",
                             atol=1e-10, rtol=1e-8, wrong_answers=[(ref(x), "pass attn_mask on to the attention.")])
                full = ref(x)
                ref_cache, my_cache = KVCache(), new_beside(mine, KVCache)
                for lo, hi in ((0, 3), (3, 5)):
                    want = ref(x[:, lo:hi], ref_cache)
                    got = _call_mine("LMBlock", lambda x_: mine(x_, my_cache), {"x": x[:, lo:hi]})  # the cache grows
                    expect_close(got, want, what=f"the output for tokens {lo}..{hi - 1} fed with a KV cache",
                                 atol=1e-10, rtol=1e-8, wrong_answers=[
                                     (ref(x[:, lo:hi]), "pass kv_cache on to the attention: the new tokens must "
                                                        "attend to the cached ones.")])
                    expect_close(got, full[:, lo:hi], what="cached decoding against the full forward", atol=1e-10,
                                 rtol=1e-8)
            n += 4
        return n

    return run_check("LMBlock", trials)


def check_piece_decoder_lm(cls) -> CheckResult:
    """my_attn.models.lm.DecoderLM's forward against attn_lib's with copied weights, float64: logits (B, L, V) for
    input_ids (B, L) int64, causal and attend="self", attention="tiled", and decoding with KV caches in two chunks.

    It fails when the learner's forward calls attn_lib's DecoderLM.forward (or its _run).
    Raises: nothing; a wrong answer is a failed CheckResult with a hint (final norm, the mask, the caches).
    Source: Radford et al. 2019 (GPT-2) and Touvron et al. 2023 (LLaMA), §2.2; attn_lib.models.lm.DecoderLM.
    """
    def trials():
        n = 0
        for t, (attend, attention) in enumerate((("causal", "naive"), ("self", "naive"), ("causal", "tiled"))):
            g = fresh_generator("DecoderLM", t)
            kwargs = dict(d_model=16, num_heads=4, num_kv_heads=2, num_layers=2, attend=attend, tile_size=2)
            with torch.random.fork_rng():
                torch.manual_seed(int(torch.randint(0, 2 ** 31 - 1, (1,), generator=g)))
                ref = _REF["DecoderLM"](13, **kwargs).double().eval()
                with torch.no_grad():
                    ref.norm.weight.copy_(1 + 0.3 * torch.randn(16, generator=g, dtype=torch.float64))
            mine = _twin(cls, ref, 13, **kwargs)
            ids = torch.randint(0, 13, (2, 6), generator=g)
            with torch.no_grad():
                want = ref(ids, attention=attention)
            what = f"the logits (attend={attend!r}, attention={attention!r})"
            with torch.no_grad():
                got = _call_mine("DecoderLM", lambda i_: mine(i_, attention=attention), {"input_ids": ids})
                x = ref.embed(ids)
                for layer in ref.layers:
                    x = layer(x, attn_mask=ref._mask(6, 0, ids.device))
                wrong = [(ref.lm_head(x), "the final RMSNorm is missing: logits = lm_head(norm(x)).")]
                if attend == "self":
                    x = ref.embed(ids)
                    for layer in ref.layers:
                        x = layer(x)
                    wrong.append((ref.lm_head(ref.norm(x)), "pass the model's mask (self._mask(L, past, device)) to "
                                                            "every layer as attn_mask: attend=\"self\" needs it."))
                expect_close(got, want, what=what, atol=1e-10, rtol=1e-8, dtype=torch.float64, wrong_answers=wrong)
                if attention == "naive":
                    ref_caches, my_caches = ref.new_kv_caches(), mine.new_kv_caches()
                    for lo, hi in ((0, 4), (4, 6)):
                        want = ref(ids[:, lo:hi], ref_caches)
                        got = _call_mine("DecoderLM", lambda i_: mine(i_, my_caches),  # the caches grow
                                         {"input_ids": ids[:, lo:hi]})
                        expect_close(got, want, what=f"the logits of tokens {lo}..{hi - 1} with KV caches",
                                     atol=1e-10, rtol=1e-8, wrong_answers=[
                                         (ref(ids[:, lo:hi]), "pass each layer its own cache, kv_caches[i]: the new "
                                                              "tokens attend to the cached ones.")])
            n += 1
        return n

    return run_check("DecoderLM", trials)


# ----------------------------------------------------------------------------------------------------- registry
PIECES: tuple[Piece, ...] = (
    # Class pieces: the learner's class subclasses attn_lib's and writes the methods named in its stub, so it replaces
    # attn_lib's class everywhere (with_merges, the notebooks' code and attn_lib's own users build it).
    Piece("tokenization", "BPETokenizer", "01", "Byte-pair encoding, step by step", check_piece_bpe_tokenizer),
    # A class piece: the learner's class subclasses attn_lib's and writes forward, so it replaces attn_lib's class
    # everywhere (from_torch, from_hf, the blocks, the LM and gqa's converters build it); the KV-cache and tiled
    # paths of forward stay attn_lib's until notebooks 08 and 09.
    Piece("mha", "MultiHeadAttention", "05", "2 · The mechanics, shape by shape", check_piece_multi_head_attention),
    Piece("models.blocks", "EncoderBlock", "07", "3 · One model, three kinds of attention", check_piece_encoder_block),
    Piece("models.blocks", "DecoderBlock", "07", "3 · One model, three kinds of attention", check_piece_decoder_block),
    # LMBlock replaces attn_lib's: every DecoderLM (TinyDecoder included) builds its layers through the name LMBlock,
    # so notebook 10 trains a decoder of the learner's blocks on the learner's MultiHeadAttention and SDPA.
    Piece("models.lm", "LMBlock", "10", "2 · The model", check_piece_lm_block),
    # DecoderLM is checked, not swapped in (replaces=False): TinyDecoder and the notebooks' isinstance(model, DecoderLM)
    # are attn_lib's class, and a DecoderLM already runs on the learner's layers through LMBlock.
    Piece("models.lm", "DecoderLM", "10", "2 · The model", check_piece_decoder_lm, replaces=False),
)
