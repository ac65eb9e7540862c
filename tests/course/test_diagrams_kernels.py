"""The drawn schematics of notebooks 08-09 (attn_lib.course.diagrams): the KV cache as it grows, the tiling loop.

Each returns a Figure whose labels carry the shapes and counts of its arguments, with no text under 8 pt, no two
labels overlapping and none cut off at the figure's edge (rendered at 110 dpi, as the notebooks show them), and
bad arguments raise TypeError / ValueError naming the argument (attn_lib._checks' style).
"""

from __future__ import annotations

import itertools

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
from matplotlib.colors import to_hex  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.patches import Rectangle  # noqa: E402

from attn_lib.course.diagrams import kv_cache_diagram, tiling_diagram  # noqa: E402
from attn_lib.course.style import PALETTE  # noqa: E402
from attn_lib.tiled import causal_tiles  # noqa: E402


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def texts(fig) -> list[str]:
    return [t.get_text() for t in fig.findobj(matplotlib.text.Text) if t.get_visible() and t.get_text().strip()]


def assert_legible(fig, dpi=110):
    """Every label >= 8 pt, inside the figure, and no two labels' boxes overlap (at ``dpi``)."""
    fig.set_dpi(dpi)
    renderer = fig.canvas.get_renderer()
    fig.canvas.draw()
    shown = [t for t in fig.findobj(matplotlib.text.Text) if t.get_visible() and t.get_text().strip()]
    assert shown
    small = [(t.get_text(), t.get_fontsize()) for t in shown if t.get_fontsize() < 8]
    assert not small, small
    page = fig.bbox
    boxes = []
    for t in shown:
        box = t.get_window_extent(renderer)
        inside = (box.x0 >= page.x0 - 0.5 and box.y0 >= page.y0 - 0.5
                  and box.x1 <= page.x1 + 0.5 and box.y1 <= page.y1 + 0.5)
        assert inside, f"{t.get_text()!r} is cut off: {box} outside {page}"
        boxes.append((t.get_text(), box.shrunk(0.98, 0.9)))  # glyph boxes include a little padding
    clashes = [(a, b) for (a, ba), (b, bb) in itertools.combinations(boxes, 2) if ba.overlaps(bb)]
    assert not clashes, clashes


def patches_of(fig, colour):
    return [p for p in fig.findobj(Rectangle) if to_hex(p.get_facecolor()) == to_hex(colour)]


# ---------------------------------------------------------------- the KV cache
def test_kv_cache_diagram_labels_the_shapes_of_every_step():
    fig = kv_cache_diagram()
    assert isinstance(fig, Figure)
    labels = texts(fig)
    for S in (4, 5, 6):  # prompt "the cat sat", then "on", "the", "mat"
        assert f"K, V each (B, Hkv, S, E) = (1, 2, {S}, 64)" in labels
    assert labels.count("q (B, H, 1, E) = (1, 8, 1, 64)") == 3
    assert "step t = 1: feed “on”" in labels and "step t = 3: feed “mat”" in labels
    assert "K + V: 2 · 2 · 64 = 256 values = 512 bytes" in labels  # GQA-2, fp16
    assert "K + V: 2 · 8 · 64 = 1024 values = 2048 bytes" in labels  # MHA
    assert "K + V: 2 · 1 · 64 = 128 values = 256 bytes" in labels  # MQA
    assert_legible(fig)


@pytest.mark.parametrize("kwargs, steps", [
    (dict(num_layers=3, batch_size=4, num_heads=4, num_kv_heads=1, head_dim=16, bytes_per_element=1), 3),
    (dict(tokens=["the", "cat", "sat", "on", "the", "mat", "."], prompt_len=3, num_heads=32, num_kv_heads=8), 4),
    (dict(tokens=("the",), prompt_len=0, num_layers=1, num_heads=12, num_kv_heads=12), 1),
])
def test_kv_cache_diagram_draws_one_new_row_per_layer_and_step(kwargs, steps):
    fig = kv_cache_diagram(**kwargs)
    H, Hkv = kwargs["num_heads"], kwargs["num_kv_heads"]
    layers = kwargs.get("num_layers", 2)
    prompt = kwargs.get("prompt_len", 3)
    # orange: the appended row of K and of V, Hkv cells each, in every layer at every step (+1 legend swatch)
    assert len(patches_of(fig, PALETTE[1])) == steps * layers * 2 * Hkv + 1
    # green: the one query row of H cells, per layer and step (+1 legend swatch)
    assert len(patches_of(fig, PALETTE[2])) == steps * layers * H + 1
    # blue: the cached rows (prompt + earlier steps), the MHA/GQA/MQA rows and the legend swatch
    cached_rows = sum(prompt + t - 1 for t in range(1, steps + 1))
    variants = sorted({H, Hkv, 1})
    assert len(patches_of(fig, PALETTE[0])) == cached_rows * layers * 2 * Hkv + 2 * sum(variants) + 1
    labels = texts(fig)
    B, E = kwargs.get("batch_size", 1), kwargs.get("head_dim", 64)
    assert f"K, V each (B, Hkv, S, E) = ({B}, {Hkv}, {prompt + steps}, {E})" in labels
    assert f"q (B, H, 1, E) = ({B}, {H}, 1, {E})" in labels
    b = kwargs.get("bytes_per_element", 2)
    assert f"K + V: 2 · {Hkv} · {E} = {2 * Hkv * E} values = {2 * Hkv * E * b:g} bytes" in labels
    assert sum(label.startswith("layer ") for label in labels) == layers
    assert_legible(fig)


@pytest.mark.parametrize("kwargs, error, words", [
    (dict(tokens="the cat sat on"), TypeError, "tokens must be a list or tuple of str"),
    (dict(tokens=["the", 2, "sat", "on"]), TypeError, "tokens[1] must be a str"),
    (dict(num_heads=8.0), TypeError, "num_heads must be an int"),
    (dict(prompt_len=True), TypeError, "prompt_len must be an int"),
    (dict(num_kv_heads=3), ValueError, "num_kv_heads must divide num_heads=8"),
    (dict(num_layers=4), ValueError, "num_layers must be an int in [1, 3], got 4"),
    (dict(prompt_len=6), ValueError, "1 to 4 decoding steps"),
    (dict(prompt_len=1), ValueError, "1 to 4 decoding steps"),
    (dict(tokens=list("abcdefghi"), prompt_len=6), ValueError, "at most 8 tokens"),
    (dict(bytes_per_element=0), ValueError, "bytes_per_element must be a number > 0"),
    (dict(head_dim=0), ValueError, "head_dim must be an int >= 1, got 0"),
])
def test_kv_cache_diagram_rejects_bad_arguments(kwargs, error, words):
    with pytest.raises(error) as info:
        kv_cache_diagram(**kwargs)
    assert words in str(info.value)


# ---------------------------------------------------------------- the tiling loop
def test_tiling_diagram_counts_and_shapes_for_the_default():
    fig = tiling_diagram()
    assert isinstance(fig, Figure)
    labels = texts(fig)
    assert len(causal_tiles(12, 12, 4, 4)) == 6
    assert "3 × 3 = 9 tiles: 6 computed (3 with a mask), 3 skipped" in labels
    assert sum("skip" in label for label in labels if label.startswith("(")) == 3
    assert "SRAM, on chip: program i = 2, at step j = 1" in labels  # the default: the last block's second tile
    assert any("Q_i (4, 64)" in label and "S_ij = Q_i K_jᵀ (4, 4)" in label for label in labels)
    assert any("m (4,)" in label and "ℓ (4,)" in label and "O (4, 64)" in label for label in labels)
    assert "Q (12, 64),  K and V (12, 64),  O (12, 64),  LSE (12,)" in labels
    assert any(label.startswith("ℓ ← exp(m − m_new) · ℓ") for label in labels)  # the rescaling
    # tile states: (2,1) now; (0,0), (1,0), (1,1), (2,0) done; (2,2) to do
    tiles = [label for label in labels if label.startswith("(")]
    assert [label for label in tiles if "now" in label] == ["(2,1)\nnow"]
    assert sorted(label for label in tiles if "done" in label) == ["(0,0)\ndone\nmask", "(1,0)\ndone",
                                                                   "(1,1)\ndone\nmask", "(2,0)\ndone"]
    assert "(2,2)\nmask" in tiles
    assert_legible(fig)


@pytest.mark.parametrize("args, kwargs", [
    ((10, 13, 4, 3), dict(head_dim=32, step=(1, 0))),
    ((16, 16, 4, 4), dict(is_causal=False, step=(3, 3))),
    ((8, 24, 2, 4), dict(is_causal=True, step=(0, 0))),
    ((5, 5, 5, 5), dict(head_dim=8)),
])
def test_tiling_diagram_labels_follow_the_arguments(args, kwargs):
    L, S, bq, bk = args
    causal = kwargs.get("is_causal", True)
    fig = tiling_diagram(*args, **kwargs)
    labels = texts(fig)
    n_i, n_j = -(-L // bq), -(-S // bk)
    computed = causal_tiles(L, S, bq, bk) if causal else [(i, j) for i in range(n_i) for j in range(n_j)]
    head = f"{n_i} × {n_j} = {n_i * n_j} tiles: {len(computed)} computed"
    assert any(label.startswith(head) for label in labels), head
    skipped = n_i * n_j - len(computed)
    assert any(label.endswith(f", {skipped} skipped") for label in labels) == causal
    if "step" in kwargs:
        i, j = kwargs["step"]
        assert f"SRAM, on chip: program i = {i}, at step j = {j}" in labels
        Bq, Bk = min(bq, L - i * bq), min(bk, S - j * bk)  # the last block may be shorter
        E = kwargs.get("head_dim", 64)
        assert any(f"Q_i ({Bq}, {E})" in label and f"({Bq}, {Bk})" in label for label in labels)
    # the skipped tiles are grey and hatched, one patch each
    assert len([p for p in patches_of(fig, "#BBBBBB") if p.get_hatch()]) == skipped
    assert len(patches_of(fig, PALETTE[1])) == 1  # one tile being computed
    assert_legible(fig)


@pytest.mark.parametrize("args, kwargs, error, words", [
    ((12.0, 12, 4, 4), {}, TypeError, "q_len must be an int"),
    ((12, 12, 0, 4), {}, ValueError, "block_q must be an int >= 1, got 0"),
    ((12, 28, 4, 4), {}, ValueError, "at most 6 key blocks"),
    ((30, 12, 4, 4), {}, ValueError, "at most 6 query blocks"),
    ((12, 12, 4, 4), dict(is_causal="yes"), TypeError, "is_causal must be a bool"),
    ((12, 12, 4, 4), dict(step=[1, 1]), TypeError, "step must be a tuple (i, j) of two ints"),
    ((12, 12, 4, 4), dict(step=(0, 2)), ValueError, "step must be one of the computed tiles"),
    ((12, 12, 4, 4), dict(step=(3, 0)), ValueError, "got (3, 0)"),
])
def test_tiling_diagram_rejects_bad_arguments(args, kwargs, error, words):
    with pytest.raises(error) as info:
        tiling_diagram(*args, **kwargs)
    assert words in str(info.value)


def test_the_math_does_not_import_the_diagrams():
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[2] / "attn_lib"
    for name in ("kv_cache", "tiled", "_tiling", "flash", "gqa", "attention"):
        tree = ast.parse((root / f"{name}.py").read_text(encoding="utf-8"))
        imported = [n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module]
        imported += [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
        assert "attn_lib.course.diagrams" not in imported, name
