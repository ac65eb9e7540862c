"""Gated DeltaNet: the delta rule with a decay gate, the linear-time layers of Qwen3-Next (notebook 12).

Shapes follow :mod:`attn_lib.attention`'s legend: B batch, H heads, L positions, E key dim, Ev value dim.

The state S (E × Ev per head) is a linear map from keys to values. Each token does one step of online regression on
it (the delta rule, Widrow-Hoff): first the gate decays the memory, S ← exp(g_t) S; then S moves towards storing
k_t -> v_t with learning rate β_t, S ← S + β_t k_t (v_t - Sᵀk_t)ᵀ, which is one gradient step on ½‖Sᵀk_t - v_t‖²;
the output reads o_t = Sᵀ q_t. Source: Yang, Kautz & Hatamizadeh 2024, "Gated Delta Networks"
(https://arxiv.org/abs/2412.06464), §2-3; the chunked form is their §3.3 (the WY / UT transform of Yang et al.
2024, "Parallelizing Linear Transformers with the Delta Rule", https://arxiv.org/abs/2406.06484, §3).

- :func:`gated_delta_rule` ``form="recurrent"`` / ``"chunked"``: equal to ``transformers``'
  ``torch_recurrent_gated_delta_rule`` / ``torch_chunk_gated_delta_rule`` (models/qwen3_next; tests/test_linear.py).
- :func:`gated_deltanet_forward`: a whole ``Qwen3NextGatedDeltaNet`` layer recomputed from its weights.
- :func:`in_float64`: run such a ``transformers`` function, whose source converts everything to float32, in float64.
"""

from __future__ import annotations

import math
import types

import torch
import torch.nn.functional as F

from attn_lib._checks import (_got, check_choice, check_finite, check_fits_dtype, check_int, check_number,
                              check_on_device, check_same_device, check_same_dtype, check_scale, check_tensor, shape_of)
from attn_lib.linear import _check_step, _finite_result, _overflow_error

__all__ = ["delta_rule_step", "gated_delta_rule", "l2_normalize", "gated_deltanet_forward", "in_float64",
           "kimi_delta_rule", "kimi_delta_attention_forward"]


def l2_normalize(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """x / sqrt(Σx² + eps) over the last dim, as ``transformers``' and flash-linear-attention's ``l2norm``.

    Args:
        x: (..., E) floating tensor (float16, bfloat16, float32 or float64), e.g. the queries or keys (B, H, L, E).
        eps: float added under the square root (1e-6 as transformers').

    Returns:
        (..., E), the shape and dtype of x. Each row is divided by a power of two near its largest entry first
        (exact), so entries near the dtype's maximum (Σx² would be inf) or tiny ones (Σx² would round to 0)
        still give a unit row; an all-zero row gives 0 (also with eps = 0).

    Raises:
        TypeError: x not a floating tensor; eps not a number. ValueError: x with 0 dims; NaN or an infinity in x;
        eps NaN, infinite or < 0 (a negative eps gives NaN where Σx² < -eps).

    Source: transformers' ``l2norm`` (models/qwen3_next/modeling_qwen3_next.py), flash-linear-attention's
    ``l2norm``.
    """
    check_tensor("x", x, floating=True, min_ndim=1)
    check_finite("x", x)
    eps = check_number("eps", eps, minimum=0.0)
    # s = 2^j near each row's largest |x| (at least sqrt(eps)): x / s and eps / s / s are exact and moderate, and
    # (x / s) * rsqrt(Σ(x / s)² + eps / s²) is x * rsqrt(Σx² + eps) without its overflow or underflow
    if x.shape[-1] == 0:  # no feature: nothing to divide
        return x.clone()
    big = x.detach().abs().amax(-1, keepdim=True).clamp(min=min(math.sqrt(eps), torch.finfo(x.dtype).max))
    s = torch.where(big > 0, torch.exp2(torch.floor(torch.log2(big))), torch.ones_like(big))
    y = x / s
    s64 = s.to(torch.float64)  # eps / s², in float64: an eps above float32's maximum is not inf there
    norm2 = (y * y).sum(-1, keepdim=True) + (eps / s64 / s64).to(x.dtype)
    return torch.where(norm2 > 0, y * torch.rsqrt(norm2), torch.zeros_like(y))  # a zero row with eps = 0: 0


def delta_rule_step(state, query, key, value, log_decay, beta):
    """One token of the gated delta rule: decay, correct, read.

    Args:
        state: (..., E, Ev); query, key: (..., E) (query already scaled); value: (..., Ev);
        log_decay: (...) <= 0; beta: (...) in [0, 1], the step's learning rate.
        Finite floating tensors (float16, bfloat16, float32 or float64) of one dtype, on one device.

    Returns:
        ``(out, new_state)``: out (..., Ev) = new_stateᵀ query, new_state (..., E, Ev), in the inputs' dtype.

    Raises:
        TypeError: an argument not a floating tensor; dtypes that differ (no silent promotion).
        ValueError: state with fewer than 2 dims; the others not of the shapes above (the state's leading dims,
        no broadcasting); tensors on different devices; NaN or an infinity anywhere; log_decay > 0; beta outside
        [0, 1].

    Source: Yang, Kautz & Hatamizadeh 2024, "Gated Delta Networks", §3 (the gated delta rule
    S_t = α_t S_{t-1} (I - β_t k_t k_tᵀ) + β_t v_t k_tᵀ, in attn_lib's (E, Ev) layout); one iteration of
    transformers' ``torch_recurrent_gated_delta_rule`` (models/qwen3_next).
    """
    _check_step("delta_rule_step", state, query, key, value, log_decay, beta)
    state = torch.exp(log_decay)[..., None, None] * state
    predicted = (state * key[..., :, None]).sum(-2)  # Sᵀ k: what the memory says k maps to
    delta = beta[..., None] * (value - predicted)  # the correction, scaled by the learning rate
    state = state + key[..., :, None] * delta[..., None, :]
    return (state * query[..., :, None]).sum(-2), state


def _check_chunked_dtype(form: str, key: torch.Tensor) -> None:
    """The chunked forms' triangular solve has no float16 / bfloat16 kernel on the CPU: refused by name, not raw."""
    if form == "chunked" and key.dtype in (torch.float16, torch.bfloat16) and key.device.type == "cpu":
        raise TypeError(f"form='chunked' needs float32 or float64 inputs on the CPU (torch's triangular solve has no "
                        f"{key.dtype} kernel there), got {key.dtype}; use form='recurrent' or convert with .float()")


def _check_gated_inputs(query, key, value, log_decay, beta, initial_state, form, chunk_size) -> int:
    """The checks that gated_delta_rule and kimi_delta_attention share once the shapes are checked: one dtype and
    device, finite values, beta in [0, 1], log_decay <= 0, the form, chunked's dtype, E >= 1. Returns chunk_size."""
    check_same_dtype(query=query, key=key, value=value, log_decay=log_decay, beta=beta)
    if initial_state is not None:
        check_tensor("initial_state", initial_state, floating=True, ndim=4)
    check_same_device(query=query, key=key, value=value, log_decay=log_decay, beta=beta, initial_state=initial_state)
    for n, t in (("query", query), ("key", key), ("value", value), ("beta", beta), ("log_decay", log_decay)):
        check_finite(n, t)  # after the device check: a meta tensor has no values to read
    _check_beta(beta)
    if bool((log_decay > 0).any()):
        raise ValueError(f"log_decay must be <= 0 (a decay exp(g) <= 1), got a maximum of {float(log_decay.max()):.3g}")
    check_choice("form", form, ("recurrent", "chunked"))
    _check_chunked_dtype(form, key)
    C = check_int("chunk_size", chunk_size, minimum=1)
    if key.shape[-1] == 0:  # the default scale E^-0.5 divides by it
        raise ValueError(f"query and key need a last dim E >= 1, got key shape {shape_of(key)}")
    return C


def _check_beta(beta: torch.Tensor) -> None:
    """beta, the delta rule's learning rate per token, in [0, 1] (a larger step overshoots and diverges)."""
    if beta.numel() and bool(((beta < 0) | (beta > 1)).any()):
        raise ValueError(f"beta must be in [0, 1] (the delta rule's learning rate, e.g. sigmoid(b)), got values "
                         f"from {float(beta.min()):.3g} to {float(beta.max()):.3g}")



def _finite_pair(fn, out, state, *inputs):
    """(out, state), refused when either is not finite although every input was (an overflow in their dtype)."""
    _finite_result(fn, out, *inputs)
    _finite_result(fn, state, *inputs)
    return out, state

def gated_delta_rule(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, log_decay: torch.Tensor,
                     beta: torch.Tensor, *, form: str = "recurrent", chunk_size: int = 64, scale: float | None = None,
                     initial_state: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The gated delta rule over a sequence, token by token or chunk by chunk.

    Args:
        query, key: (B, H, L, E); value: (B, H, L, Ev); log_decay (the gate g), beta: (B, H, L).
            Floating tensors of one dtype: float32 or float64 (float16 / bfloat16 work in the recurrent form;
            the chunked form's triangular solve has no CPU kernel for them). query, key, value finite.
        form: ``"recurrent"`` (:func:`delta_rule_step` L times) or ``"chunked"`` (WY/UT form: inside a chunk, the
            C sequential corrections become one triangular solve; across chunks, the state is carried).
        chunk_size: C, positions per chunk (int >= 1).
        scale: a number > 0 multiplying the queries; default E ** -0.5, as ``transformers`` does.
        initial_state: (B, H, E, Ev) tensor or None (zeros); cast to value's dtype (refused if its values do not
            fit there: 1e39 would become inf in float32).

    Returns:
        ``(out, final_state)``: (B, H, L, Ev) and (B, H, E, Ev), in the inputs' dtype.

    Raises:
        TypeError: query, key, value, log_decay, beta or initial_state not floating tensors; the five inputs of
            different dtypes; form not a str; chunk_size not an int; scale not a number; float16 / bfloat16 CPU
            inputs with form="chunked".
        ValueError: query, key or value not 4-D; log_decay or beta not 3-D or not (B, H, L); query and key of
            different shapes or value not (B, H, L, Ev); beta outside [0, 1]; NaN or infinity in query, key, value,
            log_decay, beta
            or initial_state (a gate that forgets everything is a very negative log_decay, not -inf: the
            chunked form subtracts cumulative sums, and -inf - -inf is NaN); log_decay > 0 somewhere;
            initial_state not (B, H, E, Ev); tensors on different devices; an unknown form; chunk_size < 1; scale
            NaN, infinite or <= 0; E = 0. L = 0 gives an empty output and the initial state.
            An output or state that overflows the dtype on finite inputs.

    Source: Yang, Kautz & Hatamizadeh 2024, "Gated Delta Networks", §3; the chunked form is their chunkwise
    algorithm, the WY representation of Yang et al. 2024, "Parallelizing Linear Transformers with the Delta
    Rule". Equal to transformers' ``torch_recurrent_gated_delta_rule`` / ``torch_chunk_gated_delta_rule``
    (models/qwen3_next) and computes what flash-linear-attention's ``chunk_gated_delta_rule`` computes.
    """
    for n, t in (("query", query), ("key", key), ("value", value)):
        check_tensor(n, t, floating=True, ndim=4)
    for n, t in (("log_decay", log_decay), ("beta", beta)):
        check_tensor(n, t, floating=True, ndim=3)
        if t.shape != key.shape[:-1]:
            raise ValueError(f"{n} must have shape (B, H, L) = {shape_of(key)[:-1]}, got {shape_of(t)}")
    if query.shape != key.shape or value.shape[:-1] != key.shape[:-1]:
        raise ValueError(f"query and key must be (B, H, L, E) and value (B, H, L, Ev) with the same B, H, L; got "
                         f"query {shape_of(query)}, key {shape_of(key)}, value {shape_of(value)}")
    C = _check_gated_inputs(query, key, value, log_decay, beta, initial_state, form, chunk_size)
    Bt, H, L, E = key.shape
    q = query * check_scale(scale, E)
    if initial_state is None:
        state = torch.zeros(Bt, H, E, value.shape[-1], dtype=value.dtype, device=value.device)
    else:
        if initial_state.shape != (Bt, H, E, value.shape[-1]):
            raise ValueError(f"initial_state must have shape (B, H, E, Ev) = {(Bt, H, E, value.shape[-1])}, "
                             f"got {shape_of(initial_state)}")
        check_fits_dtype("initial_state", check_finite("initial_state", initial_state), value.dtype)
        state = initial_state.to(value.dtype)
    if L == 0:  # no position: an empty output, the state unchanged
        return value.new_zeros(value.shape), state
    outs = []
    if form == "recurrent":
        try:  # delta_rule_step itself: with ATTN_MINE set, the learner's step runs here (attn_lib.course.mine)
            for t in range(L):
                o, state = delta_rule_step(state, q[:, :, t], key[:, :, t], value[:, :, t], log_decay[:, :, t],
                                           beta[:, :, t])
                outs.append(o[:, :, None])
        except ValueError:  # every input was checked above: only a query or state that overflowed gets here
            raise _overflow_error("gated_delta_rule", value.dtype, query, key, value, log_decay, initial_state) \
                from None
        return _finite_pair("gated_delta_rule", torch.cat(outs, dim=2), state,
                            query, key, value, log_decay, initial_state)
    for s in range(0, L, C):
        qc, kc, vc = q[:, :, s:s + C], key[:, :, s:s + C], value[:, :, s:s + C]
        bc = beta[:, :, s:s + C, None]
        cum = log_decay[:, :, s:s + C].cumsum(-1)  # log decay from the chunk's start to each position
        n = kc.shape[2]
        lower = torch.ones(n, n, dtype=torch.bool, device=key.device).tril()
        decay = torch.where(lower, cum[..., :, None] - cum[..., None, :], -torch.inf).exp()  # exp(cum_i - cum_j), j<=i
        # Token i's correction uses the state after tokens < i: A = I + strictly-lower(β_i (k_i·k_j) decay_ij)
        # couples them; solving A u = β v (and A w = β Γ k) gives all the chunk's corrections at once.
        system = ((bc * kc) @ kc.transpose(-1, -2) * decay).tril(-1) + torch.eye(n, dtype=key.dtype, device=key.device)
        u = torch.linalg.solve_triangular(system, bc * vc, upper=False, unitriangular=True)
        w = torch.linalg.solve_triangular(system, bc * kc * cum.exp()[..., None], upper=False, unitriangular=True)
        v_new = u - w @ state  # the corrections, once the carried state is accounted for
        outs.append((qc * cum.exp()[..., None]) @ state + ((qc @ kc.transpose(-1, -2)) * decay) @ v_new)
        carry = (cum[..., -1:] - cum).exp()[..., None]  # decay from each position to the chunk's end
        state = cum[..., -1].exp()[..., None, None] * state + (kc * carry).transpose(-1, -2) @ v_new
    return _finite_pair("gated_delta_rule", torch.cat(outs, dim=2), state,
                        query, key, value, log_decay, initial_state)


# transformers' ACT2FN names the layer's ``activation`` (config.hidden_act) can hold, as torch functions
_ACTIVATIONS = {"silu": F.silu, "swish": F.silu, "gelu": F.gelu, "relu": F.relu, "tanh": torch.tanh,
                "sigmoid": torch.sigmoid, "gelu_pytorch_tanh": lambda t: F.gelu(t, approximate="tanh"),
                None: lambda t: t}


def gated_deltanet_forward(layer, hidden_states: torch.Tensor, *, form: str = "chunked",
                           cache: dict | None = None) -> torch.Tensor:
    """A ``transformers`` ``Qwen3NextGatedDeltaNet`` (no padding), recomputed from its weights.

    in_proj_qkvz and in_proj_ba (their outputs interleaved per key head, as the layer stores them) -> q, k, v, z, b, a;
    depthwise causal conv1d then the layer's ``activation`` (its config's ``hidden_act``, silu in Qwen3-Next's
    releases: transformers applies that one, not a fixed silu) on (q, k, v); q, k L2-normalised; beta = sigmoid(b); g = -exp(A_log)·softplus(a +
    dt_bias); each key head serves num_v_heads / num_k_heads value heads; :func:`gated_delta_rule`; RMS norm of each
    head's output times silu(z); out_proj. Mirrors transformers 5.24, models/qwen3_next/modeling_qwen3_next.py.

    Args:
        layer: a ``Qwen3NextGatedDeltaNet``; hidden_states: (B, L, hidden_size) floating, of the layer's weights'
            dtype (float32 or float64; the default chunked form needs one of them on the CPU).
        form: ``"chunked"`` (default) or ``"recurrent"``, as :func:`gated_delta_rule`.
        cache: None, or a dict (empty before the first call) in which the layer keeps what decoding needs between
            calls: ``"conv"``, the last kernel_size - 1 inputs of the convolution (B, conv_dim, K - 1), and
            ``"recurrent"``, the delta rule's state (B, num_v_heads, head_k_dim, head_v_dim). Its size does not
            grow with the tokens seen.

    Returns:
        (B, L, hidden_size), in the weights' dtype.

    Raises:
        TypeError: hidden_states not a floating tensor or not of the layer's weights' dtype; layer not a
            Qwen3NextGatedDeltaNet (no in_proj_qkvz, ...); cache not a dict. ValueError: hidden_states not 3-D,
            not on the layer's device, or not finite; a cache whose "conv" inputs are of another batch, dtype or
            device; an activation this function does not know; and what :func:`gated_delta_rule` raises (e.g. an
            unknown form).

    Source: transformers' ``Qwen3NextGatedDeltaNet`` (no-cache torch path); the layer of Yang, Kautz &
    Hatamizadeh 2024, "Gated Delta Networks", §3.
    """
    check_tensor("hidden_states", hidden_states, floating=True, ndim=3)
    _check_hf_layer("layer", layer, ("in_proj_qkvz", "in_proj_ba", "conv1d", "A_log", "dt_bias", "norm", "out_proj"),
                    "transformers' Qwen3NextGatedDeltaNet", layer_weight="out_proj", x=hidden_states)
    if cache is not None and not isinstance(cache, dict):
        raise TypeError(f"cache must be None or a dict (empty before the first call), got {type(cache).__name__}")
    act = getattr(layer, "activation", "silu")
    if act not in _ACTIVATIONS:
        raise ValueError(f"layer.activation must be one of {sorted(a for a in _ACTIVATIONS if a)} or None, got {act!r}")
    Bt, L, _ = hidden_states.shape
    Hk, Hv, Dk, Dv = layer.num_k_heads, layer.num_v_heads, layer.head_k_dim, layer.head_v_dim
    r = Hv // Hk
    qkvz = layer.in_proj_qkvz(hidden_states).view(Bt, L, Hk, 2 * Dk + 2 * r * Dv)
    q, k, v, z = qkvz.split([Dk, Dk, r * Dv, r * Dv], dim=-1)
    b, a = layer.in_proj_ba(hidden_states).view(Bt, L, Hk, 2 * r).split([r, r], dim=-1)
    mixed = torch.cat([q.reshape(Bt, L, -1), k.reshape(Bt, L, -1), v.reshape(Bt, L, -1)], dim=-1).transpose(1, 2)
    K = layer.conv_kernel_size
    past = _cached_conv(cache, mixed, K)  # causal: K - 1 zeros (or the cached inputs) before the first token
    conv = F.conv1d(torch.cat([past, mixed], -1), layer.conv1d.weight, layer.conv1d.bias, groups=layer.conv_dim)
    mixed = _ACTIVATIONS[act](conv).transpose(1, 2)
    q, k, v = mixed.split([layer.key_dim, layer.key_dim, layer.value_dim], dim=-1)

    def heads(t, n, d, rep=1):  # (B, L, n*d) -> (B, n*rep, L, d)
        return t.reshape(Bt, L, n, d).transpose(1, 2).repeat_interleave(rep, dim=1)

    q, k = l2_normalize(heads(q, Hk, Dk, r)), l2_normalize(heads(k, Hk, Dk, r))
    beta = b.reshape(Bt, L, Hv).sigmoid().transpose(1, 2)
    g = (-layer.A_log.exp() * F.softplus(a.reshape(Bt, L, Hv) + layer.dt_bias)).transpose(1, 2)
    state = None if cache is None else cache.get("recurrent")
    out, state = gated_delta_rule(q, k, heads(v, Hv, Dv), g.to(q.dtype), beta, form=form, initial_state=state)
    if cache is not None:
        cache["recurrent"] = state
    out = out.transpose(1, 2)  # (B, L, Hv, Dv)
    out = out * torch.rsqrt(out.pow(2).mean(-1, keepdim=True) + layer.norm.variance_epsilon)
    out = layer.norm.weight * out * F.silu(z.reshape(Bt, L, Hv, Dv))
    return layer.out_proj(out.reshape(Bt, L, -1))


def _check_hf_layer(name: str, layer, needed: tuple, what: str, *, layer_weight: str, x: torch.Tensor) -> None:
    """``layer`` has the submodules ``needed`` of a transformers layer, and x has its weights' dtype (TypeError)."""
    missing = [n for n in needed if not hasattr(layer, n)]
    if missing:
        raise TypeError(f"{name} must be {what}, got {type(layer).__name__} (without {', '.join(missing)})")
    weight = getattr(layer, layer_weight).weight
    if x.dtype != weight.dtype:
        raise TypeError(f"hidden_states must have the layer's dtype {weight.dtype}, got {x.dtype}; convert one of "
                        f"them (hidden_states.to({weight.dtype}) or layer.to({x.dtype}))")
    check_on_device("hidden_states", x, weight.device, of="the layer")
    check_finite("hidden_states", x)  # named here, not as the query or value it would turn into


def _cached_conv(cache: dict | None, mixed: torch.Tensor, K: int) -> torch.Tensor:
    """The K - 1 inputs before ``mixed`` (B, C, L): zeros, or the cache's "conv" (checked), which is then updated."""
    zeros = mixed.new_zeros(mixed.shape[0], mixed.shape[1], K - 1)
    if cache is None:
        return zeros
    past = cache.get("conv", zeros)
    if not isinstance(past, torch.Tensor) or past.shape != zeros.shape or past.dtype != zeros.dtype \
            or past.device != zeros.device:
        raise ValueError(f"cache['conv'] must be the last K - 1 = {K - 1} inputs of this layer for this batch, a "
                         f"{mixed.dtype} tensor {tuple(zeros.shape)} on {mixed.device}, got {_got(past)}; expected "
                         f"the cache dict this layer filled for the same batch (a new dict per layer and sequence)")
    cache["conv"] = torch.cat([past, mixed], -1)[..., -(K - 1):] if K > 1 else past
    return past


def in_float64(fn):
    """A copy of a ``transformers`` function whose ``torch.float32`` means ``torch.float64``.

    ``torch_recurrent_gated_delta_rule`` and ``torch_chunk_gated_delta_rule`` convert their inputs to float32 in
    their source (``x.to(torch.float32)``), so they agree with any float64 code only to about 1e-6. The copy runs
    the same code object, line for line, with a ``torch`` whose ``float32`` is float64: a 1e-10 comparison becomes
    possible, and nothing of the algorithm is changed. ``fn``'s decorator wrapper, if any, is skipped.

    Args:
        fn: a Python function (or a decorator wrapper with ``__wrapped__``); no tensors.

    Returns:
        a new function with fn's code, defaults and closure, whose global ``torch`` is a namespace copy of torch
        with ``float32`` = ``torch.float64`` (the real torch module is not modified). Its tensors then come out in
        float64 where fn's would be float32.

    Raises:
        TypeError: fn (after ``__wrapped__``) is not a Python function, e.g. a builtin or a C function.

    Source: the course's own test helper (tests/test_linear.py), for transformers' qwen3_next functions.
    """
    inner = getattr(fn, "__wrapped__", fn)
    if not isinstance(inner, types.FunctionType):
        raise TypeError(f"fn must be a Python function, got {type(fn).__name__}")
    fake_torch = types.SimpleNamespace(**{n: getattr(torch, n) for n in dir(torch) if not n.startswith("__")})
    fake_torch.float32 = torch.float64
    glob = dict(inner.__globals__, torch=fake_torch)
    copy = types.FunctionType(inner.__code__, glob, inner.__name__, inner.__defaults__, inner.__closure__)
    copy.__kwdefaults__ = inner.__kwdefaults__
    return copy


def kimi_delta_rule(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, log_decay: torch.Tensor,
                    beta: torch.Tensor, *, form: str = "recurrent", chunk_size: int = 64, scale: float | None = None,
                    initial_state: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Kimi Delta Attention's rule: the gated delta rule with one decay per key channel, not one per head.

    Per token: S ← diag(exp(g_t)) S (each of the E rows of the state, one per key channel, forgets at its own rate);
    then the delta rule's correction S ← S + β_t k_t (v_t - Sᵀk_t)ᵀ; the output reads o_t = Sᵀ q_t. With g_t the same
    in every channel it is :func:`gated_delta_rule`.

    Args:
        query, key: (B, H, L, E); value: (B, H, L, Ev); log_decay (g): (B, H, L, E) <= 0, a decay per channel;
            beta: (B, H, L) in [0, 1]. Floating tensors of one dtype (float32 or float64), finite.
        form: ``"recurrent"`` (token by token) or ``"chunked"`` (inside a chunk, one triangular solve gives the
            C corrections; across chunks the state is carried, as :func:`gated_delta_rule`).
        chunk_size: C (int >= 1). scale: multiplies the queries (default E ** -0.5, as transformers).
        initial_state: (B, H, E, Ev) or None (zeros); cast to value's dtype (refused if its values do not fit).

    Returns:
        ``(out, final_state)``: (B, H, L, Ev) and (B, H, E, Ev), in the inputs' dtype.

    Raises:
        TypeError: inputs not floating tensors or of different dtypes; form not a str; chunk_size not an int; scale
            not a number; float16 / bfloat16 CPU inputs with form="chunked".
        ValueError: shapes other than the above; NaN or infinity; log_decay > 0 somewhere; beta outside [0, 1]; an
            unknown form; chunk_size < 1; scale NaN, infinite or <= 0; tensors on different devices; an E = 0;
            an initial_state whose values value's dtype cannot hold; an output or state that overflows the dtype
            on finite inputs.

    Source: Kimi Team 2025, "Kimi Linear: An Expressive, Efficient Attention Architecture"
    (https://arxiv.org/abs/2510.26692), §3 (KDA, fine-grained gating); equal to transformers'
    ``recurrent_kimi_delta_attention`` / ``chunk_kimi_delta_attention`` (models/kimi_linear, tests/test_linear.py).
    """
    for n, t in (("query", query), ("key", key), ("value", value), ("log_decay", log_decay)):
        check_tensor(n, t, floating=True, ndim=4)
    check_tensor("beta", beta, floating=True, ndim=3)
    if query.shape != key.shape or log_decay.shape != key.shape or value.shape[:-1] != key.shape[:-1] \
            or beta.shape != key.shape[:-1]:
        raise ValueError(f"query, key and log_decay must be (B, H, L, E), value (B, H, L, Ev) and beta (B, H, L) "
                         f"with one B, H, L; got query {shape_of(query)}, key {shape_of(key)}, value "
                         f"{shape_of(value)}, log_decay {shape_of(log_decay)}, beta {shape_of(beta)}")
    C = _check_gated_inputs(query, key, value, log_decay, beta, initial_state, form, chunk_size)
    Bt, H, L, E = key.shape
    q = query * check_scale(scale, E)
    state = torch.zeros(Bt, H, E, value.shape[-1], dtype=value.dtype, device=value.device)
    if initial_state is not None:
        if initial_state.shape != state.shape:
            raise ValueError(f"initial_state must have shape (B, H, E, Ev) = {tuple(state.shape)}, "
                             f"got {shape_of(initial_state)}")
        check_fits_dtype("initial_state", check_finite("initial_state", initial_state), value.dtype)
        state = initial_state.to(value.dtype)
    outs = []
    if form == "recurrent":
        for t in range(L):
            state = log_decay[:, :, t, :, None].exp() * state  # each key channel's row decays at its own rate
            delta = beta[:, :, t, None] * (value[:, :, t] - (key[:, :, t, None, :] @ state)[..., 0, :])
            state = state + key[:, :, t, :, None] * delta[..., None, :]  # the correction, written along k_t
            outs.append((q[:, :, t, None, :] @ state)[..., 0, :][:, :, None])  # read: Sᵀ q_t
        return _finite_pair("kimi_delta_rule", torch.cat(outs, dim=2), state,
                            query, key, value, log_decay, initial_state)
    for s in range(0, L, C):
        qc, kc, vc, bc = q[:, :, s:s + C], key[:, :, s:s + C], value[:, :, s:s + C], beta[:, :, s:s + C, None]
        cum = log_decay[:, :, s:s + C].cumsum(2)  # (B, H, n, E): log decay from the chunk's start, per channel
        n = kc.shape[2]
        lower = torch.ones(n, n, dtype=torch.bool, device=key.device).tril()
        # decay from token j to token i (j <= i), per channel: exp(cum_i - cum_j), (B, H, n, n, E)
        pair = torch.where(lower[..., None], cum[:, :, :, None] - cum[:, :, None], -torch.inf).exp()
        kk = torch.einsum("bhie,bhje,bhije->bhij", kc, kc, pair)  # k_i · diag(decay_ij) k_j
        qk = torch.einsum("bhie,bhje,bhije->bhij", qc, kc, pair)
        system = (bc * kk).tril(-1) + torch.eye(n, dtype=key.dtype, device=key.device)
        u = torch.linalg.solve_triangular(system, bc * vc, upper=False, unitriangular=True)
        w = torch.linalg.solve_triangular(system, bc * kc * cum.exp(), upper=False, unitriangular=True)
        delta = u - w @ state  # the corrections, once the carried state is accounted for
        outs.append((qc * cum.exp()) @ state + qk @ delta)
        state = cum[:, :, -1, :, None].exp() * state + (kc * (cum[:, :, -1:] - cum).exp()).transpose(-1, -2) @ delta
    return _finite_pair("kimi_delta_rule", torch.cat(outs, dim=2), state,
                        query, key, value, log_decay, initial_state)


def kimi_delta_attention_forward(layer, hidden_states: torch.Tensor, *, form: str = "chunked",
                                 cache: dict | None = None) -> torch.Tensor:
    """A ``transformers`` ``KimiLinearDeltaAttention`` (no padding), recomputed from its weights.

    q/k/v_proj -> depthwise causal conv1d + the layer's activation -> heads; q, k L2-normalised; the forget gate
    g = -exp(A_log) · softplus(f_b(f_a(x)) + dt_bias), one value per head and key channel; beta = sigmoid(b_proj(x));
    :func:`kimi_delta_rule`; RMS norm of each head's output times its weight and sigmoid(g_b(g_a(x))); o_proj.

    Args:
        layer: a ``KimiLinearDeltaAttention``; hidden_states: (B, L, hidden_size) floating, the weights' dtype.
        form: ``"chunked"`` (default) or ``"recurrent"``. cache: None or a dict (empty before the first call)
            holding ``"conv"`` (B, 3·H·E, K - 1) and ``"recurrent"`` (B, H, E, E) between calls, as
            :func:`gated_deltanet_forward`.

    Returns:
        (B, L, hidden_size), the weights' dtype.

    Raises:
        TypeError: hidden_states not a floating tensor; cache not a dict; layer without the submodules of
            transformers' KimiDeltaAttention, or of another dtype than hidden_states. ValueError: hidden_states not
            3-D, not on the layer's device, or not finite; a cache whose "conv" inputs are of another batch, dtype
            or device; an unknown activation; and what :func:`kimi_delta_rule` raises.

    Source: transformers' ``KimiLinearDeltaAttention`` (models/kimi_linear); Kimi Team 2025, "Kimi Linear", §3.
    """
    check_tensor("hidden_states", hidden_states, floating=True, ndim=3)
    if cache is not None and not isinstance(cache, dict):
        raise TypeError(f"cache must be None or a dict (empty before the first call), got {type(cache).__name__}")
    _check_hf_layer("layer", layer, ("q_proj", "k_proj", "v_proj", "conv1d", "num_heads", "head_dim",
                                      "conv_kernel_size", "conv_dim", "b_proj", "forget_gate", "g_a_proj", "g_b_proj",
                                      "o_norm", "o_proj"),
                    "a transformers KimiDeltaAttention layer", layer_weight="q_proj", x=hidden_states)
    act = getattr(layer, "activation", "silu")
    if act not in _ACTIVATIONS:
        raise ValueError(f"layer.activation must be one of {sorted(a for a in _ACTIVATIONS if a)} or None, got {act!r}")
    x = hidden_states
    Bt, L, _ = x.shape
    H, E, K = layer.num_heads, layer.head_dim, layer.conv_kernel_size
    mixed = torch.cat([layer.q_proj(x), layer.k_proj(x), layer.v_proj(x)], -1).transpose(1, 2)  # (B, 3HE, L)
    past = _cached_conv(cache, mixed, K)
    mixed = _ACTIVATIONS[act](F.conv1d(torch.cat([past, mixed], -1), layer.conv1d.weight, layer.conv1d.bias,
                                       groups=layer.conv_dim))

    def heads(t):  # (B, L, H·E) -> (B, H, L, E)
        return t.reshape(Bt, L, H, E).transpose(1, 2)

    q, k, v = (heads(t) for t in mixed.transpose(1, 2).split(H * E, dim=-1))
    fg = layer.forget_gate
    g = -fg.A_log.exp().transpose(1, 2) * F.softplus(heads(fg.f_b_proj(fg.f_a_proj(x)) + fg.dt_bias))
    beta = torch.sigmoid(layer.b_proj(x)).transpose(1, 2)
    state = None if cache is None else cache.get("recurrent")
    out, state = kimi_delta_rule(l2_normalize(q), l2_normalize(k), v, g.to(q.dtype), beta, form=form,
                                 initial_state=state)
    if cache is not None:
        cache["recurrent"] = state
    out = out.transpose(1, 2)  # (B, L, H, E)
    out = out * torch.rsqrt(out.pow(2).mean(-1, keepdim=True) + layer.o_norm.variance_epsilon) * layer.o_norm.weight
    out = out * torch.sigmoid(layer.g_b_proj(layer.g_a_proj(x)).view(Bt, L, H, E))
    return layer.o_proj(out.reshape(Bt, L, -1))
