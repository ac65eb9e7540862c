"""The pieces the learner assembles (#34): notebook 05's MultiHeadAttention and 07's EncoderBlock / DecoderBlock.

Each check accepts the worked solution and a differently written right answer, rejects the typical wrong answers with
their hint, and refuses the loopholes (attn_lib's own forward, torch's fused attention, an SDPA that is not the
learner's). The wrong answers are the worked solution with one line changed, written into a copy of the package.
"""

from __future__ import annotations

import shutil

import pytest
import torch

import attn_lib
from attn_lib.course import mine
from attn_lib.course.exercises import pieces_build

ROOT = attn_lib.REPO_ROOT
STUBS, SOLVED = ROOT / "my_attn", ROOT / "notebooks" / "solutions" / "my_attn"
NAMES = ("BPETokenizer", "MultiHeadAttention", "EncoderBlock", "DecoderBlock", "LMBlock", "DecoderLM")


@pytest.fixture(autouse=True)
def _restore():
    yield
    mine.use_attn_lib()


def _status(pkg) -> dict:
    return {s.piece.name: s for s in mine.check_mine(pkg)}


def _solved_with(tmp_path, module: str, old: str, new: str, base=SOLVED):
    """A copy of ``base`` whose ``module`` (a path such as "mha.py") has ``old`` replaced by ``new``."""
    pkg = tmp_path / "my_attn"
    shutil.copytree(base, pkg)
    path = pkg / module
    src = path.read_text()
    assert old in src, old
    path.write_text(src.replace(old, new))
    return pkg


def test_stubs_are_not_written_and_the_solution_passes():
    stubs, solved = _status(STUBS), _status(SOLVED)
    for name in NAMES:
        assert stubs[name].status == "not written", stubs[name].message
        assert f"notebook {stubs[name].piece.notebook}" in stubs[name].message
        assert solved[name].status == "passes", solved[name].message


def test_the_stub_class_is_attn_libs_until_forward():
    """The stubs subclass attn_lib's classes: construction, from_torch and state dicts work; forward says what to do."""
    mine.check_mine(STUBS)
    import my_attn.mha as M
    import my_attn.models.blocks as Bk

    layer = M.MultiHeadAttention.from_torch(torch.nn.MultiheadAttention(8, 2, batch_first=True))
    assert isinstance(layer, M.MultiHeadAttention)
    with pytest.raises(NotImplementedError, match=r'MultiHeadAttention is not written yet; notebook 05, section "2'):
        layer(torch.randn(1, 3, 8))
    with pytest.raises(NotImplementedError, match="notebook 07"):
        Bk.EncoderBlock(8, 2)(torch.randn(1, 3, 8))


def test_use_mine_puts_the_learners_classes_inside_attn_libs_models(capsys):
    import attn_lib.models.blocks as blocks
    import attn_lib.models.lm as lm

    mine.use_mine(SOLVED, quiet=True)
    import my_attn.mha as M
    import my_attn.models.blocks as Bk

    assert attn_lib.mha.MultiHeadAttention is M.MultiHeadAttention and lm.MultiHeadAttention is M.MultiHeadAttention
    assert blocks.EncoderBlock is Bk.EncoderBlock and blocks.DecoderBlock is Bk.DecoderBlock
    block = blocks.DecoderBlock(16, 2)  # attn_lib's code building a block builds the learner's, with the learner's MHA
    assert type(block) is Bk.DecoderBlock and type(block.cross_attn) is M.MultiHeadAttention
    assert type(lm.DecoderLM(11, d_model=16, num_heads=2, num_layers=1).layers[0].attn) is M.MultiHeadAttention
    mine.use_attn_lib()
    assert attn_lib.mha.MultiHeadAttention is not M.MultiHeadAttention


def test_multi_head_attention_runs_on_the_learners_own_sdpa():
    """The check counts the calls of my_attn.attention.scaled_dot_product_attention while forward runs."""
    mine.check_mine(SOLVED)
    import my_attn.attention as A

    calls = []
    original = A.scaled_dot_product_attention
    spy = pieces_build._SpyOnSdpa(type("X", (), {"__module__": "my_attn.mha"}))
    with spy:
        import my_attn.mha as M

        assert M.scaled_dot_product_attention is not original  # the learner's import, swapped for the counter
        M.MultiHeadAttention(8, 2)(torch.randn(1, 3, 8))
        calls.append(spy.calls)
    assert calls == [1] and M.scaled_dot_product_attention is original and A.scaled_dot_product_attention is original


SOLVED_FORWARD_TAIL = "enable_gqa=self.num_kv_heads != self.num_heads)"
MHA_WRONG = {
    "scores over sqrt(d_model)": (SOLVED_FORWARD_TAIL,
                                  "enable_gqa=self.num_kv_heads != self.num_heads, scale=self.d_model ** -0.5)",
                                  "sqrt(head_dim)"),
    "no out_proj": ("output = self.out_proj(merge_heads(heads))", "output = merge_heads(heads)", "out_proj is missing"),
    "heads reshaped straight": ("import attn_lib.mha as _lib_mha\n",
                                "import attn_lib.mha as _lib_mha\n\n\ndef _bad(x, h):\n"
                                "    return x.reshape(x.shape[0], h, x.shape[1], x.shape[2] // h)\n",
                                "tokens and heads are mixed"),
    "masks ignored": ("q, k, v, mask, dropout_p", "q, k, v, None, dropout_p", "the masks were ignored"),
    "padding inverted": ("pad = padding_mask.to(", "pad = ~padding_mask.to(", "padding mask is inverted"),
    "causal lost with padding": ("keep = pad if keep is None else keep & pad", "keep = pad", "is_causal was lost"),
    "averaged weights by default": ("return output, weights.mean(dim=1) if average_attn_weights else weights",
                                    "return output, weights.mean(dim=1)", "every head"),
    "attn_lib's SDPA": ("from my_attn.attention import scaled_dot_product_attention",
                        "from attn_lib.attention import scaled_dot_product_attention", "never called YOUR"),
    "super().forward": ("key, value = self._validate(query, key, value, attn_mask, padding_mask, is_causal, "
                        "need_weights,",
                        "return super().forward(query, key, value, attn_mask=attn_mask, padding_mask=padding_mask, "
                        "is_causal=is_causal, need_weights=need_weights, average_attn_weights=average_attn_weights)\n"
                        "        key, value = self._validate(query, key, value, attn_mask, padding_mask, is_causal, "
                        "need_weights,", "called attn_lib's MultiHeadAttention.forward"),
    "torch's fused SDPA": ("from my_attn.attention import scaled_dot_product_attention",
                           "import torch.nn.functional as _F\n\n\ndef scaled_dot_product_attention(q, k, v, m=None, *, "
                           "dropout_p=0.0, enable_gqa=False):\n"
                           "    return _F.scaled_dot_product_attention(q, k, v, m, enable_gqa=enable_gqa), None\n",
                           "called torch.nn.functional.scaled_dot_product_attention"),
}


@pytest.mark.parametrize("case", sorted(MHA_WRONG))
def test_multi_head_attention_check_rejects_the_typical_wrong_answers(tmp_path, case):
    old, new, hint = MHA_WRONG[case]
    src_module = "mha.py"
    if case == "heads reshaped straight":
        pkg = _solved_with(tmp_path, src_module, old, new)
        path = pkg / src_module
        body = path.read_text()
        head, tail = body.split("class MultiHeadAttention", 1)
        path.write_text(head + "class MultiHeadAttention" + tail.replace("split_heads(", "_bad("))
    else:
        pkg = _solved_with(tmp_path, src_module, old, new)
    s = _status(pkg)["MultiHeadAttention"]
    assert s.status == "fails" and hint in s.message, s.message


def test_multi_head_attention_needs_the_learners_sdpa_written_first(tmp_path):
    pkg = tmp_path / "my_attn"
    shutil.copytree(STUBS, pkg)
    shutil.copy(SOLVED / "mha.py", pkg / "mha.py")
    s = _status(pkg)["MultiHeadAttention"]
    assert s.status == "fails", s.message
    assert "which still raises NotImplementedError: write that first (notebook 03)" in s.message, s.message


def test_multi_head_attention_names_another_unwritten_piece_it_calls(tmp_path):
    """Issue 34: the learner's forward calls my_attn.positional.apply_rope, still a stub; the row said "not written"."""
    pkg = tmp_path / "my_attn"
    shutil.copytree(SOLVED, pkg)
    shutil.copy(STUBS / "positional.py", pkg / "positional.py")
    s = _status(pkg)["MultiHeadAttention"]
    assert s.status == "fails", s.message
    assert "calls my_attn.positional.apply_rope, which still raises NotImplementedError: write it first " \
           "(notebook 04); meanwhile import attn_lib's: from attn_lib.positional import apply_rope" in s.message, \
        s.message


def test_multi_head_attention_says_to_fix_a_failing_piece_it_depends_on_first(tmp_path):
    pkg = _solved_with(tmp_path, "mha.py", "return x.view(B, L, num_heads, d_model // num_heads).transpose(1, 2)",
                       "return x.reshape(B, num_heads, L, d_model // num_heads)")
    status = _status(pkg)
    assert status["split_heads"].status == "fails"
    s = status["MultiHeadAttention"]
    assert s.status == "fails" and "Fix split_heads first (notebook 05)" in s.message, s.message
    assert "Fix" not in _status(SOLVED)["MultiHeadAttention"].message


def test_multi_head_attention_check_refuses_dropout_in_eval_mode(tmp_path):
    pkg = _solved_with(tmp_path, "mha.py", "dropout_p=self.dropout if self.training else 0.0",
                       "dropout_p=self.dropout")
    s = _status(pkg)["MultiHeadAttention"]
    assert s.status == "fails" and "dropout_p=self.dropout if self.training else 0.0" in s.message, s.message


OTHER_MHA = '''

class MultiHeadAttention(_lib_mha.MultiHeadAttention):
    """Written differently: one head at a time, the masks as one additive float mask."""

    def forward(self, query, key=None, value=None, *, attn_mask=None, padding_mask=None, is_causal=False,
                need_weights=False, average_attn_weights=False, kv_cache=None, backend="naive", tile_size=8):
        key = query if key is None else key
        value = key if value is None else value
        B, L, _ = query.shape
        S = key.shape[1]
        E, G = self.head_dim, self.num_heads // self.num_kv_heads
        add = torch.zeros(B, 1, L, S, dtype=query.dtype)
        if attn_mask is not None:
            m = attn_mask if attn_mask.dim() != 3 else attn_mask.unsqueeze(1)
            add = add + (m if m.is_floating_point() else torch.zeros(m.shape, dtype=query.dtype).masked_fill(
                ~m, float("-inf")))
        if is_causal:
            add = add.masked_fill(~causal_mask(L, S), float("-inf"))
        if padding_mask is not None:
            add = add.masked_fill(padding_mask[:, None, None, :] == 0, float("-inf"))
        qs = self.q_proj(query).unflatten(-1, (self.num_heads, E))                     # (B, L, H, E)
        ks = self.k_proj(key).unflatten(-1, (self.num_kv_heads, E))                    # (B, S, Hkv, E)
        vs = self.v_proj(value).unflatten(-1, (self.num_kv_heads, E))
        outs, ws = [], []
        for h in range(self.num_heads):
            q, k, v = qs[:, :, h], ks[:, :, h // G], vs[:, :, h // G]                  # (B, L, E), (B, S, E)
            if self.rope_base is not None:
                q, k = apply_rope(q, base=self.rope_base), apply_rope(k, base=self.rope_base)
            o, w = scaled_dot_product_attention(q, k, v, add[:, 0] if add.shape[1] == 1 else add[:, h])
            outs.append(o)
            ws.append(w)
        out = self.out_proj(torch.cat(outs, dim=-1))
        w = torch.stack(ws, dim=1)                                                     # (B, H, L, S)
        return out, (None if not need_weights else w.mean(1) if average_attn_weights else w)
'''


def test_multi_head_attention_check_accepts_a_differently_written_right_answer(tmp_path):
    pkg = tmp_path / "my_attn"
    shutil.copytree(SOLVED, pkg)
    src = (pkg / "mha.py").read_text()
    (pkg / "mha.py").write_text(src.split("\n\nclass MultiHeadAttention", 1)[0] + OTHER_MHA)
    s = _status(pkg)["MultiHeadAttention"]
    assert s.status == "passes", s.message


BLOCK_WRONG = {
    "encoder pre-norm for post-norm": ("EncoderBlock", "        if self.norm_first:\n            a, w = attend(",
                                       "        if not self.norm_first:\n            a, w = attend(",
                                       "norm_first=False is the paper's post-norm"),
    "encoder without the residual": ("EncoderBlock", "x = self.norm1(x + a)", "x = self.norm1(a)",
                                     "the residual connection around the self-attention is missing"),
    "encoder drops the padding": ("EncoderBlock", "out, w = self.self_attn(h, h, h, padding_mask=padding_mask, "
                                                  "need_weights=need_weights)",
                                  "out, w = self.self_attn(h, h, h, need_weights=need_weights)",
                                  "the padding_mask was not passed"),
    "encoder calls attn_lib's forward": ("EncoderBlock", "        def attend(h):                    ",
                                         "        return super().forward(x, padding_mask, need_weights=need_weights)"
                                         "\n\n        def attend(h):                    ",
                                         "called attn_lib's EncoderBlock.forward"),
    "decoder not causal": ("DecoderBlock", "padding_mask=padding_mask, is_causal=True,", "padding_mask=padding_mask,",
                           "must be causal"),
    "decoder cross-attends to itself": ("DecoderBlock", "self.cross_attn(h, memory, memory, padding_mask=",
                                        "self.cross_attn(h, h, h, padding_mask=None and ", "come from memory"),
    "decoder post-norm for pre-norm": ("DecoderBlock", "        cw = None\n        if self.norm_first:",
                                       "        cw = None\n        if not self.norm_first:",
                                       "norm_first=False is the paper's post-norm"),
}


@pytest.mark.parametrize("case", sorted(BLOCK_WRONG))
def test_block_checks_reject_the_typical_wrong_answers(tmp_path, case):
    name, old, new, hint = BLOCK_WRONG[case]
    pkg = _solved_with(tmp_path, "models/blocks.py", old, new)
    s = _status(pkg)[name]
    assert s.status == "fails" and hint in s.message, s.message


OTHER_BLOCKS = '''
class EncoderBlock(_lib_blocks.EncoderBlock):
    """Written differently: through the inherited sub-layer helper _sa, one sub-layer list for both orders."""

    def forward(self, x, padding_mask=None, *, need_weights=False):
        w = None

        def attention(h):
            nonlocal w
            out, w = self._sa(h, padding_mask, need_weights)
            return out

        for sub, norm in ((attention, self.norm1), (lambda h: self.dropout2(self.ff(h)), self.norm2)):
            x = x + sub(norm(x)) if self.norm_first else norm(x + sub(x))
        return x, w


class DecoderBlock(_lib_blocks.DecoderBlock):
    """Written differently: a list of (sub-layer, norm) pairs."""

    def forward(self, x, memory=None, *, padding_mask=None, memory_padding_mask=None, need_weights=False):
        got = {}

        def sa(h):
            got["sw"] = self.self_attn(h, h, h, padding_mask=padding_mask, is_causal=True, need_weights=need_weights)
            return self.dropout1(got["sw"][0])

        def ca(h):
            got["cw"] = self.cross_attn(h, memory, memory, padding_mask=memory_padding_mask, need_weights=need_weights)
            return self.dropout2(got["cw"][0])

        steps = [(sa, self.norm1)] + ([(ca, self.norm2)] if self.cross_attn is not None else [])
        steps.append((lambda h: self.dropout3(self.ff(h)), self.norm3))
        for sub, norm in steps:
            x = x + sub(norm(x)) if self.norm_first else norm(x + sub(x))
        return x, got["sw"][1], got["cw"][1] if "cw" in got else None
'''


def test_block_checks_accept_a_differently_written_right_answer(tmp_path):
    pkg = tmp_path / "my_attn"
    shutil.copytree(SOLVED, pkg)
    src = (pkg / "models" / "blocks.py").read_text()
    (pkg / "models" / "blocks.py").write_text(src.split("\n\nclass EncoderBlock", 1)[0] + "\n\n" + OTHER_BLOCKS)
    s = _status(pkg)
    assert s["EncoderBlock"].status == "passes", s["EncoderBlock"].message
    assert s["DecoderBlock"].status == "passes", s["DecoderBlock"].message


BPE_WRONG = {
    "ties: the last pair": ("best = min(pairs, key=lambda p: (-pairs[p], key(p[0]), key(p[1])))",
                            "best = max(pairs, key=lambda p: (pairs[p], key(p[0]), key(p[1])))",
                            "alphabetically FIRST"),
    "unweighted counts": ("words = {tuple(w): n for w, n in word_counts.items() if n}",
                          "words = {tuple(w): 1 for w, n in word_counts.items() if n}", "word's frequency"),
    "pairs across words": ("for w in pre_tokenize(text):", "for w in [text]:", "must not cross words"),
    "min_frequency ignored": ("if pairs[best] < min_frequency:", "if False:", "fewer than min_frequency"),
    "byte-level ties on characters": ("return bytes(back[c] for c in token)", "return token", "BYTES"),
    "greedy longest match": ("        rank = self.__dict__.get(\"_rank_of_merge\")",
                             "        from attn_lib.course.exercises.pieces_build import _greedy_longest\n"
                             "        return _greedy_longest(self, word)\n"
                             "        rank = self.__dict__.get(\"_rank_of_merge\")",
                             "not the longest vocabulary entry"),
    "unknown characters dropped": ("symbols = [c if c in known else self.unk_token for c in word]",
                                   "symbols = [c for c in word if c in known]", "unk_token ([UNK])"),
    "byte-level decode joins characters": ("        back = {c: b for b, c in bytes_to_unicode().items()}\n",
                                           "        return \"\".join(tokens)\n", "inverse of bytes_to_unicode"),
    "invalid bytes ignored": ('decode("utf-8", errors="replace")', 'decode("utf-8", errors="ignore")', "U+FFFD"),
    "train is attn_lib's": ("        texts = corpus.items()",
                            "        return super().train(corpus, vocab_size, byte_level=byte_level, "
                            "min_frequency=min_frequency)\n        texts = corpus.items()",
                            "called attn_lib's BPETokenizer.train"),
    "encode is attn_lib's": ("return [self.vocab[t] for t in self.tokenize(text)]", "return super().encode(text)",
                             "called attn_lib's BPETokenizer.encode"),
}


@pytest.mark.parametrize("case", sorted(BPE_WRONG))
def test_bpe_check_rejects_the_typical_wrong_answers(tmp_path, case):
    old, new, hint = BPE_WRONG[case]
    pkg = _solved_with(tmp_path, "tokenization.py", old, new)
    s = _status(pkg)["BPETokenizer"]
    assert s.status == "fails" and hint in s.message, s.message


OTHER_BPE = '''
"""BPE written differently: pairs counted by hand, merges replayed in learned order over the whole word."""

from collections import Counter

from attn_lib.tokenization import BPETokenizer as _Lib
from attn_lib.tokenization import bytes_to_unicode, pre_tokenize

BYTE = bytes_to_unicode()
UNBYTE = {c: b for b, c in BYTE.items()}


def _merge(symbols, pair):
    out, i = [], 0
    while i < len(symbols):
        if i + 1 < len(symbols) and (symbols[i], symbols[i + 1]) == pair:
            out.append(symbols[i] + symbols[i + 1])
            i += 2
        else:
            out.append(symbols[i])
            i += 1
    return out


class BPETokenizer(_Lib):
    @classmethod
    def train(cls, corpus, vocab_size, *, byte_level=False, unk_token="[UNK]", min_frequency=2,
              tie_break="alphabetical", progress=False):
        if isinstance(corpus, str):
            corpus = {corpus: 1}
        elif not isinstance(corpus, dict):
            corpus = Counter(corpus)
        words = Counter()
        for text, n in corpus.items():
            for w in pre_tokenize(text):
                words[tuple(BYTE[b] for b in w.encode()) if byte_level else tuple(w)] += n
        alphabet = None if byte_level else sorted({c for w in words for c in w})
        size = 256 if byte_level else 1 + len(alphabet)
        made, merges, counts = set(), [], []
        as_key = (lambda t: bytes(UNBYTE[c] for c in t)) if byte_level else (lambda t: t)
        while size + len(made) < vocab_size:
            pairs = Counter()
            for w, n in words.items():
                for a, b in zip(w, w[1:]):
                    pairs[a, b] += n
            ranked = sorted(pairs.items(), key=lambda kv: (-kv[1], as_key(kv[0][0]), as_key(kv[0][1])))
            if not ranked or ranked[0][1] < min_frequency:
                break
            best, count = ranked[0]
            merges.append(best)
            counts.append(count)
            if best[0] + best[1] not in (set(alphabet or BYTE.values())):
                made.add(best[0] + best[1])
            words = Counter({tuple(_merge(list(w), best)): n for w, n in words.items()})
        tok = cls(merges, alphabet, unk_token, byte_level=byte_level)
        tok.merge_counts = counts
        return tok

    def tokenize_word(self, word):
        if self.byte_level:
            symbols = [BYTE[b] for b in word.encode()]
        else:
            symbols = [c if c in self.alphabet else self.unk_token for c in word]
        for pair in self.merges:  # every merge in learned order, over the whole word
            symbols = _merge(symbols, pair)
        return symbols

    def encode(self, text):
        return self.convert_tokens_to_ids(self.tokenize(text))

    def decode(self, ids):
        text = "".join(self.convert_ids_to_tokens(ids))
        return bytes(UNBYTE[c] for c in text).decode(errors="replace") if self.byte_level else text
'''


def test_bpe_check_accepts_a_differently_written_right_answer(tmp_path):
    pkg = tmp_path / "my_attn"
    shutil.copytree(SOLVED, pkg)
    (pkg / "tokenization.py").write_text(OTHER_BPE)
    s = _status(pkg)["BPETokenizer"]
    assert s.status == "passes", s.message


LM_WRONG = {
    "LMBlock not causal": ("LMBlock", "a, w = self.attn(self.norm1(x), is_causal=True,",
                           "a, w = self.attn(self.norm1(x),", "must be causal"),
    "LMBlock post-norm": ("LMBlock", "        x = x + a\n        x = x + self.ffn(self.norm2(x))\n"
                                     "        return (x, w) if need_weights else x",
                          "        x = self.norm1(x + self.attn(x, is_causal=True)[0])\n"
                          "        x = self.norm2(x + self.ffn(x))\n        return (x, w) if need_weights else x",
                          "LMBlock is pre-norm"),
    "LMBlock no ffn residual": ("LMBlock", "x = x + self.ffn(self.norm2(x))", "x = self.ffn(self.norm2(x))",
                                "the residual around the feed-forward"),
    "LMBlock drops the cache": ("LMBlock", "is_causal=True, kv_cache=kv_cache,", "is_causal=True,",
                                "pass kv_cache on"),
    "LMBlock calls attn_lib's forward": ("LMBlock", "        a, w = self.attn(self.norm1(x), is_causal=True,",
                                         "        return super().forward(x, kv_cache, attn_mask=attn_mask, "
                                         "need_weights=need_weights)\n"
                                         "        a, w = self.attn(self.norm1(x), is_causal=True,",
                                         "called attn_lib's LMBlock.forward"),
    "DecoderLM without the final norm": ("DecoderLM", "return self.lm_head(self.norm(x))", "return self.lm_head(x)",
                                         "the final RMSNorm is missing"),
    "DecoderLM drops the mask": ("DecoderLM", "attn_mask=mask, backend=attention,", "backend=attention,",
                                 "attend=\"self\" needs it"),
    "DecoderLM drops the caches": ("DecoderLM", "x = layer(x, None if kv_caches is None else kv_caches[i],",
                                   "x = layer(x, None,", "pass each layer its own cache"),
    "DecoderLM calls attn_lib's _run": ("DecoderLM", "        past = 0 if kv_caches is None",
                                        "        return self._run(input_ids, kv_caches, attention, "
                                        "need_weights=False)[0]\n        past = 0 if kv_caches is None",
                                        "called attn_lib's DecoderLM._run"),
}


@pytest.mark.parametrize("case", sorted(LM_WRONG))
def test_lm_checks_reject_the_typical_wrong_answers(tmp_path, case):
    name, old, new, hint = LM_WRONG[case]
    pkg = _solved_with(tmp_path, "models/lm.py", old, new)
    s = _status(pkg)[name]
    assert s.status == "fails" and hint in s.message, s.message


OTHER_LM = '''
"""Written differently: the block through a list of sub-layers, the model through functools.reduce."""

from functools import reduce

import attn_lib.models.lm as _lib_lm


class LMBlock(_lib_lm.LMBlock):
    def forward(self, x, kv_cache=None, *, attn_mask=None, backend="naive", tile_size=8, need_weights=False):
        kept = []

        def attend(h):
            out, w = self.attn(h, kv_cache=kv_cache, attn_mask=attn_mask, is_causal=True, backend=backend,
                               tile_size=tile_size, need_weights=need_weights)
            kept.append(w)
            return out

        for norm, sub in ((self.norm1, attend), (self.norm2, self.ffn)):
            x = x + sub(norm(x))
        return (x, kept[0]) if need_weights else x


class DecoderLM(_lib_lm.DecoderLM):
    def forward(self, input_ids, kv_caches=None, *, attention="naive"):
        input_ids = _lib_lm.check_token_ids("input_ids", input_ids, vocab_size=self.vocab_size, max_len=self.max_len)
        caches = list(kv_caches) if kv_caches is not None else [None] * len(self.layers)
        past = caches[0].seq_len if caches[0] is not None else 0
        mask = self._mask(input_ids.shape[-1], past, input_ids.device)
        x = reduce(lambda h, pair: pair[0](h, pair[1], attn_mask=mask, backend=attention, tile_size=self.tile_size),
                   zip(self.layers, caches), self.embed(input_ids))
        return self.lm_head(self.norm(x))
'''


def test_lm_checks_accept_a_differently_written_right_answer(tmp_path):
    pkg = tmp_path / "my_attn"
    shutil.copytree(SOLVED, pkg)
    (pkg / "models" / "lm.py").write_text(OTHER_LM)
    s = _status(pkg)
    assert s["LMBlock"].status == "passes", s["LMBlock"].message
    assert s["DecoderLM"].status == "passes", s["DecoderLM"].message


def test_use_mine_builds_every_decoder_from_the_learners_blocks_but_keeps_attn_libs_decoder_class():
    from attn_lib.course.capstone import TinyDecoder

    statuses = {s.piece.name: s for s in mine.use_mine(SOLVED, quiet=True)}
    import my_attn.mha as M
    import my_attn.models.lm as LM

    assert statuses["DecoderLM"].status == "passes" and not statuses["DecoderLM"].piece.replaces
    model = TinyDecoder(17, d_model=16, num_heads=2, num_kv_heads=1, num_layers=1)
    assert isinstance(model, attn_lib.models.lm.DecoderLM) and attn_lib.models.lm.DecoderLM is not LM.DecoderLM
    assert type(model.layers[0]) is LM.LMBlock and type(model.layers[0].attn) is M.MultiHeadAttention
