"""The course website (`make book` -> build/book/), opened in Chromium with the network cut.

The site is served from build/book/ by a static file server on loopback; every request that would
leave the machine is refused and fails the test. For every page (found in build/book/ at collection
time): it loads with no console error; every figure the notebook saved is shown (decoded, non-zero
size); every bertviz view the notebook saved draws its SVG; every link to another page of the site
resolves (and its #anchor exists). The search page finds the KV-cache notebook for "KV cache".
On a 1366-pixel-wide screen, notebook 06's bertviz views fit the article column or scroll inside their output.
A full-page screenshot of each page goes to test-results/browser/site/.

Without build/book/index.html the tests are skipped (run `make book` first); with BOOK_REQUIRED=1
(.ci/run sets it) they fail instead.
"""

from __future__ import annotations

import functools
import http.server
import os
import re
import threading
import urllib.parse
from pathlib import Path

import pytest

from tests_browser.conftest import RESULTS, ROOT, VIEWPORT
from tests_browser.expectations import read_notebook
from tests_browser.lab_server import free_port
from tests_browser.network import OfflineRouter
from tests_browser.views import VIEW_GEOMETRY_JS

SITE = ROOT / "build" / "book"
SOURCES = ROOT / "build" / "book-src"  # the notebooks as the site shows them (scripts/build_book.py)


def site_pages() -> list[str]:
    if not (SITE / "index.html").is_file():
        return []
    return ["index.html"] + sorted(p.relative_to(SITE).as_posix() for p in (SITE / "notebooks").glob("*.html"))


def _missing_site():
    message = f"{SITE}/index.html not found: run `make book` first"
    if os.environ.get("BOOK_REQUIRED") == "1":
        pytest.fail(message)
    pytest.skip(message)


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):  # keep pytest's output readable
        pass


@pytest.fixture(scope="module")
def site_url():
    if not site_pages():
        _missing_site()
    handler = functools.partial(_QuietHandler, directory=str(SITE))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", free_port()), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def site_context(browser):
    router = OfflineRouter()
    ctx = browser.new_context(viewport=VIEWPORT)
    router.attach(ctx)
    try:
        yield ctx, router
    finally:
        ctx.close()


# Facts of one page: console-free load is collected by listeners; these come from the DOM.
_PAGE_FACTS_JS = r"""
() => {
  const main = document.querySelector('main') || document.body;
  const imgs = Array.from(main.querySelectorAll('.cell_output img, .output img'));
  const views = Array.from(main.querySelectorAll('[id^="bertviz-"]')).map(root => {
    const svg = root.querySelector('#vis svg');
    return {id: root.id, lines: svg ? svg.querySelectorAll('line').length : 0};
  });
  const links = Array.from(document.querySelectorAll('a[href]')).map(a => a.href)
    .filter(h => h.startsWith(location.origin));
  const ids = Array.from(document.querySelectorAll('[id]')).map(e => e.id);
  return {
    images: imgs.map(i => ({ok: i.complete && i.naturalWidth > 0 && i.naturalHeight > 0, src: i.src.slice(0, 80)})),
    views, links, ids,
    title: document.title,
  };
}
"""


def _saved_expectations(page: str) -> tuple[int, int]:
    """(figures, bertviz views) the notebook behind a page saved, as the site shows it."""
    if not page.startswith("notebooks/"):
        return 0, 0
    source = SOURCES / "notebooks" / (Path(page).stem + ".ipynb")
    if not source.is_file():
        return 0, 0
    nb = read_notebook(source, SOURCES)
    return sum(c.images for c in nb.cells), sum(len(c.bertviz) for c in nb.cells)


def _open(ctx, url: str):
    page = ctx.new_page()
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(f"uncaught: {e}"))
    page.goto(url, wait_until="load", timeout=60_000)
    page.wait_for_load_state("networkidle", timeout=30_000)
    return page, errors


def _ids_of(ctx, cache: dict, url: str) -> set[str] | None:
    if url not in cache:
        response = ctx.request.get(url)
        cache[url] = set(re.findall(r'\bid="([^"]+)"', response.text())) if response.ok else None
    return cache[url]


@pytest.mark.parametrize("page_path", site_pages() or ["(no site)"])
def test_site_page(page_path, site_url, site_context):
    if page_path == "(no site)":
        _missing_site()
    ctx, router = site_context
    router.refused.clear()
    page, errors = _open(ctx, site_url + page_path)
    problems = []
    try:
        # bertviz draws right after its script runs; give the page a moment to settle
        figures, views = _saved_expectations(page_path)
        if views:
            page.wait_for_function(
                f"() => document.querySelectorAll('[id^=\"bertviz-\"] #vis svg line').length > 0 && "
                f"document.querySelectorAll('[id^=\"bertviz-\"] #vis svg').length >= {views}", timeout=30_000)
        facts = page.evaluate(_PAGE_FACTS_JS)
        shot = RESULTS / "site" / (page_path.replace("/", "__").removesuffix(".html") + ".png")
        shot.parent.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(shot), full_page=True)
    finally:
        page.close()
    problems += [f"console error: {e}" for e in errors]
    problems += router.problems(page_path)
    shown = [i for i in facts["images"] if i["ok"]]
    broken = [i["src"] for i in facts["images"] if not i["ok"]]
    if broken:
        problems.append(f"{len(broken)} figure(s) not shown: {broken[:5]}")
    if len(shown) < figures:
        problems.append(f"shows {len(shown)} figure(s); the notebook saved {figures}")
    drawn = [v for v in facts["views"] if v["lines"] > 0]
    if len(drawn) != views:
        problems.append(f"{len(drawn)} bertviz view(s) drew; the notebook saved {views}: {facts['views']}")
    cache: dict = {}
    for link in sorted(set(facts["links"])):
        target, _, anchor = link.partition("#")
        if target.rstrip("/") + "/" == site_url or target == "":
            target = site_url + "index.html"
        if urllib.parse.urlparse(target).path.endswith("/"):
            target += "index.html"
        ids = _ids_of(ctx, cache, target)
        if ids is None:
            problems.append(f"link to a missing page: {link}")
        elif anchor and urllib.parse.unquote(anchor) not in ids:
            problems.append(f"link to a missing anchor: {link}")
    assert not problems, f"{page_path} (screenshot {shot}):\n- " + "\n- ".join(problems)


def _kv_cache_notebook() -> str:
    found = [p for p in site_pages() if "kv_cache" in p]
    assert found, "no page of the site is about the KV cache (notebooks/*kv_cache*)"
    return found[0]


def test_site_search_finds_the_kv_cache_notebook(site_url, site_context):
    ctx, router = site_context
    router.refused.clear()
    expected = _kv_cache_notebook()
    page, errors = _open(ctx, site_url + "search.html?q=KV+cache")
    try:
        page.wait_for_selector("#search-results li a", timeout=60_000)
        page.wait_for_function("() => !document.querySelector('#search-progress') || "
                               "document.querySelector('#search-progress').textContent.trim() === ''",
                               timeout=60_000)
        hits = page.eval_on_selector_all("#search-results li a", "as => as.map(a => a.href)")
        page.screenshot(path=str(RESULTS / "site" / "search-kv-cache.png"), full_page=True)
    finally:
        page.close()
    assert not errors and not router.refused, (errors, router.refused)
    pages = [urllib.parse.urlparse(h).path.lstrip("/") for h in hits]
    assert expected in pages[:3], f"search for 'KV cache' should list {expected} near the top; got {pages[:10]}"


# Every bertviz view of a site page: does what it draws fit the article column at 1366 px, or scroll inside its
# own output box far enough to reach its right edge? (The measure of test_views_on_open.py in JupyterLab.)
_SITE_VIEWS_JS = r"""
() => {
  const geometry = """ + VIEW_GEOMETRY_JS + r""";
  const column = (document.querySelector('article') || document.querySelector('main') || document.body)
    .getBoundingClientRect();
  return Array.from(document.querySelectorAll('[id^="bertviz-"]')).map(root =>
    geometry(root, root.closest('.cell_output, .output') || root.parentElement, column));
}
"""


def test_site_06_model_view_fits_or_scrolls_at_1366px(site_url, browser):
    """06's model view (6 layers x 12 heads of thumbnails) is wider than the site's article column: on a
    1366-pixel-wide screen it must scroll inside its own output box, its right edge reachable, never clipped."""
    pages = [p for p in site_pages() if Path(p).name.startswith("06_")]
    if not pages:
        _missing_site()
    router = OfflineRouter()
    ctx = browser.new_context(viewport={"width": 1366, "height": 768})
    router.attach(ctx)
    try:
        page, errors = _open(ctx, site_url + pages[0])
        page.wait_for_function(
            "() => Array.from(document.querySelectorAll('[id^=\"bertviz-\"] #vis svg'))"
            ".filter(s => s.querySelectorAll('*').length > 10).length >= 2", timeout=30_000)
        views = page.evaluate(_SITE_VIEWS_JS)
        page.screenshot(path=str(RESULTS / "site" / "06-views-1366.png"), full_page=True)
        page.close()
    finally:
        ctx.close()
    assert not errors and not router.refused, (errors, router.refused)
    print(views)
    model = [v for v in views if v.get("thumbnails") == 72]
    assert model, f"06's page has no model view with 6 x 12 thumbnails: {views}"
    for view in views:
        assert view["elements"] > 10, view  # drawn
        assert view["fits"] or (view["scrolls"] and view["reach"]), f"a view is clipped on the site at 1366 px: {view}"
