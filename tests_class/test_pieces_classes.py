"""The class pieces of the student's ``my_attn/`` (BPETokenizer, MultiHeadAttention, the blocks, the caches, the
decoder LM) graded in the sandbox by handle (classroom/grade.py's RemoteObject, issue #34): the checks run here on a
proxy, the student's objects live in the sandbox. A typical wrong class loses its piece with the check's hint, a
class that hands the work to attn_lib's own (or torch's fused attention) loses it and is flagged, and an attack on
the handle protocol costs only the attacked pieces, without crashing the grader."""

from __future__ import annotations

import copy
import pickle
import shutil
from pathlib import Path

import pytest

from classroom import grade, pieces, sandbox, wire

ROOT = Path(__file__).resolve().parent.parent
SOLVED = ROOT / "notebooks" / "solutions" / "my_attn"
CLASSES = ("BPETokenizer", "MultiHeadAttention", "EncoderBlock", "DecoderBlock", "KVCache", "LMBlock", "DecoderLM",
           "RingKVCache")


@pytest.fixture(scope="module")
def library(tmp_path_factory):
    sandbox.bwrap_path()
    return sandbox.library_dir(tmp_path_factory.mktemp("lib"))


def _edit(pkg: Path, module: str, old: str, new: str) -> None:
    path = pkg / module
    text = path.read_text()
    assert old in text, (module, old)
    path.write_text(text.replace(old, new, 1))


def _lost(result) -> set[str]:
    return {k for k, v in result["scores"].items() if v != result["max"][k]}


def _grade(pkg: Path, library) -> dict:
    result = pieces.grade_pieces(pkg, library, cell_timeout=60, budget_s=600, salt="test-classes")
    assert set(result["scores"]) == set(pieces.points())
    return result


def test_every_class_piece_is_graded_by_handle():
    graded = {p.name for p in pieces.graded_pieces()}
    assert set(CLASSES) <= graded
    assert pieces.ungraded_pieces() in (["flash_forward"], [])
    assert set(pieces.class_pieces().values()) == set(CLASSES)
    pts = pieces.points()
    assert all(pts[f"piece_{name}"] == pieces.PIECE_POINTS for name in CLASSES)
    # each class check says what it refuses and what attn_lib code it allows (the stub's inherited __init__)
    assert {f"check_piece_{name}" for name in CLASSES} <= set(grade.REFUSED) & set(grade.ALLOWED)


def test_typical_wrong_classes_lose_their_piece_with_the_hint(library, tmp_path):
    """One package, one mistake per class: MultiHeadAttention without out_proj, a KVCache that drops its first
    append, an EncoderBlock whose forward is attn_lib's (a lambda), a DecoderBlock that returns super().forward, a
    BPETokenizer whose encode is attn_lib's, an LMBlock that calls attn_lib's forward. Each loses exactly its piece;
    the wrappers are flagged by name."""
    pkg = tmp_path / "my_attn"
    shutil.copytree(SOLVED, pkg)
    _edit(pkg, "mha.py", "output = self.out_proj(merge_heads(heads))", "output = merge_heads(heads)")
    _edit(pkg, "kv_cache.py", "        if self.keys is None:\n            self.keys, self.values = key, value\n",
          "        if self.keys is None:\n            self.keys, self.values = key[:, :, :0], value[:, :, :0]\n")
    (pkg / "models" / "blocks.py").write_text((pkg / "models" / "blocks.py").read_text() + (
        "\n\nEncoderBlock.forward = lambda self, *a, **k: _lib_blocks.EncoderBlock.forward(self, *a, **k)\n"))
    _edit(pkg, "models/blocks.py", "        if (self.cross_attn is None) != (memory is None):\n",
          "        return super().forward(x, memory, padding_mask=padding_mask, "
          "memory_padding_mask=memory_padding_mask, need_weights=need_weights)\n"
          "        if (self.cross_attn is None) != (memory is None):\n")
    (pkg / "tokenization.py").write_text((pkg / "tokenization.py").read_text() + (
        "\n\ndef _their_encode(self, text):\n    return _LibBPETokenizer.encode(self, text)\n\n\n"
        "BPETokenizer.encode = _their_encode\n"))
    _edit(pkg, "models/lm.py", "        a, w = self.attn(",
          "        return _lib_lm.LMBlock.forward(self, x, kv_cache, attn_mask=attn_mask, backend=backend, "
          "tile_size=tile_size, need_weights=need_weights)\n        a, w = self.attn(")
    result = _grade(pkg, library)
    lost = _lost(result)
    assert lost == {"piece_MultiHeadAttention", "piece_KVCache", "piece_EncoderBlock", "piece_DecoderBlock",
                    "piece_BPETokenizer", "piece_LMBlock"}, (lost, result["messages"])
    m = result["messages"]
    assert "out_proj is missing" in m["piece_MultiHeadAttention"], m["piece_MultiHeadAttention"]
    assert "the keys after 4 positions" in m["piece_KVCache"], m["piece_KVCache"]
    assert "attn_lib.models.blocks.EncoderBlock.forward" in m["piece_EncoderBlock"], m["piece_EncoderBlock"]
    assert "attn_lib.models.blocks.DecoderBlock.forward" in m["piece_DecoderBlock"], m["piece_DecoderBlock"]
    assert "attn_lib.tokenization.BPETokenizer.encode" in m["piece_BPETokenizer"], m["piece_BPETokenizer"]
    assert "attn_lib.models.lm.LMBlock.forward" in m["piece_LMBlock"], m["piece_LMBlock"]
    flags = " ".join(result["flags"])
    for name in ("piece_EncoderBlock", "piece_DecoderBlock", "piece_BPETokenizer", "piece_LMBlock"):
        assert name in flags, (name, result["flags"])
    assert "piece_MultiHeadAttention" not in flags and "piece_KVCache" not in flags, result["flags"]


_FUSED = '''

def _fused(q, k, v, mask, dropout_p=0.0, enable_gqa=False):
    import math

    heads = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p,
                                                             enable_gqa=enable_gqa)
    if enable_gqa:
        k = k.repeat_interleave(q.shape[1] // k.shape[1], dim=1)
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else scores + mask
    return heads, scores.softmax(-1)
'''


@pytest.mark.parametrize("how", ["torch's fused attention", "a lambda around attn_lib's forward"])
def test_multi_head_attention_not_on_the_students_own_sdpa_gets_zero(library, tmp_path, how):
    """A MultiHeadAttention whose heads run torch's F.scaled_dot_product_attention (right values), or whose forward
    is a lambda around attn_lib's (with a DecoderLM written the same way): the runner reports the calls and that
    the student's own SDPA never ran; zero points for those pieces, and attn_lib's forward is flagged."""
    pkg = tmp_path / "my_attn"
    shutil.copytree(SOLVED, pkg)
    if how.startswith("torch"):
        _edit(pkg, "mha.py", "        heads, weights = scaled_dot_product_attention(\n",
              "        heads, weights = _fused(\n")
        (pkg / "mha.py").write_text((pkg / "mha.py").read_text() + _FUSED)
        lost = {"piece_MultiHeadAttention"}
    else:
        (pkg / "mha.py").write_text((pkg / "mha.py").read_text() + (
            "\n\nMultiHeadAttention.forward = lambda self, *a, **k: "
            "_lib_mha.MultiHeadAttention.forward(self, *a, **k)\n"))
        (pkg / "models" / "lm.py").write_text((pkg / "models" / "lm.py").read_text() + (
            "\n\nDecoderLM.forward = lambda self, *a, **k: _lib_lm.DecoderLM.forward(self, *a, **k)\n"))
        lost = {"piece_MultiHeadAttention", "piece_DecoderLM"}
    result = _grade(pkg, library)
    assert _lost(result) == lost, (_lost(result), result["messages"])
    message = result["messages"]["piece_MultiHeadAttention"]
    assert "never called YOUR scaled_dot_product_attention" in message, message
    flags = " ".join(result["flags"])
    if how.startswith("torch"):
        assert result["flags"] == []
    else:
        assert "piece_MultiHeadAttention" in flags and "attn_lib.mha.MultiHeadAttention.forward" in flags, flags
        assert "piece_DecoderLM" in flags and "attn_lib.models.lm.DecoderLM.forward" in flags, flags
        assert "attn_lib.models.lm.DecoderLM.forward" in result["messages"]["piece_DecoderLM"]


def test_an_attack_on_the_handle_protocol_gains_nothing(library, tmp_path):
    """A KVCache whose check returns a module and whose update hands back 40 000 objects (more than the runner's
    table and the grader's proxies allow), a RingKVCache that forges the handles the runner sends (a number never
    handed out), an EncoderBlock whose double() never returns (a call outside the check's time-limited call()),
    and a BPETokenizer whose trained tokenizer's ``merges`` attribute is a module: the four pieces get 0, with a
    message; every other piece keeps its points (the sandbox the hang ended is started again for them), and the
    grader does not crash."""
    pkg = tmp_path / "my_attn"
    shutil.copytree(SOLVED, pkg)
    (pkg / "kv_cache.py").write_text('''
import os


class KVCache:
    keys = values = None
    seq_len = 0

    def __len__(self):
        return 0

    def nbytes(self):
        return 0

    def check(self, key, value):      # a module comes back: a handle, never the module
        return os

    def reset(self):
        return None

    def update(self, key, value):      # a huge number of objects
        return [object() for _ in range(20_000)], [lambda: 0 for _ in range(20_000)]
''')
    (pkg / "windows.py").write_text((pkg / "windows.py").read_text() + '''

def _forge():
    import classroom.wire as w

    if getattr(w, "_forged", False):
        return
    original = w.encode

    def encode(value, *args, **kwargs):
        if isinstance(value, RingKVCache):
            return {"F": 10 ** 12, "k": "object", "mro": ["attn_lib.windows.RingKVCache", "builtins.object"]}
        return original(value, *args, **kwargs)

    w.encode, w._forged = encode, True


_ring_init = RingKVCache.__init__


def _init(self, *args, **kwargs):
    _forge()
    _ring_init(self, *args, **kwargs)


RingKVCache.__init__ = _init
''')
    blocks = pkg / "models" / "blocks.py"
    blocks.write_text(blocks.read_text() + "\n\ndef _hang(self):\n    while True:\n        pass\n\n\n"
                      "EncoderBlock.double = _hang\n")
    tokenization = pkg / "tokenization.py"
    tokenization.write_text(tokenization.read_text() + (
        "\n\nimport os as _os\n\n_train = BPETokenizer.train.__func__\n\n\n"
        "def _module_merges(cls, *args, **kwargs):\n    tok = _train(cls, *args, **kwargs)\n"
        "    tok.merges = _os\n    return tok\n\n\nBPETokenizer.train = classmethod(_module_merges)\n"))
    result = _grade(pkg, library)
    assert _lost(result) == {"piece_KVCache", "piece_RingKVCache", "piece_EncoderBlock", "piece_BPETokenizer"}, (
        _lost(result), result["messages"])
    assert "BPETokenizer" in result["messages"]["piece_BPETokenizer"], result["messages"]
    assert "did not answer within" in result["messages"]["piece_EncoderBlock"], result["messages"]
    assert f"more than {grade.MAX_REMOTE_OBJECTS} objects" in result["messages"]["piece_KVCache"], result["messages"]
    assert "a handle that was never handed out" in result["messages"]["piece_RingKVCache"], result["messages"]


class _Box:
    """A stand-in for a sandbox that records what the proxies send."""

    dead = False

    def __init__(self):
        self.sent, self.reference_calls = [], set()

    def send(self, meta, arrays=None):
        self.sent.append(meta)

    def receive(self, timeout):
        return {"ok": True, "result": 1, "used": []}, {}


def test_a_proxy_never_forwards_special_names_and_cannot_be_pickled():
    box = _Box()
    obj = grade.RemoteObject(box, 3, "KVCache", ("attn_lib.kv_cache.KVCache", "builtins.object"))
    for name in ("__reduce__", "__getstate__", "__array__", "__torch_function__", "__deepcopy__"):
        assert getattr(obj, name, None) is None or not box.sent, name
    assert obj.__class__ is grade.RemoteObject
    with pytest.raises(TypeError):
        pickle.dumps(obj)
    assert copy.deepcopy(obj) is obj and copy.copy(obj) is obj
    assert box.sent == []  # nothing of the above went to the sandbox
    box.receive = lambda timeout: ({"ok": True, "method": True, "used": []}, {})
    method = obj.update  # a method (or any function an attribute holds) is called by name, never sent here
    assert isinstance(method, grade.RemoteMethod) and box.sent[-1]["attr"] == "update"
    box.receive = lambda timeout: ({"ok": True, "result": 1, "used": []}, {})
    assert obj.seq_len == 1 and box.sent[-1] == {"op": "call", "fn": 3, "args": [], "objects": True,
                                                 "attr": "seq_len", "read": True}
    from attn_lib.course.exercises._core import is_instance
    from attn_lib.kv_cache import KVCache

    assert is_instance(obj, KVCache) and not is_instance(obj, dict)
    assert wire.encode([obj], []) == {"L": [{"F": 3}]}  # a proxy goes back as its handle


def test_the_runner_refuses_special_names_and_forged_handles():
    from classroom.runner import _attribute_name

    assert _attribute_name("update") and _attribute_name("_attn_lib_owner") and _attribute_name("__len__")
    for bad in ("__class__", "__reduce__", "__globals__", "__init__", "a.b", "", None, 3, "x" * 200):
        assert not _attribute_name(bad), bad
    table = wire.Table(limit=2)
    a, b = object(), object()
    assert table.add(a) == 0 and table.add(a) == 0 and table.add(b) == 1 and table.add(object()) is None
    for forged in (2, -1, 10 ** 12, True, "0", None):
        with pytest.raises(wire.WireError):
            table.get(forged)
    with pytest.raises(wire.WireError):
        wire.decode({"F": "0"}, {})
    assert wire.decode({"F": 0}, {}, handles=table) is a


def test_the_runner_reports_torchs_fused_attention():
    """What the MultiHeadAttention check's TorchFunctionMode sees in its own process, the runner's profile hook
    reports from the sandbox: torch's fused attention, called directly or through nn.MultiheadAttention."""
    import torch

    from classroom.runner import _watch_reference_calls

    q = torch.randn(1, 1, 3, 4)
    used: list = []
    with _watch_reference_calls(used):
        torch.nn.functional.scaled_dot_product_attention(q, q, q)
    assert used == ["torch.nn.functional.scaled_dot_product_attention"]
    layer, x, used = torch.nn.MultiheadAttention(4, 1, batch_first=True), torch.randn(1, 3, 4), []
    with _watch_reference_calls(used):
        layer(x, x, x)
    assert "torch.nn.functional.multi_head_attention_forward" in used
    assert set(used) <= grade.OTHER_REPORTS
