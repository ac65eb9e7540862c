"""How notebook 11 proves its from-scratch attention variants equal to transformers' own modules.

The recipe, for each variant: build a tiny random model from a transformers config (no download), run it once to
capture the mask its attention layers receive (:func:`captured_attention_masks`), then feed one attention module
and attn_lib's copy of it (``SomeClass.from_hf(module)``) the same hidden states and the same RoPE angles
(:func:`hf_cos_sin`, computed in float64 by :func:`attn_lib.positional.rope_cos_sin`) and compare in float64.

transformers computes three things in float32 even inside a float64 model: the softmax of its eager attention
(``softmax(..., dtype=torch.float32)``), its RMSNorms (``hidden_states.to(torch.float32)``) and DeepSeek-V3.2's
indexer scores (``q.float()``, ``weights_proj(...).float()`` in ``DeepseekV32Indexer``). A float64 comparison would
then only agree to float32's precision (~1e-7). :func:`float64_reference` lifts exactly those casts while the
reference runs, so that the comparison can be made at 1e-10; the tests also compare without it, at float32's
tolerance, to show that it changes nothing else.
"""

from __future__ import annotations

import contextlib
import sys

import torch
import torch.nn.functional as F

from attn_lib._checks import check_bool, check_int, check_number, check_tensor
from attn_lib.positional import rope_cos_sin

__all__ = ["float64_reference", "deepseek_v4_float64", "captured_attention_masks", "hf_cos_sin", "max_abs_diff"]


def _rms64(self, x):
    """A transformers RMSNorm's forward in the input's dtype (its three formulas)."""
    eps = getattr(self, "variance_epsilon", getattr(self, "eps", 1e-6))
    normed = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    name = type(self).__name__
    weight = getattr(self, "weight", None)
    if weight is None or (name.startswith("Gemma3n") and not getattr(self, "with_scale", True)):
        return normed
    if name.startswith(("Gemma2", "Gemma3RMS", "GemmaRMS", "Qwen3NextRMSNorm", "Qwen3_5RMSNorm")):
        return normed * (1.0 + weight)  # Gemma and Qwen3-Next store w - 1: the norm multiplies by 1 + w
    return normed * weight


@contextlib.contextmanager
def float64_reference():
    """While active, transformers' eager softmax, RMSNorms and ``.float()`` casts keep a float64 input in float64.

    Patches ``torch.nn.functional.softmax`` (a ``dtype=torch.float32`` request on a float64 input is dropped), the
    ``forward`` of every ``*RMSNorm`` class of the loaded ``transformers.models.*`` modules (the same formula, in the
    input dtype) and ``torch.Tensor.float`` (a float64 tensor is returned as it is; every other dtype is converted as
    usual). Everything is restored on exit, also after an error. Not thread-safe; for tests and notebooks.

    Takes and returns no tensors (``with float64_reference(): ...``); inside it, float64 tensors stay float64
    where transformers asks for float32, and float16 / bfloat16 / float32 ones are converted as usual.

    Raises:
        nothing of its own: it patches and restores; an error raised inside the ``with`` block propagates
        after everything is restored.

    Source: the course's own; it lifts the float32 casts of transformers' eager attention (``softmax(...,
    dtype=torch.float32)``), its ``*RMSNorm`` forwards and DeepSeek-V3.2's indexer (``.float()``).
    """
    softmax = F.softmax
    to_float = torch.Tensor.float
    had_float = "float" in torch.Tensor.__dict__

    def float64_stays(self, *args, **kwargs):
        return self if self.dtype == torch.float64 else to_float(self, *args, **kwargs)

    def softmax64(input, dim=None, _stacklevel=3, dtype=None):
        if dtype == torch.float32 and input.dtype == torch.float64:
            dtype = None
        return softmax(input, dim=dim, dtype=dtype)

    patched = []
    for name, mod in list(sys.modules.items()):
        if not name.startswith("transformers.models.") or ".modeling_" not in name:
            continue
        for attr, cls in list(vars(mod).items()):
            if isinstance(cls, type) and attr.endswith("RMSNorm") and cls.__module__ == name:
                patched.append((cls, cls.__dict__.get("forward")))
                cls.forward = _rms64
    F.softmax = softmax64
    torch.Tensor.float = float64_stays
    try:
        yield
    finally:
        F.softmax = softmax
        if had_float:
            torch.Tensor.float = to_float
        else:
            del torch.Tensor.float
        for cls, forward in patched:
            if forward is None:
                del cls.forward
            else:
                cls.forward = forward


@contextlib.contextmanager
def deepseek_v4_float64():
    """:func:`float64_reference`, plus the two float32 steps of transformers' DeepSeek-V4 that it does not lift.

    Also patches ``torch.Tensor.softmax`` (the compressors' ``gate.softmax(dim=2, dtype=torch.float32)``: the request
    is dropped for a float64 input) and ``DeepseekV4RotaryEmbedding.forward`` (its angles, float32 position times
    float32 inverse frequency, recomputed in float64 from the config's ``rope_theta`` and
    ``partial_rotary_factor`` of the layer type; default RoPE only). Everything is restored on exit.

    Takes and returns no tensors (``with deepseek_v4_float64(): ...``).

    Raises:
        nothing of its own; an error inside the block propagates after everything is restored.

    Source: the course's own (notebook 13); the float32 steps read in transformers' ``modeling_deepseek_v4``.
    """
    from transformers.models.deepseek_v4 import modeling_deepseek_v4 as v4

    softmax, rotary = torch.Tensor.softmax, v4.DeepseekV4RotaryEmbedding.forward
    had_softmax = "softmax" in torch.Tensor.__dict__  # else inherited from the C base: restore by deleting ours

    def softmax64(self, *args, dtype=None, **kwargs):
        if dtype == torch.float32 and self.dtype == torch.float64:
            dtype = None
        return softmax(self, *args, dtype=dtype, **kwargs)

    def rotary64(self, x, position_ids, layer_type=None):
        rope = self.config.rope_parameters[layer_type]
        dim = int(self.config.head_dim * rope.get("partial_rotary_factor", 1.0))
        inv_freq = rope["rope_theta"] ** (-torch.arange(0, dim, 2, dtype=torch.float64) / dim)
        angles = position_ids[..., None].to(torch.float64) * inv_freq.to(position_ids.device)
        return angles.cos().to(x.dtype), angles.sin().to(x.dtype)

    torch.Tensor.softmax, v4.DeepseekV4RotaryEmbedding.forward = softmax64, rotary64
    try:
        with float64_reference():
            yield
    finally:
        v4.DeepseekV4RotaryEmbedding.forward = rotary
        if had_softmax:
            torch.Tensor.softmax = softmax
        else:
            del torch.Tensor.softmax


def captured_attention_masks(model: torch.nn.Module, input_ids: torch.Tensor) -> dict[int, torch.Tensor | None]:
    """Run ``model(input_ids)`` once and return the ``attention_mask`` each attention layer received, by layer index.

    Args:
        model: a transformers ``*ForCausalLM`` whose attention modules carry ``layer_idx`` (all of notebook 11's).
        input_ids: (B, L) int64.

    Returns:
        {layer_idx: the mask as passed (for eager attention a float (B, 1, T, T) tensor, 0 = keep, a large
        negative = blocked; or None)}.

    Raises:
        TypeError: input_ids is not a tensor, or holds floating values. ValueError: input_ids is not 2-D; the
            model has no attention module with a ``layer_idx``. What ``model(input_ids)`` raises propagates (ids
            outside the vocabulary: IndexError), after the hooks are removed.

    Source: the course's own (forward pre-hooks, torch's ``register_forward_pre_hook``); the masks are the ones
    transformers' mask functions build for each layer (causal, sliding-window).
    """
    check_tensor("input_ids", input_ids, ndim=2)
    if input_ids.is_floating_point():
        raise TypeError(f"input_ids must hold integer token ids, got dtype {input_ids.dtype}")
    seen: dict[int, torch.Tensor | None] = {}
    handles = []
    for module in model.modules():
        if type(module).__name__.endswith("Attention") and hasattr(module, "layer_idx"):
            def hook(mod, args, kwargs):
                seen[mod.layer_idx] = kwargs.get("attention_mask", args[2] if len(args) > 2 else None)
            handles.append(module.register_forward_pre_hook(hook, with_kwargs=True))
    if not handles:
        raise ValueError(f"{type(model).__name__} has no attention module with a layer_idx to capture")
    try:
        with torch.no_grad():
            model(input_ids)
    finally:
        for h in handles:
            h.remove()
    return seen


def hf_cos_sin(positions: torch.Tensor, dim: int, *, base: float, batch: int = 1, half: bool = False,
               dtype: torch.dtype = torch.float64) -> tuple[torch.Tensor, torch.Tensor]:
    """transformers' ``position_embeddings`` (cos, sin) for the default RoPE, computed in float64 by attn_lib.

    Args:
        positions: (L,) integer positions.
        dim: the rotated dimension (head_dim; DeepSeek's qk_rope_head_dim), even.
        base: rope_theta. batch: B. half: gpt-oss's layout, (B, L, dim/2); else (B, L, dim) = cat(angles, angles).

        dtype: the floating dtype of the result (default float64), or its name.

    Returns:
        (cos, sin), each (B, L, dim) or (B, L, dim/2) in ``dtype``: expanded views over B, not copies.

    Raises:
        TypeError: batch not an int, half not a bool, base not a number; and as
            :func:`attn_lib.positional.rope_cos_sin` (positions not integers, dtype not a dtype).
        ValueError: batch < 1; base NaN, infinite or <= 1; and as rope_cos_sin (dim not a positive even int,
            an integer dtype).

    Source: transformers' default RoPE (``LlamaRotaryEmbedding``: ``emb = cat(freqs, freqs)``; gpt-oss keeps the
    half), Su et al. 2021 (RoFormer).
    """
    check_int("batch", batch, minimum=1)
    check_bool("half", half)
    check_number("base", base, minimum=1.0)
    cos, sin = rope_cos_sin(positions, dim, base=base, dtype=dtype)  # (L, dim/2)
    if not half:
        cos, sin = torch.cat((cos, cos), -1), torch.cat((sin, sin), -1)
    return cos.expand(batch, *cos.shape), sin.expand(batch, *sin.shape)


def max_abs_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    """``float((a - b).abs().max())``, refusing shapes that differ (a broadcast would hide a bug).

    Args:
        a, b: tensors of one shape, any (e.g. the outputs (B, L, d_model) of two implementations), at least one
            element. Floating or integer dtypes; different dtypes are promoted by torch (float32 vs float64
            is compared in float64).

    Returns:
        a Python float, the largest absolute difference.

    Raises:
        TypeError: not tensors. ValueError: the shapes differ.
        Not checked: empty tensors and bool tensors (torch's RuntimeError).

    Source: the course's own (the comparison of every test against transformers).
    """
    check_tensor("a", a)
    check_tensor("b", b)
    if a.shape != b.shape:
        raise ValueError(f"a and b must have one shape, got {tuple(a.shape)} and {tuple(b.shape)}")
    return float((a - b).abs().max())
