"""Drive one notebook through JupyterLab like a learner, and list what a learner would see go wrong.

:func:`run_notebook` opens the notebook, waits for its kernel, clicks Run > Run All Cells, waits
until every cell has run and the page has settled, then compares each cell with what the saved
notebook promises (see :mod:`tests_browser.expectations`): no error or unexpected stderr
anywhere, every figure shown, every widget live (sliders and dropdowns change what is next to
them), every exercise check message shown, every bertviz head view drawn. It returns the list
of problems (empty: all good) and saves a screenshot of the whole notebook.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from tests_browser.expectations import NotebookExpectation

# Widgets and outputs of one cell, as the page shows them (top-level outputs, and everything inside).
_CELL_FACTS_JS = r"""
(cell) => {
  const area = cell.querySelector('.jp-Cell-outputArea');
  const prompt = cell.querySelector('.jp-InputPrompt');
  const facts = {
    code: cell.classList.contains('jp-CodeCell'),
    prompt: prompt ? prompt.textContent.trim() : '',
    outputs: [], stderr: [], images: [], widgets: 0, widgetErrors: [], sliders: 0, dropdowns: 0,
    progress: 0, text: '', bertviz: [],
  };
  if (!area) return facts;
  facts.text = area.innerText;
  for (const child of area.querySelectorAll(':scope > .jp-OutputArea-child')) {
    const out = child.querySelector(':scope > :not(.jp-OutputArea-prompt)');
    if (!out) continue;
    facts.outputs.push({
      mime: out.getAttribute('data-mime-type') || '',
      widget: !!out.querySelector('.jupyter-widgets'),
      text: out.innerText.slice(0, 400),
      images: Array.from(out.querySelectorAll(':scope.jp-RenderedImage > img, :scope > .jp-RenderedImage > img'))
        .map(img => img.complete && img.naturalWidth > 0 && img.naturalHeight > 0),
    });
  }
  facts.stderr = Array.from(area.querySelectorAll('[data-mime-type="application/vnd.jupyter.stderr"]'))
    .map(e => e.innerText);
  facts.images = Array.from(area.querySelectorAll('img'))
    .map(img => img.complete && img.naturalWidth > 0 && img.naturalHeight > 0);
  facts.widgets = area.querySelectorAll('.jupyter-widgets').length;
  facts.widgetErrors = Array.from(area.querySelectorAll('.jupyter-widgets.widget-error, .widget-error'))
    .map(e => e.innerText.slice(0, 300));
  facts.sliders = area.querySelectorAll('.widget-slider .noUi-handle-lower, .widget-slider .noUi-handle:only-child').length;
  facts.dropdowns = area.querySelectorAll('.widget-dropdown select').length;
  facts.progress = area.querySelectorAll('.widget-progress, .widget-hprogress, .widget-vprogress').length;
  for (const root of area.querySelectorAll('[id^="bertviz-"]')) {
    const svg = root.querySelector('#vis svg');
    const view = {id: root.id, svg: !!svg, lines: 0, heads: [], left: [], right: []};
    if (svg) {
      view.lines = svg.querySelectorAll('#attention line').length;
      view.heads = Array.from(svg.querySelectorAll('#attention g.headAttention')).map(g => {
        const strokes = new Set(Array.from(g.querySelectorAll('line')).map(l => l.getAttribute('stroke')));
        return {lines: g.querySelectorAll('line').length, strokes: Array.from(strokes)};
      });
      view.left = Array.from(svg.querySelectorAll('#left text')).map(t => t.textContent);
      view.right = Array.from(svg.querySelectorAll('#right text')).map(t => t.textContent);
      view.elements = svg.querySelectorAll('*').length;
      view.thumbnails = svg.querySelectorAll('rect.attn_background').length;
      view.allLines = svg.querySelectorAll('line').length;
    }
    facts.bertviz.push(view);
  }
  return facts;
}
"""

# A fingerprint of what a cell's outputs show, leaving out the controls themselves (slider
# positions, readouts, dropdown values), so that it changes only when the figure or text does.
_OUTPUT_FINGERPRINT_JS = r"""
(cell) => {
  const area = cell.querySelector('.jp-Cell-outputArea');
  if (!area) return '';
  const clone = area.cloneNode(true);
  clone.querySelectorAll('.widget-readout, .noUi-base, select, input, textarea, .widget-label, '
      + '.jp-OutputArea-promptOverlay').forEach(e => e.remove());
  const parts = [clone.innerText];
  for (const img of area.querySelectorAll('img')) parts.push(img.src);
  for (const svg of area.querySelectorAll('svg')) parts.push(svg.innerHTML);
  const s = parts.join('\u0001');
  let h = 0;
  for (let i = 0; i < s.length; i++) h = (Math.imul(h, 31) + s.charCodeAt(i)) | 0;
  return s.length + ':' + h;
}
"""

# Is every image loaded and the kernel idle? (polled until it stays so)
_SETTLED_JS = r"""
() => {
  const nb = document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook');
  if (!nb) return null;
  const imgs = Array.from(nb.querySelectorAll('img'));
  const status = document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook-ExecutionIndicator');
  return {
    imagesLoaded: imgs.every(i => i.complete),
    idle: !status || status.getAttribute('data-status') === 'idle',
    size: nb.innerHTML.length,
    lines: nb.querySelectorAll('svg line').length,
    widgets: nb.querySelectorAll('.jupyter-widgets').length,
  };
}
"""

# Before Run All: note (with a MutationObserver, so that even a run shorter than a poll is seen)
# that the run has started: a cell queued or running ("[*]") or the kernel busy.
_WATCH_RUN_JS = r"""
() => {
  const panel = document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden)');
  window.__browserTestRunStarted = false;
  const started = () => {
    const status = panel.querySelector('.jp-Notebook-ExecutionIndicator');
    return (status && status.getAttribute('data-status') !== 'idle')
      || Array.from(panel.querySelectorAll('.jp-InputPrompt')).some(e => e.textContent.includes('*'));
  };
  const observer = new MutationObserver(() => {
    if (started()) { window.__browserTestRunStarted = true; observer.disconnect(); }
  });
  observer.observe(panel, {subtree: true, childList: true, attributes: true, characterData: true});
}
"""

# Run All is over: it started, no cell is queued or running, the first code cell ran, the kernel is idle.
_RUN_DONE_JS = r"""
() => {
  const panel = document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden)');
  if (!panel || !window.__browserTestRunStarted) return false;
  const prompts = Array.from(panel.querySelectorAll('.jp-Notebook .jp-CodeCell .jp-InputPrompt'))
    .map(e => e.textContent);
  const status = panel.querySelector('.jp-Notebook-ExecutionIndicator');
  return prompts.length > 0 && !prompts.some(t => t.includes('*')) && /\d/.test(prompts[0])
    && (!status || status.getAttribute('data-status') === 'idle');
}
"""


@dataclass
class RunResult:
    problems: list[str] = field(default_factory=list)
    screenshot: Path | None = None
    timings: dict[str, float] = field(default_factory=dict)
    console_errors: list[str] = field(default_factory=list)


def _short(text: str, n: int = 300) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 1] + "…"


class NotebookPage:
    """One notebook open in a JupyterLab tab."""

    def __init__(self, page, lab, notebook: NotebookExpectation):
        self.page = page
        self.lab = lab
        self.nb = notebook

    @property
    def cells(self):
        return self.page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook .jp-Cell")

    # -- opening and running -------------------------------------------------------------------------
    def open(self, timeout_s: float) -> None:
        self.page.goto(self.lab.lab_url(self.nb.rel), timeout=timeout_s * 1000)
        # Every cell attached, and the notebook's kernel started and idle ("Attention course (.venv) | Idle").
        expected = len(self.nb.cells)
        try:
            self.page.wait_for_function(
                """(expected) => {
                    const panel = document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden)');
                    if (!panel || panel.querySelectorAll('.jp-Notebook .jp-Cell').length !== expected) return false;
                    return Array.from(document.querySelectorAll('.jp-StatusBar-TextItem'))
                      .some(e => /\\| Idle$/.test(e.textContent.trim()) && !e.textContent.startsWith('No Kernel'));
                }""",
                arg=expected, timeout=timeout_s * 1000, polling=250,
            )
        except Exception as e:
            state = self.page.evaluate(
                """() => ({
                    cells: document.querySelectorAll('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook .jp-Cell').length,
                    status: Array.from(document.querySelectorAll('.jp-StatusBar-TextItem')).map(e => e.textContent.trim()).filter(Boolean),
                    dialog: (document.querySelector('.jp-Dialog') || {}).innerText || '',
                })"""
            )
            raise RuntimeError(
                f"the notebook did not open with an idle kernel within {timeout_s:.0f} s: {state['cells']} of "
                f"{expected} cells shown, status bar {state['status']}, dialog {state['dialog']!r}") from e
        # Hide the file browser: the notebook gets the whole width (and the screenshot shows only it).
        current = self.page.locator(".jp-SideBar.jp-mod-left .lm-TabBar-tab.lm-mod-current")
        if current.count():
            current.first.click()

    def run_all(self, timeout_s: float) -> None:
        """Run > Run All Cells, then wait until no cell is queued or running and the kernel is idle."""
        self.page.evaluate(_WATCH_RUN_JS)
        self.page.get_by_role("menuitem", name="Run", exact=True).click()
        self.page.locator('li[data-command="runmenu:run-all"]').click()
        self.page.wait_for_function(_RUN_DONE_JS, timeout=timeout_s * 1000, polling=250)

    def settle(self, timeout_s: float = 30.0, quiet_s: float = 1.0) -> bool:
        """Wait until images are loaded, the kernel is idle and the page stops changing."""
        deadline = time.monotonic() + timeout_s
        last, since = None, time.monotonic()
        while time.monotonic() < deadline:
            state = self.page.evaluate(_SETTLED_JS)
            ready = bool(state and state["imagesLoaded"] and state["idle"])
            if not ready or state != last:
                last, since = state, time.monotonic()
            elif time.monotonic() - since >= quiet_s:
                return True
            time.sleep(0.25)
        return False

    # -- looking -------------------------------------------------------------------------------------
    def facts(self, index: int) -> dict:
        return self.cells.nth(index).evaluate(_CELL_FACTS_JS)

    def fingerprint(self, index: int) -> str:
        return self.cells.nth(index).evaluate(_OUTPUT_FINGERPRINT_JS)

    def wait_for_change(self, index: int, before: str, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.fingerprint(index) != before:
                return True
            time.sleep(0.2)
        return False

    def screenshot(self, path: Path, max_height: int = 60000) -> None:
        """The whole notebook in one image: the viewport grows to the notebook's full height."""
        path.parent.mkdir(parents=True, exist_ok=True)
        size = self.page.viewport_size
        extra = self.page.evaluate(
            """() => {
                const outer = document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-WindowedPanel-outer');
                if (!outer) return 0;
                outer.scrollTop = 0;
                return outer.scrollHeight - outer.clientHeight;
            }"""
        )
        height = min(max_height, size["height"] + max(0, int(extra)) + 40)
        self.page.set_viewport_size({"width": size["width"], "height": height})
        try:
            self.settle(timeout_s=10, quiet_s=0.5)
            self.page.evaluate("""() => {
                const outer = document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-WindowedPanel-outer');
                if (outer) outer.scrollTop = 0;
            }""")
            self.page.screenshot(path=str(path), full_page=True)
        finally:
            self.page.set_viewport_size(size)


# -- the checks --------------------------------------------------------------------------------------

def _check_cell(nb: NotebookExpectation, cell, facts: dict) -> list[str]:
    problems = []
    where = f"{nb.rel} {cell.label}"
    if cell.saved_errors:
        problems.append(f"{where}: the committed notebook has an error output: {cell.saved_errors}")
    if not facts["code"]:
        return problems
    if not any(ch.isdigit() for ch in facts["prompt"]):
        problems.append(f"{where}: did not run (prompt {facts['prompt']!r}); Run All stopped before it")
        return problems
    problems += _stderr_problems(where, cell, facts)
    # Figures: every image the committed notebook shows here is shown, and has loaded.
    shown = [ok for out in facts["outputs"] for ok in out["images"]]
    if cell.images:
        if len(shown) < cell.images:
            problems.append(f"{where}: shows {len(shown)} figure(s); the committed notebook shows {cell.images}")
        if not all(shown):
            problems.append(f"{where}: a figure did not load (broken image)")
    if facts["images"] and not all(facts["images"]):
        problems.append(f"{where}: an image inside the cell's output did not load")
    # Widgets: rendered as live widgets, not as their text fallback ("IntSlider(value=...)").
    if cell.widget_views:
        live = sum(out["widget"] for out in facts["outputs"])
        if live < cell.widget_views:
            fallback = [out["text"] for out in facts["outputs"] if not out["widget"] and out["text"].strip()]
            problems.append(
                f"{where}: {cell.widget_views} widget(s) expected, {live} rendered as live widgets "
                f"(shown instead: {_short(' | '.join(fallback), 200)!r}); is the jupyterlab_widgets extension missing?")
        if facts["widgetErrors"]:
            problems.append(f"{where}: widget error: {_short(' | '.join(facts['widgetErrors']))}")
        for kind, want, got in [("slider", cell.sliders, facts["sliders"]),
                                ("dropdown", cell.dropdowns, facts["dropdowns"]),
                                ("progress bar", cell.progress_bars, facts["progress"])]:
            if got < want:
                problems.append(f"{where}: {want} {kind}(s) expected, {got} shown")
    # Exercise checks: the message is shown, and it is the one the notebook promises.
    shown_text = facts["text"]
    for message in cell.check_messages:
        if message not in shown_text:
            problems.append(f"{where}: the check message {_short(message, 120)!r} is not shown "
                            f"(cell shows {_short(shown_text, 200)!r})")
        if nb.is_solutions and not message.startswith("✅"):
            problems.append(f"{where}: a solutions notebook's check does not pass: {_short(message, 200)}")
    if cell.calls_check and not cell.check_messages and not cell.widget_views:
        marks = [line.lstrip()[:1] for line in shown_text.splitlines() if line.lstrip().startswith(("✅", "❌"))]
        if not marks:
            problems.append(f"{where}: calls an exercise check but shows no ✅/❌ message "
                            f"(cell shows {_short(shown_text, 200)!r})")
        elif nb.is_solutions and "❌" in marks:
            problems.append(f"{where}: a solutions notebook's check does not pass: {_short(shown_text, 200)}")
    # bertviz: the head view draws one line per (head, left token, right token), one colour per head.
    if cell.bertviz:
        views = facts["bertviz"]
        if len(views) < len(cell.bertviz):
            problems.append(f"{where}: {len(cell.bertviz)} bertviz view(s) expected, {len(views)} found")
        for saved, view in zip(cell.bertviz, views):
            problems += _check_bertviz(where, saved, view)
    return problems


def _stderr_problems(where: str, cell, facts: dict) -> list[str]:
    """Errors and stderr (also inside widgets): allowed only where the committed notebook shows the same text.

    JupyterLab shows tracebacks, JavaScript errors and stderr streams alike (mime type
    application/vnd.jupyter.stderr), so each is matched against the cell's saved stderr streams.
    """
    problems = []
    allowed = [" ".join(s.split()) for s in cell.stderr]
    for text in facts["stderr"]:
        norm = " ".join(text.split())
        if norm in allowed:
            allowed.remove(norm)
        else:
            kind = "an error" if ("Traceback" in text or "Error" in text) else "unexpected stderr output"
            problems.append(f"{where}: shows {kind}: {_short(text)}")
    return problems


def _check_bertviz(where: str, saved, view: dict) -> list[str]:
    if not view["svg"]:
        return [f"{where}: bertviz did not draw (no SVG in its output: did its d3/jQuery load? attn_lib.course.viz inlines them)"]
    heads, left, right = saved.heads, saved.left_tokens, saved.right_tokens
    if saved.kind == "other" or heads is None:
        return [] if view.get("elements", 0) > 10 else [f"{where}: the bertviz view is empty"]
    problems = []
    if saved.kind == "model":
        # model_view: one thumbnail per (layer, head), each with one line per token pair.
        want = saved.layers * heads
        if view["thumbnails"] != want:
            problems.append(f"{where}: model view draws {view['thumbnails']} thumbnails; expected "
                            f"{saved.layers} layers x {heads} heads = {want}")
        if view["allLines"] < want * len(left) * len(right):
            problems.append(f"{where}: model view draws {view['allLines']} lines; expected at least "
                            f"{want} x {len(left)} x {len(right)} = {want * len(left) * len(right)}")
        return problems
    want_lines = heads * len(left) * len(right)
    if view["lines"] != want_lines:
        problems.append(f"{where}: head view draws {view['lines']} lines; expected {heads} heads x "
                        f"{len(left)} x {len(right)} token pairs = {want_lines}")
    if len(view["heads"]) != heads:
        problems.append(f"{where}: head view has {len(view['heads'])} head groups; expected {heads}")
    for i, head in enumerate(view["heads"]):
        if head["lines"] != len(left) * len(right):
            problems.append(f"{where}: head {i} draws {head['lines']} lines; expected {len(left) * len(right)}")
        if len(head["strokes"]) != 1:
            problems.append(f"{where}: head {i} is drawn in {len(head['strokes'])} colours {head['strokes']}; expected one")
    colours = [h["strokes"][0] for h in view["heads"] if len(h["strokes"]) == 1]
    # bertviz colours heads with d3.schemeCategory10: 10 colours, reused from head 11 on.
    if len(set(colours)) != min(heads, 10):
        problems.append(f"{where}: head view uses {len(set(colours))} distinct head colours; expected {min(heads, 10)}")
    if view["left"] != left or view["right"] != right:
        problems.append(f"{where}: head view shows tokens {view['left']} / {view['right']}; expected {left} / {right}")
    return problems


def _exercise_widgets(nbpage: NotebookPage, where: str, index: int, timeout_s: float) -> list[str]:
    """Move every slider (one step) and change every dropdown; each must change the figure or text."""
    problems = []
    cell = nbpage.cells.nth(index)
    handles = cell.locator(".widget-slider .noUi-handle-lower, .widget-slider .noUi-handle:only-child")
    for k in range(handles.count()):
        handle = handles.nth(k)
        label = _short(handle.evaluate(
            "h => { const w = h.closest('.widget-slider'); const l = w && w.querySelector('.widget-label'); return l ? l.innerText : ''; }"), 40)
        before = nbpage.fingerprint(index)
        value = handle.get_attribute("aria-valuenow")
        at_max = value is not None and value == handle.get_attribute("aria-valuemax")
        handle.scroll_into_view_if_needed()
        handle.focus()
        nbpage.page.keyboard.press("ArrowLeft" if at_max else "ArrowRight")
        if handle.get_attribute("aria-valuenow") == value:  # keyboard did not move it: drag it like a mouse
            box = handle.bounding_box()
            if box:
                x, y = box["x"] + box["width"] / 2, box["y"] + box["height"] / 2
                nbpage.page.mouse.move(x, y)
                nbpage.page.mouse.down()
                nbpage.page.mouse.move(x + (-30 if at_max else 30), y, steps=5)
                nbpage.page.mouse.up()
        if handle.get_attribute("aria-valuenow") == value:
            problems.append(f"{where}: slider {label!r} does not move")
            continue
        if not nbpage.wait_for_change(index, before, timeout_s):
            problems.append(f"{where}: moving slider {label!r} from {value} to "
                            f"{handle.get_attribute('aria-valuenow')} changed neither figure nor text within {timeout_s:.0f} s")
        nbpage.settle(timeout_s=timeout_s, quiet_s=0.5)
    selects = cell.locator(".widget-dropdown select")
    for k in range(selects.count()):
        select = selects.nth(k)
        options = select.locator("option")
        if options.count() < 2:
            continue
        before = nbpage.fingerprint(index)
        current = select.evaluate("s => s.selectedIndex")
        select.select_option(index=1 if current == 0 else 0)
        if not nbpage.wait_for_change(index, before, timeout_s):
            problems.append(f"{where}: changing dropdown {k + 1} changed neither figure nor text within {timeout_s:.0f} s")
        nbpage.settle(timeout_s=timeout_s, quiet_s=0.5)
    return problems


def run_notebook(page, lab, nb: NotebookExpectation, screenshot: Path, *, open_timeout_s: float = 300,
                 run_timeout_s: float = 900, widget_timeout_s: float = 120) -> RunResult:
    """Open ``nb`` in JupyterLab, Run All, check every cell; always saves the screenshot."""
    result = RunResult(screenshot=screenshot)
    page.on("console", lambda m: result.console_errors.append(m.text[:300]) if m.type == "error" else None)
    page.on("pageerror", lambda e: result.console_errors.append(f"page error: {str(e)[:300]}"))
    nbpage = NotebookPage(page, lab, nb)
    t0 = time.monotonic()
    try:
        nbpage.open(open_timeout_s)
        result.timings["open"] = time.monotonic() - t0
        t1 = time.monotonic()
        nbpage.run_all(run_timeout_s)
        result.timings["run_all"] = time.monotonic() - t1
        if not nbpage.settle():
            result.problems.append(f"{nb.rel}: the page kept changing for 30 s after the run")
        for cell in nb.cells:
            result.problems += _check_cell(nb, cell, nbpage.facts(cell.index))
        t2 = time.monotonic()
        for cell in nb.cells:
            if cell.widget_views and nbpage.facts(cell.index)["widgets"]:
                result.problems += _exercise_widgets(nbpage, f"{nb.rel} {cell.label}", cell.index, widget_timeout_s)
        # Moving the widgets must not break anything either (e.g. an error inside an Output widget).
        for cell in nb.cells:
            if cell.widget_views:
                for problem in _stderr_problems(f"{nb.rel} {cell.label}", cell, nbpage.facts(cell.index)):
                    if problem not in result.problems:
                        result.problems.append(problem)
        result.timings["widgets"] = time.monotonic() - t2
    except Exception as e:  # a timeout or a page that did not load: still take the screenshot
        result.problems.append(f"{nb.rel}: {type(e).__name__}: {_short(str(e), 800)}")
    finally:
        try:
            nbpage.screenshot(screenshot)
        except Exception as e:
            result.problems.append(f"{nb.rel}: screenshot failed: {_short(str(e), 300)}")
        result.timings["total"] = time.monotonic() - t0
    return result
