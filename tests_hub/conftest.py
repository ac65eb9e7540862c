"""The class hub fixture: one hub for the session, the class run once, everything removed at the end.

Environment:
    HUB_STUDENTS   students in the load run (default 20, as make test-hub); one more logs in through Chromium.
    HUB_PORT       first of the ~40 loopback ports the test uses (default 18100).
    HUB_LIMIT_S    hang guard of the class run (default 1800 s; the whole make test-hub took 6 min idle).
Results: test-results/hub/loadtest.json and loadtest.md (the table printed at the end).
"""

from __future__ import annotations

import json
import os
import re
import time

import pytest

from hub.course_hub import REPO_ROOT
from tests_hub.class_hub import ClassHub, report, run_class, table

RESULTS = REPO_ROOT / "test-results" / "hub"


def pytest_collection_modifyitems(config, items):
    if os.geteuid() != 0:
        skip = pytest.mark.skip(reason="the class hub creates one Unix account per student: run as root (CI does)")
        for item in items:
            if "class_hub" in getattr(item, "fixturenames", ()):
                item.add_marker(skip)


@pytest.fixture(scope="session")
def class_hub():
    n = int(os.environ.get("HUB_STUDENTS", "20"))
    hub = ClassHub(n, port=int(os.environ.get("HUB_PORT", "18100")), extra_students=1)
    try:
        hub.start()
        yield hub
    finally:
        hub.cleanup()


@pytest.fixture(scope="session")
def class_run(class_hub):
    """The load run: all students at once (the browser student, the last name, stays out of it)."""
    names = class_hub.names[: class_hub.n]
    t0 = time.monotonic()
    runs, sampler = run_class(class_hub, names, limit_s=float(os.environ.get("HUB_LIMIT_S", "1800")))
    rep = report(runs, sampler, time.monotonic() - t0)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "loadtest.json").write_text(json.dumps(rep, indent=2))
    (RESULTS / "loadtest.md").write_text(table(rep) + "\n")
    print("\n" + table(rep))
    if rep["failures"] or rep["websocket_reconnects"]:
        # What the hub, the proxy and the servers said about it (their warnings and errors).
        print(json.dumps({"failures": rep["failure_details"], "reconnects": rep["reconnect_details"]}, indent=1))
        print("\n".join(hub_warnings(class_hub.log_path)[-80:]))
    return runs, rep


NOISE = ("Kernel is running over TCP", "--depth is ignored", "api_request to the proxy failed")


def hub_warnings(log_path) -> list[str]:
    """Warning and error lines of the hub's log (hub, proxy, student servers), known noise left out."""
    try:
        lines = log_path.read_text(errors="replace").splitlines()
    except OSError:
        return []
    pick = re.compile(r"^\[[WEC] |warn|error|Traceback|ping timeout|died|Restoring connection|Replaying", re.I)
    return [ln[:300] for ln in lines if pick.search(ln) and not any(n in ln for n in NOISE)]
