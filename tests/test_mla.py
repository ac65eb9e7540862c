"""attn_lib.mla equals transformers' DeepseekV3Attention (and DeepseekV32's MLA), plain and absorbed, with its
latent cache; the cache-size and decode-cost formulas check out on their own terms (notebook 11, issue #25)."""

from __future__ import annotations

import pytest
import torch

from attn_lib.course.hf_equal import float64_reference, hf_cos_sin
from attn_lib.kv_cache import KVCache
from attn_lib.masks import causal_mask
from attn_lib.mla import MultiHeadLatentAttention, mla_cache_bytes_per_token, mla_decode_cost

TOL = {"rtol": 0, "atol": 1e-10}


def _hf_mla(q_lora_rank, interleave, theta=1000.0):
    from transformers import DeepseekV3Config
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3Attention

    torch.manual_seed(0)
    cfg = DeepseekV3Config(hidden_size=32, num_attention_heads=4, num_key_value_heads=4, q_lora_rank=q_lora_rank,
                           kv_lora_rank=16, qk_nope_head_dim=8, qk_rope_head_dim=4, v_head_dim=6, rope_theta=theta,
                           rope_interleave=interleave, num_hidden_layers=1, attn_implementation="eager")
    m = DeepseekV3Attention(cfg, 0).double().eval()
    with torch.no_grad():
        for p in m.parameters():
            p.normal_(0, 0.3)  # norms too: a weight of ones would hide a missing norm weight
    return m


def _reference(m, x, ref64=True):
    B, L, _ = x.shape
    cos, sin = hf_cos_sin(torch.arange(L), 4, base=1000.0, batch=B)
    mask = torch.zeros(B, 1, L, L, dtype=x.dtype).masked_fill(~causal_mask(L), torch.finfo(x.dtype).min)
    with torch.no_grad():
        if ref64:
            with float64_reference():
                return m(x, (cos, sin), mask)[0]
        return m(x, (cos, sin), mask)[0]


@pytest.mark.parametrize("q_lora_rank, interleave", [(12, True), (None, True), (12, False)])
def test_mla_equals_deepseek_v3_plain_absorbed_and_cached(q_lora_rank, interleave):
    m = _hf_mla(q_lora_rank, interleave)
    x = torch.randn(2, 7, 32, dtype=torch.float64)
    ref = _reference(m, x)
    ours = MultiHeadLatentAttention.from_hf(m)
    assert ours.q_lora_rank == q_lora_rank and ours.rope_interleave == interleave
    with torch.no_grad():
        torch.testing.assert_close(ours(x), ref, **TOL)
        torch.testing.assert_close(ours(x, absorbed=True), ref, **TOL)
        cache = KVCache()
        steps = [ours(x[:, :3], cache=cache)] + [ours(x[:, i:i + 1], cache=cache, absorbed=True) for i in range(3, 7)]
        torch.testing.assert_close(torch.cat(steps, 1), ref, **TOL)
        # without float64_reference transformers' float32 softmax/RMSNorm agree only to float32's precision
        torch.testing.assert_close(ours(x), _reference(m, x, ref64=False), rtol=1e-5, atol=1e-6)
        # the comparison can fail: another rope convention gives another result
        ours.rope_interleave = not interleave
        assert (ours(x) - ref).abs().max() > 1e-6
    # the latent cache: c_KV (r = 16) and k_R (dr = 4) per token, one "head", nothing per query head
    assert cache.keys.shape == (2, 1, 7, 16) and cache.values.shape == (2, 1, 7, 4)
    assert cache.nbytes() == 2 * 7 * (16 + 4) * 8 == 2 * mla_cache_bytes_per_token(1, 16, 4, bytes_per_element=8) * 7


@pytest.mark.parametrize("flag", [None, False])
def test_mla_equals_deepseek_v32_attention_with_the_indexer_keeping_every_key(flag):
    """DeepseekV32Attention = MLA + a top-k indexer; with index_topk >= the sequence every key is kept. Its forward
    interleaves RoPE whatever config.rope_interleave says (flag=False: a config that says otherwise, issue 35)."""
    from transformers import DeepseekV32Config
    from transformers.models.deepseek_v32.modeling_deepseek_v32 import DeepseekV32Attention

    torch.manual_seed(1)
    extra = {} if flag is None else {"rope_interleave": flag}
    cfg = DeepseekV32Config(hidden_size=32, num_attention_heads=4, num_key_value_heads=4, q_lora_rank=12,
                            kv_lora_rank=16, qk_nope_head_dim=8, qk_rope_head_dim=4, v_head_dim=6, rope_theta=1000.0,
                            index_n_heads=2, index_head_dim=8, index_topk=64, num_hidden_layers=1,
                            attn_implementation="eager", **extra)
    assert getattr(cfg, "rope_interleave", True) is (True if flag is None else flag)
    m = DeepseekV32Attention(cfg, 0).double().eval()
    with torch.no_grad():
        for p in m.parameters():
            p.normal_(0, 0.3)
    x = torch.randn(2, 6, 32, dtype=torch.float64)
    ref = _reference(m, x)
    ours = MultiHeadLatentAttention.from_hf(m)
    assert ours.rope_interleave
    with torch.no_grad():
        torch.testing.assert_close(ours(x), ref, **TOL)
        cache = KVCache()  # decoding through the latent cache, token by token after a 2-token prompt, absorbed
        steps = [ours(x[:, :2], cache=cache)] + [ours(x[:, i:i + 1], cache=cache, absorbed=True) for i in range(2, 6)]
        torch.testing.assert_close(torch.cat(steps, 1), ref, **TOL)


def test_absorbed_equals_plain_on_random_weights_and_refuses_bad_input():
    torch.manual_seed(2)
    mla = MultiHeadLatentAttention(24, 3, kv_lora_rank=10, qk_nope_head_dim=6, qk_rope_head_dim=4, v_head_dim=5,
                                   q_lora_rank=8, dtype=torch.float64)
    x = torch.randn(1, 9, 24, dtype=torch.float64)
    torch.testing.assert_close(mla(x, absorbed=True), mla(x), **TOL)
    with pytest.raises(ValueError, match="d_model=24"):
        mla(torch.randn(1, 3, 20, dtype=torch.float64))
    with pytest.raises(TypeError, match="absorbed"):
        mla(x, absorbed=1)
    with pytest.raises(ValueError, match="qk_rope_head_dim must be even"):
        MultiHeadLatentAttention(8, 2, kv_lora_rank=4, qk_nope_head_dim=2, qk_rope_head_dim=3, v_head_dim=2)
    with pytest.raises(TypeError, match="DeepseekV3Attention"):
        MultiHeadLatentAttention.from_hf(torch.nn.Linear(2, 2))


def test_cache_bytes_and_decode_cost_formulas():
    # DeepSeek-V3: 61 layers, r 512, dr 64, bf16 -> 61 * 576 * 2 bytes
    assert mla_cache_bytes_per_token(61, 512, 64) == 70272
    # the same model as MHA would cache 128 keys of 128 + 64 and 128 values of 128 per layer: 71x more
    from attn_lib.course.exercises.concepts import QUESTIONS, questions_for

    questions_for(11)
    mha = 61 * 128 * (128 + 64 + 128) * 2
    assert mha / 70272 == pytest.approx(QUESTIONS["11.mla_vs_mha"].answer, abs=0.05)
    cost = mla_decode_cost(4096, num_heads=128, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64,
                           v_head_dim=128)
    # absorbed: no per-step expansion of the cache (2*S*r*H*(dn+dv) = 2*4096*512*128*256), but more attention work
    assert cost["expand"]["flops"] - cost["absorbed"]["flops"] > 2 * 4096 * 512 * 128 * 256 * 0.9
    attn_plain, attn_absorbed = 2 * 4096 * 128 * (192 + 128), 2 * 4096 * 128 * (576 + 512)
    assert attn_absorbed > 3 * attn_plain
    assert cost["absorbed"]["bytes"] == 4096 * 576 * 2 < cost["expand"]["bytes"]
    with pytest.raises(ValueError, match="seq_len"):
        mla_decode_cost(0, num_heads=1, kv_lora_rank=1, qk_nope_head_dim=1, qk_rope_head_dim=2, v_head_dim=1)


# ----------------------------------------------------------------------------------------------
# issue 38: empty inputs, dtypes, one cache per layer
# ----------------------------------------------------------------------------------------------
def _small_mla(**kw):
    torch.manual_seed(0)
    return MultiHeadLatentAttention(16, 2, kv_lora_rank=8, qk_nope_head_dim=4, qk_rope_head_dim=4, v_head_dim=4, **kw)


@pytest.mark.parametrize("B,L", [(2, 0), (0, 5)])
@pytest.mark.parametrize("absorbed", [False, True])
def test_mla_empty_input_gives_an_empty_output_and_leaves_the_cache(B, L, absorbed):
    m, cache = _small_mla(), KVCache()
    out = m(torch.randn(B, L, 16), cache=cache, absorbed=absorbed)
    assert out.shape == (B, L, 16) and cache.seq_len == 0


@pytest.mark.parametrize("kwargs,exc,words", [
    (dict(dtype=torch.int64), ValueError, "dtype must be a floating dtype"),
    (dict(dtype="int8"), ValueError, "dtype must name a floating dtype"),
    (dict(eps=float("nan")), ValueError, "eps must be a finite number"),
    (dict(eps=0.0), ValueError, "eps must be a number > 0"),
])
def test_mla_refuses_bad_dtype_and_eps(kwargs, exc, words):
    with pytest.raises(exc, match=words):
        _small_mla(**kwargs)


def test_mla_refuses_x_of_another_dtype_and_a_cache_of_another_layer():
    m = _small_mla()
    with pytest.raises(TypeError, match="x must have the layer's dtype torch.float32, got torch.float64"):
        m(torch.randn(1, 3, 16, dtype=torch.float64))
    cache = KVCache()
    m(torch.randn(1, 3, 16), cache=cache)
    with pytest.raises(ValueError, match="already holds the keys of another layer"):
        _small_mla()(torch.randn(1, 1, 16), cache=cache)
    assert cache.seq_len == 3
    m(torch.randn(1, 1, 16), cache=cache)  # its own layer goes on
    assert cache.seq_len == 4


def test_mla_decode_cost_refuses_zero_bytes_as_its_docstring_says():
    assert "<= 0" in mla_decode_cost.__doc__ and "0 is accepted" not in mla_decode_cost.__doc__
    with pytest.raises(ValueError, match="bytes_per_element must be a number > 0, got 0.0"):
        mla_decode_cost(4, num_heads=2, kv_lora_rank=8, qk_nope_head_dim=4, qk_rope_head_dim=4, v_head_dim=4,
                        bytes_per_element=0)


def test_rms_norm_from_hf_refuses_a_module_with_a_2d_weight():
    from attn_lib.mla import rms_norm_from_hf
    with pytest.raises(TypeError, match="RMSNorm with a 1-D weight"):  # was torch's broadcast RuntimeError
        rms_norm_from_hf(torch.nn.Linear(2, 2))
