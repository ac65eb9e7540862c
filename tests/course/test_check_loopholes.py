"""Loopholes the exercise checks close (issue #34): each check enforces what its exercise forbids, names the typical
wrong answer with its hint, and still accepts a right answer written another way.

- ``check_sample``: the draws come from ``generator`` alone (the same seed gives the same tokens);
- ``scale=0.0`` is a scale, not the default, wherever an exercise or a piece takes a ``scale`` (03's ``attention``,
  the pieces ``scaled_dot_product_attention``, ``grouped_query_attention``, ``tiled_attention``, ``flash_forward``):
  an implementation written ``scale = scale or 1 / sqrt(E)`` fails with :data:`HINT_SCALE_ZERO`;
- 03's hand-written softmax refuses a library softmax (tested in tests/course/test_mine.py; this file checks that
  those tests exist, so the loophole cannot come back unnoticed).
"""

from __future__ import annotations

import functools
import inspect
import math

import pytest
import torch

from attn_lib.course import mine
from attn_lib.course.exercises import capstone as C
from attn_lib.course.exercises import check_attention, check_sample
from attn_lib.course.exercises import pieces as P3
from attn_lib.course.exercises import pieces_fast as P
from attn_lib.course.exercises._core import HINT_SCALE_ZERO

from exercise_asserts import SOLVED, restore_attn_lib  # noqa: F401 - an autouse fixture
from exercise_asserts import fails_with as _fails_with, solved as _solved


# ----------------------------------------------------------------------------------------------- check_sample
def _sample_right(logits, temperature, top_k, generator):
    if temperature == 0:
        return logits.argmax(-1)
    scores = logits / temperature
    if top_k is not None:
        scores = scores.masked_fill(scores < scores.topk(top_k, -1).values[..., -1:], float("-inf"))
    return torch.multinomial(torch.softmax(scores, -1), 1, generator=generator).squeeze(1)


def _sample_gumbel(logits, temperature, top_k, generator):
    """Right, written otherwise: the Gumbel-max trick, argmax(logits / T + Gumbel noise), the noise from generator."""
    if temperature == 0:
        return logits.argmax(-1)
    scores = logits / temperature
    if top_k is not None:
        kth = torch.sort(scores, -1, descending=True).values[..., top_k - 1: top_k]
        scores = torch.where(scores >= kth, scores, torch.full_like(scores, -math.inf))
    u = torch.rand(scores.shape, generator=generator, dtype=scores.dtype).clamp(1e-12, 1 - 1e-12)
    return (scores - torch.log(-torch.log(u))).argmax(-1)


def _sample_global_rng(logits, temperature, top_k, generator):
    """Ignores generator: draws from torch's global random state."""
    if temperature == 0:
        return logits.argmax(-1)
    scores = logits / temperature
    if top_k is not None:
        scores = scores.masked_fill(scores < scores.topk(top_k, -1).values[..., -1:], float("-inf"))
    return torch.multinomial(torch.softmax(scores, -1), 1).squeeze(1)


def _sample_own_seed(logits, temperature, top_k, generator):
    """Ignores generator: seeds a generator of its own, so every call draws the same tokens."""
    return _sample_right(logits, temperature, top_k, torch.Generator().manual_seed(1234))


def test_check_sample_accepts_a_differently_written_right_answer():
    assert check_sample(_sample_right).passed
    assert check_sample(_sample_gumbel).passed


@pytest.mark.parametrize("wrong", [_sample_global_rng, _sample_own_seed])
def test_check_sample_requires_the_generator(wrong):
    _fails_with(check_sample(wrong), C.HINT_SAMPLE_GENERATOR)


def test_check_sample_draws_are_reproducible_only_through_the_generator():
    """What the check relies on, shown directly: the right sampler replays a seed, the global-RNG one does not."""
    logits = torch.randn(300, 6, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    same = [_sample_right(logits, 1.0, None, torch.Generator().manual_seed(5)) for _ in range(2)]
    assert torch.equal(*same)
    other = [_sample_global_rng(logits, 1.0, None, torch.Generator().manual_seed(5)) for _ in range(2)]
    assert not torch.equal(*other)


# ----------------------------------------------------------------------------------------------- scale = 0.0
def _scale_or_default(fn, head_dim_of=lambda q: q.shape[-1]):
    """``fn`` with the classic bug: ``scale = scale or 1 / sqrt(E)``, which turns scale=0.0 into the default."""
    @functools.wraps(fn)
    def wrapped(*args, **kwargs):
        bound = inspect.signature(fn).bind(*args, **kwargs)
        bound.apply_defaults()
        query = next(iter(bound.arguments.values()))
        bound.arguments["scale"] = bound.arguments["scale"] or 1 / math.sqrt(head_dim_of(query))
        return fn(*bound.args, **bound.kwargs)

    wrapped.__signature__ = inspect.signature(fn)
    return wrapped


def _attention_right(query, key, value, scale=None, bias=None):
    scale = 1 / math.sqrt(query.shape[-1]) if scale is None else scale
    scores = query @ key.transpose(-2, -1) * scale + (0 if bias is None else bias)
    return torch.softmax(scores, dim=-1) @ value


def _attention_einsum(query, key, value, scale=None, bias=None):
    """Right, written otherwise: einsum, and exp of the shifted scores normalised by hand."""
    if scale is None:
        scale = query.size(-1) ** -0.5
    s = torch.einsum("...ld,...sd->...ls", query, key) * scale
    if bias is not None:
        s = s + bias
    e = torch.exp(s - s.amax(-1, keepdim=True))
    return torch.einsum("...ls,...sv->...lv", e / e.sum(-1, keepdim=True), value)


def test_03_attention_scale_zero():
    assert check_attention(_attention_right).passed
    assert check_attention(_attention_einsum).passed
    _fails_with(check_attention(_scale_or_default(_attention_right)), HINT_SCALE_ZERO)


def test_03_attention_scale_zero_is_uniform_weights():
    """Why 0.0 must be honoured: with scale 0 every score is 0, so the output is the plain mean of the values."""
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(4, 8, generator=g, dtype=torch.float64) for _ in range(3))
    torch.testing.assert_close(torch.nn.functional.scaled_dot_product_attention(q, k, v, scale=0.0),
                               v.mean(0).expand(4, 8))


def test_piece_sdpa_scale_zero():
    solved = _solved("attention").scaled_dot_product_attention
    assert P3.check_piece_scaled_dot_product_attention(solved).passed
    _fails_with(P3.check_piece_scaled_dot_product_attention(_scale_or_default(solved)), HINT_SCALE_ZERO)


def test_piece_gqa_scale_zero():
    solved = _solved("gqa").grouped_query_attention
    assert P.check_piece_grouped_query_attention(solved).passed
    _fails_with(P.check_piece_grouped_query_attention(_scale_or_default(solved)), HINT_SCALE_ZERO)


def test_piece_tiled_scale_zero():
    solved = _solved("tiled").tiled_attention
    assert P.check_piece_tiled_attention(solved).passed
    _fails_with(P.check_piece_tiled_attention(_scale_or_default(solved)), HINT_SCALE_ZERO)


def test_piece_flash_forward_scale_zero():
    pytest.importorskip("triton")
    solved = _solved("flash").flash_forward
    _fails_with(P.check_piece_flash_forward(_scale_or_default(solved)), HINT_SCALE_ZERO)


def test_every_piece_and_exercise_that_takes_a_scale_is_covered():
    """A new piece with a ``scale`` argument must get a scale=0.0 test here."""
    import my_attn  # noqa: F401  (the stubs: their signatures are attn_lib's)

    covered = {"scaled_dot_product_attention", "grouped_query_attention", "tiled_attention", "flash_forward",
               "absorbed_attention"}  # absorbed_attention: scale is required (no default to fall back on)
    with_scale = set()
    for piece in mine.PIECES:
        module = __import__(f"my_attn.{piece.module}", fromlist=[piece.name])
        obj = getattr(module, piece.name)
        if callable(obj) and not inspect.isclass(obj) and "scale" in inspect.signature(obj).parameters:
            with_scale.add(piece.name)
    assert with_scale <= covered, with_scale - covered
    assert inspect.signature(_solved("mla").absorbed_attention).parameters["scale"].default is inspect.Parameter.empty


# ----------------------------------------------------------------------------------------------- 03's softmax
def test_the_library_softmax_loophole_has_its_tests():
    from tests.course import test_mine

    cases = test_mine.__dict__.get("SOFTMAX_WRONG") or next(v for k, v in vars(test_mine).items()
                                                            if isinstance(v, dict) and "calls torch.softmax" in v)
    assert {"calls torch.softmax", "calls F.softmax"} <= set(cases)
    assert callable(test_mine.test_softmax_check_rejects_the_typical_wrong_answers)
    assert callable(test_mine.test_softmax_check_accepts_a_differently_written_right_answer)


def test_refusing_scale_zero_like_attn_lib_passes():
    """attn_lib refuses scale=0.0 with a ValueError; a piece that does the same is right too (only the default is
    wrong)."""
    solved = _solved("attention").scaled_dot_product_attention

    def refusing(query, key, value, attn_mask=None, *, is_causal=False, dropout_p=0.0, scale=None, enable_gqa=False):
        if scale is not None and scale <= 0:
            raise ValueError(f"scale must be None or > 0, got {scale!r}")
        return solved(query, key, value, attn_mask, is_causal=is_causal, dropout_p=dropout_p, scale=scale,
                      enable_gqa=enable_gqa)

    assert P3.check_piece_scaled_dot_product_attention(refusing).passed


# ----------------------------------------------------------------------------------------------- the audit
# Pieces whose checks had no test of a typical wrong answer or of a right answer written otherwise (#34). The right
# answers below are written independently of the worked solution; each wrong one is the mistake its hint names.
def _sinusoidal_loop(num_positions, d_model, *, base=10000.0, dtype=torch.float32):
    out = torch.empty(num_positions, d_model, dtype=dtype)
    for p in range(num_positions):
        for i in range(d_model // 2):
            angle = p / base ** (2 * i / d_model)
            out[p, 2 * i], out[p, 2 * i + 1] = math.sin(angle), math.cos(angle)
    return out


def _sinusoidal_halves(num_positions, d_model, *, base=10000.0, dtype=torch.float32):
    right = _sinusoidal_loop(num_positions, d_model, base=base, dtype=dtype)
    return torch.cat([right[:, 0::2], right[:, 1::2]], dim=-1)  # all sines, then all cosines


def _alibi_closed_form(num_heads, *, dtype=torch.float32):
    def powers(n):
        return [2.0 ** (-8.0 * (i + 1) / n) for i in range(n)]

    low = 2 ** int(math.floor(math.log2(num_heads)))
    slopes = powers(low) + powers(2 * low)[0::2][: num_heads - low]
    return torch.tensor(slopes, dtype=dtype)


def _alibi_plain(num_heads, *, dtype=torch.float32):
    return torch.tensor([2.0 ** (-8 * (i + 1) / num_heads) for i in range(num_heads)], dtype=dtype)


def _rope_complex(x, positions=None, *, base=10000.0, interleaved=False):
    """Right, written otherwise: pairs as complex numbers, rotated by multiplication."""
    L, E = x.shape[-2], x.shape[-1]
    pos = torch.arange(L) if positions is None else positions
    theta = base ** (-torch.arange(0, E, 2, dtype=torch.float64) / E)
    turn = torch.polar(torch.ones(L, E // 2, dtype=torch.float64), pos[:, None].double() * theta)
    pairs = x.unflatten(-1, (E // 2, 2)) if interleaved else torch.stack(x.chunk(2, -1), -1)
    z = torch.view_as_complex(pairs.double().contiguous()) * turn
    r = torch.view_as_real(z)
    out = r.flatten(-2) if interleaved else torch.cat([r[..., 0], r[..., 1]], -1)
    return out.to(x.dtype)


def _rope_other_pairing(x, positions=None, *, base=10000.0, interleaved=False):
    return _rope_complex(x, positions, base=base, interleaved=not interleaved)


def _causal_loops(q_len, kv_len=None, *, align="top_left", device=None):
    S = q_len if kv_len is None else kv_len
    shift = S - q_len if align == "bottom_right" else 0
    return torch.tensor([[j <= i + shift for j in range(S)] for i in range(q_len)], dtype=torch.bool)


def _causal_strict(q_len, kv_len=None, *, align="top_left", device=None):
    return _causal_loops(q_len, kv_len, align=align) & ~torch.eye(q_len, q_len if kv_len is None else kv_len,
                                                                    dtype=torch.bool)


def _padding_compare(lengths, max_len=None, *, device=None):
    lengths = torch.as_tensor(lengths)
    n = int(lengths.max()) if max_len is None else max_len
    return torch.arange(n)[None, :] < lengths[:, None]


def _padding_inverted(lengths, max_len=None, *, device=None):
    return ~_padding_compare(lengths, max_len)


@pytest.mark.parametrize("check, right, wrong, words", [
    (P3.check_piece_sinusoidal_positional_encoding, _sinusoidal_loop, _sinusoidal_halves, "all the sines first"),
    (P3.check_piece_alibi_slopes, _alibi_closed_form, _alibi_plain, "closest power of two"),
    (P3.check_piece_apply_rope, _rope_complex, _rope_other_pairing, "the pairing is the other one"),
    (P3.check_piece_causal_mask, _causal_loops, _causal_strict, "the diagonal is missing"),
    (P3.check_piece_padding_mask, _padding_compare, _padding_inverted, "True and False are swapped"),
    (P3.check_piece_merge_heads, lambda x: torch.cat(x.unbind(1), dim=-1),
     lambda x: x.reshape(x.shape[0], x.shape[2], -1), "transpose(1, 2) first"),
    (P3.check_piece_split_heads, lambda x, n: torch.stack(x.chunk(n, dim=-1), dim=1),
     lambda x, n: x.reshape(x.shape[0], n, x.shape[1], -1), "View as (B, L, H, head_dim) first"),
], ids=["sinusoidal", "alibi", "rope", "causal_mask", "padding_mask", "merge_heads", "split_heads"])
def test_piece_check_rejects_the_typical_mistake_and_accepts_another_right_answer(check, right, wrong, words):
    result = check(right)
    assert result.passed, result.message
    _fails_with(check(wrong), words)
