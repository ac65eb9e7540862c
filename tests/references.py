"""Helpers several test files share: tiny random HuggingFace models (no download) and their tolerances."""

from __future__ import annotations

import math

import pytest
import torch

F = torch.nn.functional

#: HF's LlamaRotaryEmbedding computes cos/sin in float32 even in a float64 model (autocast off, then
#: cast), so float64 results agree to float32's precision of the angles (~1e-9 abs measured), not 1e-12.
HF_ROPE_TOL = {"rtol": 1e-6, "atol": 1e-7}


def capture(model, modules):
    """Run hooks that record (input hidden_states, output) of each module."""
    seen = {}

    def hook(i):
        def f(mod, args, kwargs, out):
            x = args[0] if args else kwargs["hidden_states"]
            seen[i] = (x.detach(), (out[0] if isinstance(out, tuple) else out).detach())
        return f

    handles = [m.register_forward_hook(hook(i), with_kwargs=True) for i, m in enumerate(modules)]
    return seen, handles


def tiny_llama(head_dim=None, num_kv_heads=2, theta=500.0, bias=False):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=61, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=num_kv_heads, head_dim=head_dim,
                      rope_theta=theta, attention_bias=bias, bos_token_id=None, eos_token_id=None,
                      pad_token_id=None, attn_implementation="eager")
    return LlamaForCausalLM(cfg).double().eval()


def sdpa_reference(q, k, v, *, attn_mask=None, is_causal=False, causal_align="top_left", enable_gqa=False,
               alibi_slopes=None):
    """torch's SDPA in float64 with every option folded into one float mask (attn_lib.masks), ALiBi computed from the
    slopes; rows that see no key give 0 (torch gives NaN there). The reference of tests/test_tiled.py and test_flash.py."""
    from attn_lib.masks import causal_mask

    q, k, v = q.double(), k.double(), v.double()
    L, S = q.shape[-2], k.shape[-2]
    bias = torch.zeros(L, S, dtype=torch.float64)
    if alibi_slopes is not None:
        dist = (torch.arange(L)[:, None] + S - L - torch.arange(S)[None, :]).abs().double()
        bias = -alibi_slopes.double()[:, None, None] * dist  # (H, L, S): what the kernel must compute in registers
    allowed = torch.ones(L, S, dtype=torch.bool)
    if is_causal:
        allowed = allowed & causal_mask(L, S, align=causal_align)
    if attn_mask is not None:
        allowed = allowed & attn_mask
    full = torch.where(allowed, bias, -math.inf)
    empty = ~allowed.expand(full.shape).any(-1, keepdim=True)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=full.masked_fill(empty, 0.0), enable_gqa=enable_gqa)
    return out.masked_fill(empty, 0.0)


def window_reference(q, k, v, *, window_size=(-1, -1), softcap=None, sinks=None, attn_mask=None, is_causal=False,
                     causal_align="top_left", enable_gqa=False):
    """Float64 torch SDPA with every option folded into one explicit float mask; (output, lse).

    The logits l = softcap(scale q k^T) are built explicitly (soft-capping is a function of the score, not a mask),
    with -inf outside the window / causal / bool mask, and passed to SDPA as its float mask with a zero query
    (SDPA then computes softmax(0 + mask) V). A sink is one more key column whose mask entry is sinks[h] and whose
    value is 0. Rows that see no key give 0 and lse -inf. Differentiable in q, k, v and sinks.
    """
    from attn_lib.masks import causal_mask

    q, k, v = q.double(), k.double(), v.double()
    L, S = q.shape[-2], k.shape[-2]
    if enable_gqa:
        g = q.shape[-3] // k.shape[-3]
        k, v = k.repeat_interleave(g, -3), v.repeat_interleave(g, -3)
    logits = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (..., H, L, S)
    if softcap:
        logits = softcap * torch.tanh(logits / softcap)
    pos = torch.arange(L)[:, None] + S - L  # query r at position r + S - L (flash-attn's window, bottom-right)
    col = torch.arange(S)[None, :]
    allowed = torch.ones(L, S, dtype=torch.bool)
    if window_size[0] >= 0:
        allowed = allowed & (col >= pos - window_size[0])
    if window_size[1] >= 0:
        allowed = allowed & (col <= pos + window_size[1])
    if is_causal:
        allowed = allowed & causal_mask(L, S, align=causal_align)
    if attn_mask is not None:
        allowed = allowed & attn_mask
    logits = logits.masked_fill(~allowed, -math.inf)
    if sinks is not None:  # one more key: logit sinks[h], value 0
        sink_col = sinks.double()[:, None, None].expand(*logits.shape[:-1], 1)
        logits = torch.cat([logits, sink_col], dim=-1)
        v = torch.cat([v, torch.zeros(*v.shape[:-2], 1, v.shape[-1], dtype=v.dtype)], dim=-2)
    empty = (logits == -math.inf).all(-1, keepdim=True)
    mask = logits.masked_fill(empty, 0.0)
    zero_q = torch.zeros(*logits.shape[:-1], 1, dtype=torch.float64)  # scale * 0 . k = 0: the mask is the logit
    key = torch.zeros(*logits.shape[:-2], logits.shape[-1], 1, dtype=torch.float64)
    out = F.scaled_dot_product_attention(zero_q, key, v.expand(*logits.shape[:-2], *v.shape[-2:]), attn_mask=mask)
    lse = torch.logsumexp(mask, -1).masked_fill(empty[..., 0], -math.inf)
    return out.masked_fill(empty, 0.0), lse


def _flex(q, k, v, *, window_size=(-1, -1), softcap=None, sinks=None, lengths=None, enable_gqa=False):
    """FlexAttention (eager, CPU): the window as a mask_mod, soft-capping as a score_mod, the sink from its lse.

    With a sink z: out_sink = sum e^s v / (sum e^s + e^z) = out / (1 + e^{z - lse}), lse_sink = logaddexp(lse, z).
    """
    import warnings

    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    B, H, L, _ = q.shape
    S = k.shape[-2]
    left, right = window_size

    def mask_mod(b, h, q_idx, kv_idx):
        pos = q_idx + (S - L)
        keep = kv_idx < lengths[b] if lengths is not None else kv_idx >= 0
        if left >= 0:
            keep = keep & (kv_idx >= pos - left)
        if right >= 0:
            keep = keep & (kv_idx <= pos + right)
        return keep

    def score_mod(score, b, h, q_idx, kv_idx):
        return softcap * torch.tanh(score / softcap)

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="flex_attention called without torch.compile")
        block_mask = create_block_mask(mask_mod, B, H, L, S, device="cpu")
        out, lse = flex_attention(q, k, v, score_mod=score_mod if softcap else None, block_mask=block_mask,
                                  enable_gqa=enable_gqa, return_lse=True)
    if sinks is not None:
        z = sinks[:, None].to(lse.dtype)
        out = out / (1 + torch.exp(z - lse))[..., None]
        lse = torch.logaddexp(lse, z.expand_as(lse))
    return out, lse


# the date task's small encoder-decoder and one validation batch (tests/models/test_seq2seq.py, tests/course/test_train.py)
@pytest.fixture(scope="module")
def model():
    from attn_lib.course.data import SOURCE_VOCAB, TARGET_VOCAB
    from attn_lib.models import Seq2SeqTransformer

    torch.manual_seed(0)
    return Seq2SeqTransformer(len(SOURCE_VOCAB), len(TARGET_VOCAB), d_model=32, num_heads=4, d_ff=64).eval()


@pytest.fixture(scope="module")
def batch():
    from attn_lib.course.data import collate, load_splits

    return collate(load_splits()["val"][:8])
