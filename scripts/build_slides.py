"""Build one reveal.js slide deck per lab (`make slides`), offline, from the executed notebooks.

The labs are the teaching plan's (docs/teaching.md, read by :mod:`classroom.labs`): lab 1's deck is notebooks 00
and 01, and so on. The course notebooks carry no slide metadata; it is made here, on copies:

- a title slide per lab: the notebooks, what to present first, the exercises in class and the homework (the plan's row);
- every markdown cell that starts with a ``#`` or ``##`` heading starts a slide, one with ``###`` or deeper a
  sub-slide (reveal.js's vertical stack), a notebook's first cell a slide; other markdown cells continue the slide;
- code cells are fragments (they appear one after the other on the slide);
- long text outputs are trimmed to :data:`MAX_OUTPUT_LINES` lines, and outputs that need a kernel or run a saved
  script (widgets, bertviz views) are replaced by a one-line note (the static figure that follows a bertviz view
  stays);
- figures stay as they were saved by ``make execute`` (nothing is executed).

Each deck is written twice into ``build/slides/``: ``lab-NN.html`` (static reveal.js, with nbconvert's ``slides``
exporter) and ``lab-NN.ipynb`` (the same cells with their slide metadata: open it in JupyterLab and press the RISE
button, jupyterlab-rise, for live slides whose cells run). ``index.html`` lists the decks.

Offline: reveal.js, require.js, jQuery and MathJax 2 come from ``build/reveal/node_modules`` (``make slides``
installs them there with npm, pinned: :data:`NPM_PACKAGES`), referenced by relative paths, and nbconvert's mermaid
loader (an ES module from a CDN; the course has no mermaid diagram) is removed. After the build every deck is checked
for a script, stylesheet, image or module import that points to another host: the build fails if one does.
tests_browser/test_slides.py opens a deck in Chromium with the network cut.

Usage: python scripts/build_slides.py [--out build/slides] [--reveal build/reveal] [--labs 1 3 ...]
"""

from __future__ import annotations

import argparse
import copy
import html
import os
import re
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from classroom.labs import Lab, labs  # noqa: E402

# npm packages `make slides` installs into build/reveal (the Makefile's list is checked against this one by
# tests/test_slides.py). reveal.js 4.0.2 is the version nbconvert 7's reveal template names as its default; MathJax
# 2.7 because the template calls MathJax 2's API (MathJax.Hub).
NPM_PACKAGES = ("reveal.js@4.0.2", "mathjax@2.7.7", "requirejs@2.3.7", "jquery@3.7.1")
# reveal.js's "white" theme takes its font from reveal.js's own folder; nbconvert's default, "simple", imports
# Google Fonts (the browser test caught it).
THEME = "white"
MAX_OUTPUT_LINES = 12
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_NOTE = "(an interactive widget: it needs a running notebook; open the notebook in JupyterLab)"
SCRIPT_NOTE = "(an interactive view drawn by a script: open the notebook in JupyterLab; a static figure follows)"
# Anything in a deck that makes the browser fetch from another host.
_OUTSIDE = re.compile(
    r"""<(?:script|link|img|iframe|source)\b[^>]*?\b(?:src|href)\s*=\s*["']?((?:https?:)?//[^"'\s>]+)"""
    r"""|\bimport\b[^;'"]*?\bfrom\s*["']((?:https?:)?//[^"']+)"""
    r"""|\burl\(\s*["']?((?:https?:)?//[^)"']+)""",
    re.IGNORECASE)
_MERMAID = re.compile(r"<script type=\"module\">\s*import mermaid from [^<]*</script>\s*", re.IGNORECASE)


def slide_type(cell: dict, first: bool) -> str:
    """reveal.js's role for a cell: "slide", "subslide", "fragment" or "-" (continue the slide)."""
    if first:
        return "slide"
    if cell["cell_type"] == "code":
        return "fragment"
    heading = re.match(r"(#+)\s", cell["source"].lstrip())
    if heading:
        return "slide" if len(heading.group(1)) <= 2 else "subslide"
    return "-"


def _note(text: str) -> dict:
    return nbformat.v4.new_output("stream", name="stdout", text=text + "\n")


def trim_outputs(outputs: list, max_lines: int = MAX_OUTPUT_LINES) -> list:
    """The outputs a slide shows: long text cut to ``max_lines`` lines, widgets and script-driven views as a note."""
    shown = []
    for out in outputs:
        out = copy.deepcopy(out)
        if out.get("output_type") == "stream":
            lines = out["text"].splitlines()
            if len(lines) > max_lines:
                out["text"] = "\n".join(lines[:max_lines]) + f"\n… ({len(lines) - max_lines} more lines in the notebook)\n"
        elif out.get("output_type") in ("display_data", "execute_result"):
            data = out.get("data", {})
            if WIDGET_VIEW in data:
                out = _note(WIDGET_NOTE)
            elif "<script" in data.get("text/html", ""):
                out = _note(SCRIPT_NOTE)
            elif "text/plain" in data and len(data) == 1:
                lines = data["text/plain"].splitlines()
                if len(lines) > max_lines:
                    data["text/plain"] = "\n".join(lines[:max_lines]) + "\n…"
        shown.append(out)
    return shown


def title_cell(lab: Lab) -> dict:
    names = ", ".join(f"`{n}`" for n in lab.notebooks)
    cell = nbformat.v4.new_markdown_cell(
        f"# {lab.title}\n\nNotebooks: {names}\n\n"
        f"- **Present first (15 min):** {lab.present}\n- **Exercises in class:** {lab.in_class}\n"
        f"- **Homework:** {lab.homework}\n\n*Slides generated from the executed notebooks (`make slides`); "
        "the plan is in docs/teaching.md.*")
    cell.metadata["slideshow"] = {"slide_type": "slide"}
    return cell


def deck_notebook(lab: Lab, notebooks: Path = ROOT / "notebooks") -> nbformat.NotebookNode:
    """The lab's notebooks as one notebook with slide metadata (cells copied, outputs trimmed)."""
    cells = [title_cell(lab)]
    kernelspec = None
    for stem in lab.notebooks:
        nb = nbformat.read(notebooks / f"{stem}.ipynb", as_version=4)
        kernelspec = kernelspec or nb.metadata.get("kernelspec")
        for i, cell in enumerate(nb.cells):
            cell = copy.deepcopy(cell)
            cell.metadata = {"slideshow": {"slide_type": slide_type(cell, first=i == 0)}}
            if cell.cell_type == "code":
                cell.outputs = trim_outputs(cell.outputs)
            cells.append(cell)
    deck = nbformat.v4.new_notebook(cells=cells)
    if kernelspec:
        deck.metadata["kernelspec"] = kernelspec
    deck.metadata["title"] = f"{lab.title}: " + ", ".join(lab.notebooks)
    for i, cell in enumerate(deck.cells):  # ids unique across the merged notebooks
        cell["id"] = f"{lab.slug}-{i:03d}"
    return deck


def outside_references(page: str) -> list[str]:
    return [next(g for g in m.groups() if g) for m in _OUTSIDE.finditer(page)]


def export_html(deck: nbformat.NotebookNode, out_dir: Path, reveal_dir: Path) -> str:
    from nbconvert import SlidesExporter
    from traitlets.config import Config

    lib = Path(os.path.relpath(reveal_dir / "node_modules", out_dir)).as_posix()
    c = Config()
    c.SlidesExporter.reveal_url_prefix = f"{lib}/reveal.js"
    c.SlidesExporter.reveal_theme = THEME
    c.SlidesExporter.reveal_scroll = True  # a slide taller than the screen scrolls
    c.SlidesExporter.reveal_number = "c/t"
    c.SlidesExporter.require_js_url = f"{lib}/requirejs/require.js"
    c.SlidesExporter.jquery_url = f"{lib}/jquery/dist/jquery.min.js"
    c.SlidesExporter.mathjax_url = f"{lib}/mathjax/MathJax.js?config=TeX-AMS_CHTML-full,Safe"
    c.SlidesExporter.exclude_input_prompt = True
    c.SlidesExporter.exclude_output_prompt = True
    page, _ = SlidesExporter(config=c).from_notebook_node(deck)
    page, n = _MERMAID.subn("", page)
    if n != 1:
        raise RuntimeError(f"nbconvert's slides template changed: expected one mermaid loader, found {n}")
    # reveal.js comes in through require.js, so it sets no global: give the page (and the browser test) window.Reveal
    expose = (f'<script>require(["{lib}/reveal.js/dist/reveal.js"], function (Reveal) {{ window.Reveal = Reveal; }});'
              "</script>\n</html>")
    i = page.rindex("</html>")
    return page[:i] + expose + page[i + len("</html>"):]


def index_page(built: list[Lab]) -> str:
    rows = "\n".join(f'<li><a href="{lab.slug}.html">{html.escape(lab.title)}</a>: '
                     f'{html.escape(", ".join(lab.notebooks))} (<a href="{lab.slug}.ipynb">notebook for RISE</a>)</li>'
                     for lab in built)
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>Attention course: slides</title>"
            f"</head><body><h1>Slides, one deck per lab</h1><ul>\n{rows}\n</ul></body></html>\n")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=ROOT / "build" / "slides")
    p.add_argument("--reveal", type=Path, default=ROOT / "build" / "reveal",
                   help="where npm installed reveal.js, require.js, jQuery and MathJax (node_modules/ inside)")
    p.add_argument("--labs", type=int, nargs="+", help="only these labs (numbers)")
    args = p.parse_args(argv)
    need = [args.reveal / "node_modules" / rel for rel in
            ("reveal.js/dist/reveal.js", "requirejs/require.js", "jquery/dist/jquery.min.js", "mathjax/MathJax.js")]
    missing = [str(x) for x in need if not x.exists()]
    if missing:
        print("missing (run `make slides`, which installs them with npm): " + ", ".join(missing), file=sys.stderr)
        return 2
    chosen = [lab for lab in labs() if not args.labs or lab.number in args.labs]
    args.out.mkdir(parents=True, exist_ok=True)
    theme = args.reveal / "node_modules" / "reveal.js" / "dist" / "theme" / f"{THEME}.css"
    problems = [f"{theme.name}: {url}" for url in outside_references(theme.read_text(encoding="utf-8"))]
    for lab in chosen:
        deck = deck_notebook(lab)
        nbformat.write(deck, args.out / f"{lab.slug}.ipynb")
        page = export_html(deck, args.out, args.reveal)
        problems += [f"{lab.slug}.html: {url}" for url in outside_references(page)]
        (args.out / f"{lab.slug}.html").write_text(page, encoding="utf-8")
        slides = sum(c.metadata["slideshow"]["slide_type"] in ("slide", "subslide") for c in deck.cells)
        print(f"{lab.slug}.html: {lab.title}, {', '.join(lab.notebooks)}: {slides} slides")
    (args.out / "index.html").write_text(index_page(chosen), encoding="utf-8")
    if problems:
        print("a deck loads something from another host:\n  " + "\n  ".join(problems), file=sys.stderr)
        return 1
    print(f"{len(chosen)} decks in {args.out}; open {args.out / 'index.html'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
