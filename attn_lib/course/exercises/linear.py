"""Exercise checks for notebook 12 (linear attention, state-space models, Gated DeltaNet).

- :func:`check_recurrent_step`: one step of a decayed linear-attention / SSM recurrence.
- :func:`check_fft_long_conv`: the causal long convolution through the FFT (the piece ``my_attn.linear.fft_long_conv``).
- :func:`check_kda_step`: one token of Kimi Delta Attention.

Each check compares with :mod:`attn_lib.linear` (tests/test_linear.py proves its recurrent form equal to the parallel
and chunked forms, and to ``transformers``' Mamba-2) on fresh inputs and names the typical mistake it recognises.
"""

from __future__ import annotations

import torch

from attn_lib.course.exercises._core import CheckResult, Mismatch, call, expect_close, fresh_generator, run_check
from attn_lib.linear import decayed_step

__all__ = ["check_recurrent_step", "check_fft_long_conv", "check_kda_step"]

HINT_NO_DECAY = "the old state was not decayed: multiply it by exp(log_decay) before adding key ⊗ value."
HINT_DECAY_AFTER = ("the decay was applied after adding the new token, so the new token decayed too: "
                    "new_state = exp(log_decay) * state + key ⊗ value (the decay touches only the old state).")
HINT_LOG_AS_DECAY = "log_decay is a logarithm (<= 0): the factor is torch.exp(log_decay), not log_decay itself."
HINT_OLD_STATE = ("the output was read from the OLD state: update first, then read out = new_stateᵀ query, so "
                  "that the token sees itself (the causal mask's diagonal).")
HINT_TRANSPOSED = ("the outer product is the wrong way round: the state is (E, Ev), rows indexed by the key's "
                   "dims: key[..., :, None] * value[..., None, :].")
HINT_TUPLE = "return a pair (out, new_state)."
SHAPE_MISTAKES = ("Known shape mistakes: " + HINT_TRANSPOSED + " torch.outer only takes 1-D vectors. exp(log_decay) has "
                  "shape (...): add [..., None, None] to scale a (..., E, Ev) state.")


def _pair(result, dtype):
    if type(result) not in (tuple, list) or len(result) != 2:
        raise Mismatch(f"{HINT_TUPLE} Got {type(result).__name__}.")
    out = tuple(torch.as_tensor(x) for x in result)
    for t, n in zip(out, ("out", "new_state")):
        if t.dtype != dtype:
            raise Mismatch(f"{n} has dtype {t.dtype}; expected {dtype}, the dtype of the inputs.")
    return out


def _pack(out, state):
    return torch.cat([out.reshape(-1).double(), state.reshape(-1).double()])


def check_recurrent_step(step_fn) -> CheckResult:
    """Check ``step(state, query, key, value, log_decay) -> (out, new_state)``.

    state (..., E, Ev), query and key (..., E), value (..., Ev), log_decay (...) <= 0. Expected:
    new_state = exp(log_decay) · state + key ⊗ value; out = new_stateᵀ query (..., Ev). Tried with E != Ev, with
    batch and head dims, with no decay (plain linear attention) and with strong decay (Mamba-2).
    """
    name = "check_recurrent_step"
    cases = [((2, 3), 4, 6, "mixed"), ((1,), 5, 3, "strong"), ((2,), 3, 3, "mixed"), ((3, 2), 6, 2, "none")]

    def trials():
        for trial, (lead, E, Ev, decay) in enumerate(cases):
            g = fresh_generator(name, trial)
            state = torch.randn(*lead, E, Ev, generator=g, dtype=torch.float64)
            q, k = (torch.randn(*lead, E, generator=g, dtype=torch.float64) for _ in range(2))
            v = torch.randn(*lead, Ev, generator=g, dtype=torch.float64)
            if decay == "none":
                ld = torch.zeros(lead, dtype=torch.float64)
            else:
                ld = -torch.rand(lead, generator=g, dtype=torch.float64) * (3.0 if decay == "strong" else 1.0) - 0.05
            want = decayed_step(state, q, k, v, ld)
            got = _pair(call(step_fn, {"state": state, "query": q, "key": k, "value": v, "log_decay": ld}),
                        torch.float64)
            for t, w, n in zip(got, want, ("out", "new_state")):
                if tuple(t.shape) != tuple(w.shape):
                    raise Mismatch(f"{n} has shape {tuple(t.shape)}; expected {tuple(w.shape)}." +
                                   (f" {HINT_TRANSPOSED}" if n == "new_state" and tuple(t.shape[-2:]) == (Ev, E) else ""))
            a = torch.exp(ld)[..., None, None]
            kv = k[..., :, None] * v[..., None, :]
            wrong = []
            if decay != "none":
                s = state + kv
                wrong.append((_pack((s * q[..., :, None]).sum(-2), s), HINT_NO_DECAY))
                s = a * (state + kv)
                wrong.append((_pack((s * q[..., :, None]).sum(-2), s), HINT_DECAY_AFTER))
                s = ld[..., None, None] * state + kv
                wrong.append((_pack((s * q[..., :, None]).sum(-2), s), HINT_LOG_AS_DECAY))
            s = a * state + kv
            wrong.append((_pack((state * q[..., :, None]).sum(-2), s), HINT_OLD_STATE))
            wrong.append((_pack((a * state * q[..., :, None]).sum(-2), s), HINT_OLD_STATE))
            expect_close(_pack(*got), _pack(*want), what=f"(out, new_state) for a step with {decay} decay",
                         wrong_answers=wrong, atol=1e-9, rtol=1e-7)
        return len(cases)

    return run_check(name, trials, shape_mistakes=SHAPE_MISTAKES)


def check_fft_long_conv(fft_long_conv_fn) -> CheckResult:
    """Check ``fft_long_conv(u, k)``: the causal long convolution y_t = Σ_{s<=t} k_s u_{t-s} through the FFT,
    notebook 12's exercise 2 and the piece ``my_attn.linear.fft_long_conv`` of the learner's stack.

    The same trials as ``make check-mine``'s (:func:`attn_lib.course.exercises.pieces_modern.check_piece_fft_long_conv`):
    u (..., L) and k (..., K), K <= L, leading dims that broadcast, float64 and float32, against the direct sum
    (:func:`attn_lib.linear.direct_long_conv`); no zero-padding (the product wraps around), a conjugated spectrum, a
    reversed filter, the wrong half kept, a constant factor and a complex result get their own hints; attn_lib's
    functions and the direct O(L²) sum are refused.

    Returns:
        a CheckResult. Raises: nothing; a wrong answer is a failed CheckResult with a hint.

    Source: Gu, Goel & Ré 2022 (S4), §2.4; Poli et al. 2023 (Hyena), §3.3; attn_lib.linear.fft_long_conv.
    """
    from attn_lib.course.exercises.pieces_modern import check_piece_fft_long_conv

    result = check_piece_fft_long_conv(fft_long_conv_fn)
    # the same trials, reported under this exercise's name (the piece reports as "fft_long_conv")
    message = result.message.replace(f"{result.name}:", "check_fft_long_conv:", 1)
    return CheckResult("check_fft_long_conv", result.passed, message)


def _fft_sandbox_watch() -> dict:
    from attn_lib.course.exercises.pieces_modern import check_piece_fft_long_conv

    return check_piece_fft_long_conv.sandbox_watch()


check_fft_long_conv.sandbox_watch = _fft_sandbox_watch  # graded in the sandbox with the piece's named watches


HINT_KDA_PER_HEAD = ("you decayed the whole state by one factor; Kimi Delta Attention decays each key channel (each row "
                     "of the E × Ev state) by its own exp(log_decay[e]): multiply by exp(log_decay)[..., :, None].")
HINT_KDA_DECAY_LATE = ("you decayed after writing; decay first (the old memory fades), then read Sᵀk, correct and write, "
                       "then read the output.")
HINT_KDA_NO_CORRECTION = ("you wrote β k vᵀ as plain linear attention does; the delta rule writes only the error: "
                          "β k (v - Sᵀk)ᵀ, with S already decayed.")


def check_kda_step(kda_step_fn) -> CheckResult:
    """Check ``kda_step(state, query, key, value, log_decay, beta) -> (out, new_state)``: one token of Kimi Delta
    Attention. state (..., E, Ev), query and key (..., E), value (..., Ev), log_decay (..., E) <= 0 (one per key
    channel), beta (...). Expected: S = diag(exp(log_decay)) state; new_state = S + β k (v - Sᵀk)ᵀ;
    out = new_stateᵀ query; compared with :func:`attn_lib.deltanet.kimi_delta_rule` (one token, scale 1), which
    tests/test_linear.py proves equal to transformers' ``recurrent_kimi_delta_attention``."""
    from attn_lib.deltanet import kimi_delta_rule

    name = "check_kda_step"
    cases = [((2, 3), 4, 6), ((1,), 5, 3), ((3, 2), 6, 2)]

    def trials():
        for trial, (lead, E, Ev) in enumerate(cases):
            g = fresh_generator(name, trial)
            state = torch.randn(*lead, E, Ev, generator=g, dtype=torch.float64)
            q, k = (torch.randn(*lead, E, generator=g, dtype=torch.float64) for _ in range(2))
            v = torch.randn(*lead, Ev, generator=g, dtype=torch.float64)
            ld = -torch.rand(*lead, E, generator=g, dtype=torch.float64) * 2.0 - 0.05
            beta = torch.rand(lead, generator=g, dtype=torch.float64)
            flat = (lambda t, n: t.reshape(-1, 1, 1, *t.shape[len(lead):]) if n else t.reshape(-1, 1, 1))
            out, new = kimi_delta_rule(flat(q, 1), flat(k, 1), flat(v, 1), flat(ld, 1), flat(beta, 0), scale=1.0,
                                       initial_state=state.reshape(-1, 1, E, Ev))
            want = (out.reshape(*lead, Ev), new.reshape(*lead, E, Ev))
            got = _pair(call(kda_step_fn, {"state": state, "query": q, "key": k, "value": v, "log_decay": ld,
                                           "beta": beta}), torch.float64)
            for t, w, n in zip(got, want, ("out", "new_state")):
                if tuple(t.shape) != tuple(w.shape):
                    raise Mismatch(f"{n} has shape {tuple(t.shape)}; expected {tuple(w.shape)}.")
            b = beta[..., None, None]

            def finish(s):
                return _pack((s * q[..., :, None]).sum(-2), s)

            def write(s, err):
                return s + b * k[..., :, None] * err[..., None, :]

            dec = torch.exp(ld)[..., :, None] * state
            mean = torch.exp(ld.mean(-1))[..., None, None] * state
            wrong = [
                (finish(write(mean, v - (mean * k[..., :, None]).sum(-2))), HINT_KDA_PER_HEAD),
                (finish(torch.exp(ld)[..., :, None] * write(state, v - (state * k[..., :, None]).sum(-2))),
                 HINT_KDA_DECAY_LATE),
                (finish(write(dec, v)), HINT_KDA_NO_CORRECTION),
            ]
            expect_close(_pack(*got), _pack(*want), what=f"kda_step on a state {tuple(state.shape)}",
                         wrong_answers=wrong, atol=1e-10, rtol=0)
        return len(cases)

    return run_check(name, trials)
