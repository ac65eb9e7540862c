"""Sphinx configuration of the course website (`make book`; scripts/build_book.py writes the sources).

Sphinx + myst-nb with sphinx-book-theme (the theme of Jupyter Book 1). The site is built from the
executed notebooks' saved outputs (nothing is executed) and entirely offline: no intersphinx, the
theme and MathJax come from installed packages, and no page loads anything from another host.
"""

from __future__ import annotations

project = "Attention, from scratch and for real"
author = "the course authors"
copyright = "the course authors"

extensions = ["myst_nb"]

# MathJax 3 from the installed package sphinx-mathjax-offline (Sphinx's default loads it from a CDN).
# Its files are copied as static files (the package's own Sphinx hook does the same, but is not
# declared parallel-safe, which makes Sphinx read serially).
import importlib.util  # noqa: E402
from pathlib import Path  # noqa: E402

_mathjax_pkg = importlib.util.find_spec("sphinx-mathjax-offline")
if _mathjax_pkg is None or _mathjax_pkg.origin is None:
    raise RuntimeError("sphinx-mathjax-offline is not installed: pip install -r requirements-book.txt")
_MATHJAX_STATIC = str(Path(_mathjax_pkg.origin).parent / "static")  # holds mathjax/
mathjax_path = "mathjax/tex-chtml.js"

# The notebooks were executed by `make execute` (and are checked by nbval): show their saved outputs.
nb_execution_mode = "off"
# Widget views need a kernel; scripts/build_book.py replaces them by their saved outputs and a note,
# so myst-nb must not add the ipywidgets embed manager (it loads require.js and the manager from CDNs).
nb_ipywidgets_js: dict = {}
nb_merge_streams = True
myst_enable_extensions = ["dollarmath", "amsmath", "colon_fence", "deflist"]
myst_heading_anchors = 3
suppress_warnings = ["myst.header", "mystnb.unknown_mime_type"]

exclude_patterns = ["_build", "**.ipynb_checkpoints"]
html_theme = "sphinx_book_theme"
html_title = project
html_static_path = ["_static", _MATHJAX_STATIC]
html_css_files = ["course.css"]
html_copy_source = False  # the .ipynb downloads are the originals (see build_book.py), not _sources copies
html_show_sourcelink = False
html_theme_options = {
    "use_download_button": False,  # our own link to the original .ipynb is on every page
    "use_fullscreen_button": False,
    "use_repository_button": False,
    "show_toc_level": 2,
    "navigation_with_keys": False,
}
html_last_updated_fmt = None
# pydata-sphinx-theme logs a console error when no default light/dark mode is set
html_context = {"default_mode": "light"}
# No network at build time
intersphinx_mapping: dict = {}
