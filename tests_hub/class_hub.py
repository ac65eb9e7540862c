"""A class hub for the tests: hub/jupyterhub_config.py started on loopback with a test roster, and
the students that use it (login form, token, server, nbgitpuller, kernel), with cleanup.

Everything it makes is removed at the end, also on failure: the Unix accounts (prefix
``attnstu``/``attnteach``, the only names it creates or deletes), their processes (found by
uid), the hub and proxy, the temporary folder, and any ``o+x`` it had to add on the way to the
course's Python (restored to the mode it had).
"""

from __future__ import annotations

import json
import os
import pwd
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import requests

from hub.course_hub import REPO_ROOT, TARGET_DIR, blocked_dirs, current_branch
from tests_hub.kernel_ws import RemoteKernel

RESULTS = REPO_ROOT / "test-results" / "hub"

STUDENT_PREFIX = "attnstu"
TEACHER = "attnteach"
CHP = REPO_ROOT / "build" / "hub-node" / "node_modules" / ".bin" / "configurable-http-proxy"
NOTEBOOK = "notebooks/03_scaled_dot_product_attention.ipynb"


def student_name(i: int) -> str:
    return f"{STUDENT_PREFIX}{i:02d}"


def port_is_free(port: int) -> bool:
    with socket.socket() as s:
        # As the hub and the proxy bind (SO_REUSEADDR): a port left in TIME_WAIT by a previous run is free.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def remove_account(name: str) -> None:
    """Stop every process of a test account, then delete it with its home. Only test prefixes."""
    assert name.startswith((STUDENT_PREFIX, TEACHER)), name
    try:
        uid = pwd.getpwnam(name).pw_uid
    except KeyError:
        return
    for _ in range(3):
        procs = [p for p in psutil.process_iter(["uids"]) if p.info["uids"] and p.info["uids"].real == uid]
        if not procs:
            break
        for p in procs:
            try:
                p.kill()
            except psutil.NoSuchProcess:
                pass
        psutil.wait_procs(procs, timeout=10)
    subprocess.run(["userdel", "--remove", name], capture_output=True)
    home = Path("/home") / name
    if home.exists():
        shutil.rmtree(home, ignore_errors=True)


@dataclass
class StudentRun:
    name: str
    password: str
    token: str = ""
    cookies: requests.Session | None = None
    t_login: float = float("nan")
    t_server: float = float("nan")  # login done -> server running (s)
    t_pull: float = float("nan")
    t_notebook: float = float("nan")  # server running -> notebook 03 completed and checked (s)
    failures: list[str] = field(default_factory=list)
    reconnects: list[tuple[float, str]] = field(default_factory=list)  # kernel websocket drops, reconnected


class ClassHub:
    """The course's hub with ``n_students`` on the roster (plus one teacher), on 127.0.0.1:``port``."""

    def __init__(self, n_students: int, port: int = 18100, extra_students: int = 0):
        self.n = n_students
        self.names = [student_name(i) for i in range(1, n_students + 1 + extra_students)]
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.service_token = secrets.token_hex(16)
        self.tmp = Path(tempfile.mkdtemp(prefix="attn-hub-test-"))
        os.chmod(self.tmp, 0o755)
        self.course_repo = self.tmp / "course"
        self.proc: subprocess.Popen | None = None
        self.log_path = self.tmp / "hub.log"
        self._chmodded: list[tuple[Path, int]] = []

    # -- lifecycle -----------------------------------------------------------------------------------
    def prepare(self) -> None:
        for name in [TEACHER, *self.names]:  # leftovers of an interrupted run
            remove_account(name)
        for p in range(self.port, self.port + 3 + 1 + len(self.names) + 10):
            if not port_is_free(p):
                raise RuntimeError(f"port {p} on 127.0.0.1 is taken; the hub test needs {self.port}..{self.port + 14 + len(self.names)}")
        # The course as the teacher publishes it: a clone of this repository's current commit, which
        # the test can add a "teacher's update" to (the nbgitpuller merge test).
        # The commit under test, on its branch (or on a branch "course" where CI checked out a detached commit).
        self.branch = current_branch(REPO_ROOT) or "course"
        head = subprocess.run(["git", "-C", str(REPO_ROOT), "rev-parse", "HEAD"], check=True, capture_output=True,
                              text=True).stdout.strip()
        subprocess.run(["git", "clone", "--quiet", "--no-hardlinks", str(REPO_ROOT), str(self.course_repo)],
                       check=True, capture_output=True)
        subprocess.run(["git", "-C", str(self.course_repo), "checkout", "--quiet", "-B", self.branch, head], check=True,
                       capture_output=True)
        subprocess.run(["chmod", "-R", "a+rX", str(self.course_repo)], check=True)
        # Students must reach the course's Python and venv (a pyenv Python under /root cannot be).
        for d in blocked_dirs([os.path.realpath(sys.executable), sys.prefix, REPO_ROOT, self.course_repo]):
            mode = d.stat().st_mode
            os.chmod(d, mode | 0o001)
            self._chmodded.append((d, mode))
        roster = self.tmp / "roster.csv"
        roster.write_text("username,role\n" + f"{TEACHER},teacher\n" + "".join(f"{n},student\n" for n in self.names))

    def env(self) -> dict:
        env = dict(os.environ)
        env.pop("MPLBACKEND", None)
        env.update(
            ATTN_HUB_IP="127.0.0.1", ATTN_HUB_PORT=str(self.port), ATTN_HUB_ROSTER=str(self.tmp / "roster.csv"),
            ATTN_HUB_STATE=str(self.tmp / "state"), ATTN_HUB_SHARED_DIR=str(self.tmp / "shared"),
            ATTN_HUB_REPO=str(self.course_repo), ATTN_HUB_BRANCH=self.branch,
            ATTN_HUB_SERVER_PORTS=f"{self.port + 10}-{self.port + 10 + len(self.names)}",
            ATTN_HUB_SERVICE_TOKEN=self.service_token, ATTN_HUB_CHP=str(CHP),
        )
        return env

    def start(self, timeout_s: float = 90) -> "ClassHub":
        self.prepare()
        log = open(self.log_path, "w")
        self.proc = subprocess.Popen([str(Path(sys.prefix) / "bin" / "jupyterhub"), "-f",
                                      str(REPO_ROOT / "hub" / "jupyterhub_config.py")],
                                     cwd=self.tmp, env=self.env(), stdout=log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                if requests.get(f"{self.url}/hub/api/", timeout=5).status_code == 200:
                    return self
            except requests.RequestException:
                pass
            if self.proc.poll() is not None:
                raise RuntimeError(f"jupyterhub exited with {self.proc.returncode}:\n{self.log_tail()}")
            time.sleep(0.5)
        raise RuntimeError(f"jupyterhub did not answer within {timeout_s:.0f} s:\n{self.log_tail()}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)  # the hub stops every server (cleanup_servers) and the proxy
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
        if self.proc is not None:
            try:  # the proxy and anything else left in the hub's session
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass

    def cleanup(self) -> None:
        self.stop()
        # The hub's log holds every student server's log too (LocalProcessSpawner's output): keep it.
        try:
            RESULTS.mkdir(parents=True, exist_ok=True)
            shutil.copy(self.log_path, RESULTS / "hub.log")
        except OSError:
            pass
        for name in [TEACHER, *self.names]:
            remove_account(name)
        for d, mode in reversed(self._chmodded):
            os.chmod(d, mode)
        self._chmodded.clear()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def log_tail(self, chars: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    # -- a student's steps ---------------------------------------------------------------------------
    def login(self, name: str, password: str) -> requests.Session:
        """Log in through the hub's login form (FirstUseAuthenticator: the first login sets the password)."""
        s = requests.Session()
        r = s.get(f"{self.url}/hub/login", timeout=60)
        r.raise_for_status()
        r = s.post(f"{self.url}/hub/login", data={"username": name, "password": password, "_xsrf": s.cookies["_xsrf"]},
                   allow_redirects=False, timeout=120)
        if r.status_code != 302:
            raise RuntimeError(f"login of {name} answered {r.status_code}, not a redirect: {r.text[:300]}")
        return s

    def user_token(self, s: requests.Session, name: str) -> str:
        """A token the student makes for themselves (REST API, with the login cookie and its XSRF token)."""
        r = s.post(f"{self.url}/hub/api/users/{name}/tokens", headers={"X-XSRFToken": s.cookies["_xsrf"]},
                   json={"note": "course load test", "expires_in": 3600}, timeout=60)
        r.raise_for_status()
        return r.json()["token"]

    def headers(self, token: str) -> dict:
        return {"Authorization": f"token {token}"}

    def start_server(self, name: str, token: str, timeout_s: float = 300) -> None:
        r = requests.post(f"{self.url}/hub/api/users/{name}/server", headers=self.headers(token), timeout=timeout_s)
        if r.status_code not in (201, 202):
            raise RuntimeError(f"starting {name}'s server answered {r.status_code}: {r.text[:300]}")
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            model = requests.get(f"{self.url}/hub/api/users/{name}", headers=self.headers(token), timeout=60).json()
            server = model.get("servers", {}).get("", {})
            if server.get("ready"):
                return
            if not server.get("pending") and not server:
                raise RuntimeError(f"{name}'s server stopped while starting:\n{self.log_tail(1500)}")
            time.sleep(0.5)
        raise TimeoutError(f"{name}'s server was not running after {timeout_s:.0f} s")

    def pull(self, name: str, token: str, timeout_s: float = 180) -> list[str]:
        """nbgitpuller's API, as its link's page calls it: clone or merge the course; the events it sent."""
        query = urllib.parse.urlencode({"repo": str(self.course_repo), "branch": self.branch, "targetpath": TARGET_DIR})
        events = []
        with requests.get(f"{self.url}/user/{name}/git-pull/api?{query}", headers=self.headers(token),
                          stream=True, timeout=timeout_s) as r:
            r.raise_for_status()
            for line in r.iter_lines(decode_unicode=True):
                if line and line.startswith("data:"):
                    event = json.loads(line[5:])
                    events.append(event)
                    if event.get("phase") in ("finished", "error"):
                        break
        if not events or events[-1].get("phase") != "finished":
            raise RuntimeError(f"nbgitpuller did not finish for {name}: {events[-3:]}")
        return events

    def contents(self, name: str, token: str, path: str) -> dict:
        r = requests.get(f"{self.url}/user/{name}/api/contents/{path}", headers=self.headers(token), timeout=60)
        r.raise_for_status()
        return r.json()

    def uid_of(self, name: str) -> int | None:
        try:
            return pwd.getpwnam(name).pw_uid
        except KeyError:
            return None


# -- checking a notebook's outputs -------------------------------------------------------------------
SANITIZE = [(re.compile(r"0x[0-9a-fA-F]{6,}"), "0xADDRESS")]  # as nbval_sanitize.cfg


def _clean(text: str) -> str:
    for pattern, repl in SANITIZE:
        text = pattern.sub(repl, text)
    return text


def compare_cell(index: int, saved: dict, outputs: list[dict]) -> list[str]:
    """What nbval would check: no error; unless marked NBVAL_IGNORE_OUTPUT, the same text on each
    stream and the same execute_result text, and a figure or value of the same kind for each display."""
    src = saved["source"] if isinstance(saved["source"], str) else "".join(saved["source"])
    problems = [f"cell {index}: {o['ename']}: {o['evalue']}" for o in outputs if o["output_type"] == "error"]
    if problems or re.search(r"^\s*#\s*NBVAL_IGNORE_OUTPUT\s*$", src, re.M):
        return problems

    def streams(outs):
        by = {}
        for o in outs:
            if o["output_type"] == "stream":
                by[o["name"]] = by.get(o["name"], "") + o["text"]
        return {k: _clean(v) for k, v in by.items()}

    def text(o):
        t = o["data"].get("text/plain", "")
        return _clean(t if isinstance(t, str) else "".join(t))

    if streams(saved["outputs"]) != streams(outputs):
        problems.append(f"cell {index}: printed {streams(outputs)!r}, the saved notebook {streams(saved['outputs'])!r}")
    want = [(o["output_type"], sorted(o["data"])) for o in saved["outputs"] if o["output_type"] != "stream"]
    got = [(o["output_type"], sorted(o["data"])) for o in outputs if o["output_type"] != "stream"]
    if want != got:
        problems.append(f"cell {index}: outputs {got}, the saved notebook {want}")
    for s, o in zip([o for o in saved["outputs"] if o["output_type"] == "execute_result"],
                    [o for o in outputs if o["output_type"] == "execute_result"]):
        if text(s) != text(o):
            problems.append(f"cell {index}: result {text(o)!r}, the saved notebook {text(s)!r}")
    return problems


def run_notebook_remote(hub: ClassHub, name: str, token: str, path: str, timeout_s: float = 300,
                        reconnects: list | None = None) -> list[str]:
    """Execute every code cell of the student's copy of ``path`` in a kernel of their server; problems found.
    Websocket reconnects (see kernel_ws) are appended to ``reconnects``."""
    nb = hub.contents(name, token, path)["content"]
    problems = []
    kernel = RemoteKernel(hub.url, name, token, timeout_s=timeout_s)
    if reconnects is not None:
        kernel.reconnects = reconnects
    with kernel:
        for i, cell in enumerate(nb["cells"]):
            if cell["cell_type"] != "code":
                continue
            src = cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])
            reply, outputs = kernel.execute(src)
            problems += compare_cell(i, cell, outputs)
            if reply.get("status") != "ok":
                problems.append(f"cell {i}: {reply.get('ename')}: {reply.get('evalue')}")
                break
    return problems


# -- measuring ---------------------------------------------------------------------------------------
class Sampler(threading.Thread):
    """Once a second: memory (RSS) of each student's processes (server + kernels) and the hub's CPU."""

    def __init__(self, hub: ClassHub, names: list[str], interval_s: float = 1.0, limit_s: float = 900):
        super().__init__(daemon=True)
        self.hub, self.names, self.interval_s, self.limit_s = hub, names, interval_s, limit_s
        # RSS counts the shared libraries (torch) in full for each student, as a container's memory
        # limit roughly does; PSS shares them out, and its sum is what the machine really holds.
        self.peak_student: dict[str, int] = {n: 0 for n in names}  # RSS
        self.peak_student_pss: dict[str, int] = {n: 0 for n in names}
        self.peak_total = 0  # sum of PSS
        self.hub_cpu: list[float] = []
        self.min_available = int(float(os.environ.get("HUB_MIN_FREE_GIB", "1.5")) * 2**30)
        self.out_of_memory = False
        self._halt = threading.Event()

    def run(self) -> None:
        hub_proc = psutil.Process(self.hub.proc.pid)
        hub_proc.cpu_percent(None)
        start = time.monotonic()
        while not self._halt.is_set() and time.monotonic() - start < self.limit_s:
            uids = {self.hub.uid_of(n): n for n in self.names}
            rss = {n: 0 for n in self.names}
            pss = {n: 0 for n in self.names}
            for p in psutil.process_iter(["uids"]):
                try:
                    n = uids.get(p.info["uids"].real) if p.info["uids"] else None
                    if n is not None:
                        mem = p.memory_full_info()
                        rss[n] += mem.rss
                        pss[n] += mem.pss
                except (psutil.NoSuchProcess, psutil.AccessDenied, AttributeError):
                    pass
            if psutil.virtual_memory().available < self.min_available:
                # Safety valve: the class does not fit in this machine's memory. Stop the hub (and with it
                # every student server) before the kernel's out-of-memory killer picks another process.
                self.out_of_memory = True
                self.hub.stop()
                break
            for n in self.names:
                self.peak_student[n] = max(self.peak_student[n], rss[n])
                self.peak_student_pss[n] = max(self.peak_student_pss[n], pss[n])
            self.peak_total = max(self.peak_total, sum(pss.values()))
            try:
                self.hub_cpu.append(hub_proc.cpu_percent(None))
            except psutil.NoSuchProcess:
                break
            self._halt.wait(self.interval_s)

    def stop(self) -> None:
        self._halt.set()
        self.join(timeout=10)


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of the finite values; nan if none."""
    vals = sorted(v for v in values if v == v)
    if not vals:
        return float("nan")
    k = max(0, min(len(vals) - 1, int(-(-q * len(vals) // 100)) - 1))
    return vals[k]


def run_class(hub: ClassHub, names: list[str], limit_s: float = 420) -> tuple[list[StudentRun], Sampler]:
    """The class at once: every student logs in through the form, makes a token, starts their server
    (all spawn requests released together), pulls the course with nbgitpuller, and runs notebook 03
    in a kernel. Returns each student's timings and failures, and the memory/CPU samples."""
    runs = [StudentRun(n, password=secrets.token_urlsafe(12)) for n in names]
    barrier = threading.Barrier(len(runs), timeout=limit_s)
    deadline = time.monotonic() + limit_s

    def student(run: StudentRun) -> None:
        try:
            t0 = time.monotonic()
            run.cookies = hub.login(run.name, run.password)
            run.token = hub.user_token(run.cookies, run.name)
            run.t_login = time.monotonic() - t0
        except Exception as e:  # noqa: BLE001 (recorded as this student's failure)
            run.failures.append(f"login: {type(e).__name__}: {e}")
        try:
            barrier.wait()
        except threading.BrokenBarrierError:
            pass
        if run.failures:
            return
        try:
            t0 = time.monotonic()
            hub.start_server(run.name, run.token, timeout_s=max(10, deadline - time.monotonic()))
            run.t_server = time.monotonic() - t0
            hub.pull(run.name, run.token, timeout_s=max(10, deadline - time.monotonic()))
            run.t_pull = time.monotonic() - t0 - run.t_server
            problems = run_notebook_remote(hub, run.name, run.token, f"{TARGET_DIR}/{NOTEBOOK}",
                                           timeout_s=max(10, deadline - time.monotonic()),
                                           reconnects=run.reconnects)
            run.failures += [f"notebook: {p}" for p in problems]
            if not problems:
                run.t_notebook = time.monotonic() - t0
        except Exception as e:  # noqa: BLE001
            run.failures.append(f"{type(e).__name__}: {e}")

    sampler = Sampler(hub, names, limit_s=limit_s + 60)
    sampler.start()
    threads = [threading.Thread(target=student, args=(r,), daemon=True) for r in runs]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=max(1, deadline - time.monotonic() + 30))
    sampler.stop()
    for r, t in zip(runs, threads):
        if sampler.out_of_memory:
            r.failures.append(f"stopped: less than {sampler.min_available / 2**30:.1f} GiB of memory left "
                              f"with {len(runs)} students (set HUB_STUDENTS lower)")
        if t.is_alive():
            r.failures.append(f"still running after the {limit_s:.0f} s limit")
    return runs, sampler


def report(runs: list[StudentRun], sampler: Sampler, wall_s: float) -> dict:
    mib = 1024 * 1024
    ready = [r.t_server for r in runs]
    done = [r.t_notebook for r in runs]
    per = [v / mib for v in sampler.peak_student.values()]
    cpu = sampler.hub_cpu
    return {
        "students": len(runs),
        "failures": sum(1 for r in runs if r.failures),
        "failure_details": {r.name: r.failures for r in runs if r.failures},
        # A dropped kernel websocket that the client reconnected (as JupyterLab does) with every output
        # replayed: not a failure, but counted, with the time and what was seen.
        "websocket_reconnects": sum(len(r.reconnects) for r in runs),
        "reconnect_details": {r.name: [(time.strftime("%H:%M:%S", time.gmtime(t)), what) for t, what in r.reconnects]
                              for r in runs if r.reconnects},
        "server_running_s_p50": percentile(ready, 50), "server_running_s_p95": percentile(ready, 95),
        "notebook_done_s_p50": percentile(done, 50), "notebook_done_s_p95": percentile(done, 95),
        "student_peak_mib_p50": percentile(per, 50), "student_peak_mib_max": max(per, default=float("nan")),
        "student_peak_pss_mib_max": max((v / mib for v in sampler.peak_student_pss.values()), default=float("nan")),
        "total_peak_mib": sampler.peak_total / mib,
        "hub_cpu_percent_mean": sum(cpu) / len(cpu) if cpu else float("nan"),
        "hub_cpu_percent_max": max(cpu, default=float("nan")),
        "wall_s": wall_s,
        "load_average": os.getloadavg(),
        "cpus": os.cpu_count(),
        "memory_gib": psutil.virtual_memory().total / 1024 ** 3,
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }


def table(rep: dict) -> str:
    rows = [
        ("students", f"{rep['students']}"),
        ("failures (target 0)", f"{rep['failures']}"),
        ("kernel websocket drops, reconnected with outputs replayed", f"{rep.get('websocket_reconnects', 0)}"),
        ("time to a running server, p50 / p95", f"{rep['server_running_s_p50']:.1f} s / {rep['server_running_s_p95']:.1f} s"),
        ("time to notebook 03 completed, p50 / p95", f"{rep['notebook_done_s_p50']:.1f} s / {rep['notebook_done_s_p95']:.1f} s"),
        ("peak memory per student server, RSS (p50 / max)", f"{rep['student_peak_mib_p50']:.0f} MiB / {rep['student_peak_mib_max']:.0f} MiB"),
        ("peak memory per student server, PSS (max)", f"{rep['student_peak_pss_mib_max']:.0f} MiB"),
        ("peak memory, all student servers (sum of PSS)", f"{rep['total_peak_mib']:.0f} MiB"),
        ("hub CPU (mean / max of 1 s samples)", f"{rep['hub_cpu_percent_mean']:.0f} % / {rep['hub_cpu_percent_max']:.0f} %"),
        ("wall time of the class run", f"{rep['wall_s']:.0f} s"),
        ("machine", f"{rep['cpus']} CPUs, {rep['memory_gib']:.0f} GiB; load average {', '.join(f'{x:.1f}' for x in rep['load_average'])}; {rep['date']}"),
    ]
    w = max(len(a) for a, _ in rows)
    return "\n".join(f"| {a.ljust(w)} | {b} |" for a, b in rows)
