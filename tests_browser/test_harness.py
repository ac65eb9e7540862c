"""The browser test can fail: it passes a good notebook and names each problem in broken ones.

A small notebook with everything the checks look at (a figure, a slider and a dropdown that
redraw a figure, a tqdm bar, an exercise check, a bertviz head view) is executed here with
nbclient (what `make execute` uses), so its saved outputs are real. Then:

- as is, it passes;
- with its figure, widget wiring and check output broken, bertviz's own unpatched head view (which asks
  cdnjs for require.js: an outside URL), a cell showing an image from another host, and an error cell
  added (the saved outputs still promise the good results), each problem is reported, and the outside
  requests are refused and recorded;
- with JupyterLab's widget extension not loading (its script blocked), the dead widgets are reported.

The notebooks are written to test-results/browser/selftest/ (ignored by git).
"""

from __future__ import annotations

import copy
import os

import nbformat
import pytest
from nbclient import NotebookClient

from tests_browser.network import OfflineRouter
from tests_browser.conftest import RESULTS, ROOT, VIEWPORT
from tests_browser.driver import run_notebook
from tests_browser.expectations import read_notebook

KERNEL = {"name": "attn-course", "display_name": "Attention course (.venv)", "language": "python"}

SETUP = """import attn_lib
attn_lib.setup()"""
FIGURE = """import matplotlib.pyplot as plt
fig, ax = plt.subplots(figsize=(3, 2))
ax.plot([0, 2, 1]);"""
WIDGETS = """import ipywidgets as widgets
import numpy as np
n = widgets.IntSlider(value=3, min=1, max=8, description="n")
cmap = widgets.Dropdown(options=["viridis", "cividis"], description="cmap")
out = widgets.Output()

def draw(change=None):
    with out:
        out.clear_output(wait=True)
        fig, ax = plt.subplots(figsize=(3, 2))
        ax.imshow(np.arange(n.value ** 2).reshape(n.value, n.value), cmap=cmap.value)
        plt.show()

n.observe(draw, "value")
cmap.observe(draw, "value")
draw()
widgets.VBox([n, cmap, out])"""
PROGRESS = """from tqdm.auto import tqdm
for _ in tqdm(range(3)):
    pass"""
STUB = """def softmax(x):
    raise NotImplementedError  # your code here"""
CHECK = "attn_lib.course.exercises.check_softmax(softmax)"
# bertviz called directly, as a learner would: after attn_lib.setup() (the SETUP cell) it draws with
# no network (attn_lib.course.viz.use_offline_bertviz) and shows a static figure after the view.
BERTVIZ = """import torch
from bertviz import head_view
head_view(attention=[torch.rand(1, 3, 4, 4).softmax(-1)], tokens=["the", "cat", "sat", "."])"""
# bertviz's own function, not made offline: its page asks cdnjs for require.js, d3 and jQuery.
CDN_BERTVIZ = """import torch
from bertviz.head_view import head_view as bertviz_own_head_view
bertviz_own_head_view(attention=[torch.rand(1, 3, 4, 4).softmax(-1)], tokens=["the", "cat", "sat", "."])"""
OUTSIDE_IMAGE_URL = "https://example.com/a-figure-from-another-host.png"
OUTSIDE_IMAGE = f"""from IPython.display import HTML
HTML('<img src="{OUTSIDE_IMAGE_URL}" alt="from another host">')"""

CELLS = [("markdown", "# Browser test self-check"), ("code", SETUP), ("code", FIGURE), ("code", WIDGETS),
         ("code", PROGRESS), ("code", STUB), ("code", CHECK), ("code", BERTVIZ)]


def _new_notebook(cells) -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = dict(KERNEL)
    nb.cells = [nbformat.v4.new_markdown_cell(src) if kind == "markdown" else nbformat.v4.new_code_cell(src)
                for kind, src in cells]
    return nb


@pytest.fixture(scope="session")
def selftest_dir():
    d = RESULTS / "selftest"
    d.mkdir(parents=True, exist_ok=True)
    return d


@pytest.fixture(scope="session")
def good_notebook(selftest_dir):
    nb = _new_notebook(CELLS)
    env = {k: v for k, v in os.environ.items() if k != "MPLBACKEND"}  # inline figures, as in `make execute`
    NotebookClient(nb, kernel_name=KERNEL["name"], timeout=300, record_timing=False,
                   resources={"metadata": {"path": str(selftest_dir)}}).execute(env=env)
    path = selftest_dir / "good.ipynb"
    nbformat.write(nb, path)
    return path


@pytest.fixture(scope="session")
def broken_notebook(good_notebook, selftest_dir):
    """The good notebook's saved outputs, with sources that no longer produce them."""
    nb = nbformat.read(good_notebook, as_version=4)
    broken = copy.deepcopy(nb)
    src = {i: "".join(c.source) for i, c in enumerate(broken.cells)}
    index = {body: i for i, (_, body) in enumerate(CELLS)}
    broken.cells[index[FIGURE]].source = 'import matplotlib.pyplot as plt\nprint("the figure is gone")'
    broken.cells[index[WIDGETS]].source = src[index[WIDGETS]].replace('n.observe(draw, "value")\n', "")
    broken.cells[index[CHECK]].source = CHECK + ";"  # the message is no longer displayed
    broken.cells[index[BERTVIZ]].source = CDN_BERTVIZ  # asks cdnjs: refused, and the view stays blank
    broken.cells.insert(index[BERTVIZ] + 1, nbformat.v4.new_code_cell(OUTSIDE_IMAGE))
    broken.cells.append(nbformat.v4.new_code_cell('raise ValueError("boom: a broken cell")'))
    broken.cells.append(nbformat.v4.new_code_cell('print("after the error")'))
    path = selftest_dir / "broken.ipynb"
    nbformat.write(broken, path)
    return path


def test_good_notebook_passes(good_notebook, page, lab, router, results_dir):
    nb = read_notebook(good_notebook, ROOT)
    # The expectations come from the saved outputs, and they are not empty:
    assert sum(c.images for c in nb.cells) >= 1
    widget_cell = next(c for c in nb.cells if c.sliders)
    assert (widget_cell.sliders, widget_cell.dropdowns) == (1, 1)
    assert any(c.progress_bars for c in nb.cells)
    [check] = [m for c in nb.cells for m in c.check_messages]
    assert check.startswith("❌ check_softmax: your function is not written yet")
    [view] = [v for c in nb.cells for v in c.bertviz]
    assert (view.kind, view.heads, view.left_tokens) == ("head", 3, ["the", "cat", "sat", "."])

    saved = good_notebook.read_bytes()
    result = run_notebook(page, lab, nb, results_dir / "selftest" / "good.png")
    print("good.ipynb:", result.timings)
    assert result.problems == [], "\n".join(result.problems + result.console_errors)
    # File > Save after the run: the server refuses, the notebook on disk is untouched.
    refused = len(lab.refused_saves())
    page.get_by_role("menuitem", name="File", exact=True).click()
    page.locator('li[data-command="docmanager:save"]').click()
    page.wait_for_selector(".jp-Dialog", timeout=30_000)  # JupyterLab reports the failed save
    assert len(lab.refused_saves()) == refused + 1
    assert good_notebook.read_bytes() == saved
    assert router.refused == []  # the bertviz view drew with no network (the driver checked its SVG)
    from PIL import Image

    with Image.open(result.screenshot) as img:
        assert img.height > VIEWPORT["height"], "the screenshot should show the whole notebook"


def _expect(problems: list[str], *fragments: str) -> None:
    for fragment in fragments:
        assert any(fragment in p for p in problems), f"no problem mentions {fragment!r}:\n" + "\n".join(problems)


def test_broken_cells_are_reported(broken_notebook, page, lab, router, results_dir):
    nb = read_notebook(broken_notebook, ROOT)
    # widget_timeout_s: how long the unwired slider gets to change something (the wired dropdown takes < 1 s)
    result = run_notebook(page, lab, nb, results_dir / "selftest" / "broken.png", widget_timeout_s=8)
    print("broken.ipynb:", result.timings)
    problems = result.problems
    _expect(
        problems,
        "shows 0 figure(s); the committed notebook shows 1",  # the figure cell
        "moving slider 'n' from 3.0 to 4.0 changed neither figure nor text within 8 s",  # the unwired slider
        "the check message '❌ check_softmax: your function is not written yet",  # the silenced check
        "ValueError: boom: a broken cell",  # the error cell
        "'print(\"after the error\")'): did not run",  # Run All stops at the error
        "require is not defined",  # bertviz's own script: require.js never came from the CDN
        "bertviz did not draw",
    )
    # Every request that would leave the machine was refused and is named, as test_notebooks reports it.
    outside = router.problems("broken.ipynb")
    _expect(outside, "asked for an outside URL", "https://cdnjs.cloudflare.com/ajax/libs/require.js/",
            OUTSIDE_IMAGE_URL)
    # The dropdown still redraws the figure: it is not reported.
    assert not any("dropdown" in p for p in problems), problems


def test_missing_widget_extension_is_reported(good_notebook, browser, lab, results_dir):
    nb = read_notebook(good_notebook, ROOT)
    ctx = browser.new_context(viewport=VIEWPORT)
    router = OfflineRouter()
    router.attach(ctx)
    # As if jupyterlab_widgets were not installed: its JupyterLab extension never loads.
    ctx.route("**/lab/extensions/@jupyter-widgets/jupyterlab-manager/**", lambda route: route.abort())
    page = ctx.new_page()
    try:
        problems = run_notebook(page, lab, nb, results_dir / "selftest" / "no-extension.png").problems
    finally:
        ctx.close()
        lab.shutdown_kernels()
    _expect(problems, "rendered as live widgets", "is the jupyterlab_widgets extension missing?")
    assert router.refused == []
