"""Exercise checks for notebook 11 (attention as 2024-2026 models run it).

- :func:`check_mla_cache_bytes`: the bytes DeepSeek's multi-head latent attention caches for a sequence.
- :func:`check_ring_slot_positions`: which position each slot of a sliding-window ring-buffer cache holds.
- :func:`check_gated_output`: gated attention's output gate (Qwen3-Next), before the output projection.
- :func:`check_absorbed_attention`: MLA's absorbed attention (W_UK in the query, W_UV after the softmax), the piece
  ``my_attn.mla.absorbed_attention`` of the learner's stack.

Each compares with attn_lib (:func:`attn_lib.mla.mla_cache_bytes_per_token`, proven on the real latent cache by
tests/test_mla.py; :func:`attn_lib.windows.ring_slot_positions`, equal to :class:`attn_lib.windows.RingKVCache`'s slots
in tests/test_windows.py) on fresh inputs, and names typical mistakes.
"""

from __future__ import annotations

import torch

from attn_lib.course.exercises._core import CheckResult, Mismatch, call, expect_close, fresh_generator, run_check
from attn_lib.mla import mla_cache_bytes_per_token
from attn_lib.windows import ring_slot_positions

__all__ = ["check_mla_cache_bytes", "check_ring_slot_positions", "check_gated_output", "check_absorbed_attention"]

HINT_MLA_TWO = ("you multiplied by 2 for keys AND values; MLA caches ONE latent c_KV per token (the keys and the "
                "values are both up-projected from it), plus the shared RoPE key: (kv_lora_rank + qk_rope_head_dim).")
HINT_MLA_HEADS = ("you multiplied by num_heads: the latent and the RoPE key are shared by all heads; that sharing is "
                  "what makes MLA's cache small.")
HINT_MLA_ROPE = "you left out the decoupled RoPE key: each token also caches qk_rope_head_dim features for it."
HINT_MLA_ELEMENTS = "you counted elements, not bytes: multiply by bytes_per_element."
HINT_MLA_NOPE = ("qk_nope_head_dim is per head and recomputed from c_KV (W_UK); it is not cached. The cache holds "
                 "kv_lora_rank + qk_rope_head_dim per token and layer.")

HINT_RING_ORDER = ("you listed the last `window` positions in time order; the ring does not shift them: position p "
                   "sits in slot p % window, so the list starts at whatever position landed in slot 0.")
HINT_RING_EMPTY = "slots never written must hold -1 (empty), not a position or 0."
HINT_RING_OFF_BY_ONE = ("off by one: after num_seen tokens the newest position is num_seen - 1 (positions start at 0), "
                        "and the oldest kept is num_seen - window.")


def check_mla_cache_bytes(mla_cache_bytes_fn) -> CheckResult:
    """Check ``mla_cache_bytes(num_layers, num_heads, kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim, seq_len,
    bytes_per_element)``: num_layers x seq_len x (kv_lora_rank + qk_rope_head_dim) x bytes_per_element."""
    cases = [  # (layers, heads, r, dn, dr, seq, bytes): DeepSeek-V3, V2-Lite-like, and two odd ones
        (61, 128, 512, 128, 64, 4096, 2),
        (27, 16, 512, 128, 64, 1000, 2),
        (5, 3, 24, 10, 6, 77, 4),
        (12, 8, 96, 32, 16, 2048, 1),
    ]

    def trials():
        for L, H, r, dn, dr, s, e in cases:
            want = mla_cache_bytes_per_token(L, r, dr, bytes_per_element=e) * s
            args = {"num_layers": L, "num_heads": H, "kv_lora_rank": r, "qk_nope_head_dim": dn,
                    "qk_rope_head_dim": dr, "seq_len": s, "bytes_per_element": e}
            got = call(mla_cache_bytes_fn, args)
            if isinstance(got, bool) or not isinstance(got, (int, float, torch.Tensor)) or \
                    (isinstance(got, torch.Tensor) and got.numel() != 1):
                raise Mismatch(f"mla_cache_bytes{tuple(args.values())}: return one number of bytes, "
                               f"got {type(got).__name__}.")
            wrong = [(2 * want, HINT_MLA_TWO), (want * H, HINT_MLA_HEADS), (L * s * r * e, HINT_MLA_ROPE),
                     (want / e, HINT_MLA_ELEMENTS), (L * s * (r + dr + dn) * e, HINT_MLA_NOPE)]
            expect_close(torch.tensor(float(got)), torch.tensor(float(want)),
                         what=f"mla_cache_bytes{tuple(args.values())}", wrong_answers=wrong, atol=0.5, rtol=0)
        return len(cases)

    return run_check("check_mla_cache_bytes", trials)


def check_ring_slot_positions(slot_positions_fn) -> CheckResult:
    """Check ``slot_positions(num_seen, window)``: the list of ``window`` positions the ring holds after ``num_seen``
    tokens, slot s holding the latest p < num_seen with p % window == s, or -1 if none."""
    cases = [(7, 3), (2, 4), (12, 4), (13, 5), (0, 2), (9, 1)]

    def trials():
        for n, w in cases:
            want = ring_slot_positions(n, w)
            got = call(slot_positions_fn, {"num_seen": n, "window": w})
            try:
                got_list = [int(v) for v in (got.tolist() if isinstance(got, torch.Tensor) else got)]
            except (TypeError, ValueError):
                raise Mismatch(f"slot_positions({n}, {w}): return a list of {w} ints, got {type(got).__name__}.") from None
            if got_list == want:
                continue
            in_order = list(range(max(0, n - w), n)) + [-1] * max(0, w - n)
            shifted = [p - 1 if p >= 0 else p for p in want]
            no_empty = [p if p >= 0 else 0 for p in want]
            for wrong, hint in ((in_order, HINT_RING_ORDER), (no_empty, HINT_RING_EMPTY),
                                (shifted, HINT_RING_OFF_BY_ONE)):
                if got_list == wrong and wrong != want:
                    raise Mismatch(hint)
            raise Mismatch(f"slot_positions({n}, {w}) gave {got_list}; expected {want}.")
        return len(cases)

    return run_check("check_ring_slot_positions", trials)


HINT_GATE_NO_SIGMOID = ("you multiplied by the gate's logits; the gate is sigmoid(x W_gateᵀ), a number in (0, 1) per "
                        "head and channel.")
HINT_GATE_ON_HEADS = ("you computed the gate from the attention's output; Qwen3-Next computes it from the layer's "
                      "input x (the same x the queries come from): sigmoid(x W_gateᵀ).")
HINT_GATE_SOFTMAX = ("you normalised the gate with a softmax; each channel has its own independent sigmoid gate, so "
                     "a head can close (all near 0) without opening another.")


def check_gated_output(gated_output_fn) -> CheckResult:
    """Check ``gated_output(heads, x, w_gate)``: heads (B, L, H·E), x (B, L, d_model), w_gate (H·E, d_model) ->
    heads · sigmoid(x w_gateᵀ), (B, L, H·E): the head-specific, elementwise output gate of gated attention
    (Qiu et al. 2025; transformers' ``Qwen3NextAttention``), compared with that formula on fresh inputs."""
    name = "check_gated_output"
    cases = [(2, 5, 8, 12), (1, 3, 6, 4), (3, 1, 16, 16)]

    def trials():
        for trial, (B, L, HE, d) in enumerate(cases):
            g = fresh_generator(name, trial)
            heads = torch.randn(B, L, HE, generator=g, dtype=torch.float64)
            x = torch.randn(B, L, d, generator=g, dtype=torch.float64)
            w = torch.randn(HE, d, generator=g, dtype=torch.float64)
            logits = x @ w.T
            want = heads * torch.sigmoid(logits)
            got = call(gated_output_fn, {"heads": heads, "x": x, "w_gate": w})
            wrong = [(heads * logits, HINT_GATE_NO_SIGMOID), (heads * torch.sigmoid(heads), HINT_GATE_ON_HEADS),
                     (heads * torch.softmax(logits, -1), HINT_GATE_SOFTMAX)]
            expect_close(got, want, what=f"gated_output on heads {tuple(heads.shape)}", wrong_answers=wrong,
                         atol=1e-10, rtol=0)
        return len(cases)

    return run_check(name, trials)


def check_absorbed_attention(absorbed_attention_fn) -> CheckResult:
    """Check ``absorbed_attention(q_c, q_r, c_kv, k_r, w_uk, w_uv, *, scale)``: MLA's attention in the latent space,
    notebook 11's exercise 1 and the piece ``my_attn.mla.absorbed_attention`` of the learner's stack.

    The same trials as ``make check-mine``'s (:func:`attn_lib.course.exercises.pieces_modern.check_piece_absorbed_attention`):
    q_c (B, H, L, dn), q_r (B, H, L, dr), c_kv (B, 1, S, r), k_r (B, 1, S, dr), w_uk (H, dn, r), w_uv (H, dv, r)
    float64, one decode step and a chunk of 3 queries over 7 cached positions, against the expanded keys and values
    and the course's SDPA; a missing RoPE part, a missing causal mask and the wrong scale get their own hints.

    Returns:
        a CheckResult. Raises: nothing; a wrong answer is a failed CheckResult with a hint.

    Source: DeepSeek-V2 report (2024), §2.1.2-2.1.3 (absorbing W_UK and W_UV); attn_lib.mla.MultiHeadLatentAttention.
    """
    from attn_lib.course.exercises.pieces_modern import check_piece_absorbed_attention

    result = check_piece_absorbed_attention(absorbed_attention_fn)
    inner = result.name
    # the same trials, reported under this exercise's name (the piece reports as "absorbed_attention")
    message = result.message.replace(f"{inner}:", "check_absorbed_attention:", 1)
    return CheckResult("check_absorbed_attention", result.passed, message)
