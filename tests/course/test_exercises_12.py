"""Notebook 12's exercise checks: a right answer passes, a stub says "not written yet", and each typical wrong
answer gets its own hint."""

from __future__ import annotations

import torch

from attn_lib.course.exercises import check_recurrent_step, check_state_bytes
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


def test_state_bytes_right_answer_passes_and_wrong_ones_get_their_hint():
    assert check_state_bytes(lambda num_heads, head_k_dim, head_v_dim, seq_len, batch_size, bytes_per_element:
                             num_heads * head_k_dim * head_v_dim * batch_size * bytes_per_element)
    assert "not written yet" in repr(check_state_bytes(_stub))
    cases = {
        ex.HINT_SEQ_LEN: lambda H, dk, dv, S, B, e: H * dk * dv * S * B * e,  # the KV-cache habit
        ex.HINT_TWO: lambda H, dk, dv, S, B, e: 2 * H * dk * dv * B * e,
        ex.HINT_SUM_DIMS: lambda H, dk, dv, S, B, e: H * (dk + dv) * B * e,
        ex.HINT_NO_BYTES: lambda H, dk, dv, S, B, e: H * dk * dv * B,
        ex.HINT_NO_BATCH: lambda H, dk, dv, S, B, e: H * dk * dv * e,
    }
    for hint, fn in cases.items():
        fails_with(check_state_bytes(fn), hint)


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
