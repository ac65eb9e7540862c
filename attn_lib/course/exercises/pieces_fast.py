"""The checks of the learner's pieces of notebooks 08 and 09 (issue 34): the KV cache, grouped-query attention,
the online-softmax tile step, the merge of two partial results and the tiled forward.

Each ``check_piece_*`` takes the learner's object and returns a :class:`CheckResult`; the reference is attn_lib's own
(proven equal to torch and transformers in tests/), held in a private dict so that ``use_mine`` (which swaps
attn_lib's objects by identity in every attn_lib module) never swaps a check's reference. Two guards refuse the
loopholes: a ``TorchFunctionMode`` sees calls of torch functions (torch's scaled_dot_product_attention, repeat),
and a profile hook (``sys.setprofile``) sees calls of attn_lib's own implementation of the piece, however imported.
"""

from __future__ import annotations

import importlib.util
import math
import sys

import torch
from torch.overrides import TorchFunctionMode

import attn_lib.gqa as _gqa
import attn_lib.kv_cache as _kv
import attn_lib.mha as _mha
import attn_lib.tiled as _tiled
from attn_lib import attention as _attention
from attn_lib.course.exercises import tiled as _ex_tiled
from attn_lib.course.exercises._core import HINT_SCALE_ZERO, _LearnerError
from attn_lib.course.exercises._core import CheckResult, Mismatch, call, expect_close, fresh_generator, run_check
from attn_lib.course.exercises.pieces import Piece

__all__ = ["PIECES", "check_piece_repeat_kv", "check_piece_grouped_query_attention", "check_piece_kv_cache",
           "check_piece_online_softmax_update", "check_piece_merge_states", "check_piece_tiled_attention",
           "check_piece_flash_forward"]

# attn_lib's objects, captured at import (a dict: use_mine swaps module attributes, not a dict's values)
_REF = {"repeat_kv": _gqa.repeat_kv, "grouped_query_attention": _gqa.grouped_query_attention,
        "KVCache": _kv.KVCache, "KVCacheProtocol": _kv.KVCacheProtocol, "MultiHeadAttention": _mha.MultiHeadAttention,
        "online_softmax_update": _tiled.online_softmax_update, "tiled_attention": _tiled.tiled_attention,
        "sdpa": _attention.scaled_dot_product_attention}
# the code objects of attn_lib's implementations: running one of them inside the learner's piece is the loophole
_LIBRARY_CODE = {
    "repeat_kv": {_gqa.repeat_kv.__code__: "attn_lib.gqa.repeat_kv"},
    "grouped_query_attention": {_gqa.grouped_query_attention.__code__: "attn_lib.gqa.grouped_query_attention",
                                _attention._sdpa.__code__: "attn_lib's scaled_dot_product_attention",
                                _gqa.repeat_kv.__code__: "attn_lib.gqa.repeat_kv"},
    "online_softmax_update": {_tiled.online_softmax_update.__code__: "attn_lib.tiled.online_softmax_update",
                              _tiled._online_step.__code__: "attn_lib.tiled._online_step"},
    "merge_states": {_ex_tiled.merge_states_reference.__code__: "the course's merge_states_reference"},
    "tiled_attention": {_tiled.tiled_attention.__code__: "attn_lib.tiled.tiled_attention",
                        _tiled._tiled_forward.__code__: "attn_lib.tiled's tiled forward",
                        _attention._sdpa.__code__: "attn_lib's scaled_dot_product_attention"},
}
_F = torch.nn.functional
_SDPA = {_F.scaled_dot_product_attention: "torch.nn.functional.scaled_dot_product_attention"}
_REPEATS = {torch.repeat_interleave: "torch.repeat_interleave", torch.Tensor.repeat_interleave:
            "Tensor.repeat_interleave", torch.Tensor.repeat: "Tensor.repeat"}
_MATMULS = (torch.matmul, torch.Tensor.matmul, torch.Tensor.__matmul__, torch.bmm, torch.Tensor.bmm, torch.baddbmm,
            torch.einsum, torch.Tensor.__rmatmul__)


class _Guard(TorchFunctionMode):
    """Records the watched torch functions (name) called under it and, with ``keys`` = S, whether a matrix product
    gave a result with a dimension of S among its last two (scores against every key at once); changes nothing."""

    def __init__(self, watched: dict, keys: int = 0):
        super().__init__()
        self.watched, self.keys, self.used, self.whole = watched, keys, [], False

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        name = self.watched.get(func)
        if name is not None and name not in self.used:
            self.used.append(name)
        if self.keys and func in _MATMULS and isinstance(out, torch.Tensor) and out.dim() >= 2:
            self.whole = self.whole or self.keys in out.shape[-2:]
        return out


def _watching(fn, piece: str, guard: _Guard, used: list, seen: dict | None = None, **kwargs):
    """``fn`` wrapped: run under ``guard`` (torch functions) and a profile hook that appends to ``used`` the name of
    each of attn_lib's implementations of ``piece`` it runs, however the learner imported it; with ``seen``
    (code object -> False), sets the entry of each of those code objects that ran to True."""
    library = _LIBRARY_CODE.get(piece, {})

    def profile(frame, event, arg):
        if event == "call":
            name = library.get(frame.f_code)
            if name is not None and name not in used:
                used.append(name)
            if seen is not None and frame.f_code in seen:
                seen[frame.f_code] = True

    def run(*args):
        if callable(getattr(fn, "watched_call", None)):  # the grader's stand-in for a function in the sandbox
            return _watched_remotely(fn, args, kwargs, guard, used, seen,
                                     {**library, **_LIBRARY_MODULES.get(piece, {})})
        previous = sys.getprofile()
        sys.setprofile(profile)
        try:
            with guard:
                return fn(*args, **kwargs)
        finally:
            sys.setprofile(previous)

    return run


def _torch_name(func) -> str | None:
    """The dotted name of a watched torch function: ``torch.matmul``, ``torch.Tensor.exp``,
    ``torch.nn.functional.softmax``."""
    for prefix, space in (("torch.nn.functional", _F), ("torch.Tensor", torch.Tensor), ("torch", torch)):
        name = getattr(func, "__name__", None)
        if name is not None and getattr(space, name, None) is func:
            return f"{prefix}.{name}"
    name = getattr(func, "__name__", "") or ""
    if name.startswith("fft_") and getattr(torch.fft, name[4:], None) is func:  # torch.fft.rfft is named fft_rfft
        return f"torch.fft.{name[4:]}"
    return None


def _code_name(code) -> str | None:
    """The dotted name of the function whose code object is ``code`` (module + qualified name), found among the
    imported modules by its file: ``triton.runtime.interpreter.GridExecutor.__call__``."""
    for module in list(sys.modules.values()):
        if getattr(module, "__file__", None) == code.co_filename:
            qualname = getattr(code, "co_qualname", None)  # Python 3.11+; before it, the function's __qualname__
            for value in [] if qualname else list(vars(module).values()):
                members = vars(value).values() if isinstance(value, type) else []
                for f in [value, getattr(value, "fn", None), *members]:  # a function, a @triton.jit's, a method
                    if getattr(f, "__code__", None) is code:
                        qualname = f.__qualname__
            return f"{module.__name__}.{qualname or code.co_name}"
    return None


# in the sandbox, any entry into these modules of attn_lib counts as running the library's implementation of the piece
# ("attn_lib.flash_kernels.*": its kernels, or kernel_source's text of them to exec); make check-mine watches code only
_LIBRARY_MODULES = {"flash_forward": {"attn_lib.flash.*": "attn_lib.flash's code",
                                      "attn_lib.flash_kernels.*": "attn_lib.flash_kernels' code"}}


def _remote_watch(guard: _Guard, seen: dict | None, library: dict) -> tuple[dict, dict]:
    """What a check watches, as names the sandbox's runner resolves (classroom/runner.py's ``_NamedWatch``):
    ({"torch": [...], "code": [...], "library": [...]}, name -> (kind, what it stands for here)). ``library``: code
    objects, or names ``"module.*"`` (any entry into that module of attn_lib), to their labels."""
    back: dict = {}
    for func, label in guard.watched.items():
        name = _torch_name(func)
        if name is not None:
            back[name] = ("torch", label)
    for code in seen or {}:
        name = _code_name(code)
        if name is not None:
            back[name] = ("code", code)
    for code, label in library.items():
        name = code if isinstance(code, str) else _code_name(code)
        if name is not None:
            back.setdefault(name, ("library", label))
    kinds = {k: sorted(n for n, (kind, _) in back.items() if kind == k) for k in ("torch", "code", "library")}
    return kinds, back


def _watched_remotely(fn, args, kwargs, guard: _Guard, used: list, seen: dict | None, library: dict):
    """A function that runs in the grader's sandbox (classroom/pieces.py): the same watches as :func:`_watching`,
    kept by the sandbox's runner during the call and reported by name; the names that fired are recorded here as
    the local watches record them (``used``, ``guard.used``, ``seen``). The torch functions and code are watched
    there when the check's ``sandbox_watch`` named them in the runner's plan; attn_lib's code always (the runner
    reports every entry into it). Not there: ``_Guard``'s whole-score-matrix test (``keys``)."""
    watch, back = _remote_watch(guard, seen, library)
    result, fired = fn.watched_call(watch, *args, **kwargs)
    if fired is None:
        raise Mismatch("the grader's watch of your function was turned off during the call (sys.setprofile): "
                       "the check cannot tell what ran, so it cannot pass.")
    for name in sorted(fired):
        kind, what = back[name]
        if kind == "code" and seen is not None:
            seen[what] = True
        elif kind == "torch" and what not in guard.used:
            guard.used.append(what)
        elif kind == "library" and what not in used:
            used.append(what)
    return result


def sandbox_watch_flash() -> dict:
    """What :func:`check_piece_flash_forward` watches in the grader's sandbox (classroom/grade.py's
    ``sandbox_watches`` puts it in the runner's plan): Triton's launcher, the torch functions of attention, and
    Triton's interpreter on (``TRITON_INTERPRET=1``)."""
    from triton.runtime import interpreter as _interp

    watch, _ = _remote_watch(_Guard(_NOT_IN_TORCH), {_interp.GridExecutor.__call__.__code__: False}, {})
    return {**watch, "interpret_triton": True}


def _refusal(piece: str, used: list) -> str:
    return (f"your {piece} called {', '.join(used)}: the piece is the one you write, so compute it yourself "
            "(matmul, exp, max, sum, reshape).")


def _guarded(fn, inputs: dict, piece: str, *, torch_watched: dict | None = None, guard: _Guard | None = None,
             seen: dict | None = None, **kwargs):
    """``call(fn, inputs)`` with keyword arguments, refusing calls of attn_lib's implementation of ``piece`` and of
    the ``torch_watched`` torch functions (or those of ``guard``); ``seen`` as :func:`_watching`."""
    guard, used = guard or _Guard(torch_watched or {}), []
    got = call(_watching(fn, piece, guard, used, seen, **kwargs), inputs)
    if used or guard.used:
        raise Mismatch(_refusal(piece, used + guard.used))
    return got


def _randn(g, *shape, dtype=torch.float64):
    return torch.randn(*shape, generator=g, dtype=dtype)


def _pair(got, what: str):
    if not isinstance(got, (tuple, list)) or len(got) != 2:
        raise Mismatch(f"{what} must return a pair, as attn_lib's does; got {type(got).__name__}.")
    return got


# ----------------------------------------------------------------------------------------------------- 08
def check_piece_repeat_kv(fn) -> CheckResult:
    """my_attn.gqa.repeat_kv against attn_lib's (= HuggingFace's repeat_kv): 3-, 4- and 5-D tensors, n_rep 1 to 4.

    It fails when the learner's code calls attn_lib's repeat_kv.
    Raises: nothing; a wrong answer is a failed CheckResult with a hint (cycling copies, the wrong axis).
    """
    def trials():
        cases = [((2, 4, 5, 3), 3), ((1, 2, 3, 4), 1), ((3, 2, 2, 2, 5), 2), ((2, 3, 4, 2), 4), ((2, 6, 3), 2)]
        for t, (shape, n) in enumerate(cases):
            x = _randn(fresh_generator("repeat_kv", t), *shape)
            want = _REF["repeat_kv"](x, n)
            got = _guarded(fn, {"x": x, "n_rep": n}, "repeat_kv")
            reps = [1] * x.dim()
            reps[-3] = n
            expect_close(got, want, what=f"repeat_kv(x of shape {shape}, n_rep={n})", atol=0, rtol=0,
                         dtype=torch.float64, wrong_answers=[
                             (x.repeat(*reps), "the copies cycle through the heads (h0 h1 h0 h1): key/value head h "
                                               "must serve the CONSECUTIVE query heads h·n_rep ... h·n_rep + n_rep - 1 "
                                               "(h0 h0 h1 h1), as repeat_interleave along the heads does."),
                             (x.repeat_interleave(n, dim=-2), "you repeated along the sequence axis (S): repeat the "
                                                              "heads, dim -3 of (..., Hkv, S, D).")])
        return len(cases)

    return run_check("repeat_kv", trials)


def check_piece_grouped_query_attention(fn) -> CheckResult:
    """my_attn.gqa.grouped_query_attention against attn_lib's (= torch's SDPA with enable_gqa) in float64: no mask,
    bool, float and blocked-row masks, is_causal with L < S, a scale, scale=0.0 (not the default), MQA, plain MHA,
    a decoding step.

    It fails when the learner's code calls torch's or attn_lib's scaled_dot_product_attention, attn_lib's
    grouped_query_attention, or repeats the keys and values (repeat, repeat_interleave, attn_lib's repeat_kv).
    Raises: nothing; a wrong answer is a failed CheckResult with a hint.
    """
    watched = {**_SDPA, **_REPEATS}

    def trials():
        #        (B, Hq, Hkv, L, S, case)
        cases = [(2, 4, 2, 5, 5, "none"), (2, 6, 3, 4, 6, "bool"), (1, 4, 2, 3, 5, "float"),
                 (2, 4, 2, 3, 6, "causal"), (1, 4, 1, 4, 4, "scale"), (2, 3, 3, 4, 5, "bool"),
                 (2, 8, 2, 1, 7, "decode"), (1, 4, 2, 3, 4, "blocked"), (1, 4, 2, 3, 5, "scale 0")]
        for t, (B, Hq, Hkv, L, S, case) in enumerate(cases):
            g = fresh_generator("grouped_query_attention", t)
            q, k, v = _randn(g, B, Hq, L, 8), _randn(g, B, Hkv, S, 8), _randn(g, B, Hkv, S, 5)
            mask, kw = None, {}
            if case == "bool":
                mask = torch.rand(B, 1, L, S, generator=g) < 0.6
                mask[..., 0] = True
            elif case == "float":
                mask = _randn(g, L, S)
            elif case == "decode":
                mask = torch.ones(L, S, dtype=torch.bool).tril(S - L)  # bottom-right: the new token sees the cache
            elif case == "blocked":
                mask = torch.ones(B, Hq, L, S, dtype=torch.bool)
                mask[0, 1, 2] = False
            kw = {"is_causal": case == "causal", "scale": {"scale": 0.3, "scale 0": 0.0}.get(case)}
            if kw["scale"] == 0.0:  # attn_lib refuses 0.0 (ValueError); torch's scores are all 0: Q·0 scaled by 1
                want = _REF["grouped_query_attention"](q * 0, k, v, mask, is_causal=kw["is_causal"], scale=1.0)
            else:
                want = _REF["grouped_query_attention"](q, k, v, mask, **kw)
            try:
                got = _pair(_guarded(fn, {"query": q, "key": k, "value": v, "attn_mask": mask},
                                     "grouped_query_attention", torch_watched=watched, **kw), "grouped_query_attention")
            except _LearnerError as e:
                if kw["scale"] == 0.0 and isinstance(e.error, ValueError):
                    continue  # refusing scale=0.0, as attn_lib does, is right too; using the default is not
                raise
            what = f"case {t + 1} ({case}: {Hq} query heads, {Hkv} key/value heads, L={L}, S={S})"
            G = Hq // Hkv
            cycling = ("query head j reads key/value head j // G (G = Hq / Hkv query heads per group, consecutive): "
                       "the groups are (0..G-1), (G..2G-1), ..., not j % Hkv.")
            wrong = []
            if G > 1 and kw["scale"] != 0.0:
                cycled = _REF["sdpa"](q, k.repeat(1, G, 1, 1), v.repeat(1, G, 1, 1), mask, **kw)
                wrong.append((cycled[1], cycling))
            if kw["scale"] == 0.0:
                wrong.insert(0, (_REF["grouped_query_attention"](q, k, v, mask)[1], HINT_SCALE_ZERO))
            wrong.append((_REF["sdpa"](q, k, v, mask, is_causal=kw["is_causal"], scale=1.0, enable_gqa=True)[1],
                          "the scores are not scaled: multiply Q·Kᵀ by scale (1/sqrt(E) when scale is None)."))
            if case == "causal":
                wrong.append((_REF["sdpa"](q, k, v, torch.ones(L, S, dtype=torch.bool).tril(S - L),
                                           enable_gqa=True)[1],
                              "is_causal is top-left, as torch's: query i sees keys 0..i (not the bottom-right "
                              "triangle, which a KV cache passes as attn_mask)."))
            if case == "blocked" and not bool(torch.isfinite(torch.as_tensor(got[0])).all()):
                raise Mismatch("a query whose keys are all masked gave NaN: its weights and output must be 0.")
            expect_close(got[1], want[1], what=f"the weights of {what}", atol=1e-9, rtol=1e-7, dtype=torch.float64,
                         wrong_answers=wrong)
            expect_close(got[0], want[0], what=f"the output of {what}", atol=1e-9, rtol=1e-7, dtype=torch.float64)
        return len(cases)

    return run_check("grouped_query_attention", trials)


def _do(method):
    """Call a method of the learner's object that returns nothing (check, reset), as ``call`` would."""
    call(lambda: (method(), True)[1], {})


def _expect_refused(run, error: type, hint: str) -> None:
    """``run()`` must raise ``error`` (TypeError or ValueError); anything else is a Mismatch with ``hint``."""
    try:
        run()
    except NotImplementedError:
        raise
    except error:
        return
    except Exception as e:  # noqa: BLE001 - the learner's code raised the wrong kind of error
        raise Mismatch(f"{hint} It raised {type(e).__name__} ({e}); raise {error.__name__}.") from None
    raise Mismatch(f"{hint} It raised nothing: a silently wrong cache is worse than an error.")


def check_piece_kv_cache(cls) -> CheckResult:
    """my_attn.kv_cache.KVCache against attn_lib's: empty state, chunks 4 + 1 + 1 + 3 appended in order, seq_len,
    len, nbytes, reset; check() changes nothing; mismatching dtype (TypeError) or shapes (ValueError) refused;
    and attn_lib's MultiHeadAttention (GQA, RoPE) decoding with it in chunks and token by token equals its full
    causal forward.

    Raises: nothing; a wrong answer is a failed CheckResult with a hint (axis, returning only the new keys, ...).
    """
    def trials():
        g = fresh_generator("KVCache", 0)
        cache = call(lambda: cls(), {})
        if not isinstance(cache, _REF["KVCacheProtocol"]):
            raise Mismatch("KVCache() must have seq_len, check, update, nbytes and reset "
                           "(attn_lib.kv_cache.KVCacheProtocol), so that MultiHeadAttention accepts it.")
        if call(lambda: cache.seq_len, {}) != 0 or call(lambda: len(cache), {}) != 0 or call(cache.nbytes, {}) != 0:
            raise Mismatch("an empty cache has seq_len 0, len 0 and nbytes() 0.")
        if cache.keys is not None or cache.values is not None:
            raise Mismatch("an empty cache has keys = values = None.")
        k_all, v_all = _randn(g, 2, 3, 9, 4), _randn(g, 2, 3, 9, 6)
        start = 0
        for n in (4, 1, 1, 3):
            k, v = k_all[:, :, start:start + n], v_all[:, :, start:start + n]
            call(lambda k_, v_: (cache.check(k_, v_), True)[1], {"key": k, "value": v})
            if call(lambda: cache.seq_len, {}) != start:
                raise Mismatch("check() must change nothing: only update() appends.")
            got = _pair(call(lambda k_, v_: cache.update(k_, v_), {"key": k, "value": v}), "update")
            start += n
            want_k, want_v = k_all[:, :, :start], v_all[:, :, :start]
            keys = torch.as_tensor(got[0])
            if start > n and keys.shape == k.shape and torch.equal(keys, k):
                raise Mismatch("update() returned only the new keys: it returns everything cached so far "
                               "(B, Hkv, S + S_new, E), which attention then attends over.")
            if keys.shape != want_k.shape and keys.numel() == want_k.numel():
                raise Mismatch(f"the keys after {start} positions have shape {tuple(keys.shape)}; expected "
                               f"{tuple(want_k.shape)}: append the new positions after the cached ones along the "
                               "sequence axis, dim 2 of (B, Hkv, S, E): torch.cat([cached, new], dim=2).")
            expect_close(keys, want_k, what=f"the keys after {start} positions", atol=0, rtol=0, dtype=torch.float64)
            expect_close(got[1], want_v, what=f"the values after {start} positions", atol=0, rtol=0,
                         dtype=torch.float64)
            if call(lambda: cache.seq_len, {}) != start or call(lambda: len(cache), {}) != start:
                raise Mismatch(f"after {start} positions seq_len (and len) must be {start}, the number of cached "
                               "positions (not the number of update calls).")
        want_bytes = k_all.numel() * 8 + v_all.numel() * 8
        if call(cache.nbytes, {}) != want_bytes:
            raise Mismatch(f"nbytes() must be {want_bytes}: keys' and values' numel × element_size (8 bytes each "
                           "in float64), both of them.")
        _expect_refused(lambda: cache.update(k_all[:, :, :1].float(), v_all[:, :, :1].float()), TypeError,
                        "update() with float32 keys after float64 ones must be refused (no silent promotion).")
        _expect_refused(lambda: cache.check(k_all[:, :2, :1], v_all[:, :2, :1]), ValueError,
                        "check() with 2 key/value heads after 3 must be refused (one cache per layer and batch).")
        _expect_refused(lambda: cache.update(k_all[:, :, :2], v_all[:, :, :1]), ValueError,
                        "update() with 2 new keys but 1 new value must be refused.")
        if call(lambda: cache.seq_len, {}) != 9:
            raise Mismatch("a refused update must leave the cache unchanged.")
        _do(cache.reset)
        if call(lambda: cache.seq_len, {}) != 0 or cache.keys is not None:
            raise Mismatch("reset() empties the cache: seq_len 0, keys None.")
        # decoding with attn_lib's layer: chunks, and token by token, equal the full forward
        torch.manual_seed(0)
        layer = _REF["MultiHeadAttention"](32, 4, num_kv_heads=2, rope_base=10000.0).double().eval()
        x = _randn(g, 2, 7, 32)
        with torch.no_grad():
            full = layer(x, is_causal=True)[0]
            for sizes in ((3, 1, 3), (1,) * 7):
                fresh, outs, at = call(lambda: cls(), {}), [], 0
                for n in sizes:
                    outs.append(call(lambda x_: layer(x_, is_causal=True, kv_cache=fresh)[0],
                                     {"x": x[:, at:at + n]}))
                    at += n
                expect_close(torch.cat(outs, dim=1), full, what=f"MultiHeadAttention decoding in chunks {sizes} "
                             "with your cache, against its full causal forward", atol=1e-10, rtol=1e-8)
        return 4 + 3 + 2

    return run_check("KVCache", trials, shape_mistakes=(
        "Known shape mistakes: the new positions go after the cached ones along the sequence axis, dim 2 of "
        "(B, Hkv, S, E): torch.cat([cached, new], dim=2); along another axis, chunks of different lengths do not fit."))


# ----------------------------------------------------------------------------------------------------- 09
def _then_refuse(check, fn, piece: str) -> CheckResult:
    """Run the notebook's own exercise check on ``fn`` guarded against attn_lib's implementation of ``piece``."""
    used: list[str] = []
    result = check(_watching(fn, piece, _Guard({}), used))
    if used:
        return CheckResult(piece, False, f"❌ {piece}: not yet. {_refusal(piece, used)}")
    return CheckResult(piece, result.passed, result.message.replace(result.name, piece, 1))


def check_piece_online_softmax_update(fn) -> CheckResult:
    """my_attn.tiled.online_softmax_update: notebook 09's exercise check (blocks that raise the max, stay below it,
    a first block with a fully masked row; hints for each rescaling mistake), refusing attn_lib's own update.

    Raises: nothing; a wrong answer is a failed CheckResult with a hint.
    """
    # the exercise check's reference is a module attribute, which use_mine may have pointed at the learner's piece
    saved, _ex_tiled.online_softmax_update = _ex_tiled.online_softmax_update, _REF["online_softmax_update"]
    try:
        return _then_refuse(_ex_tiled.check_online_softmax_update, fn, "online_softmax_update")
    finally:
        _ex_tiled.online_softmax_update = saved


def check_piece_merge_states(fn) -> CheckResult:
    """my_attn.tiled.merge_states: notebook 09's exercise check (the larger max in a, in b, mixed; hints for the
    rescaling mistakes), then a row where both states saw only masked keys: (-inf, 0, 0), not NaN.

    Raises: nothing; a wrong answer is a failed CheckResult with a hint.
    """
    result = _then_refuse(_ex_tiled.check_merge_states, fn, "merge_states")
    if not result.passed:
        return result

    def trials():
        inf = math.inf
        f64 = torch.float64
        m_a, l_a, acc_a = (torch.tensor([-inf, 1.0], dtype=f64), torch.tensor([0.0, 2.0], dtype=f64),
                           torch.tensor([[0.0, 0.0], [1.0, -1.0]], dtype=f64))
        m_b, l_b, acc_b = torch.tensor([-inf, -inf], dtype=f64), torch.zeros(2, dtype=f64), torch.zeros(2, 2, dtype=f64)
        got = _guarded(fn, dict(zip(("m_a", "l_a", "acc_a", "m_b", "l_b", "acc_b"),
                                    (m_a, l_a, acc_a, m_b, l_b, acc_b))), "merge_states")
        got = tuple(torch.as_tensor(t) for t in got)
        if any(bool(torch.isnan(t).any()) for t in got):
            raise Mismatch("two states that saw only masked keys (m = -inf, l = 0) merged into NaN: exp(-inf - (-inf)) "
                           "is NaN. Where m = max(m_a, m_b) is -inf, subtract 0 instead (l and acc stay 0).")
        expect_close(torch.cat([got[0], got[1], got[2].flatten()]),
                     torch.tensor([-inf, 1.0, 0.0, 2.0, 0, 0, 1, -1], dtype=torch.float64),
                     what="the merge of a row with nothing visible and a row whose b state is empty", atol=1e-12)
        return 1

    extra = run_check("merge_states", trials)
    return extra if not extra.passed else CheckResult("merge_states", True, result.message)


def check_piece_tiled_attention(fn) -> CheckResult:
    """my_attn.tiled.tiled_attention against attn_lib's (= torch's SDPA) in float64, on the subset of options the
    stub's docstring names: ragged tiles, is_causal top-left and bottom-right, a bool padding mask with GQA,
    a scale with 1 × 1 tiles, scale=0.0 (not the default), rows that see no key (output 0, lse -inf), return_lse.

    It fails when a matrix product builds more than ``block_k`` scores of a row (the (L, S) matrix), and when the
    learner's code calls torch's or attn_lib's attention.
    Raises: nothing; a wrong answer is a failed CheckResult with a hint.
    """
    def trials():
        #        (B, H, Hkv, L, S, block_q, block_k, options)
        # L, S, E = 3 and Ev = 5 all differ, so that a product with S among its last two dims is a row of all scores
        cases = [(2, 2, 2, 8, 9, 4, 4, {}), (1, 2, 2, 5, 9, 2, 3, {"is_causal": True}),
                 (2, 2, 2, 3, 10, 2, 4, {"is_causal": True, "causal_align": "bottom_right"}),
                 (2, 4, 2, 6, 7, 4, 3, {"mask": True, "is_causal": True, "causal_align": "bottom_right",
                                        "enable_gqa": True}),
                 (1, 3, 3, 4, 6, 1, 1, {"scale": 0.5}), (1, 2, 2, 6, 4, 3, 2, {"is_causal": True,
                                                                                "causal_align": "bottom_right"}),
                 (2, 1, 1, 5, 6, 256, 512, {}), (1, 2, 2, 4, 6, 2, 2, {"scale": 0.0})]
        for t, (B, H, Hkv, L, S, bq, bk, opts) in enumerate(cases):
            g = fresh_generator("tiled_attention", t)
            q, k, v = _randn(g, B, H, L, 3), _randn(g, B, Hkv, S, 3), _randn(g, B, Hkv, S, 5)
            kw = {key: value for key, value in opts.items() if key != "mask"}
            if opts.get("mask"):
                lengths = torch.tensor([S, S - 2])
                kw["attn_mask"] = (torch.arange(S)[None, :] < lengths[:, None])[:, None, None, :]  # (B, 1, 1, S)
            if kw.get("scale") == 0.0:  # attn_lib refuses 0.0 (ValueError); torch's scores are all 0: Q·0 by 1
                want = _REF["tiled_attention"](q * 0, k, v, return_lse=True, **{**kw, "scale": 1.0})
            else:
                want = _REF["tiled_attention"](q, k, v, return_lse=True, **kw)
            guard = _Guard({**_SDPA}, keys=S if S > bk else 0)
            try:
                got = _pair(_guarded(fn, {"query": q, "key": k, "value": v}, "tiled_attention", guard=guard,
                                     return_lse=True, block_q=bq, block_k=bk, **kw),
                            "tiled_attention(..., return_lse=True)")
            except _LearnerError as e:
                if kw.get("scale") == 0.0 and isinstance(e.error, ValueError):
                    continue  # refusing scale=0.0, as attn_lib does, is right too; using the default is not
                raise
            what = f"case {t + 1} (L={L}, S={S}, blocks {bq} × {bk}, {kw or 'no options'})"
            if guard.whole:
                raise Mismatch(f"{what}: a matrix product gave the scores against all S = {S} keys at once, more "
                               f"than block_k = {bk}: compute one (block_q, block_k) tile of scores at a time, never "
                               "the (L, S) matrix.")
            if not bool(torch.isfinite(torch.as_tensor(got[0])).all()):
                raise Mismatch(f"{what}: the output has NaN or inf. A row that sees no key (all its scores -inf) "
                               "keeps m = -inf: subtract 0 instead of m there, and give it output 0 (l = 0).")
            wrong = []
            if kw.get("causal_align") == "bottom_right":
                wrong.append((_REF["tiled_attention"](q, k, v, **{**kw, "causal_align": "top_left"}),
                              "that is the top-left triangle: with causal_align='bottom_right' query i sees keys "
                              "0 .. i + S - L (the L queries are the last L of S positions)."))
            if kw.get("enable_gqa"):
                G = H // Hkv
                rep = {**kw, "enable_gqa": False}
                wrong.append((_REF["tiled_attention"](q, k.repeat(1, G, 1, 1), v.repeat(1, G, 1, 1), **rep),
                              "query head h reads key/value head h // G (consecutive groups), not h % Hkv."))
            if kw.get("scale") == 0.0:
                wrong.append((_REF["tiled_attention"](q, k, v, **{**kw, "scale": None}), HINT_SCALE_ZERO))
            else:
                wrong.append((_REF["tiled_attention"](q, k, v, **{**kw, "scale": 1.0}),
                              "the scores are not scaled: multiply q·kᵀ by scale (1/sqrt(E) when None)."))
            expect_close(got[0], want[0], what=f"the output of {what}", atol=1e-10, rtol=1e-8, dtype=torch.float64,
                         wrong_answers=wrong)
            expect_close(got[1], want[1], what=f"the log-sum-exp of {what}", atol=1e-10, rtol=1e-8,
                         dtype=torch.float64, wrong_answers=[
                             (want[1] / math.log(2), "the log-sum-exp is in natural log: m + log(l), not log2.")])
        # without return_lse: the output alone
        g = fresh_generator("tiled_attention", len(cases))
        q, k, v = _randn(g, 1, 2, 4, 3), _randn(g, 1, 2, 6, 3), _randn(g, 1, 2, 6, 5)
        out = _guarded(fn, {"query": q, "key": k, "value": v}, "tiled_attention", torch_watched=_SDPA,
                       block_q=2, block_k=2)
        if isinstance(out, (tuple, list)):
            raise Mismatch("without return_lse=True return the output alone, not a tuple.")
        expect_close(out, _REF["tiled_attention"](q, k, v), what="the output without return_lse", atol=1e-10,
                     rtol=1e-8, dtype=torch.float64)
        return len(cases) + 1

    return run_check("tiled_attention", trials)


# ----------------------------------------------------------------------------------------------------- 09, Triton
def _flash_library_code() -> dict:
    from attn_lib import flash as _flash
    from attn_lib import flash_kernels as _fk

    code = {_flash.flash_attention.__code__: "attn_lib.flash.flash_attention", _flash._forward.__code__:
            "attn_lib.flash's forward", _fk._kernel("forward").fn.__code__: "attn_lib's Triton forward kernel"}
    return {**code, **_LIBRARY_CODE["tiled_attention"]}


_NOT_IN_TORCH = {**_SDPA, **{f: "a torch matrix product" for f in _MATMULS},
                 torch.softmax: "torch.softmax", torch.Tensor.softmax: "Tensor.softmax", _F.softmax: "F.softmax",
                 torch.exp: "torch.exp", torch.Tensor.exp: "Tensor.exp", torch.logsumexp: "torch.logsumexp",
                 torch.Tensor.logsumexp: "Tensor.logsumexp"}


def check_piece_flash_forward(fn) -> CheckResult:
    """my_attn.flash.flash_forward, the learner's FlashAttention-2 forward kernel in Triton, run by Triton's
    interpreter on CPU float32 tensors, against torch's scaled_dot_product_attention (and the log-sum-exp of the
    scaled scores) computed in float64: ragged tiles, L < S and L > S, is_causal (top-left) with L = S and L != S,
    a given scale, scale=0.0 (not the default), head_dim 16 and 32, tiles of 16 and 32. Tolerance 1e-4 (float32
    accumulation).

    It fails when no Triton kernel runs during the call (Triton's ``GridExecutor`` is watched), when the launcher
    computes attention in torch (matrix products, exp, softmax) or calls attn_lib's kernels, flash_attention or
    tiled_attention.
    Raises: nothing; a wrong answer is a failed CheckResult with a hint.
    """
    from triton.runtime import interpreter as _interp

    grid_call = _interp.GridExecutor.__call__.__code__
    _LIBRARY_CODE["flash_forward"] = _flash_library_code()

    def trials():
        #        (B, H, L, S, D, is_causal, scale, block_m, block_n)
        cases = [(1, 2, 20, 20, 16, False, None, 16, 16), (2, 1, 33, 17, 16, False, 0.3, 16, 16),
                 (1, 2, 24, 24, 32, True, None, 16, 16), (1, 1, 5, 40, 16, True, None, 16, 32),
                 (1, 1, 37, 21, 16, True, None, 32, 16), (1, 1, 8, 12, 16, False, 0.0, 16, 16)]
        for t, (B, H, L, S, D, causal, scale, bm, bn) in enumerate(cases):
            g = fresh_generator("flash_forward", t)
            q, k, v = (_randn(g, B, H, n, D, dtype=torch.float32) for n in (L, S, S))
            seen = {grid_call: False}
            got = _pair(_guarded(fn, {"query": q, "key": k, "value": v}, "flash_forward",
                                 torch_watched=_NOT_IN_TORCH, seen=seen, is_causal=causal, scale=scale, block_m=bm,
                                 block_n=bn), "flash_forward")
            if not seen[grid_call]:
                raise Mismatch("no Triton kernel ran: flash_forward must launch your @triton.jit kernel "
                               "(launch(kernel, grid, ...)); attention in torch is tiled_attention's piece.")
            q64, k64, v64 = q.double(), k.double(), v.double()
            sc = 1 / math.sqrt(D) if scale is None else scale
            logits = q64 @ k64.transpose(-2, -1) * sc                                       # (B, H, L, S)
            allowed = torch.ones(L, S, dtype=torch.bool).tril() if causal else torch.ones(L, S, dtype=torch.bool)
            logits = logits.masked_fill(~allowed, -math.inf)
            want_lse = logits.logsumexp(-1)
            want = torch.exp(logits - want_lse[..., None]).nan_to_num(0.0) @ v64
            torchs = _F.scaled_dot_product_attention(q64, k64, v64, is_causal=causal, scale=scale)
            rows = allowed.any(-1)  # torch's gives NaN on a row that sees no key; there the course's rule is 0
            assert torch.allclose(want[..., rows, :], torchs[..., rows, :], atol=1e-12)
            what = f"case {t + 1} (L={L}, S={S}, head_dim={D}, is_causal={causal}, scale={scale}, tiles {bm}×{bn})"
            wrong = [] if sc == 0.0 else [(torch.exp(logits / sc - (logits / sc).logsumexp(-1, keepdim=True)) @ v64,
                                           "the scores are not scaled: multiply q·kᵀ by scale (1/sqrt(head_dim) "
                                           "when None).")]
            if scale == 0.0:
                wrong.append((_F.scaled_dot_product_attention(q64, k64, v64, is_causal=causal), HINT_SCALE_ZERO))
            if causal and L != S:
                br = (q64 @ k64.transpose(-2, -1) * sc).masked_fill(~torch.ones(L, S, dtype=torch.bool).tril(S - L),
                                                                    -math.inf)
                wrong.append((torch.softmax(br, -1).nan_to_num(0.0) @ v64, "is_causal is top-left, as torch's: query "
                              "i sees keys 0..i (not 0..i + S - L)."))
            expect_close(torch.as_tensor(got[0]).double(), want, what=f"the output of {what}", atol=1e-4, rtol=1e-4,
                         wrong_answers=wrong)
            expect_close(torch.as_tensor(got[1]).double(), want_lse, what=f"the log-sum-exp of {what}", atol=1e-4,
                         rtol=1e-4, wrong_answers=[(want_lse / math.log(2), "the log-sum-exp is in natural log: "
                                                    "m + log(l); with exp2 in the kernel, convert back (× ln 2).")])
        return len(cases)

    return run_check("flash_forward", trials)


def _sandbox_watch_torch(watched: dict):
    """A check's ``sandbox_watch`` for the torch functions of ``watched`` (see :func:`sandbox_watch_flash`)."""
    def spec() -> dict:
        watch, _ = _remote_watch(_Guard(watched), None, {})
        return watch

    return spec


# read by classroom/grade.py's sandbox_watches: the sandbox's runner resolves these names before the student's code
# runs, so the graded pieces refuse there what they refuse in make check-mine
check_piece_flash_forward.sandbox_watch = sandbox_watch_flash
check_piece_grouped_query_attention.sandbox_watch = _sandbox_watch_torch({**_SDPA, **_REPEATS})
check_piece_tiled_attention.sandbox_watch = _sandbox_watch_torch(_SDPA)


PIECES: tuple[Piece, ...] = (
    Piece("gqa", "repeat_kv", "08", "The same attention, three ways", check_piece_repeat_kv),
    # the class replaces attn_lib's: MultiHeadAttention, DecoderLM and MLA use only what KVCacheProtocol names
    Piece("kv_cache", "KVCache", "08", "What the cache holds, step by step", check_piece_kv_cache),
    Piece("gqa", "grouped_query_attention", "08", "Why MQA and GQA decode faster",
          check_piece_grouped_query_attention),
    Piece("tiled", "online_softmax_update", "09", "3 · The online softmax, derived", check_piece_online_softmax_update),
    # attn_lib has no merge_states of its own (only the exercise's reference): nothing to replace
    Piece("tiled", "merge_states", "09", "Exercise 2 · Merging two partial results", check_piece_merge_states,
          replaces=False),
    # the learner's version covers a subset of the options (no ALiBi, windows, soft-capping, sinks, compile_tile,
    # no custom backward): notebook 09, MultiHeadAttention(backend="tiled") and flash's fallback keep attn_lib's
    Piece("tiled", "tiled_attention", "09", "5 · From one row to tiles: `tiled_attention`",
          check_piece_tiled_attention, replaces=False),
)
if importlib.util.find_spec("triton") is not None:  # Triton ships for Linux only: elsewhere the piece is not offered
    # the learner's kernel takes a subset of attn_lib.flash's inputs: attn_lib.flash stays, nothing is replaced
    PIECES += (Piece("flash", "flash_forward", "09", "Optional: the Triton kernel, line by line (pointers, strides, "
                                                      "PTX)", check_piece_flash_forward, replaces=False),)
