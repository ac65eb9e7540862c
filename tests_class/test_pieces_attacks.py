"""A hostile student who has read ``classroom/`` attacks the grading of ``my_attn``'s class pieces (issue 41's
threat model): each case is one piece graded alone (``only=``), a copy of the solved package with one module
changed. What gains nothing is shown to gain nothing (the piece gets 0 or the grader flags it, and the grader goes
on); what gained something before is fixed and shown fixed; an honest solution written differently keeps its
points."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from classroom import pieces, sandbox

ROOT = Path(__file__).resolve().parent.parent
SOLVED = ROOT / "notebooks" / "solutions" / "my_attn"

# a KVCache that is attn_lib's: every method runs attn_lib's own code (REFUSED for this piece)
_THEIRS = '''
import attn_lib.kv_cache as _lib


class KVCache(_lib.KVCache):
{body}
'''


@pytest.fixture(scope="module")
def library(tmp_path_factory):
    sandbox.bwrap_path()
    return sandbox.library_dir(tmp_path_factory.mktemp("lib"))


def _package(tmp_path: Path, module: str, text: str) -> Path:
    pkg = tmp_path / "my_attn"
    shutil.copytree(SOLVED, pkg)
    (pkg / module).write_text(text)
    return pkg


def _grade(pkg: Path, library, piece: str) -> dict:
    result = pieces.grade_pieces(pkg, library, cell_timeout=30, budget_s=300, salt="test-attacks", only={piece})
    assert set(result["scores"]) == {piece}, result  # graded: the grader did not crash
    return result


def _flagged(result) -> str:
    return " ".join(result["flags"])


def test_a_runner_rewritten_through_a_name_built_at_run_time_is_flagged(library, tmp_path):
    """Gained before: a KVCache that is attn_lib's, with the runner's report emptied through
    ``sys.modules["class" + "room.runner"]`` (no grader token in the source), got full points and no flag. The
    in-sandbox report is the sandbox's word, so the points cannot be taken back there; the source is now flagged
    (``sys`` under another name, ``modules[...]``: :data:`classroom.pieces.GRADER_PATTERNS`) for the teacher to read."""
    pkg = _package(tmp_path, "kv_cache.py", _THEIRS.replace("import attn_lib.kv_cache as _lib\n", (
        "import sys as _sy\nimport attn_lib.kv_cache as _lib\n\n"
        "_sy.modules['class' + 'room.runner']._reported = lambda used: []\n")).format(body="    pass\n"))
    result = _grade(pkg, library, "piece_KVCache")
    assert "the grader's machinery (sys under another name, modules[...])" in _flagged(result), result


@pytest.mark.parametrize("how", ["subclass", "copied_code"])
def test_attn_libs_kv_cache_under_another_name_gets_zero(library, tmp_path, how):
    """attn_lib's KVCache inherited as it is, or its methods' code objects copied into functions of the student's
    own (``update.__code__ = attn_lib's update.__code__``: a frame of attn_lib's file, whatever the function is
    called): 0 and a flag by name, and the copy is a source flag too."""
    body = "    pass\n" if how == "subclass" else "".join(
        f"    def {m}(self, key, value):\n        pass\n\n    {m}.__code__ = _lib.KVCache.{m}.__code__\n\n"
        for m in ("check", "update"))
    result = _grade(_package(tmp_path, "kv_cache.py", _THEIRS.format(body=body)), library, "piece_KVCache")
    assert result["scores"]["piece_KVCache"] == 0, result
    assert "attn_lib.kv_cache.KVCache." in _flagged(result), result
    assert ("__code__" in _flagged(result)) == (how == "copied_code"), result


ODD = {
    # len() of a proxy is the grader's len(): a number no index holds fails the check, not the grader
    "huge_len": "KVCache.__len__ = lambda self: 10 ** 400\n",
    # exceptions named after the ones that stop a process (BaseException in the grader) arrive as plain Exceptions
    "odd_exceptions": ("class SystemExit(Exception):\n    pass\n\n\nclass KeyboardInterrupt(BaseException):\n"
                       "    pass\n\n\ndef _update(self, key, value):\n    raise KeyboardInterrupt('x' * 10 ** 6)\n\n\n"
                       "def _check(self, key, value):\n    raise SystemExit(1)\n\n\n"
                       "KVCache.update, KVCache.check = _update, _check\n"),
    # a method that returns the class itself, and an attribute that is the class: a proxy, never the class
    "returns_its_class": ("def _update(self, key, value):\n    return type(self), type(self)\n\n\n"
                          "KVCache.update = _update\nKVCache.keys = KVCache\n"),
}


@pytest.mark.parametrize("how", sorted(ODD))
def test_odd_answers_cost_the_piece_not_the_grader(library, tmp_path, how):
    text = (SOLVED / "kv_cache.py").read_text() + "\n\n" + ODD[how]
    result = _grade(_package(tmp_path, "kv_cache.py", text), library, "piece_KVCache")
    assert result["scores"]["piece_KVCache"] == 0, result
    assert result["messages"]["piece_KVCache"].startswith("❌ KVCache"), result


HONEST_LIST_CACHE = '''
import torch


class KVCache:
    """Keeps the chunks in lists; the cache is concatenated when read."""

    def __init__(self):
        self._k, self._v = [], []

    @property
    def keys(self):
        return torch.cat(self._k, dim=2) if self._k else None

    @property
    def values(self):
        return torch.cat(self._v, dim=2) if self._v else None

    @property
    def seq_len(self):
        return sum(k.shape[2] for k in self._k)

    def __len__(self):
        return self.seq_len

    def nbytes(self):
        return sum(t.numel() * t.element_size() for t in self._k + self._v)

    def reset(self):
        self._k, self._v = [], []

    def check(self, key, value):
        for name, t in (("key", key), ("value", value)):
            if not isinstance(t, torch.Tensor) or not t.is_floating_point():
                raise TypeError(f"KVCache.update: {name} must be a floating tensor, got {type(t).__name__}")
            if t.dim() != 4:
                raise ValueError(f"KVCache.update: {name} must be 4-d, got {tuple(t.shape)}")
        if key.dtype != value.dtype:
            raise TypeError("KVCache.update: key and value dtypes differ")
        if key.shape[:3] != value.shape[:3]:
            raise ValueError("KVCache.update: key and value must agree in (B, Hkv, S_new)")
        if self._k:
            k0, v0 = self._k[0], self._v[0]
            if key.dtype != k0.dtype:
                raise TypeError("KVCache.update: the dtype differs from the cache's")
            if key.shape[:2] != k0.shape[:2] or key.shape[3] != k0.shape[3] or value.shape[3] != v0.shape[3]:
                raise ValueError("KVCache.update: the shapes do not match the cache's")

    def update(self, key, value):
        self.check(key, value)
        self._k.append(key)
        self._v.append(value)
        return self.keys, self.values
'''


def test_an_honest_kv_cache_written_differently_keeps_its_points(library, tmp_path):
    """A KVCache that stores lists and concatenates on read (keys, values and seq_len are properties): full points,
    no flag."""
    result = _grade(_package(tmp_path, "kv_cache.py", HONEST_LIST_CACHE), library, "piece_KVCache")
    assert result["scores"]["piece_KVCache"] == result["max"]["piece_KVCache"], result
    assert result["flags"] == [], result


WORKER_THREAD_CACHE = '''
import queue
import threading

import attn_lib.kv_cache as _lib

_jobs, _done = queue.Queue(), queue.Queue()


def _work():  # started at import, before any graded call: attn_lib's code runs here, not in the graded call
    while True:
        f, args = _jobs.get()
        try:
            _done.put((True, f(*args)))
        except BaseException as e:
            _done.put((False, e))


threading.Thread(target=_work, daemon=True).start()


def _there(f, *args):
    _jobs.put((f, args))
    ok, result = _done.get()
    if not ok:
        raise result
    return result


class KVCache:
    def __init__(self):
        self._c = _there(_lib.KVCache)

    keys = property(lambda self: _there(getattr, self._c, "keys"))
    values = property(lambda self: _there(getattr, self._c, "values"))
    seq_len = property(lambda self: _there(getattr, self._c, "seq_len"))

    def __len__(self):
        return self.seq_len

    def update(self, key, value):
        return _there(self._c.update, key, value)

    def check(self, key, value):
        return _there(self._c.check, key, value)

    def nbytes(self):
        return _there(self._c.nbytes)

    def reset(self):
        return _there(self._c.reset)
'''


def test_attn_libs_cache_run_by_a_worker_thread_started_at_import_gets_zero(library, tmp_path):
    """Gained before: a thread started at import (before the runner's watch of a call began) that runs attn_lib's
    KVCache for the student's object was never watched (a thread takes its profile function when it starts), so
    the piece got full points with no flag and no grader token in its source. The runner now gives every thread a
    profile function before the student's first cell, which forwards to the watched call's hook."""
    result = _grade(_package(tmp_path, "kv_cache.py", WORKER_THREAD_CACHE), library, "piece_KVCache")
    assert result["scores"]["piece_KVCache"] == 0, result
    assert "attn_lib.kv_cache.KVCache.__init__, attn_lib.kv_cache.KVCache.check" in _flagged(result), result


def test_a_thread_started_before_the_watch_is_watched():
    """The runner's watch, without a sandbox: attn_lib's code run by a thread that was already running."""
    import queue
    import threading

    import torch

    import attn_lib.kv_cache as lib
    from classroom.runner import _thread_profile, _watch_reference_calls

    threading.setprofile(_thread_profile)  # what the runner does before the student's first cell
    try:
        jobs, done = queue.Queue(), queue.Queue()
        worker = threading.Thread(target=lambda: done.put(jobs.get()()), daemon=True)
        worker.start()
        used: list = []
        x = torch.zeros(1, 1, 2, 3)
        with _watch_reference_calls(used):
            jobs.put(lambda: lib.KVCache().update(x, x))
            done.get(timeout=30)
        worker.join(timeout=30)
    finally:
        threading.setprofile(None)
    assert "attn_lib.kv_cache.KVCache.update" in used and "attn_lib.kv_cache.KVCache.__init__" in used, used


LAZY_INT = '''

import attn_lib.kv_cache as _lib


class _Lazy(int):
    """An int whose value is computed when the runner encodes it, after the watched call returned."""

    def __int__(self):
        theirs = _lib.KVCache()
        theirs.keys, theirs.values = self.cache.keys, self.cache.values
        return _lib.KVCache.nbytes(theirs)


def _nbytes(self):
    out = _Lazy(0)
    out.cache = self
    return out


KVCache.nbytes = _nbytes
'''


def test_attn_libs_code_run_while_the_answer_is_encoded_gets_zero(library, tmp_path):
    """Gained before: an nbytes() that returns an int subclass whose ``__int__`` runs attn_lib's KVCache.nbytes
    ran it while the runner encoded the answer, after the watched call: full points, no flag. The runner now
    encodes the answer (and the arguments after the call) inside the watch."""
    text = (SOLVED / "kv_cache.py").read_text() + LAZY_INT
    result = _grade(_package(tmp_path, "kv_cache.py", text), library, "piece_KVCache")
    assert result["scores"]["piece_KVCache"] == 0, result
    assert "attn_lib.kv_cache.KVCache.nbytes" in _flagged(result), result


GQA_REPEAT_IN_A_THREAD = '''

import queue as _queue
import threading as _threading

_jobs, _done = _queue.Queue(), _queue.Queue()
_threading.Thread(target=lambda: [_done.put(_jobs.get()()) for _ in iter(int, 1)], daemon=True).start()


def grouped_query_attention(query, key, value, attn_mask=None, *, is_causal=False, scale=None):
    """The refused shortcut (every key/value head repeated G times), done by a worker thread."""
    G = query.shape[-3] // key.shape[-3]
    _jobs.put(lambda: (key.repeat_interleave(G, dim=-3), torch.repeat_interleave(value, G, dim=-3)))
    k, v = _done.get()
    E, L, S = query.shape[-1], query.shape[-2], key.shape[-2]
    scale = 1.0 / math.sqrt(E) if scale is None else scale
    scores = query @ k.transpose(-2, -1) * scale
    if is_causal:
        attn_mask = torch.ones(L, S, dtype=torch.bool).tril()
    if attn_mask is not None:
        scores = scores.masked_fill(~attn_mask, -math.inf) if attn_mask.dtype == torch.bool else scores + attn_mask
    m = scores.amax(-1, keepdim=True)
    m = torch.where(m == -math.inf, torch.zeros_like(m), m)
    e = (scores - m).exp()
    total = e.sum(-1, keepdim=True)
    w = e / torch.where(total == 0, torch.ones_like(total), total)
    return w @ v, w
'''


def test_a_refused_torch_function_called_by_another_thread_is_seen(library, tmp_path):
    """Gained before: a check's named torch watch is a TorchFunctionMode, which is per thread, so
    grouped_query_attention that had a worker thread repeat the key/value heads (the refused shortcut) got full
    points. The runner's profile hook now also names the watched torch functions that another thread calls (a C
    function, a Tensor method, a Python function), so the check's hint says what it called."""
    text = (SOLVED / "gqa.py").read_text() + GQA_REPEAT_IN_A_THREAD
    result = _grade(_package(tmp_path, "gqa.py", text), library, "piece_grouped_query_attention")
    assert result["scores"]["piece_grouped_query_attention"] == 0, result
    assert "repeat_interleave" in result["messages"]["piece_grouped_query_attention"], result


FORKED_CACHE = '''
import multiprocessing as _mp

import torch

import attn_lib.kv_cache as _lib

_ctx = _mp.get_context("fork")


def _child(conn, f, args):
    try:
        r = f(*args)
        conn.send((True, tuple(x.numpy() for x in r) if isinstance(r, tuple) else r))
    except BaseException as e:
        conn.send((False, e))
    conn.close()


def _there(f, *args):  # attn_lib's code runs in a forked child, whose reports never reach the grader
    a, b = _ctx.Pipe()
    p = _ctx.Process(target=_child, args=(b, f, args))
    p.start()
    ok, out = a.recv()
    p.join()
    if not ok:
        raise out
    return tuple(torch.from_numpy(x) for x in out) if isinstance(out, tuple) else out


class KVCache:
    def __init__(self):
        self.keys = self.values = None

    @property
    def seq_len(self):
        return 0 if self.keys is None else self.keys.shape[2]

    def __len__(self):
        return self.seq_len

    def _theirs(self):
        c = _lib.KVCache()
        c.keys, c.values = self.keys, self.values
        return c

    def nbytes(self):
        return _there(lambda s: s._theirs().nbytes(), self)

    def reset(self):
        self.keys = self.values = None

    def check(self, key, value):
        return _there(lambda s, k, v: s._theirs().check(k, v), self, key, value)

    def update(self, key, value):
        self.keys, self.values = _there(lambda s, k, v: s._theirs().update(k, v), self, key, value)
        return self.keys, self.values
'''


def test_attn_libs_cache_run_in_a_forked_process_gets_zero(library, tmp_path):
    """Gained before: a KVCache whose methods run attn_lib's in a forked child (multiprocessing, fork) got full
    points and no flag: the child's calls are watched in the child only. A process started during a watched call
    (the runner's audit hook: fork, subprocess, exec, spawn) now counts as the watch turned off, which fails a class
    piece and is flagged."""
    result = _grade(_package(tmp_path, "kv_cache.py", FORKED_CACHE), library, "piece_KVCache")
    assert result["scores"]["piece_KVCache"] == 0, result
    assert "cannot watch it (another process" in result["messages"]["piece_KVCache"], result
    assert "the grader's watch was turned off" in _flagged(result), result


def test_a_process_started_during_a_watched_call_turns_the_watch_off():
    """The runner's audit hook, without a sandbox (added to this process for good, as audit hooks are; it acts only
    during a watched call): a subprocess started inside the watch is noted, one started outside is not."""
    import subprocess
    import sys

    from classroom.runner import TURNED_OFF, _audit, _watch_reference_calls

    sys.addaudithook(_audit)
    used: list = []
    subprocess.run(["true"], check=True)
    with _watch_reference_calls(used):
        pass
    assert used == []
    with _watch_reference_calls(used):
        subprocess.run(["true"], check=True)
    assert used == [TURNED_OFF]


_MHA_ADDITIVE_MASK = '''        # every mask as one additive float bias (0 = may attend, -inf = may not), summed
        mask = None
        if is_causal or padding_mask is not None or attn_mask is not None:
            mask = torch.zeros(1, 1, L, S, dtype=q.dtype, device=q.device)
        if is_causal:
            mask = mask.masked_fill(~causal_mask(L, S, device=q.device), float("-inf"))
        if padding_mask is not None:
            pad = padding_mask.to(device=q.device, dtype=torch.bool)[:, None, None, :]
            mask = mask + torch.zeros(pad.shape, dtype=q.dtype, device=q.device).masked_fill(~pad, float("-inf"))
        if attn_mask is not None:
            m = attn_mask[:, None] if attn_mask.dim() == 3 else attn_mask
            if m.dtype == torch.bool:
                m = torch.zeros(m.shape, dtype=q.dtype, device=q.device).masked_fill(~m, float("-inf"))
            mask = mask + m.to(q.dtype)

'''


def _mha_additive_mask() -> str:
    text = (SOLVED / "mha.py").read_text()
    start = text.index("        keep = causal_mask(L, S")
    end = text.index("        heads, weights = scaled_dot_product_attention(")
    return text[:start] + _MHA_ADDITIVE_MASK + text[end:]


@pytest.mark.parametrize("piece, module, how", [
    ("piece_MultiHeadAttention", "mha.py", "additive_mask"),
    ("piece_BPETokenizer", "tokenization.py", "list_merges"),
])
def test_other_honest_classes_keep_their_points(library, tmp_path, piece, module, how):
    """A MultiHeadAttention that turns every mask (causal, padding, attn_mask bool or float) into one additive float
    bias, and a BPETokenizer whose trained merges are lists, not tuples: full points, no flag."""
    text = _mha_additive_mask() if how == "additive_mask" else \
        (SOLVED / module).read_text().replace("merges.append(best)", "merges.append(list(best))")
    assert text != (SOLVED / module).read_text()
    result = _grade(_package(tmp_path, module, text), library, piece)
    assert result["scores"][piece] == result["max"][piece], result
    assert result["flags"] == [], result


WRAPPERS = {
    # every attribute the class lacks read from a hidden attn_lib cache (__getattr__ on the class)
    "getattr_delegate": ("import attn_lib.kv_cache as _lib\n\n\nclass KVCache:\n    def __init__(self):\n"
                         "        object.__setattr__(self, '_theirs', _lib.KVCache())\n\n"
                         "    def __getattr__(self, name):\n        return getattr(self._theirs, name)\n\n"
                         "    def __len__(self):\n        return len(self._theirs)\n"),
    # attn_lib's methods set as class attributes at import, one through functools.partialmethod
    "class_attributes": ("import functools\n\nimport attn_lib.kv_cache as _lib\n\n\nclass KVCache:\n"
                         "    __init__ = _lib.KVCache.__init__\n    seq_len = _lib.KVCache.seq_len\n"
                         "    __len__ = _lib.KVCache.__len__\n    nbytes = _lib.KVCache.nbytes\n"
                         "    reset = _lib.KVCache.reset\n    check = functools.partialmethod(_lib.KVCache.check)\n"
                         "    update = functools.partialmethod(_lib.KVCache.update)\n"),
    # a descriptor that hands out attn_lib's bound methods, made by a metaclass
    "descriptor_metaclass": ("import attn_lib.kv_cache as _lib\n\n\nclass _Theirs:\n"
                             "    def __set_name__(self, owner, name):\n        self.name = name\n\n"
                             "    def __get__(self, obj, owner=None):\n"
                             "        return getattr(_lib.KVCache, self.name).__get__(obj, owner)\n\n\n"
                             "class _Meta(type):\n    def __new__(mcs, name, bases, ns):\n"
                             "        for m in ('__init__', 'check', 'update', 'nbytes', 'reset', '__len__'):\n"
                             "            ns[m] = _Theirs()\n            ns[m].name = m\n"
                             "        ns['seq_len'] = _lib.KVCache.seq_len\n"
                             "        return super().__new__(mcs, name, bases, ns)\n\n\n"
                             "class KVCache(metaclass=_Meta):\n    pass\n"),
}


@pytest.mark.parametrize("how", sorted(WRAPPERS))
def test_attn_libs_cache_behind_a_wrapper_gets_zero(library, tmp_path, how):
    """attn_lib's KVCache reached through ``__getattr__``, class attributes and ``functools.partialmethod``, or a
    descriptor a metaclass installs: whatever the path, attn_lib's code runs in the watched call (a frame of its
    file), so the piece gets 0 and the grader names what ran."""
    result = _grade(_package(tmp_path, "kv_cache.py", WRAPPERS[how]), library, "piece_KVCache")
    assert result["scores"]["piece_KVCache"] == 0, result
    assert "attn_lib.kv_cache.KVCache." in _flagged(result), result


def test_a_worker_thread_started_without_the_runners_profile_function_fails_the_piece(library, tmp_path):
    """Gained before: the worker thread above, started while ``threading._profile_hook`` was cleared (and put back),
    ran attn_lib's KVCache unwatched: full points, no flag, no grader token in the source. A thread that never ran
    the runner's profile function is now one the grader cannot watch: the watch counts as turned off."""
    text = WORKER_THREAD_CACHE.replace(
        "import attn_lib.kv_cache as _lib", "import attn_lib.kv_cache as _lib\n\n_previous = threading._profile_hook"
    ).replace("threading.Thread(target=_work, daemon=True).start()",
              "threading._profile_hook = None\nthreading.Thread(target=_work, daemon=True).start()\n"
              "threading._profile_hook = _previous")
    result = _grade(_package(tmp_path, "kv_cache.py", text), library, "piece_KVCache")
    assert result["scores"]["piece_KVCache"] == 0, result
    assert "cannot watch it" in result["messages"]["piece_KVCache"], result
    assert "_profile_hook" in _flagged(result), result  # and the source is a tripwire's (GRADER_TOKENS)
