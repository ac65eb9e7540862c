"""Build one reveal.js talk per lab (`make slides`), offline, from the executed notebooks and the instructor notes.

The labs are the teaching plan's (docs/teaching.md, read by :mod:`classroom.labs`). A deck is a talk for the lab's
15-minute presentation, not the notebook cut at its headings: between 15 and 20 slides (:data:`MIN_SLIDES`,
:data:`MAX_SLIDES`), built from

- the plan's row (a title slide: the notebooks, what to present first, the exercises, the homework);
- each notebook's title and "You will learn" lines;
- **the idea** and **one equation**, from the lab's section of docs/teaching/instructor_notes.md (the board plan goes
  into the idea slide's speaker notes: `s` opens the speaker view);
- the notebooks' sections (heading and first sentences) and **figures** (the saved PNGs, as slide attachments), spread
  evenly over the notebooks;
- **one live cell**: a short cell of the notebook (preferably with an ``assert``) that runs with the notebook's
  imports alone (checked with ``ast``), after a setup cell with those imports; its saved output is shown, and in RISE
  it runs;
- "Who thinks …?" (the lab's stumbles, from the notes; what to do in the speaker notes), the two discussion prompts,
  each notebook's recap, and the exercises.

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
import ast
import builtins
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
NOTES = ROOT / "docs" / "teaching" / "instructor_notes.md"
# A talk for a 15-minute presentation (issue 39): about a minute a slide.
MIN_SLIDES, TARGET_SLIDES, MAX_SLIDES = 15, 18, 20
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


def lab_notes(lab: Lab, notes: Path = NOTES) -> dict:
    """The lab's section of docs/teaching/instructor_notes.md: idea, equation (with its reading), board, prompts,
    stumbles (misconception, what to do).

    Raises:
        TalkError: the section or one of its parts is missing.
    """
    text = notes.read_text(encoding="utf-8")
    m = re.search(rf"^## Lab {lab.number} ·.*?(?=^## |\Z)", text, flags=re.M | re.S)
    if m is None:
        raise TalkError(f"{notes}: no section '## Lab {lab.number} · ...'")
    part = m.group(0)

    def field(name: str) -> str:
        f = re.search(rf"\*\*{name}\.\*\* (.+?)(?=\n\n|\Z)", part, flags=re.S)
        if f is None:
            raise TalkError(f"{notes}, lab {lab.number}: no '**{name}.**'")
        return f.group(1).strip()

    equation = re.fullmatch(r"(\$\$.+?\$\$)\s*(.*)", field("The equation"), flags=re.S)
    if equation is None:
        raise TalkError(f"{notes}, lab {lab.number}: '**The equation.**' must start with a $$...$$ display")
    prompts = part.split("**Discussion prompts.**")[1].split("**Common stumbles.**")[0]
    stumbles = re.findall(r"^- (\*\*.+?\*\*)\s*(.+?)(?=^- |\Z)", part.split("**Common stumbles.**")[1],
                          flags=re.M | re.S)
    return {"idea": field("The idea"), "equation": equation.group(1), "reading": equation.group(2),
            "board": field("On the board"),
            "prompts": [" ".join(p.split())
                        for p in re.findall(r"^\d\. (.+?)(?=^\d\. |\Z)", prompts, flags=re.M | re.S)],
            "stumbles": [(s, " ".join(r.split())) for s, r in stumbles]}


class TalkError(ValueError):
    """A lab's talk cannot be built: its notes are incomplete, or its notebooks lack a figure or a live cell."""


def _md(text: str, slide: str = "slide") -> dict:
    cell = nbformat.v4.new_markdown_cell(text)
    cell.metadata["slideshow"] = {"slide_type": slide}
    return cell


def _sentences(text: str, n: int = 2, limit: int = 420) -> str:
    """The first ``n`` sentences of a paragraph (at most ``limit`` characters, cut at a word)."""
    text = " ".join(text.split())
    parts = re.split(r"(?<=[.!?:])\s+(?=[A-Z*`(])", text)
    out = " ".join(parts[:n])
    return out if len(out) <= limit else out[:limit].rsplit(" ", 1)[0] + " …"


SKIP_SECTIONS = re.compile(r"^(Recap|References|Exercises?|Prove it|Predict|Start every notebook|Exercise \d)", re.I)


def _source(cell) -> str:
    return cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])


def notebook_parts(stem: str, notebooks: Path = ROOT / "notebooks") -> dict:
    """What a talk takes from a notebook: title, "You will learn" lines, sections (heading, first paragraph),
    figures (heading, PNG, the text before it), the recap, and the code cells in order."""
    nb = nbformat.read(notebooks / f"{stem}.ipynb", as_version=4)
    title, learn, recap = stem, [], ""
    sections, figures, code = [], [], []
    heading = None
    before = ""
    for cell in nb.cells:
        src = _source(cell)
        if cell.cell_type == "markdown":
            for line in src.splitlines():
                if line.startswith("# ") and title == stem:
                    title = line[2:].strip()
            if "**You will learn**" in src and not learn:
                learn = [ln.lstrip("> -").strip() for ln in src.split("**You will learn**")[1].split("**You need")[0]
                         .splitlines() if ln.lstrip("> ").startswith("-")]
            h = re.match(r"(#{2,3})\s+(.+)", src.lstrip())
            if h:
                heading = h.group(2).strip()
                body = src.lstrip().split("\n", 1)[1] if "\n" in src.lstrip() else ""
                para = next((p for p in re.split(r"\n\s*\n", body) if p.strip() and not p.lstrip().startswith(
                    ("#", "|", ">", "```", "$$", "!["))), "")
                if heading.lower().startswith("recap"):
                    recap = _sentences(para, 3, 600)
                elif len(h.group(1)) == 2 and not SKIP_SECTIONS.match(heading) and para:
                    sections.append((heading, _sentences(para)))
            before = src
        elif cell.cell_type == "code":
            code.append(cell)
            for out in cell.get("outputs", []):
                if "image/png" in out.get("data", {}) and heading and not SKIP_SECTIONS.match(heading):
                    figures.append((heading, out["data"]["image/png"], _sentences(before, 1, 300)))
                    break
    return {"stem": stem, "title": title, "learn": learn, "sections": sections, "figures": figures, "recap": recap,
            "code": code}


_BUILTINS = set(dir(builtins))


def _free_names(src: str) -> set[str] | None:
    """Names a cell reads without defining them (None when it does not parse)."""
    try:
        tree = ast.parse(src)
    except SyntaxError:
        return None
    stored, loaded = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (stored if isinstance(node.ctx, (ast.Store, ast.Del)) else loaded).add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            stored.add(node.name)
        elif isinstance(node, ast.arg):
            stored.add(node.arg)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            stored.update((a.asname or a.name).split(".")[0] for a in node.names)
    return loaded - stored - _BUILTINS


def _imports(cells) -> list[str]:
    lines = []
    for cell in cells:
        try:
            tree = ast.parse(_source(cell))
        except SyntaxError:
            continue
        for node in tree.body:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                seg = ast.get_source_segment(_source(cell), node)
                if seg not in lines:
                    lines.append(seg)
    return lines


def _stored(src: str) -> set[str]:
    try:
        tree = ast.parse(src)
    except SyntaxError:
        return set()
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            out.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            out.add(node.name)
    return out


def _short(src: str) -> list[str]:
    return [ln for ln in src.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]


def live_cell(parts: dict, max_helpers: int = 2) -> tuple[str, dict] | None:
    """A short cell of the notebook that runs from a small setup: (setup source, the cell).

    The cell has at most 12 lines, a saved text output, no exercise check and no output that depends on the machine.
    Every name it reads is one it defines, a builtin, an import of an earlier cell, or defined by at most
    ``max_helpers`` short earlier cells (checked with ``ast``); the setup is those imports, ``attn_lib.setup()`` and
    those cells. Cells with an ``assert`` are preferred (they state a claim and check it live), then short setups.
    """
    code = parts["code"]
    found = []
    for i, cell in enumerate(code):
        src = _source(cell)
        outputs = cell.get("outputs", [])
        if not (2 <= len(_short(src)) <= 12) or "check_" in src or "NBVAL" in src or "setup(" in src:
            continue
        if not any(o.get("output_type") == "stream" and len(o.get("text", "").splitlines()) <= 12 for o in outputs):
            continue
        if any(o.get("output_type") in ("display_data", "error") for o in outputs):
            continue
        imports = _imports(code[:i])
        provided = {n for ln in imports for n in _names_of_import(ln)}
        free = _free_names(src)
        helpers: list[int] = []
        while free:  # the latest earlier cell that defines a missing name, and what it needs in turn
            name = sorted(free - provided)[0] if free - provided else None
            if name is None:
                break
            j = next((j for j in range(i - 1, -1, -1) if name in _stored(_source(code[j]))), None)
            hsrc = _source(code[j]) if j is not None else ""
            if (j is None or j in helpers or len(helpers) >= max_helpers or len(_short(hsrc)) > 12
                    or "NBVAL" in hsrc or "check_" in hsrc or _free_names(hsrc) is None):
                free = None
                break
            helpers.append(j)
            free = (free | _free_names(hsrc)) - _stored(hsrc) - provided
        if free is None:
            continue
        body = ["import attn_lib"] * ("import attn_lib" not in imports) + imports + ["", "attn_lib.setup()"]
        for j in sorted(helpers):
            body += ["", _source(code[j]).rstrip()]
        found.append(("assert " in src, -len(helpers), -i, "\n".join(body), cell))
    if not found:
        return None
    best = max(found, key=lambda f: f[:3])
    return best[3], best[4]


def _names_of_import(line: str) -> set[str]:
    node = ast.parse(line).body[0]
    return {(a.asname or a.name).split(".")[0] for a in node.names}


def _figure_slide(stem: str, heading: str, png: str, caption: str, k: int) -> dict:
    name = f"figure-{k}.png"
    cell = _md(f"## {heading}\n\n![A figure of notebook {stem[:2]}, section “{heading}”](attachment:{name})\n\n"
               f"*{caption}* (notebook `{stem}`)")
    cell["attachments"] = {name: {"image/png": png}}
    return cell


def _spread(items: list, n: int) -> list:
    """``n`` items spread evenly over the list (all of them when there are no more than ``n``), in order."""
    if len(items) <= n:
        return list(items)
    return [items[round(i * (len(items) - 1) / (n - 1))] for i in range(n)] if n > 1 else items[:1]


def title_cell(lab: Lab) -> dict:
    names = ", ".join(f"`{n}`" for n in lab.notebooks)
    return _md(f"# {lab.title}\n\nNotebooks: {names}\n\n"
               f"- **Present first (15 min):** {lab.present}\n- **Exercises in class:** {lab.in_class}\n"
               f"- **Homework:** {lab.homework}\n\n*A talk generated from the executed notebooks and the instructor "
               "notes (`make slides`); the plan is in docs/teaching.md.*")


def talk_slides(lab: Lab, notebooks: Path = ROOT / "notebooks", notes: Path = NOTES) -> list[list[dict]]:
    """The lab's talk, slide by slide (each a list of cells, the first one starting the slide).

    Raises:
        TalkError: the notes lack a part, no notebook of the lab has a figure or a live cell, or the talk would not
            have between :data:`MIN_SLIDES` and :data:`MAX_SLIDES` slides.
    """
    info = lab_notes(lab, notes)
    parts = [notebook_parts(stem, notebooks) for stem in lab.notebooks]
    opening = [[title_cell(lab)]]
    for p in parts:
        learn = "\n".join(f"- {ln}" for ln in p["learn"])
        opening.append([_md(f"# {p['title']}\n\n**You will learn**\n\n{learn}")])
    opening.append([_md(f"## The idea\n\n{info['idea']}"),
                    _md(f"On the board: {info['board']}", "notes")])
    reading = info["reading"][:1].upper() + info["reading"][1:]
    opening.append([_md(f"## One equation\n\n{info['equation']}\n\n{reading}")])
    live = next((lc for p in parts if (lc := live_cell(p))), None)
    if live is None:
        raise TalkError(f"{lab.slug}: no notebook of the lab has a short cell that runs with its imports alone")
    setup, cell = live
    setup_cell = nbformat.v4.new_code_cell(setup)
    setup_cell.metadata["slideshow"] = {"slide_type": "-"}
    shown = copy.deepcopy(cell)
    shown.metadata = {"slideshow": {"slide_type": "fragment"}}
    shown.outputs = trim_outputs(shown.outputs)
    closing = [[_md("## One live cell\n\nRun the setup, then the cell (Shift+Enter in RISE): the saved output below is "
                    "what it printed when the notebook was executed."), setup_cell, shown]]
    closing.append([_md("## Who thinks …?\n\n" + "\n".join(f"- {s}" for s, _ in info["stumbles"])),
                    _md("What to do: " + " ".join(f"{s} {r}" for s, r in info["stumbles"]), "notes")])
    closing.append([_md("## Discuss in pairs\n\n" + "\n".join(f"{i}. {q}" for i, q in enumerate(info["prompts"], 1)))])
    for p in parts:
        if p["recap"]:
            closing.append([_md(f"## Recap · {p['title'].split(' · ')[0]}\n\n{p['recap']}")])
    closing.append([_md(f"## Exercises\n\n- **In class:** {lab.in_class}\n- **Homework:** {lab.homework}")])
    room = TARGET_SLIDES - len(opening) - len(closing)
    if not any(p["figures"] for p in parts):
        raise TalkError(f"{lab.slug}: no figure in {', '.join(lab.notebooks)}")
    # the body: each notebook's sections and figures, in notebook order, one figure per section at most
    body = []
    k = 0
    for p in parts:
        seen = set()
        figs = {h: (png, cap) for h, png, cap in reversed(p["figures"])}  # the first figure of each section
        order = []
        for h, para in p["sections"]:
            order.append(("section", p["stem"], h, para))
            if h in figs:
                order.append(("figure", p["stem"], h, figs[h]))
                seen.add(h)
        order += [("figure", p["stem"], h, figs[h]) for h, _, _ in p["figures"] if h not in seen and not seen.add(h)]
        body.append(order)
    n_fig = max(1, min(sum(1 for o in body for x in o if x[0] == "figure"), room // 2))
    n_sec = room - n_fig
    figures = _spread([x for o in body for x in o if x[0] == "figure"], n_fig)
    sections = _spread([x for o in body for x in o if x[0] == "section"], n_sec)
    chosen = [x for o in body for x in o if x in figures or x in sections]
    middle = []
    for kind, stem, h, payload in chosen:
        if kind == "section":
            middle.append([_md(f"## {h}\n\n{payload}")])
        else:
            k += 1
            middle.append([_figure_slide(stem, h, payload[0], payload[1], k)])
    slides = opening + middle + closing
    if not MIN_SLIDES <= len(slides) <= MAX_SLIDES:
        raise TalkError(f"{lab.slug}: {len(slides)} slides, expected {MIN_SLIDES}-{MAX_SLIDES}")
    return slides


def deck_notebook(lab: Lab, notebooks: Path = ROOT / "notebooks", notes: Path = NOTES) -> nbformat.NotebookNode:
    """The lab's talk as one notebook with slide metadata (cells copied, outputs trimmed; the course notebooks are
    read, never changed)."""
    cells = [c for slide in talk_slides(lab, notebooks, notes) for c in slide]
    deck = nbformat.v4.new_notebook(cells=cells)
    first = nbformat.read(notebooks / f"{lab.notebooks[0]}.ipynb", as_version=4)
    if first.metadata.get("kernelspec"):
        deck.metadata["kernelspec"] = first.metadata["kernelspec"]
    deck.metadata["title"] = f"{lab.title}: " + ", ".join(lab.notebooks)
    for i, cell in enumerate(deck.cells):  # ids unique across the talk
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
