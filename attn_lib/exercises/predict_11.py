"""Notebook 11's "predict, then check" questions (see :mod:`attn_lib.exercises.concepts`)."""

from attn_lib.exercises.concepts import Question, register

register(Question(
    id="11.mla_vs_mha",
    prompt=("DeepSeek-V3's attention has 128 heads with keys of 128 + 64 features (no-position + RoPE) and values of "
            "128, and caches a latent of 512 plus one shared RoPE key of 64 per token and layer. How many times "
            "more would an ordinary multi-head attention cache per token, with the same head sizes? (one number)"),
    answer=round(128 * (128 + 64 + 128) / (512 + 64), 1),
    tolerance=1.0,
    hints={
        "low": "Count every head: MHA caches, per token and layer, 128 keys of 192 features AND 128 values of 128.",
        "high": "The values have 128 features, not 192: MHA's cache is 128 x (192 + 128) elements per token and layer.",
    },
    explanation=("MHA: 128 x (192 + 128) = 40,960 elements per token and layer; MLA: 512 + 64 = 576. "
                 "40,960 / 576 = 71.1 times less for MLA."),
))

register(Question(
    id="11.ring_slot",
    prompt=("A sliding-window layer with window 4096 keeps its keys in a ring buffer: position p goes to slot "
            "p % 4096. Which slot (0 to 4095) holds the key of position 10,000?"),
    answer=10000 % 4096,
    tolerance=0.0,
    hints={
        "low": "10,000 = 2 x 4096 + 1808: the ring has wrapped around twice; the remainder is the slot.",
        "high": "Slots run from 0 to 4095; take the remainder of 10,000 divided by 4096.",
    },
    explanation=("10,000 % 4096 = 1808; the key it overwrote there was position 10,000 - 4096 = 5904, which just "
                 "left the window."),
))
