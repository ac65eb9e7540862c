"""A lab's slide deck (`make slides` -> build/slides/) works from disk with the network cut.

One deck is opened from file:// in Chromium (the system's, network cut as in the other browser tests). Every
request the page makes is recorded: all must be file:// (or data:), and any other is refused and fails the test.
reveal.js must initialise (``Reveal.isReady()``), MathJax must typeset, and the right-arrow key must move to the
next slide. Skipped without build/slides/ (run `make slides`); with SLIDES_REQUIRED=1 (CI) a missing deck fails.
"""

from __future__ import annotations

import os

import pytest

from tests_browser.conftest import RESULTS, ROOT

SLIDES = ROOT / "build" / "slides"
DECK = SLIDES / "lab-03.html"  # notebook 03: formulas (MathJax), figures, code fragments


@pytest.fixture
def deck_page(browser):
    if not DECK.exists():
        if os.environ.get("SLIDES_REQUIRED") == "1":
            pytest.fail(f"{DECK} is missing: run `make slides` first")
        pytest.skip(f"{DECK} is missing: run `make slides` first")
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    requests, refused = [], []

    def refuse(route):  # files from disk load; anything else is refused and recorded
        if route.request.url.startswith(("file://", "data:")):
            route.continue_()
        else:
            refused.append(route.request.url)
            route.abort("internetdisconnected")

    context.route("**/*", refuse)
    page = context.new_page()
    page.on("request", lambda r: requests.append(r.url))
    try:
        yield page, requests, refused
    finally:
        context.close()


def test_a_lab_deck_runs_offline_and_moves_to_the_next_slide(deck_page):
    page, requests, refused = deck_page
    RESULTS.mkdir(parents=True, exist_ok=True)
    page.goto(DECK.as_uri(), timeout=30_000)
    page.wait_for_function("() => window.Reveal && window.Reveal.isReady()", timeout=30_000, polling=100)
    total = page.evaluate("() => Reveal.getTotalSlides()")
    assert total > 10, total
    assert page.evaluate("() => Reveal.getIndices().h") == 0
    page.wait_for_function("() => window.MathJax && MathJax.Hub && MathJax.Hub.queue.pending === 0 && "
                           "document.querySelectorAll('.MathJax, .MathJax_CHTML, mjx-container').length > 0",
                           timeout=30_000, polling=250)
    page.keyboard.press("ArrowRight")
    page.wait_for_function("() => Reveal.getIndices().h === 1", timeout=10_000)
    assert "lab 3" in page.locator(".slides > section").first.inner_text().lower()  # the title slide came first
    assert "03 · Scaled dot-product attention".lower() in page.locator("section.present").first.inner_text().lower()
    page.screenshot(path=str(RESULTS / "slides_lab-03.png"))
    assert refused == [], f"the deck asked for outside URLs: {refused}"
    outside = [u for u in requests if not u.startswith(("file://", "data:"))]
    assert outside == [], outside
    assert any(u.endswith("/reveal.js/dist/reveal.js") for u in requests), requests[:20]
