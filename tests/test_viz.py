"""attn_lib.viz: heatmaps, the offline layer/head explorer and the bertviz wrappers."""

from __future__ import annotations

import re

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from attn_lib import viz  # noqa: E402


def _fake_attentions(layers=3, B=2, H=4, L=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.rand(B, H, L, L, generator=g).softmax(-1) for _ in range(layers))


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


# ---------------------------------------------------------------- plot_attention
def test_plot_attention_single_head_and_grid():
    w = torch.rand(3, 4).softmax(-1)
    fig = viz.plot_attention(w, ["a", "b", "c"], ["w", "x", "y", "z"], title="t", annotate=True)
    ax = fig.axes[0]
    torch.testing.assert_close(torch.as_tensor(ax.images[0].get_array()), w)  # rows = queries, columns = keys
    assert [t.get_text() for t in ax.get_xticklabels()] == ["w", "x", "y", "z"]
    assert ax.images[0].get_cmap().name == "viridis"
    grid = viz.plot_attention(torch.rand(2, 3, 4, 4), list("abcd"))
    assert len(grid.axes) == 6
    with pytest.raises(ValueError, match="3 queries x 4 keys but 2 query tokens"):
        viz.plot_attention(w, ["a", "b"], ["w", "x", "y", "z"])


# ---------------------------------------------------------------- explorer logic
def test_attention_stack_picks_one_sentence():
    att = _fake_attentions()
    stack = viz.attention_stack(att, batch_index=1)
    assert stack.shape == (3, 4, 5, 5) and stack.dtype == torch.float32
    torch.testing.assert_close(stack[2], att[2][1])
    # a (layers, H, L, S) tensor is accepted as is: the same values back, as float32 on the CPU
    same = viz.attention_stack(stack.double())
    assert same.dtype == torch.float32 and torch.equal(same, stack)


@pytest.mark.parametrize("bad, match", [
    ((), "attn_implementation='eager'"),
    (None, "attn_implementation='eager'"),
    ((torch.rand(4, 5, 5),), r"attentions\[0\] must be \(B, H, L, S\); got shape \(4, 5, 5\)"),
    ((torch.rand(1, 4, 5, 5), torch.rand(1, 4, 6, 6)), r"attentions\[1\] has shape \(1, 4, 6, 6\)"),
])
def test_attention_stack_errors(bad, match):
    with pytest.raises(ValueError, match=match):
        viz.attention_stack(bad)


def test_attention_stack_batch_index_out_of_range():
    with pytest.raises(ValueError, match="batch_index 2 .* batch size 2"):
        viz.attention_stack(_fake_attentions(), batch_index=2)


def test_select_head_and_options():
    stack = viz.attention_stack(_fake_attentions())
    torch.testing.assert_close(viz.select_head(stack, 1, 3), stack[1, 3])
    torch.testing.assert_close(viz.select_head(stack, 2, None), stack[2].mean(0))
    with pytest.raises(ValueError, match=r"layer must be in 0..2, got 3"):
        viz.select_head(stack, 3, 0)
    with pytest.raises(ValueError, match=r"head must be None .* 0..3, got 4"):
        viz.select_head(stack, 0, 4)
    options = viz.head_options(4)
    assert options[0] == ("mean of heads", None) and options[1:] == [(f"head {h}", h) for h in range(4)]


def test_explorer_figure_shows_the_selected_head():
    stack = viz.attention_stack(_fake_attentions())
    tokens = list("abcde")
    fig = viz.explorer_figure(stack, tokens, 2, 1)
    torch.testing.assert_close(torch.as_tensor(fig.axes[0].images[0].get_array()), stack[2, 1])
    assert fig.axes[0].get_title() == "layer 2, head 1"
    fig = viz.explorer_figure(stack, tokens, 0, None)
    assert fig.axes[0].get_title() == "layer 0, mean of heads"


def test_attention_explorer_wires_widgets(monkeypatch):
    import ipywidgets

    shown = []
    real = viz.explorer_figure
    monkeypatch.setattr(viz, "explorer_figure", lambda *a, **k: shown.append(a[2:4]) or real(*a, **k))
    monkeypatch.setattr("IPython.display.display", lambda *a, **k: None)
    box = viz.attention_explorer(_fake_attentions(), list("abcde"))
    assert isinstance(box, ipywidgets.VBox)
    layer_w, head_w = box.children[0].children
    assert (layer_w.min, layer_w.max) == (0, 2)
    assert len(head_w.options) == 5
    assert shown == [(0, 0)]  # drawn once at creation, layer 0 head 0
    layer_w.value = 2
    head_w.value = None
    assert shown == [(0, 0), (2, 0), (2, None)]  # each change redraws with the new selection
    with pytest.raises(ValueError, match="5 queries x 5 keys but 4 query tokens"):
        viz.attention_explorer(_fake_attentions(), list("abcd"))


# ---------------------------------------------------------------- bertviz wrappers
@pytest.mark.parametrize("view", [viz.head_view, viz.model_view])
def test_bertviz_wrappers_validate_input(view):
    with pytest.raises(ValueError, match="attn_implementation='eager'"):
        view((), ["a"])
    with pytest.raises(ValueError, match="5 queries x 5 keys but 4 query tokens"):
        view(_fake_attentions(B=1), list("abcd"))
    with pytest.raises(ValueError, match="html_action"):
        view(_fake_attentions(B=1), list("abcde"), html_action="save")


@pytest.mark.parametrize("view", [viz.head_view, viz.model_view])
def test_bertviz_wrappers_return_html_with_the_weights(view):
    att = _fake_attentions(layers=2, B=1, H=2, L=3)
    html = view(att, ["[CLS]", "fox", "[SEP]"], html_action="return").data
    ids = re.findall(r"bertviz-[0-9a-f]+", html)
    assert ids and all(re.fullmatch(r"bertviz-[0-9a-f]{32}", i) for i in ids)  # uuid4().hex, what nbval_sanitize.cfg replaces
    assert '"fox"' in html
    first_row = [round(float(x), 4) for x in att[0][0, 0, 0]]
    numbers = [float(x) for x in re.findall(r"-?\d+\.\d+(?:e-?\d+)?", html.split('"attn":', 1)[1][:400])]
    assert numbers[:3] == first_row  # the weights of layer 0, head 0, query 0 are in the page (4 decimals)


def test_bertviz_id_is_sanitized_by_nbval_config():
    import configparser

    from attn_lib import REPO_ROOT

    html = viz.head_view(_fake_attentions(layers=1, B=1, H=1, L=2), ["a", "b"], html_action="return").data
    text = (REPO_ROOT / "nbval_sanitize.cfg").read_text()
    parser = configparser.ConfigParser()
    parser.read_string(text)
    rules = [(parser[s]["regex"], parser[s]["replace"]) for s in parser.sections()]
    for regex, replace in rules:
        html = re.sub(regex, replace, html)
    assert "bertviz-ID" in html and not re.search(r"bertviz-[0-9a-f]{8}", html)


def test_wrappers_on_the_real_model(pretrained):
    tokenizer, model = pretrained
    enc = tokenizer("The quick brown fox jumps over the lazy dog.", return_tensors="pt")
    with torch.no_grad():
        out = model(**enc, output_attentions=True)
    tokens = tokenizer.convert_ids_to_tokens(enc["input_ids"][0])
    html = viz.model_view(out.attentions, tokens, html_action="return").data
    assert '"fox"' in html and '"[CLS]"' in html
    stack = viz.attention_stack(out.attentions)
    assert stack.shape == (6, 12, len(tokens), len(tokens))


def test_bertviz_views_wait_for_require_js():
    """bertviz's own HTML calls require() before the CDN's require.js has loaded in JupyterLab (blank view);
    ours retries until it exists, and keeps bertviz's script whole inside the wrapper."""
    import re

    import torch
    from bertviz import head_view as bertviz_head_view

    from attn_lib.viz import head_view, model_view

    att = tuple(torch.softmax(torch.randn(1, 2, 3, 3), -1) for _ in range(2))
    ours = head_view(att, ["a", "b", "c"], html_action="return").data
    theirs = bertviz_head_view([a.round(decimals=4) for a in att], ["a", "b", "c"], html_action="return").data
    assert "typeof require === 'undefined'" in ours and "typeof require" not in theirs
    # bertviz's whole inline script (its D3 code and its config) sits inside the retry wrapper
    inner = ours.split("return; }\n", 1)[1].rsplit("\n})();", 1)[0]
    assert "Transformer Visualization D3 javascript code" in inner
    # bertviz's params (the weights and tokens it draws) are inside our wrapper, as in bertviz's own HTML
    assert re.search(r'const params = \{"attention": \[', theirs)
    assert re.search(r'const params = \{"attention": \[', inner)
    assert len(ours) - len(theirs) < 200  # only the wrapper was added
    assert "typeof require === 'undefined'" in model_view(att, ["a", "b", "c"], html_action="return").data


def test_plot_attention_and_head_options_refuse_bad_input_by_name():
    import matplotlib.pyplot as plt

    w = torch.softmax(torch.randn(2, 3), -1)
    cases = [
        ((w, None), {}, TypeError, "tokens must be a list of str .* got NoneType None"),
        ((w, ["a", "b"], ["x", "y", "z"]), {"vmax": "auto"}, TypeError, "vmax must be a number >= 0.0, got str 'auto'"),
        ((torch.zeros(0, 0), []), {}, ValueError, r"at least one query and one key, got shape \(0, 0\)"),
        ((w.masked_fill(w > 0.4, float("nan")), ["a", "b"], ["x", "y", "z"]), {}, ValueError, "NaN or infinite"),
        ((w - 1, ["a", "b"], ["x", "y", "z"]), {}, ValueError, "weights must be >= 0 .* got a minimum of"),
        ((w, ["a", "b"], ["x", "y", "z"]), {"vmax": 0}, ValueError, "vmax must be a number > 0"),
    ]
    for args, kwargs, error, match in cases:
        with pytest.raises(error, match=match):
            viz.plot_attention(*args, **kwargs)
    fig, axes = plt.subplots(1, 2)
    with pytest.raises(TypeError, match=r"ax must be one matplotlib Axes \(e.g. axes\[0\] of plt.subplots\(1, 2\)\), got list"):
        viz.plot_attention(w, ["a", "b"], ["x", "y", "z"], ax=list(axes))
    assert viz.plot_attention(w, ["a", "b"], ["x", "y", "z"], ax=axes[0]) is fig
    plt.close("all")
    with pytest.raises(ValueError, match="num_heads must be an int >= 1, got 0"):
        viz.head_options(0)


def test_palette_and_colour_maps_are_public_in_viz_and_defined_once():
    from attn_lib import _setup

    assert viz.PALETTE is _setup.PALETTE and len(viz.PALETTE) == 8 and viz.PALETTE[0] == "#0072B2"  # Okabe-Ito blue
    assert (viz.SEQUENTIAL_CMAP, viz.DIVERGING_CMAP) == ("viridis", "PuOr")
