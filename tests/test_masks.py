"""attn_lib.masks against torch's causal biases, torch's is_causal, the HuggingFace tokenizer and nn.MultiheadAttention."""

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st
from torch.nn.attention.bias import causal_lower_right, causal_upper_left

from attn_lib.attention import scaled_dot_product_attention as sdpa
from attn_lib.masks import (
    causal_mask,
    from_torch_key_padding_mask,
    padding_mask,
    padding_to_attn_mask,
    to_torch_key_padding_mask,
)


def test_issue_examples():
    # the two 2x4 masks written out in the issue
    assert causal_mask(2, 4).int().tolist() == [[1, 0, 0, 0], [1, 1, 0, 0]]
    assert causal_mask(2, 4, align="bottom_right").int().tolist() == [[1, 1, 1, 0], [1, 1, 1, 1]]


@pytest.mark.filterwarnings("ignore:Lower right causal bias")
@given(st.integers(0, 9), st.integers(0, 9))
def test_causal_masks_match_torch_biases(L, S):
    top, bottom = causal_mask(L, S), causal_mask(L, S, align="bottom_right")
    assert top.dtype == torch.bool and top.shape == (L, S)
    if L and S:
        # torch's public CausalBias objects, used as SDPA's attn_mask, give the same attention as our masks
        g = torch.Generator().manual_seed(L * 10 + S)
        q, k, v = (torch.randn(1, 2, n, 4, generator=g, dtype=torch.float64) for n in (L, S, S))
        torch.testing.assert_close(F.scaled_dot_product_attention(q, k, v, attn_mask=causal_upper_left(L, S)),
                                   F.scaled_dot_product_attention(q, k, v, attn_mask=top))
        if L <= S:  # with L > S torch's lower-right bias has fully masked rows, whose output torch leaves undefined
            torch.testing.assert_close(F.scaled_dot_product_attention(q, k, v, attn_mask=causal_lower_right(L, S)),
                                       F.scaled_dot_product_attention(q, k, v, attn_mask=bottom))
    # the definition: query i sees key j iff j <= i (+ S - L for bottom-right)
    i, j = torch.arange(L)[:, None], torch.arange(S)[None, :]
    assert torch.equal(top, j <= i) and torch.equal(bottom, j <= i + S - L)


@given(st.integers(1, 7), st.integers(1, 7), st.integers(0, 2**31 - 1))
def test_top_left_mask_is_torch_is_causal(L, S, seed):
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(2, n, 4, generator=g, dtype=torch.float64) for n in (L, S, S))
    want = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.testing.assert_close(sdpa(q, k, v, causal_mask(L, S))[0], want)
    torch.testing.assert_close(sdpa(q, k, v, is_causal=True)[0], want)


def test_square_causal_default_and_alignments_agree():
    assert torch.equal(causal_mask(5), causal_mask(5, 5, align="bottom_right"))
    assert torch.equal(causal_mask(5), torch.ones(5, 5, dtype=torch.bool).tril())


def test_bottom_right_last_query_sees_everything():
    # decoding one new token with 6 cached: the single query sees all 7 keys
    assert causal_mask(1, 7, align="bottom_right").all()
    assert causal_mask(1, 7).sum() == 1  # top-left would let it see only key 0


@given(st.lists(st.integers(0, 8), min_size=0, max_size=6), st.integers(0, 3))
def test_padding_mask_definition(lengths, extra):
    max_len = (max(lengths) if lengths else 0) + extra
    m = padding_mask(lengths, max_len)
    assert m.dtype == torch.bool and m.shape == (len(lengths), max_len)
    assert m.sum(1).tolist() == lengths
    for row, n in zip(m.tolist(), lengths):
        assert row == [True] * n + [False] * (max_len - n)  # right padding
    assert torch.equal(padding_mask(torch.tensor(lengths, dtype=torch.long), max_len), m)
    if lengths:
        assert padding_mask(lengths).shape == (len(lengths), max(lengths))


def test_padding_mask_equals_tokenizer_attention_mask(pretrained):
    tokenizer, _ = pretrained
    batch = tokenizer(
        ["the cat sat on the mat.", "The dog barked very loudly.", "She drank her tea because she was thirsty"],
        padding=True, return_tensors="pt",
    )
    lengths = batch["attention_mask"].sum(1)
    assert torch.equal(padding_mask(lengths, batch["input_ids"].shape[1]), batch["attention_mask"].bool())


def test_padding_attention_equals_running_each_sentence_alone():
    # with the padding mask, the real tokens' outputs do not depend on the padding
    g = torch.Generator().manual_seed(0)
    lengths = [3, 5, 1]
    x = torch.randn(3, 1, 5, 8, generator=g, dtype=torch.float64)  # (B, H, T, E)
    out, w = sdpa(x, x, x, padding_to_attn_mask(padding_mask(lengths)))
    for b, n in enumerate(lengths):
        alone, _ = sdpa(x[b, :, :n], x[b, :, :n], x[b, :, :n])
        torch.testing.assert_close(out[b, :, :n], alone)
        assert (w[b, :, :, n:] == 0).all()


def test_torch_key_padding_mask_is_the_inverse_and_works_with_multiheadattention():
    pad = padding_mask([4, 2])  # True = real
    kpm = to_torch_key_padding_mask(pad)
    assert torch.equal(kpm, ~pad) and torch.equal(from_torch_key_padding_mask(kpm), pad)

    torch.manual_seed(0)
    mha = torch.nn.MultiheadAttention(8, 1, batch_first=True, dtype=torch.float64).eval()
    x = torch.randn(2, 4, 8, dtype=torch.float64)
    want, want_w = mha(x, x, x, key_padding_mask=kpm)
    # the same computation by hand with attn_lib's convention
    wq, wk, wv = mha.in_proj_weight.chunk(3)
    bq, bk, bv = mha.in_proj_bias.chunk(3)
    out, w = sdpa(x @ wq.T + bq, x @ wk.T + bk, x @ wv.T + bv, pad[:, None, :])
    torch.testing.assert_close(mha.out_proj(out), want)
    torch.testing.assert_close(w, want_w)
    # the trap: passing attn_lib's mask (True = real) straight to MultiheadAttention masks the real tokens
    wrong, _ = mha(x, x, x, key_padding_mask=pad)
    assert not torch.allclose(wrong[1, :2], want[1, :2])


def test_padding_to_attn_mask_combines_with_causal():
    pad = padding_mask([2, 3])
    both = padding_to_attn_mask(pad) & causal_mask(3)
    assert both.shape == (2, 1, 3, 3)
    assert both[0, 0].int().tolist() == [[1, 0, 0], [1, 1, 0], [1, 1, 0]]
    assert torch.equal(both[1, 0], causal_mask(3))


def test_mask_errors():
    with pytest.raises(ValueError, match="align must be one of"):
        causal_mask(2, 3, align="top-left")
    with pytest.raises(ValueError, match="q_len must be an int >= 0, got -1"):
        causal_mask(-1)
    with pytest.raises(TypeError, match="kv_len must be an int"):
        causal_mask(2, 3.0)
    with pytest.raises(ValueError, match="max_len=2 is shorter than the longest sequence"):
        padding_mask([1, 3], max_len=2)
    with pytest.raises(ValueError, match="lengths must be >= 0"):
        padding_mask([1, -3])
    with pytest.raises(TypeError, match="lengths must be integers"):
        padding_mask(torch.tensor([1.0, 2.0]))
    with pytest.raises(ValueError, match=r"1-D.*\(2, 2\)"):
        padding_mask(torch.ones(2, 2, dtype=torch.long))
    # one rule for padding masks (_checks.check_padding_mask): bool, or 0/1 integers like HF's attention_mask
    pm = torch.tensor([[1, 1, 0]])
    assert torch.equal(to_torch_key_padding_mask(pm), to_torch_key_padding_mask(pm.bool()))
    with pytest.raises(ValueError, match="only 0 .padding. and 1"):
        to_torch_key_padding_mask(torch.tensor([[1, 2, 0]]))
    with pytest.raises(TypeError, match="padding_mask must be bool .True = real token. or 0/1 integers, got dtype torch.float32"):
        to_torch_key_padding_mask(torch.ones(2, 3))
    with pytest.raises(ValueError, match=r"\(B, S\)"):
        padding_to_attn_mask(torch.ones(3, dtype=torch.bool))


# ---------------------------------------------------------------- notebook 04's mask explorer
def test_demo_mask_combines_causal_and_padding():
    from attn_lib.course.viz import MASK_KINDS, demo_mask

    real = torch.tensor([True] * 4 + [False] * 2)
    assert torch.equal(demo_mask("none", 3, 6, num_padding=2), real.expand(3, 6))
    assert torch.equal(demo_mask("causal top-left", 3, 6, num_padding=2), causal_mask(3, 6) & real)
    assert torch.equal(demo_mask("causal bottom-right", 3, 6, num_padding=2),
                       causal_mask(3, 6, align="bottom_right") & real)
    assert len(MASK_KINDS) == 3
    with pytest.raises(ValueError, match="kind must be one of"):
        demo_mask("causal", 3, 3)
    with pytest.raises(ValueError, match="num_padding must be an int in 0..kv_len=3, got 4"):
        demo_mask("none", 3, 3, num_padding=4)


def test_mask_figure_and_explorer():
    import matplotlib.pyplot as plt

    from attn_lib.course.viz import mask_explorer, mask_figure

    fig = mask_figure("causal top-left", 5, 3, num_padding=2)
    assert "attention weights" in fig.axes[1].get_title()
    fig = mask_figure("causal bottom-right", 5, 3, num_padding=1)  # first 2 rows fully masked
    assert "2 row(s) fully masked" in fig.axes[1].get_title()
    plt.close("all")
    assert mask_explorer() is not None
    plt.close("all")


def test_mask_arguments_name_argument_value_and_expectation():
    with pytest.raises(ValueError, match="device must be a device such as 'cpu', 'cuda' or 'cuda:0', got 'gpu'"):
        causal_mask(3, device="gpu")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="no CUDA GPU is available on this machine .* use device='cpu'"):
            causal_mask(3, device="cuda")
    assert causal_mask(2, device="cpu").device.type == "cpu"
    with pytest.raises(ValueError, match="align must be one of 'top_left', 'bottom_right', got 'left'"):
        causal_mask(2, align="left")
    with pytest.raises(TypeError, match="q_len must be an int >= 0, got float 2.0"):
        causal_mask(2.0)
    three_d = torch.ones(2, 3, 4, dtype=torch.bool)
    for fn in (to_torch_key_padding_mask, from_torch_key_padding_mask, padding_to_attn_mask):
        with pytest.raises(ValueError, match=r"must be \(B, S\), one row of key flags per sequence, got shape \(2, 3, 4\)"):
            fn(three_d)
