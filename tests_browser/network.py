"""The browser tests' network: nothing leaves the machine.

Two layers, both on every browser context the tests open:

- Chromium's host resolver maps every host name to "not found" except loopback
  (``--host-resolver-rules``, see :data:`CUT_NETWORK_ARGS`), so no page can reach the internet even
  through a request that Playwright's routing does not see;
- :class:`OfflineRouter` (Playwright request routing) refuses and records every request to a URL that
  is not on 127.0.0.1/localhost, so a test can say which page asked for what.

Only the local servers answer: the JupyterLab of the notebook tests and the static server of the
website test. Nothing is served in place of a CDN: the course ships every script it needs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

# Everything not served on loopback (http://127.0.0.1:PORT/..., http://localhost/...) or inline.
OUTSIDE = re.compile(r"^(?!https?://(127\.0\.0\.1|localhost)[:/])(https?|wss?|ftp)://")
# Chromium flag: every host name but loopback resolves to nothing.
CUT_NETWORK_ARGS = ["--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE localhost, EXCLUDE 127.0.0.1"]


@dataclass
class OfflineRouter:
    """Route handler for a browser context: every request that would leave the machine is refused and recorded."""

    refused: list[str] = field(default_factory=list)

    def attach(self, context) -> None:
        context.route(OUTSIDE, self._handle)

    def _handle(self, route) -> None:
        self.refused.append(route.request.url)
        route.abort("internetdisconnected")

    def problems(self, where: str) -> list[str]:
        return [f"{where}: asked for an outside URL (refused; the course runs offline): {url}" for url in self.refused]
