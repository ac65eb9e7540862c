"""The browser test's fixtures: one JupyterLab server (`make lab`'s command) and one headless
Chromium (the system's, Debian package ``chromium``) for the whole session, with the network cut
(tests_browser/network.py: only loopback answers). Run with ``make test-browser`` (or ``.venv/bin/python -m pytest tests_browser``).

Options:
    --notebooks PATTERN...   which notebooks to run (globs relative to the course root;
                             default: the course notebooks and their solutions).
Environment:
    CHROMIUM                 the Chromium executable (default /usr/bin/chromium).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests_browser.network import CUT_NETWORK_ARGS, OfflineRouter
from tests_browser.lab_server import LabServer

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "test-results" / "browser"  # screenshots; ignored by git
DEFAULT_NOTEBOOKS = ["notebooks/*.ipynb", "notebooks/solutions/*.ipynb"]
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--no-first-run", "--disable-default-apps", "--disable-extensions",
    *CUT_NETWORK_ARGS,
]
VIEWPORT = {"width": 1280, "height": 900}


def pytest_addoption(parser):
    parser.addoption("--notebooks", nargs="+", default=None, metavar="PATTERN",
                     help="notebooks the browser test runs (globs relative to the course root)")


def discover_notebooks(patterns: list[str]) -> list[Path]:
    found: list[Path] = []
    for pattern in patterns:
        p = Path(pattern)
        if p.is_absolute():  # a path the shell already expanded
            candidates = [p] if p.exists() else []
        else:
            candidates = sorted(ROOT.glob(pattern))
        for path in candidates:
            path = path.resolve()
            if not path.is_relative_to(ROOT):
                raise pytest.UsageError(f"{path}: JupyterLab serves the course folder {ROOT} only")
            if path.suffix == ".ipynb" and ".ipynb_checkpoints" not in path.parts and path not in found:
                found.append(path)
    return found


def pytest_generate_tests(metafunc):
    if "notebook" in metafunc.fixturenames:
        chosen = metafunc.config.getoption("--notebooks")
        notebooks = discover_notebooks(chosen or DEFAULT_NOTEBOOKS)
        if chosen and not notebooks:
            raise pytest.UsageError(f"--notebooks {' '.join(chosen)}: no notebook matches")
        metafunc.parametrize("notebook", notebooks, ids=[p.relative_to(ROOT).as_posix() for p in notebooks])


def chromium_path() -> str:
    path = os.environ.get("CHROMIUM", "/usr/bin/chromium")
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        found = shutil.which("chromium") or shutil.which("chromium-browser")
        if found is None:
            pytest.exit(f"Chromium not found at {path} (set CHROMIUM=...). On Debian/Ubuntu: "
                        "apt-get install chromium. The browser test does not download a browser.", returncode=4)
        path = found
    return path


@pytest.fixture(scope="session")
def results_dir() -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    return RESULTS


@pytest.fixture(scope="session")
def timings_file(results_dir) -> Path:
    """test-results/browser/timings.tsv: seconds per notebook (open, Run All, widgets, total)."""
    path = results_dir / "timings.tsv"
    path.write_text("notebook\topen_s\trun_all_s\twidgets_s\ttotal_s\tproblems\n")
    return path


@pytest.fixture(scope="session")
def lab():
    server = LabServer()
    server.start()
    try:
        yield server
    finally:
        server.stop()
        server.cleanup()


@pytest.fixture(scope="session")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=chromium_path(), args=CHROMIUM_ARGS, headless=True)
        try:
            yield b
        finally:
            b.close()


@pytest.fixture(scope="session")
def router() -> OfflineRouter:
    return OfflineRouter()


@pytest.fixture(scope="session")
def context(browser, router):
    """One browser context for the course notebooks: JupyterLab's scripts stay cached between them."""
    ctx = browser.new_context(viewport=VIEWPORT)
    router.attach(ctx)
    try:
        yield ctx
    finally:
        ctx.close()


@pytest.fixture
def page(context, lab, router):
    """A fresh tab; afterwards the tab is closed and the kernels it started are shut down."""
    router.refused.clear()
    p = context.new_page()
    try:
        yield p
    finally:
        p.close()
        lab.shutdown_kernels(wait=False)
