"""`make slides` (scripts/build_slides.py): the decks follow the teaching plan's labs, slide metadata is made on copies
(never in the course notebooks), long or kernel-bound outputs are trimmed, and a deck that would load from another
host is caught. The deck itself is opened in Chromium by tests_browser/test_slides.py."""

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


def test_headings_start_slides_and_code_cells_are_fragments():
    st = build_slides.slide_type
    assert st(_md("# 03 · Title"), first=False) == "slide"
    assert st(_md("## 1 · Section"), first=False) == "slide"
    assert st(_md("### Exercise 1"), first=False) == "subslide"
    assert st(_md("Just a paragraph with a # inside"), first=False) == "-"
    assert st(_md("Paragraph"), first=True) == "slide"
    assert st(nbformat.v4.new_code_cell("x = 1"), first=False) == "fragment"


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


def test_a_deck_is_the_lab_s_notebooks_with_slide_metadata_on_copies():
    nb_path = REPO_ROOT / "notebooks" / "03_scaled_dot_product_attention.ipynb"
    before = nb_path.read_bytes()
    (lab3,) = [lab for lab in labs() if lab.number == 3]
    deck = build_slides.deck_notebook(lab3)
    course = nbformat.read(nb_path, as_version=4)
    assert len(deck.cells) == 1 + len(course.cells)  # the title slide, then every cell
    types = [c.metadata["slideshow"]["slide_type"] for c in deck.cells]
    assert types[0] == types[1] == "slide" and set(types) <= {"slide", "subslide", "fragment", "-"}
    assert all(t == "fragment" for t, c in zip(types, deck.cells) if c.cell_type == "code")
    assert len({c["id"] for c in deck.cells}) == len(deck.cells)
    assert "Lab 3" in deck.cells[0].source and lab3.present in deck.cells[0].source
    assert nb_path.read_bytes() == before  # the course notebook is untouched
    assert not any("slideshow" in c.metadata for c in course.cells)


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
    nbformat.write(deck, tmp_path / "lab-01.ipynb")
    nbformat.validate(nbformat.read(tmp_path / "lab-01.ipynb", as_version=4))
    assert json.loads((tmp_path / "lab-01.ipynb").read_text())["metadata"]["kernelspec"]["name"] == "attn-course"
