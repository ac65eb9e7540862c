"""Each course notebook, run in JupyterLab in a real browser, shows what the learner should see.

For every notebook (found at collection time; nothing here is written per notebook): open it in
JupyterLab, Run > Run All Cells, wait for the kernel, then check against the committed outputs
(tests_browser/expectations.py): no error or unexpected stderr anywhere; every figure cell shows
its image; every widget cell shows live widgets, and moving each slider (or changing each
dropdown) changes the figure or text next to it; every exercise check cell shows its ✅/❌ message
(solutions: ✅); every bertviz head view draws one line per token pair and head, one colour per
head; nothing is fetched from outside the machine (the network is cut: tests_browser/network.py);
nothing is saved. A full screenshot of each notebook
goes to test-results/browser/.
"""

from __future__ import annotations

from tests_browser.conftest import ROOT
from tests_browser.driver import run_notebook
from tests_browser.expectations import read_notebook


def screenshot_name(rel: str) -> str:
    return rel.removeprefix("notebooks/").replace("/", "__").removesuffix(".ipynb") + ".png"


def test_notebook_in_jupyterlab(notebook, page, lab, router, results_dir, timings_file):
    nb = read_notebook(notebook, ROOT)
    saves_before = len(lab.refused_saves())
    result = run_notebook(page, lab, nb, results_dir / screenshot_name(nb.rel))
    problems = list(result.problems)
    problems += router.problems(nb.rel)
    problems += [f"{nb.rel}: the page tried to save a file: {line}" for line in lab.refused_saves()[saves_before:]]
    timings = ", ".join(f"{k} {v:.1f} s" for k, v in result.timings.items())
    print(f"{nb.rel}: {timings}; screenshot {result.screenshot}")
    with timings_file.open("a") as f:
        cols = [f"{result.timings.get(k, float('nan')):.1f}" for k in ("open", "run_all", "widgets", "total")]
        f.write("\t".join([nb.rel, *cols, str(len(problems))]) + "\n")
    context = ""
    if result.console_errors:
        context = "\nbrowser console errors:\n  " + "\n  ".join(result.console_errors[:15])
    assert not problems, (f"{len(problems)} problem(s) a learner would see in JupyterLab "
                          f"(screenshot: {result.screenshot}):\n- " + "\n- ".join(problems) + context)
