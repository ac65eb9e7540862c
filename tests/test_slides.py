"""`make slides` (scripts/build_slides.py): one talk per lab of the teaching plan (15-20 slides: the idea, figures, one
equation, one live cell that runs from its setup alone), the course notebooks untouched, long or kernel-bound outputs
trimmed, and a deck that would load from another host is caught. The deck itself is opened in Chromium by
tests_browser/test_slides.py."""

import importlib.util
import json
import re

import nbformat
import pytest

from attn_lib import REPO_ROOT
from classroom.labs import PlanError, labs

spec = importlib.util.spec_from_file_location("build_slides", REPO_ROOT / "scripts" / "build_slides.py")
build_slides = importlib.util.module_from_spec(spec)
spec.loader.exec_module(build_slides)


def test_labs_are_the_plan_s_rows():
    plan = labs()
    assert [lab.number for lab in plan] == list(range(1, len(plan) + 1))
    by_number = {lab.number: lab for lab in plan}
    assert by_number[1].notebooks == ("00_welcome", "01_tokens_and_embeddings")
    assert by_number[8].notebooks == ("08_gqa_mqa_kv_cache",) and not by_number[8].optional  # 08 alone
    assert by_number[9].notebooks == ("09_tiled_flash_attention",) and by_number[9].optional
    assert by_number[1].slug == "lab-01" and "softmax" in by_number[1].in_class


def test_a_plan_without_its_table_or_with_an_unknown_notebook_is_refused(tmp_path):
    (tmp_path / "g.md").write_text("# guide\n\nno plan here\n")
    with pytest.raises(PlanError, match="no section"):
        labs(tmp_path / "g.md")
    (tmp_path / "g.md").write_text("## A plan for 2 labs\n\n| lab | notebook(s) | a | b | c |\n|---|---|---|---|---|\n"
                                   "| 1 | 77 | x | y | z |\n")
    with pytest.raises(PlanError, match="77"):
        labs(tmp_path / "g.md")


def _md(text):
    return nbformat.v4.new_markdown_cell(text)


def test_long_outputs_are_trimmed_and_kernel_bound_views_replaced():
    long = nbformat.v4.new_output("stream", name="stdout", text="".join(f"line {i}\n" for i in range(40)))
    widget = nbformat.v4.new_output("display_data", data={build_slides.WIDGET_VIEW: {"model_id": "x"},
                                                          "text/plain": "VBox(...)"})
    view = nbformat.v4.new_output("display_data", data={"text/html": "<div></div><script>draw()</script>",
                                                        "text/plain": "<HTML>"})
    figure = nbformat.v4.new_output("display_data", data={"image/png": "iVBOR", "text/plain": "<Figure>"})
    out = build_slides.trim_outputs([long, widget, view, figure], max_lines=5)
    assert out[0]["text"].splitlines()[:5] == [f"line {i}" for i in range(5)]
    assert "35 more lines" in out[0]["text"] and len(out[0]["text"].splitlines()) == 6
    assert out[1]["text"].strip() == build_slides.WIDGET_NOTE
    assert out[2]["text"].strip() == build_slides.SCRIPT_NOTE
    assert out[3] == figure
    assert long["text"].count("\n") == 40  # the input is not changed


def _slides_of(deck):
    return [c for c in deck.cells if c.metadata["slideshow"]["slide_type"] in ("slide", "subslide")]


@pytest.mark.parametrize("lab", labs(), ids=lambda lab: lab.slug)
def test_every_lab_s_deck_is_a_talk(lab):
    """15-20 slides: the title, each notebook's title, the idea, one equation, figures, one live cell, the stumbles,
    the prompts, the exercises; not the notebook cut at its headings."""
    before = {stem: (REPO_ROOT / "notebooks" / f"{stem}.ipynb").read_bytes() for stem in lab.notebooks}
    deck = build_slides.deck_notebook(lab)
    slides = _slides_of(deck)
    assert build_slides.MIN_SLIDES <= len(slides) <= build_slides.MAX_SLIDES, len(slides)
    titles = [s.source.split("\n")[0] for s in slides]
    assert titles[0] == f"# {lab.title}" and lab.present in slides[0].source
    for stem in lab.notebooks:  # each notebook's title slide, its heading as the notebook has it
        nb = nbformat.read(REPO_ROOT / "notebooks" / f"{stem}.ipynb", as_version=4)
        assert nb.cells[0].source.split("\n")[0] in titles
    assert titles[1].startswith(f"# {lab.notebooks[0][:2]} · ")  # the first notebook's title comes next
    for heading in ("## The idea", "## One equation", "## One live cell", "## Who thinks …?", "## Discuss in pairs",
                    "## Exercises"):
        assert heading in titles, heading
    equation = slides[titles.index("## One equation")].source
    assert equation.count("$$") == 2
    figures = [s for s in slides if "attachments" in s and any("image/png" in v for v in s.attachments.values())]
    assert figures and all("](attachment:" in s.source for s in figures)
    code = [c for c in deck.cells if c.cell_type == "code"]
    assert len(code) == 2 and "attn_lib.setup()" in code[0].source  # the setup, then the live cell
    assert any(o.get("output_type") == "stream" for o in code[1].outputs)
    notes = [c for c in deck.cells if c.metadata["slideshow"]["slide_type"] == "notes"]
    assert len(notes) == 2  # the board (speaker view), what to do about each stumble
    assert len({c["id"] for c in deck.cells}) == len(deck.cells)
    assert {stem: (REPO_ROOT / "notebooks" / f"{stem}.ipynb").read_bytes() for stem in lab.notebooks} == before


LIVE = """
import contextlib, importlib.util, io, json, sys
import matplotlib
matplotlib.use("Agg")
spec = importlib.util.spec_from_file_location("bs", "scripts/build_slides.py")
bs = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bs)
from classroom.labs import labs
result = {}
for lab in labs():
    setup, cell = [c for c in bs.deck_notebook(lab).cells if c.cell_type == "code"]
    ns = {}
    with contextlib.redirect_stdout(io.StringIO()):
        exec(compile(setup.source, lab.slug + "-setup", "exec"), ns)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(cell.source, lab.slug + "-live", "exec"), ns)
    saved = "".join(o.get("text", "") for o in cell.outputs if o.get("output_type") == "stream")
    result[lab.slug] = [out.getvalue(), saved]
json.dump(result, sys.stdout)
"""


def test_every_live_cell_runs_from_its_setup_and_prints_what_the_slide_shows():
    """The live cell, run after its slide's setup alone (fresh process, nothing else of the notebook), prints exactly
    the saved output the static slide shows (no cell of the notebook's between them is needed)."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "OMP_NUM_THREADS": "1"}
    run = subprocess.run([sys.executable, "-c", LIVE], cwd=REPO_ROOT, env=env, capture_output=True, text=True,
                         timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(run.stdout)
    assert set(result) == {lab.slug for lab in labs()}
    for slug, (printed, saved) in result.items():
        assert printed == saved and saved, slug


def test_a_lab_without_instructor_notes_has_no_talk(tmp_path):
    (lab3,) = [lab for lab in labs() if lab.number == 3]
    (tmp_path / "notes.md").write_text("# Instructor notes\n\n## Lab 4 · 04\n\n**The idea.** x\n")
    with pytest.raises(build_slides.TalkError, match="Lab 3"):
        build_slides.deck_notebook(lab3, notes=tmp_path / "notes.md")


def test_a_live_cell_needs_only_its_setup():
    def cell(src):
        c = nbformat.v4.new_code_cell(src)
        c.outputs = [nbformat.v4.new_output("stream", name="stdout", text="ok\n")]
        return c

    parts = {"code": [cell("import torch\nimport attn_lib"), cell("big = torch.ones(3)\nprint(big)"),
                      cell("y = undefined_elsewhere + 1\nprint(y)"),
                      cell("z = big * 2\nassert z.sum() == 6\nprint(z)")]}
    setup, chosen = build_slides.live_cell(parts)
    assert chosen is parts["code"][3]  # the one with an assert; the cell with an undefined name is never chosen
    assert "import torch" in setup and "big = torch.ones(3)" in setup and "attn_lib.setup()" in setup


def test_outside_references_are_caught_and_links_are_not():
    page = ('<script src="https://cdn.example/reveal.js"></script><link rel="stylesheet" href="//fonts.example/a.css">'
            "<script type=\"module\">import mermaid from 'https://cdn.example/mermaid.mjs';</script>"
            "<style>@import url(https://fonts.googleapis.com/css?family=Lato);</style>"
            '<a href="https://arxiv.org/abs/1706.03762">paper</a><script src="../reveal/node_modules/x.js"></script>')
    assert build_slides.outside_references(page) == [
        "https://cdn.example/reveal.js", "//fonts.example/a.css", "https://cdn.example/mermaid.mjs",
        "https://fonts.googleapis.com/css?family=Lato"]


def test_the_makefile_installs_the_pinned_packages():
    makefile = (REPO_ROOT / "Makefile").read_text()
    pinned = re.search(r"^SLIDES_NPM\s*:=\s*(.+)$", makefile, re.M).group(1).split()
    assert tuple(pinned) == build_slides.NPM_PACKAGES
    assert all(re.fullmatch(r"[a-z.]+@\d+\.\d+\.\d+", p) for p in pinned)  # exact versions
    assert "slides" in makefile.split("help:")[1].split("\n\n")[0]  # listed in make help


def test_jupyterlab_rise_is_a_pinned_requirement():
    assert "jupyterlab-rise==0.43.1" in (REPO_ROOT / "requirements.txt").read_text().splitlines()


def test_the_deck_s_json_is_a_valid_notebook(tmp_path):
    (lab1,) = [lab for lab in labs() if lab.number == 1]
    deck = build_slides.deck_notebook(lab1)
    nbformat.write(deck, tmp_path / "lab-01.ipynb")  # attachments, notes and code cells included
    nbformat.validate(nbformat.read(tmp_path / "lab-01.ipynb", as_version=4))
    assert json.loads((tmp_path / "lab-01.ipynb").read_text())["metadata"]["kernelspec"]["name"] == "attn-course"
