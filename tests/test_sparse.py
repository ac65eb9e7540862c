"""attn_lib.sparse equals transformers' DeepseekV32Indexer (scores, top-k) and DeepseekV32Attention (the whole DSA
layer, gathered and masked) in float64; dsa_decode_cost matches a hand count (notebook 11, issue #25)."""

from __future__ import annotations

import pytest
import torch

from attn_lib.course.hf_equal import float64_reference, hf_cos_sin, max_abs_diff
from attn_lib.masks import causal_mask
from attn_lib.mla import MultiHeadLatentAttention
from attn_lib.sparse import LightningIndexer, SparseLatentAttention, dsa_decode_cost

TOL = {"rtol": 0, "atol": 1e-10}
B, L, TOPK = 2, 12, 4


@pytest.fixture(scope="module")
def hf_dsa():
    from transformers import DeepseekV32Config
    from transformers.models.deepseek_v32.modeling_deepseek_v32 import DeepseekV32Attention

    torch.manual_seed(0)
    cfg = DeepseekV32Config(hidden_size=32, num_attention_heads=4, num_key_value_heads=4, q_lora_rank=12,
                            kv_lora_rank=16, qk_nope_head_dim=8, qk_rope_head_dim=4, v_head_dim=6, rope_theta=1000.0,
                            index_n_heads=8, index_head_dim=8, index_topk=TOPK, num_hidden_layers=1,
                            attn_implementation="eager")
    m = DeepseekV32Attention(cfg, 0).double().eval()
    with torch.no_grad():
        for p in m.parameters():
            p.normal_(0, 0.3)  # norms too: weights of ones and a zero bias would hide a missing one
    x = torch.randn(B, L, 32, dtype=torch.float64)
    cos, sin = hf_cos_sin(torch.arange(L), 4, base=1000.0, batch=B)
    mask = torch.zeros(B, 1, L, L, dtype=torch.float64).masked_fill(~causal_mask(L), torch.finfo(torch.float64).min)
    return m, x, (cos, sin), mask


def _hf_indexer(m, x, rope, mask, monkeypatch, ref64=True):
    """transformers' top-k indices, and the index scores it hands to ``topk`` (captured: it returns only indices)."""
    seen = {}
    topk = torch.Tensor.topk

    def spy(self, *args, **kwargs):
        seen["scores"] = self
        return topk(self, *args, **kwargs)

    with torch.no_grad(), monkeypatch.context() as mp:
        mp.setattr(torch.Tensor, "topk", spy)
        q_resid = m.q_a_layernorm(m.q_a_proj(x))
        if ref64:
            with float64_reference():
                q_resid = m.q_a_layernorm(m.q_a_proj(x))
                idx = m.indexer(x, q_resid, rope, mask[:, 0], None)
        else:
            idx = m.indexer(x, q_resid, rope, mask[:, 0], None)
    return q_resid, idx.long(), seen["scores"]


def _chosen(idx):
    """bool (B, L, S): the keys transformers' indices pick, causal ones only (a row with fewer than k causal keys
    also "picks" blocked future keys, which its attention mask blocks anyway)."""
    return torch.zeros(B, L, L, dtype=torch.bool).scatter(-1, idx, True) & causal_mask(L)


def test_indexer_scores_and_topk_equal_deepseek_v32_indexer(hf_dsa, monkeypatch):
    m, x, rope, mask = hf_dsa
    q_resid, idx, hf_scores = _hf_indexer(m, x, rope, mask, monkeypatch)
    assert hf_scores.dtype == torch.float64  # the lift worked: transformers' .float() kept float64
    ours = LightningIndexer.from_hf(m.indexer)
    with torch.no_grad():
        scores = ours.scores(x, q_resid)
    causal = causal_mask(L).expand(B, L, L)
    torch.testing.assert_close(scores[causal], hf_scores[causal], **TOL)
    assert (scores[~causal] == float("-inf")).all() and (hf_scores[~causal] < -1e300).all()
    # the top-k is determined: where a row has more than k causal keys, its k-th and (k+1)-th scores differ
    top = scores.sort(-1, descending=True).values
    gap = (top[:, TOPK:, TOPK - 1] - top[:, TOPK:, TOPK]).min()
    assert gap > 1e-4
    chosen = ours.selected_mask(scores)
    assert torch.equal(chosen, _chosen(idx))
    # each query keeps min(k, its causal keys): 1, 2, 3, 4, 4, ... -- so rows 4.. drop keys
    assert chosen.sum(-1).tolist() == [[min(TOPK, t + 1) for t in range(L)]] * B
    # without float64_reference transformers scores in float32 (then adds the float64 mask): equal only to
    # float32's precision, same top-k
    q32, idx32, s32 = _hf_indexer(m, x, rope, mask, monkeypatch, ref64=False)
    assert 1e-10 < max_abs_diff(scores[causal].float(), s32[causal]) < 1e-5
    assert torch.equal(_chosen(idx32), chosen)


def test_sparse_attention_equals_deepseek_v32_attention(hf_dsa):
    m, x, rope, mask = hf_dsa
    with torch.no_grad(), float64_reference():
        ref = m(x, rope, mask)[0]
    ours = SparseLatentAttention.from_hf(m)
    assert ours.indexer.topk == TOPK and ours.q_lora_rank == 12
    with torch.no_grad():
        torch.testing.assert_close(ours(x), ref, **TOL)  # the k gathered latents per query, absorbed
        torch.testing.assert_close(ours(x, gather=False), ref, **TOL)  # dense MLA, the unchosen keys masked
        # the selection matters: dense MLA over every causal key is another result
        assert max_abs_diff(MultiHeadLatentAttention.from_hf(m)(x), ref) > 1e-3
        # and with k >= L, DSA is dense MLA
        ours.indexer.topk = L
        torch.testing.assert_close(ours(x), MultiHeadLatentAttention.from_hf(m)(x), **TOL)


def test_dsa_decode_cost_by_hand_and_bad_input():
    # DeepSeek-V3.2 at S = 65536: H 128, r 512, dr 64, d 7168, r_q 1536, H_I 64, d_I 128, k 2048
    c = dsa_decode_cost(65536)
    assert c["dense"]["flops"] == 2 * 65536 * 128 * 576 + 2 * 65536 * 128 * 512 == 18_253_611_008
    assert c["dense"]["bytes"] == 65536 * 576 * 2 == 75_497_472
    indexer = 2 * 1536 * 64 * 128 + 2 * 7168 * 128 + 2 * 7168 * 64 + 2 * 65536 * 64 * 128 + 2 * 65536 * 64
    assert c["sparse"]["indexer_flops"] == indexer == 1_110_048_768
    assert c["sparse"]["attention_flops"] == 2 * 2048 * 128 * 1088 == 570_425_344
    assert c["sparse"]["bytes"] == 65536 * 128 * 1 + 2048 * 576 * 2 == 10_747_904
    assert 10.8 < c["dense"]["flops"] / c["sparse"]["flops"] < 11.0  # 18.25 / 1.680 GFLOP
    # below k tokens DSA attends to every key: its attention is the dense count, the indexer only adds
    small = dsa_decode_cost(1024)
    assert small["sparse"]["attention_flops"] == small["dense"]["flops"] < small["sparse"]["flops"]
    with pytest.raises(ValueError, match="seq_len"):
        dsa_decode_cost(0)
    with pytest.raises(ValueError, match="bytes_per_element"):
        dsa_decode_cost(8, bytes_per_element=0)
    ix = LightningIndexer(8, 4, num_heads=2, head_dim=4, rope_dim=2, topk=2, dtype=torch.float64)
    with pytest.raises(ValueError, match="q_lora_rank=4"):
        ix.scores(torch.zeros(1, 3, 8, dtype=torch.float64), torch.zeros(1, 3, 5, dtype=torch.float64))
    with pytest.raises(ValueError, match="rope_dim must be even"):
        LightningIndexer(8, 4, num_heads=2, head_dim=4, rope_dim=6, topk=2)
    with pytest.raises(TypeError, match="DeepseekV32Indexer"):
        LightningIndexer.from_hf(torch.nn.Linear(2, 2))
    with pytest.raises(TypeError, match="DeepseekV32Attention"):
        SparseLatentAttention.from_hf(torch.nn.Linear(2, 2))
    with pytest.raises(ValueError, match="q_lora_rank"):
        SparseLatentAttention(8, 2, index_heads=2, index_head_dim=4, topk=2, q_lora_rank=None, kv_lora_rank=4,
                              qk_nope_head_dim=2, qk_rope_head_dim=2, v_head_dim=2)


# ----------------------------------------------------------------------------------------------
# issue 38: empty inputs, dtypes, non-finite index scores
# ----------------------------------------------------------------------------------------------
def _small_dsa(**kw):
    torch.manual_seed(0)
    return SparseLatentAttention(16, 2, index_heads=2, index_head_dim=8, topk=3, q_lora_rank=8, kv_lora_rank=8,
                                 qk_nope_head_dim=4, qk_rope_head_dim=4, v_head_dim=4, **kw)


@pytest.mark.parametrize("B,L", [(2, 0), (0, 5)])
@pytest.mark.parametrize("gather", [False, True])
def test_sparse_attention_empty_input_gives_an_empty_output(B, L, gather):
    assert _small_dsa()(torch.randn(B, L, 16), gather=gather).shape == (B, L, 16)


def test_sparse_attention_and_indexer_refuse_bad_dtypes():
    m = _small_dsa()
    with pytest.raises(TypeError, match="x must have the layer's dtype torch.float32, got torch.float64"):
        m(torch.randn(1, 3, 16, dtype=torch.float64))
    with pytest.raises(TypeError, match="q_resid must have the indexer's dtype torch.float32, got torch.float64"):
        m.indexer.scores(torch.randn(1, 3, 16), torch.randn(1, 3, 8, dtype=torch.float64))
    with pytest.raises(ValueError, match="dtype must be a floating dtype"):
        _small_dsa(dtype=torch.int32)
    with pytest.raises(ValueError, match="dtype must be a floating dtype"):
        LightningIndexer(16, 8, num_heads=2, head_dim=8, rope_dim=4, topk=2, dtype=torch.int64)


@pytest.mark.parametrize("bad,words", [(float("nan"), "NaN"), (float("inf"), r"\+inf")])
def test_indexer_refuses_nan_and_inf_scores(bad, words):
    # a NaN score used to be taken for a blocked key (NaN > -inf is False): silently dropped
    ix = _small_dsa().indexer
    scores = torch.tensor([[[0.0, bad, 1.0, -float("inf")]]])
    with pytest.raises(ValueError, match=f"scores contains {words}"):
        ix.select(scores)
    idx, valid = ix.select(torch.tensor([[[0.0, 2.0, 1.0, -float("inf")]]]))  # -inf stays a blocked key
    assert idx.tolist() == [[[1, 2, 0]]] and valid.all()


@pytest.mark.parametrize("x,q,words", [  # second breaking pass (#38): each gave NaN/inf index scores silently
    (torch.tensor([[[float("nan")] + [0.0] * 7] * 3]), torch.randn(1, 3, 4), "x contains NaN"),
    (torch.randn(1, 3, 8), torch.full((1, 3, 4), float("inf")), "q_resid contains"),
    (torch.randn(1, 3, 8) * 1e37, torch.randn(1, 3, 4) * 1e37, "index scores overflow"),
])
def test_indexer_scores_refuse_non_finite_input_and_overflow(x, q, words):
    torch.manual_seed(0)
    ix = LightningIndexer(8, 4, num_heads=2, head_dim=4, rope_dim=2, topk=2)
    with pytest.raises(ValueError, match=words):
        ix.scores(x, q)


# ----------------------------------------------------------------- issue 35: decoding equals the full forward
def _hf_dsa(kv_heads, seed):
    from transformers import DeepseekV32Config
    from transformers.models.deepseek_v32.modeling_deepseek_v32 import DeepseekV32Attention

    torch.manual_seed(seed)
    cfg = DeepseekV32Config(hidden_size=32, num_attention_heads=4, num_key_value_heads=kv_heads, q_lora_rank=12,
                            kv_lora_rank=16, qk_nope_head_dim=8, qk_rope_head_dim=4, v_head_dim=6, rope_theta=1000.0,
                            index_n_heads=8, index_head_dim=8, index_topk=TOPK, num_hidden_layers=1,
                            attn_implementation="eager")
    m = DeepseekV32Attention(cfg, 0).double().eval()
    with torch.no_grad():
        for p in m.parameters():
            p.normal_(0, 0.3)
    return m


@pytest.mark.parametrize("gather", [True, False])
@pytest.mark.parametrize("seed", [0, 1])
def test_sparse_attention_decodes_through_its_cache_equal_to_the_transformers_full_forward(seed, gather):
    """MLA has no KV heads to group (one latent per token serves all heads; transformers' DeepseekV32Attention
    fails with num_key_value_heads != num_attention_heads), so there is no GQA ratio to vary: a batch of 3, two seeds."""
    from attn_lib.sparse import DSACache

    m = _hf_dsa(4, seed=seed)
    Bt = 3
    x = torch.randn(Bt, L, 32, dtype=torch.float64)
    cos, sin = hf_cos_sin(torch.arange(L), 4, base=1000.0, batch=Bt)
    mask = torch.zeros(Bt, 1, L, L, dtype=torch.float64).masked_fill(~causal_mask(L), torch.finfo(torch.float64).min)
    with torch.no_grad(), float64_reference():
        ref = m(x, (cos, sin), mask)[0]
    ours = SparseLatentAttention.from_hf(m)
    for sizes in ([1] * L, [3, 1, 5, 2, 1]):  # token by token, in chunks (past k = 4 keys: the top-k bites)
        cache = DSACache()
        with torch.no_grad():
            out = torch.cat([ours(piece, cache=cache, gather=gather) for piece in torch.split(x, sizes, dim=1)], 1)
        torch.testing.assert_close(out, ref, **TOL, msg=str(sizes))
        assert cache.seq_len == L and cache.index.keys.shape == (Bt, 1, L, 8)
        assert cache.nbytes() == Bt * L * (16 + 4 + 8) * 8  # latent r + rotated key dr + indexer key d_I, float64
    with torch.no_grad():  # the indexer's selection matters in decoding too: dense MLA over the cache differs
        assert max_abs_diff(MultiHeadLatentAttention.from_hf(m)(x), ref) > 1e-3


def test_dsa_cache_refuses_a_wrong_cache_and_another_layers_cache():
    from attn_lib.kv_cache import KVCache
    from attn_lib.sparse import DSACache

    m = _hf_dsa(4, seed=0)
    a, b = SparseLatentAttention.from_hf(m), SparseLatentAttention.from_hf(m)
    x = torch.randn(1, 3, 32, dtype=torch.float64)
    with pytest.raises(TypeError, match="cache must be an attn_lib.sparse.DSACache, got KVCache"):
        a(x, cache=KVCache())
    cache = DSACache()
    a(x, cache=cache)
    with pytest.raises(ValueError, match="already holds the keys of another layer"):
        b(x, cache=cache)
    assert cache.seq_len == 3 and cache.index.seq_len == 3  # the refused call changed nothing
