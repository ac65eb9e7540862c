"""DeepSeek sparse attention (DSA) of DeepSeek-V3.2: a lightning indexer picks the top-k keys, MLA attends to them only
(notebook 11); GLM-5's DSA, whose choice is shared by the layers that follow (notebook 13).

DeepSeek-V3.2 (DeepSeek-AI 2025, "DeepSeek-V3.2-Exp: Boosting Long-Context Efficiency with DeepSeek Sparse
Attention", the report in github.com/deepseek-ai/DeepSeek-V3.2-Exp) adds to MLA (:mod:`attn_lib.mla`) a small
scorer, the **lightning indexer**. For query token t and an earlier token s, with H_I indexer heads of d_I features
(the report's eq. 1)::

    I[t, s] = Σ_j w[t, j] · ReLU(q_I[t, j] · k_I[s])

- q_I = RoPE(c_Q W_qb): its H_I heads come from the MLA's compressed query c_Q = RMSNorm(x W_DQ) (the same c_Q
  that feeds the attention's queries, transformers' ``q_resid``);
- k_I = RoPE(LayerNorm(x W_k)): ONE key of d_I features per token, shared by the indexer heads (cached, in FP8 in
  the model);
- w = x W_w: one weight per indexer head and query token, so each head's vote can be switched off per token.
- The RoPE is the half-split one (not MLA's interleaved one) on the FIRST dr = qk_rope_head_dim features.
- transformers (``DeepseekV32Indexer``) scales the dot products by d_I^-0.5 inside the ReLU and the weights by
  H_I^-0.5; DeepSeek's kernels also rotate q_I and k_I by a Hadamard matrix and round them to FP8. A Hadamard
  matrix is orthogonal (Hq · Hk = q · k), and FP8 is a precision choice, so transformers (and this module)
  compute the exact scores instead.

Each query then keeps the ``topk`` keys of largest I[t, s] among the causal ones (all of them while there are fewer)
and attends with MLA to those only (the report implements it in MLA's MQA mode: each latent entry (c_KV, k_R) shared by
all heads): :meth:`SparseLatentAttention.forward` gathers the chosen latents, so the attention costs O(L·k), not
O(L·S). The indexer itself is still O(L·S) but small (64 heads of 128 FP8 features, no softmax).
:func:`dsa_decode_cost` counts both against dense MLA attention.

**GLM-5** (Zhipu AI 2026, transformers' ``glm_moe_dsa``; the shared-index idea in arXiv 2603.12201) runs the same
DSA with two changes: the indexer rotates interleaved pairs (``rope_interleave=True`` here), and only some layers
run an indexer ("full" layers); each "shared" layer reuses the top-k of the full layer before it. Pass the
``selection`` of :meth:`SparseLatentAttention.select` to the next layers' ``forward``; a layer built by ``from_hf``
from a shared layer has ``indexer = None``. :class:`DSACache` holds a layer's latent cache and its indexer keys, so
decoding token by token equals the full forward.

tests/test_sparse.py proves :class:`LightningIndexer` and :class:`SparseLatentAttention` equal to transformers'
``DeepseekV32Indexer`` (scores and top-k) and ``DeepseekV32Attention`` in float64; tests/test_block_sparse.py the
shared selection to ``GlmMoeDsaAttention``, in full and in decoding. Shapes use the legend of
:mod:`attn_lib.attention` plus r = kv_lora_rank, dr = qk_rope_head_dim, k = topk, H_I / d_I = the indexer's heads
and head dim.
"""

from __future__ import annotations

import torch
from torch import nn

from attn_lib._checks import (check_bool, check_dtype, check_finite, check_int, check_number, check_rope_base,
                              check_same_device, check_tensor, claim_cache, shape_of)
from attn_lib.attention import scaled_dot_product_attention
from attn_lib.kv_cache import KVCache
from attn_lib.masks import causal_mask
from attn_lib.mla import MultiHeadLatentAttention
from attn_lib.positional import apply_rope

__all__ = ["LightningIndexer", "SparseLatentAttention", "DSACache", "dsa_decode_cost"]


def _pos(name, v):
    return check_int(name, v, minimum=1)


class LightningIndexer(nn.Module):
    """DeepSeek-V3.2's lightning indexer: index scores I[t, s] and the top-k keys per query (the report's eq. 1).

    Args:
        d_model: model width. q_lora_rank: the width of the compressed query c_Q it reads.
        num_heads: H_I. head_dim: d_I. rope_dim: dr, the first features of q_I and k_I rotated (half-split RoPE).
        topk: k, the keys each query keeps. rope_base: RoPE's theta.
        rope_interleave: rotate pairs (x[2i], x[2i+1]) (GLM-5) instead of the half-split pairs (DeepSeek-V3.2).
        dtype: the weights' torch.dtype (None: torch's default, float32); the inputs must have it.

    Submodules (transformers' names): ``wq_b`` (q_lora_rank -> H_I·d_I), ``wk`` (d_model -> d_I), ``k_norm``
    (LayerNorm of d_I, eps 1e-6), ``weights_proj`` (d_model -> H_I).

    No ``forward``: :meth:`scores` maps x (B, L, d_model) and q_resid (B, L, q_lora_rank) to I (B, L, L), in the
    weights' dtype, -inf above the diagonal; :meth:`select` gives the top-k (B, L, min(k, L)) int64 indices and
    their bool validity; :meth:`selected_mask` the (B, L, S) bool mask of the chosen keys.

    Raises:
        TypeError: a size is not an int; rope_base not a number; dtype not a torch.dtype (or its name).
        ValueError: a size < 1; rope_dim odd or > head_dim; rope_base NaN, infinite or <= 1 (RoPE's rule,
            ``check_rope_base``); an integer dtype.

    Source: DeepSeek-AI 2025, DeepSeek-V3.2-Exp report, eq. 1 (the lightning indexer); transformers'
    ``DeepseekV32Indexer``, which tests/test_sparse.py matches in float64.
    """

    def __init__(self, d_model: int, q_lora_rank: int, *, num_heads: int, head_dim: int, rope_dim: int, topk: int,
                 rope_base: float = 10000.0, dtype: torch.dtype | None = None, rope_interleave: bool = False) -> None:
        super().__init__()
        self.rope_interleave = check_bool("rope_interleave", rope_interleave)
        d, r_q, H, D, dr = (_pos(n, v) for n, v in (("d_model", d_model), ("q_lora_rank", q_lora_rank),
                                                     ("num_heads", num_heads), ("head_dim", head_dim),
                                                     ("rope_dim", rope_dim)))
        if dr % 2 or dr > D:
            raise ValueError(f"rope_dim must be even and <= head_dim={D} (RoPE rotates pairs of q_I, k_I), got {dr}")
        self.topk = _pos("topk", topk)
        self.rope_base = check_rope_base(rope_base, allow_none=False)
        self.d_model, self.num_heads, self.head_dim, self.rope_dim = d, H, D, dr
        f = {"dtype": check_dtype("dtype", dtype, allow_none=True)}
        self.wq_b = nn.Linear(r_q, H * D, bias=False, **f)
        self.wk = nn.Linear(d, D, bias=False, **f)
        self.k_norm = nn.LayerNorm(D, eps=1e-6, **f)
        self.weights_proj = nn.Linear(d, H, bias=False, **f)

    def extra_repr(self) -> str:
        return f"num_heads={self.num_heads}, head_dim={self.head_dim}, rope_dim={self.rope_dim}, topk={self.topk}"

    def _rope_first(self, t: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        rot, rest = t.split([self.rope_dim, self.head_dim - self.rope_dim], dim=-1)
        return torch.cat([apply_rope(rot, positions, base=self.rope_base, interleaved=self.rope_interleave), rest],
                         dim=-1)

    def scores(self, x: torch.Tensor, q_resid: torch.Tensor, *, cache: KVCache | None = None) -> torch.Tensor:
        """The index scores I[t, s] of x's L tokens over themselves (and the cached ones), causal: -inf where s > t.

        Args:
            x: (B, L, d_model) floating. q_resid: (B, L, q_lora_rank), the MLA's c_Q = RMSNorm(x W_DQ).
            cache: a :class:`~attn_lib.kv_cache.KVCache` of the indexer keys k_I (as keys; the values are empty):
                x's tokens sit at positions cache.seq_len .. cache.seq_len + L - 1 and their k_I are appended.

        Returns:
            (B, L, S) in x's dtype, S = the cached tokens + L (transformers: float32 for a float32 model; see
            tests/test_sparse.py).

        Raises:
            TypeError: not floating tensors, or not of the weights' dtype; cache not a KVCache. ValueError: shapes
            that do not fit the sizes; x and q_resid on different devices; NaN or inf in them; index scores that
            overflow the dtype.
        """
        check_tensor("x", x, floating=True, ndim=3)
        check_tensor("q_resid", q_resid, floating=True, ndim=3)
        if x.shape[-1] != self.d_model or q_resid.shape[:2] != x.shape[:2] or \
                q_resid.shape[-1] != self.wq_b.in_features:
            raise ValueError(f"x must be (B, L, d_model={self.d_model}) and q_resid (B, L, "
                             f"q_lora_rank={self.wq_b.in_features}), got {shape_of(x)} and {shape_of(q_resid)}")
        weight = self.wk.weight
        for name, t in (("x", x), ("q_resid", q_resid)):
            if t.dtype != weight.dtype:
                raise TypeError(f"{name} must have the indexer's dtype {weight.dtype}, got {t.dtype}")
        check_same_device(x=x, q_resid=q_resid)
        check_finite("x", x)
        check_finite("q_resid", q_resid)
        if cache is not None and not isinstance(cache, KVCache):
            raise TypeError(f"cache must be an attn_lib.kv_cache.KVCache (the indexer keys), got "
                            f"{type(cache).__name__}")
        B, L, _ = x.shape
        past = 0 if cache is None else cache.seq_len
        pos = torch.arange(past, past + L, device=x.device)
        q = self.wq_b(q_resid).view(B, L, self.num_heads, self.head_dim).transpose(1, 2)  # (B, H_I, L, d_I)
        q = self._rope_first(q, pos)
        k = self._rope_first(self.k_norm(self.wk(x)), pos)  # (B, L, d_I): one key for all indexer heads
        if cache is not None:
            k = cache.update(k[:, None], k[:, None, :, :0])[0][:, 0]  # (B, S, d_I): the cached keys too
        dots = torch.relu(q @ k[:, None].transpose(-1, -2) * self.head_dim ** -0.5)  # (B, H_I, L, L)
        w = self.weights_proj(x) * self.num_heads ** -0.5  # (B, L, H_I)
        index = (w.unsqueeze(-2) @ dots.transpose(1, 2)).squeeze(-2)  # (B, L, 1, H_I) @ (B, L, H_I, L) -> (B, L, L)
        keep = causal_mask(L, k.shape[1], align="bottom_right", device=x.device)
        if not bool(torch.isfinite(index.detach()[..., keep]).all()):
            raise ValueError(f"the index scores overflow {index.dtype} (max {torch.finfo(index.dtype).max:.3g}) on "
                             f"finite x and q_resid (largest |x| {float(x.detach().abs().amax()):.3g}); expected "
                             f"inputs of a moderate scale -- normalise them or compute in float64")
        return index.masked_fill(~keep, float("-inf"))

    def select(self, scores: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The top-k keys of each query: ``(indices, valid)``, each (B, L, min(k, S)).

        ``indices`` int64 in descending score order; ``valid`` is False where a query has fewer than k causal keys
        and the index points at a blocked (future) key: such entries must not be attended.

        Raises:
            TypeError: scores not a floating tensor. ValueError: not 3-D; NaN or +inf in scores (-inf is a blocked
                key; a NaN used to be taken silently for one).
        """
        check_tensor("scores", scores, floating=True, ndim=3)
        check_finite("scores", scores, allow_neg_inf=True)
        top = scores.topk(min(self.topk, scores.shape[-1]), dim=-1)
        return top.indices, top.values > float("-inf")

    def selected_mask(self, scores: torch.Tensor) -> torch.Tensor:
        """bool (B, L, S), True where query t keeps key s: the top-k set (valid entries only) of :meth:`select`."""
        idx, valid = self.select(scores)
        return torch.zeros_like(scores, dtype=torch.bool).scatter(-1, idx, valid)

    @classmethod
    def from_hf(cls, module: nn.Module) -> "LightningIndexer":
        """A copy of transformers' ``DeepseekV32Indexer`` or ``GlmMoeDsaIndexer`` (``layers[i].self_attn.indexer``).

        Raises:
            TypeError: module has no wq_b / wk / k_norm / weights_proj.
        """
        if not all(hasattr(module, n) for n in ("wq_b", "wk", "k_norm", "weights_proj", "config")):
            raise TypeError(f"from_hf expects transformers' DeepseekV32Indexer (self_attn.indexer), "
                            f"got {type(module).__name__}")
        cfg = module.config
        rope = dict(getattr(cfg, "rope_parameters", None) or {})
        new = cls(module.hidden_size, module.q_lora_rank, num_heads=module.n_heads, head_dim=module.head_dim,
                  rope_dim=module.qk_rope_head_dim, topk=module.index_topk,
                  rope_base=float(rope.get("rope_theta", getattr(cfg, "rope_theta", 10000.0))),
                  dtype=module.wk.weight.dtype,
                  rope_interleave=type(module).__name__.startswith("GlmMoeDsa"))  # GLM-5 rotates interleaved pairs
        if module.k_norm.eps != new.k_norm.eps:
            new.k_norm.eps = module.k_norm.eps
        new.load_state_dict(module.state_dict())
        new.train(module.training)
        return new


class SparseLatentAttention(MultiHeadLatentAttention):
    """MLA whose queries attend only to the top-k keys a :class:`LightningIndexer` picks: DeepSeek sparse attention.

    Args:
        as :class:`~attn_lib.mla.MultiHeadLatentAttention` (``q_lora_rank`` required: the indexer reads c_Q), plus
        index_heads (H_I), index_head_dim (d_I) and topk (k) for the ``indexer`` submodule.

    The weights are of ``dtype`` (a keyword of :class:`~attn_lib.mla.MultiHeadLatentAttention`, default float32);
    ``forward`` maps (B, L, d_model) to (B, L, d_model) in that dtype.

    Raises:
        TypeError / ValueError: as the two parents (sizes, flags, rope_base, scale; index_heads, index_head_dim
            and topk as LightningIndexer's num_heads, head_dim and topk; qk_rope_head_dim > index_head_dim is
            refused as the indexer's rope_dim); ValueError: q_lora_rank None.

    Source: DeepSeek-AI 2025, DeepSeek-V3.2-Exp report (DeepSeek sparse attention in MLA's MQA mode);
    transformers' ``DeepseekV32Attention``, which tests/test_sparse.py matches in float64.
    """

    def __init__(self, d_model: int, num_heads: int, *, index_heads: int, index_head_dim: int, topk: int,
                 q_lora_rank: int, **mla) -> None:
        if q_lora_rank is None:
            raise ValueError("q_lora_rank must be an int >= 1 for sparse attention (the indexer reads c_Q), got None")
        super().__init__(d_model, num_heads, q_lora_rank=q_lora_rank, **mla)
        self.indexer = LightningIndexer(d_model, q_lora_rank, num_heads=index_heads, head_dim=index_head_dim,
                                        rope_dim=self.qk_rope_head_dim, topk=topk, rope_base=self.rope_base,
                                        dtype=self.o_proj.weight.dtype)

    def select(self, x: torch.Tensor, *, cache: "DSACache | None" = None) -> tuple[torch.Tensor, torch.Tensor]:
        """The indexer's choice for x's tokens: ``(indices, valid)``, each (B, L, min(k, S)) (see
        :meth:`LightningIndexer.select`); with a cache, over its S tokens, and x's indexer keys are appended to
        ``cache.index``. Hand it to the next layers' ``forward(selection=...)`` to share it (GLM-5).

        Raises:
            TypeError / ValueError: as :meth:`forward`; ValueError: a layer without an indexer (a shared one).
        """
        self._check_x(x)
        if self.indexer is None:
            raise ValueError("this layer has no indexer (a GLM-5 'shared' layer): pass the selection of the full "
                             "layer before it, forward(x, selection=...)")
        if cache is not None and not isinstance(cache, DSACache):
            raise TypeError(f"cache must be an attn_lib.sparse.DSACache, got {type(cache).__name__}")
        if cache is not None:
            claim_cache(cache.latent, self)
        scores = self.indexer.scores(x, self.q_a_norm(self.q_a_proj(x)), cache=None if cache is None else cache.index)
        return self.indexer.select(scores)

    def forward(self, x: torch.Tensor, *, gather: bool = True,
                selection: tuple[torch.Tensor, torch.Tensor] | None = None, cache: "DSACache | None" = None,
                return_selection: bool = False):
        """Causal DSA over x: each query attends to its top-k keys by the indexer's scores.

        Args:
            x: (B, L, d_model) floating, the dtype of the weights.
            gather: attend over the k gathered latents per query, in MLA's absorbed (MQA) form: the sparse
                computation, O(L·k). False: dense MLA with every unchosen key masked (transformers' eager path).
                The same result.
            selection: ``(indices, valid)`` of another layer's :meth:`select` over the same tokens (GLM-5's shared
                layers); None: this layer's indexer chooses.
            cache: a :class:`DSACache`: x's tokens continue the cached ones (the latents and the indexer keys are
                appended); decoding token by token equals the full forward.
            return_selection: also return the ``(indices, valid)`` used, for the next (shared) layers.

        Returns:
            (B, L, d_model) (and the selection with ``return_selection``); empty when L = 0 or B = 0.

        Raises:
            TypeError: x not floating or not of the weights' dtype, gather not a bool, cache not a DSACache.
            ValueError: x not (B, L, d_model); a selection of the wrong shape or indices out of range; no selection
                for a layer without an indexer.
        """
        self._check_x(x)
        check_bool("gather", gather)
        check_bool("return_selection", return_selection)
        if cache is not None and not isinstance(cache, DSACache):
            raise TypeError(f"cache must be an attn_lib.sparse.DSACache, got {type(cache).__name__}")
        if cache is not None:  # before the indexer appends its keys: another layer's cache is refused unchanged
            claim_cache(cache.latent, self)
        B, L, _ = x.shape
        if x.numel() == 0:  # no token or no sequence: an empty output
            out = self.o_proj(x.new_zeros(B, L, self.num_heads * self.v_head_dim))
            return (out, selection) if return_selection else out
        past = 0 if cache is None else cache.latent.seq_len
        if selection is None:
            selection = self.select(x, cache=cache)
        elif cache is not None and self.indexer is not None:
            self.indexer.scores(x, self.q_a_norm(self.q_a_proj(x)), cache=cache.index)  # keep its keys in step
        pos = torch.arange(past, past + L, device=x.device)
        q_c, q_r = self.queries(x, pos)  # (B, H, L, dn), (B, H, L, dr)
        c, k_r = self.latents(x, pos)  # (B, 1, L, r), (B, 1, L, dr)
        if cache is not None:
            claim_cache(cache.latent, self)
            c, k_r = cache.latent.update(c, k_r)  # (B, 1, S, r), (B, 1, S, dr)
        S = c.shape[-2]
        idx, valid = self._check_selection(selection, B, L, S)
        w_uk, w_uv = self.up_projections()
        if not gather:
            keep = torch.zeros(B, L, S, dtype=torch.bool, device=x.device).scatter(-1, idx, valid)[:, None]
            k_c = torch.einsum("bxsr,hdr->bhsd", c, w_uk)
            v = torch.einsum("bxsr,hvr->bhsv", c, w_uv)
            key = torch.cat([k_c, k_r.expand(B, self.num_heads, S, self.qk_rope_head_dim)], dim=-1)
            heads, _ = scaled_dot_product_attention(torch.cat([q_c, q_r], -1), key, v, keep, scale=self.scale)
            out = self.o_proj(heads.transpose(1, 2).reshape(B, L, -1))
            return (out, (idx, valid)) if return_selection else out
        latent = torch.cat([c, k_r], dim=-1)[:, 0]  # (B, S, r + dr): what the cache holds
        chosen = latent[torch.arange(B, device=x.device)[:, None, None], idx]  # (B, L, k, r + dr)
        q_lat = torch.einsum("bhld,hdr->blhr", q_c, w_uk)  # W_UK absorbed into the query: (B, L, H, r)
        query = torch.cat([q_lat, q_r.transpose(1, 2)], dim=-1)  # (B, L, H, r + dr): the H heads as "queries"
        out_lat, _ = scaled_dot_product_attention(query, chosen, chosen[..., : self.kv_lora_rank], valid[:, :, None],
                                                  scale=self.scale)  # (B, L, H, r): one MQA per query token
        heads = torch.einsum("blhr,hvr->blhv", out_lat, w_uv)  # W_UV after the softmax
        out = self.o_proj(heads.reshape(B, L, -1))
        return (out, (idx, valid)) if return_selection else out

    @staticmethod
    def _check_selection(selection, B: int, L: int, S: int) -> tuple[torch.Tensor, torch.Tensor]:
        if not (isinstance(selection, tuple) and len(selection) == 2 and all(isinstance(t, torch.Tensor)
                                                                            for t in selection)):
            raise TypeError(f"selection must be the (indices, valid) pair of select(), got {type(selection).__name__}")
        idx, valid = selection
        if idx.dtype != torch.int64 or valid.dtype != torch.bool or idx.shape != valid.shape or idx.dim() != 3 \
                or idx.shape[:2] != (B, L):
            raise ValueError(f"selection must be (indices int64, valid bool) of shape (B={B}, L={L}, k), got "
                             f"{idx.dtype} {shape_of(idx)} and {valid.dtype} {shape_of(valid)}")
        if idx.numel() and (int(idx.min()) < 0 or int(idx.max()) >= S):
            raise ValueError(f"selection indices must lie in [0, S={S}) (the tokens attended), got "
                             f"[{int(idx.min())}, {int(idx.max())}]")
        future = torch.arange(S - L, S, device=idx.device)[None, :, None] < idx  # a chosen key after its query
        return idx, valid & ~future

    @classmethod
    def from_hf(cls, module: nn.Module) -> "SparseLatentAttention":
        """A copy of transformers' ``DeepseekV32Attention`` or ``GlmMoeDsaAttention``: its MLA (as
        :meth:`MultiHeadLatentAttention.from_hf`) and its ``indexer`` (:meth:`LightningIndexer.from_hf`; None for a
        GLM-5 "shared" layer, which then needs ``forward(x, selection=...)``).

        Raises:
            TypeError: module has no ``indexer`` or is not an MLA block.
        """
        if not hasattr(module, "indexer"):
            raise TypeError(f"from_hf expects transformers' DeepseekV32Attention or GlmMoeDsaAttention, got "
                            f"{type(module).__name__}")
        mla = MultiHeadLatentAttention.from_hf(module)
        ix = None if module.indexer is None else LightningIndexer.from_hf(module.indexer)  # None: a GLM-5 shared layer
        new = cls.__new__(cls)
        new.__dict__.update(mla.__dict__)  # the MLA's sizes and submodules, then the indexer
        new.indexer = ix
        return new


class DSACache:
    """One DSA layer's cache: ``latent``, the MLA latents (c_KV, k_R), and ``index``, the indexer keys k_I (two
    :class:`~attn_lib.kv_cache.KVCache`; ``index`` stays empty for a layer without an indexer).

    ``latent`` holds c_KV (B, 1, S, r) and k_R (B, 1, S, dr); ``index`` holds k_I (B, 1, S, d_I) and an empty
    (B, 1, S, 0) value; both in the layer's floating dtype. ``nbytes()`` counts both: per token r + dr latent
    features and d_I indexer features per layer.

    Raises:
        TypeError / ValueError: as :class:`~attn_lib.kv_cache.KVCache` (its ``update``), when a layer fills it.

    Source: DeepSeek-AI 2025, DeepSeek-V3.2-Exp report (the latent cache and the indexer's key cache); the
    indexer cache of transformers' ``GlmMoeDsaIndexer`` (``cache.update_indexer``).
    """

    def __init__(self) -> None:
        self.latent = KVCache()
        self.index = KVCache()

    @property
    def seq_len(self) -> int:
        return self.latent.seq_len

    def nbytes(self) -> int:
        return self.latent.nbytes() + self.index.nbytes()


def dsa_decode_cost(seq_len: int, *, num_heads: int = 128, kv_lora_rank: int = 512, qk_rope_head_dim: int = 64,
                    d_model: int = 7168, q_lora_rank: int = 1536, index_heads: int = 64, index_head_dim: int = 128,
                    topk: int = 2048, bytes_per_element: float = 2,
                    index_bytes_per_element: float = 1) -> dict[str, dict[str, float]]:
    """FLOPs (2 per multiply-add) and cache bytes read for ONE new token of one layer over ``seq_len`` = S cached
    tokens: dense MLA attention against DSA. Defaults: DeepSeek-V3.2's config (bf16 latents, FP8 indexer keys).

    Both attend in MLA's MQA ("absorbed") form, over latent entries of r + dr features shared by the H heads; the
    W_UK / W_UV / W_O projections are the same for both and left out. With k' = min(k, S):

    - dense: scores 2·S·H·(r + dr), weighted sum of the r-feature values 2·S·H·r; reads the whole latent cache,
      S·(r + dr)·e bytes.
    - DSA indexer: the new token's projections 2·r_q·H_I·d_I (q_I), 2·d·d_I (k_I), 2·d·H_I (w); scores over every
      cached key 2·S·H_I·d_I, and the weighted sum over heads 2·S·H_I; reads the indexer's key cache,
      S·d_I·e_I bytes. The top-k choice is comparisons, O(S), not counted.
    - DSA attention: as dense over k' keys, 2·k'·H·(r + dr) + 2·k'·H·r FLOPs, k'·(r + dr)·e bytes.

    Takes no tensors: the sizes are ints (S = seq_len, H, r, dr, d, r_q, H_I, d_I, k), the bytes per element
    floats (e = bytes_per_element of the latent cache, e_I = index_bytes_per_element of the indexer's keys).

    Returns:
        {"dense": {"flops", "bytes"}, "sparse": {"flops", "bytes", "indexer_flops", "attention_flops"}}, floats.

    Raises:
        TypeError: a size not an int (a bool refused); a bytes_per_element not a number.
        ValueError: a size < 1; a bytes_per_element NaN, infinite or <= 0.

    Source: the course's own count (notebook 11) of DSA as DeepSeek-AI 2025, DeepSeek-V3.2-Exp report, describes
    it; the default sizes are DeepSeek-V3.2-Exp's config.json.
    """
    S, H, r, dr, d, rq, HI, dI, k = (_pos(n, v) for n, v in (
        ("seq_len", seq_len), ("num_heads", num_heads), ("kv_lora_rank", kv_lora_rank),
        ("qk_rope_head_dim", qk_rope_head_dim), ("d_model", d_model), ("q_lora_rank", q_lora_rank),
        ("index_heads", index_heads), ("index_head_dim", index_head_dim), ("topk", topk)))
    e, eI = (check_number(n, v, positive=True) for n, v in (("bytes_per_element", bytes_per_element),
                                                           ("index_bytes_per_element", index_bytes_per_element)))
    kk = min(k, S)
    dense = 2 * S * H * (r + dr) + 2 * S * H * r
    indexer = 2 * rq * HI * dI + 2 * d * dI + 2 * d * HI + 2 * S * HI * dI + 2 * S * HI
    attention = 2 * kk * H * (r + dr) + 2 * kk * H * r
    return {"dense": {"flops": float(dense), "bytes": float(S * (r + dr) * e)},
            "sparse": {"flops": float(indexer + attention), "bytes": float(S * dI * eI + kk * (r + dr) * e),
                       "indexer_flops": float(indexer), "attention_flops": float(attention)}}
