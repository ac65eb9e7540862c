"""bertviz's CDN scripts, served from local copies installed with npm at test time.

bertviz's head view loads require.js, d3 and jQuery from cdnjs.cloudflare.com. The course runs
offline, so the browser test routes those URLs (Playwright request routing) to copies that npm
installs into ``build/browser-libs/`` (ignored by git; never committed), answering after a
network-like delay. Every other request leaving the machine is refused and recorded, so a
notebook that needs the internet is noticed.
"""

from __future__ import annotations

import os
import re
import time
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

# cdnjs library name -> (npm package pinned, file inside the package).
# bertviz 1.4.1 asks for require.js 2.3.6, d3 5.7.0 and jQuery 2.0.0; npm has no jQuery 2.0.0,
# so the last 2.x release stands in (same API).
LIBRARIES = {
    "require.js": ("requirejs@2.3.6", "requirejs/require.js"),
    "d3": ("d3@5.7.0", "d3/dist/d3.min.js"),
    "jquery": ("jquery@2.2.4", "jquery/dist/jquery.min.js"),
}
CDN = re.compile(r"^https://cdnjs\.cloudflare\.com/ajax/libs/(?P<lib>[^/]+)/")
# Everything not served by the local JupyterLab (http://127.0.0.1:PORT/...) or inline.
OUTSIDE = re.compile(r"^(?!https?://(127\.0\.0\.1|localhost)[:/])(https?|ftp)://")


def install_libraries(prefix: Path) -> dict[str, Path]:
    """npm-install the pinned libraries under ``prefix`` (once; reused while their versions match)."""
    specs = [spec for spec, _ in LIBRARIES.values()]
    stamp = prefix / "installed.txt"
    files = {lib: prefix / "node_modules" / rel for lib, (_, rel) in LIBRARIES.items()}
    if stamp.exists() and stamp.read_text().split() == specs and all(f.exists() for f in files.values()):
        return files
    npm = shutil.which("npm")
    if npm is None:
        raise RuntimeError("npm not found: the browser test installs bertviz's require.js, d3 and jQuery "
                           "with npm (Debian/Ubuntu: apt-get install nodejs npm)")
    prefix.mkdir(parents=True, exist_ok=True)
    r = subprocess.run([npm, "install", "--no-save", "--no-audit", "--no-fund", "--no-package-lock",
                        "--prefix", str(prefix), *specs], capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        raise RuntimeError(f"npm install {' '.join(specs)} failed:\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}")
    missing = [str(f) for f in files.values() if not f.exists()]
    if missing:
        raise RuntimeError(f"npm installed the libraries but these files are missing: {missing}")
    stamp.write_text("\n".join(specs))
    return files


@dataclass
class OfflineRouter:
    """Route handler for a browser context: CDN libraries from disk, everything else outside refused."""

    files: dict[str, Path]
    serve_cdn: bool = True  # False: refuse the CDN too (what a learner offline without the fix sees)
    # Like a real network, the CDN answers after a delay: a page that only works when its scripts
    # arrive instantly (bertviz running before require.js has loaded) fails here as it does for a learner.
    latency_s: float = float(os.environ.get("CDN_LATENCY_S", "0.25"))
    served: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)

    def attach(self, context) -> None:
        context.route(OUTSIDE, self._handle)

    def _handle(self, route) -> None:
        url = route.request.url
        m = CDN.match(url)
        if self.serve_cdn and m and m.group("lib") in self.files:
            self.served.append(url)
            if self.latency_s:
                time.sleep(self.latency_s)
            route.fulfill(path=str(self.files[m.group("lib")]), content_type="application/javascript",
                          headers={"Access-Control-Allow-Origin": "*"})
            return
        self.refused.append(url)
        route.abort("internetdisconnected")
