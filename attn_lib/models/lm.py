"""attn_lib's one decoder-only language model: RoPE, grouped-query attention, a KV cache (notebooks 07, 08, 10, 11).

The layout of LLaMA-style decoders (Touvron et al. 2023, "LLaMA", section 2.2), shrunk:

    x = embed(ids)                                        # (B, L, d_model); no position embedding:
    for each layer:                                       #   positions enter through RoPE in attention
        x = x + attn(RMSNorm(x), is_causal=True)          # pre-norm; attn_lib.mha.MultiHeadAttention (GQA)
        x = x + ffn(RMSNorm(x))                           # FeedForward (GELU) or SwiGLU (LLaMA's)
    logits = lm_head(RMSNorm(x))                          # (B, L, vocab_size); weights tied to embed by default

The capstone's :class:`attn_lib.course.capstone.TinyDecoder` (notebooks 10, 11) is this class with a small default
configuration; notebook 07 uses it as the decoder-only (GPT-like) member of its comparison, and
:meth:`DecoderLM.from_hf` copies a HuggingFace ``LlamaForCausalLM`` into it (``ffn="swiglu"``, an untied head, the
config's head_dim), which is how notebook 08 and tests/models/test_lm_from_hf.py prove its attention, KV cache and decoding
loop against ``generate``. Options the capstone needs:

- ``forward(..., attention="tiled")``: the attention runs :func:`attn_lib.tiled.tiled_attention` (notebook 09)
  instead of materialising the (L, S) weights; the logits agree to float rounding (tests/course/test_capstone.py).
- ``attend="self"``: the ablation in which every token attends only to itself (the mask is the diagonal),
  so no information moves between positions; the model is then a function of the current token alone.
- :meth:`DecoderLM.attention_weights`: every layer's (B, H, L, L) weights, for heatmaps.

Decoding with :meth:`DecoderLM.generate` keeps one :class:`attn_lib.kv_cache.KVCache` per layer: the
prompt is processed once, then each step feeds only the newest token, whose query attends over all
cached keys (the causal mask aligned bottom-right). The next token is chosen by
:func:`attn_lib.models.decoding.sample_loop`, the one decoding loop of attn_lib (greedy at temperature 0,
else temperature and top-k sampling). tests/models/test_lm.py checks that the cached logits equal the full forward
pass to 1e-5 and that greedy output is identical with and without the cache. Pass your own
``kv_caches=model.new_kv_caches()`` to :meth:`DecoderLM.generate` to read the filled caches afterwards.
"""

from __future__ import annotations

import math
from typing import Callable, Sequence

import torch
from torch import nn

from attn_lib._checks import (check_bool, check_callable, check_choice, check_int as _check_int, check_number,
                              check_finite, check_on_device, check_rope_base, check_tensor, check_token_ids, shape_of)
from attn_lib.kv_cache import KVCache, KVCacheProtocol
from attn_lib.mha import MultiHeadAttention
from attn_lib.models.blocks import FeedForward, SwiGLU
from attn_lib.models.decoding import _evaluating, check_max_new_tokens, check_prompts, check_sampling, sample_loop

__all__ = ["DecoderLM", "LMBlock", "ATTENTIONS", "ATTENDS", "INITS", "FFNS"]

#: How attention is computed: "naive" builds the (L, S) weights, "tiled" runs tiled_attention (notebook 09).
ATTENTIONS = ("naive", "tiled")
#: Which keys a token may attend to: "causal" (itself and every earlier token) or "self" (itself only).
ATTENDS = ("causal", "self")
#: Initialisations: "gpt2" N(0, init_std) for every weight; "torch" PyTorch's defaults, N(0, 0.02) embedding.
INITS = ("gpt2", "torch")
#: Feed-forward networks: "gelu" (FeedForward: two linear maps with biases, GELU) or "swiglu" (SwiGLU, LLaMA's).
FFNS = ("gelu", "swiglu")


def _check_distinct(name: str, caches) -> None:
    """One cache object per layer: a cache shared by two layers would mix their keys and values silently."""
    first: dict[int, int] = {}
    for i, c in enumerate(caches):
        if id(c) in first:
            raise ValueError(f"{name} holds the same cache object for layers {first[id(c)]} and {i}; each layer needs "
                             f"its own (model.new_kv_caches(), or a factory that makes a new cache per call)")
        first[id(c)] = i


class LMBlock(nn.Module):
    """One pre-norm decoder layer: causal (grouped-query) self-attention with RoPE, then a feed-forward network.

    ``x + attn(norm1(x))`` then ``x + ffn(norm2(x))``; x (B, L, d_model) -> (B, L, d_model).

    Args:
        d_model: width. num_heads: H, must divide d_model unless head_dim is given. num_kv_heads: Hkv, must
            divide H. d_ff: feed-forward width. rope_base: RoPE's base (None: no RoPE; :class:`DecoderLM`
            refuses None). norm_eps: the two RMSNorms' epsilon (None: torch's default).
        ffn: ``"gelu"`` (default: :class:`attn_lib.models.blocks.FeedForward`, GELU) or ``"swiglu"``
            (:class:`attn_lib.models.blocks.SwiGLU`, LLaMA's). head_dim: E per head (default d_model / H).
        attn_bias: biases on the four attention projections (default False).

    Dtypes: x floating, the module's dtype (float32 by default, float64 after ``.double()``); the output and the
    weights have it.

    Raises:
        TypeError / ValueError: as :class:`attn_lib.mha.MultiHeadAttention` (a size not an int, H not dividing
            d_model, Hkv not dividing H, an odd head_dim with RoPE, rope_base not > 1) and
            :class:`attn_lib.models.blocks.FeedForward` (d_ff); ValueError for an ``ffn`` other than "gelu" or
            "swiglu" and for a norm_eps < 0 (TypeError if not a number or None). ``forward``: TypeError for x not a
            floating tensor or not of the weights' dtype, ValueError for x not (B, L, d_model) with L >= 1, not on
            the weights' device, non-finite, or so large that RMSNorm's sum of squares overflows; then as
            ``MultiHeadAttention.forward`` (an unknown backend, a bad cache or mask, NaN in x).

    Source: Touvron et al. 2023 (LLaMA), §2.2: pre-normalisation with RMSNorm, rotary embeddings; the FFN is
    GELU by default, LLaMA's SwiGLU with ``ffn="swiglu"`` (then the layer equals transformers'
    ``LlamaDecoderLayer``, tests/models/test_lm_from_hf.py).
    """

    def __init__(self, d_model: int, num_heads: int, num_kv_heads: int, d_ff: int, rope_base: float,
                 norm_eps: float | None = 1e-6, *, ffn: str = "gelu", head_dim: int | None = None,
                 attn_bias: bool = False):
        super().__init__()
        check_choice("ffn", ffn, FFNS)
        norm_eps = check_number("norm_eps", norm_eps, minimum=0.0, allow_none=True)
        self.norm1 = nn.RMSNorm(d_model, eps=norm_eps)
        self.attn = MultiHeadAttention(d_model, num_heads, num_kv_heads=num_kv_heads, head_dim=head_dim,
                                       bias=attn_bias, rope_base=rope_base)
        self.norm2 = nn.RMSNorm(d_model, eps=norm_eps)
        self.ffn = FeedForward(d_model, d_ff, activation="gelu") if ffn == "gelu" else SwiGLU(d_model, d_ff)

    def forward(self, x: torch.Tensor, kv_cache=None, *, attn_mask: torch.Tensor | None = None,
                backend: str = "naive", tile_size: int = 8, need_weights: bool = False):
        """x (B, L, d_model) -> (B, L, d_model); with ``need_weights`` also the weights (B, H, L, S).

        S = L plus the tokens already in ``kv_cache``; ``backend`` "naive" or "tiled" (tiles of ``tile_size``).
        """
        self._check_input(x)  # the errors of the class docstring's Raises
        a, w = self.attn(self.norm1(x), is_causal=True, kv_cache=kv_cache, attn_mask=attn_mask, backend=backend,
                         tile_size=tile_size, need_weights=need_weights)  # (B, L, d_model): tokens exchange information
        x = x + a
        x = x + self.ffn(self.norm2(x))  # each token on its own
        return (x, w) if need_weights else x

    def _check_input(self, x) -> None:
        check_tensor("x", x, floating=True, ndim=3)
        d_model = self.norm1.normalized_shape[0]
        if x.shape[-1] != d_model or x.shape[1] == 0:
            raise ValueError(f"x must be (B, L, d_model) = (B, L >= 1, {d_model}), got shape {shape_of(x)}")
        w_dtype = self.norm1.weight.dtype
        if x.dtype != w_dtype:  # checked before the RMSNorm, which would warn and compute in mixed dtypes
            raise TypeError(f"x has dtype {x.dtype} but the layer's weights are {w_dtype}; convert one of them "
                            f"(x.to({w_dtype}) or layer.to({x.dtype}))")
        check_on_device("x", x, self.norm1.weight.device, of="the layer")
        check_finite("x", x)  # named here, not as the attention's "query" after norm1 and the projection
        limit = math.sqrt(torch.finfo(x.dtype).max / d_model)
        if x.numel() and float(x.detach().abs().amax()) > limit:  # RMSNorm's mean of squares would be inf: x * 0
            raise ValueError(f"x holds {float(x.detach().abs().amax()):.3g}, too large for RMSNorm in {x.dtype}: the "
                             f"sum of squares of {d_model} features overflows above |x| = {limit:.3g}; expected "
                             f"activations of a moderate scale")


class DecoderLM(nn.Module):
    """A GPT/LLaMA-like decoder-only language model: RoPE, grouped-query attention, causal, with a KV cache.

    Args:
        vocab_size: number of token ids (int >= 2).
        d_model: model width (default 128). num_heads: query heads (default 4), must divide d_model (unless
            ``head_dim`` is given), with an even head_dim (RoPE).
        num_kv_heads: key/value heads (default num_heads = MHA; 1 = MQA), must divide num_heads.
        num_layers: decoder layers (default 2). d_ff: feed-forward width (default 4·d_model).
        rope_base: RoPE's base (default 10000.0), a number > 1; RoPE is the model's only position
            information, so None is refused.
        init_std: standard deviation of the initial linear and embedding weights (default 0.02, GPT-2's).
        max_len: the longest sequence (prompt plus generated tokens, or cached plus new) it accepts
            (default 2048, LLaMA-1's context length).
        attend: ``"causal"`` (default) or ``"self"``: every token attends only to itself (the ablation of
            notebook 10: attention then moves no information between positions).
        norm_eps: the RMSNorms' epsilon (default 1e-6; None = torch's default, the dtype's machine epsilon).
        init: ``"gpt2"`` (default: every linear and embedding weight N(0, init_std), zero biases) or
            ``"torch"`` (PyTorch's default init of the linear layers, the embedding N(0, 0.02): TinyDecoder's).
        tile_size: queries and keys per tile of ``forward(attention="tiled")`` (default 8).
        ffn: ``"gelu"`` (default: :class:`attn_lib.models.blocks.FeedForward`, two linear maps with biases) or
            ``"swiglu"`` (:class:`attn_lib.models.blocks.SwiGLU`: LLaMA's gated, bias-free network).
        tie_embeddings: True (default, GPT-2's): the output layer ``lm_head`` reuses the embedding matrix;
            False: ``lm_head`` has its own (vocab_size, d_model) weight (LLaMA's).
        head_dim: E, the width of each head (default None: d_model / num_heads); with it, num_heads need not
            divide d_model (the projections are d_model -> H·E), as in Gemma and Qwen3. Even, for RoPE.
        attn_bias: biases on the attention's q/k/v/out projections (default False; Llama's ``attention_bias``).

    With the default ``ffn``, ``tie_embeddings``, ``head_dim`` and ``attn_bias`` the modules and their random
    initialisation are those of the model without these options (notebooks 10 and 11 train it live).

    Shapes: ``forward(input_ids (B, L))`` -> logits (B, L, vocab_size), float32 (float64 after ``.double()``).

    Raises:
        TypeError: a size that is not an int (``d_model=16.0``), rope_base or init_std not a number (None),
            norm_eps neither None nor a number, tie_embeddings or attn_bias not a bool.
        ValueError: sizes < 1, head counts that do not divide (the message names the numbers), an odd head_dim
            (RoPE rotates pairs of features), rope_base <= 1, init_std <= 0 or above an eighth of the default
            dtype's maximum (the weights would be inf), norm_eps < 0, an unknown ``attend``,
            ``init`` or ``ffn``.

    Source: Touvron et al. 2023 (LLaMA), section 2.2; GPT-2's tied embeddings and initialisation
    (Radford et al. 2019); proven against HuggingFace's Llama in tests/models/test_lm_from_hf.py (:meth:`from_hf`: the logits,
    the KV caches, greedy and sampled decoding against ``generate``) and against torch's SDPA in
    tests/course/test_capstone.py.
    """

    def __init__(self, vocab_size: int, *, d_model: int = 128, num_heads: int = 4, num_kv_heads: int | None = None,
                 num_layers: int = 2, d_ff: int | None = None, rope_base: float = 10000.0, init_std: float = 0.02,
                 max_len: int = 2048, attend: str = "causal", norm_eps: float | None = 1e-6, init: str = "gpt2",
                 tile_size: int = 8, ffn: str = "gelu", tie_embeddings: bool = True, head_dim: int | None = None,
                 attn_bias: bool = False):
        super().__init__()
        self.attend = check_choice("attend", attend, ATTENDS)
        check_choice("init", init, INITS)
        self.ffn_kind = check_choice("ffn", ffn, FFNS)
        self.tie_embeddings = check_bool("tie_embeddings", tie_embeddings)
        check_bool("attn_bias", attn_bias)
        if head_dim is not None:
            _check_int("head_dim", head_dim, minimum=1)
        self.tile_size = _check_int("tile_size", tile_size, minimum=1)
        norm_eps = check_number("norm_eps", norm_eps, minimum=0.0, allow_none=True)
        _check_int("vocab_size", vocab_size, minimum=2)
        _check_int("d_model", d_model, minimum=1)
        _check_int("num_layers", num_layers, minimum=1)
        _check_int("max_len", max_len, minimum=1)
        # RoPE is this model's only source of positions: without it the model could not tell order apart
        rope_base = check_rope_base(rope_base, allow_none=False)
        # at most what the weights' dtype holds with room for 8 standard deviations (1e300 made inf weights)
        init_std = check_number("init_std", init_std, minimum=0.0,
                                maximum=float(torch.finfo(torch.get_default_dtype()).max) / 8)
        if init_std == 0:
            raise ValueError(f"init_std must be a number > 0, got {init_std}")
        d_ff = 4 * d_model if d_ff is None else _check_int("d_ff", d_ff, minimum=1)
        num_kv_heads = num_heads if num_kv_heads is None else num_kv_heads
        self.vocab_size, self.d_model, self.num_layers, self.max_len = vocab_size, d_model, num_layers, max_len
        self.embed = nn.Embedding(vocab_size, d_model)
        self.layers = nn.ModuleList(
            LMBlock(d_model, num_heads, num_kv_heads, d_ff, rope_base, norm_eps, ffn=ffn, head_dim=head_dim,
                    attn_bias=attn_bias) for _ in range(num_layers)
        )
        self.norm = nn.RMSNorm(d_model, eps=norm_eps)
        self.lm_head = nn.Linear(d_model, vocab_size, bias=False)
        if tie_embeddings:
            self.lm_head.weight = self.embed.weight  # tied input and output embeddings (GPT-2)
        if init == "torch":  # torch's default for the linear layers; only the (tied) embedding is redrawn
            nn.init.normal_(self.embed.weight, std=0.02)
            return
        for m in self.modules():
            # GPT-2's initialisation: N(0, init_std) for linear and embedding weights, zero biases
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, std=float(init_std))
                if getattr(m, "bias", None) is not None:
                    nn.init.zeros_(m.bias)

    @classmethod
    def from_hf(cls, hf_model: nn.Module) -> "DecoderLM":
        """A DecoderLM with the layout and a copy of the weights of a HuggingFace ``LlamaForCausalLM``.

        The model is built in Llama's layout -- ``ffn="swiglu"`` (gate/up/down, SiLU), the config's
        ``rms_norm_eps``, ``head_dim`` (which may differ from hidden_size / num_heads), ``rope_theta``,
        ``attention_bias`` and ``max_position_embeddings``, an untied ``lm_head`` unless
        ``tie_word_embeddings`` -- and every weight is copied (none is shared, so changing one model leaves the
        other as it was). The attention, RoPE, SwiGLU, KV cache and decoding loop that then run are attn_lib's
        (the norms, embedding and head are torch's ``nn.RMSNorm`` / ``nn.Embedding`` / ``nn.Linear`` in place of
        HF's): equal logits, KV caches and ``generate`` output prove the from-scratch parts. The global random
        generator is left as it was (the throw-away initialisation draws from a forked one). The copy has the HF
        model's dtype, device and training mode.

        Layer by layer: ``input_layernorm`` -> ``norm1``, ``self_attn.{q,k,v,o}_proj`` -> ``attn.{q,k,v,out}_proj``
        (as :meth:`attn_lib.mha.MultiHeadAttention.from_hf`), ``post_attention_layernorm`` -> ``norm2``,
        ``mlp.{gate,up,down}_proj`` -> ``ffn.{gate,up,down}_proj``; then ``model.norm`` -> ``norm`` and
        ``model.embed_tokens`` / ``lm_head`` -> ``embed`` / ``lm_head``.

        Args:
            hf_model: a transformers ``LlamaForCausalLM`` (``config.model_type == "llama"``), any dtype.

        Returns:
            a DecoderLM: ``forward(input_ids (B, L) int64)`` -> logits (B, L, vocab_size) in the HF model's dtype.

        Raises:
            TypeError: hf_model is not a Llama causal LM (no ``config`` of model_type "llama", no
                ``model.layers`` / ``lm_head``).
            ValueError: what DecoderLM cannot copy: a RoPE scaling other than the default (Llama 3's
                ``rope_scaling``), a ``hidden_act`` other than "silu", ``mlp_bias=True``, a non-zero
                ``attention_dropout`` (DecoderLM's attention has no dropout).

        Source: Touvron et al. 2023 (LLaMA), section 2.2; the module names of transformers'
        ``modeling_llama`` (tests/models/test_lm_from_hf.py: logits, caches and ``generate`` equal, in float64).
        """
        config = getattr(hf_model, "config", None)
        inner = getattr(hf_model, "model", None)
        if (getattr(config, "model_type", None) != "llama" or not hasattr(inner, "layers")
                or not isinstance(getattr(hf_model, "lm_head", None), nn.Linear)):
            raise TypeError(f"hf_model must be a HuggingFace LlamaForCausalLM (config.model_type 'llama', "
                            f"model.layers, lm_head), got {type(hf_model).__name__}")
        for name, value, wanted in (("hidden_act", getattr(config, "hidden_act", "silu"), "silu"),
                                    ("mlp_bias", bool(getattr(config, "mlp_bias", False)), False),
                                    ("attention_dropout", float(getattr(config, "attention_dropout", 0.0) or 0.0),
                                     0.0)):
            if value != wanted:
                raise ValueError(f"DecoderLM.from_hf copies Llamas with config.{name}={wanted!r}; got {value!r}")
        layers = list(inner.layers)
        # the attention: MultiHeadAttention.from_hf reads (and checks: default RoPE only) the projections and RoPE
        with torch.random.fork_rng(devices=[]):
            attns = [MultiHeadAttention.from_hf(layer.self_attn) for layer in layers]
        a = attns[0]
        w = inner.embed_tokens.weight  # (vocab_size, d_model)
        kwargs = dict(d_model=w.shape[1], num_heads=a.num_heads, num_kv_heads=a.num_kv_heads, num_layers=len(layers),
                      d_ff=layers[0].mlp.gate_proj.weight.shape[0], rope_base=a.rope_base,
                      max_len=int(config.max_position_embeddings), norm_eps=float(config.rms_norm_eps),
                      ffn="swiglu", tie_embeddings=bool(config.tie_word_embeddings), head_dim=a.head_dim,
                      attn_bias=a.q_proj.bias is not None)
        with torch.random.fork_rng(devices=[]):  # the initial weights are overwritten: draw them from a copy
            new = cls(w.shape[0], init="torch", **kwargs).to(device=w.device, dtype=w.dtype)
        with torch.no_grad():
            new.embed.weight.copy_(w)
            for ours, theirs, attn in zip(new.layers, layers, attns):
                ours.attn.load_state_dict(attn.state_dict())
                ours.norm1.weight.copy_(theirs.input_layernorm.weight)
                ours.norm2.weight.copy_(theirs.post_attention_layernorm.weight)
                for proj in ("gate_proj", "up_proj", "down_proj"):
                    getattr(ours.ffn, proj).weight.copy_(getattr(theirs.mlp, proj).weight)
            new.norm.weight.copy_(inner.norm.weight)
            if not new.tie_embeddings:
                new.lm_head.weight.copy_(hf_model.lm_head.weight)
        new.train(hf_model.training)
        return new

    @property
    def num_heads(self) -> int:
        return self.layers[0].attn.num_heads

    @property
    def num_kv_heads(self) -> int:
        return self.layers[0].attn.num_kv_heads

    @property
    def head_dim(self) -> int:
        return self.layers[0].attn.head_dim

    @property
    def blocks(self) -> nn.ModuleList:
        """The decoder layers (the same list as ``layers``; the capstone's name)."""
        return self.layers

    def _mask(self, L: int, past: int, device) -> torch.Tensor | None:
        """attend="self": the (L, past + L) diagonal, new token i sees key past + i only; else None (causal only)."""
        if self.attend == "causal":
            return None
        return torch.eye(L, past + L, dtype=torch.bool, device=device).roll(past, dims=1)  # (L, S)

    def new_kv_caches(self, factory: Callable[[], KVCacheProtocol] = KVCache) -> list:
        """One empty cache per layer (``factory()``, e.g. ``KVCache`` or ``lambda: QuantizedKVCache(4)``).

        Raises:
            TypeError: factory is not callable (None, or a cache instance instead of a function making
                one), or what it returns is not a :class:`attn_lib.kv_cache.KVCacheProtocol`.
            ValueError: factory returns one cache object for two layers (``lambda: shared``).
        """
        if not isinstance(factory, type) and isinstance(factory, KVCacheProtocol):
            raise TypeError(f"cache_factory must make a new cache per layer (a class or a function such as "
                            f"KVCache or lambda: QuantizedKVCache(4)), got the cache instance {factory!r}")
        check_callable("cache_factory", factory)
        caches = [factory() for _ in self.layers]
        if not isinstance(caches[0], KVCacheProtocol):
            raise TypeError(f"cache_factory must return a KV cache (attn_lib.kv_cache.KVCacheProtocol), "
                            f"got {type(caches[0]).__name__}")
        _check_distinct("cache_factory's caches", caches)
        return caches

    def _check_cache_list(self, kv_caches, *, none_ok: bool) -> None:
        """kv_caches: a list/tuple of one KVCacheProtocol per layer (forward and generate share this rule)."""
        if not isinstance(kv_caches, (list, tuple)) or not all(isinstance(c, KVCacheProtocol) for c in kv_caches):
            raise TypeError(f"kv_caches must be {'None or ' if none_ok else ''}a list of KV caches, one per layer "
                            f"(model.new_kv_caches()), got {type(kv_caches).__name__}"
                            + ("" if not isinstance(kv_caches, (list, tuple)) else
                               f" of {sorted({type(c).__name__ for c in kv_caches})}"))
        if len(kv_caches) != len(self.layers):
            raise ValueError(f"kv_caches must hold one cache per layer ({len(self.layers)}), got {len(kv_caches)}")
        _check_distinct("kv_caches", kv_caches)
        lengths = [c.seq_len for c in kv_caches]
        if len(set(lengths)) > 1:  # the new tokens' positions come from cache 0: the others would be misplaced
            raise ValueError(f"kv_caches must hold the same number of positions in every layer, got {lengths}; "
                             f"expected the caches of one model that ran the same tokens (model.new_kv_caches())")

    def _check_empty_caches(self, kv_caches, use_cache: bool) -> None:
        """generate's kv_caches: a list/tuple of one empty KVCacheProtocol per layer, and use_cache=True."""
        if not use_cache:
            raise ValueError("kv_caches needs use_cache=True (use_cache=False decodes without any cache)")
        self._check_cache_list(kv_caches, none_ok=False)
        filled = [c.seq_len for c in kv_caches]
        if any(filled):
            raise ValueError(f"kv_caches must be empty (generate runs the prompt from position 0); they hold "
                             f"{filled} positions")

    def forward(self, input_ids: torch.Tensor, kv_caches: Sequence | None = None, *,
                attention: str = "naive") -> torch.Tensor:
        """Next-token logits for every position.

        Args:
            input_ids: (B, L) int64 token ids.
            kv_caches: None (no cache: positions 0..L-1), or one cache per layer (:meth:`new_kv_caches`);
                then ``input_ids`` are the tokens that follow the cached ones (positions S_cached..S_cached+L-1),
                and the caches grow by L.
            attention: ``"naive"`` (default) or ``"tiled"`` (:func:`attn_lib.tiled.tiled_attention`, tiles of
                ``tile_size``; the same logits up to float rounding).

        Returns:
            logits (B, L, vocab_size): row i scores the token after position i.

        Raises:
            TypeError / ValueError: ids not int64 (B, L) within the vocabulary, or not on the model's device;
                kv_caches not a list of KV caches (a single cache), not one per layer, one cache object for two
                layers, or caches holding different numbers of positions; an unknown ``attention``.
        """
        return self._run(input_ids, kv_caches, attention, need_weights=False)[0]

    @torch.no_grad()
    def attention_weights(self, input_ids: torch.Tensor) -> list[torch.Tensor]:
        """Every layer's attention weights on ``input_ids`` (B, L) int64: a list of (B, H, L, L) float tensors,
        rows summing to 1 (zero above the diagonal; only the diagonal with ``attend="self"``).

        Raises:
            TypeError / ValueError: as :meth:`forward`.
        """
        return self._run(input_ids, None, "naive", need_weights=True)[1]

    def _run(self, input_ids, kv_caches, attention, *, need_weights):
        check_choice("attention", attention, ATTENTIONS)
        input_ids = check_token_ids("input_ids", input_ids, vocab_size=self.vocab_size, max_len=self.max_len)
        check_on_device("input_ids", input_ids, self.embed.weight.device, of="the model")
        if kv_caches is not None:
            self._check_cache_list(kv_caches, none_ok=True)
        if kv_caches is not None and kv_caches[0].seq_len + input_ids.shape[1] > self.max_len:
            raise ValueError(f"the caches hold {kv_caches[0].seq_len} tokens; {input_ids.shape[1]} more exceed the "
                             f"model's max_len={self.max_len}")
        past = 0 if kv_caches is None else kv_caches[0].seq_len
        mask = self._mask(input_ids.shape[1], past, input_ids.device)  # None, or the diagonal (attend="self")
        x = self.embed(input_ids)  # (B, L, d_model)
        weights = []
        for i, layer in enumerate(self.layers):
            out = layer(x, None if kv_caches is None else kv_caches[i], attn_mask=mask, backend=attention,
                        tile_size=self.tile_size, need_weights=need_weights)
            x, w = out if need_weights else (out, None)
            weights.append(w)
        return self.lm_head(self.norm(x)), weights  # (B, L, vocab_size)

    @torch.no_grad()
    def generate(self, prompt_ids, max_new_tokens: int, use_cache: bool = True, *,
                 cache_factory: Callable[[], object] = KVCache, temperature: float = 0.0, top_k: int | None = None,
                 generator: torch.Generator | None = None, attention: str = "naive", return_logits: bool = False,
                 kv_caches: Sequence | None = None):
        """Continue the prompt ``max_new_tokens`` times: greedy (temperature 0, the default) or sampled.

        With ``use_cache=True`` the prompt is run once, filling one cache per layer, and each later
        step runs only the newest token (its keys and values are appended). With ``use_cache=False``
        each step runs the whole sequence again -- the same tokens come out (tests/models/test_lm.py), only
        slower. The token is chosen by :func:`attn_lib.models.decoding.sample_next`: the argmax at
        temperature 0 (ties to the lowest id, ``torch.argmax``), else a draw from
        ``softmax(top_k_filter(logits / temperature, top_k))`` (HuggingFace's warpers, in HF's order).

        Args:
            prompt_ids: (B, P) or (P,) int64 tensor, or a list of ints, or a list of B lists of ints;
                every prompt has the same length P >= 1.
            max_new_tokens: int >= 0 with P + max_new_tokens <= max_len.
            use_cache: bool: keep a KV cache (default) or recompute everything each step.
            cache_factory: makes each layer's cache (default :class:`attn_lib.kv_cache.KVCache`;
                e.g. ``lambda: attn_lib.kv_cache.QuantizedKVCache(8)``).
            temperature: a number >= 0 (0 = greedy). top_k: None or an int >= 1 (sampling from the k
                likeliest tokens). generator: a ``torch.Generator`` for the draws (None: torch's global one).
            attention: ``"naive"`` or ``"tiled"``, as :meth:`forward`.
            return_logits: also return the logits each new token was chosen from.
            kv_caches: None (default: the caches are made with ``cache_factory`` and dropped), or your own
                empty caches, one per layer (``model.new_kv_caches()``): decoding fills them in place, so
                afterwards they hold the keys and values (after RoPE) of the prompt and of every new token but
                the last, P + max_new_tokens - 1 positions (none with max_new_tokens = 0; notebook 08 compares
                them with HuggingFace's cache).
                ``cache_factory`` is then not used.

        Returns:
            (B, P + max_new_tokens) int64 (or (P + max_new_tokens,) for a 1-D prompt): prompt then new tokens;
            with ``return_logits`` the pair (ids, step_logits (B, max_new_tokens, vocab_size) float).

        Raises:
            TypeError: a float or bool prompt; max_new_tokens or top_k not an int; use_cache not a bool;
                cache_factory not callable (None, or a cache instance); temperature not a number; kv_caches
                not a list or tuple of KV caches (:class:`attn_lib.kv_cache.KVCacheProtocol`).
            ValueError: ragged prompts, ids outside the vocabulary, max_new_tokens < 0 or
                P + max_new_tokens > max_len; temperature < 0, top_k < 1; an unknown ``attention``;
                kv_caches with ``use_cache=False``, not one per layer, one cache object for two layers, or not
                empty; a cache_factory that returns one cache object for two layers.
        """
        one_d = (isinstance(prompt_ids, torch.Tensor) and prompt_ids.dim() == 1) or (
            isinstance(prompt_ids, (list, tuple)) and not any(isinstance(p, (list, tuple)) for p in prompt_ids))
        if isinstance(prompt_ids, torch.Tensor):
            ids = check_token_ids("prompt_ids", prompt_ids[None] if one_d else prompt_ids, vocab_size=self.vocab_size,
                                  max_len=self.max_len)
        else:
            ids = check_prompts("prompt_ids", [list(prompt_ids)] if one_d else prompt_ids, self.vocab_size, ragged=False)
        check_max_new_tokens(max_new_tokens, prompt_len=ids.shape[1], max_len=self.max_len)
        check_bool("use_cache", use_cache)
        check_bool("return_logits", return_logits)
        check_sampling(temperature, top_k, generator)
        check_choice("attention", attention, ATTENTIONS)
        if kv_caches is not None:
            self._check_empty_caches(kv_caches, use_cache)
        ids = ids.to(self.embed.weight.device)
        caches = None if not use_cache else kv_caches if kv_caches is not None else self.new_kv_caches(cache_factory)
        step_logits = []

        def next_logits(new: torch.Tensor) -> torch.Tensor:
            if not use_cache:
                logits = self(torch.cat([ids, new], dim=1), attention=attention)[:, -1]  # the whole sequence again
            else:  # with a cache: the prompt at the first step, then only the newest token
                logits = self(ids if new.shape[1] == 0 else new[:, -1:], caches, attention=attention)[:, -1]
            step_logits.append(logits)
            return logits

        with _evaluating(self):  # dropout-free and without autograd; the caller's mode restored after
            new = sample_loop(next_logits, ids.shape[0], max_new_tokens, temperature=temperature, top_k=top_k,
                              generator=generator, device=ids.device)
        ids = torch.cat([ids, new], dim=1)
        out = ids[0] if one_d else ids
        if not return_logits:
            return out
        logits = (torch.stack(step_logits, dim=1) if step_logits
                  else torch.empty(ids.shape[0], 0, self.vocab_size, device=ids.device))
        return out, (logits[0] if one_d else logits)
