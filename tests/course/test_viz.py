"""attn_lib.course.viz: heatmaps, the offline layer/head explorer and the bertviz wrappers."""

from __future__ import annotations

import re

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from attn_lib.course import viz  # noqa: E402


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


# ---------------------------------------------------------------- bertviz with no network
# URLs that may appear in an offline page: XML namespace names d3 uses (never fetched) and the
# libraries' homepages in their copyright notices. Anything else would be something to fetch.
_NOT_FETCHED = {
    "http://www.w3.org/1999/xhtml", "http://www.w3.org/1999/xlink", "http://www.w3.org/2000/svg",
    "http://www.w3.org/2000/xmlns/", "http://www.w3.org/XML/1998/namespace",
    "https://d3js.org", "https://jquery.org/", "https://github.com/jquery/jquery",
}


def _urls(html: str) -> set[str]:
    return set(re.findall(r"(?:https?|ftp)://[^\s\"'<>)`]+", html))


@pytest.mark.parametrize("view", [viz.head_view, viz.model_view])
def test_bertviz_page_ships_its_scripts_and_asks_no_network(view):
    from bertviz.head_view import head_view as bertviz_head_view

    att = _fake_attentions(layers=2, B=1, H=2, L=3)
    html = view(att, ["a", "b", "c"], html_action="return").data
    # bertviz's own page asks cdnjs for require.js, d3 and jQuery: the thing this rewrite removes
    theirs = bertviz_head_view([a.double().round(decimals=4) for a in att], ["a", "b", "c"], html_action="return").data
    assert "cdnjs.cloudflare.com" in theirs and "require.config" in theirs
    assert "cdnjs" not in html and "require.config" not in html
    assert not re.search(r"""(src|href)\s*=\s*["']?\s*(https?:)?//""", html)  # no external script or link
    assert _urls(html) <= _NOT_FETCHED, _urls(html) - _NOT_FETCHED
    # the shipped libraries are inlined whole, with their licence texts
    for script, licence in [("d3-5.7.0.min.js", "LICENSE-d3.txt"), ("jquery-2.2.4.min.js", "LICENSE-jquery.txt")]:
        assert (viz.STATIC_DIR / script).read_text() in html
        first_line = (viz.STATIC_DIR / licence).read_text().splitlines()[0]
        assert first_line in html
    # bertviz's drawing code and the weights are still there, inside one inline script
    assert html.count('<script type="text/javascript">') == 1 and "<script src" not in html
    assert ("headAttention" in html) == (view is viz.head_view)
    assert "const params = {" in html


@pytest.mark.parametrize("view", [viz.head_view, viz.model_view])
def test_bertviz_page_scrolls_instead_of_clipping(view):
    """A page caps an output's SVG at its width (JupyterLab, the website); the model view's thumbnails have fixed
    sizes, so the cap cut off the right-hand heads at 1366 px: the view's SVG is exempt and its box scrolls.
    tests_browser/test_views_on_open.py measures it in JupyterLab."""
    html = view(_fake_attentions(layers=2, B=1, H=2, L=3), ["a", "b", "c"], html_action="return").data
    root = re.search(r'<div id="(bertviz-[0-9a-f]+)"', html).group(1)
    assert html.startswith('<div class="attn-lib-bertviz" style="max-width: 100%; overflow-x: auto;">')
    assert f"#{root} svg {{ max-width: none !important; }}" in html and html.endswith("</div>")


def test_offline_page_refuses_a_page_it_does_not_know():
    with pytest.raises(ValueError, match="not a bertviz 1.4 page"):
        viz.offline_page("<div>hello</div>")


def test_static_package_data_is_declared():
    """The inlined libraries must ship with attn_lib (pip install of the package, not only the repo)."""
    import tomllib

    from attn_lib import REPO_ROOT

    data = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["attn_lib"]
    shipped = {p.name for p in viz.STATIC_DIR.iterdir()}
    import fnmatch

    assert shipped and all(any(fnmatch.fnmatch(f"course/static/{name}", pat) for pat in data) for name in shipped)


def _displayed(monkeypatch):
    import IPython.display

    shown = []
    monkeypatch.setattr(IPython.display, "display", lambda obj: shown.append(obj))
    return shown


def _panel(fig, r, c, L):
    """Panel (r, c) of a mosaic figure: its one image, cut at the blank pixel between panels."""
    [image] = fig.axes[0].images
    grid = torch.as_tensor(image.get_array().filled(float("nan")))
    return grid[r * (L + 1): r * (L + 1) + L, c * (L + 1): c * (L + 1) + L]


def test_head_view_is_followed_by_a_static_figure_of_the_same_layer(monkeypatch):
    from IPython.display import HTML

    shown = _displayed(monkeypatch)
    att = _fake_attentions(layers=3, B=2, H=4, L=5)
    tokens = list("abcde")
    viz.head_view(att, tokens, batch_index=1, layer=2, heads=[1, 3, 0])
    assert [type(o) for o in shown] == [HTML, matplotlib.figure.Figure]
    fig = shown[1]
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert texts == ["head 1", "head 3", "head 0"] and "layer 2" in fig.axes[0].get_title()
    for c, h in enumerate([1, 3, 0]):  # the panels are the selected layer's heads, of sentence 1
        assert torch.allclose(_panel(fig, 0, c, 5).float(), att[2][1, h])
    grid, labels = viz.head_view_panels(att, tokens, layer=0, batch_index=1, max_columns=3)
    assert grid.shape == (2, 3, 5, 5) and labels == [["head 0", "head 1", "head 2"], ["head 3", "", ""]]
    assert torch.equal(grid[1, 0], att[0][1, 3]) and grid[1, 1:].isnan().all()  # 4 heads, 3 per row
    shown.clear()
    viz.head_view(att, tokens, static=False)
    assert [type(o) for o in shown] == [HTML]


def test_model_view_is_followed_by_a_grid_of_every_layer_and_head(monkeypatch):
    shown = _displayed(monkeypatch)
    att = _fake_attentions(layers=3, B=1, H=2, L=4)
    viz.model_view(att, list("abcd"), include_layers=[0, 2])
    fig = shown[1]
    assert [t.get_text() for t in fig.axes[0].texts if t.get_text()] == ["head 0", "head 1", "layer 0", "layer 2"]
    assert torch.allclose(_panel(fig, 1, 1, 4).float(), att[2][0, 1])  # row 1 = layer 2, column 1 = head 1
    assert torch.allclose(_panel(fig, 0, 0, 4).float(), att[0][0, 0])


@pytest.mark.slow
def test_bertviz_called_directly_is_offline_after_setup():
    """A learner's own ``from bertviz import head_view`` after ``attn_lib.setup()`` (fresh interpreter:
    bertviz not imported yet, so the import hook patches it)."""
    import subprocess
    import sys

    from attn_lib import REPO_ROOT

    code = (
        "import sys, torch, attn_lib\n"
        "attn_lib.setup()\n"
        "assert 'bertviz' not in sys.modules\n"
        "from bertviz import head_view, model_view\n"
        "att = [torch.rand(1, 2, 3, 3).softmax(-1)]\n"
        "for view in (head_view, model_view):\n"
        "    html = view(att, ['a', 'b', 'c'], html_action='return').data\n"
        "    assert 'cdnjs' not in html and 'attnLibModules' in html, view\n"
        "import bertviz\n"
        "assert bertviz.head_view is head_view\n"
        "attn_lib.setup()\n"  # a second setup() leaves the patched function alone
        "assert bertviz.head_view is head_view\n"
        "print('ok')\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       cwd=REPO_ROOT, env={**__import__("os").environ, "PYTHONPATH": str(REPO_ROOT)})
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr[-2000:]


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
    from attn_lib.course import _setup, style

    assert viz.PALETTE is _setup.PALETTE is style.PALETTE and len(viz.PALETTE) == 8 and viz.PALETTE[0] == "#0072B2"  # Okabe-Ito blue
    assert (viz.SEQUENTIAL_CMAP, viz.DIVERGING_CMAP) == ("viridis", "PuOr")


# ------------------------------------------------------------------ notebook 05's step-by-step matrices
def _texts(fig):
    return [t.get_text() for t in fig.axes[0].texts]


def test_matrix_steps_figure_prints_every_number_and_colours_the_heads():
    from matplotlib.colors import to_hex

    x = torch.tensor([[1.0, 0, 0], [0, 1, 1], [0, 1, 0]])
    w = torch.tensor([[0.25, 1.5, 0, 2], [1, 0, 0.5, 0], [0, 0, 1, 1]])
    fig = viz.matrix_steps_figure([[{"name": "x", "values": x, "rows": ["the", "cat", "sat"]}, "@",
                                    {"name": "W", "values": w, "heads": 2}]], title="step")
    texts = _texts(fig)
    assert texts[0] == "step" and "x" in texts and "W" in texts and "@" in texts
    assert {"the", "cat", "sat"} <= set(texts)
    numbers = [t for t in texts if t[:1].isdigit()]
    assert numbers.count("1") == 3 + 4 and "0.25" in numbers and "1.50" in numbers and "0.50" in numbers
    assert len(numbers) == 9 + 12  # one number per cell
    faces = [to_hex(p.get_facecolor(), keep_alpha=False) for p in fig.axes[0].patches]
    assert faces[:9] == ["#dddddd"] * 9  # x: no heads, grey
    # W: columns 0-1 head 0 (blue), 2-3 head 1 (orange), row by row
    assert faces[9:13] == [PALETTE_HEX[0]] * 2 + [PALETTE_HEX[1]] * 2
    plt.close(fig)


PALETTE_HEX = [c.lower() for c in viz.PALETTE]


def test_matrix_steps_figure_heads_on_rows_first_head_and_heat():
    from matplotlib.colors import to_hex

    fig = viz.matrix_steps_figure([[{"values": torch.ones(4, 3), "heads": 2, "head_axis": "rows"},
                                    {"values": torch.ones(3, 2), "heads": 1, "first_head": 1},
                                    {"values": torch.tensor([[0.0, 1.0]]), "heat": True}]])
    faces = [to_hex(p.get_facecolor(), keep_alpha=False) for p in fig.axes[0].patches]
    assert faces[:12] == [PALETTE_HEX[0]] * 6 + [PALETTE_HEX[1]] * 6  # rows 0-1 head 0, rows 2-3 head 1
    assert faces[12:18] == [PALETTE_HEX[1]] * 6  # head 1 alone keeps head 1's colour
    cmap = matplotlib.colormaps[viz.SEQUENTIAL_CMAP]
    assert faces[18:] == [to_hex(cmap(0.0)), to_hex(cmap(1.0))]
    plt.close(fig)


@pytest.mark.parametrize("rows, error, words", [
    ("x", TypeError, "rows must be a list of rows"),
    ([], ValueError, "1 to 4 rows"),
    ([[]], ValueError, "rows[0] must hold 1 to 9 items"),
    ([[3]], TypeError, "rows[0][0] must be a str"),
    ([[{"values": "abc"}]], TypeError, "rows[0][0]['values'] must be a 2-D tensor"),
    ([[{"values": torch.ones(3)}]], ValueError, "2-D matrix of 1 to 8 rows"),
    ([[{"values": torch.ones(9, 2)}]], ValueError, "got shape (9, 2)"),
    ([[{"values": torch.tensor([[float("nan")]])}]], ValueError, "finite"),
    ([[{"values": torch.ones(2, 2), "rows": ["a"]}]], ValueError, "must hold 2 labels"),
    ([[{"values": torch.ones(2, 3), "heads": 2}]], ValueError, "must divide the 3 cols"),
    ([[{"values": torch.ones(2, 2), "head_axis": "diag"}]], ValueError, "'rows' or 'cols'"),
    ([[{"values": torch.ones(2, 2), "heat": 1}]], TypeError, "heat"),
    ([[{"values": torch.ones(2, 2), "colour": 1}]], TypeError, "optional keys"),
])
def test_matrix_steps_figure_refuses_bad_input_by_name(rows, error, words):
    with pytest.raises(error, match=re.escape(words)):
        viz.matrix_steps_figure(rows)
