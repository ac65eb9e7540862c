"""``make autograde SUBMISSIONS=dir``: grade every student's notebooks with nbgrader; gradebook CSV and feedback.

    python -m classroom.autograde SUBMISSIONS [--course-dir build/class] [--out grades]

``SUBMISSIONS`` holds one folder per student, named by the student's id, with the student's notebooks inside,
either as nbgrader collects them (``<student>/<notebook>/<notebook>.ipynb``) or flat (``<student>/<notebook>.ipynb``);
a notebook is recognised by its file name (``03_scaled_dot_product_attention.ipynb``). Run ``make release`` first:
grading compares against the release recorded in ``<course-dir>/gradebook.db``.

Each submitted notebook runs in a bubblewrap sandbox of its own (:mod:`classroom.sandbox`), started by a grade
worker (:mod:`classroom.grade`, one per job, reused from one submission to the next: :class:`GradeWorker`) that runs
the checks in its own process; ``--jobs n`` grades n at once. Only the cells the checks need run
(:func:`classroom.grade.not_needed`).
Student ids are the folder names (:func:`student_id`); invalid or colliding ids and two copies of one notebook are
errors, listed in ``summary.txt`` (and the exit status is 1). Each result is kept in ``--out/.state`` as it comes:
a run that is stopped and started again grades only what is left (or what changed).

Outputs in ``--out``:

- ``gradebook.csv``: one row per student and notebook: ``student, notebook``, the points of each graded check
  (one column per check, by grade id), ``total, max_total``, ``failed`` (the checks that scored 0, ``;``-separated)
  and ``flags`` (what the teacher should look at: edited or deleted locked cells, timeouts, code that touches the
  grading machinery, a grading failure);
- ``feedback/<student>/index.html``: per notebook, each check's points and the grader's message (with its hint),
  then the student's own cells and what they printed, escaped and capped;
- ``students.csv``: one row per student: totals, points per notebook, missing and ungradable notebooks, flags;
  ``canvas.csv``: the same points in Canvas's gradebook import format (:mod:`classroom.gradebook`);
- ``summary.txt``: what was graded, and every error of the run;
- the scores in ``<course-dir>/gradebook.db`` (nbgrader's formgrader and ``nbgrader export`` read them).
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import html
import io
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import time
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# Code in a student's own cells that touches the grading machinery: flagged for the teacher to look at.
TAMPER_PATTERNS = {
    "redefines a check_* function": r"(^|\n)\s*(def\s+check_\w+|check_\w+\s*=[^=])",
    "assigns into attn_lib": r"\battn_lib(\.\w+)+\s*=[^=]",
    "assigns into torch/math/numpy": r"\b(torch|math|np|numpy)(\.\w+)+\s*=[^=]",
    "uses setattr/delattr": r"\b(setattr|delattr)\s*\(",
    "touches sys.modules or builtins": r"\bsys\s*\.\s*modules\b|\bbuiltins\b|__builtins__",
    "touches the grader (classroom, cloudpickle, subprocess, socket, os.environ)":
        r"\b(classroom|cloudpickle|subprocess|socket)\b|os\.environ",
    "rewrites code objects": r"__code__|__globals__",
}


@dataclass
class Row:
    student: str
    notebook: str
    points: dict[str, float] = field(default_factory=dict)
    max_points: dict[str, float] = field(default_factory=dict)
    messages: dict[str, str] = field(default_factory=dict)
    flags: list[str] = field(default_factory=list)
    cells: list[dict] = field(default_factory=list)

    @property
    def total(self) -> float:
        return sum(self.points.values())

    @property
    def failed(self) -> list[str]:
        return [k for k in self.max_points if self.points.get(k, 0) < self.max_points[k]]


def _read(path: Path) -> dict:
    return json.loads(path.read_text())


def _text(cell) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else src


def _grade_id(cell) -> str | None:
    return cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")


STUDENT_ID = re.compile(r"[\w@+-][\w .@+-]*", re.UNICODE)  # no "/", no leading dot or space
MAX_DEPTH = 12  # folders below a student's folder that are searched for notebooks
MAX_ENTRIES = 5_000  # entries of one student's folder that are looked at
MAX_NOTEBOOK_BYTES = 64 * 1024 ** 2  # a submitted notebook larger than this is not read
MAX_LINES_PER_STUDENT = 20  # refused entries listed one by one; the rest counted


def show(name) -> str:
    """A file name as text that is safe to print and to write as UTF-8 (a name that is not UTF-8 is escaped)."""
    text = os.fsencode(os.fspath(name)).decode("utf-8", errors="backslashreplace")
    return ascii(text)[1:-1] if any(not ch.isprintable() for ch in text) else text


def student_id(folder_name: str) -> str | None:
    """The student id of a folder of SUBMISSIONS: its name in Unicode NFC, unchanged otherwise (so "john smith"
    and "john_smith", "José" and "Zoë" stay distinct); None when it is not a valid id (a hidden or dot folder
    such as "...", a name that ends with a space, a control character, a name that is not UTF-8)."""
    try:
        folder_name.encode("utf-8")
    except UnicodeEncodeError:
        return None
    name = unicodedata.normalize("NFC", folder_name)
    if not STUDENT_ID.fullmatch(name) or name != name.strip() or len(name) > 100:
        return None
    return name


def id_key(student: str) -> str:
    """Two ids that a person reads as one ("Alice" and "alice", "ﬁona" and "fiona", the Kelvin sign and "K") have
    the same key: NFKC, then case-folded, then NFKC again."""
    return unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", student).casefold())


def _kind(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def _walk(top: Path, student: str, refused: list[str], shown: Path) -> list[Path]:
    """The regular ``*.ipynb`` files under ``top``, never through a symbolic link (lstat only), at most
    :data:`MAX_DEPTH` folders deep and :data:`MAX_ENTRIES` entries; what is not searched is a line in ``refused``."""
    found, stack, seen = [], [(top, 0)], 0
    while stack:
        folder, depth = stack.pop()
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
        except OSError as e:
            refused.append(f"{student}: {show(Path(folder).relative_to(shown))} could not be read ({e.strerror}); "
                           "not searched")
            continue
        for entry in entries:
            seen += 1
            if seen > MAX_ENTRIES:
                refused.append(f"{student}: more than {MAX_ENTRIES} files; the rest was not searched")
                return found
            path = Path(entry.path)
            try:
                mode = entry.stat(follow_symlinks=False).st_mode
            except OSError:
                continue
            if stat.S_ISDIR(mode):
                if entry.name == ".ipynb_checkpoints":
                    continue
                if depth + 1 > MAX_DEPTH:
                    refused.append(f"{student}: {show(path.relative_to(shown))} is more than {MAX_DEPTH} folders "
                                   "deep; not searched")
                    continue
                stack.append((path, depth + 1))
            elif stat.S_ISREG(mode):
                if entry.name.endswith(".ipynb"):
                    found.append(path)
            elif entry.name.endswith(".ipynb") or stat.S_ISLNK(mode) or not stat.S_ISREG(mode):
                refused.append(f"{student}: {show(path.relative_to(shown))} is {_kind(mode)}; refused (only "
                               "regular files are read)")
    return sorted(found)


def find_submissions(submissions: Path, assignments: set[str]) \
        -> tuple[dict[str, dict[str, Path | str]], list[str], list[str]]:
    """student -> {assignment: notebook path, or why it cannot be graded}, the errors (invalid or colliding ids,
    two copies of one notebook, loose files, refused entries: symbolic links, FIFOs, devices, folders nested too
    deep) and warnings (files that are not a course notebook). Nothing is read through a symbolic link."""
    found: dict[str, dict[str, Path | str]] = {}
    errors, warnings = [], []
    by_key: dict[str, str] = {}
    collided: set[str] = set()
    for entry in sorted(os.scandir(submissions), key=lambda e: e.name):
        try:
            mode = entry.stat(follow_symlinks=False).st_mode
        except OSError:
            continue
        if not stat.S_ISDIR(mode):
            if not stat.S_ISREG(mode):
                errors.append(f"'{show(entry.name)}' in SUBMISSIONS is {_kind(mode)}; refused (a student's folder "
                              "must be a folder, not a link to one)")
            elif entry.name.endswith(".ipynb"):
                errors.append(f"'{show(entry.name)}' is a notebook outside any student folder; not graded")
            continue
        student = student_id(entry.name)
        if student is None:
            errors.append(f"folder '{show(entry.name)}' is not a valid student id (see docs/teaching.md); not graded")
            continue
        key = id_key(student)
        if key in by_key:
            errors.append(f"folders {by_key[key]!r} and '{show(entry.name)}' name the same student (ids are "
                          "compared case-insensitively, after Unicode NFKC); neither is graded")
            found.pop(by_key[key], None)
            collided.add(key)
            continue
        by_key[key] = student
        refused: list[str] = []
        copies: dict[str, list[Path]] = {}
        for nb in _walk(Path(entry.path), student, refused, submissions):
            stem = nb.name[: -len(".ipynb")]
            if stem in assignments:
                copies.setdefault(stem, []).append(nb)
            else:
                warnings.append(f"{student}: {show(nb.relative_to(submissions))} is not a course notebook; ignored")
        for line in refused:
            m = re.search(r"([^/\s]+)\.ipynb is ", line)
            if m and m.group(1) in assignments:  # a notebook that is a link, a FIFO, ...: graded 0, not skipped
                copies.setdefault(m.group(1), [])
        if len(refused) > MAX_LINES_PER_STUDENT:
            refused = refused[:MAX_LINES_PER_STUDENT] + [f"{student}: {len(refused) - MAX_LINES_PER_STUDENT} more "
                                                         "entries refused"]
        errors += refused
        for assignment, paths in copies.items():
            if len(paths) > 1:
                errors.append(f"{student}: {len(paths)} copies of {assignment} "
                              f"({', '.join(show(p.relative_to(submissions)) for p in paths)}); graded 0")
                found.setdefault(student, {})[assignment] = "two copies of this notebook in the student's folder"
            elif not paths:
                found.setdefault(student, {})[assignment] = ("the notebook is not a regular file (a symbolic link, "
                                                             "a FIFO or a device); refused")
            else:
                found.setdefault(student, {})[assignment] = paths[0]
    for key in collided:
        found.pop(by_key[key], None)
    return found, errors, warnings


def read_notebook_bytes(path: Path) -> bytes:
    """The bytes of a regular file, never through a symbolic link (O_NOFOLLOW), never a FIFO or a device (checked
    on the open file), at most :data:`MAX_NOTEBOOK_BYTES`; OSError otherwise."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(f"{_kind(st.st_mode)}, not a regular file")
        if st.st_size > MAX_NOTEBOOK_BYTES:
            raise OSError(f"larger than {MAX_NOTEBOOK_BYTES // 1024 ** 2} MB")
        chunks, size = [], 0
        while True:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                break
            size += len(chunk)
            if size > MAX_NOTEBOOK_BYTES:
                raise OSError(f"larger than {MAX_NOTEBOOK_BYTES // 1024 ** 2} MB")
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def check_integrity(submitted: dict, released: dict) -> list[str]:
    """Flags: locked cells of the release that the submission edited or deleted, and suspicious own code."""
    flags = []
    sub_cells = {}
    for cell in submitted.get("cells", []):
        gid = _grade_id(cell)
        if gid:
            sub_cells.setdefault(gid, cell)
    release_ids = set()
    for cell in released["cells"]:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        gid = meta.get("grade_id")
        release_ids.add(gid)
        if not meta.get("locked"):
            continue
        if gid not in sub_cells:
            flags.append(f"locked cell {gid} deleted")
        elif _text(sub_cells[gid]).strip() != _text(cell).strip():
            flags.append(f"locked cell {gid} edited")
    own_code = [_text(c) for c in submitted.get("cells", []) if c.get("cell_type") == "code"
                and (_grade_id(c) not in release_ids or not c.get("metadata", {}).get("nbgrader", {}).get("locked"))]
    own_code = [src for src in own_code if src]
    for what, pattern in TAMPER_PATTERNS.items():
        if any(re.search(pattern, src) for src in own_code):
            flags.append(f"own code {what}")
    return flags


# ------------------------------------------------------------------------------------- the whole run
def _atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8", errors="backslashreplace")  # a student's lone surrogate cannot stop it
    tmp.replace(path)


def _state_path(out: Path, student: str, notebook: str) -> Path:
    return out / ".state" / hashlib.sha256(f"{student}\0{notebook}".encode()).hexdigest()[:32] / "result.json"


def _release_digest(release_dir: Path, notebook: str) -> bytes:
    return (release_dir / notebook / f"{notebook}.ipynb").read_bytes()


_LIVE: set = set()  # the grade processes running now (killed, with their sandboxes, when the run stops)
_LIVE_LOCK = __import__("threading").Lock()
_STOPPING = __import__("threading").Event()


def kill_live_graders() -> None:
    """End every grade process of this run and everything it started (its sandbox dies with it)."""
    import signal

    _STOPPING.set()
    with _LIVE_LOCK:
        procs = list(_LIVE)
    for proc in procs:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def kept_result(state: Path, key: str) -> dict | None:
    """The result kept in ``state`` (``out/.state``) by an earlier run for the same digest ``key``, or None."""
    if state.exists():
        try:
            kept = json.loads(state.read_text())
            if kept.get("digest") == key:
                return kept["result"]
        except (ValueError, KeyError, AttributeError):
            pass
    return None


def run_grade_job(submitted: dict, released: dict, library: Path, *, cell_timeout: float, budget_s: float,
                  salt: str) -> dict:
    """Grade one notebook (``submitted`` against ``released``) in this job's grade process (:class:`GradeWorker`,
    which starts the sandbox): its result, with ``status`` "graded", or "could not grade" with the reason."""
    with tempfile.TemporaryDirectory(prefix="attn-grade-") as tmp:
        job, res = Path(tmp) / "job.json", Path(tmp) / "result.json"
        job.write_text(json.dumps({"submitted": submitted, "released": released, "library": str(library),
                                   "cell_timeout": cell_timeout, "budget_s": budget_s, "salt": salt}))
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
        try:
            status = _worker(env).grade(job, res, timeout=budget_s + 120)
            if status == 0 and res.exists():
                result = json.loads(res.read_text())
                result["status"] = "graded"
                return result
            return {"status": "could not grade", "scores": {}, "messages": {}, "cells": [],
                    "flags": [f"could not grade: the grader stopped (exit status {status})"]}
        except subprocess.TimeoutExpired:
            return {"status": "could not grade", "scores": {}, "messages": {}, "cells": [],
                    "flags": [f"could not grade: grading ran past {budget_s:g} s"]}


def grade_one_notebook(student: str, notebook: str, path: Path, release_dir: Path, library: Path, out: Path, *,
                       cell_timeout: float, budget_s: float, salt: str = "graded") -> dict:
    """One submission graded in a process of its own (classroom.grade, which starts the sandbox); its result is
    kept in ``out/.state`` under the digest of the submission and the release, so a new run reuses it."""
    try:
        data = read_notebook_bytes(path)
    except OSError as e:
        return {"status": "could not grade", "scores": {}, "messages": {}, "cells": [],
                "flags": [f"could not grade: the notebook could not be read ({show(e.strerror or str(e))})"]}
    released_bytes = _release_digest(release_dir, notebook)
    key = grade_digest(data, released_bytes, str(cell_timeout).encode())
    state = _state_path(out, student, notebook)
    kept = kept_result(state, key)
    if kept is not None:
        return kept
    released = json.loads(released_bytes)
    flags: list[str] = []
    try:
        submitted = json.loads(data)
        if not isinstance(submitted, dict) or not isinstance(submitted.get("cells"), list):
            raise ValueError("no cells")
        flags += check_integrity(submitted, released)
    except (ValueError, KeyError, TypeError, AttributeError, UnicodeDecodeError, RecursionError, MemoryError) as e:
        result = {"status": "could not grade", "flags": [f"could not grade: not a readable notebook ({type(e).__name__})"],
                  "scores": {}, "messages": {}, "cells": []}
    else:
        result = run_grade_job(submitted, released, library, cell_timeout=cell_timeout, budget_s=budget_s, salt=salt)
        result["flags"] = flags + result.get("flags", [])
    if result["status"] == "graded":
        _atomic_write(state, json.dumps({"digest": key, "result": result}, ensure_ascii=False))
    return result


class GradeWorker:
    """A grade process (``python -m classroom.grade --serve``) that grades the submissions of one autograde job one
    after another: Python, torch and the checks start once per job, not once per submission (issue 39 §4). Each
    submission still runs in a sandbox of its own; the worker never runs a student's code. It is registered so that
    a stopped run kills it (and its sandbox); one that runs past a submission's budget, stops or fails is killed and
    the next submission starts a new one."""

    def __init__(self, env: dict):
        if _STOPPING.is_set():
            raise KeyboardInterrupt
        self.log = tempfile.TemporaryFile()
        self.proc = subprocess.Popen([sys.executable, "-m", "classroom.grade", "--serve"], env=env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log,
                                     start_new_session=True)
        with _LIVE_LOCK:
            _LIVE.add(self.proc)
        if _STOPPING.is_set():  # the stop came while this worker started: kill_live_graders may have missed it
            self.close(kill=True)
            raise KeyboardInterrupt

    def alive(self) -> bool:
        return self.proc.poll() is None

    def grade(self, job: Path, res: Path, *, timeout: float) -> int:
        """0 when the worker wrote ``res``; else the worker's exit status (it is then stopped). TimeoutExpired
        when it ran past ``timeout`` (it is killed, with its sandbox)."""
        import select

        if _STOPPING.is_set():
            raise KeyboardInterrupt
        try:
            self.proc.stdin.write(f"{job}\t{res}\n".encode())
            self.proc.stdin.flush()
            ready, end = [], time.monotonic() + timeout
            while not ready:  # in steps of 1 s, so that a stop (Ctrl-C) is seen even by a worker it raced with
                if _STOPPING.is_set():
                    self.close(kill=True)
                    raise KeyboardInterrupt
                left = end - time.monotonic()
                if left <= 0:
                    self.close(kill=True)
                    raise subprocess.TimeoutExpired(self.proc.args, timeout)
                ready, _, _ = select.select([self.proc.stdout], [], [], min(1.0, left))
            line = self.proc.stdout.readline()
        except OSError:
            line = b""
        if line == b"done\n":
            return 0
        self.close(kill=True)
        self.log.seek(0)
        sys.stderr.write(self.log.read()[-3000:].decode(errors="replace"))
        return self.proc.returncode if self.proc.returncode not in (None, 0) else 1

    def close(self, *, kill: bool = False) -> None:
        if kill and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, 9)
            except ProcessLookupError:
                pass
        try:
            self.proc.stdin.close()  # the worker's loop ends
        except OSError:
            pass
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, 9)
            self.proc.wait()
        with _LIVE_LOCK:
            _LIVE.discard(self.proc)


_WORKERS = __import__("threading").local()  # one GradeWorker per autograde job (thread)
_ALL_WORKERS: list = []


def _worker(env: dict) -> GradeWorker:
    w = getattr(_WORKERS, "worker", None)
    if w is None or not w.alive():
        w = _WORKERS.worker = GradeWorker(env)
        with _LIVE_LOCK:
            _ALL_WORKERS.append(w)
    return w


def close_workers() -> None:
    with _LIVE_LOCK:
        workers = list(_ALL_WORKERS)
        _ALL_WORKERS.clear()
    for w in workers:
        w.close()


def grade_digest(*parts: bytes) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(hashlib.sha256(p).digest())
    return h.hexdigest()


def _max_points(released: dict) -> dict[str, float]:
    return {c["metadata"]["nbgrader"]["grade_id"]: float(c["metadata"]["nbgrader"]["points"])
            for c in released["cells"] if c.get("metadata", {}).get("nbgrader", {}).get("grade")}


def record_in_gradebook(gb, row: Row) -> None:
    """This run's scores into nbgrader's gradebook (its formgrader and ``nbgrader export`` read them): every
    graded cell gets this run's automatic score, 0 when the submission could not be graded; a manual score
    left from before is cleared (the course has no manually graded cells)."""
    import warnings

    warnings.filterwarnings("ignore", message=".*not in session.*")  # nbgrader's add_submission, harmless
    gb.update_or_create_student(row.student)
    try:
        gb.find_submission(row.notebook, row.student)
    except Exception:  # MissingEntry
        gb.add_submission(row.notebook, row.student)
    for gid in row.max_points:
        grade = gb.find_grade(gid, row.notebook, row.notebook, row.student)
        grade.auto_score = row.points.get(gid, 0.0)
        grade.manual_score = None
        grade.needs_manual_grade = False
    gb.db.commit()


def autograde(submissions: Path, course_dir: Path, out: Path, *, student_timeout: float = 1800,
              jobs: int = 1) -> list[Row]:
    """Grade every submission; write ``out/gradebook.csv``, ``out/feedback/`` and ``out/summary.txt``, and the
    gradebook. Results are kept as they come (``out/.state``): a run that is stopped resumes where it was."""
    import secrets
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from nbgrader.api import Gradebook

    from classroom.config import cell_timeout
    from classroom.sandbox import Cgroup, bwrap_path, library_dir

    salt = secrets.token_hex(16)  # this run's seeds of the graded inputs: drawn here, never in the sandbox
    Cgroup.sweep()  # what a grader killed with kill -9 left: empty cgroups
    if jobs > 1 and Cgroup.mode() is None:
        print(f"note: no writable cgroups here (cgroup v2 with cpu and memory, or v1's cpu and memory), so a "
              f"sandbox's CPU and memory cannot be limited as a whole: grading one submission at a time "
              f"(JOBS={jobs} asked), so that a hostile submission cannot starve a classmate's", file=sys.stderr)
        jobs = 1
    _STOPPING.clear()

    release_dir = course_dir / "release"
    if not (course_dir / "gradebook.db").exists() or not release_dir.is_dir():
        raise SystemExit(f"no release in {course_dir}: run `make release` first")
    bwrap_path()  # no sandbox, no grading
    assignments = sorted(p.name for p in release_dir.iterdir() if p.is_dir())
    found, errors, warnings = find_submissions(submissions, set(assignments))
    out.mkdir(parents=True, exist_ok=True)
    library = library_dir(Path(tempfile.mkdtemp(prefix="attn-sandbox-lib-")))
    released = {a: _read(release_dir / a / f"{a}.ipynb") for a in assignments}
    from classroom import pieces  # the students' own my_attn/ packages, graded piece by piece

    packages = pieces.find_packages(submissions)
    if packages:
        released[pieces.ASSIGNMENT] = pieces.pieces_notebook({})
        with Gradebook(f"sqlite:///{(course_dir / 'gradebook.db').resolve()}") as gb:
            pieces.register_in_gradebook(gb)
    lock = threading.Lock()
    rows: list[Row] = []
    timeout = cell_timeout()

    published = [0.0]  # when the reports were last written

    def publish() -> None:  # what is graded is written (each result is also kept in out/.state as it comes)
        from classroom.gradebook import write_reports

        write_csv(rows, out / "gradebook.csv")
        write_summary(rows, errors, warnings, out / "summary.txt")
        if rows:
            write_reports(out)  # students.csv (one row per student) and canvas.csv (Canvas's import format)

    def grade(item):
        student, notebook, path = item
        if _STOPPING.is_set():
            return
        started = time.monotonic()
        if isinstance(path, str):  # two copies of one notebook, a link, a FIFO: an error, 0 for this run
            result = {"status": "could not grade", "scores": {}, "messages": {}, "cells": [],
                      "flags": [f"could not grade: {path}"]}
        else:
            try:
                if notebook == pieces.ASSIGNMENT:
                    result = pieces.grade_package(student, path, library, out, cell_timeout=timeout,
                                                  budget_s=student_timeout, salt=salt)
                else:
                    result = grade_one_notebook(student, notebook, path, release_dir, library, out,
                                                cell_timeout=timeout, budget_s=student_timeout, salt=salt)
            except KeyboardInterrupt:
                return
            except Exception as e:  # noqa: BLE001 - one submission's error never stops the class
                result = {"status": "could not grade", "scores": {}, "messages": {}, "cells": [],
                          "flags": [f"could not grade: the grader failed on it ({type(e).__name__})"]}
            if _STOPPING.is_set():  # killed by the stop itself: not this student's 0
                return
        row = Row(student, notebook, max_points=_max_points(released[notebook]))
        row.points = {k: float(result.get("scores", {}).get(k, 0.0)) if result["status"] == "graded" else 0.0
                      for k in row.max_points}
        row.messages = {k: str(v) for k, v in result.get("messages", {}).items()}
        row.flags = list(result.get("flags", []))
        row.cells = result.get("cells", [])
        with lock:
            with Gradebook(f"sqlite:///{(course_dir / 'gradebook.db').resolve()}") as gb:
                record_in_gradebook(gb, row)
            rows.append(row)
            write_feedback([r for r in rows if r.student == student], out / "feedback")
            if time.monotonic() - published[0] >= PUBLISH_EVERY_S:  # not after every row: 14,000 rows would
                publish()                                            # rewrite the CSVs 14,000 times
                published[0] = time.monotonic()
        print(f"graded {student} / {notebook} in {time.monotonic() - started:.1f} s", file=sys.stderr)

    items = [(s, nb, p) for s, nbs in found.items() for nb, p in nbs.items()]
    items += [(s, pieces.ASSIGNMENT, p) for s, p in packages.items()]
    pool = ThreadPoolExecutor(max_workers=max(1, jobs))
    try:
        for future in [pool.submit(grade, item) for item in items]:
            future.result()
    except BaseException:  # Ctrl-C, SIGTERM (main), an error: no grade process and no sandbox outlives the run
        kill_live_graders()
        pool.shutdown(wait=False, cancel_futures=True)  # a job thread stuck on a killed worker must not hold the stop
        if lock.acquire(timeout=30):
            try:
                publish()  # what was graded before the stop
            finally:
                lock.release()
        raise
    finally:
        pool.shutdown(wait=not _STOPPING.is_set())
        close_workers()
        shutil.rmtree(library.parent, ignore_errors=True)
    publish()
    return rows


def write_summary(rows: list[Row], errors: list[str], warnings: list[str], path: Path) -> None:
    lines = [f"graded {len({r.student for r in rows})} students, {len(rows)} notebooks"]
    could_not = [f"{r.student} / {r.notebook}: {'; '.join(r.flags)}" for r in rows
                 if any(f.startswith("could not grade") for f in r.flags)]
    lines += [f"ERROR: {e}" for e in errors] + [f"ERROR: could not grade {c}" for c in could_not]
    lines += [f"warning: {w}" for w in warnings]
    _atomic_write(path, "\n".join(lines) + "\n")


def write_csv(rows: list[Row], path: Path) -> None:
    from classroom.gradebook import cell

    keys = list(dict.fromkeys(k for r in rows for k in r.max_points))
    f = io.StringIO()
    if True:
        w = csv.writer(f)
        w.writerow(["student", "notebook", *keys, "total", "max_total", "failed", "flags"])
        for r in sorted(rows, key=lambda r: (r.student, r.notebook)):
            w.writerow([cell(r.student), r.notebook, *[_num(r.points[k]) if k in r.max_points else "" for k in keys],
                        _num(r.total), _num(sum(r.max_points.values())), ";".join(r.failed),
                        cell(";".join(r.flags))])
    _atomic_write(path, f.getvalue())


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


PUBLISH_EVERY_S = 20  # the CSVs and summary.txt are rewritten at most this often while grading, and at the end
FEEDBACK_CAP = 200_000  # characters of one student's page
TEXT_CAP = 4_000  # characters of one message, cell or output


def _cap(text: str, n: int = TEXT_CAP) -> str:
    text = str(text)
    return text if len(text) <= n else text[:n] + f"\n[... {len(text) - n} more characters not shown]"


def write_feedback(rows: list[Row], out: Path) -> None:
    """``out/<student>/index.html``: per notebook, each check's points and the grader's message, then the
    student's own cells with what they printed. Everything is escaped text (no student HTML or script runs), capped
    in size; there is no hidden test in it and nothing from another student."""
    by_student: dict[str, list[Row]] = {}
    for r in rows:
        by_student.setdefault(r.student, []).append(r)
    for student, srows in by_student.items():
        parts = [f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>Feedback for {html.escape(student)}</title>"
                 "<meta http-equiv='Content-Security-Policy' content=\"default-src 'none'; style-src 'unsafe-inline'\">"
                 "<style>body{font-family:sans-serif;max-width:60em;margin:2em auto}td,th{padding:.3em .6em;"
                 "border-bottom:1px solid #ccc;text-align:left;vertical-align:top}.ok{color:#0072B2}"
                 ".no{color:#D55E00}pre{background:#f6f6f6;padding:.5em;white-space:pre-wrap}</style></head><body>",
                 f"<h1>Feedback for {html.escape(student)}</h1>"]
        for r in sorted(srows, key=lambda r: r.notebook):
            parts.append(f"<h2>{html.escape(r.notebook)}: {_num(r.total)} / {_num(sum(r.max_points.values()))} "
                         "points</h2><table><tr><th>check</th><th>points</th><th>what the check said</th></tr>")
            for key, mx in r.max_points.items():
                got = r.points.get(key, 0)
                ok = got >= mx
                msg = r.messages.get(key) or ("passed" if ok else "could not grade")
                parts.append(f"<tr><td>{html.escape(key)}</td><td>{_num(got)} / {_num(mx)}</td>"
                             f"<td class='{'ok' if ok else 'no'}'>{html.escape(_cap(msg))}</td></tr>")
            parts.append("</table>")
            if r.flags:
                parts.append("<p>Notes for your teacher: " + html.escape(_cap("; ".join(r.flags))) + "</p>")
            if r.cells:
                parts.append("<h3>Your cells, as graded</h3>")
            for c in r.cells:
                parts.append(f"<pre>{html.escape(_cap(c.get('source', '')))}</pre>")
                said = "\n".join(x for x in (c.get("output", ""), c.get("error", "")) if x)
                if said:
                    parts.append(f"<p>It printed:</p><pre>{html.escape(_cap(said))}</pre>")
        parts.append("</body></html>")
        page = "\n".join(parts)
        if len(page) > FEEDBACK_CAP:
            cut = page[:FEEDBACK_CAP]
            cut = cut[: cut.rfind("\n")] if "\n" in cut else ""
            page = cut + "\n<p>[the rest of this page was left out: it was too long]</p></body></html>"
        _atomic_write(out / student / "index.html", page)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("submissions", type=Path, nargs="?")
    p.add_argument("--course-dir", type=Path, default=ROOT / "build" / "class")
    p.add_argument("--out", type=Path, default=ROOT / "grades")
    p.add_argument("--student-timeout", type=float, default=float(os.environ.get("ATTN_STUDENT_TIMEOUT", 1800)))
    p.add_argument("--jobs", type=int, default=int(os.environ.get("ATTN_GRADE_JOBS", 1)),
                   help="students graded at once (default 1; each runs one kernel)")
    args = p.parse_args(argv)
    import signal

    def on_term(signum, frame):  # `kill` of the grader: the same clean stop as Ctrl-C
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)
    if args.submissions is None or not args.submissions.is_dir():
        p.error("give the folder of submissions (one folder per student): make autograde SUBMISSIONS=dir")
    try:
        rows = autograde(args.submissions, args.course_dir, args.out, student_timeout=args.student_timeout,
                         jobs=args.jobs)
    except KeyboardInterrupt:  # graders killed and what was graded written (autograde's stop path): exit now, not
        kill_live_graders()    # after a job thread that may still wait on a killed worker
        print("stopped: the students graded before the stop are in the gradebook", file=sys.stderr, flush=True)
        sys.stdout.flush()
        os._exit(130)
    print(f"graded {len({r.student for r in rows})} students, {len(rows)} notebooks: {args.out / 'gradebook.csv'}, "
          f"feedback in {args.out / 'feedback'}")
    summary = (args.out / "summary.txt").read_text()
    print(summary, end="")
    return 1 if "ERROR:" in summary else 0


if __name__ == "__main__":
    sys.exit(main())
