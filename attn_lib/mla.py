"""Multi-head latent attention (MLA) of DeepSeek-V2/V3, its small cache and its "absorbed" decode (notebook 11).

DeepSeek-V2 (DeepSeek-AI 2024, arXiv:2405.04434, section 2.1) caches, per token and layer, not the keys and values
of every head but one latent vector c_KV of ``kv_lora_rank`` features (the low-rank joint compression, eq. 9-11)
plus one RoPE key of ``qk_rope_head_dim`` features shared by all heads (the decoupled RoPE, eq. 14-19)::

    c_KV = RMSNorm(x W_DKV)                      (B, S, r)        cached
    k_R  = RoPE(x W_KR)                          (B, S, dr)       cached, one for all heads
    k_C, v = c_KV W_UK, c_KV W_UV                (B, H, S, dn), (B, H, S, dv)
    q    = RMSNorm(x W_DQ) W_UQ   (or x W_Q)     (B, H, L, dn + dr), its last dr features rotated
    o    = softmax([q_C, q_R]·[k_C, k_R]ᵀ · scale) v  ->  W_O

The **absorbed** decode (DeepSeek-V2 §2.1.2: W_UK can be folded into the query's projection and W_UV into W_O, so
no key or value is ever formed; §2.1.3 keeps that possible under RoPE by rotating separate dr features): q_C·k_Cᵀ =
(q_C W_UKᵀ)·c_KVᵀ, so each query is moved into the latent space once and attends directly over the cached c_KV; the
values are c_KV too, and W_UV is applied after the softmax. It is multi-query attention with key dim r + dr and
value dim r, equal to the plain form (tests/test_mla.py). :func:`mla_decode_cost` states its FLOP/byte trade-off.

:class:`MultiHeadLatentAttention` equals transformers' ``DeepseekV3Attention`` (and the MLA of
``DeepseekV32Attention``), proven in float64 by tests/test_mla.py. Its latent cache is a :class:`~attn_lib.kv_cache.KVCache`
with one "head": the keys slot holds c_KV (B, 1, S, r), the values slot k_R (B, 1, S, dr).
Shapes use the legend of :mod:`attn_lib.attention`, plus r = kv_lora_rank, dn = qk_nope_head_dim,
dr = qk_rope_head_dim, dv = v_head_dim.
"""

from __future__ import annotations

import torch
from torch import nn

from attn_lib._checks import (check_bool, check_dtype, check_int, check_number, check_on_device, check_rope_base, check_scale,
                              check_tensor, claim_cache, shape_of)
from attn_lib.attention import scaled_dot_product_attention
from attn_lib.kv_cache import KVCache
from attn_lib.masks import causal_mask
from attn_lib.positional import apply_rope

__all__ = ["MultiHeadLatentAttention", "mla_cache_bytes_per_token", "mla_decode_cost"]


def _pos(name, v):
    return check_int(name, v, minimum=1)


def rms_norm_from_hf(norm: nn.Module) -> nn.RMSNorm:
    """torch's ``nn.RMSNorm`` with the weight and eps of a transformers Llama-style RMSNorm (``w · x/rms(x)``).

    Raises:
        TypeError: ``norm`` has no 1-D ``weight`` (e.g. an nn.Linear passed by mistake).
    """
    weight = getattr(norm, "weight", None)
    if not isinstance(weight, torch.Tensor) or weight.dim() != 1:
        raise TypeError(f"norm must be a transformers RMSNorm with a 1-D weight, got {type(norm).__name__}")
    eps = getattr(norm, "variance_epsilon", getattr(norm, "eps", 1e-6))
    new = nn.RMSNorm(weight.shape[0], eps=eps, device=weight.device, dtype=weight.dtype)
    with torch.no_grad():
        new.weight.copy_(weight)
    return new


class MultiHeadLatentAttention(nn.Module):
    """DeepSeek's multi-head latent attention, causal, with a latent KV cache (DeepSeek-V2 §2.1).

    Args:
        d_model: model width (hidden_size).
        num_heads: query heads H.
        kv_lora_rank: r, the size of the cached latent c_KV.
        qk_nope_head_dim: dn, the per-head query/key features without position.
        qk_rope_head_dim: dr (even), the rotated features; the key's are shared by all heads.
        v_head_dim: dv, the per-head value features.
        q_lora_rank: the query's compression rank (None: one q_proj d_model -> H(dn + dr), as DeepSeek-V2-Lite).
        rope_base: RoPE's theta. rope_interleave: pairs (x[2i], x[2i+1]) as DeepSeek's checkpoints (True) or
            half-split (False); the config's ``rope_interleave``.
        scale: multiplier of the scores (default (dn + dr)^-0.5; ``from_hf`` copies the module's ``scaling``,
            which includes YaRN's mscale when the config scales RoPE).
        eps: the RMSNorms' epsilon. bias: whether q_a_proj, kv_a_proj and o_proj have biases (``attention_bias``).
        dtype: the weights' floating torch.dtype (None: torch's default, float32); ``forward``'s x must have it.

    Submodules (transformers' names): ``q_proj`` or ``q_a_proj`` -> ``q_a_norm`` -> ``q_b_proj``; ``kv_a_proj``
    (d_model -> r + dr, transformers' ``kv_a_proj_with_mqa``), ``kv_a_norm``, ``kv_b_proj`` (r -> H(dn + dv):
    W_UK and W_UV side by side per head), ``o_proj`` (H·dv -> d_model).

    Raises:
        TypeError: a size is not an int, rope_interleave/bias not bools, rope_base or scale not a number.
        ValueError: a size < 1, an odd dr; rope_base NaN, infinite or <= 1; scale NaN, infinite or <= 0 (the rules
        of ``check_rope_base`` and ``check_scale``, as RoPE and scaled_dot_product_attention apply them).
        TypeError: dtype neither a torch.dtype nor a dtype's name; eps not a number. ValueError: an integer
        dtype; eps NaN, infinite or <= 0.

    Source: DeepSeek-AI 2024, DeepSeek-V2 (arXiv:2405.04434) §2.1.2 (low-rank key-value joint compression and
    the absorption of W_UK / W_UV) and §2.1.3 (decoupled RoPE); transformers' ``DeepseekV3Attention``.
    """

    def __init__(self, d_model: int, num_heads: int, *, kv_lora_rank: int, qk_nope_head_dim: int,
                 qk_rope_head_dim: int, v_head_dim: int, q_lora_rank: int | None = None, rope_base: float = 10000.0,
                 rope_interleave: bool = True, scale: float | None = None, eps: float = 1e-6, bias: bool = False,
                 dtype: torch.dtype | None = None) -> None:
        super().__init__()
        d, H = _pos("d_model", d_model), _pos("num_heads", num_heads)
        r, dn, dr, dv = (_pos(n, v) for n, v in (("kv_lora_rank", kv_lora_rank), ("qk_nope_head_dim", qk_nope_head_dim),
                                                  ("qk_rope_head_dim", qk_rope_head_dim), ("v_head_dim", v_head_dim)))
        if dr % 2:
            raise ValueError(f"qk_rope_head_dim must be even (RoPE rotates pairs), got {dr}")
        self.q_lora_rank = None if q_lora_rank is None else _pos("q_lora_rank", q_lora_rank)
        self.rope_base = check_rope_base(rope_base, allow_none=False)
        self.rope_interleave = check_bool("rope_interleave", rope_interleave)
        check_bool("bias", bias)
        self.scale = check_scale(scale, dn + dr)
        check_number("eps", eps, positive=True)
        dtype = check_dtype("dtype", dtype, allow_none=True)
        self.d_model, self.num_heads, self.kv_lora_rank = d, H, r
        self.qk_nope_head_dim, self.qk_rope_head_dim, self.v_head_dim = dn, dr, dv
        f = {"dtype": dtype}
        if self.q_lora_rank is None:
            self.q_proj = nn.Linear(d, H * (dn + dr), bias=False, **f)
        else:
            self.q_a_proj = nn.Linear(d, self.q_lora_rank, bias=bias, **f)
            self.q_a_norm = nn.RMSNorm(self.q_lora_rank, eps=eps, **f)
            self.q_b_proj = nn.Linear(self.q_lora_rank, H * (dn + dr), bias=False, **f)
        self.kv_a_proj = nn.Linear(d, r + dr, bias=bias, **f)
        self.kv_a_norm = nn.RMSNorm(r, eps=eps, **f)
        self.kv_b_proj = nn.Linear(r, H * (dn + dv), bias=False, **f)
        self.o_proj = nn.Linear(H * dv, d, bias=bias, **f)

    def extra_repr(self) -> str:
        return (f"d_model={self.d_model}, num_heads={self.num_heads}, kv_lora_rank={self.kv_lora_rank}, "
                f"q_lora_rank={self.q_lora_rank}, dn={self.qk_nope_head_dim}, dr={self.qk_rope_head_dim}, "
                f"dv={self.v_head_dim}")

    # -------------------------------------------------------------- the pieces
    def queries(self, x: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(q_C, q_R): (B, H, L, dn) and the rotated (B, H, L, dr) of x (B, L, d_model) at ``positions`` (L,)."""
        self._check_x(x, positions)
        B, L, _ = x.shape
        q = self.q_proj(x) if self.q_lora_rank is None else self.q_b_proj(self.q_a_norm(self.q_a_proj(x)))
        q = q.view(B, L, self.num_heads, -1).transpose(1, 2)  # (B, H, L, dn + dr)
        q_c, q_r = q.split([self.qk_nope_head_dim, self.qk_rope_head_dim], dim=-1)
        return q_c, apply_rope(q_r, positions, base=self.rope_base, interleaved=self.rope_interleave)

    def latents(self, x: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """What the cache keeps: c_KV (B, 1, L, r) and the shared rotated key k_R (B, 1, L, dr)."""
        self._check_x(x, positions)
        c, k_r = self.kv_a_proj(x).split([self.kv_lora_rank, self.qk_rope_head_dim], dim=-1)  # (B, L, r), (B, L, dr)
        k_r = apply_rope(k_r[:, None], positions, base=self.rope_base, interleaved=self.rope_interleave)
        return self.kv_a_norm(c)[:, None], k_r

    def up_projections(self) -> tuple[torch.Tensor, torch.Tensor]:
        """W_UK (H, dn, r) and W_UV (H, dv, r): the per-head blocks of ``kv_b_proj.weight``."""
        w = self.kv_b_proj.weight.view(self.num_heads, self.qk_nope_head_dim + self.v_head_dim, self.kv_lora_rank)
        return w[:, : self.qk_nope_head_dim], w[:, self.qk_nope_head_dim:]

    def _check_x(self, x, positions=None) -> None:
        """x (B, L, d_model), floating, of the weights' dtype and device; positions None or (L,) integers on
        x's device (TypeError / ValueError otherwise)."""
        check_tensor("x", x, floating=True, ndim=3)
        if x.shape[-1] != self.d_model:
            raise ValueError(f"x must be (B, L, d_model={self.d_model}), got shape {shape_of(x)}")
        weight = self.o_proj.weight
        if x.dtype != weight.dtype:
            raise TypeError(f"x must have the layer's dtype {weight.dtype}, got {x.dtype}; convert one of them "
                            f"(x.to({weight.dtype}) or layer.to({x.dtype}))")
        check_on_device("x", x, weight.device, of="the layer")
        if positions is not None:
            check_tensor("positions", positions, ndim=1)
            if positions.dtype.is_floating_point or positions.dtype.is_complex or positions.dtype == torch.bool:
                raise TypeError(f"positions must be an integer tensor (L,), got dtype {positions.dtype}")
            check_on_device("positions", positions, x.device, of="x")
            if positions.shape[0] != x.shape[1]:
                raise ValueError(f"positions must have shape (L,) = ({x.shape[1]},), one per token of x, got "
                                 f"{shape_of(positions)}")

    # -------------------------------------------------------------- forward
    def forward(self, x: torch.Tensor, *, cache: KVCache | None = None, absorbed: bool = False) -> torch.Tensor:
        """Causal MLA over x, continuing the tokens in ``cache``.

        Args:
            x: (B, L, d_model) floating, the dtype of the weights.
            cache: a :class:`~attn_lib.kv_cache.KVCache` used as the latent cache (c_KV, k_R); the new tokens
                sit at positions cache.seq_len .. cache.seq_len + L - 1 and are appended.
            absorbed: attend in the latent space (W_UK folded into the query, W_UV applied after the softmax)
                instead of expanding c_KV into per-head keys and values; the same result.

        Returns:
            (B, L, d_model), in the weights' dtype; empty when L = 0 or B = 0 (the cache is then left as it is).

        Raises:
            TypeError: x not a floating tensor or not of the weights' dtype, absorbed not a bool, cache not a KVCache.
            ValueError: x not (B, L, d_model) or not on the weights' device; a cache of another batch or sizes or
                on another device; a cache that already holds
                another layer's tokens (one cache per layer).
        """
        self._check_x(x)
        check_bool("absorbed", absorbed)
        if cache is not None and not isinstance(cache, KVCache):
            raise TypeError(f"cache must be an attn_lib.kv_cache.KVCache (the latent cache), got {type(cache).__name__}")
        B, L, _ = x.shape
        if x.numel() == 0:  # no token (L = 0) or no sequence (B = 0): an empty output, the cache untouched
            return self.o_proj(x.new_zeros(B, L, self.num_heads * self.v_head_dim))
        if cache is not None:
            claim_cache(cache, self)
        past = 0 if cache is None else cache.seq_len
        positions = torch.arange(past, past + L, device=x.device)
        q_c, q_r = self.queries(x, positions)
        c, k_r = self.latents(x, positions)
        if cache is not None:
            c, k_r = cache.update(c, k_r)  # (B, 1, S, r), (B, 1, S, dr)
        S = c.shape[-2]
        mask = causal_mask(L, S, align="bottom_right", device=x.device)
        w_uk, w_uv = self.up_projections()
        if absorbed:
            q_lat = torch.einsum("bhld,hdr->bhlr", q_c, w_uk)  # the query moved into the latent space
            query = torch.cat([q_lat, q_r], dim=-1)  # (B, H, L, r + dr)
            key = torch.cat([c, k_r], dim=-1)  # (B, 1, S, r + dr): one key "head" for all H (MQA)
            out_lat, _ = scaled_dot_product_attention(query, key, c, mask, scale=self.scale)  # (B, H, L, r)
            heads = torch.einsum("bhlr,hvr->bhlv", out_lat, w_uv)  # W_UV after the softmax
        else:
            k_c = torch.einsum("bxsr,hdr->bhsd", c, w_uk)  # (B, H, S, dn)
            v = torch.einsum("bxsr,hvr->bhsv", c, w_uv)  # (B, H, S, dv)
            key = torch.cat([k_c, k_r.expand(B, self.num_heads, S, self.qk_rope_head_dim)], dim=-1)
            heads, _ = scaled_dot_product_attention(torch.cat([q_c, q_r], -1), key, v, mask, scale=self.scale)
        return self.o_proj(heads.transpose(1, 2).reshape(B, L, -1))  # (B, L, H·dv) -> (B, L, d_model)

    # -------------------------------------------------------------- conversion
    @classmethod
    def from_hf(cls, module: nn.Module) -> "MultiHeadLatentAttention":
        """A copy of transformers' ``DeepseekV3Attention`` (or the MLA part of ``DeepseekV32Attention``).

        Weights are shared by copy: q (or q_a, q_a_layernorm, q_b), kv_a_proj_with_mqa, kv_a_layernorm, kv_b_proj,
        o_proj; the scores' ``scaling`` comes from the module, ``rope_interleave`` from DeepSeek-V3's config (V3.2's
        forward always interleaves, whatever its config says). The RoPE
        angles (and any YaRN scaling of them) are computed outside the module by transformers: feed it the
        default-RoPE angles of ``rope_base`` (:func:`attn_lib.course.hf_equal.hf_cos_sin`) to compare.

        Raises:
            TypeError: module is not an MLA block (no kv_a_proj_with_mqa / kv_b_proj).
        """
        if not all(hasattr(module, n) for n in ("kv_a_proj_with_mqa", "kv_b_proj", "o_proj", "config")):
            raise TypeError(f"from_hf expects transformers' DeepseekV3Attention (model.model.layers[i].self_attn), "
                            f"got {type(module).__name__}")
        cfg = module.config
        rope = dict(getattr(cfg, "rope_parameters", None) or {})
        w = module.kv_b_proj.weight
        # what the forward does: DeepseekV3Attention obeys config.rope_interleave, DeepseekV32Attention always
        # interleaves (apply_rotary_pos_emb_interleave), whatever its config holds
        v32 = type(module).__name__.startswith("DeepseekV32")
        interleave = True if v32 else bool(getattr(cfg, "rope_interleave", True))
        new = cls(cfg.hidden_size, cfg.num_attention_heads, kv_lora_rank=cfg.kv_lora_rank,
                  qk_nope_head_dim=cfg.qk_nope_head_dim, qk_rope_head_dim=cfg.qk_rope_head_dim,
                  v_head_dim=cfg.v_head_dim, q_lora_rank=getattr(module, "q_lora_rank", None),
                  rope_base=float(rope.get("rope_theta", getattr(cfg, "rope_theta", 10000.0))),
                  rope_interleave=interleave, scale=float(module.scaling),
                  eps=module.kv_a_layernorm.variance_epsilon, bias=module.o_proj.bias is not None, dtype=w.dtype)
        pairs = [("kv_a_proj", module.kv_a_proj_with_mqa), ("kv_b_proj", module.kv_b_proj), ("o_proj", module.o_proj)]
        if new.q_lora_rank is None:
            pairs.append(("q_proj", module.q_proj))
        else:
            pairs += [("q_a_proj", module.q_a_proj), ("q_b_proj", module.q_b_proj)]
        with torch.no_grad():
            for ours, theirs in pairs:
                getattr(new, ours).load_state_dict(theirs.state_dict())
        new.kv_a_norm = rms_norm_from_hf(module.kv_a_layernorm)
        if new.q_lora_rank is not None:
            new.q_a_norm = rms_norm_from_hf(module.q_a_layernorm)
        new.train(module.training)
        return new


def mla_cache_bytes_per_token(num_layers: int, kv_lora_rank: int, qk_rope_head_dim: int, *,
                              bytes_per_element: float = 2) -> float:
    """Bytes MLA caches per token: num_layers x (r + dr) x bytes_per_element (c_KV and k_R; no per-head K or V).

    DeepSeek-V3 (61 layers, r 512, dr 64, bf16): 61 x 576 x 2 = 70,272 bytes, about 68.6 KiB per token.

    Takes no tensors: ints num_layers, kv_lora_rank (r), qk_rope_head_dim (dr), a float bytes_per_element (2 for
    bf16); returns a float. The cache it counts holds c_KV (B, 1, S, r) and k_R (B, 1, S, dr) per layer.

    Raises:
        TypeError: a size not an int (a bool refused); bytes_per_element not a number.
        ValueError: a size < 1; bytes_per_element NaN, infinite or <= 0.

    Source: DeepSeek-AI 2024, DeepSeek-V2 (arXiv:2405.04434) §2.1.4, Table 1: (d_c + d_h^R)·l elements per
    token for MLA.
    """
    L, r, dr = (_pos(n, v) for n, v in (("num_layers", num_layers), ("kv_lora_rank", kv_lora_rank),
                                         ("qk_rope_head_dim", qk_rope_head_dim)))
    e = check_number("bytes_per_element", bytes_per_element, positive=True)
    return L * (r + dr) * e


def mla_decode_cost(seq_len: int, *, num_heads: int, kv_lora_rank: int, qk_nope_head_dim: int,
                    qk_rope_head_dim: int, v_head_dim: int, bytes_per_element: float = 2) -> dict[str, dict[str, float]]:
    """Multiply-adds x 2 (FLOPs) and cache bytes read for ONE new token of one layer, over ``seq_len`` cached tokens.

    - ``"expand"``: the plain form from the latent cache: c_KV is up-projected into per-head keys and values for
      all S tokens at every step (2·S·r·H(dn + dv)), then ordinary attention (2·S·H(dn + dr) + 2·S·H·dv).
    - ``"absorbed"``: W_UK into the query (2·H·dn·r), attention in the latent space (2·S·H(r + dr) + 2·S·H·r), W_UV
      after it (2·H·r·dv). More attention FLOPs per cached token (r + dr > dn + dr), but no per-step expansion
      and nothing per head in memory.

    Both read the same cache, S(r + dr) elements; ``"expand"`` also writes and reads its expanded K and V,
    S·H(dn + dr + dv) elements each way.

    Takes no tensors: the sizes are ints (S = seq_len, H, r, dn, dr, dv), bytes_per_element a float (2 for bf16).

    Returns:
        {"expand": {"flops", "bytes"}, "absorbed": {"flops", "bytes"}}, floats.

    Raises:
        TypeError: a size not an int (a bool refused); bytes_per_element not a number.
        ValueError: a size < 1; bytes_per_element NaN, infinite or <= 0 (as :func:`mla_cache_bytes_per_token`).

    Source: the course's own count (notebook 11) of the two decode forms of DeepSeek-AI 2024, DeepSeek-V2
    §2.1.2 (the absorption of W_UK into the query and of W_UV into the output).
    """
    S, H, r, dn, dr, dv = (_pos(n, v) for n, v in (("seq_len", seq_len), ("num_heads", num_heads),
                                                   ("kv_lora_rank", kv_lora_rank), ("qk_nope_head_dim", qk_nope_head_dim),
                                                   ("qk_rope_head_dim", qk_rope_head_dim), ("v_head_dim", v_head_dim)))
    e = check_number("bytes_per_element", bytes_per_element, positive=True)
    cache = S * (r + dr) * e
    expand_flops = 2 * S * r * H * (dn + dv) + 2 * S * H * (dn + dr) + 2 * S * H * dv
    absorbed_flops = 2 * H * dn * r + 2 * S * H * (r + dr) + 2 * S * H * r + 2 * H * r * dv
    return {"expand": {"flops": float(expand_flops), "bytes": float(cache + 2 * S * H * (dn + dr + dv) * e)},
            "absorbed": {"flops": float(absorbed_flops), "bytes": float(cache)}}
