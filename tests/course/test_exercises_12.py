"""Notebook 12's exercise checks: a right answer passes, a stub says "not written yet", each typical wrong answer
gets its own hint, and exercise 2's FFT convolution refuses attn_lib's functions and the direct O(L²) sum."""

from __future__ import annotations

import torch

from attn_lib.course.exercises import check_fft_long_conv, check_recurrent_step
from attn_lib.course.exercises import pieces_modern as pm
from attn_lib.course.exercises import linear as ex
from exercise_asserts import fails_with
from exercise_asserts import not_written as _stub


def _step(kind):
    def fn(state, query, key, value, log_decay):
        a = torch.exp(log_decay)[..., None, None]
        kv = key[..., :, None] * value[..., None, :]
        if kind == "transposed":
            kv = value[..., :, None] * key[..., None, :]
        new = {"no_decay": state + kv, "decay_after": a * (state + kv),
               "log_as_decay": log_decay[..., None, None] * state + kv}.get(kind, a * state + kv)
        read = a * state if kind == "old_state" else new
        if kind == "transposed":
            return (new * value[..., :, None]).sum(-2), new
        return (read * query[..., :, None]).sum(-2), new

    return fn


def test_recurrent_step_right_answer_passes():
    result = check_recurrent_step(_step("right"))
    assert result and "passed on 4 fresh inputs" in repr(result)


def test_recurrent_step_stub_says_not_written():
    result = check_recurrent_step(_stub)
    assert not result and "not written yet" in repr(result)


def test_recurrent_step_wrong_answers_get_their_hint():
    for kind, hint in {"no_decay": ex.HINT_NO_DECAY, "decay_after": ex.HINT_DECAY_AFTER,
                       "log_as_decay": ex.HINT_LOG_AS_DECAY, "old_state": ex.HINT_OLD_STATE,
                       "transposed": ex.HINT_TRANSPOSED}.items():
        fails_with(check_recurrent_step(_step(kind)), hint)


def test_recurrent_step_wants_a_pair():
    fails_with(check_recurrent_step(lambda s, q, k, v, g: s), "return a pair (out, new_state)")


def _conv(kind):
    """fft_long_conv, right or with one typical mistake (``kind``)."""
    def fn(u, k):
        L = u.shape[-1]
        n = L if kind == "circular" else 2 * L
        norm = "ortho" if kind == "ortho" else "backward"  # "ortho" on all three transforms: off by sqrt(n)
        ku = torch.fft.rfft(k.flip(-1) if kind == "flipped" else k, n=n, norm=norm)
        if kind == "conj":
            ku = ku.conj()
        y = torch.fft.irfft(torch.fft.rfft(u, n=n, norm=norm) * ku, n=n, norm=norm)
        return {"tail": y[..., L:], "full": y}.get(kind, y[..., :L])

    return fn


def test_fft_long_conv_right_answers_pass():
    result = check_fft_long_conv(_conv("right"))
    assert result and "check_fft_long_conv: passed on 5 fresh inputs" in repr(result)

    def complex_minimal(u, k):  # complex FFTs of the least n that does not wrap, L + K - 1, then the real part
        L, K = u.shape[-1], k.shape[-1]
        y = torch.fft.ifft(torch.fft.fft(u, n=L + K - 1) * torch.fft.fft(k, n=L + K - 1)).real
        return y[..., :L].to(u.dtype)

    assert check_fft_long_conv(complex_minimal)
    fails_with(check_fft_long_conv(_stub), "not written yet")


def test_fft_long_conv_wrong_answers_get_their_hint():
    for kind, hint in {"circular": pm.HINT_FFT_CIRCULAR, "conj": pm.HINT_FFT_CONJ, "flipped": pm.HINT_FFT_FLIPPED,
                       "tail": pm.HINT_FFT_HALF, "ortho": pm.HINT_FFT_SCALE}.items():
        fails_with(check_fft_long_conv(_conv(kind)), hint)
    fails_with(check_fft_long_conv(_conv("full")), "has shape", "keep the first L values")

    def complex_result(u, k):
        n = 2 * u.shape[-1]
        return torch.fft.ifft(torch.fft.fft(u, n=n) * torch.fft.fft(k, n=n))[..., :u.shape[-1]]

    fails_with(check_fft_long_conv(complex_result), pm.HINT_FFT_COMPLEX)


def test_fft_long_conv_refuses_the_library_and_the_direct_sum():
    from attn_lib.linear import direct_long_conv, fft_long_conv

    fails_with(check_fft_long_conv(fft_long_conv), "called attn_lib's fft_long_conv")
    fails_with(check_fft_long_conv(lambda u, k: direct_long_conv(u, k)), "called attn_lib's direct_long_conv")

    def loop(u, k):  # the definition, one position at a time: right, but O(L²)
        kk = torch.nn.functional.pad(k, (0, u.shape[-1] - k.shape[-1]))
        return torch.stack([(kk[..., :t + 1].flip(-1) * u[..., :t + 1]).sum(-1) for t in range(u.shape[-1])], -1)

    def toeplitz(u, k):  # the (L, L) matrix of the filter's shifts
        L = u.shape[-1]
        kk = torch.nn.functional.pad(k, (0, L - k.shape[-1]))
        d = torch.arange(L)[:, None] - torch.arange(L)[None, :]
        return (torch.where(d >= 0, kk[..., d.clamp(min=0)], 0.0) @ u[..., :, None])[..., 0]

    def conv1d(u, k):  # torch's convolution (a correlation: flip the filter, pad on the left)
        L, K = u.shape[-1], k.shape[-1]
        w = torch.broadcast_to(k, u.shape[:-1] + (K,)).reshape(-1, 1, K).flip(-1)
        x = torch.nn.functional.pad(u.reshape(1, -1, L), (K - 1, 0))
        return torch.nn.functional.conv1d(x, w, groups=x.shape[1]).reshape(u.shape)

    for fn, how in ((loop, "a loop over them"), (toeplitz, "a Toeplitz matrix"), (conv1d, "(conv1d)")):
        fails_with(check_fft_long_conv(fn), "the O(L²) route", how)


def test_check_kda_step():
    import torch

    from attn_lib.course.exercises import check_kda_step

    def right(state, query, key, value, log_decay, beta):
        s = torch.exp(log_decay)[..., :, None] * state
        err = value - torch.einsum("...e,...ev->...v", key, s)
        s = s + beta[..., None, None] * key[..., :, None] * err[..., None, :]
        return torch.einsum("...e,...ev->...v", query, s), s

    def loop(state, query, key, value, log_decay, beta):  # one channel (row of the state) at a time
        s = state.clone()
        for e in range(s.shape[-2]):
            s[..., e, :] = s[..., e, :] * torch.exp(log_decay[..., e, None])
        err = value - (s * key[..., :, None]).sum(-2)
        s = s + beta[..., None, None] * key[..., :, None] * err[..., None, :]
        return (s * query[..., :, None]).sum(-2), s

    assert check_kda_step(right)
    assert check_kda_step(loop)

    def per_head(state, query, key, value, log_decay, beta):
        return right(state, query, key, value, log_decay.mean(-1, keepdim=True).expand_as(log_decay), beta)

    def no_correction(state, query, key, value, log_decay, beta):
        s = torch.exp(log_decay)[..., :, None] * state + beta[..., None, None] * key[..., :, None] * value[..., None, :]
        return (s * query[..., :, None]).sum(-2), s

    fails_with(check_kda_step(per_head), "each key channel")
    fails_with(check_kda_step(no_correction), "only the error")
    fails_with(check_kda_step(_stub), "not written yet")
