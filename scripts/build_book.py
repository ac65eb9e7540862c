"""Build the course website (`make book`): Sphinx + myst-nb from the executed notebooks, offline.

Writes the Sphinx sources to build/book-src/ and the site to build/book/ (both ignored by git):

- the table of contents, in course order, from whatever ``notebooks/NN_*.ipynb`` exist, then
  ``notebooks/glossary.md`` and a bibliography (``notebooks/references.md`` or ``bibliography.md``) if present;
- each notebook as it was saved by ``make execute`` (nothing is executed), with a "run this
  notebook" note and a download link to the original ``.ipynb`` added under its title;
- widget views (they need a kernel) replaced by what their ``Output`` widgets showed when the notebook
  was executed (from the saved widget state), under a short note; solutions notebooks are left out.

After the build, the search page gets every page's content as a script (``offline_search``), so that
search shows its summaries when the site is opened from disk, and every page is checked for ``<script src>``/``<link href>``/``<img src>`` that points
to another host: the site must work with no network (tests_browser/test_site.py checks it in a browser).

Usage: python scripts/build_book.py [--out build/book] [--jobs 2]
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"
CONF_DIR = ROOT / "book"
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
BIBLIOGRAPHY_NAMES = ("references.md", "bibliography.md")
# A reference to another host in an attribute that makes the browser fetch it.
_FETCHING_ATTR = re.compile(r"""<(?:script|link|img|iframe|source)\b[^>]*?\b(?:src|href)\s*=\s*["']?((?:https?:)?//[^"'\s>]+)""",
                            re.IGNORECASE)


def course_pages(notebooks: Path = NOTEBOOKS) -> tuple[list[Path], list[Path]]:
    """(notebooks in course order, reference pages): ``NN_*.ipynb`` sorted by number, then glossary and bibliography."""
    numbered = sorted(p for p in notebooks.glob("[0-9][0-9]_*.ipynb") if p.is_file())
    reference = [notebooks / "glossary.md"] + [notebooks / n for n in BIBLIOGRAPHY_NAMES]
    return numbered, [p for p in reference if p.is_file()]


def toc_markdown(numbered: list[Path], reference: list[Path]) -> str:
    lines = ["```{toctree}", ":maxdepth: 1", ":caption: Notebooks", ""]
    lines += [f"notebooks/{p.stem}" for p in numbered]
    lines.append("```")
    if reference:
        lines += ["", "```{toctree}", ":maxdepth: 1", ":caption: Reference", ""]
        lines += [f"notebooks/{p.stem}" for p in reference]
        lines.append("```")
    return "\n".join(lines) + "\n"


def run_note(name: str, download_target: str) -> str:
    return (":::{admonition} Run this notebook\n:class: attn-run-note\n\n"
            f"This page shows the saved outputs of `notebooks/{name}`. To run it (and use its sliders and "
            "exercises): in a clone of the course, run `make lab` and open it in JupyterLab. "
            f"{{download}}`Download {name} <{download_target}>`.\n:::\n")


def _widget_outputs(state: dict, model_id: str, seen: set[str] | None = None) -> tuple[list, list[str]]:
    """The outputs that the Output widgets inside a widget view captured, and the kinds of controls in it."""
    seen = set() if seen is None else seen
    if model_id in seen or model_id not in state:
        return [], []
    seen.add(model_id)
    model = state[model_id]
    name = model.get("model_name", "")
    s = model.get("state", {})
    outputs = list(s.get("outputs", [])) if name == "OutputModel" else []
    kinds = [name.removesuffix("Model")] if name not in ("OutputModel", "VBoxModel", "HBoxModel", "BoxModel",
                                                         "LayoutModel") and not name.endswith("StyleModel") else []
    for child in s.get("children", []):
        if isinstance(child, str) and child.startswith("IPY_MODEL_"):
            o, k = _widget_outputs(state, child.removeprefix("IPY_MODEL_"), seen)
            outputs += o
            kinds += k
    return outputs, kinds


def static_widgets(nb: nbformat.NotebookNode) -> int:
    """Replace each widget view by a note and the outputs its Output widgets held; returns how many."""
    state = nb.metadata.get("widgets", {}).get(WIDGET_STATE, {}).get("state", {})
    replaced = 0
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        new_outputs = []
        for out in cell.get("outputs", []):
            view = out.get("data", {}).get(WIDGET_VIEW) if out.get("output_type") in ("display_data", "execute_result") else None
            if view is None:
                new_outputs.append(out)
                continue
            replaced += 1
            shown, kinds = _widget_outputs(state, view.get("model_id", ""))
            if {"FloatProgress", "IntProgress"} & set(kinds):  # a tqdm bar: its text is enough
                continue
            controls = ", ".join(sorted({k for k in kinds if k not in ("Label", "HTML")})) or "widget"
            what = "what it showed when the notebook was executed" if shown else "it has no saved picture"
            note = (f'<div class="attn-widget-note">Interactive ({controls}): it needs a running kernel. Below, '
                    f"{what}; run the notebook with <code>make lab</code> to move it.</div>")
            new_outputs.append(nbformat.v4.new_output("display_data", data={"text/html": note, "text/plain": note}))
            new_outputs += [nbformat.from_dict(o) for o in shown if o.get("output_type") != "stream" or o.get("name") != "stderr"]
        cell.outputs = new_outputs
    nb.metadata.pop("widgets", None)
    return replaced


def prepare_sources(src: Path, notebooks: Path = NOTEBOOKS) -> dict:
    """Write the Sphinx source tree to ``src``; returns what it contains."""
    if src.exists():
        shutil.rmtree(src)
    (src / "notebooks").mkdir(parents=True)
    shutil.copytree(CONF_DIR / "_static", src / "_static")
    numbered, reference = course_pages(notebooks)
    if not numbered:
        sys.exit(f"no NN_*.ipynb found under {notebooks}")
    index = (CONF_DIR / "intro.md").read_text(encoding="utf-8") + "\n" + toc_markdown(numbered, reference)
    (src / "index.md").write_text(index, encoding="utf-8")
    widgets = 0
    for path in numbered:
        nb = nbformat.read(path, as_version=4)
        nb = copy.deepcopy(nb)
        widgets += static_widgets(nb)
        target = os.path.relpath(path, src / "notebooks")
        note = nbformat.v4.new_markdown_cell(run_note(path.name, target))
        note["id"] = "attn-run-note"
        nb.cells.insert(1 if nb.cells and nb.cells[0].cell_type == "markdown" else 0, note)
        nbformat.write(nb, src / "notebooks" / path.name)
    for path in reference:
        shutil.copy2(path, src / "notebooks" / path.name)
    return {"notebooks": [p.name for p in numbered], "reference": [p.name for p in reference], "widgets": widgets}


#: The search page's scripts: the pages' contents, then the fetch() shim that answers from them (book/_static).
SEARCH_SCRIPTS = '<script src="_static/search_pages.js"></script><script src="_static/offline_search.js"></script>'


def _search_text(html: str) -> str | None:
    """The ``role="main"`` element of a built page, light: no scripts, images or markup beyond the ids that
    search summaries use to find a section (pygments' spans and every other attribute are dropped)."""
    from bs4 import BeautifulSoup  # a dependency of nbconvert, so always installed with the course

    main = BeautifulSoup(html, "html.parser").find(attrs={"role": "main"})
    if main is None:
        return None
    for tag in main.find_all(["script", "style", "img", "svg", "iframe", "nav", "button", "form"]):
        tag.decompose()
    for tag in main.find_all(True):
        tag.attrs = {k: v for k, v in tag.attrs.items()
                     if k in ("id", "role") or (k == "class" and "headerlink" in v)}
        if tag.name == "span" and not tag.attrs:
            tag.unwrap()
    return str(main)


def offline_search(site: Path) -> int:
    """Make the search page work from disk (``file://``), where a browser refuses its fetch() of each result page.

    Writes ``_static/search_pages.js`` (every page's main content, see :func:`_search_text`) and loads it, with
    ``_static/offline_search.js``, on ``search.html`` just before Sphinx's ``searchtools.js``. Returns the number
    of pages written."""
    pages = {}
    for page in sorted(site.rglob("*.html")):
        rel = page.relative_to(site).as_posix()
        if rel.startswith("_static/") or rel in ("search.html", "genindex.html"):
            continue
        text = _search_text(page.read_text(encoding="utf-8"))
        if text is not None:
            pages[rel] = text
    (site / "_static" / "search_pages.js").write_text(
        "// Written by scripts/build_book.py: the pages' contents for search summaries (offline_search.js).\n"
        "window.ATTN_SEARCH_PAGES = " + json.dumps(pages, ensure_ascii=False, sort_keys=True) + ";\n",
        encoding="utf-8")
    search = site / "search.html"
    html = search.read_text(encoding="utf-8")
    anchor = '<script src="_static/searchtools.js'
    if anchor not in html:
        raise RuntimeError(f"{search}: no {anchor!r} to put the offline search scripts before")
    search.write_text(html.replace(anchor, SEARCH_SCRIPTS + anchor, 1), encoding="utf-8")
    return len(pages)


def outside_references(site: Path) -> list[str]:
    """``file: url`` for every fetching attribute in the built HTML that points to another host."""
    found = []
    for page in site.rglob("*.html"):
        for m in _FETCHING_ATTR.finditer(page.read_text(encoding="utf-8", errors="replace")):
            found.append(f"{page.relative_to(site)}: {m.group(1)}")
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "build" / "book")
    parser.add_argument("--src", type=Path, default=ROOT / "build" / "book-src")
    parser.add_argument("--jobs", default="2")
    parser.add_argument("--notebooks", type=Path, default=NOTEBOOKS,
                        help="the folder of NN_*.ipynb (default: notebooks/; another one to try re-executed copies)")
    args = parser.parse_args(argv)
    t0 = time.monotonic()
    info = prepare_sources(args.src, args.notebooks.resolve())
    print(f"book: {len(info['notebooks'])} notebooks, reference pages {info['reference']}, "
          f"{info['widgets']} widget views made static", flush=True)
    if args.out.exists():
        shutil.rmtree(args.out)
    cmd = [sys.executable, "-m", "sphinx", "-b", "html", "-q", "-j", str(args.jobs), "-c", str(CONF_DIR),
           "-d", str(args.src / ".doctrees"), str(args.src), str(args.out)]
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    r = subprocess.run(cmd, cwd=ROOT, env=env)
    if r.returncode != 0:
        print(f"book: sphinx-build failed ({r.returncode})", file=sys.stderr)
        return r.returncode
    searchable = offline_search(args.out)
    outside = outside_references(args.out)
    if outside:
        print("book: pages that would fetch from another host:\n  " + "\n  ".join(outside[:20]), file=sys.stderr)
        return 1
    print(f"book: built {args.out} in {time.monotonic() - t0:.0f} s ({searchable} pages searchable from disk)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
