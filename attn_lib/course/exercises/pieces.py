"""The checks of the pieces of the learner's own stack, ``my_attn`` (issue 34): one per piece, with attn_lib's
public signature, on fresh inputs, with a hint for each typical mistake.

Each ``check_piece_*`` takes the learner's function and returns a :class:`CheckResult`. The reference is attn_lib's
own function (itself proven equal to torch and transformers in tests/) or, for ``softmax``, torch's. The checks of
notebook 03's pieces also watch, through a ``TorchFunctionMode`` (no namespace is patched), that the learner's code
does not call the library function it re-implements.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import torch
from torch.overrides import TorchFunctionMode

from attn_lib.attention import scaled_dot_product_attention as _ref_sdpa
from attn_lib.course.exercises._core import HINT_SCALE_ZERO, _LearnerError
from attn_lib.course.exercises._core import CheckResult, Mismatch, call, expect_close, fresh_generator, run_check
from attn_lib.course.exercises._core import _learner_frame
from attn_lib.masks import causal_mask as _ref_causal_mask
from attn_lib.masks import padding_mask as _ref_padding_mask
from attn_lib.mha import merge_heads as _ref_merge_heads
from attn_lib.mha import split_heads as _ref_split_heads
from attn_lib.positional import alibi_slopes as _ref_alibi_slopes
from attn_lib.positional import apply_rope as _ref_apply_rope
from attn_lib.positional import sinusoidal_positional_encoding as _ref_sinusoidal

__all__ = ["Piece", "PIECES", "check_piece_sinusoidal_positional_encoding", "check_piece_alibi_slopes", "check_piece_apply_rope",
           "check_piece_softmax", "check_piece_scaled_dot_product_attention", "check_piece_causal_mask",
           "check_piece_padding_mask", "check_piece_split_heads", "check_piece_merge_heads"]

_F = torch.nn.functional
_SOFTMAXES = {torch.softmax: "torch.softmax", _F.softmax: "torch.nn.functional.softmax",
              torch.Tensor.softmax: "Tensor.softmax", torch.log_softmax: "torch.log_softmax",
              _F.log_softmax: "torch.nn.functional.log_softmax", torch.Tensor.log_softmax: "Tensor.log_softmax",
              torch.special.softmax: "torch.special.softmax"}
_SDPAS = {_F.scaled_dot_product_attention: "torch.nn.functional.scaled_dot_product_attention"}


class _Watch(TorchFunctionMode):
    """Records which of ``watched`` (torch function -> name) the code under it calls; changes nothing."""

    def __init__(self, watched: dict):
        super().__init__()
        self.watched, self.used = watched, []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = self.watched.get(func)
        if name is not None and name not in self.used:
            self.used.append(name)
        return func(*args, **(kwargs or {}))


def _watched_call(fn, inputs: dict, watched: dict, what: str, **kwargs):
    """``call(fn, inputs)`` with keyword arguments, refusing a call of any ``watched`` library function."""
    def run(*args):
        return fn(*args, **kwargs)

    watch = _Watch(watched)
    with watch:
        got = call(run, inputs)
    if watch.used:
        raise Mismatch(f"your {what} called {', '.join(watch.used)}: the piece is the one you write, so compute it "
                       "yourself from exp, max, sum and matmul.")
    return got


def _randn(g, *shape, dtype=torch.float64):
    return torch.randn(*shape, generator=g, dtype=dtype)


# ----------------------------------------------------------------------------------------------------- 02
def check_piece_sinusoidal_positional_encoding(fn) -> CheckResult:
    """my_attn.positional.sinusoidal_positional_encoding against attn_lib's, for 4 sizes and two bases.

    Raises: nothing; a wrong answer is a failed CheckResult with a hint (layout, base, exponent).
    """
    name = "sinusoidal_positional_encoding"

    def trials():
        for n, d, base in ((7, 8, 10000.0), (1, 2, 10000.0), (33, 16, 100.0), (5, 6, 10000.0)):
            want = _ref_sinusoidal(n, d, base=base, dtype=torch.float64)
            got = call(lambda n_, d_: fn(n_, d_, base=base, dtype=torch.float64), {"num_positions": n, "d_model": d})
            half = torch.cat([want[:, 0::2], want[:, 1::2]], dim=-1)
            swapped = want.view(n, d // 2, 2).flip(-1).reshape(n, d)
            expect_close(got, want, what=f"the encoding of {n} positions, d_model={d}, base={base:g}", atol=1e-9,
                         rtol=1e-7, dtype=torch.float64, wrong_answers=[
                             (half, "you put all the sines first, then all the cosines; the course interleaves them: "
                                    "column 2i is sin, column 2i+1 is cos, of the same frequency."),
                             (swapped, "sin and cos are swapped: column 2i is sin(p·ω_i), column 2i+1 is cos(p·ω_i).")])
        return 4

    return run_check(name, trials)


def check_piece_alibi_slopes(fn) -> CheckResult:
    """my_attn.positional.alibi_slopes against attn_lib's, for 1, 2, 6, 8, 12 and 16 heads.

    Raises: nothing; a wrong answer is a failed CheckResult with a hint (powers of two, the other-H rule).
    """
    def trials():
        for h in (8, 16, 1, 2, 6, 12):
            want = _ref_alibi_slopes(h, dtype=torch.float64)
            got = call(lambda h_: fn(h_, dtype=torch.float64), {"num_heads": h})
            hint = ("for a number of heads that is not a power of two, take the slopes of the closest power of two "
                    "below it, then every other slope of twice that power (Press et al. 2022, footnote of §3).")
            expect_close(got, want, what=f"the slopes of {h} heads", atol=1e-12, rtol=1e-9, dtype=torch.float64,
                         wrong_answers=[(torch.tensor([2.0 ** (-8 * (i + 1) / h) for i in range(h)],
                                                      dtype=torch.float64), hint)] if h & (h - 1) else [])
        return 6

    return run_check("alibi_slopes", trials)


def check_piece_apply_rope(fn) -> CheckResult:
    """my_attn.positional.apply_rope against attn_lib's: both pairings, default and given positions.

    Raises: nothing; a wrong answer is a failed CheckResult with a hint (pairing, positions).
    """
    def trials():
        for t, (shape, interleaved, given) in enumerate((((2, 3, 5, 8), False, False), ((4, 6), True, False),
                                                         ((1, 2, 7, 16), False, True), ((3, 5, 4), True, True))):
            g = fresh_generator("apply_rope", t)
            x = _randn(g, *shape)
            pos = torch.randint(0, 50, (shape[-2],), generator=g) if given else None
            want = _ref_apply_rope(x, pos, interleaved=interleaved)
            other = _ref_apply_rope(x, pos, interleaved=not interleaved)
            got = call(lambda x_, p_: fn(x_, p_, interleaved=interleaved), {"x": x, "positions": pos})
            expect_close(got, want, what=f"the rotated x of shape {shape} (interleaved={interleaved})", atol=1e-9,
                         rtol=1e-7, dtype=torch.float64, wrong_answers=[
                             (other, "the pairing is the other one: interleaved=True pairs (x[2i], x[2i+1]); "
                                     "interleaved=False pairs (x[i], x[i + head_dim/2])."),
                             (x, "x came back unrotated: rotate each pair by the angle position·θ_i.")])
        return 4

    return run_check("apply_rope", trials)


# ----------------------------------------------------------------------------------------------------- 03
def check_piece_softmax(fn) -> CheckResult:
    """my_attn.attention.softmax against torch.softmax: several axes, scores of 1000 (overflow), -inf entries.

    It fails when the learner's code calls a library softmax (watched through a TorchFunctionMode).
    Raises: nothing; a wrong answer is a failed CheckResult with a hint (stability, axis, normalisation).
    """
    def trials():
        for t, (shape, dim, big) in enumerate((((3, 5), -1, False), ((2, 4, 6), 1, False), ((4, 7), -1, True),
                                              ((2, 3, 3), 0, False))):
            g = fresh_generator("softmax", t)
            s = _randn(g, *shape) * (400.0 if big else 3.0) + (1000.0 if big else 0.0)
            if t == 3:
                s[0, 0, 1] = -math.inf
            want = torch.softmax(s, dim)
            got = _watched_call(fn, {"scores": s}, _SOFTMAXES, "softmax", dim=dim)
            if big and not bool(torch.isfinite(torch.as_tensor(got)).all()):
                raise Mismatch("scores near 1000 gave NaN or inf: exp(1000) overflows. Subtract each row's maximum "
                               "before exp (softmax(s) = softmax(s - max s)), which changes nothing mathematically.")
            expect_close(got, want, what=f"softmax over dim={dim} of a {shape} tensor", atol=1e-12, rtol=1e-9,
                         dtype=torch.float64, wrong_answers=[
                             (torch.softmax(s, -1 if dim != -1 else 0), "the softmax ran over the wrong axis: "
                                                                           f"normalise along dim={dim}."),
                             (s.exp(), "these are exp(scores), not yet divided by their sum along dim.")])
        return 4

    return run_check("softmax", trials)


class _Borrowed(Mismatch):
    """The learner's code called the library function it re-implements: no case can count, so the check stops."""


def _sdpa_cases():
    """The SDPA check's cases, in the order the course teaches them: (label, notebook, options). The label names the
    option and what it means, so a failure tells a learner which notebook teaches what they have not met yet."""
    return [("no mask", "03", dict()),
            ("scale=0.3", "03", dict(scale=0.3)),
            ("scale=0.0: every score 0", "03", dict(scale=0.0)),
            ("float16 in: computed in float32, returned in float16", "03", dict(half=True)),
            ("mask=bool, True = may attend", "04", dict(mask="bool")),
            ("mask=float, added to the scaled scores", "04", dict(mask="float")),
            ("is_causal=True, top-left, L != S", "04", dict(is_causal=True)),
            ("a query whose keys are all masked: weights 0, output 0", "04", dict(mask="a row blocked")),
            ("dropout_p=0.3 in training", "04", dict(dropout=True)),
            ("enable_gqa=True: query has 4 heads and key 2; repeat each key/value head", "08", dict(gqa=True))]


def _sdpa_watched(fn, inputs, **kwargs):
    """``_watched_call`` for SDPA: torch's SDPA, and a library softmax reached through the learner's own softmax."""
    watch = _Watch({**_SDPAS, **_SOFTMAXES})

    def run(*args):
        return fn(*args, **kwargs)

    with watch:
        got = call(run, inputs)
    if watch.used:
        lib = [u for u in watch.used if "softmax" in u]
        raise _Borrowed(f"your scaled_dot_product_attention called {', '.join(watch.used)}: the piece is the one you "
                        "write, so compute it yourself from matmul and YOUR softmax" +
                        (" (which must not call a library softmax either)." if lib else "."))
    return got


def _sdpa_case(fn, t, case) -> None:
    """One case of the SDPA check; raises Mismatch (or _LearnerError) when the learner's result is wrong."""
    g = fresh_generator("scaled_dot_product_attention", t)
    if case.get("gqa"):
        q, k, v = _randn(g, 2, 4, 3, 8), _randn(g, 2, 2, 5, 8), _randn(g, 2, 2, 5, 6)
        want_out, want_w = _ref_sdpa(q, k, v, enable_gqa=True)
        got = _sdpa_watched(fn, {"query": q, "key": k, "value": v, "attn_mask": None}, enable_gqa=True)
        if not isinstance(got, (tuple, list)) or len(got) != 2:
            raise Mismatch("return a pair (output, weights), as attn_lib's scaled_dot_product_attention does.")
        expect_close(got[0], want_out, what="the output (4 query heads, 2 key/value heads)", atol=1e-9, rtol=1e-7,
                     dtype=torch.float64, wrong_answers=[
                         (_ref_sdpa(q, k.repeat(1, 2, 1, 1), v.repeat(1, 2, 1, 1))[0],
                          "key/value head h serves the CONSECUTIVE query heads h·G ... h·G + G - 1: repeat_interleave "
                          "along the heads, not repeat (which cycles through them).")])
        return
    if case.get("dropout"):
        p = 0.3
        q, k, v = _randn(g, 1, 1, 400, 8), _randn(g, 1, 1, 10, 8), _randn(g, 1, 1, 10, 4)
        _, plain = _ref_sdpa(q, k, v)
        got = _sdpa_watched(fn, {"query": q, "key": k, "value": v, "attn_mask": None}, dropout_p=p)
        if not isinstance(got, (tuple, list)) or len(got) != 2:
            raise Mismatch("return a pair (output, weights), as attn_lib's scaled_dot_product_attention does.")
        w, out = torch.as_tensor(got[1]), torch.as_tensor(got[0])
        kept = w != 0
        dropped = 1 - kept.double().mean().item()
        if not 0.2 < dropped < 0.4:
            raise Mismatch(f"{dropped:.2f} of the weights were 0; expected about {p} (drop each weight with "
                           "probability dropout_p, after the softmax).")
        expect_close(w[kept], plain[kept] / (1 - p), what=f"the weights that survive dropout_p={p}", atol=1e-9,
                     rtol=1e-7, wrong_answers=[(plain[kept], "the surviving weights must be divided by 1 - dropout_p "
                                                             "(inverted dropout), so that their expected sum stays 1.")])
        expect_close(out, w @ v, what="the output with dropout (it must use the dropped weights)", atol=1e-9, rtol=1e-7)
        return
    if case.get("half"):
        # scores of tens: float16 rounds them to a few hundredths before exp, which float32 does not (the upcast)
        q, k = (_randn(g, 2, 2, 6, 16) * 4).half(), (_randn(g, 2, 2, 7, 16) * 4).half()
        v = (_randn(g, 2, 2, 7, 8) / 4).half()
        want_out, want_w = _ref_sdpa(q, k, v)
        got = _sdpa_watched(fn, {"query": q, "key": k, "value": v, "attn_mask": None})
        if not isinstance(got, (tuple, list)) or len(got) != 2:
            raise Mismatch("return a pair (output, weights), as attn_lib's scaled_dot_product_attention does.")
        for name, x in (("output", got[0]), ("weights", got[1])):
            if torch.as_tensor(x).dtype != torch.float16:
                raise Mismatch(f"the {name} of float16 inputs is {torch.as_tensor(x).dtype}: return query's dtype.")
        hint = ("compute in float32 when the inputs are float16 or bfloat16 (query.float() ...), and cast the "
                "results back to query's dtype at the end: float16's exp and sums lose digits.")
        for name, x, want in (("weights", got[1], want_w), ("output", got[0], want_out)):
            if not torch.allclose(torch.as_tensor(x).double(), want.double(), atol=1e-3, rtol=0):  # 2 ulps < 1
                raise Mismatch(f"the {name} of float16 inputs differ from attn_lib's by up to "
                               f"{(torch.as_tensor(x).double() - want.double()).abs().max().item():.1e}: {hint}")
        return
    B, H, L, S, E, Ev = 2, 3, 4 + t % 2, 6 - bool(case.get("is_causal")), 8, 5
    q, k, v = _randn(g, B, H, L, E), _randn(g, B, H, S, E), _randn(g, B, H, S, Ev)
    mask = None
    if case.get("mask") == "bool":
        mask = torch.rand(B, 1, L, S, generator=g) < 0.7
        mask[..., 0] = True
    elif case.get("mask") == "a row blocked":
        mask = torch.ones(B, 1, L, S, dtype=torch.bool)
        mask[1, 0, 2] = False
    elif case.get("mask") == "float":
        mask = _randn(g, L, S)
    kw = dict(is_causal=case.get("is_causal", False), scale=case.get("scale"))
    if kw["scale"] == 0.0:  # attn_lib refuses 0.0 (ValueError); torch's scores are all 0: Q·0 scaled by 1
        want_out, want_w = _ref_sdpa(q * 0, k, v, mask, is_causal=kw["is_causal"], scale=1.0)
    else:
        want_out, want_w = _ref_sdpa(q, k, v, mask, **kw)
    try:
        got = _sdpa_watched(fn, {"query": q, "key": k, "value": v, "attn_mask": mask}, **kw)
    except _LearnerError as e:
        if kw["scale"] == 0.0 and isinstance(e.error, ValueError):
            return  # refusing scale=0.0, as attn_lib does, is right too; using the default is not
        raise
    if not isinstance(got, (tuple, list)) or len(got) != 2:
        raise Mismatch("return a pair (output, weights), as attn_lib's scaled_dot_product_attention does.")
    no_scale = _ref_sdpa(q, k, v, mask, is_causal=kw["is_causal"], scale=1.0)[1]
    if case.get("mask") == "a row blocked" and not bool(torch.isfinite(torch.as_tensor(got[0])).all()):
        raise Mismatch("it gave NaN: attn_lib's rule is weights 0 and output 0 for such a row (softmax alone divides "
                       "0 by 0).")
    wrong = [(no_scale, "the scores are not scaled: multiply Q·Kᵀ by scale (1/sqrt(E) when scale is None) "
                        "before the softmax.")]
    if kw["scale"] == 0.0:
        wrong.insert(0, (_ref_sdpa(q, k, v, mask, is_causal=kw["is_causal"])[1], HINT_SCALE_ZERO))
    expect_close(got[1], want_w, what="the weights", atol=1e-9, rtol=1e-7, dtype=torch.float64, wrong_answers=wrong)
    expect_close(got[0], want_out, what="the output", atol=1e-9, rtol=1e-7, dtype=torch.float64)


def _learner_error_words(le: _LearnerError) -> str:
    e = le.error
    frame = _learner_frame(e.__traceback__)
    where = f" (line {frame.lineno} of {frame.name})" if frame else ""
    first = str(e).strip().splitlines()[0] if str(e).strip() else ""
    return f"your function raised {type(e).__name__}: {first}{where}."


def check_piece_scaled_dot_product_attention(fn) -> CheckResult:
    """my_attn.attention.scaled_dot_product_attention against attn_lib's (= torch's) in float64, case by case in the
    order the course teaches them: notebook 03's (no mask, a given scale, scale=0.0 (torch's all-zero scores, or a
    ValueError as attn_lib's; not the default), float16 inputs computed in float32), notebook 04's (a bool mask, a
    float mask, is_causal with L != S, a query whose keys are all masked, dropout) and notebook 08's (enable_gqa).
    Both results: output and weights.

    The piece passes only when every case passes; a failure names the cases that pass (e.g. "notebook 03's cases
    pass"), then each failing case with its option and the notebook that teaches it. It fails when the learner's code
    calls torch's scaled_dot_product_attention or a library softmax (also through the learner's own softmax).
    Raises: nothing; a wrong answer is a failed CheckResult with a hint.
    """
    def trials():
        cases = _sdpa_cases()
        failed = []
        for t, (label, nb, case) in enumerate(cases):
            try:
                _sdpa_case(fn, t, case)
            except _Borrowed:
                raise
            except Mismatch as e:
                failed.append((label, nb, str(e)))
            except _LearnerError as le:
                failed.append((label, nb, _learner_error_words(le)))
            except NotImplementedError:
                if t == 0:
                    raise  # the stub: "not written yet"
                failed.append((label, nb, "your function raised NotImplementedError: this option is still to "
                                          "write."))
        if not failed:
            return len(cases)
        bad = {label for label, _, _ in failed}
        by_nb = {}
        for label, nb, _ in cases:
            by_nb.setdefault(nb, []).append(label not in bad)
        done = [nb for nb, oks in by_nb.items() if all(oks)]
        if done:
            head = " and ".join(f"notebook {nb}'s" for nb in done) + " cases pass"
        else:
            n_ok = len(cases) - len(failed)
            head = f"{n_ok} of {len(cases)} cases pass" if n_ok else "no case passes yet"
        index = {label: i + 1 for i, (label, _, _) in enumerate(cases)}
        label, nb, words = failed[0]
        msg = f"{head}; case {index[label]} ({label}; notebook {nb}) differs: {words}"
        if len(failed) > 1:
            rest = "; ".join(f"case {index[lb]} ({lb}; notebook {n})" for lb, n, _ in failed[1:])
            msg += f" Not yet either: {rest}."
        raise Mismatch(msg)

    return run_check("scaled_dot_product_attention", trials)


# ----------------------------------------------------------------------------------------------------- 04
def check_piece_causal_mask(fn) -> CheckResult:
    """my_attn.masks.causal_mask against attn_lib's: square, fewer queries than keys, more; both alignments.

    Raises: nothing; a wrong answer is a failed CheckResult with a hint (diagonal, alignment, convention).
    """
    def trials():
        cases = [(5, None, "top_left"), (3, 7, "top_left"), (3, 7, "bottom_right"), (6, 4, "bottom_right"),
                 (1, 9, "bottom_right")]
        for L, S, align in cases:
            want = _ref_causal_mask(L, S, align=align)
            got = call(lambda L_, S_: fn(L_, S_, align=align), {"q_len": L, "kv_len": S})
            other = _ref_causal_mask(L, S, align="top_left" if align == "bottom_right" else "bottom_right")
            expect_close(got, want, what=f"causal_mask({L}, {S}, align={align!r})", wrong_answers=[
                (~want, "True and False are swapped: in the course True means 'may attend'."),
                (other, "that is the other alignment: top_left is j <= i; bottom_right is j <= i + (S - L)."),
                (want & ~torch.eye(*want.shape, dtype=torch.bool), "the diagonal is missing: a query may "
                                                                             "attend to its own key (j <= i, not j < i).")])
        return len(cases)

    return run_check("causal_mask", trials)


def check_piece_padding_mask(fn) -> CheckResult:
    """my_attn.masks.padding_mask against attn_lib's: lists and tensors, with and without max_len, a zero length.

    Raises: nothing; a wrong answer is a failed CheckResult with a hint.
    """
    def trials():
        cases = [([3, 1, 4], None), ([2, 5], 7), (torch.tensor([0, 2]), 3), ([1], None)]
        for lengths, max_len in cases:
            want = _ref_padding_mask(lengths, max_len)
            got = call(lambda l_, m_: fn(l_, m_), {"lengths": lengths, "max_len": max_len})
            expect_close(got, want, what=f"padding_mask({lengths!r}, {max_len})", wrong_answers=[
                (~want, "True and False are swapped: True marks the real tokens (they may be attended to).")])
        return len(cases)

    return run_check("padding_mask", trials)


# ----------------------------------------------------------------------------------------------------- 05
def check_piece_split_heads(fn) -> CheckResult:
    """my_attn.mha.split_heads against attn_lib's, with a distinct value in every cell.

    Raises: nothing; a wrong answer is a failed CheckResult with a hint (view without transpose).
    """
    def trials():
        for B, L, H, hd in ((2, 3, 4, 2), (1, 5, 2, 3), (3, 1, 1, 4)):
            x = torch.arange(B * L * H * hd, dtype=torch.float64).reshape(B, L, H * hd)
            want = _ref_split_heads(x, H)
            got = call(lambda x_, h_: fn(x_, h_), {"x": x, "num_heads": H})
            expect_close(got, want, what=f"split_heads of a ({B}, {L}, {H * hd}) tensor into {H} heads",
                         dtype=torch.float64, wrong_answers=[
                             (x.reshape(B, H, L, hd), "you reshaped to (B, H, L, head_dim) directly: that mixes "
                                                      "tokens. View as (B, L, H, head_dim) first, then transpose(1, 2).")])
        return 3

    return run_check("split_heads", trials)


def check_piece_merge_heads(fn) -> CheckResult:
    """my_attn.mha.merge_heads against attn_lib's, with a distinct value in every cell.

    Raises: nothing; a wrong answer is a failed CheckResult with a hint.
    """
    def trials():
        for B, H, L, hd in ((2, 4, 3, 2), (1, 2, 5, 3)):
            x = torch.arange(B * H * L * hd, dtype=torch.float64).reshape(B, H, L, hd)
            want = _ref_merge_heads(x)
            got = call(lambda x_: fn(x_), {"x": x})
            expect_close(got, want, what=f"merge_heads of a ({B}, {H}, {L}, {hd}) tensor", dtype=torch.float64,
                         wrong_answers=[(x.reshape(B, L, H * hd), "you reshaped without moving the heads back: "
                                                                  "transpose(1, 2) first, then reshape (B, L, H·head_dim).")])
        return 2

    return run_check("merge_heads", trials)


# ----------------------------------------------------------------------------------------------------- the registry
@dataclass(frozen=True)
class Piece:
    """One piece of the learner's stack: ``my_attn.<module>.<name>``, standing in for ``attn_lib.<module>.<name>``
    (``replaces`` False: nothing of attn_lib's is replaced, e.g. the hand-written softmax). ``check`` takes the
    learner's object and returns a CheckResult; ``section`` is the notebook section that teaches it."""

    module: str
    name: str
    notebook: str
    section: str
    check: Callable[[object], CheckResult]
    replaces: bool = True


PIECES: tuple[Piece, ...] = (
    Piece("positional", "sinusoidal_positional_encoding", "02", "1 · Sinusoidal encodings (the original Transformer)",
          check_piece_sinusoidal_positional_encoding),
    Piece("attention", "softmax", "03", "Exercise 1 · The weights, with a softmax you write", check_piece_softmax,
          replaces=False),
    Piece("attention", "scaled_dot_product_attention", "03", "The reference function: batches and both results",
          check_piece_scaled_dot_product_attention),
    Piece("masks", "causal_mask", "04", "Top-left or bottom-right? When there are fewer queries than keys",
          check_piece_causal_mask),
    Piece("masks", "padding_mask", "04", "Padding masks on a real batch", check_piece_padding_mask),
    Piece("positional", "apply_rope", "04", "RoPE: rotate the queries and keys (LLaMA)", check_piece_apply_rope),
    Piece("positional", "alibi_slopes", "04", "ALiBi: one more bias on the scores, beside the mask", check_piece_alibi_slopes),
    Piece("mha", "split_heads", "05", "2 · The mechanics, shape by shape", check_piece_split_heads),
    Piece("mha", "merge_heads", "05", "2 · The mechanics, shape by shape", check_piece_merge_heads),
)
