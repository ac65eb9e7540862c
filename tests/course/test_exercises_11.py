"""The exercise checks of notebook 11 accept right answers (written independently here) and name typical wrong ones."""

from exercise_asserts import fails_with as _fails_with, not_written as _not_written

from attn_lib.course.exercises import check_mla_cache_bytes, check_ring_slot_positions


def test_check_mla_cache_bytes():
    assert check_mla_cache_bytes(lambda L, H, r, dn, dr, s, e: L * s * (r + dr) * e)
    assert check_mla_cache_bytes(lambda L, H, r, dn, dr, s, e: int(sum(r + dr for _ in range(L)) * s * e))
    _fails_with(check_mla_cache_bytes(lambda L, H, r, dn, dr, s, e: 2 * L * s * (r + dr) * e), "ONE latent")
    _fails_with(check_mla_cache_bytes(lambda L, H, r, dn, dr, s, e: H * L * s * (r + dr) * e), "num_heads")
    _fails_with(check_mla_cache_bytes(lambda L, H, r, dn, dr, s, e: L * s * r * e), "decoupled RoPE key")
    _fails_with(check_mla_cache_bytes(lambda L, H, r, dn, dr, s, e: L * s * (r + dr)), "elements, not bytes")
    _fails_with(check_mla_cache_bytes(lambda L, H, r, dn, dr, s, e: L * s * (r + dr + dn) * e), "qk_nope_head_dim")
    _fails_with(check_mla_cache_bytes(_not_written), "not written yet")


def test_check_ring_slot_positions():
    def loop(n, w):
        slots = [-1] * w
        for p in range(n):
            slots[p % w] = p
        return slots

    assert check_ring_slot_positions(loop)
    assert check_ring_slot_positions(lambda n, w: [max((p for p in range(n) if p % w == s), default=-1) for s in range(w)])
    in_order = lambda n, w: list(range(max(0, n - w), n)) + [-1] * max(0, w - n)  # noqa: E731
    _fails_with(check_ring_slot_positions(in_order), "p % window")
    _fails_with(check_ring_slot_positions(lambda n, w: [p if p >= 0 else 0 for p in loop(n, w)]), "-1 (empty)")
    _fails_with(check_ring_slot_positions(lambda n, w: [p - 1 if p >= 0 else p for p in loop(n, w)]), "off by one")
    _fails_with(check_ring_slot_positions(_not_written), "not written yet")


def test_check_gated_output():
    import torch

    from attn_lib.course.exercises import check_gated_output

    assert check_gated_output(lambda heads, x, w_gate: heads * torch.sigmoid(x @ w_gate.T))
    assert check_gated_output(lambda heads, x, w_gate: heads / (1 + torch.exp(-torch.einsum("bld,hd->blh", x, w_gate))))
    _fails_with(check_gated_output(lambda heads, x, w_gate: heads * (x @ w_gate.T)), "sigmoid(x W_gate")
    _fails_with(check_gated_output(lambda heads, x, w_gate: heads * torch.sigmoid(heads)), "layer's input x")
    _fails_with(check_gated_output(lambda heads, x, w_gate: heads * torch.softmax(x @ w_gate.T, -1)), "softmax")
    _fails_with(check_gated_output(_not_written), "not written yet")


def test_check_absorbed_attention():
    """Exercise 1: MLA's absorbed attention; right answers written two ways, the typical wrong ones named."""
    import torch

    from attn_lib.course.exercises import check_absorbed_attention

    def right(q_c, q_r, c_kv, k_r, w_uk, w_uv, *, scale):
        q = torch.cat([torch.einsum("bhld,hdr->bhlr", q_c, w_uk), q_r], -1)
        s = q @ torch.cat([c_kv, k_r], -1).transpose(-1, -2) * scale
        L, S = s.shape[-2:]
        p = torch.softmax(s.masked_fill(~torch.ones(L, S, dtype=torch.bool).tril(S - L), float("-inf")), -1)
        return torch.einsum("bhlr,hvr->bhlv", p @ c_kv, w_uv)

    def expanded(q_c, q_r, c_kv, k_r, w_uk, w_uv, *, scale):  # per-head keys and values: also right
        k = torch.einsum("bxsr,hdr->bhsd", c_kv, w_uk)
        v = torch.einsum("bxsr,hvr->bhsv", c_kv, w_uv)
        s = (q_c @ k.transpose(-1, -2) + q_r @ k_r.transpose(-1, -2)) * scale
        L, S = s.shape[-2:]
        return torch.softmax(s.masked_fill(~torch.ones(L, S, dtype=torch.bool).tril(S - L), float("-inf")), -1) @ v

    assert check_absorbed_attention(right)
    assert check_absorbed_attention(expanded)

    def no_rope(q_c, q_r, c_kv, k_r, w_uk, w_uv, *, scale):
        return right(q_c, torch.zeros_like(q_r), c_kv, torch.zeros_like(k_r), w_uk, w_uv, scale=scale)

    def latent_scale(q_c, q_r, c_kv, k_r, w_uk, w_uv, *, scale):
        return right(q_c, q_r, c_kv, k_r, w_uk, w_uv, scale=(c_kv.shape[-1] + k_r.shape[-1]) ** -0.5)

    def no_mask(q_c, q_r, c_kv, k_r, w_uk, w_uv, *, scale):
        q = torch.cat([torch.einsum("bhld,hdr->bhlr", q_c, w_uk), q_r], -1)
        p = torch.softmax(q @ torch.cat([c_kv, k_r], -1).transpose(-1, -2) * scale, -1)
        return torch.einsum("bhlr,hvr->bhlv", p @ c_kv, w_uv)

    _fails_with(check_absorbed_attention(no_rope), "rotary part is missing")
    _fails_with(check_absorbed_attention(latent_scale), "the scale is the one given")
    _fails_with(check_absorbed_attention(no_mask), "mask the future keys")
    _fails_with(check_absorbed_attention(lambda *args, scale: _not_written(*args)), "not written yet")
