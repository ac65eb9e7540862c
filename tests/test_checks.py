"""attn_lib._checks: the one rule per argument, and the one style of error (TypeError = wrong type, ValueError =
wrong value, the message naming the argument, the value and what was expected)."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from attn_lib import _checks as C


@pytest.mark.parametrize("value,exc,words", [
    (True, TypeError, "n must be an int >= 1, got bool True"),
    (2.0, TypeError, "got float 2.0"),
    ("2", TypeError, "got str '2'"),
    (0, ValueError, "n must be an int >= 1, got 0"),
])
def test_check_int(value, exc, words):
    with pytest.raises(exc, match=words):
        C.check_int("n", value, minimum=1)
    assert C.check_int("n", 3, minimum=1, maximum=3) == 3


def test_check_bool_and_number_and_choice():
    with pytest.raises(TypeError, match="is_causal must be a bool .True or False., got str 'yes'"):
        C.check_bool("is_causal", "yes")
    with pytest.raises(TypeError, match="got int 1"):
        C.check_bool("is_causal", 1)
    with pytest.raises(ValueError, match="p must be a finite number"):
        C.check_number("p", math.nan)
    with pytest.raises(ValueError, match=r"p must be a number in \[0.0, 1.0\], got 2.0"):
        C.check_number("p", 2, minimum=0.0, maximum=1.0)
    assert C.check_number("p", None, allow_none=True) is None
    with pytest.raises(ValueError, match="align must be one of 'a', 'b', got 'c'"):
        C.check_choice("align", "c", ("a", "b"))
    with pytest.raises(TypeError, match="align must be one of 'a', 'b', got int 1"):
        C.check_choice("align", 1, ("a", "b"))


@given(st.lists(st.floats(allow_nan=True, allow_infinity=True, width=32), min_size=0, max_size=12))
def test_all_finite_agrees_with_isfinite(values):
    t = torch.tensor(values, dtype=torch.float32)
    assert C.all_finite(t) == bool(torch.isfinite(t).all())


def test_all_finite_when_the_sum_overflows():
    t = torch.full((4,), 3e38)  # finite values whose float32 sum is inf: the exact test decides
    assert C.all_finite(t)


def test_check_finite_names_what_and_where():
    t = torch.zeros(2, 3)
    t[1, 2] = math.nan
    with pytest.raises(ValueError, match=r"x contains NaN \(1 value\), first at index \(1, 2\) of shape \(2, 3\)"):
        C.check_finite("x", t)
    m = torch.zeros(2)
    m[0] = -math.inf
    assert C.check_finite("m", m, allow_neg_inf=True) is m
    with pytest.raises(ValueError, match="-inf"):
        C.check_finite("m", m)


def test_check_token_ids_one_rule():
    ids = torch.tensor([[1, 2, 3]], dtype=torch.int32)
    out = C.check_token_ids("ids", ids, vocab_size=4)
    assert out.dtype == torch.int64 and torch.equal(out, ids.long())
    for dtype in C.TOKEN_ID_DTYPES:
        C.check_token_ids("ids", ids.to(dtype), vocab_size=4)
    with pytest.raises(TypeError, match="ids must hold integer token ids"):
        C.check_token_ids("ids", ids.float(), vocab_size=4)
    with pytest.raises(TypeError, match="ids must be a .B, L. tensor of token ids, got list"):
        C.check_token_ids("ids", [[1, 2]], vocab_size=4)
    with pytest.raises(ValueError, match=r"ids must be \(B, L\) token ids with L >= 1, got shape \(1, 0\)"):
        C.check_token_ids("ids", torch.zeros(1, 0, dtype=torch.long), vocab_size=4)
    with pytest.raises(ValueError, match=r"holds ids \[4\] outside the vocabulary 0..3"):
        C.check_token_ids("ids", torch.tensor([[1, 4]]), vocab_size=4)
    with pytest.raises(ValueError, match="L=3 tokens, more than the model's max_len=2"):
        C.check_token_ids("ids", ids, vocab_size=4, max_len=2)


def test_check_padding_mask_one_rule():
    ints = torch.tensor([[1, 1, 0]])
    assert torch.equal(C.check_padding_mask("pm", ints), ints.bool())
    with pytest.raises(ValueError, match=r"only 0 \(padding\) and 1 \(real token\).*\[2\]"):
        C.check_padding_mask("pm", torch.tensor([[1, 2]]))
    with pytest.raises(TypeError, match="pm must be bool .True = real token. or 0/1 integers, got dtype torch.float32"):
        C.check_padding_mask("pm", ints.float())
    with pytest.raises(ValueError, match=r"pm must be \(B, S\).*got shape \(3,\)"):
        C.check_padding_mask("pm", torch.ones(3, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"pm must have shape \(B, S\) = \(2, 3\), got \(1, 3\)"):
        C.check_padding_mask("pm", ints, (2, 3))


def test_check_scale_and_rope_base_one_rule():
    assert C.check_scale(None, 16) == 0.25
    assert C.check_scale(2, 16) == 2.0
    for bad in (0, -1.0):
        with pytest.raises(ValueError, match="scale must be None or a finite number > 0"):
            C.check_scale(bad, 16)
    with pytest.raises(TypeError, match="scale must be a number"):
        C.check_scale("1", 16)
    assert C.check_rope_base(None) is None and C.check_rope_base(10000) == 10000.0
    with pytest.raises(ValueError, match="rope_base must be None or a finite number > 1"):
        C.check_rope_base(1.0)
    with pytest.raises(TypeError, match="rope_base must be a number, got NoneType None"):
        C.check_rope_base(None, allow_none=False)


def test_every_attention_function_follows_the_one_scale_rule():
    from attn_lib.attention import scaled_dot_product_attention
    from attn_lib.flash import flash_attention
    from attn_lib.gqa import grouped_query_attention
    from attn_lib.tiled import tiled_attention

    q = torch.randn(1, 2, 3, 4)
    for fn in (scaled_dot_product_attention, tiled_attention, grouped_query_attention, flash_attention):
        with pytest.raises(ValueError, match="scale must be None or a finite number > 0"):
            fn(q, q, q, scale=-1.0)


def test_the_modern_layers_refuse_at_construction_what_their_forward_would_refuse():
    """rope_base = 1 and scale = 0 used to pass the constructors of MLA, VariantAttention and the lightning indexer,
    and fail only at the first forward (RoPE, SDPA): one rule, applied when the argument is given."""
    from attn_lib.mla import MultiHeadLatentAttention
    from attn_lib.sparse import LightningIndexer
    from attn_lib.variants import VariantAttention

    mla = dict(d_model=16, num_heads=2, kv_lora_rank=8, qk_nope_head_dim=4, qk_rope_head_dim=2, v_head_dim=4)
    indexer = dict(d_model=16, q_lora_rank=8, num_heads=2, head_dim=8, rope_dim=4, topk=2)
    for build in (lambda **kw: MultiHeadLatentAttention(**mla, **kw), lambda **kw: VariantAttention(16, 2, 2, 8, **kw),
                  lambda **kw: LightningIndexer(**indexer, **kw)):
        with pytest.raises(ValueError, match="rope_base must be a finite number > 1"):
            build(rope_base=1.0)
        build(rope_base=500.0)  # a legal base still builds
    for build in (lambda **kw: MultiHeadLatentAttention(**mla, **kw), lambda **kw: VariantAttention(16, 2, 2, 8, **kw)):
        with pytest.raises(ValueError, match="scale must be None or a finite number > 0"):
            build(scale=0.0)


def test_every_byte_count_refuses_zero_bytes_per_element():
    from attn_lib.course.kv_table import PUBLISHED, cache_bytes
    from attn_lib.mla import mla_cache_bytes_per_token, mla_decode_cost
    from attn_lib.sparse import dsa_decode_cost
    from attn_lib.windows import local_global_cache_bytes

    calls = {
        "local_global_cache_bytes": lambda e: local_global_cache_bytes(
            64, num_layers=2, num_kv_heads=2, head_dim=8, window=16, local_per_global=5, bytes_per_element=e),
        "mla_cache_bytes_per_token": lambda e: mla_cache_bytes_per_token(2, 8, 4, bytes_per_element=e),
        "mla_decode_cost": lambda e: mla_decode_cost(64, num_heads=2, kv_lora_rank=8, qk_nope_head_dim=4,
                                                     qk_rope_head_dim=2, v_head_dim=4, bytes_per_element=e),
        "dsa_decode_cost": lambda e: dsa_decode_cost(4096, bytes_per_element=e),
        "cache_bytes": lambda e: cache_bytes(PUBLISHED[0], 1024, bytes_per_element=e),
    }
    for name, call in calls.items():
        assert call(2) is not None, name
        with pytest.raises(ValueError, match="bytes_per_element must be a number > 0, got 0.0"):
            call(0)
        with pytest.raises(TypeError, match="bytes_per_element must be a number"):
            call("2")


def test_check_heads_lists_the_divisors():
    assert C.check_heads(8, 2) == 4
    with pytest.raises(ValueError, match=r"possible values: \[1, 2, 3, 6\]"):
        C.check_heads(6, 4)
    with pytest.raises(TypeError, match="num_kv_heads must be an int"):
        C.check_heads(6, 2.0)


def test_check_qkv_zero_heads_and_gqa():
    z = torch.zeros(1, 0, 2, 4)
    C.check_qkv(z, z, z, enable_gqa=True)  # no heads at all: an empty problem, as torch's function
    with pytest.raises(ValueError, match="H=4 to be a multiple of the number of key/value heads Hkv=0"):
        C.check_qkv(torch.zeros(1, 4, 2, 4), z, z, enable_gqa=True)


def test_scores_overflow_error_names_the_scale():
    q = torch.full((1, 2), 1e20)
    err = C.scores_overflow_error(q, q, 0.5, torch.float32)
    assert isinstance(err, ValueError)
    assert "overflow torch.float32" in str(err) and "1e+20" in str(err) and "scale=0.5" in str(err)


def test_check_fits_dtype_on_device_and_claim_cache():
    C.check_fits_dtype("sinks", torch.tensor([1e38, -1e38], dtype=torch.float64), torch.float32)
    with pytest.raises(ValueError, match=r"sinks holds 1e\+39, more than torch.float32"):
        C.check_fits_dtype("sinks", torch.tensor([0.0, -1e39], dtype=torch.float64), torch.float32)
    C.check_fits_dtype("attn_mask", torch.tensor([0.0, -1e39], dtype=torch.float64), torch.float32,
                       allow_negative=True)  # a mask's -1e39 blocks, as -inf does
    C.check_on_device("mask", torch.zeros(1), torch.device("cpu"))
    with pytest.raises(ValueError, match="mask must be on the query's device cpu, got meta"):
        C.check_on_device("mask", torch.zeros(1, device="meta"), torch.device("cpu"))

    class Cache:
        seq_len = 0

    class Layer:
        pass

    cache, a, b = Cache(), Layer(), Layer()
    C.claim_cache(cache, a)
    C.claim_cache(cache, b)  # empty: a new layer may take it
    cache.seq_len = 3
    C.claim_cache(cache, b)
    with pytest.raises(ValueError, match="cache already holds the keys of another layer"):
        C.claim_cache(cache, a)
