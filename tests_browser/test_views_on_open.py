"""Notebook 06's bertviz views are drawn as soon as the notebook opens, before any cell runs, and the model view
fits a 1366-pixel-wide screen or scrolls inside its own output (never clipped).

JupyterLab runs a notebook's saved JavaScript only when the notebook is trusted; ``make lab`` trusts the course's
notebooks (:func:`attn_lib.course.lab.trust_notebooks`, called by :func:`attn_lib.course.lab.lab_command`, which the test
server runs too). Nothing is clicked in the notebook, so every view seen here was drawn from the saved outputs.
"""

from __future__ import annotations

import json

from tests_browser.conftest import ROOT
from tests_browser.driver import NotebookPage
from tests_browser.expectations import read_notebook
from tests_browser.views import VIEW_GEOMETRY_JS

NB06 = ROOT / "notebooks" / "06_heads_in_a_real_model.ipynb"

def _code_cells(path):
    return [c for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "code"]


# Every bertviz view of the page: drawn? how wide, and can the learner reach its right edge?
_VIEWS_JS = r"""
() => {
  const geometry = """ + VIEW_GEOMETRY_JS + r""";
  const panel = document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden)');
  const prompts = Array.from(panel.querySelectorAll('.jp-CodeCell .jp-InputPrompt')).map(e => e.textContent.trim());
  const views = Array.from(panel.querySelectorAll('[id^="bertviz-"]')).map(root => {
    const area = root.closest('.jp-OutputArea-output');
    return geometry(root, area, area.getBoundingClientRect());
  });
  return {prompts, views};
}
"""


def test_06_views_draw_on_open_and_fit_or_scroll(page, lab, router, results_dir):
    nb = read_notebook(NB06, ROOT)
    page.set_viewport_size({"width": 1366, "height": 768})
    notebook = NotebookPage(page, lab, nb)
    notebook.open(timeout_s=120)  # it hides the file browser; a learner's `make lab` shows it: show it again
    page.locator(".jp-SideBar.jp-mod-left .lm-TabBar-tab").first.click()
    page.wait_for_function("() => !!document.querySelector('.jp-SideBar.jp-mod-left .lm-TabBar-tab.lm-mod-current')",
                           timeout=10_000)
    try:
        page.wait_for_function(
            """() => { const v = document.querySelectorAll('.jp-NotebookPanel:not(.lm-mod-hidden) [id^="bertviz-"] #vis svg');
                       return v.length >= 2 && Array.from(v).every(s => s.querySelectorAll('*').length > 10); }""",
            timeout=30_000, polling=250)
    except Exception as e:
        page.screenshot(path=str(results_dir / "06_views_on_open.png"))
        raise AssertionError("notebook 06's bertviz views are blank on opening: JupyterLab ran none of their saved "
                             "scripts (is the notebook trusted? attn_lib.course.lab.trust_notebooks)") from e
    state = page.evaluate(_VIEWS_JS)
    page.locator('[id^="bertviz-"]').nth(1).scroll_into_view_if_needed()
    page.screenshot(path=str(results_dir / "06_views_on_open.png"))
    print(state)
    # nothing ran: every prompt still shows the saved execution count (a run in the fresh kernel would renumber)
    saved = [f"[{c.get('execution_count') or ' '}]:" for c in _code_cells(NB06)]
    assert [p.replace("\xa0", " ") for p in state["prompts"]] == saved, (state["prompts"][:8], saved[:8])
    head, model = state["views"][:2]
    assert head["lines"] > 100, head  # the head view: one line per head and token pair
    assert model["thumbnails"] == 72, model  # the model view: 6 layers x 12 heads
    for view in (head, model):
        assert view["fits"] or (view["scrolls"] and view["reach"]), f"a view is clipped at 1366 px: {view}"
    assert not router.refused, router.refused  # drawn with the network cut: nothing asked from outside
