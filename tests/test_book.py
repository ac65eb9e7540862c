"""scripts/build_book.py, the website's source preparation (no Sphinx needed): table of contents in
course order, widget views made static, the check for pages that would fetch from another host."""

from __future__ import annotations

import importlib.util
import re

import nbformat
import pytest

from attn_lib import REPO_ROOT

_spec = importlib.util.spec_from_file_location("build_book", REPO_ROOT / "scripts" / "build_book.py")
build_book = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(build_book)


def _notebook(path, cells=()):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell(f"# {path.stem}")] + list(cells)
    nbformat.write(nb, path)


def test_toc_is_in_course_order_and_picks_up_new_pages(tmp_path):
    for name in ["10_capstone_decoder", "00_welcome", "06_heads_in_a_real_model", "05_multi_head_attention"]:
        _notebook(tmp_path / f"{name}.ipynb")
    _notebook(tmp_path / "scratch.ipynb")  # not a course notebook (no NN_ prefix)
    (tmp_path / "solutions").mkdir()
    _notebook(tmp_path / "solutions" / "05_multi_head_attention_solutions.ipynb")
    numbered, reference = build_book.course_pages(tmp_path)
    assert [p.stem for p in numbered] == ["00_welcome", "05_multi_head_attention", "06_heads_in_a_real_model",
                                          "10_capstone_decoder"]
    assert reference == []
    (tmp_path / "glossary.md").write_text("# Glossary\n")
    (tmp_path / "references.md").write_text("# References\n")
    numbered, reference = build_book.course_pages(tmp_path)
    assert [p.name for p in reference] == ["glossary.md", "references.md"]
    toc = build_book.toc_markdown(numbered, reference)
    assert toc.index("notebooks/00_welcome") < toc.index("notebooks/10_capstone_decoder") < toc.index("notebooks/glossary")
    assert ":caption: Reference" in toc


def test_the_real_course_has_a_kv_cache_page():
    numbered, _ = build_book.course_pages()
    assert [p.stem[:2] for p in numbered] == sorted(p.stem[:2] for p in numbered)
    assert any("kv_cache" in p.stem for p in numbered)  # what the site's search test looks for


def _widget_notebook():
    """A saved slider + Output widget whose Output holds a PNG, as nbclient stores them."""
    png = {"output_type": "display_data", "data": {"image/png": "iVBORw0KGgo=", "text/plain": "<Figure>"}, "metadata": {}}
    state = {
        "box": {"model_name": "VBoxModel", "state": {"children": ["IPY_MODEL_slider", "IPY_MODEL_out"]}},
        "slider": {"model_name": "IntSliderModel", "state": {"value": 3}},
        "out": {"model_name": "OutputModel", "state": {"outputs": [png]}},
        "bar": {"model_name": "HBoxModel", "state": {"children": ["IPY_MODEL_prog"]}},
        "prog": {"model_name": "FloatProgressModel", "state": {}},
    }
    view = lambda mid: nbformat.v4.new_output(  # noqa: E731
        "display_data", data={build_book.WIDGET_VIEW: {"model_id": mid, "version_major": 2}, "text/plain": "VBox()"})
    cell = nbformat.v4.new_code_cell("explorer()", outputs=[view("box"), view("bar"),
                                                             nbformat.v4.new_output("stream", text="done\n")])
    nb = nbformat.v4.new_notebook(cells=[cell])
    nb.metadata["widgets"] = {build_book.WIDGET_STATE: {"state": state, "version_major": 2, "version_minor": 0}}
    return nb, png


def test_widget_views_become_their_saved_outputs_and_a_note():
    nb, png = _widget_notebook()
    assert build_book.static_widgets(nb) == 2
    outs = nb.cells[0].outputs
    assert "IntSlider" in outs[0]["data"]["text/html"] and "make lab" in outs[0]["data"]["text/html"]
    assert outs[1]["data"]["image/png"] == png["data"]["image/png"]  # what the Output widget showed
    assert outs[2]["output_type"] == "stream"  # the progress bar is dropped, the rest kept in order
    assert len(outs) == 3 and "widgets" not in nb.metadata  # no widget state left: no embed manager needed


def test_outside_references_are_found(tmp_path):
    (tmp_path / "a.html").write_text('<script src="https://cdnjs.cloudflare.com/x.js"></script>'
                                     '<link rel="stylesheet" href="//fonts.example.com/f.css">'
                                     '<a href="https://example.com/">a plain link is fine</a>'
                                     '<script src="_static/local.js"></script><img src="x.png">')
    found = build_book.outside_references(tmp_path)
    assert found == ["a.html: https://cdnjs.cloudflare.com/x.js", "a.html: //fonts.example.com/f.css"]


@pytest.mark.parametrize("name", ["05_multi_head_attention.ipynb"])
def test_run_note_links_the_original_notebook(name):
    note = build_book.run_note(name, "../../../notebooks/" + name)
    assert "make lab" in note and f"{{download}}`Download {name} <../../../notebooks/{name}>`" in note


def _mini_site(tmp_path):
    """A built site in miniature: a page with a section, the search page as Sphinx 9 writes it, the static folder."""
    (tmp_path / "_static").mkdir()
    (tmp_path / "notebooks").mkdir()
    (tmp_path / "notebooks" / "04_masking.html").write_text(
        '<html><head><script src="x.js"></script></head><body><nav>menu</nav>'
        '<main id="main-content" role="main"><section id="padding"><h2>Padding'
        '<a class="headerlink" href="#padding">#</a></h2><div class="highlight"><pre><span class="n">mask</span>'
        '</pre></div><img src="data:image/png;base64,AAAA"><script>var big = 1;</script></section></main></body></html>')
    (tmp_path / "search.html").write_text('<html><head><script src="_static/searchtools.js"></script>'
                                          '<script src="searchindex.js"></script></head><body></body></html>')
    return tmp_path


def test_search_works_from_disk_with_the_pages_inline(tmp_path):
    """Sphinx's search page fetch()es each result for its summary, which file:// refuses (CORS): the build writes the
    pages' contents into _static/search_pages.js and loads it, with the fetch shim, before searchtools.js."""
    import json

    site = _mini_site(tmp_path)
    assert build_book.offline_search(site) == 1
    js = (site / "_static" / "search_pages.js").read_text()
    pages = json.loads(js[js.index("=") + 1:].strip().rstrip(";"))
    page = pages["notebooks/04_masking.html"]
    assert 'role="main"' in page and 'id="padding"' in page and "mask" in page  # what summaries look up
    assert "headerlink" in page  # Sphinx's htmlToText removes these itself
    assert "<script" not in page and "<img" not in page and "<span" not in page and "menu" not in page
    search = (site / "search.html").read_text()
    assert search.index("_static/search_pages.js") < search.index("_static/offline_search.js") \
        < search.index("_static/searchtools.js")
    shim = (REPO_ROOT / "book" / "_static" / "offline_search.js").read_text()
    assert "ATTN_SEARCH_PAGES" in shim and "window.fetch" in shim


def test_offline_search_fails_loudly_if_sphinx_changes_its_search_page(tmp_path):
    site = _mini_site(tmp_path)
    (site / "search.html").write_text("<html><head></head><body></body></html>")
    with pytest.raises(RuntimeError, match="searchtools"):
        build_book.offline_search(site)


def test_code_lines_of_120_characters_are_not_cut():
    """course.css lets the page use the window and wraps what still does not fit; conf.py loads it."""
    css = (REPO_ROOT / "book" / "_static" / "course.css").read_text()
    assert re.search(r"\.bd-page-width\s*\{\s*max-width:\s*100%", css)
    assert re.search(r"div\.highlight pre[^{]*\{[^}]*white-space:\s*pre-wrap", css)
    conf = (REPO_ROOT / "book" / "conf.py").read_text()
    assert 'html_css_files = ["course.css"]' in conf
