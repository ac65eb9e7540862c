"""Linear attention and state-space models: attention whose cost grows linearly with the length (notebook 12).

Shapes follow :mod:`attn_lib.attention`'s legend: B batch, H heads, L positions, E query/key dim, Ev value dim.
Every function here is causal: position i reads positions 0..i.

- :func:`linear_attention`: Katharopoulos et al. 2020, "Transformers are RNNs" (https://arxiv.org/abs/2006.16236),
  §3.2 (kernel feature map φ(x) = elu(x) + 1) and §3.4 (the causal form as an RNN), in three faces: ``"parallel"``
  (an (L, L) masked product), ``"recurrent"`` (a state of E × Ev per head) and ``"chunked"`` (parallel inside a chunk,
  recurrent across chunks, as the kernels of flash-linear-attention compute it).
- :func:`decayed_step`: one step of the recurrence with a scalar decay, S_t = exp(g_t) S_{t-1} + k_t v_tᵀ,
  o_t = S_tᵀ q_t. With g = 0 it is linear attention's step (without normaliser); with g = dt·A it is Mamba-2's.
- :func:`ssd`: Mamba-2's state-space duality (Dao & Gu 2024, https://arxiv.org/abs/2405.21060, §3-§5): a scalar-decay
  SSM equals masked attention with the 1-semiseparable mask L_ij = exp(g_{j+1} + ... + g_i); equal to the torch path of
  ``transformers``' ``mamba2_chunk_scan`` (tests/test_linear.py). :func:`mamba2_mixer_forward` rebuilds a whole
  ``Mamba2Mixer`` around it.
- :func:`fft_long_conv` / :func:`direct_long_conv`: a causal long convolution (S4's convolution mode, Hyena's filters;
  Gu et al. 2022 §2.4, Poli et al. 2023 §3) in O(L log L) through the FFT, and the O(L²) direct sum it equals.
- :func:`recurrent_state_bytes`: the memory of a recurrent state, which does not grow with the context.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from attn_lib._checks import (all_finite, check_bool, check_callable, check_choice, check_finite, check_int, check_number,
                              check_same_device, check_same_dtype, check_tensor, shape_of)
from attn_lib._tiling import _value_scale

__all__ = [
    "elu_feature_map", "linear_attention", "decayed_step", "decayed_attention", "ssd", "mamba2_mixer_forward",
    "fft_long_conv", "direct_long_conv", "recurrent_state_bytes",
]

FORMS = ("parallel", "recurrent", "chunked")


def elu_feature_map(x: torch.Tensor) -> torch.Tensor:
    """φ(x) = elu(x) + 1 > 0, the feature map of Katharopoulos et al. 2020 (§3.2): φ(q)·φ(k) replaces exp(q·k).

    Args:
        x: a floating tensor of any shape, e.g. a query or key (..., L, E); float16, bfloat16, float32 or float64.

    Returns:
        φ(x), the shape and dtype of x, every entry > 0 (elu(x) > -1).

    Raises:
        TypeError: x not a floating tensor. ValueError: NaN or an infinity in x (it would come out as NaN or
        inf); x on the meta device.

    Source: Katharopoulos et al. 2020, "Transformers are RNNs", §3.2.
    """
    check_tensor("x", x, floating=True)
    check_finite("x", x)
    # elu(x) + 1 = exp(x) for x < 0: computed so, not as (exp(x) - 1) + 1, which is 0 in float32 from x = -17 on
    return torch.where(x < 0, torch.exp(x.clamp(max=0)), x + 1)


def _log_elu_feature_map(x: torch.Tensor) -> torch.Tensor:
    """log φ(x) = log(elu(x) + 1): x for x < 0, log(1 + x) for x >= 0. Finite wherever x is."""
    return torch.where(x < 0, x, torch.log1p(x.clamp(min=0)))



def _overflow_error(fn: str, dtype: torch.dtype, *inputs: torch.Tensor) -> ValueError:
    """The error for a result that is not finite although every input was (an overflow in ``dtype``)."""
    big = max((float(t.detach().abs().amax()) for t in inputs if t is not None and t.numel()), default=0.0)
    return ValueError(f"{fn} overflows {dtype} (max {torch.finfo(dtype).max:.3g}) on finite inputs: "
                      f"the largest input entry is {big:.3g} (a cumulative log_decay of very negative values, or "
                      f"large query/key/value); expected inputs of a moderate scale -- normalise them or compute "
                      f"in float64")


def _finite_result(fn: str, out: torch.Tensor, *inputs: torch.Tensor) -> torch.Tensor:
    """Refuse an output that is not finite although every input was (an overflow in the inputs' dtype)."""
    if not all_finite(out.detach()):
        raise _overflow_error(fn, out.dtype, *inputs)
    return out

def _check_qkv_seq(q, k, v, log_decay=None):
    for n, t in (("query", q), ("key", k), ("value", v)):
        check_tensor(n, t, floating=True, min_ndim=2)
    check_same_device(query=q, key=k, value=v)  # before any value is read: a meta tensor has none
    for n, t in (("query", q), ("key", k), ("value", v)):
        check_finite(n, t)
    if q.shape != k.shape:
        raise ValueError(f"query and key must have the same shape (..., L, E), got query {shape_of(q)} and key {shape_of(k)}")
    if v.shape[:-1] != k.shape[:-1]:
        raise ValueError(f"value must have shape (..., L, Ev) with the key's (..., L) = {shape_of(k)[:-1]}, got {shape_of(v)}")
    if not (q.dtype == k.dtype == v.dtype):
        raise TypeError(f"query, key and value must share one dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    check_same_device(query=q, key=k, value=v)
    if q.shape[-1] == 0:
        raise ValueError(f"query and key need a last dim E >= 1, got query shape {shape_of(q)}")
    if log_decay is not None:
        check_tensor("log_decay", log_decay, floating=True)
        check_same_dtype(key=k, log_decay=log_decay)
        check_same_device(key=k, log_decay=log_decay)
        check_finite("log_decay", log_decay)
        if log_decay.shape != k.shape[:-1]:
            raise ValueError(f"log_decay must have shape (..., L) = {shape_of(k)[:-1]}, got {shape_of(log_decay)}")
        if bool((log_decay > 0).any()):
            raise ValueError("log_decay must be <= 0 everywhere (the state is multiplied by exp(log_decay) <= 1), "
                             f"got a maximum of {float(log_decay.max()):.3g}")


def _check_step(fn: str, state, query, key, value, log_decay, beta=None) -> None:
    """The checks of one recurrent step (:func:`decayed_step`, :func:`attn_lib.deltanet.delta_rule_step`).

    state (..., E, Ev); query, key (..., E); value (..., Ev); log_decay (...) <= 0; beta (...) in [0, 1] (the delta
    rule only): floating tensors of one dtype, on one device, finite. Devices are compared before any value is read.
    """
    tensors = {"state": state, "query": query, "key": key, "value": value, "log_decay": log_decay, "beta": beta}
    tensors = {n: t for n, t in tensors.items() if n != "beta" or beta is not None}
    for n, t in tensors.items():
        check_tensor(f"{fn}: {n}", t, floating=True, min_ndim=2 if n == "state" else 0)
    check_same_device(**tensors)
    check_same_dtype(**tensors)
    lead, (E, Ev) = tuple(state.shape[:-2]), tuple(state.shape[-2:])
    want = {"query": lead + (E,), "key": lead + (E,), "value": lead + (Ev,), "log_decay": lead, "beta": lead}
    for n, t in tensors.items():
        if n != "state" and tuple(t.shape) != want[n]:
            raise ValueError(f"{fn}: {n} must have shape {want[n]} for a state (..., E, Ev) of shape "
                             f"{shape_of(state)}, got {shape_of(t)}")
    for n, t in tensors.items():
        check_finite(f"{fn}: {n}", t)
    if bool((log_decay > 0).any()):
        raise ValueError(f"{fn}: log_decay must be <= 0 (the state is multiplied by exp(log_decay) <= 1), got a "
                         f"maximum of {float(log_decay.max()):.3g}")
    if beta is not None and bool(((beta < 0) | (beta > 1)).any()):
        raise ValueError(f"{fn}: beta must be in [0, 1] (the step's learning rate), got values from "
                         f"{float(beta.min()):.3g} to {float(beta.max()):.3g}")


def decayed_step(state: torch.Tensor, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                 log_decay: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """One recurrent step: ``state = exp(log_decay) * state + key ⊗ value``, then ``out = stateᵀ query``.

    Args:
        state: (..., E, Ev) floating, the memory before this token.
        query, key: (..., E); value: (..., Ev); log_decay: (...) <= 0 (0: no decay, plain linear attention).
            Finite floating tensors (float16, bfloat16, float32 or float64) of the state's dtype and device.

    Returns:
        ``(out, new_state)``: out (..., Ev) read from the **updated** state (the token sees itself, as the causal
        mask's diagonal lets it), new_state (..., E, Ev), in the inputs' dtype.

    Raises:
        TypeError: an argument not a floating tensor; dtypes that differ (no silent promotion).
        ValueError: state with fewer than 2 dims; query, key, value or log_decay not of the shapes above (the
        state's leading dims, no broadcasting); tensors on different devices; NaN or an infinity anywhere;
        log_decay > 0.

    Source: Katharopoulos et al. 2020 eq. (18)-(20) with g = 0; Mamba-2's SSM recurrence (Dao & Gu 2024 eq. (1),
    with key = B_t, query = C_t, value = dt_t x_t, log_decay = dt_t A).
    """
    _check_step("decayed_step", state, query, key, value, log_decay)
    decay = torch.exp(log_decay)[..., None, None]
    new_state = decay * state + key[..., :, None] * value[..., None, :]
    return (new_state * query[..., :, None]).sum(-2), new_state


def decayed_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, log_decay: torch.Tensor | None = None,
                      *, form: str = "parallel", chunk_size: int = 16, initial_state: torch.Tensor | None = None,
                      return_state: bool = False):
    """Causal attention without softmax, with an optional scalar decay: out_i = Σ_{j<=i} exp(g_{j+1}+...+g_i) (q_i·k_j) v_j.

    Args:
        query, key: (..., L, E); value: (..., L, Ev): floating tensors of one dtype (float16, bfloat16, float32
            or float64), finite. log_decay: (..., L) <= 0, floating and finite, or None (no decay).
        form: ``"parallel"`` ((L, L) masked matrix), ``"recurrent"`` (:func:`decayed_step` L times) or ``"chunked"``.
        chunk_size: int >= 1, positions per chunk of the chunked form (the last chunk may be shorter).
        initial_state: (..., E, Ev) state before position 0 (zeros if None), the key's batch dims and dtype;
            ``"parallel"`` allows none.
        return_state: also return the state after the last position (not for ``"parallel"``).

    Returns:
        out (..., L, Ev), or ``(out, state)`` with ``return_state``, state (..., E, Ev). Computed in the inputs'
        dtype. L = 0 gives an empty output (and the initial state).

    Raises:
        TypeError: query, key, value or log_decay not floating tensors; query, key, value and log_decay of
            different dtypes; form not a str; chunk_size not an int; initial_state not a floating tensor of the
            key's dtype; return_state not a bool.
        ValueError: fewer than 2 dims; E = 0; query and key of different shapes; value not (..., L, Ev) with the
            key's (..., L); tensors on different devices; NaN or infinity in query, key, value or log_decay; log_decay not (..., L) or > 0 somewhere;
            an unknown form; chunk_size < 1; initial_state not (..., E, Ev) with the key's batch dims, not finite
            or on another device; initial_state or return_state with the parallel form; an output or state that
            overflows the dtype on finite inputs (a cumulative log_decay beyond its range, or large query/key/value).

    Source: Katharopoulos et al. 2020 §3.3-3.4 (g = 0: causal linear attention without normaliser); Dao & Gu 2024
    (Mamba-2) §3-5 (the scalar-decay SSM as attention under the 1-semiseparable mask, and its chunked form).
    """
    _check_qkv_seq(query, key, value, log_decay)
    check_choice("form", form, FORMS)
    chunk_size = check_int("chunk_size", chunk_size, minimum=1)
    check_bool("return_state", return_state)
    if log_decay is None:
        log_decay = torch.zeros(key.shape[:-1], dtype=key.dtype, device=key.device)
    E, Ev, L = key.shape[-1], value.shape[-1], key.shape[-2]
    if initial_state is not None:
        check_tensor("initial_state", initial_state, floating=True)
        want = (*key.shape[:-2], E, Ev)
        if initial_state.shape != want:
            raise ValueError(f"initial_state must have shape (..., E, Ev) = {want} (the key's batch dims), "
                             f"got {shape_of(initial_state)}")
        check_same_dtype(key=key, initial_state=initial_state)
        check_same_device(key=key, initial_state=initial_state)
        check_finite("initial_state", initial_state)
    if form == "parallel":
        if initial_state is not None or return_state:
            raise ValueError("form='parallel' keeps no state: use form='recurrent' or 'chunked' with "
                             "initial_state / return_state")
        return _finite_result("decayed_attention", _masked_weights(query, key, log_decay.cumsum(-1)) @ value,
                              query, key, value, log_decay)
    state = initial_state if initial_state is not None else \
        torch.zeros(*key.shape[:-2], E, Ev, dtype=key.dtype, device=key.device)
    if L == 0:  # no position: an empty output, the state unchanged
        out = value.new_zeros(value.shape)
        return (out, state) if return_state else out
    outs = []
    if form == "recurrent":
        try:
            for t in range(L):
                o, state = decayed_step(state, query[..., t, :], key[..., t, :], value[..., t, :], log_decay[..., t])
                outs.append(o[..., None, :])
        except ValueError:  # every input was checked above: only a state that overflowed on the way gets here
            raise _overflow_error("decayed_attention", value.dtype, query, key, value, log_decay, initial_state) \
                from None
    else:
        for s in range(0, L, chunk_size):
            q, k, v = query[..., s:s + chunk_size, :], key[..., s:s + chunk_size, :], value[..., s:s + chunk_size, :]
            b = log_decay[..., s:s + chunk_size].cumsum(-1)  # log decay from the chunk's start to each position
            inter = (q * b.exp()[..., None]) @ state  # the past chunks, through the state
            outs.append(inter + _masked_weights(q, k, b) @ v)  # + the chunk itself, in parallel
            carry = (b[..., -1:] - b).exp()[..., None]  # decay from each position to the chunk's end
            state = b[..., -1].exp()[..., None, None] * state + (k * carry).transpose(-1, -2) @ v
    out = _finite_result("decayed_attention", torch.cat(outs, dim=-2), query, key, value, log_decay, initial_state)
    _finite_result("decayed_attention", state, query, key, value, log_decay, initial_state)
    return (out, state) if return_state else out


def _masked_weights(q, k, cum):
    """(..., L, S) weights (q_i·k_j) exp(cum_i - cum_j) for j <= i, else 0: the 1-semiseparable mask."""
    diff = cum[..., :, None] - cum[..., None, :]
    causal = torch.ones(diff.shape[-2:], dtype=torch.bool, device=q.device).tril()
    return (q @ k.transpose(-1, -2)) * torch.where(causal, diff, -torch.inf).exp()


def linear_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, *, form: str = "parallel",
                     chunk_size: int = 16, feature_map=elu_feature_map, normalize: bool = True,
                     eps: float = 1e-12) -> torch.Tensor:
    """Causal linear attention (Katharopoulos et al. 2020, §3.2-3.4): softmax's exp(q·k) replaced by φ(q)·φ(k).

    out_i = Σ_{j<=i} (φ(q_i)·φ(k_j)) v_j / Σ_{j<=i} φ(q_i)·φ(k_j) (the denominator only with ``normalize``).
    The recurrent form keeps S = Σ φ(k_j) v_jᵀ (E × Ev) and z = Σ φ(k_j) (E) per head: a fixed-size state.

    Args:
        query, key: (..., L, E); value: (..., L, Ev); floating tensors of one dtype (float16, bfloat16, float32 or
            float64), finite.
        form: ``"parallel"``, ``"recurrent"`` or ``"chunked"`` (all three equal, to round-off).
        chunk_size: int >= 1, chunk length of the chunked form.
        feature_map: φ, applied to query and key (default elu + 1); ``None`` for φ(x) = x.
        normalize: divide by the sum of the weights (the paper's form); False for the unnormalised form of
            modern layers (RetNet, GLA, DeltaNet), which normalise the output instead.
        eps: float >= 0, added to the denominator.

    Returns:
        (..., L, Ev), the dtype of the inputs.

    Raises:
        TypeError / ValueError: as :func:`decayed_attention` (types, dtypes, shapes, non-finite values, form,
            chunk_size); eps not a finite number >= 0; normalize not a bool; feature_map not callable, or giving
            non-floating or non-finite features; with ``normalize``, a normaliser Σ φ(q_i)·φ(k_j) + eps <= 0
            (features of both signs, e.g. feature_map=None) or an output that overflows.

    Source: Katharopoulos et al. 2020, "Transformers are RNNs", §3.2 (the kernelised attention) and §3.3-3.4
    (the causal and recurrent forms).
    """
    _check_qkv_seq(query, key, value)
    check_number("eps", eps, minimum=0)
    check_bool("normalize", normalize)
    if feature_map is not None:
        check_callable("feature_map", feature_map)
    log_decay = None
    if feature_map is elu_feature_map and normalize:
        # φ = exp(log φ), each factor of the weight φ(q_i)·φ(k_j) scaled so that it cannot underflow: φ(q_i) by
        # e^{-A_i} (A_i = max_e log φ(q_i)_e, cancels in the ratio), φ(k_j) by e^{-M_j} (M_j = the largest log φ(k)
        # of keys 0..j, a running max: causal), and the older keys' state decayed by e^{M_{j-1} - M_j} <= 1 when M
        # grows, as the online softmax rescales. Features of -200 used to give 0 (NaN with eps=0) in float32.
        a, b = _log_elu_feature_map(query), _log_elu_feature_map(key)
        fq = (a - a.amax(-1, keepdim=True)).exp()
        run = b.amax(-1).cummax(-1).values  # (..., L) M_j
        fk = (b - run[..., None]).exp()
        log_decay = torch.cat([torch.zeros_like(run[..., :1]), run[..., :-1] - run[..., 1:]], dim=-1)
    else:
        fq, fk = (query, key) if feature_map is None else (feature_map(query), feature_map(key))
        for name, t in (("feature_map(query)", fq), ("feature_map(key)", fk)):  # a custom φ may give NaN (log of x < 0)
            check_tensor(name, t, floating=True)
            check_finite(name, t)
    if not normalize:
        return decayed_attention(fq, fk, value, form=form, chunk_size=chunk_size)
    big = _value_scale(value, value.shape[-2] * query.shape[-1])  # values near the dtype's maximum: sum v / 2^k
    ones = torch.ones(*value.shape[:-1], 1, dtype=value.dtype, device=value.device)
    v = value if big == 1.0 else value / big
    both = decayed_attention(fq, fk, torch.cat([v, ones], dim=-1), log_decay, form=form, chunk_size=chunk_size)
    den = both[..., -1:] + eps  # the last column carries the normaliser z·φ(q)
    if not bool((den > 0).all()):  # features of any sign (feature_map=None) can sum to 0 or below: x / 0 = inf
        first = tuple(int(i) for i in (den <= 0).nonzero()[0][:-1])
        raise ValueError(f"the normaliser Σ_j φ(q_i)·φ(k_j) + eps is {float(den[first]):.3g} <= 0 at position {first} "
                         f"of shape {shape_of(den)[:-1]}: the weights of a normalised linear attention must be > 0; "
                         f"expected a positive feature_map (the default elu + 1) or normalize=False")
    out = _finite_result("linear_attention", both[..., :-1] / den, query, key, value)
    return out if big == 1.0 else out * big


def ssd(x: torch.Tensor, dt: torch.Tensor, A: torch.Tensor, B: torch.Tensor, C: torch.Tensor,
        D: torch.Tensor | None = None, *, form: str = "parallel", chunk_size: int = 16) -> torch.Tensor:
    """Mamba-2's selective SSM with scalar decay per head, as masked attention (state-space duality).

    h_t = exp(dt_t A) h_{t-1} + B_t (dt_t x_t)ᵀ,  y_t = h_tᵀ C_t + D x_t — that is :func:`decayed_attention` with
    query = C, key = B, value = dt·x and log_decay = dt·A (Dao & Gu 2024, §3.1 and eq. (16)).

    Bt is the batch size (B names the SSM's input matrix here), P the head dim, N the state size.

    Args:
        x: (Bt, H, L, P) inputs per head (P = head_dim, the "value" dim).
        dt: (Bt, H, L) step sizes > 0 (already through softplus and the bias, as Mamba-2 computes them).
        A: (H,) negative decay rates (``-exp(A_log)``).
        B, C: (Bt, H, L, N) input and output matrices (N = state size), already repeated per head.
        D: (H,) skip connection, or None.
        form: ``"parallel"``, ``"recurrent"`` or ``"chunked"``. chunk_size: positions per chunk (int >= 1).
        All tensors floating (float16, bfloat16, float32 or float64) and of one dtype.

    Returns:
        y (Bt, H, L, P), in the inputs' dtype.

    Raises:
        TypeError: x, dt or A not floating tensors; B or C not floating tensors, or dtypes that differ (from
            :func:`decayed_attention`).
        ValueError: tensors on different devices; NaN or infinity in x, dt or A; dt not (Bt, H, L); A not (H,);
            dt <= 0 or A >= 0 somewhere; B and C of different shapes or
            not (Bt, H, L, N); NaN or infinity in x·dt, dt·A, B or C; an unknown form; chunk_size < 1; D not (H,)
            or not finite (TypeError: D not a floating tensor of x's dtype).

    Source: Dao & Gu 2024, "Transformers are SSMs" (Mamba-2), §3.1 and eq. (16); equal to the torch path of
    transformers' ``Mamba2Mixer`` (tests/test_linear.py).
    """
    for n, t in (("x", x), ("dt", dt), ("A", A)):
        check_tensor(n, t, floating=True)
    check_same_device(x=x, dt=dt, A=A, B=B if isinstance(B, torch.Tensor) else None,
                      C=C if isinstance(C, torch.Tensor) else None, D=D if isinstance(D, torch.Tensor) else None)
    for n, t in (("x", x), ("dt", dt), ("A", A)):
        check_finite(n, t)  # before dt > 0 is tested: NaN > 0 is False, so a NaN step passed as "not <= 0"
    if x.dim() != 4:
        raise ValueError(f"x must have 4 dims (Bt, H, L, P), got shape {shape_of(x)}")
    if dt.shape != x.shape[:-1]:
        raise ValueError(f"dt must have shape (Bt, H, L) = {shape_of(x)[:-1]}, got {shape_of(dt)}")
    if A.shape != (x.shape[-3],):
        raise ValueError(f"A must have shape (H,) = ({x.shape[-3]},), got {shape_of(A)}")
    if bool((dt <= 0).any()) or bool((A >= 0).any()):
        raise ValueError("ssd needs dt > 0 and A < 0 (a decay exp(dt A) < 1), "
                         f"got min dt {float(dt.min()):.3g} and max A {float(A.max()):.3g}")
    if D is not None:
        check_tensor("D", D, floating=True, ndim=1)
        if D.shape != A.shape:
            raise ValueError(f"D must have shape (H,) = ({x.shape[-3]},), one skip weight per head, got {shape_of(D)}")
        check_same_dtype(x=x, D=D)
        check_finite("D", D)
    y = decayed_attention(C, B, x * dt[..., None], dt * A[:, None], form=form, chunk_size=chunk_size)
    return y if D is None else y + D[:, None, None] * x


def mamba2_mixer_forward(mixer, hidden_states: torch.Tensor, *, form: str = "parallel") -> torch.Tensor:
    """A ``transformers`` ``Mamba2Mixer`` (no cache, no padding mask), recomputed from its weights with :func:`ssd`.

    in_proj -> (gate, xBC, dt); depthwise causal conv1d + activation on xBC; dt = clamp(softplus(dt + dt_bias));
    y = ssd(x, dt, -exp(A_log), B, C, D); grouped RMS norm of y · silu(gate); out_proj. Mirrors
    ``Mamba2Mixer.forward``'s torch path (transformers 5.24, models/mamba2/modeling_mamba2.py).

    Args:
        mixer: a ``transformers.models.mamba2.modeling_mamba2.Mamba2Mixer``.
        hidden_states: (Bt, L, hidden_size) floating (Bt the batch size), of the mixer's weights' dtype
            (float32 or float64 in the tests).

    Returns:
        (Bt, L, hidden_size), in the weights' dtype.

    Raises:
        TypeError: hidden_states not a floating tensor or not of the mixer's weights' dtype; mixer not a
            Mamba2Mixer (no in_proj, ...). ValueError: hidden_states not 3-D, not on the mixer's device, or not
            finite; and what :func:`ssd` raises (e.g. a dt that softplus rounds to 0).

    Source: transformers' ``Mamba2Mixer.forward`` torch path (``torch_forward``), the block of Dao & Gu 2024
    (Mamba-2).
    """
    check_tensor("hidden_states", hidden_states, floating=True, ndim=3)
    from attn_lib.deltanet import _check_hf_layer

    _check_hf_layer("mixer", mixer, ("in_proj", "conv1d", "act", "dt_bias", "A_log", "D", "norm", "out_proj"),
                    "transformers' Mamba2Mixer", layer_weight="out_proj", x=hidden_states)
    Bt, L, _ = hidden_states.shape
    H, P, G, N = mixer.num_heads, mixer.head_dim, mixer.n_groups, mixer.ssm_state_size
    proj = mixer.in_proj(hidden_states)
    gate, xbc, dt = proj.split([mixer.intermediate_size, mixer.conv_dim, H], dim=-1)
    xbc = F.conv1d(xbc.transpose(1, 2), mixer.conv1d.weight, mixer.conv1d.bias,
                   padding=mixer.conv_kernel_size - 1, groups=mixer.conv_dim)[..., :L]
    xbc = mixer.act(xbc).transpose(1, 2)
    x, b, c = xbc.split([mixer.intermediate_size, G * N, G * N], dim=-1)
    lo, hi = mixer.time_step_limit
    dt = F.softplus(dt + mixer.dt_bias).clamp(lo, hi)

    def heads(t, d):  # (Bt, L, groups*d) -> (Bt, H, L, d), each group repeated over its heads
        t = t.reshape(Bt, L, -1, d).transpose(1, 2)
        return t.repeat_interleave(H // t.shape[1], dim=1)

    y = ssd(heads(x, P), dt.transpose(1, 2), -torch.exp(mixer.A_log), heads(b, N), heads(c, N), mixer.D, form=form)
    y = y.transpose(1, 2).reshape(Bt, L, -1) * F.silu(gate)
    groups = y.reshape(Bt, L, G, -1)
    y = (groups * torch.rsqrt(groups.pow(2).mean(-1, keepdim=True) + mixer.norm.variance_epsilon)).reshape(Bt, L, -1)
    return mixer.out_proj(mixer.norm.weight * y)


def _check_conv(u: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """The one rule of both long convolutions: floating u (..., L) and k (..., K <= L) of one dtype and device,
    finite; k zero-padded."""
    check_tensor("u", u, floating=True, min_ndim=1)
    check_tensor("k", k, floating=True, min_ndim=1)
    check_same_dtype(u=u, k=k)
    check_same_device(u=u, k=k)
    check_finite("u", u)
    check_finite("k", k)
    L, K = u.shape[-1], k.shape[-1]
    if K > L:
        raise ValueError(f"k must be at most as long as u (L={L}), got length {K}")
    return torch.nn.functional.pad(k, (0, L - K))


def _conv_scale(u: torch.Tensor, k: torch.Tensor, L: int) -> float:
    """A power of two c such that the L terms k_s u_{t-s} / c and their sum stay below the dtype's maximum."""
    if u.numel() == 0 or k.numel() == 0:
        return 1.0
    a, b = float(u.detach().abs().amax()), float(k.detach().abs().amax())
    if a == 0.0 or b == 0.0:
        return 1.0
    excess = math.log2(a) + math.log2(b) + math.log2(max(L, 1)) - math.log2(torch.finfo(u.dtype).max / 4)
    return 1.0 if excess <= 0 else 2.0 ** math.ceil(excess)


def direct_long_conv(u: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """Causal convolution y_t = Σ_{s=0..t} k_s u_{t-s}, summed directly: O(L²) per channel.

    Args:
        u: (..., L) signals; k: (..., K) filters with K <= L (a shorter one is zero-padded, as in
            :func:`fft_long_conv`), leading dims broadcast. Floating tensors (float16, bfloat16, float32 or
            float64) of one dtype.

    Returns:
        (..., L), in the inputs' dtype. Finite inputs near the dtype's maximum are summed scaled by a power of
        two (exact), so a finite result never comes out inf on the way.

    Raises:
        TypeError: u or k not a floating tensor, or of different dtypes. ValueError: u or k with 0 dims, on
        different devices; the filter is longer than the signal; NaN or an infinity in u or k (the rules of
        :func:`fft_long_conv`); a result that overflows the dtype on finite inputs.

    Source: the course's own reference for :func:`fft_long_conv`: the convolutional representation of an SSM
    (Gu et al. 2022, S4), summed directly.
    """
    k = _check_conv(u, k)
    L = u.shape[-1]
    big = _conv_scale(u, k, L)  # inputs near the dtype's maximum: sum with u / 2^j (exact), scale the sum back
    if big != 1.0:
        return _finite_result("direct_long_conv", direct_long_conv(u / big, k) * big, u, k)
    idx = torch.arange(L, device=u.device)
    lag = idx[:, None] - idx[None, :]  # (t, s): lag t - s
    causal = lag >= 0
    # y_t = sum over s <= t of k_{t-s} u_s, as a masked sum (not a matrix product with zeros above the diagonal:
    # 0 * NaN = NaN would carry a NaN at position s back to every y_t with t < s)
    terms = k[..., lag.clamp(min=0)] * u[..., None, :]  # (..., t, s)
    return torch.where(causal, terms, torch.zeros((), dtype=terms.dtype, device=u.device)).sum(-1)


def fft_long_conv(u: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """The same causal convolution in O(L log L): zero-pad both to 2L (so the circular FFT product does not wrap
    around), multiply the spectra, transform back, keep the first L values. S4's convolution mode (Gu et al. 2022,
    §2.4, "the convolutional representation") and Hyena (Poli et al. 2023, §3.3) compute their long filters this way.

    Args:
        u: (..., L) signals; k: (..., K) filters with K <= L (a shorter one is zero-padded), leading dims broadcast.
            Real floating tensors: float32 or float64, finite.

    Returns:
        (..., L), the dtype of u (empty for L = 0).

    Raises:
        TypeError: not floating tensors, float16 / bfloat16 (no CPU FFT kernel), or of different dtypes.
        ValueError: u or k with 0 dims, on different devices; the filter is longer than the signal; NaN or
        infinity in u or k (the FFT would spread it to the positions before it); a result that overflows the
        dtype on finite inputs (inputs near the maximum are transformed scaled by a power of two, as
        :func:`direct_long_conv` sums them).
    """
    if isinstance(u, torch.Tensor) and u.dtype in (torch.float16, torch.bfloat16):
        raise TypeError(f"u must be float32 or float64 (torch's CPU FFT has no {u.dtype} kernel), got {u.dtype}; "
                        f"convert with u.float() and k.float()")
    k = _check_conv(u, k)  # refuses NaN/inf: the FFT mixes every position into every output, so a NaN at
    # position s would turn y_0..y_{s-1} into NaN too, which a causal convolution must not do
    L = u.shape[-1]
    if L == 0:
        return u.new_zeros(torch.broadcast_shapes(u.shape, k.shape))
    big = _conv_scale(u, k, 4 * L * L)  # each spectrum sums 2L terms, and their product multiplies two of them
    if big != 1.0:
        return _finite_result("fft_long_conv", fft_long_conv(u / big, k) * big, u, k)
    n = 2 * L
    return torch.fft.irfft(torch.fft.rfft(u, n=n) * torch.fft.rfft(k, n=n), n=n)[..., :L].to(u.dtype)


def recurrent_state_bytes(num_heads: int, head_k_dim: int, head_v_dim: int, batch_size: int = 1,
                          bytes_per_element: float = 2) -> float:
    """Bytes of one layer's recurrent state: num_heads × head_k_dim × head_v_dim matrices per sequence.

    Unlike a KV cache it has no sequence length: the same at 1 token and at 1 million. (Layers with a short
    convolution, like Mamba-2 and Gated DeltaNet, also keep its last kernel-1 inputs: a few rows, not counted.)

    Args:
        num_heads, head_k_dim, head_v_dim, batch_size: ints >= 1 (H, E, Ev and B of the state (B, H, E, Ev)).
        bytes_per_element: float, 2 for bf16 / float16 (default), 4 for float32.

    Returns:
        float, the bytes of the (B, H, E, Ev) state; no tensors are made.

    Raises:
        TypeError: a count not an int (a bool refused), bytes_per_element not a number.
        ValueError: a count < 1; bytes_per_element NaN, infinite or < 0.125 (one bit).

    Source: the course's own (notebook 12), the state of :func:`decayed_attention` / Gated DeltaNet.
    """
    for n, v in (("num_heads", num_heads), ("head_k_dim", head_k_dim), ("head_v_dim", head_v_dim),
                 ("batch_size", batch_size)):
        check_int(n, v, minimum=1)
    check_number("bytes_per_element", bytes_per_element, minimum=0.125)
    return num_heads * head_k_dim * head_v_dim * batch_size * bytes_per_element


# ------------------------------------------------------------------ Mamba-2 decoding (issue 35)
__all__ += ["Mamba2State", "mamba2_mixer_decode"]


class Mamba2State:
    """What a Mamba-2 layer keeps while decoding, whatever the context's length: the last K - 1 inputs of its causal
    convolution ``conv`` (Bt, conv_dim, K - 1) and the SSM state ``ssm`` (Bt, H, N, P) (N the state size, P the
    head dim; :func:`decayed_attention`'s (E, Ev) layout). Both start at zero (``None`` until the first token);
    ``seq_len`` counts the tokens seen. One per layer. The tensors take the layer's dtype (float32 or float64).

    Raises:
        nothing of its own: :func:`mamba2_mixer_decode` checks and fills it.

    Source: Dao & Gu 2024 (Mamba-2): the recurrent mode; transformers' ``Mamba2Cache`` keeps the same two tensors
    (``conv_states``, ``ssm_states``, the latter as (Bt, H, P, N)).
    """

    def __init__(self) -> None:
        self.conv: torch.Tensor | None = None
        self.ssm: torch.Tensor | None = None
        self.seq_len = 0

    def nbytes(self) -> int:
        """Bytes held by the two tensors: constant in the context's length."""
        return sum(t.numel() * t.element_size() for t in (self.conv, self.ssm) if t is not None)


def mamba2_mixer_decode(mixer, hidden_states: torch.Tensor, state: Mamba2State, *, form: str = "recurrent",
                        chunk_size: int = 16) -> torch.Tensor:
    """:func:`mamba2_mixer_forward` continued from ``state``: the L new tokens of hidden_states after the
    ``state.seq_len`` already seen, ``state`` updated in place. Token by token or in chunks it equals the full
    forward (tests/test_linear.py, against transformers' ``Mamba2Mixer``).

    The convolution runs over the cached K - 1 inputs followed by the new ones (no padding); the SSM runs
    :func:`decayed_attention` from the cached state (``initial_state``) and returns the new one.

    Args:
        mixer: a transformers ``Mamba2Mixer``. hidden_states: (Bt, L, hidden_size), the weights' dtype.
        state: a :class:`Mamba2State`, new or from earlier calls with the same Bt. form: ``"recurrent"`` or
            ``"chunked"`` (the SSM inside the L tokens). chunk_size: for ``"chunked"``.

    Returns:
        (Bt, L, hidden_size), in the weights' dtype.

    Raises:
        TypeError: state not a Mamba2State; and what :func:`mamba2_mixer_forward` raises for the mixer and
            hidden_states. ValueError: form ``"parallel"`` (it keeps no state); a state of another batch size.
    """
    check_tensor("hidden_states", hidden_states, floating=True, ndim=3)
    from attn_lib.deltanet import _check_hf_layer

    _check_hf_layer("mixer", mixer, ("in_proj", "conv1d", "act", "dt_bias", "A_log", "D", "norm", "out_proj"),
                    "transformers' Mamba2Mixer", layer_weight="out_proj", x=hidden_states)
    if not isinstance(state, Mamba2State):
        raise TypeError(f"state must be an attn_lib.linear.Mamba2State, got {type(state).__name__}")
    if form not in ("recurrent", "chunked"):
        raise ValueError(f"form must be 'recurrent' or 'chunked' (a form that keeps a state), got {form!r}")
    Bt, L, _ = hidden_states.shape
    H, P, G, N, K = mixer.num_heads, mixer.head_dim, mixer.n_groups, mixer.ssm_state_size, mixer.conv_kernel_size
    if state.conv is None:
        state.conv = hidden_states.new_zeros(Bt, mixer.conv_dim, K - 1)
        state.ssm = hidden_states.new_zeros(Bt, H, N, P)
    if state.conv.shape[0] != Bt:
        raise ValueError(f"state holds a batch of {state.conv.shape[0]} sequences, got hidden_states of batch {Bt}")
    if L == 0:
        return mixer.out_proj(hidden_states.new_zeros(Bt, 0, mixer.intermediate_size))
    proj = mixer.in_proj(hidden_states)
    gate, xbc, dt = proj.split([mixer.intermediate_size, mixer.conv_dim, H], dim=-1)
    window = torch.cat([state.conv, xbc.transpose(1, 2)], dim=-1)  # (Bt, conv_dim, K - 1 + L)
    state.conv = window[..., -(K - 1):] if K > 1 else window[..., :0]
    xbc = F.conv1d(window, mixer.conv1d.weight, mixer.conv1d.bias, groups=mixer.conv_dim)  # (Bt, conv_dim, L)
    xbc = mixer.act(xbc).transpose(1, 2)
    x, b, c = xbc.split([mixer.intermediate_size, G * N, G * N], dim=-1)
    lo, hi = mixer.time_step_limit
    dt = F.softplus(dt + mixer.dt_bias).clamp(lo, hi).transpose(1, 2)  # (Bt, H, L)

    def heads(t, d):  # (Bt, L, groups*d) -> (Bt, H, L, d)
        t = t.reshape(Bt, L, -1, d).transpose(1, 2)
        return t.repeat_interleave(H // t.shape[1], dim=1)

    xh = heads(x, P)
    A = -torch.exp(mixer.A_log)
    y, state.ssm = decayed_attention(heads(c, N), heads(b, N), xh * dt[..., None], dt * A[:, None], form=form,
                                     chunk_size=chunk_size, initial_state=state.ssm, return_state=True)
    y = y + mixer.D[:, None, None] * xh
    state.seq_len += L
    y = y.transpose(1, 2).reshape(Bt, L, -1) * F.silu(gate)
    groups = y.reshape(Bt, L, G, -1)
    y = (groups * torch.rsqrt(groups.pow(2).mean(-1, keepdim=True) + mixer.norm.variance_epsilon)).reshape(Bt, L, -1)
    return mixer.out_proj(mixer.norm.weight * y)
