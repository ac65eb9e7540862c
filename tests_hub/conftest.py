"""The class hub fixture: one hub for the session, the class run once, everything removed at the end.

Environment:
    HUB_STUDENTS   students in the load run (default 20, as make test-hub); one more logs in through Chromium.
    HUB_PORT       first of the ~40 loopback ports the test uses (default 18100).
    HUB_LIMIT_S    time limit of the class run (default 600 s).
Results: test-results/hub/loadtest.json and loadtest.md (the table printed at the end).
"""

from __future__ import annotations

import json
import os
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
    runs, sampler = run_class(class_hub, names, limit_s=float(os.environ.get("HUB_LIMIT_S", "600")))
    rep = report(runs, sampler, time.monotonic() - t0)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "loadtest.json").write_text(json.dumps(rep, indent=2))
    (RESULTS / "loadtest.md").write_text(table(rep) + "\n")
    print("\n" + table(rep))
    return runs, rep
