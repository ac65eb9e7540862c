"""The course on its class hub (root only; ``make test-hub``): a whole class at once, then what each
student must and must not be able to do.

The class run (conftest.class_run) is the load test: HUB_STUDENTS students (default 20) log in
through the hub's form, start their servers together, pull the course with nbgitpuller and
execute notebook 03 over the kernel websocket; its table goes to test-results/hub/.
"""

from __future__ import annotations

import json
import re
import socket
import subprocess
import time

import pytest
import requests
import websocket

from hub.course_hub import TARGET_DIR
from tests_hub.class_hub import TEACHER, RemoteKernel


def test_the_class_runs_notebook_03_without_failures(class_run):
    runs, rep = class_run
    assert rep["failures"] == 0, json.dumps(rep["failure_details"], indent=1)[:6000]
    assert all(r.t_notebook == r.t_notebook for r in runs)  # every student has a completion time


def test_a_dropped_connection_reconnects_and_gets_the_cells_output(class_hub, class_run):
    """A student's network drops in the middle of a cell: the client reconnects (as JupyterLab does) and the
    server, which buffered the kernel's messages for that session, replays them: the output is not lost."""
    run = class_run[0][0]
    with RemoteKernel(class_hub.url, run.name, run.token, timeout_s=120) as kernel:
        msg_id = kernel.send_execute("import time\ntime.sleep(4)\nprint('after the drop')")
        time.sleep(1.0)
        kernel.ws.sock.shutdown(socket.SHUT_RDWR)  # the connection is cut, without a close frame
        reply, outputs = kernel.collect(msg_id)
        assert len(kernel.reconnects) == 1, kernel.reconnects
    assert reply["status"] == "ok", reply
    assert [o.get("text") for o in outputs] == ["after the drop\n"], outputs


def test_student_cannot_reach_another_students_server(class_hub, class_run):
    runs, _ = class_run
    a, b = runs[0], runs[1]
    # With a's token: the API of b's server refuses.
    r = requests.get(f"{class_hub.url}/user/{b.name}/api/status", headers=class_hub.headers(a.token), timeout=60)
    assert r.status_code == 403, (r.status_code, r.text[:300])
    # Control: a's own server answers a's token, and b's server answers b's.
    assert requests.get(f"{class_hub.url}/user/{a.name}/api/status", headers=class_hub.headers(a.token),
                        timeout=60).status_code == 200
    assert requests.get(f"{class_hub.url}/user/{b.name}/api/status", headers=class_hub.headers(b.token),
                        timeout=60).status_code == 200
    # With a's browser cookie: JupyterLab of b ends in a 403 from the hub, or back on a's own server.
    r = a.cookies.get(f"{class_hub.url}/user/{b.name}/lab", timeout=60, allow_redirects=True)
    assert r.status_code == 403 or f"/user/{a.name}/" in r.url, (r.status_code, r.url)
    assert f"/user/{b.name}/lab" not in r.url or r.status_code == 403


def _terminal(class_hub, run, command: str, timeout_s: float = 60) -> str:
    """Run ``command`` in a JupyterLab terminal of ``run``'s server; what the terminal printed."""
    h = class_hub.headers(run.token)
    base = f"{class_hub.url}/user/{run.name}"
    name = requests.post(f"{base}/api/terminals", headers=h, timeout=60).json()["name"]
    ws = websocket.create_connection(re.sub("^http", "ws", base) + f"/terminals/websocket/{name}",
                                     header=[f"{k}: {v}" for k, v in h.items()], timeout=timeout_s)
    out = ""
    try:
        ws.send(json.dumps(["stdin", command + "; echo __END__$?__\r"]))
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and not re.search(r"__END__\d+__", out):
            msg = json.loads(ws.recv())
            if msg[0] == "stdout":
                out += msg[1]
    finally:
        ws.close()
        requests.delete(f"{base}/api/terminals/{name}", headers=h, timeout=60)
    return out


def test_student_cannot_read_another_students_files(class_hub, class_run):
    runs, _ = class_run
    a, b = runs[0], runs[1]
    theirs = f"/home/{b.name}/{TARGET_DIR}/README.md"
    mine = f"/home/{a.name}/{TARGET_DIR}/README.md"
    # From a terminal: a reads their own copy, not b's (nor b's home listing).
    out = _terminal(class_hub, a, f"whoami; head -c 20 {mine} >/dev/null && echo OWN-OK; cat {theirs}; ls /home/{b.name}")
    assert a.name in out and "OWN-OK" in out, out
    assert out.count("Permission denied") >= 2, out
    # From a kernel: the same, as Python sees it.
    code = (f"open({mine!r}).read(10)\n"
            "for p in [%r, %r]:\n"
            "    try:\n        open(p) if p.endswith('.md') else __import__('os').listdir(p)\n        print('READ', p)\n"
            "    except PermissionError:\n        print('DENIED', p)\n") % (theirs, f"/home/{b.name}")
    with RemoteKernel(class_hub.url, a.name, a.token) as kernel:
        reply, outputs = kernel.execute(code)
    text = "".join(o.get("text", "") for o in outputs)
    assert reply["status"] == "ok", outputs
    assert text.split() == ["DENIED", theirs, "DENIED", f"/home/{b.name}"], text


def test_nbgitpuller_merges_the_teachers_update_and_keeps_the_students_edit(class_hub, class_run):
    runs, _ = class_run
    a = runs[0]
    h = class_hub.headers(a.token)
    base = f"{class_hub.url}/user/{a.name}/api/contents/{TARGET_DIR}"
    # The student writes notes into their copy of the README.
    readme = requests.get(f"{base}/README.md", headers=h, timeout=60).json()
    mine = readme["content"] + "\nMy notes: the scale is 1/sqrt(d_k).\n"
    r = requests.put(f"{base}/README.md", headers=h, json={"type": "file", "format": "text", "content": mine}, timeout=60)
    assert r.status_code == 200, r.text[:300]
    # The teacher publishes an update to another file.
    repo = class_hub.course_repo
    glossary = repo / "docs" / "benchmarks.md"
    update = "\nTeacher's update: office hours on Friday.\n"
    with open(glossary, "a") as f:
        f.write(update)
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=Teacher", "-c", "user.email=teacher@example.org",
                    "commit", "--quiet", "-am", "Office hours"], check=True)
    subprocess.run(["chmod", "-R", "a+rX", str(repo)], check=True)
    events = class_hub.pull(a.name, a.token)
    assert any("Office hours" in e.get("output", "") or "Fast-forward" in e.get("output", "") or
               "Merge" in e.get("output", "") or "merge" in e.get("output", "") for e in events), events
    got_readme = requests.get(f"{base}/README.md", headers=h, timeout=60).json()["content"]
    got_doc = requests.get(f"{base}/docs/benchmarks.md", headers=h, timeout=60).json()["content"]
    assert got_readme == mine  # the student's edit survived
    assert got_doc.endswith(update)  # the teacher's update arrived


def test_teacher_is_an_admin_and_a_student_is_not(class_hub, class_run):
    runs, _ = class_run
    s = class_hub.login(TEACHER, "teacher-password-1")
    token = class_hub.user_token(s, TEACHER)
    r = requests.get(f"{class_hub.url}/hub/api/users", headers=class_hub.headers(token), timeout=60)
    assert r.status_code == 200
    names = {u["name"] for u in r.json()}
    assert {x.name for x in runs} <= names
    assert any(u["name"] == TEACHER and u["admin"] for u in r.json())
    r = requests.get(f"{class_hub.url}/hub/api/users", headers=class_hub.headers(runs[0].token), timeout=60)
    listed = {u["name"] for u in r.json()} if r.status_code == 200 else set()
    assert listed <= {runs[0].name}, listed  # a student sees at most themselves


def test_wrong_password_is_refused_after_first_use(class_hub, class_run):
    runs, _ = class_run
    with pytest.raises(RuntimeError, match="login of"):
        class_hub.login(runs[0].name, runs[0].password + "x")
    with pytest.raises(RuntimeError, match="login of"):
        class_hub.login("attnnobody", "not-on-the-roster-1")


def test_a_student_in_chromium_opens_the_link_and_runs_welcome(class_hub, class_run):
    """The nbgitpuller link in a real browser: login form, server start, pull, JupyterLab on
    00_welcome; then Run All, checked as tests_browser checks the course notebooks."""
    pytest.importorskip("playwright")
    from playwright.sync_api import sync_playwright

    from hub.course_hub import REPO_ROOT, nbgitpuller_link
    from tests_browser.network import OfflineRouter
    from tests_browser.conftest import CHROMIUM_ARGS, VIEWPORT, chromium_path
    from tests_browser.driver import run_notebook
    from tests_browser.expectations import read_notebook

    name, password = class_hub.names[-1], "browser-student-1"
    link = nbgitpuller_link(class_hub.url, str(class_hub.course_repo), class_hub.branch)

    class HubLab:  # what tests_browser's driver needs of a server: where a notebook opens
        def lab_url(self, rel):
            return f"{class_hub.url}/user/{name}/lab/tree/{TARGET_DIR}/{rel}?reset"

    router = OfflineRouter()
    shots = REPO_ROOT / "test-results" / "hub"
    shots.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium_path(), args=CHROMIUM_ARGS, headless=True)
        try:
            ctx = browser.new_context(viewport=VIEWPORT)
            router.attach(ctx)
            page = ctx.new_page()
            page.goto(link, timeout=120_000)
            page.fill("#username_input", name)
            page.fill("#password_input", password)
            page.click("#login_submit")
            # spawn page -> nbgitpuller's progress page -> JupyterLab with the welcome notebook
            page.wait_for_url(re.compile(rf"/user/{name}/lab/tree/{TARGET_DIR}/notebooks/00_welcome\.ipynb"),
                              timeout=300_000)
            page.wait_for_selector(".jp-NotebookPanel", timeout=120_000)
            page.screenshot(path=str(shots / "browser_student_landing.png"))
            # As tests_browser's server does: every cell attached to the page (no windowing), so the
            # checks see cells out of view. A JupyterLab user setting, put through the settings API.
            token = requests.post(f"{class_hub.url}/hub/api/users/{name}/tokens",
                                  headers=class_hub.headers(class_hub.service_token),
                                  json={"note": "browser test settings", "expires_in": 600}, timeout=60).json()["token"]
            r = requests.put(f"{class_hub.url}/user/{name}/lab/api/settings/@jupyterlab/notebook-extension:tracker",
                             headers=class_hub.headers(token), json={"raw": '{"windowingMode": "none"}'}, timeout=60)
            assert r.status_code in (200, 204), (r.status_code, r.text[:300])
            nb = read_notebook(REPO_ROOT / "notebooks" / "00_welcome.ipynb", REPO_ROOT)
            result = run_notebook(page, HubLab(), nb, shots / "browser_student_00_welcome.png")
        finally:
            browser.close()
    assert not result.problems, "\n".join(result.problems)
    assert not router.refused, router.refused
