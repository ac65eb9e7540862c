"""One attention layer with the switches 2024-2026 models flip: QK-norm, logit soft-capping, a sliding window,
learned sinks and KV sharing across layers (notebook 11).

:class:`VariantAttention` is grouped-query attention with RoPE (as :class:`attn_lib.mha.MultiHeadAttention`) plus:

- ``qk_norm``: RMSNorm over each head's query and key before RoPE (Qwen3, OLMo 2, Gemma 3; Dehghani et al. 2023,
  "Scaling Vision Transformers to 22 Billion Parameters", section 3.1: it keeps the logits from growing);
- ``softcap``: scores become cap · tanh(scores / cap), before the mask (Gemma 2 report, section 2.2: 50.0);
- ``sliding_window``: the mask of :mod:`attn_lib.windows` (Mistral; Gemma 2, 3; gpt-oss's alternate layers);
- ``sinks``: one learned logit per head, an extra term in the softmax's denominator that takes weight from every key
  and gives back nothing (gpt-oss model card, section 2.1). It is computed with the course's SDPA: a zero key and a
  zero value appended, whose score the float mask sets to the sink logit;
- KV sharing: ``forward(x, shared_kv=...)`` takes the keys and values an earlier layer returned with
  ``return_kv=True``; such a layer has no k/v projections and caches nothing (Gemma 3n: its last layers reuse the
  K and V of the last non-shared layer of the same kind).

``from_hf`` copies transformers' ``MistralAttention``, ``Qwen3Attention``, ``Gemma2Attention``, ``Gemma3Attention``,
``GptOssAttention`` and ``Gemma3nTextAttention``; tests/test_variants.py proves each equal in float64.
Shapes use the legend of :mod:`attn_lib.attention`.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from attn_lib._checks import (check_bool, check_dtype, check_finite, check_int, check_number, check_on_device,
                              check_rope_base,
                              check_same_dtype, check_scale, check_tensor, claim_cache, scores_overflow_error,
                              shape_of)
from attn_lib.attention import scaled_dot_product_attention
from attn_lib.gqa import repeat_kv
from attn_lib.kv_cache import KVCache, KVCacheProtocol
from attn_lib.positional import apply_rope
from attn_lib.windows import RingKVCache, window_mask_from_positions

__all__ = ["VariantAttention", "softcap", "max_logit", "Gemma4Attention", "proportional_rope"]

# the attention modules whose forward passes attn_logit_softcapping on (transformers 5.24); Gemma3Attention stores
# it too but never uses it, and Gemma 3n's text attention has none
_SOFTCAPPED = ("Gemma2Attention",)
# transformers' RMSNorms that multiply by (1 + w) (their weight is stored as w - 1, initialised to 0)
_ONE_PLUS_W = ("Gemma2", "Gemma3RMS", "GemmaRMS", "Qwen3NextRMSNorm", "Qwen3_5RMSNorm")


def softcap(scores: torch.Tensor, cap: float) -> torch.Tensor:
    """Logit soft-capping: cap · tanh(scores / cap), smooth, odd, ~identity for |s| << cap, bounded by ±cap.

    Args:
        scores: floating tensor of any shape, usually the attention scores (B, H, L, S); float16, bfloat16,
            float32 or float64. cap: finite number > 0 (Gemma 2: 50.0 on the attention scores, 30.0 on the
            final logits).

    Returns:
        the capped scores, the shape and dtype of ``scores``.

    Raises:
        TypeError: scores not a floating tensor; cap not a number. ValueError: NaN or an infinity in scores (a
            NaN would pass through silently; mask after capping, as Gemma 2 does); scores on the meta device; cap
            not a finite number > 0, or outside the normal range of the scores' dtype, [finfo.tiny, finfo.max]
            (a cap of 1e39 is inf in float32: scores / inf = 0 and inf * 0 = NaN; one below finfo.tiny rounds
            towards 0).

    Source: Gemma Team 2024, "Gemma 2: Improving Open Language Models at a Practical Size" (logit soft-capping,
    after Bello et al. 2016); transformers' ``Gemma2Attention`` (``attn_logit_softcapping``).
    """
    check_tensor("scores", scores, floating=True)
    check_finite("scores", scores)
    cap = _check_cap("cap", cap, scores.dtype)
    return cap * torch.tanh(scores / cap)


def _check_cap(name: str, cap, dtype: torch.dtype) -> float:
    cap = check_number(name, cap, positive=True)
    info = torch.finfo(dtype)
    if not info.tiny <= cap <= info.max:
        raise ValueError(f"{name} must be a number in [{info.tiny:.3g}, {info.max:.3g}] (what {dtype} holds as a "
                         f"normal number), got {cap:.3g}")
    return cap


def max_logit(q: torch.Tensor, k: torch.Tensor, scale: float | None = None) -> float:
    """The largest |q·k| · scale over all pairs: what QK-norm bounds. q (..., L, E), k (..., S, E), same heads.

    Args:
        q: (..., L, E), k: (..., S, E) floating tensors of one dtype (float16, bfloat16, float32 or float64); the
            leading dims broadcast (e.g. (B, H) for both). scale: a float, default E^-0.5 (not checked).

    Returns:
        a Python float (detached: no gradient flows).

    Raises:
        TypeError: not floating tensors, or of different dtypes; scale not a number. ValueError: fewer than 2 dims;
        E differs; no query or no key (an empty tensor); scale NaN, infinite or <= 0; NaN or inf in q or k; scores
        that overflow the dtype. Not checked: leading dims
        that do not broadcast (torch's RuntimeError).

    Source: the course's own measure (notebook 11) of the logit growth that QK-norm prevents (Dehghani et al.
    2023, ViT-22B).
    """
    check_tensor("q", q, floating=True, min_ndim=2)
    check_tensor("k", k, floating=True, min_ndim=2)
    check_same_dtype(q=q, k=k)
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q and k must share E, got {shape_of(q)} and {shape_of(k)}")
    if q.numel() == 0 or k.numel() == 0:
        raise ValueError(f"max_logit needs at least one query and one key, got q {shape_of(q)} and k {shape_of(k)}")
    s = check_scale(scale, q.shape[-1])
    check_finite("q", q)
    check_finite("k", k)
    out = float((q.detach() @ k.detach().transpose(-2, -1)).abs().max() * s)
    if not math.isfinite(out):
        raise scores_overflow_error(q, k, s, q.dtype)
    return out


def _rms_from_hf(norm: nn.Module, dim: int) -> nn.RMSNorm:
    """transformers' RMSNorm -> torch's nn.RMSNorm: Llama/Qwen3/Gemma 3n multiply by w, Gemma 2/3 by (1 + w)."""
    eps = getattr(norm, "variance_epsilon", getattr(norm, "eps", 1e-6))
    weight = getattr(norm, "weight", None)
    name = type(norm).__name__
    if weight is None or (name.startswith("Gemma3n") and not getattr(norm, "with_scale", True)):
        return nn.RMSNorm(dim, eps=eps, elementwise_affine=False)
    new = nn.RMSNorm(dim, eps=eps, dtype=weight.dtype, device=weight.device)
    with torch.no_grad():
        new.weight.copy_(1.0 + weight if name.startswith(_ONE_PLUS_W) else weight)
    return new


def _check_shared_kv(shared_kv, B: int, Hkv: int, E: int, min_len: int, x: torch.Tensor) -> None:
    """shared_kv = (keys, values), each (B, Hkv, S, E) of x's dtype and device, S >= min_len; else TypeError/ValueError."""
    if not isinstance(shared_kv, (tuple, list)) or len(shared_kv) != 2:
        raise TypeError(f"shared_kv must be a pair (keys, values) of tensors, got {type(shared_kv).__name__}")
    for name, t in zip(("shared_kv keys", "shared_kv values"), shared_kv):
        check_tensor(name, t, floating=True, ndim=4)
        if t.dtype != x.dtype:
            raise TypeError(f"{name} must have x's dtype {x.dtype}, got {t.dtype}")
        if t.device != x.device:
            raise ValueError(f"{name} must be on x's device {x.device}, got {t.device}")
        if t.shape[0] != B or t.shape[1] != Hkv or t.shape[3] != E or t.shape[2] < min_len:
            raise ValueError(f"{name} must be (B, Hkv, S, head_dim) = ({B}, {Hkv}, S >= {min_len}, {E}) "
                             f"(S covers the cached tokens and the {min_len} queries' positions), got {shape_of(t)}")


class VariantAttention(nn.Module):
    """Causal grouped-query attention with RoPE and the switches of recent models (see the module's docstring).

    Args:
        d_model: model width. num_heads: H. num_kv_heads: Hkv (divides H). head_dim: E.
        rope_base: RoPE's theta (half-split pairs, HF's ``rotate_half``).
        bias: biases of q/k/v/o_proj. scale: score multiplier (default E^-0.5; Gemma 2 uses query_pre_attn_scalar^-0.5,
            Gemma 3n 1.0).
        qk_norm: RMSNorm (eps ``norm_eps``) of each query and key head before RoPE. v_norm: RMSNorm without a
            weight on each value head (Gemma 3n).
        softcap: None or cap > 0. sliding_window: None or the window (keys seen, itself included). sinks: learn
            one sink logit per head (``self.sinks``, (H,)).
        kv_shared: this layer reuses another layer's K and V (no k/v projections; pass ``shared_kv``).
        output_gate: gated attention (Qwen3-Next, Qwen3.5): q_proj also makes one gate logit per head and channel,
            and each head's output is multiplied by sigmoid(gate) before o_proj (Qiu et al. 2025, "Gated Attention
            for Large Language Models", their G1 position, elementwise and head-specific).
        rotary_dim: RoPE on the first rotary_dim dims of each head only (even, <= head_dim; default head_dim;
            Qwen3-Next: head_dim / 4, its ``partial_rotary_factor``).

        norm_eps: the RMSNorms' epsilon, a finite number >= 0. dtype: the weights' floating torch.dtype (None: float32);
            ``forward``'s x must have it.

    Shapes: x (B, L, d_model) -> (B, L, d_model); queries (B, H, L, E), keys and values (B, Hkv, S, E) (here
    Ev = E); :meth:`attend` takes a (L, S) bool mask.

    Raises:
        TypeError: a size (sliding_window included) not an int; bias, qk_norm, v_norm, sinks or kv_shared not a
            bool; rope_base, scale or softcap not a number; dtype not a torch.dtype (or its name).
        ValueError: a size < 1; Hkv not dividing H; an odd head_dim (RoPE); rotary_dim odd or > head_dim;
            rope_base NaN, infinite or <= 1; scale or softcap NaN, infinite or <= 0; softcap outside the dtype's
            normal range (as :func:`softcap`); an integer dtype.

    Source: grouped-query attention (Ainslie et al. 2023) with RoPE (Su et al. 2021) as transformers'
    ``MistralAttention``; QK-norm (Dehghani et al. 2023) as ``Qwen3Attention``; soft-capping (Gemma 2, after
    Bello et al. 2016) as ``Gemma2Attention``; sliding windows (Jiang et al. 2023, Mistral 7B); sinks as
    ``GptOssAttention`` (OpenAI's gpt-oss model card, 2025); KV sharing as ``Gemma3nTextAttention``; the output
    gate and partial RoPE as ``Qwen3NextAttention`` / ``Qwen3_5Attention`` (Qiu et al. 2025, section 3).
    """

    def __init__(self, d_model: int, num_heads: int, num_kv_heads: int, head_dim: int, *, rope_base: float = 10000.0,
                 bias: bool = False, scale: float | None = None, qk_norm: bool = False, v_norm: bool = False,
                 norm_eps: float = 1e-6, softcap: float | None = None, sliding_window: int | None = None,
                 sinks: bool = False, kv_shared: bool = False, output_gate: bool = False,
                 rotary_dim: int | None = None, dtype: torch.dtype | None = None) -> None:
        super().__init__()
        d, H, Hkv, E = (check_int(n, v, minimum=1) for n, v in (("d_model", d_model), ("num_heads", num_heads),
                                                               ("num_kv_heads", num_kv_heads), ("head_dim", head_dim)))
        if H % Hkv:
            raise ValueError(f"num_kv_heads={Hkv} must divide num_heads={H}")
        if E % 2:
            raise ValueError(f"head_dim must be even for RoPE, got {E}")
        for n, v in (("bias", bias), ("qk_norm", qk_norm), ("v_norm", v_norm), ("sinks", sinks), ("kv_shared", kv_shared)):
            check_bool(n, v)
        check_bool("output_gate", output_gate)
        self.rotary_dim = E if rotary_dim is None else check_int("rotary_dim", rotary_dim, minimum=2)
        if self.rotary_dim > E or self.rotary_dim % 2:
            raise ValueError(f"rotary_dim must be an even int in [2, head_dim={E}], got {rotary_dim}")
        self.rope_base = check_rope_base(rope_base, allow_none=False)
        self.scale = check_scale(scale, E)
        dtype = check_dtype("dtype", dtype, allow_none=True)
        self.softcap = None if softcap is None else _check_cap("softcap", softcap, dtype or torch.get_default_dtype())
        self.sliding_window = None if sliding_window is None else check_int("sliding_window", sliding_window, minimum=1)
        self.d_model, self.num_heads, self.num_kv_heads, self.head_dim = d, H, Hkv, E
        self.kv_shared = kv_shared
        f = {"dtype": dtype}
        self.output_gate = output_gate
        self.gate_proj_rows = H * E if output_gate else 0  # Qwen3-Next: q_proj also makes the gate's logits
        self.q_proj = nn.Linear(d, H * E + self.gate_proj_rows, bias=bias, **f)
        if not kv_shared:
            self.k_proj = nn.Linear(d, Hkv * E, bias=bias, **f)
            self.v_proj = nn.Linear(d, Hkv * E, bias=bias, **f)
        self.o_proj = nn.Linear(H * E, d, bias=bias, **f)
        norm_eps = check_number("norm_eps", norm_eps, minimum=0.0)  # < 0: NaN on a small head
        self.q_norm = nn.RMSNorm(E, eps=norm_eps, **f) if qk_norm else None
        self.k_norm = nn.RMSNorm(E, eps=norm_eps, **f) if qk_norm and not kv_shared else None
        self.v_norm = nn.RMSNorm(E, eps=norm_eps, elementwise_affine=False) if v_norm and not kv_shared else None
        self.sinks = nn.Parameter(torch.zeros(H, **f)) if sinks else None

    def extra_repr(self) -> str:
        on = [n for n in ("q_norm", "sinks") if getattr(self, n) is not None]
        return (f"d_model={self.d_model}, num_heads={self.num_heads}, num_kv_heads={self.num_kv_heads}, "
                f"head_dim={self.head_dim}, softcap={self.softcap}, sliding_window={self.sliding_window}, "
                f"kv_shared={self.kv_shared}, with={on}")

    def _heads(self, x, proj, norm, n):
        B, L, _ = x.shape
        h = proj(x).view(B, L, n, self.head_dim)  # (B, L, n, E)
        return (norm(h) if norm is not None else h).transpose(1, 2)  # norm over E, per head -> (B, n, L, E)

    def _queries(self, x):
        """(queries (B, H, L, E) after q_norm, gate (B, L, H·E) or None): q_proj makes both when output_gate."""
        if self.gate_proj_rows == 0:
            return self._heads(x, self.q_proj, self.q_norm, self.num_heads), None
        B, L, _ = x.shape
        q, gate = self.q_proj(x).view(B, L, self.num_heads, 2 * self.head_dim).chunk(2, dim=-1)  # per head: q | gate
        q = self.q_norm(q) if self.q_norm is not None else q
        return q.transpose(1, 2), gate.reshape(B, L, -1)

    def _rope(self, t, positions):
        """RoPE on the first rotary_dim of each head's E dims (all of them by default), the rest passed through."""
        r = self.rotary_dim
        if r == self.head_dim:
            return apply_rope(t, positions, base=self.rope_base)
        return torch.cat([apply_rope(t[..., :r], positions, base=self.rope_base), t[..., r:]], -1)

    def attend(self, q, k, v, keep: torch.Tensor) -> torch.Tensor:
        """softmax(softcap(q kᵀ · scale) + mask [+ sink]) v for q (B, H, L, E), k/v (B, Hkv, S, E), keep (L, S) bool."""
        H = self.num_heads
        if self.sinks is not None:
            check_finite("sinks (the layer's parameter)", self.sinks)
        if self.softcap is None:
            mask = keep
            if self.sinks is not None:  # a zero key/value whose score the float mask sets to the head's sink logit
                k = torch.cat([k, k.new_zeros(*k.shape[:2], 1, k.shape[-1])], 2)
                v = torch.cat([v, v.new_zeros(*v.shape[:2], 1, v.shape[-1])], 2)
                blocked = torch.zeros(keep.shape, dtype=q.dtype, device=q.device).masked_fill(~keep, float("-inf"))
                sink = self.sinks.to(q.dtype)[:, None, None].expand(H, keep.shape[0], 1)
                mask = torch.cat([blocked.expand(H, *keep.shape), sink], -1)  # (H, L, S + 1)
            out, _ = scaled_dot_product_attention(q, k, v, mask, scale=self.scale,
                                                  enable_gqa=self.num_kv_heads != H)
            return out
        # soft-capping is not a mask: the scores are computed here, then capped, masked and normalised
        k, v = repeat_kv(k, H // self.num_kv_heads), repeat_kv(v, H // self.num_kv_heads)
        scores = softcap(q @ k.transpose(-2, -1) * self.scale, self.softcap).masked_fill(~keep, float("-inf"))
        if self.sinks is not None:
            scores = torch.cat([scores, self.sinks.to(q.dtype)[:, None, None].expand(*scores.shape[:-1], 1)], -1)
        return torch.softmax(scores, -1)[..., : v.shape[-2]] @ v

    def forward(self, x: torch.Tensor, *, cache: KVCache | RingKVCache | None = None,
                shared_kv: tuple[torch.Tensor, torch.Tensor] | None = None, return_kv: bool = False):
        """Causal attention over x, continuing the tokens in ``cache``.

        Args:
            x: (B, L, d_model) floating.
            cache: a :class:`KVCache` (all tokens) or a :class:`~attn_lib.windows.RingKVCache` (the window only);
                the new tokens sit at positions cache.seq_len ... and are added to it.
            shared_kv: for a ``kv_shared`` layer, the (keys, values) (B, Hkv, S, E) of the layer it shares with, at
                positions 0..S-1, the L queries being the last L of them.
            return_kv: also return the (keys, values) this layer attended over (after RoPE and the cache).

        Returns:
            (B, L, d_model), or (output, (keys, values)) with ``return_kv``.

        x must have the weights' dtype (float32 by default; float64 in the tests); the output has it too.

        Raises:
            TypeError: x not floating or not of the weights' dtype; a flag not a bool; cache not a KV cache;
                shared_kv not a pair of floating tensors of x's dtype.
            ValueError: x of the wrong width; shared_kv missing for a kv_shared layer (or given to one that is
                not); shared_kv's tensors not (B, Hkv, S, head_dim) with S >= cached + L (the queries are the last
                L of the S positions), on x's device; x (or the sinks) not on the layer's device; a cache on
                another device; a RingKVCache given to a layer without sliding_window, or one
                whose window is smaller than the layer's; a cache that already holds another layer's tokens; NaN or
                inf in the layer's sinks; and what the cache's ``update`` and scaled_dot_product_attention raise.
                L = 0 or B = 0 gives an empty output (with ``return_kv``, empty keys and values).
        """
        check_tensor("x", x, floating=True, ndim=3)
        check_bool("return_kv", return_kv)
        if x.shape[-1] != self.d_model:
            raise ValueError(f"x must be (B, L, d_model={self.d_model}), got shape {shape_of(x)}")
        if self.kv_shared != (shared_kv is not None):
            raise ValueError("a kv_shared layer needs shared_kv=(keys, values) from the layer it shares with; "
                             f"this layer has kv_shared={self.kv_shared}, got shared_kv={type(shared_kv).__name__}")
        weight = self.q_proj.weight
        if x.dtype != weight.dtype:
            raise TypeError(f"x must have the layer's dtype {weight.dtype}, got {x.dtype}; convert one of them "
                            f"(x.to({weight.dtype}) or layer.to({x.dtype}))")
        check_on_device("x", x, weight.device, of="the layer")
        if self.sinks is not None:
            check_on_device("sinks (the layer's parameter)", self.sinks, weight.device, of="the layer")
        if cache is not None and not isinstance(cache, (KVCacheProtocol, RingKVCache)):
            raise TypeError(f"cache must be None, a KVCache or a RingKVCache, got {type(cache).__name__}")
        if isinstance(cache, RingKVCache):  # a ring keeps `window` tokens: fewer than the layer sees is wrong
            if self.sliding_window is None:
                raise ValueError(f"a RingKVCache keeps only its last {cache.window} tokens, but this layer has no "
                                 f"sliding_window (it attends to every token); expected a KVCache")
            if cache.window < self.sliding_window:
                raise ValueError(f"RingKVCache(window={cache.window}) keeps fewer tokens than the layer's "
                                 f"sliding_window={self.sliding_window}; expected a ring of window >= "
                                 f"{self.sliding_window}")
        B, L, _ = x.shape
        if B == 0 or L == 0:  # nothing to attend from: an empty output, the cache untouched
            out = self.o_proj(x.new_zeros(B, L, self.num_heads * self.head_dim))
            if not return_kv:
                return out
            if shared_kv is not None:
                return out, tuple(shared_kv)
            k0 = x.new_zeros(B, self.num_kv_heads, 0, self.head_dim)
            return out, (k0, k0.clone())
        if cache is not None:
            claim_cache(cache, self)
        past = 0 if cache is None else cache.seq_len
        if shared_kv is not None:
            _check_shared_kv(shared_kv, B, self.num_kv_heads, self.head_dim, past + L, x)
        if shared_kv is not None:  # the queries are the last L of the shared keys' positions 0..S-1
            S = shared_kv[0].shape[-2]
            q_pos = torch.arange(S - L, S, device=x.device)
        else:
            q_pos = torch.arange(past, past + L, device=x.device)
        q, gate = self._queries(x)
        q = self._rope(q, q_pos)
        if shared_kv is not None:
            k, v = shared_kv
            k_pos = torch.arange(k.shape[-2], device=x.device)
        else:
            k = self._rope(self._heads(x, self.k_proj, self.k_norm, self.num_kv_heads), q_pos)
            v = self._heads(x, self.v_proj, self.v_norm, self.num_kv_heads)
            if isinstance(cache, RingKVCache):
                k, v, k_pos = cache.update(k, v)
            else:
                if cache is not None:
                    k, v = cache.update(k, v)
                k_pos = torch.arange(k.shape[-2], device=x.device)
        keep = window_mask_from_positions(q_pos, k_pos, window=self.sliding_window)
        heads = self.attend(q, k, v, keep).transpose(1, 2).reshape(B, L, -1)  # (B, L, H·E)
        if gate is not None:  # gated attention: each head's output times its own sigmoid gate, before o_proj
            heads = heads * torch.sigmoid(gate)
        out = self.o_proj(heads)
        return (out, (k, v)) if return_kv else out

    @classmethod
    def from_hf(cls, module: nn.Module) -> "VariantAttention":
        """A copy of a transformers attention block: Mistral, Qwen3, Gemma 2, Gemma 3, gpt-oss, Gemma 3n (text),
        Qwen3-Next or Qwen3.5 (gated attention).

        Copies q/k/v/o_proj (with biases), the q/k norms (Gemma 2/3's and Qwen3-Next's (1 + w) folded into the
        weight), Gemma 3n's weightless v_norm, ``scaling``, ``attn_logit_softcapping`` where the forward applies it
        (Gemma 2, not Gemma 3, which stores it unused), the layer's ``sliding_window`` (Mistral: the config's),
        gpt-oss's ``sinks``, Qwen3-Next's output gate (a q_proj twice as wide) and partial RoPE
        (``partial_rotary_factor``). The RoPE angles come from outside the module in transformers; rope_base
        is the config's ``rope_theta`` for this layer type (feed both the same angles to compare).

        Raises:
            TypeError: module has no q_proj/o_proj/config.
        """
        if not all(hasattr(module, n) for n in ("q_proj", "o_proj", "config", "head_dim")):
            raise TypeError(f"from_hf expects a transformers attention block with q_proj, o_proj and config "
                            f"(model.model.layers[i].self_attn), got {type(module).__name__}")
        cfg = module.config
        rope = dict(getattr(cfg, "rope_parameters", None) or {})
        layer_type = getattr(module, "layer_type", None)
        if layer_type in rope:
            rope = rope[layer_type]
        shared = bool(getattr(module, "is_kv_shared_layer", False))
        window = getattr(module, "sliding_window", getattr(cfg, "sliding_window", None))
        w = module.q_proj.weight
        H, E = cfg.num_attention_heads, module.head_dim
        # what the module's forward applies, not what it stores: Gemma 3 keeps attn_logit_softcapping from its
        # config but never passes it to the attention function; Gemma 2's forward does (softcap=...)
        softcap = getattr(module, "attn_logit_softcapping", None) if type(module).__name__ in _SOFTCAPPED else None
        rotary = int(E * float(rope.get("partial_rotary_factor", 1.0)))  # Qwen3-Next rotates a quarter of E
        new = cls(cfg.hidden_size, H, cfg.num_key_value_heads, E,
                  rope_base=float(rope.get("rope_theta", 10000.0)), bias=module.q_proj.bias is not None,
                  scale=float(module.scaling), qk_norm=hasattr(module, "q_norm"), v_norm=hasattr(module, "v_norm"),
                  softcap=softcap, sliding_window=window, sinks=hasattr(module, "sinks"), kv_shared=shared,
                  output_gate=module.q_proj.out_features == 2 * H * E, rotary_dim=rotary, dtype=w.dtype)
        names = ["q_proj", "o_proj"] + ([] if shared else ["k_proj", "v_proj"])
        with torch.no_grad():
            for n in names:
                getattr(new, n).load_state_dict(getattr(module, n).state_dict())
            if new.sinks is not None:
                new.sinks.copy_(module.sinks)
        if new.q_norm is not None:
            new.q_norm = _rms_from_hf(module.q_norm, module.head_dim)
        if new.k_norm is not None:
            new.k_norm = _rms_from_hf(module.k_norm, module.head_dim)
        if new.v_norm is not None:
            new.v_norm = _rms_from_hf(module.v_norm, module.head_dim)
        new.train(module.training)
        return new


# ------------------------------------------------------------------------------------ Gemma 4 (issue 35)
def proportional_rope(x: torch.Tensor, positions: torch.Tensor, *, base: float, rotated_pairs: int,
                      factor: float = 1.0) -> torch.Tensor:
    """Gemma 4's "proportional" RoPE: only the first ``rotated_pairs`` half-split pairs turn, at the frequencies full
    RoPE would give them; the other pairs keep frequency 0 (they are not rotated at all).

    Pair i is the dims (i, i + E/2) (transformers' ``rotate_half``); its angle at position p is p · θ_i with
    θ_i = base^(-2i/E) / factor for i < rotated_pairs and θ_i = 0 above. Unlike :class:`VariantAttention`'s
    ``rotary_dim`` (Qwen3-Next: the first rotary_dim dims, a RoPE of their own, frequencies base^(-2i/rotary_dim)),
    the frequencies keep the full head's denominator E, and the untouched dims are the top of each half.

    Args:
        x: (..., L, E) floating, E even. positions: (L,) integer positions. base: rope_theta (> 1).
        rotated_pairs: int in [0, E/2] (transformers: int(partial_rotary_factor · E // 2)). factor: the
            frequencies' divisor (the rope_parameters' ``factor``, default 1.0), a finite number > 0.

    Returns:
        x's shape and dtype; angles in float64 for float64 x, in float32 otherwise.

    Raises:
        TypeError: x not a floating tensor; positions not an integer tensor; rotated_pairs not an int.
        ValueError: E odd; rotated_pairs outside [0, E/2]; positions not (L,); base <= 1; factor <= 0.

    Source: transformers' ``_compute_proportional_rope_parameters`` (``modeling_rope_utils``), used by
    ``Gemma4TextRotaryEmbedding`` for Gemma 4's full-attention layers (partial_rotary_factor 0.25).
    """
    check_tensor("x", x, floating=True, min_ndim=2)
    check_tensor("positions", positions, ndim=1)
    if positions.is_floating_point():
        raise TypeError(f"positions must be an integer tensor, got dtype {positions.dtype}")
    E = x.shape[-1]
    if E % 2:
        raise ValueError(f"x's last dim (head_dim) must be even for RoPE, got {shape_of(x)}")
    r = check_int("rotated_pairs", rotated_pairs, minimum=0)
    if r > E // 2:
        raise ValueError(f"rotated_pairs must be an int in [0, head_dim/2={E // 2}], got {r}")
    if positions.shape[0] != x.shape[-2]:
        raise ValueError(f"positions must be (L,) with L = x.shape[-2] = {x.shape[-2]}, got {shape_of(positions)}")
    base = check_rope_base(base, allow_none=False)
    factor = check_number("factor", factor, positive=True)
    wide = torch.float64 if x.dtype == torch.float64 else torch.float32
    i = torch.arange(r, dtype=wide, device=x.device)
    theta = torch.cat([base ** (-2.0 * i / E) / factor, torch.zeros(E // 2 - r, dtype=wide, device=x.device)])
    angles = positions.to(wide)[:, None] * theta  # (L, E/2); a pair of frequency 0 keeps angle 0
    cos, sin = torch.cat([angles.cos(), angles.cos()], -1), torch.cat([angles.sin(), angles.sin()], -1)
    x1, x2 = x.chunk(2, dim=-1)
    turned = torch.cat([-x2, x1], -1)  # rotate_half
    return (x * cos.to(x.dtype) + turned * sin.to(x.dtype)).to(x.dtype)


class Gemma4Attention(VariantAttention):
    """Gemma 4's text attention: :class:`VariantAttention` (QK-norm, weightless v_norm, scale 1, windows, KV sharing
    as in Gemma 3n) plus the two things Gemma 4's forward adds.

    - ``k_eq_v``: the layer has no v_proj; its values are its keys' projection before k_norm and RoPE, normalised by
      the weightless v_norm: v = v_norm(x W_k), k = RoPE(k_norm(x W_k)). Here ``self.v_proj is self.k_proj``.
      transformers applies it to the full-attention layers when the config's ``attention_k_eq_v`` is set.
    - proportional RoPE (``rotated_pairs``, :func:`proportional_rope`): the full-attention layers turn only their
      first pairs, at full-RoPE frequencies.

    Each layer has its own head_dim and num_kv_heads (Gemma 4's full-attention layers: ``global_head_dim``,
    ``num_global_key_value_heads``): they are the constructor's arguments, read per layer by :meth:`from_hf`.

    Args:
        as :class:`VariantAttention`, plus k_eq_v: bool (not with kv_shared, which has no projections at all);
        rotated_pairs: None (``VariantAttention``'s RoPE) or an int in [0, head_dim/2] (proportional RoPE);
        rope_factor: proportional RoPE's frequency divisor (default 1.0).

    Shapes: as :class:`VariantAttention`: x (B, L, d_model) -> (B, L, d_model); keys and values (B, Hkv, S, E).

    Raises:
        as :class:`VariantAttention`; also TypeError: k_eq_v not a bool, rotated_pairs not an int. ValueError:
        k_eq_v with kv_shared; rotated_pairs outside [0, head_dim/2]; rope_factor not a finite number > 0.

    Source: transformers' ``Gemma4TextAttention`` (``models/gemma4/modeling_gemma4.py``: ``use_alternative_attention``,
    ``per_layer_config``, ``kv_sharing_modes``); Gemma 3n for KV sharing. tests/test_variants.py proves it equal in
    float64, in full and decoding.
    """

    def __init__(self, d_model: int, num_heads: int, num_kv_heads: int, head_dim: int, *, k_eq_v: bool = False,
                 rotated_pairs: int | None = None, rope_factor: float = 1.0, **kwargs) -> None:
        super().__init__(d_model, num_heads, num_kv_heads, head_dim, **kwargs)
        check_bool("k_eq_v", k_eq_v)
        if k_eq_v and self.kv_shared:
            raise ValueError("k_eq_v=True needs the layer's own k_proj, but kv_shared=True layers have none; "
                             "expected one of the two")
        if rotated_pairs is not None:
            rotated_pairs = check_int("rotated_pairs", rotated_pairs, minimum=0)
            if rotated_pairs > self.head_dim // 2:
                raise ValueError(f"rotated_pairs must be None or an int in [0, head_dim/2={self.head_dim // 2}], "
                                 f"got {rotated_pairs}")
        self.k_eq_v, self.rotated_pairs = k_eq_v, rotated_pairs
        self.rope_factor = check_number("rope_factor", rope_factor, positive=True)
        if k_eq_v:
            self.v_proj = self.k_proj  # keys reused as values: one projection, before k_norm and RoPE

    def _rope(self, t, positions):
        if self.rotated_pairs is None:
            return super()._rope(t, positions)
        return proportional_rope(t, positions, base=self.rope_base, rotated_pairs=self.rotated_pairs,
                                 factor=self.rope_factor)

    @classmethod
    def from_hf(cls, module: nn.Module) -> "Gemma4Attention":
        """A copy of transformers' ``Gemma4TextAttention`` (model.model.layers[i].self_attn), read from the module.

        Copies what the forward applies: q/k/v/o_proj (v_proj absent with k_eq_v, all of k/v absent on a
        KV-sharing layer), q_norm and k_norm (× w), the weightless v_norm, ``scaling`` (1.0), the layer's
        ``sliding_window``, its own head_dim and number of KV heads (H / ``num_key_value_groups``), the layer
        type's RoPE (``rope_theta``; "proportional": ``partial_rotary_factor`` and ``factor``).

        Raises:
            TypeError: module is not a Gemma4TextAttention (no q_proj, o_proj, config, use_alternative_attention).
        """
        if not all(hasattr(module, n) for n in ("q_proj", "o_proj", "config", "head_dim", "use_alternative_attention")):
            raise TypeError(f"Gemma4Attention.from_hf expects transformers' Gemma4TextAttention "
                            f"(model.model.layers[i].self_attn), got {type(module).__name__}")
        cfg = module.config
        rope = dict(cfg.rope_parameters[module.layer_type])
        H, E = cfg.num_attention_heads, module.head_dim
        pairs = (int(float(rope.get("partial_rotary_factor", 1.0)) * E // 2)
                 if rope.get("rope_type") == "proportional" else None)
        shared = bool(module.is_kv_shared_layer)
        new = cls(cfg.hidden_size, H, H // module.num_key_value_groups, E, rope_base=float(rope["rope_theta"]),
                  bias=module.q_proj.bias is not None, scale=float(module.scaling), qk_norm=True, v_norm=True,
                  norm_eps=float(cfg.rms_norm_eps), sliding_window=module.sliding_window, kv_shared=shared,
                  k_eq_v=bool(module.use_alternative_attention) and not shared, rotated_pairs=pairs,
                  rope_factor=float(rope.get("factor", 1.0)) if pairs is not None else 1.0,
                  dtype=module.q_proj.weight.dtype)
        names = ["q_proj", "o_proj"] + ([] if shared else ["k_proj"]) + ([] if shared or new.k_eq_v else ["v_proj"])
        with torch.no_grad():
            for n in names:
                getattr(new, n).load_state_dict(getattr(module, n).state_dict())
        new.q_norm = _rms_from_hf(module.q_norm, E)
        if not shared:
            new.k_norm = _rms_from_hf(module.k_norm, E)
            new.v_norm = _rms_from_hf(module.v_norm, E)
        new.train(module.training)
        return new
