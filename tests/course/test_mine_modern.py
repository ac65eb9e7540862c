"""The learner's pieces of notebooks 11 and 12 (#34): each check rejects the typical wrong answers with its hint and
accepts a differently written right answer; the switch runs attn_lib's layers on the learner's ring cache."""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import attn_lib
from attn_lib.course import mine
from attn_lib.course.exercises import pieces_modern as pm

from exercise_asserts import SOLVED, restore_attn_lib  # noqa: F401 - an autouse fixture
from exercise_asserts import fails_with as _fails_with


# ----------------------------------------------------------------------------------------------------- softcap
def test_softcap_check_rejects_the_typical_mistakes_and_accepts_another_writing():
    _fails_with(pm.check_piece_softcap(lambda s, cap: torch.tanh(s / cap)), "forgot the factor cap outside")
    _fails_with(pm.check_piece_softcap(lambda s, cap: cap * torch.tanh(s)), "divided by the cap inside")
    _fails_with(pm.check_piece_softcap(lambda s, cap: s.clamp(-cap, cap)), "a hard clamp is not soft-capping")
    _fails_with(pm.check_piece_softcap(lambda s, cap: torch.tanh(s)), "divide by the cap inside the tanh")

    def through_exp(s, cap):  # tanh(x) = (1 - e^{-2x}) / (1 + e^{-2x}), written for |x| (odd function)
        x = (s / cap).abs()
        e = torch.exp(-2 * x)
        return cap * torch.sign(s) * (1 - e) / (1 + e)

    assert pm.check_piece_softcap(through_exp).passed


# ----------------------------------------------------------------------------------------------------- sink
def test_sink_softmax_check_rejects_the_typical_mistakes_and_accepts_another_writing():
    _fails_with(pm.check_piece_softmax_with_sink(lambda s, k: torch.softmax(s, -1)), "the sink is missing")
    _fails_with(pm.check_piece_softmax_with_sink(
        lambda s, k: torch.softmax(torch.cat([s, k.flip(0)[:, None, None].expand(*s.shape[:-1], 1)], -1), -1)[..., :-1]),
        "the sinks go to the wrong heads")

    def unstable(s, k):
        e = s.exp()
        return e / (e.sum(-1, keepdim=True) + k.exp()[:, None, None])

    _fails_with(pm.check_piece_softmax_with_sink(unstable), "subtract the maximum")

    def logsumexp_form(s, k):  # the sink as a log-sum-exp with the keys' log-sum-exp
        lse = torch.logaddexp(s.logsumexp(-1, keepdim=True), k[:, None, None])
        return (s - lse).exp()

    assert pm.check_piece_softmax_with_sink(logsumexp_form).passed


# ----------------------------------------------------------------------------------------------------- window
def _window(L, S=None, *, window, device=None, shift=0, top_left=False):
    S = L if S is None else S
    i = torch.arange(L)[:, None] + (0 if top_left else S - L)
    j = torch.arange(S)[None, :]
    return (i - j >= 0) & (i - j < window + shift)


def test_window_mask_check_rejects_the_typical_mistakes_and_accepts_another_writing():
    _fails_with(pm.check_piece_sliding_window_mask(lambda L, S=None, *, window, device=None: _window(L, S, window=window,
                                                                                                   shift=-1)),
                "ITSELF included")
    _fails_with(pm.check_piece_sliding_window_mask(lambda L, S=None, *, window, device=None: _window(L, S, window=window,
                                                                                                   shift=1)),
                "not window + 1")
    _fails_with(pm.check_piece_sliding_window_mask(lambda L, S=None, *, window, device=None: _window(
        L, S, window=window, top_left=True)), "the LAST L of the S positions")
    _fails_with(pm.check_piece_sliding_window_mask(lambda L, S=None, *, window, device=None: ~_window(L, S, window=window)),
                "True and False are swapped")

    def band(q_len, kv_len=None, *, window, device=None):  # a band of two triangles
        kv_len = q_len if kv_len is None else kv_len
        ones = torch.ones(q_len, kv_len, dtype=torch.bool)
        return ones.tril(kv_len - q_len) & ones.triu(kv_len - q_len - window + 1)

    assert pm.check_piece_sliding_window_mask(band).passed


# ----------------------------------------------------------------------------------------------------- ring cache
class _ListRing:
    """A differently written ring: a Python dict slot -> (position, key, value), rebuilt into tensors on demand."""

    def __init__(self, window):
        self.window, self.slots, self.seq_len, self._shape = window, {}, 0, None

    def _tensors(self):
        B, H, E, Ev, dt = self._shape
        k, v = torch.zeros(B, H, self.window, E, dtype=dt), torch.zeros(B, H, self.window, Ev, dtype=dt)
        pos = torch.full((self.window,), -1, dtype=torch.long)
        for s, (p, kk, vv) in self.slots.items():
            k[:, :, s], v[:, :, s], pos[s] = kk, vv, p
        return k, v, pos

    @property
    def positions(self):
        return None if self._shape is None else self._tensors()[2]

    def nbytes(self):
        if self._shape is None:
            return 0
        B, H, E, Ev, dt = self._shape
        return B * H * self.window * (E + Ev) * torch.empty(0, dtype=dt).element_size()

    def reset(self):
        self.slots, self.seq_len, self._shape = {}, 0, None

    def update(self, key, value):
        if self._shape is None:
            self._shape = (*key.shape[:2], key.shape[-1], value.shape[-1], key.dtype)
        k, v, pos = self._tensors()
        n = key.shape[2]
        new = torch.arange(self.seq_len, self.seq_len + n)
        for t in range(n):
            self.slots[(self.seq_len + t) % self.window] = (self.seq_len + t, key[:, :, t], value[:, :, t])
        self.seq_len += n
        return torch.cat([k, key], 2), torch.cat([v, value], 2), torch.cat([pos, new])


def test_ring_cache_check_rejects_the_typical_mistakes_and_accepts_another_writing():
    assert pm.check_piece_ring_kv_cache(_ListRing).passed

    class StoreFirst(_ListRing):  # stores, then returns the updated slots: a token would see itself twice
        def update(self, key, value):
            super().update(key, value)
            k, v, pos = self._tensors()
            n = key.shape[2]
            return torch.cat([k, key], 2), torch.cat([v, value], 2), torch.cat([pos, torch.arange(self.seq_len - n,
                                                                                                  self.seq_len)])

    _fails_with(pm.check_piece_ring_kv_cache(StoreFirst), "as they were BEFORE this chunk")

    class CountsKept(_ListRing):
        @property
        def seq_len(self):
            return min(self._seen, self.window)

        @seq_len.setter
        def seq_len(self, value):
            self._seen = value

        def update(self, key, value):
            k, v, pos = self._tensors() if self._shape else (None, None, None)
            if self._shape is None:
                self._shape = (*key.shape[:2], key.shape[-1], value.shape[-1], key.dtype)
                k, v, pos = self._tensors()
            n = key.shape[2]
            new = torch.arange(self._seen, self._seen + n)
            for t in range(n):
                self.slots[(self._seen + t) % self.window] = (self._seen + t, key[:, :, t], value[:, :, t])
            self._seen += n
            return torch.cat([k, key], 2), torch.cat([v, value], 2), torch.cat([pos, new])

    _fails_with(pm.check_piece_ring_kv_cache(CountsKept), "every token seen so far")

    class EmptyAtZero(_ListRing):
        def _tensors(self):
            k, v, pos = super()._tensors()
            return k, v, pos.clamp(min=0)

    _fails_with(pm.check_piece_ring_kv_cache(EmptyAtZero), "an empty slot must have position -1")
    _fails_with(pm.check_piece_ring_kv_cache(lambda w: None), "must be a class")


def test_the_learners_ring_cache_runs_attn_libs_sliding_window_layer():
    """After the switch, VariantAttention's ring decode runs on the learner's class and equals the full forward."""
    from attn_lib.variants import VariantAttention

    mine.use_mine(SOLVED, quiet=True)
    import attn_lib.windows as W

    assert W.RingKVCache.__module__ == "my_attn.windows"
    torch.manual_seed(0)
    layer = VariantAttention(16, 4, 2, 4, sliding_window=3).double()
    x = torch.randn(1, 9, 16, dtype=torch.float64)
    full = layer(x)
    ring = W.RingKVCache(3)
    steps = torch.cat([layer(x[:, :4], cache=ring)] + [layer(x[:, t:t + 1], cache=ring) for t in range(4, 9)], 1)
    assert (steps - full).abs().max().item() < 1e-12 and ring.keys.shape[2] == 3


# ----------------------------------------------------------------------------------------------------- top-k
def test_topk_check_rejects_the_typical_mistakes_and_accepts_another_writing():
    def keep(s, idx):
        return torch.zeros_like(s, dtype=torch.bool).scatter(-1, idx, True)

    _fails_with(pm.check_piece_select_topk(lambda s, k: keep(s, s.topk(min(k, s.shape[-1]), -1).indices)),
                "kept future keys")
    _fails_with(pm.check_piece_select_topk(
        lambda s, k: keep(s, s.nan_to_num(posinf=0, neginf=1e9).topk(min(k, s.shape[-1]), -1, largest=False).indices)
        & s.isfinite()), "SMALLEST")

    def by_threshold(s, k):  # the k-th largest score as a threshold
        kth = s.sort(-1, descending=True).values[..., min(k, s.shape[-1]) - 1:min(k, s.shape[-1])]
        return (s >= kth) & (s > float("-inf"))

    assert pm.check_piece_select_topk(by_threshold).passed


# ----------------------------------------------------------------------------------------------------- MLA
def _expanded(q_c, q_r, c, k_r, w_uk, w_uv, *, scale, rope=True, mask=True):
    B, H, L, _ = q_c.shape
    S = c.shape[-2]
    k = torch.einsum("bxsr,hdr->bhsd", c, w_uk)
    v = torch.einsum("bxsr,hvr->bhsv", c, w_uv)
    s = q_c @ k.transpose(-1, -2)
    if rope:
        s = s + q_r @ k_r.transpose(-1, -2)
    s = s * scale
    if mask:
        s = s.masked_fill(torch.ones(L, S, dtype=torch.bool).tril(S - L).logical_not(), float("-inf"))
    return s.softmax(-1) @ v


def test_absorbed_attention_check_rejects_the_typical_mistakes_and_accepts_another_writing():
    assert pm.check_piece_absorbed_attention(_expanded).passed  # expanding is another right answer (not the fast one)
    _fails_with(pm.check_piece_absorbed_attention(lambda *a, scale: _expanded(*a, scale=scale, rope=False)),
                "the rotary part is missing")
    _fails_with(pm.check_piece_absorbed_attention(lambda *a, scale: _expanded(*a, scale=scale, mask=False)),
                "mask the future keys")

    def no_w_uv(q_c, q_r, c, k_r, w_uk, w_uv, *, scale):
        s = (torch.einsum("bhld,hdr->bhlr", q_c, w_uk) @ c.transpose(-1, -2) + q_r @ k_r.transpose(-1, -2)) * scale
        L, S = s.shape[-2:]
        return s.masked_fill(torch.ones(L, S, dtype=torch.bool).tril(S - L).logical_not(), float("-inf")).softmax(-1) @ c

    _fails_with(pm.check_piece_absorbed_attention(no_w_uv), "apply W_UV after the softmax")


# ----------------------------------------------------------------------------------------------------- 12
def _solved(module: str):
    """The worked solution's module, loaded from its file (not as my_attn: no switch involved)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"_solved_{module}", SOLVED / f"{module}.py")
    out = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(out)
    return out


def test_decayed_attention_check_rejects_the_typical_mistakes_and_accepts_another_writing():
    decayed_attention = _solved("linear").decayed_attention

    def no_decay(q, k, v, log_decay=None, **kw):
        return decayed_attention(q, k, v, None, **kw)

    _fails_with(pm.check_piece_decayed_attention(no_decay), "the decay is missing")

    def strict(q, k, v, log_decay=None, **kw):
        out = decayed_attention(q, k, v, log_decay, **kw)
        if kw.get("return_state"):
            return out
        return out - (q * k).sum(-1, keepdim=True) * v

    _fails_with(pm.check_piece_decayed_attention(strict), "the token must see itself")

    def decays_after_adding(q, k, v, log_decay=None, *, form="parallel", **kw):
        if log_decay is None or kw.get("return_state"):
            return decayed_attention(q, k, v, log_decay, form=form, **kw)
        state, outs = torch.zeros(*k.shape[:-2], k.shape[-1], v.shape[-1], dtype=k.dtype), []
        for t in range(k.shape[-2]):
            state = log_decay[..., t, None, None].exp() * (state + k[..., t, :, None] * v[..., t, None, :])
            outs.append(q[..., t, None, :] @ state)
        return torch.cat(outs, -2)

    _fails_with(pm.check_piece_decayed_attention(decays_after_adding), "the decay is one position too long")

    def chunks_alone(q, k, v, log_decay=None, *, form="parallel", chunk_size=16, **kw):
        if form != "chunked" or kw:
            return decayed_attention(q, k, v, log_decay, form=form, chunk_size=chunk_size, **kw)
        C = chunk_size
        return torch.cat([decayed_attention(q[..., s:s + C, :], k[..., s:s + C, :], v[..., s:s + C, :],
                                            None if log_decay is None else log_decay[..., s:s + C])
                          for s in range(0, q.shape[-2], C)], -2)

    _fails_with(pm.check_piece_decayed_attention(chunks_alone), "each chunk only sees itself")

    def ignores_initial_state(q, k, v, log_decay=None, *, initial_state=None, **kw):
        return decayed_attention(q, k, v, log_decay, **kw)

    _fails_with(pm.check_piece_decayed_attention(ignores_initial_state), "the initial state was ignored")

    def every_form_by_the_matrix(q, k, v, log_decay=None, *, form="parallel", chunk_size=16, initial_state=None,
                                 return_state=False):
        """One masked matrix for every form, the initial state read through the cumulative decay."""
        g = torch.zeros(q.shape[:-1], dtype=q.dtype) if log_decay is None else log_decay
        cum = g.cumsum(-1)
        w = (q @ k.transpose(-1, -2)) * (cum[..., :, None] - cum[..., None, :]).tril().exp().tril()
        out = w @ v
        state = torch.zeros(*k.shape[:-2], k.shape[-1], v.shape[-1], dtype=q.dtype) if initial_state is None \
            else initial_state
        out = out + (q * cum.exp()[..., None]) @ state
        if not return_state:
            return out
        to_end = (cum[..., -1:] - cum).exp()[..., None]
        return out, cum[..., -1, None, None].exp() * state + (k * to_end).transpose(-1, -2) @ v

    assert pm.check_piece_decayed_attention(every_form_by_the_matrix).passed


def test_delta_step_check_rejects_the_typical_mistakes_and_accepts_another_writing():
    def correct_then_decay(S, q, k, v, g, b):
        pred = (S * k[..., :, None]).sum(-2)
        S = g.exp()[..., None, None] * (S + k[..., :, None] * (b[..., None] * (v - pred))[..., None, :])
        return (S * q[..., :, None]).sum(-2), S

    _fails_with(pm.check_piece_delta_rule_step(correct_then_decay), "decay first, then correct")

    def linear_update(S, q, k, v, g, b):
        S = g.exp()[..., None, None] * S + k[..., :, None] * (b[..., None] * v)[..., None, :]
        return (S * q[..., :, None]).sum(-2), S

    _fails_with(pm.check_piece_delta_rule_step(linear_update), "the linear-attention update")

    def no_gate(S, q, k, v, g, b):
        return correct_then_decay(S, q, k, v, torch.zeros_like(g), b)

    _fails_with(pm.check_piece_delta_rule_step(no_gate), "the gate is missing")

    def householder(S, q, k, v, g, b):  # S_t = α S (I - β k kᵀ) + β v kᵀ, in the (Ev, E) layout of the paper
        St = g.exp()[..., None, None] * S.transpose(-1, -2)  # (..., Ev, E)
        eye = torch.eye(k.shape[-1], dtype=k.dtype)
        St = St @ (eye - b[..., None, None] * k[..., :, None] * k[..., None, :]) + \
            b[..., None, None] * v[..., :, None] * k[..., None, :]
        return (St @ q[..., :, None])[..., 0], St.transpose(-1, -2)

    assert pm.check_piece_delta_rule_step(householder).passed


def test_fft_long_conv_check_passes_the_solution_and_names_the_wrap_around():
    """The piece's check (notebook 12's exercise 2 runs the same trials): the worked solution passes, a product of
    L-point spectra wraps around, and the right values from a direct sum are refused as the O(L²) route."""
    solved = _solved("linear").fft_long_conv
    assert pm.check_piece_fft_long_conv(solved).passed

    def wraps(u, k):
        L = u.shape[-1]
        return torch.fft.irfft(torch.fft.rfft(u, n=L) * torch.fft.rfft(k, n=L), n=L)

    _fails_with(pm.check_piece_fft_long_conv(wraps), "wrapped around")

    def unfolded(u, k):  # every window of K past values at once: right values, O(L K) work and memory
        L, K = u.shape[-1], k.shape[-1]
        windows = torch.nn.functional.pad(u, (K - 1, 0)).unfold(-1, K, 1)  # (..., L, K)
        return (windows * k.flip(-1)[..., None, :]).sum(-1)

    _fails_with(pm.check_piece_fft_long_conv(unfolded), "the O(L²) route")


@settings(max_examples=25, deadline=None)
@given(lead=st.lists(st.integers(1, 3), max_size=2), L=st.integers(1, 40), K=st.integers(1, 40),
       broadcast=st.booleans(), seed=st.integers(0, 2**16))
def test_fft_long_conv_solution_equals_the_direct_sum_on_any_shape(lead, L, K, broadcast, seed):
    """The worked solution that the check passes is the causal convolution for every length, filter length <= L and
    broadcast leading dims (a filter shared by the batch), against attn_lib's direct sum in float64."""
    from attn_lib.linear import direct_long_conv

    K = min(K, L)
    g = torch.Generator().manual_seed(seed)
    u = torch.randn(*lead, L, generator=g, dtype=torch.float64)
    k = torch.randn(*([] if broadcast else lead), K, generator=g, dtype=torch.float64)
    got = _solved("linear").fft_long_conv(u, k)
    assert got.shape == u.shape and got.dtype == torch.float64
    assert (got - direct_long_conv(u, k)).abs().max() < 1e-9


def test_each_check_refuses_attn_libs_own_piece():
    """Calling attn_lib's implementation, under any name, is no answer: the profile hook sees its code object."""
    from attn_lib.deltanet import delta_rule_step, gated_delta_rule
    from attn_lib.linear import decayed_attention, direct_long_conv, fft_long_conv, linear_attention
    from attn_lib.sparse import LightningIndexer
    from attn_lib.variants import VariantAttention, softcap
    from attn_lib.windows import RingKVCache, sliding_window_mask, window_mask_from_positions

    def called(result, name):
        _fails_with(result, f"called attn_lib's {name}")

    called(pm.check_piece_softcap(softcap), "softcap")
    called(pm.check_piece_softcap(lambda s, cap: softcap(s * 1.0, cap)), "softcap")
    called(pm.check_piece_sliding_window_mask(sliding_window_mask), "sliding_window_mask")
    called(pm.check_piece_sliding_window_mask(lambda L, S=None, *, window, device=None: window_mask_from_positions(
        torch.arange(L) + (L if S is None else S) - L, torch.arange(L if S is None else S), window=window)),
        "window_mask_from_positions")
    called(pm.check_piece_ring_kv_cache(RingKVCache), "update")
    called(pm.check_piece_decayed_attention(decayed_attention), "decayed_attention")
    called(pm.check_piece_decayed_attention(lambda q, k, v, g=None, **kw: linear_attention(q, k, v, feature_map=None,
                                                                                          normalize=False)),
           "linear_attention")
    called(pm.check_piece_delta_rule_step(delta_rule_step), "delta_rule_step")
    called(pm.check_piece_fft_long_conv(fft_long_conv), "fft_long_conv")
    called(pm.check_piece_fft_long_conv(lambda u, k: direct_long_conv(u * 1.0, k)), "direct_long_conv")

    def through_the_sequence(S, q, k, v, g, b):
        out, S = gated_delta_rule(q[:, :, None], k[:, :, None], v[:, :, None], g[:, :, None], b[:, :, None],
                                  scale=1.0, initial_state=S)
        return out[:, :, 0], S

    called(pm.check_piece_delta_rule_step(through_the_sequence), "gated_delta_rule")

    class Holder:
        select, selected_mask = LightningIndexer.select, LightningIndexer.selected_mask

        def __init__(self, k):
            self.topk = k

    called(pm.check_piece_select_topk(lambda s, k: Holder(k).selected_mask(s)), "select")

    def sink_through_the_layer(s, sinks):  # right weights, but attn_lib's layer is called on the way
        H = sinks.shape[0]
        layer = VariantAttention(2 * H, H, H, 2, sinks=True).double()
        z = torch.zeros(1, H, 1, 2, dtype=torch.float64)
        layer.attend(z, z, z, torch.ones(1, 1, dtype=torch.bool))
        return _solved("variants").softmax_with_sink(s, sinks)

    called(pm.check_piece_softmax_with_sink(sink_through_the_layer), "attend")


def test_pieces_that_replace_nothing_are_not_attn_lib_functions():
    """replaces=False only where attn_lib has the step inside a class, not as a function to swap."""
    import importlib

    for piece in pm.PIECES:
        has = hasattr(importlib.import_module(f"attn_lib.{piece.module}"), piece.name)
        assert has == piece.replaces, piece


def test_ring_check_names_a_shifting_buffer():
    class Shifting(_ListRing):  # keeps the last `window` tokens in order, oldest first: not a ring
        def update(self, key, value):
            if self._shape is None:
                self._shape = (*key.shape[:2], key.shape[-1], value.shape[-1], key.dtype)
                self.order = []
            k, v, pos = self._tensors()
            n = key.shape[2]
            new = torch.arange(self.seq_len, self.seq_len + n)
            self.order = (self.order + [(self.seq_len + t, key[:, :, t], value[:, :, t]) for t in range(n)])
            self.order = self.order[-self.window:]
            pad = self.window - len(self.order)
            self.slots = {pad + i: item for i, item in enumerate(self.order)}
            self.seq_len += n
            return torch.cat([k, key], 2), torch.cat([v, value], 2), torch.cat([pos, new])

    _fails_with(pm.check_piece_ring_kv_cache(Shifting), "p % window")


def test_the_checks_still_compare_with_attn_lib_while_the_course_runs_on_the_learners_stack():
    """use_mine swaps every module-level reference to a piece; the checks keep attn_lib's own in a namespace."""
    mine.use_mine(SOLVED, quiet=True)
    import attn_lib.variants as V

    assert V.softcap.__module__ == "my_attn.variants"
    assert pm.check_piece_softcap(V.softcap).passed  # the learner's piece in use is not taken for attn_lib's
    assert pm.check_piece_ring_kv_cache(attn_lib.windows.RingKVCache).passed
    assert all(s.status == "passes" for s in mine.check_mine(SOLVED) if s.piece in pm.PIECES)
    _fails_with(pm.check_piece_softcap(lambda s, cap: torch.tanh(s / cap)), "forgot the factor cap outside")
