"""attn_lib.course.diagrams: the drawn schematics (#27 §2) return Figures whose labels carry the shapes of their
arguments, whose text is never smaller than ``MIN_FONT_SIZE`` nor overlapping nor clipped at the notebooks'
110 dpi, whose colours come from the palette, and whose bad arguments raise attn_lib's TypeError/ValueError.

Tests of the figures of notebooks 03-05 are named ``test_nb03_``..``test_nb05_``; those of 08-09 ``test_nb08_``...
"""

from __future__ import annotations

import itertools

import matplotlib

matplotlib.use("Agg")

import matplotlib.colors as mcolors  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.text import Text  # noqa: E402

from attn_lib.course import diagrams  # noqa: E402
from attn_lib.course.style import PALETTE  # noqa: E402

DPI = 110  # attn_lib.setup()'s figure.dpi: the size the notebooks show


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def _texts(fig) -> list[Text]:
    return [t for t in fig.findobj(Text) if t.get_visible() and t.get_text().strip()]


def _strings(fig) -> str:
    return "\n".join(t.get_text() for t in _texts(fig))


def _assert_readable(fig):
    """Every text >= MIN_FONT_SIZE, inside the figure, and no two texts overlapping (at 110 dpi)."""
    fig.set_dpi(DPI)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    texts = _texts(fig)
    assert texts
    small = [(t.get_text(), t.get_fontsize()) for t in texts if t.get_fontsize() < diagrams.MIN_FONT_SIZE]
    assert not small, small
    boxes = [(t.get_text(), t.get_window_extent(renderer)) for t in texts]
    page = fig.bbox
    clipped = [s for s, b in boxes if b.x0 < page.x0 - 0.5 or b.y0 < page.y0 - 0.5
               or b.x1 > page.x1 + 0.5 or b.y1 > page.y1 + 0.5]
    assert not clipped, clipped
    overlapping = [(a, b) for (a, ba), (b, bb) in itertools.combinations(boxes, 2)
                   if ba.x0 < bb.x1 - 1 and bb.x0 < ba.x1 - 1 and ba.y0 < bb.y1 - 1 and bb.y0 < ba.y1 - 1]
    assert not overlapping, overlapping[:5]


def _assert_palette_colours(fig):
    """Every coloured patch edge is a PALETTE colour (grey and white fills aside)."""
    allowed = {mcolors.to_hex(c) for c in PALETTE} | {"#ffffff", "#e8e8e8"}
    seen = set()
    for patch in fig.findobj(matplotlib.patches.Patch):
        if patch is fig.patch or not patch.get_visible():
            continue
        for colour in (patch.get_edgecolor(), patch.get_facecolor()):
            if colour[3] > 0:
                seen.add(mcolors.to_hex(colour[:3]))
    assert seen, "no coloured patches"
    assert seen <= allowed, seen - allowed


# ------------------------------------------------------------------ notebook 03: the Q/K/V data flow
def test_nb03_qkv_flow_labels_carry_the_shapes_of_the_arguments():
    fig = diagrams.qkv_flow_figure(seq_len=5, d_model=6, d_k=3, d_v=2)
    assert isinstance(fig, Figure)
    text = _strings(fig)
    for shape in ("(5, 6)", "(6, 3)", "(6, 2)", "(5, 3)", "(5, 2)", "(5, 5)", "(L, d_model)", "(L, E)", "(S, E)",
                  "(S, Ev)", "(L, Ev)", "Q Kᵀ / √E", "softmax (keys)", "weights @ V"):
        assert shape in text, shape
    assert "(7, 8)" not in text  # the defaults' numbers are gone
    default = _strings(diagrams.qkv_flow_figure())
    assert "(7, 8)" in default and "(8, 4)" in default and "(7, 7)" in default


def test_nb03_qkv_flow_is_readable_and_in_the_palette():
    for kwargs in ({}, {"seq_len": 9999, "d_model": 9999, "d_k": 9999, "d_v": 9999}):
        fig = diagrams.qkv_flow_figure(**kwargs)
        _assert_readable(fig)
        _assert_palette_colours(fig)


@pytest.mark.parametrize("kwargs, error, words", [
    ({"seq_len": "7"}, TypeError, "seq_len must be an int"),
    ({"d_k": 2.0}, TypeError, "d_k must be an int"),
    ({"d_model": 0}, ValueError, "d_model must be an int"),
    ({"seq_len": 10_000}, ValueError, r"seq_len must be an int in \[1, 9999\]"),
    ({"d_v": -1}, ValueError, "d_v must be an int"),
    ({"seq_len": True}, TypeError, "seq_len"),
])
def test_nb03_qkv_flow_bad_arguments(kwargs, error, words):
    with pytest.raises(error, match=words):
        diagrams.qkv_flow_figure(**kwargs)


# ------------------------------------------------------------------ notebook 04: the mask shapes
def _panel_arrays(fig) -> dict[str, torch.Tensor]:
    return {ax.get_title(): torch.as_tensor(ax.images[0].get_array().data).bool() for ax in fig.axes if ax.images}


def test_nb04_mask_shapes_draw_the_right_cells():
    lengths = (5, 3, 1)
    fig = diagrams.mask_shapes_figure(lengths)
    assert isinstance(fig, Figure)
    panels = _panel_arrays(fig)
    S = 5
    lower = torch.ones(S, S).tril().bool()  # j <= i, computed here without attn_lib
    real = torch.arange(S)[None, :] < torch.tensor(lengths)[:, None]  # (B, S)
    assert torch.equal(panels["causal_mask(L, S): (5, 5)"], lower)
    assert torch.equal(panels["padding_mask(lengths): (3, 5), 1 = real"], real)
    for b in range(3):
        assert torch.equal(panels[f"padding as (B, 1, L, S), b = {b}"], real[b].expand(S, S))
        assert torch.equal(panels[f"padding & causal, b = {b}"], lower & real[b])
    text = _strings(fig)
    assert "1 = True = may attend / real token" in text and "B = 3, L = S = 5" in text


def test_nb04_mask_shapes_is_readable_and_in_the_palette():
    for lengths in ((4, 2), (1,), (8, 8, 3)):
        fig = diagrams.mask_shapes_figure(lengths)
        _assert_readable(fig)
    cmap = fig.axes[0].images[0].get_cmap()
    assert mcolors.to_hex(cmap(1.0)) == mcolors.to_hex(PALETTE[0])  # True cells: the palette's blue


@pytest.mark.parametrize("lengths, error, words", [
    ("4, 2", TypeError, "lengths must be a list or tuple"),
    ((4, 2.0), TypeError, r"lengths\[1\] must be an int"),
    ((), ValueError, "1 to 3 lengths"),
    ((1, 2, 3, 4), ValueError, "1 to 3 lengths"),
    ((4, -1), ValueError, r"lengths\[1\] must be an int >= 0"),
    ((9, 2), ValueError, r"longest of lengths must be in \[1, 8\].*got 9"),
    ((0, 0), ValueError, r"longest of lengths must be in \[1, 8\].*got 0"),
])
def test_nb04_mask_shapes_bad_arguments(lengths, error, words):
    with pytest.raises(error, match=words):
        diagrams.mask_shapes_figure(lengths)


# ------------------------------------------------------------------ notebook 05: heads and blocks
def test_nb05_head_split_shows_head_dim_and_the_shapes():
    text = _strings(diagrams.head_split_figure(d_model=8, num_heads=2))
    assert "E = d_model / H = 8 / 2 = 4" in text
    for shape in ("= (1, 3, 8)", "= (1, 3, 2, 4)", "= (1, 2, 3, 4)", "H·E = 2·4 = 8 = d_model", "head 0", "head 1"):
        assert shape in text, shape
    assert "head 2" not in text
    text = _strings(diagrams.head_split_figure(d_model=12, num_heads=3, tokens=["the", "cat"]))
    assert "E = d_model / H = 12 / 3 = 4" in text and "= (1, 3, 2, 4)" in text and "head 2" in text


def test_nb05_head_split_gives_head_h_features_h_times_E_onwards():
    fig = diagrams.head_split_figure(d_model=6, num_heads=3)
    fig.canvas.draw()
    labels = {t.get_text(): t for t in _texts(fig)}
    # the cells are the values of x = arange(L * d_model).view(1, L, d_model), L = 3, d_model = 6, E = 2: on the
    # left token i's row holds 6i .. 6i + 5; right of "head h" (its middle row, token 1) sit x[0, 1, 2h:2h + 2],
    # and head h's block as a whole is exactly what split_heads gives it
    from attn_lib.mha import split_heads

    x = torch.arange(18).view(1, 3, 6)
    heads = split_heads(x, 3)  # (1, 3, 3, 2)
    cells = [t for t in _texts(fig) if t.get_text().isdigit()]
    assert sorted(int(t.get_text()) for t in cells) == sorted(list(range(18)) * 3)  # every value once per stage
    column = next(t for t in _texts(fig) if t.get_text().startswith("(B, H, L, E)")).get_position()[0]
    for h in range(3):
        band = labels[f"head {h}"].get_position()[1]
        row = sorted({int(t.get_text()) for t in cells
                      if abs(t.get_position()[1] - band) < 1.0 and abs(t.get_position()[0] - column) < 1.1})
        assert row == heads[0, h, 1].tolist() == [6 + 2 * h, 7 + 2 * h], (h, row)
        block = sorted({int(t.get_text()) for t in cells
                        if abs(t.get_position()[1] - band) < 2.0 and abs(t.get_position()[0] - column) < 1.1})
        assert block == sorted(heads[0, h].flatten().tolist()), (h, block)


def test_nb05_head_split_is_readable_and_in_the_palette():
    for kwargs in ({}, {"d_model": 12, "num_heads": 6, "tokens": ("a", "b", "c", "d")}, {"d_model": 1, "num_heads": 1}):
        fig = diagrams.head_split_figure(**kwargs)
        _assert_readable(fig)
        _assert_palette_colours(fig)
        assert fig.get_size_inches()[0] <= 8.6 + 1e-9


@pytest.mark.parametrize("kwargs, error, words", [
    ({"d_model": 8, "num_heads": 3}, ValueError, "num_heads must divide d_model: d_model=8 .* num_heads=3"),
    ({"d_model": "8"}, TypeError, "d_model must be an int"),
    ({"num_heads": 0}, ValueError, "num_heads must be an int"),
    ({"d_model": 16, "num_heads": 2}, ValueError, r"d_model must be an int in \[1, 12\], got 16"),
    ({"tokens": "the cat"}, TypeError, "tokens must be a list or tuple of str"),
    ({"tokens": ()}, ValueError, "1 to 4 labels"),
])
def test_nb05_head_split_bad_arguments(kwargs, error, words):
    with pytest.raises(error, match=words):
        diagrams.head_split_figure(**kwargs)


def test_nb05_transformer_block_puts_layernorm_where_each_variant_does():
    fig = diagrams.transformer_block_figure(d_model=512, d_ff=2048)
    assert isinstance(fig, Figure)
    text = _strings(fig)
    assert "512 → 2048 → 512" in text and "384" not in text
    assert "post-LN: h = LayerNorm(x + F(x))" in text and "pre-LN: h = x + F(LayerNorm(x))" in text
    assert "Xiong et al. (2020)" in text and "On Layer Normalization in the Transformer Architecture" in text
    middle = fig.get_size_inches()[0] / 2  # post-LN on the left, pre-LN on the right (axes in inches)

    def heights(label, right):
        return sorted(t.get_position()[1] for t in _texts(fig)
                      if t.get_text().replace("\n", " ").startswith(label) and (t.get_position()[0] > middle) == right)

    for right in (False, True):
        assert len(heights("LayerNorm", right)) == 2 and len(heights("multi-head", right)) == 1
        assert len(heights("feed-forward", right)) == 1 and len(heights("+", right)) == 2
    # post-LN: attention, then its LayerNorm; pre-LN: a LayerNorm first, under the attention
    assert heights("multi-head", False)[0] < heights("LayerNorm", False)[0]
    assert heights("LayerNorm", True)[0] < heights("multi-head", True)[0]
    assert heights("LayerNorm", True)[1] < heights("feed-forward", True)[0]  # and under the FFN
    assert heights("feed-forward", False)[0] < heights("LayerNorm", False)[1]


def test_nb05_transformer_block_is_readable_and_in_the_palette():
    fig = diagrams.transformer_block_figure()
    _assert_readable(fig)
    _assert_palette_colours(fig)


@pytest.mark.parametrize("kwargs, error, words", [
    ({"d_model": 384.0}, TypeError, "d_model must be an int"),
    ({"d_ff": 0}, ValueError, "d_ff must be an int"),
])
def test_nb05_transformer_block_bad_arguments(kwargs, error, words):
    with pytest.raises(error, match=words):
        diagrams.transformer_block_figure(**kwargs)


def test_nb03_diagrams_import_no_plotting_until_drawn():
    """Importing attn_lib.course.diagrams costs no matplotlib import of its own: figures import on use."""
    import ast
    from pathlib import Path

    tree = ast.parse(Path(diagrams.__file__).read_text(encoding="utf-8"))
    top = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    names = [n.module if isinstance(n, ast.ImportFrom) else n.names[0].name for n in top]
    assert not any(str(m).startswith("matplotlib") for m in names), names


def test_plot_groups_draws_one_line_per_query_head():
    from attn_lib.course.diagrams import plot_groups

    ax = plot_groups(32, 8)
    assert len(ax.lines) == 32 and "GQA" in ax.get_title()
    assert "MQA" in plot_groups(8, 1).get_title() and "MHA" in plot_groups(4, 4).get_title()
    import matplotlib.pyplot as plt

    plt.close("all")


# ----------------------------------------------------------------------------- notebook 11: Gemma 4's stack
def test_nb11_kv_sharing_figure_draws_who_reuses_whose_keys():
    fig = diagrams.kv_sharing_figure()
    text = _strings(fig)
    assert "layer 3 · window · own queries, K and V of layer 1" in text  # the last earlier window layer
    assert "layer 4 · global · own queries, K and V of layer 2" in text
    assert "layer 2 · global · V from K's projection (k_eq_v)" in text
    assert "layer 0 · window · own K, V" in text
    _assert_readable(fig)
    _assert_palette_colours(fig)
    plain = _strings(diagrams.kv_sharing_figure(["sliding_attention", "full_attention"], 0, k_eq_v=False))
    assert "reused" not in plain and "k_eq_v" not in plain


@pytest.mark.parametrize("args,kwargs,error,words", [
    ((["full"],), {}, ValueError, "layer_types must be"),
    ((["full_attention"], 1), {}, ValueError, r"num_kv_shared_layers must be in \[0, 0\]"),
    ((["sliding_attention", "full_attention"], 1), {}, ValueError, "layer 1 \\(full_attention\\) shares K/V but no earlier"),
    ((["full_attention"], 0), dict(k_eq_v=1), TypeError, "k_eq_v"),
])
def test_nb11_kv_sharing_figure_bad_arguments(args, kwargs, error, words):
    with pytest.raises(error, match=words):
        diagrams.kv_sharing_figure(*args, **kwargs)


# ----------------------------------------------------------------- notebooks 11 and 12: the drawn pipelines
@pytest.mark.parametrize("name,words", [
    ("mla_decode_figure", ["cache c_KV\nS × r", "× W_UKᵀ\nH × r", "attend to c_KV itself\none shared head (MQA)",
                           "× W_UV\nH × dv"]),
    ("dsa_pipeline_figure", ["lightning indexer", "k = 2048 positions", "gather k latents", "k_I per token"]),
    ("delta_rule_figure", ["predict\nv̂ = Sᵀ k_t", "error\nv_t − v̂", "write\nS + β_t k_t (v_t − v̂)ᵀ"]),
    ("chunked_form_figure", ["chunk 0: tokens 0–3", "chunk 2: tokens 8–11", "S after 1"]),
    ("hybrid_stack_figure", ["× 12\n= 48 layers", "one group of 4 layers (3:1)", "KV cache: grows"]),
    ("gated_attention_figure", ["q_proj: per head\nquery | gate logits", "σ(gate logits)", "× σ(gate)\nper channel"]),
])
def test_nb11_nb12_pipeline_figures_say_what_they_draw_and_are_readable(name, words):
    fig = getattr(diagrams, name)()
    text = _strings(fig)
    for w in words:
        assert w in text, (name, w)
    _assert_readable(fig)
    _assert_palette_colours(fig)


def test_nb11_nb12_one_colour_per_design():
    """MLA's boxes are blue in both MLA figures; the linear family reddish purple; gated attention not GQA's orange."""
    def edge_colours(fig):
        return {mcolors.to_hex(p.get_edgecolor()[:3]) for p in fig.findobj(matplotlib.patches.FancyBboxPatch)
                if p.get_facecolor()[3] == 0}
    blue, orange, purple, sky = (mcolors.to_hex(PALETTE[i]) for i in (0, 1, 3, 4))
    assert edge_colours(diagrams.mla_decode_figure()) == {blue}
    assert blue in edge_colours(diagrams.dsa_pipeline_figure())
    assert edge_colours(diagrams.delta_rule_figure()) == {purple}
    assert edge_colours(diagrams.hybrid_stack_figure()) == {purple, sky}  # not orange, the plain-GQA colour
    assert orange not in edge_colours(diagrams.hybrid_stack_figure())
    assert edge_colours(diagrams.gated_attention_figure()) == {sky, mcolors.to_hex(PALETTE[7])}  # x in black
    with pytest.raises(ValueError, match="chunk must be <= seq_len=3, got 4"):
        diagrams.chunked_form_figure(3, 4)
    with pytest.raises(TypeError, match="topk"):
        diagrams.dsa_pipeline_figure(2.5)
# ---------------------------------------------------------------------------------------------------------------
# notebook 13: which keys each query reads
# ---------------------------------------------------------------------------------------------------------------
def test_nb13_key_reads_figure_draws_the_codes_in_the_palette_and_refuses_bad_codes():
    import matplotlib.pyplot as plt
    import torch

    from attn_lib.course.diagrams import key_reads_figure
    from attn_lib.course.style import MASK_COLORS, PALETTE

    codes = torch.tensor([[1, 0, 0], [1, 2, 0], [0, 2, 1]])
    fig = key_reads_figure([("a", codes), ("b", codes.clamp(max=1))], labels=["chosen", "window"], columns=2)
    try:
        images = [im for ax in fig.axes for im in ax.get_images()]
        assert len(images) == 2 and (images[0].get_array() == codes.numpy()).all()
        assert [c.lower() for c in images[0].get_cmap().colors] == [c.lower() for c in [MASK_COLORS[0], *PALETTE[:2]]]
        legend = [t.get_text() for t in fig.legends[0].get_texts()]
        assert legend == ["chosen", "window", "not read"]
    finally:
        plt.close(fig)
    with pytest.raises(ValueError, match="must lie in \\[0, 2\\]"):
        key_reads_figure([("bad", codes + 1)], labels=["chosen", "window"])
    with pytest.raises(ValueError, match="at least one"):
        key_reads_figure([], labels=["x"])
