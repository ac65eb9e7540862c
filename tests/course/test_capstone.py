"""attn_lib.course.capstone (notebook 10): TinyDecoder is DecoderLM configured; its attention (naive and tiled,
with GQA and RoPE) equals torch's SDPA; cached decoding equals uncached; the self-only ablation sees only
the current token; the copy task's batches score exactly the copied half; training on it makes attention
matter (the attention model beats the self-only one by a wide margin)."""

import math

import pytest
import torch
import torch.nn.functional as F

import attn_lib
from attn_lib.course import capstone as C
from attn_lib.models.lm import DecoderLM
from attn_lib.positional import apply_rope
from attn_lib.tiled import skipped_tiles
from attn_lib.course.train import train_loop


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    m = C.TinyDecoder(40, d_model=32, num_heads=4, num_kv_heads=2, num_layers=2, block=4).eval()
    for p in m.parameters():  # larger weights than the init, so that differences would show
        torch.nn.init.normal_(p, std=0.3)
    return m


def test_tiny_decoder_is_decoder_lm_configured():
    torch.manual_seed(0)
    tiny = C.TinyDecoder(20, d_model=16, num_heads=4, num_kv_heads=2, num_layers=2, block=4)
    torch.manual_seed(0)
    lm = DecoderLM(20, d_model=16, num_heads=4, num_kv_heads=2, num_layers=2, tile_size=4, norm_eps=None,
                   init="torch")
    assert isinstance(tiny, DecoderLM) and tiny.blocks is tiny.layers and tiny.tile_size == 4
    a, b = tiny.state_dict(), lm.state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    # "torch" init keeps PyTorch's default Linear init (uniform, bound 1/sqrt(fan_in)); "gpt2" draws N(0, 0.02)
    w = tiny.layers[0].attn.q_proj.weight
    assert w.abs().max() <= 16 ** -0.5 and w.std() > 0.1


@pytest.mark.parametrize("how", C.ATTENTIONS)
def test_attention_equals_torch_sdpa_with_gqa(how):
    torch.manual_seed(1)
    m = C.TinyDecoder(10, d_model=32, num_heads=4, num_kv_heads=2, num_layers=1, block=4).double()
    attn = m.layers[0].attn
    x = torch.randn(2, 9, 32, dtype=torch.float64)
    B, L, _ = x.shape
    q = apply_rope(attn.q_proj(x).view(B, L, 4, 8).transpose(1, 2))
    k = apply_rope(attn.k_proj(x).view(B, L, 2, 8).transpose(1, 2))
    v = attn.v_proj(x).view(B, L, 2, 8).transpose(1, 2)
    ref = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    expected = attn.out_proj(ref.transpose(1, 2).reshape(B, L, 32))
    with torch.no_grad():
        out, _ = attn(x, is_causal=True, backend=how, tile_size=4)
    torch.testing.assert_close(out, expected, rtol=0, atol=1e-10)


def test_tiled_backend_calls_tiled_attention_causally_with_gqa(monkeypatch):
    """The tiled path passes is_causal + bottom_right + enable_gqa (no repeated K/V, no dense causal mask)."""
    import attn_lib.tiled as T

    seen = []
    real = T.tiled_attention

    def spy(q, k, v, **kw):
        seen.append((q.shape, k.shape, kw))
        return real(q, k, v, **kw)

    monkeypatch.setattr(T, "tiled_attention", spy)
    m = C.TinyDecoder(10, num_layers=1, block=4).eval()
    with torch.no_grad():
        m(torch.zeros(1, 12, dtype=torch.long), attention="tiled")
    (qs, ks, kw), = seen
    assert qs[1] == 4 and ks[1] == 2  # 4 query heads, 2 key/value heads: K and V not repeated
    assert kw["is_causal"] and kw["causal_align"] == "bottom_right" and kw["enable_gqa"]
    assert kw["attn_mask"] is None and kw["block_q"] == kw["block_k"] == 4
    # 12 tokens in tiles of 4: 3 x 3 tiles, the 3 above the diagonal are skipped
    assert skipped_tiles(12, 12, 4, 4, is_causal=True, causal_align="bottom_right") == 3


def test_tiled_equals_naive_inside_the_model(model):
    ids = torch.randint(0, 40, (3, 13), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        naive, tiled = model(ids), model(ids, attention="tiled")
    assert naive.abs().max() > 1  # not trivially small
    torch.testing.assert_close(naive, tiled, rtol=0, atol=1e-5)


def test_cache_equals_full_forward_and_generation(model):
    prompt = torch.tensor([[3, 1, 4, 1, 5]])
    with torch.no_grad():
        for how in C.ATTENTIONS:
            cached, cached_logits = C.generate(model, prompt, 12, attention=how)
            full, full_logits = C.generate(model, prompt, 12, use_cache=False, attention=how)
            assert torch.equal(cached, full)
            torch.testing.assert_close(cached_logits, full_logits, rtol=0, atol=1e-5)
            # the step logits are the full forward pass's logits at the positions that chose each token
            all_logits = model(cached[:, :-1])
            torch.testing.assert_close(all_logits[:, prompt.shape[1] - 1:], cached_logits, rtol=0, atol=1e-5)
            assert torch.equal(cached_logits.argmax(-1), cached[:, prompt.shape[1]:])


def test_cache_in_chunks(model):
    ids = torch.randint(0, 40, (2, 10), generator=torch.Generator().manual_seed(3))
    caches = [attn_lib.KVCache() for _ in model.blocks]
    with torch.no_grad():
        parts = [model(ids[:, :4], caches), model(ids[:, 4:7], caches), model(ids[:, 7:], caches)]
        full = model(ids)
    torch.testing.assert_close(torch.cat(parts, 1), full, rtol=0, atol=1e-5)
    assert caches[0].seq_len == 10 and caches[0].keys.shape[1] == 2  # num_kv_heads keys are cached


def test_self_only_sees_the_current_token_alone():
    torch.manual_seed(0)
    m = C.TinyDecoder(12, num_layers=2, attend="self").eval()
    ids = torch.randint(0, 12, (2, 9), generator=torch.Generator().manual_seed(4))
    other = ids.clone()
    other[:, :-1] = (other[:, :-1] + 5) % 12  # change every earlier token, keep the last one
    with torch.no_grad():
        torch.testing.assert_close(m(ids)[:, -1], m(other)[:, -1], rtol=0, atol=1e-6)  # same prediction
        w = m.attention_weights(ids)
        assert torch.equal(w[0][0, 0], torch.eye(9))  # each token puts all its weight on itself
        # with a cache and in tiles too (the diagonal moves with the cached tokens)
        caches = m.new_kv_caches()
        step = torch.cat([m(ids[:, :5], caches), m(ids[:, 5:], caches)], 1)
        torch.testing.assert_close(step, m(ids), rtol=0, atol=1e-6)
        torch.testing.assert_close(m(ids, attention="tiled"), m(ids), rtol=0, atol=1e-6)
    causal = C.TinyDecoder(12, num_layers=2).eval()
    with torch.no_grad():
        assert (causal(ids)[:, -1] - causal(other)[:, -1]).abs().max() > 1e-4  # the causal model looks back


def test_copy_batch_scores_the_copied_half_only():
    x, y = C.copy_batch(5, torch.Generator().manual_seed(0), min_words=6, max_words=6)
    assert x.shape == y.shape == (5, 12)
    assert (x[:, 6] == C.SEP).all() and torch.equal(x[:, 7:], x[:, :5])  # w_1..w_6 | w_1..w_5
    assert (y[:, :6] == -100).all() and torch.equal(y[:, 6:], x[:, :6])  # after | : the first half again
    assert C.decode(C.encode("the cat sat on the mat | the")) == "the cat sat on the mat | the"
    with pytest.raises(ValueError, match="zebra"):
        C.encode("the zebra")


def test_attention_matters_on_the_copy_task():
    """300 steps of 32 (~5 s on one thread): the attention model's copy loss is already far below the
    self-only one's, which cannot beat ln 16 (the next word of a random sequence, from the current word)."""
    losses = {}
    for attend in ("causal", "self"):
        torch.manual_seed(0)
        m = C.TinyDecoder(C.VOCAB_SIZE, d_model=64, num_heads=4, num_kv_heads=2, num_layers=2, attend=attend)
        train_loop(m, C.copy_batches(32, seed=0), C.copy_loss, steps=300, warmup_steps=30, progress=False)
        held = [C.copy_batch(64, torch.Generator().manual_seed(100 + i)) for i in range(4)]
        losses[attend] = C.held_out_loss(m, held)
    assert losses["self"] > math.log(16) - 0.1
    assert losses["causal"] < losses["self"] - 0.8


def test_unigram_cross_entropy_by_hand():
    # counts + 1: token 0 -> 3, token 1 -> 2; p = (0.6, 0.4)
    got = C.unigram_cross_entropy(torch.tensor([0, 0, 1]), torch.tensor([1, 0]), 2)
    assert math.isclose(got, -(math.log(0.4) + math.log(0.6)) / 2)


def test_errors():
    with pytest.raises(ValueError, match="num_kv_heads must divide num_heads"):
        C.TinyDecoder(10, 32, 4, 3)
    with pytest.raises(ValueError, match="head_dim"):
        C.TinyDecoder(10, 12, 4, 2)
    with pytest.raises(ValueError, match="attend"):
        C.TinyDecoder(10, attend="left")
    m = C.TinyDecoder(10, num_layers=2)
    with pytest.raises(ValueError, match="attention"):
        m(torch.zeros(1, 3, dtype=torch.long), attention="flash")
    with pytest.raises(ValueError, match="one cache per layer"):
        m(torch.zeros(1, 3, dtype=torch.long), [attn_lib.KVCache()])
    with pytest.raises(ValueError, match="need_weights"):
        m.layers[0].attn(torch.zeros(1, 3, 32), is_causal=True, backend="tiled", need_weights=True)


def test_random_windows_draws_every_window_the_last_one_too():
    """Issue 38 §5: a stream of N tokens holds N - L windows of L + 1 tokens, starting at 0..N - L - 1. Before,
    the upper bound was exclusive twice over: the start N - L - 1 was never drawn, and a stream of exactly L + 1
    tokens (one window) raised torch's RuntimeError. Each start has probability 1/7 here: in 2000 draws the
    chance that one is missed is 7 * (6/7)**2000 < 1e-130."""
    stream = torch.arange(100, 110)  # N = 10
    x, y = C.random_windows(stream, 2000, 3, torch.Generator().manual_seed(0))
    assert x.shape == y.shape == (2000, 3) and x.dtype == y.dtype == torch.int64
    assert sorted(set((x[:, 0] - 100).tolist())) == list(range(7))  # 0..N - L - 1 = 0..6, the last one too
    assert torch.equal(y, x + 1)  # targets are the inputs shifted by one
    one_x, one_y = C.random_windows(stream, 4, 9)  # exactly one window: N = L + 1
    assert torch.equal(one_x, stream[:9].expand(4, 9)) and torch.equal(one_y, stream[1:].expand(4, 9))


@pytest.mark.parametrize("call, error, match", [
    # helpers that returned a number for an id they should refuse (issue 38 §3)
    (lambda: C.decode([-1]), ValueError, r"ids holds \[-1\], outside the task's vocabulary 0..16"),  # was 'box'
    (lambda: C.decode([17]), ValueError, r"ids holds \[17\]"),  # was IndexError
    (lambda: C.decode([True]), TypeError, "ids must hold int word ids, got bool True"),  # was 'cat'
    (lambda: C.decode(torch.tensor([[1, 2]])), ValueError, r"one sequence \(L,\)"),  # was TypeError from WORDS[list]
    (lambda: C.decode(torch.tensor([1.0])), TypeError, "integer word ids"),
    (lambda: C.decode("the cat"), TypeError, "ids must be a list of int word ids"),
    (lambda: C.unigram_cross_entropy(torch.tensor([0, 1]), torch.tensor([-1]), 3), ValueError,
     r"eval_ids holds ids \[-1\] outside the vocabulary 0..2"),  # was 1.609: log p of the last id
    (lambda: C.unigram_cross_entropy(torch.tensor([0, 5]), torch.tensor([1]), 3), ValueError,
     r"train_ids holds ids \[5\]"),  # was 2.079: id 5 counted outside the vocabulary, in the normaliser
    (lambda: C.unigram_cross_entropy(torch.tensor([0, 1]), torch.tensor([], dtype=torch.long), 3), ValueError,
     "eval_ids must hold at least one token"),  # was NaN
    (lambda: C.unigram_cross_entropy(torch.tensor([0.0]), torch.tensor([0]), 3), TypeError, "integer token ids"),
    (lambda: C.unigram_cross_entropy([0], torch.tensor([0]), 3), TypeError, "train_ids must be a torch.Tensor"),
    (lambda: C.unigram_cross_entropy(torch.tensor([0]), torch.tensor([0]), 0), ValueError, "vocab_size"),
    (lambda: C.random_windows(torch.arange(10), 2, -1), ValueError, "seq_len must be an int >= 1, got -1"),  # was (2, 0)
    (lambda: C.random_windows(torch.arange(10), 2, 10), ValueError, "at least seq_len \\+ 1 = 11 tokens"),
    (lambda: C.random_windows(torch.arange(10), -1, 3), ValueError, "batch_size"),
    (lambda: C.random_windows(torch.arange(10.0), 2, 3), TypeError, "integer token ids"),  # was float windows
    (lambda: C.random_windows(torch.arange(10)[None], 2, 3), ValueError, "stream must have 1 dims"),
    (lambda: C.random_windows(torch.arange(10), 2, 3, 5), TypeError, "generator must be a torch.Generator"),
    (lambda: C.copy_batch(2, 3), TypeError, r"torch.Generator\(\).manual_seed\(3\)"),  # was randint's TypeError
    (lambda: C.corpus_token_stream(_Tok(), ["a"], -1), ValueError, "eos_id must be an int >= 0, got -1"),  # was kept
    (lambda: C.corpus_token_stream(_Tok(), "ab", 0), TypeError, "lines must be a list"),  # was one doc per char
    (lambda: C.corpus_token_stream(_Tok(), [3], 0), TypeError, "lines must hold str"),
    (lambda: C.corpus_token_stream(None, ["a"], 0), TypeError, "tokenizer must have an encode"),
    (lambda: C.generate(None, torch.tensor([[1]]), 1), TypeError, "model must be an attn_lib DecoderLM"),
])
def test_capstone_helpers_refuse_what_they_answered_wrongly(call, error, match):
    with pytest.raises(error, match=match):
        call()


class _Tok:
    def encode(self, text):
        return [1] * len(text)


def test_copy_loss_and_held_out_loss_refuse_an_empty_set():
    """Issue 38: held_out_loss([]) raised ZeroDivisionError; a batch without scored position gave copy_loss NaN and
    held_out_loss ZeroDivisionError; a list where HeldOutCurve wants an iterator failed at the first next()."""
    m = C.TinyDecoder(C.VOCAB_SIZE, d_model=16)
    unscored = (torch.zeros(2, 3, dtype=torch.long), torch.full((2, 3), -100))
    with pytest.raises(ValueError, match="no scored position .* would be NaN"):
        C.copy_loss(m, unscored)
    with pytest.raises(ValueError, match="batches must hold at least one"):
        C.held_out_loss(m, [])
    with pytest.raises(ValueError, match="no scored position"):
        C.held_out_loss(m.train(), [unscored])
    assert m.training  # the mode is restored after an error too
    with pytest.raises(TypeError, match=r"batches must be a list .*wrap it: \[batch\]"):
        C.held_out_loss(m, C.copy_batch(2))  # one batch, not a list of batches: was a wrong mean over rows
    with pytest.raises(ValueError, match=r"targets must have the inputs' shape \(2, 3\)"):
        C.copy_loss(m, (torch.zeros(2, 3, dtype=torch.long), torch.zeros(2, 4, dtype=torch.long)))
    with pytest.raises(TypeError, match="batch must be a pair"):
        C.copy_loss(m, torch.zeros(2, 3, dtype=torch.long))
    with pytest.raises(TypeError, match=r"iter\(your_list\)"):
        C.HeldOutCurve([C.copy_batch(2)], m, [C.copy_batch(2)])
    with pytest.raises(ValueError, match="held_out must be a non-empty list"):
        C.HeldOutCurve(C.copy_batches(2), m, [])
    with pytest.raises(TypeError, match="model must be a torch.nn.Module"):
        C.held_out_loss(None, [C.copy_batch(2)])  # was AttributeError: no attribute 'training'
    with pytest.raises(TypeError, match="model must be a torch.nn.Module"):
        C.HeldOutCurve(C.copy_batches(2), None, [C.copy_batch(2)])


@pytest.mark.parametrize("call", [  # second breaking pass (#38): torch's randint overflow error before
    lambda: __import__("attn_lib.course.capstone", fromlist=["x"]).copy_batch(2**63),
    lambda: __import__("attn_lib.course.capstone", fromlist=["x"]).random_windows(torch.arange(10), 2**63, 2),
    lambda: __import__("attn_lib.course.streaming", fromlist=["x"]).bos_windows(torch.arange(10), 2**63, 2, 0),
])
def test_batch_sizes_beyond_int64_draws_are_refused(call):
    with pytest.raises(ValueError, match=r"batch_size must be an int in \[1, 2147483648\]"):
        call()
