"""Root pytest plugin: report how long each notebook takes under nbval, and fail a slow one.

The course promises that every notebook executes in under 60 s on 2 CPU cores. `make test` runs two
pytest workers on such a machine, so a notebook shares the CPU with the other worker; the limit
enforced here (NOTEBOOK_SECONDS_LIMIT, default 90) leaves room for that. Per-notebook times
measured alone are in the README (`python scripts/notebook_times.py`).
"""

from __future__ import annotations

import os
from collections import defaultdict

_seconds: dict[str, float] = defaultdict(float)


# Notebook 07 trains its encoder-decoder live (issue #15 gives it 80 s instead of 60 s on 2 cores), so its guard
# is scaled the same way: 90 s x 80/60 = 120 s.
_LONGER = {"07_cross_attention.ipynb": 80 / 60}


def _limit(path: str = "") -> float:
    base = float(os.environ.get("NOTEBOOK_SECONDS_LIMIT", "90"))
    return base * _LONGER.get(os.path.basename(path), 1.0)


def pytest_runtest_logreport(report):
    path = report.nodeid.split("::", 1)[0]
    if path.endswith(".ipynb"):
        _seconds[path] += report.duration


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if not _seconds:
        return
    terminalreporter.section("notebook execution seconds (nbval)")
    for path, secs in sorted(_seconds.items()):
        flag = "  <-- over the limit" if secs > _limit(path) else ""
        terminalreporter.write_line(f"{secs:7.1f}  {path}{flag}")


def pytest_sessionfinish(session, exitstatus):
    slow = {p: s for p, s in _seconds.items() if s > _limit(p)}
    if slow and exitstatus == 0:
        session.exitstatus = 1
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            for path, secs in slow.items():
                reporter.write_line(f"FAILED (too slow): {path} took {secs:.0f} s > {_limit(path):.0f} s", red=True)
