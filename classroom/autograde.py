"""``make autograde SUBMISSIONS=dir``: grade every student's notebooks with nbgrader; gradebook CSV and feedback.

    python -m classroom.autograde SUBMISSIONS [--course-dir build/class] [--out grades]

``SUBMISSIONS`` holds one folder per student, named by the student's id, with the student's notebooks inside,
either as nbgrader collects them (``<student>/<notebook>/<notebook>.ipynb``) or flat (``<student>/<notebook>.ipynb``);
a notebook is recognised by its file name (``03_scaled_dot_product_attention.ipynb``). Run ``make release`` first:
grading compares against the release recorded in ``<course-dir>/gradebook.db``.

For each student, in a process of its own with a time limit (``--student-timeout``): ``nbgrader autograde`` of
each of the student's notebooks (every cell under a time limit, ``ATTN_CELL_TIMEOUT``; locked cells restored from
the gradebook), then ``nbgrader generate_feedback``. A failure of one student's grading is that student's
problem: it is flagged and the others are graded as usual. The hidden tests talk to one pristine re-check worker
(:mod:`classroom.recheck`) started before any student code runs.

Outputs in ``--out``:

- ``gradebook.csv``: one row per student and notebook: ``student, notebook``, the points of each graded check
  (one column per check, by grade id), ``total, max_total``, ``failed`` (the checks that scored 0, ``;``-separated)
  and ``flags`` (what the teacher should look at: edited or deleted locked cells, timeouts, code that touches the
  grading machinery, a grading failure);
- ``feedback/<student>/index.html``: per notebook, each check's points and, for a failed one, the check's message
  with its hint; links to nbgrader's full feedback (``feedback/<student>/<notebook>.html``).
"""

from __future__ import annotations

import argparse
import csv
import html
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
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
CDN_SCRIPT = re.compile(r'<script src="https?://[^"]*"> ?</script>')


@dataclass
class Row:
    student: str
    notebook: str
    points: dict[str, float] = field(default_factory=dict)
    max_points: dict[str, float] = field(default_factory=dict)
    messages: dict[str, str] = field(default_factory=dict)
    flags: list[str] = field(default_factory=list)

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


def find_submissions(submissions: Path, assignments: set[str]) -> tuple[dict[str, dict[str, Path]], list[str]]:
    """student -> {assignment: notebook path}, and warnings about files that are not a course notebook."""
    found, warnings = {}, []
    for student_dir in sorted(p for p in submissions.iterdir() if p.is_dir() and not p.name.startswith(".")):
        student = re.sub(r"[^A-Za-z0-9_.@-]+", "_", student_dir.name)
        for nb in sorted(student_dir.rglob("*.ipynb")):
            if ".ipynb_checkpoints" in nb.parts:
                continue
            if nb.stem in assignments:
                found.setdefault(student, {})[nb.stem] = nb
            else:
                warnings.append(f"{student}: {nb.relative_to(submissions)} is not a course notebook; ignored")
    return found, warnings


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


def _outputs_by_grade_id(nb: dict) -> dict[str, str]:
    """grade id -> the error message of a graded cell that failed (the check's message and hint)."""
    out = {}
    for cell in nb.get("cells", []):
        gid = _grade_id(cell)
        if not gid or cell.get("cell_type") != "code":
            continue
        for o in cell.get("outputs", []):
            if o.get("output_type") == "error":
                evalue = o.get("evalue") or ""
                if o.get("ename") == "CellTimeoutError" or (o.get("ename") == "KeyboardInterrupt" and not evalue):
                    out[gid] = "the cell ran past the time limit (an endless loop?) and was stopped."
                else:
                    out.setdefault(gid, f"{o.get('ename')}: {evalue}".strip())
    return out


def _timeouts(nb: dict) -> int:
    return sum(1 for c in nb.get("cells", []) for o in c.get("outputs", [])
               if o.get("output_type") == "error" and o.get("ename") in ("CellTimeoutError",))


# ------------------------------------------------------------------------------------- one student's grading
def grade_student(course_dir: Path, student: str, assignments: list[str]) -> int:
    """Runs in its own process: autograde and feedback for one student. Exit status 0 = every step succeeded."""
    from classroom.config import api

    nbg = api(course_dir)
    status = 0
    for assignment in assignments:
        for step, call in (("autograde", nbg.autograde), ("generate_feedback", nbg.generate_feedback)):
            result = call(assignment, student, force=True)
            if not result["success"]:
                status = 1
                print(f"{student}/{assignment}: nbgrader {step} failed:\n{result.get('log', '')}\n{result.get('error', '')}",
                      file=sys.stderr)
                break
    return status


# ------------------------------------------------------------------------------------- the whole run
def _start_recheck_worker(env: dict) -> tuple[subprocess.Popen, str]:
    sock = os.path.join(tempfile.mkdtemp(prefix="recheck-"), "worker.sock")
    proc = subprocess.Popen([sys.executable, "-m", "classroom.recheck", "--serve", sock], env=env,
                            start_new_session=True)
    deadline = time.monotonic() + 120
    while not os.path.exists(sock):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError("the re-check worker (python -m classroom.recheck --serve) did not start")
        time.sleep(0.1)
    return proc, sock


def _stop(proc: subprocess.Popen) -> None:
    import signal

    try:
        os.killpg(proc.pid, signal.SIGTERM)  # the worker and any re-check child still running
    except ProcessLookupError:
        pass
    proc.wait(timeout=30)


def autograde(submissions: Path, course_dir: Path, out: Path, *, student_timeout: float = 1800,
              jobs: int = 1) -> list[Row]:
    from nbgrader.api import Gradebook

    release_dir = course_dir / "release"
    if not (course_dir / "gradebook.db").exists() or not release_dir.is_dir():
        raise SystemExit(f"no release in {course_dir}: run `make release` first")
    assignments = sorted(p.name for p in release_dir.iterdir() if p.is_dir())
    found, warnings = find_submissions(submissions, set(assignments))
    for w in warnings:
        print("warning:", w, file=sys.stderr)

    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    env.setdefault("OMP_NUM_THREADS", "1")
    worker, sock = _start_recheck_worker(env)
    env["ATTN_RECHECK_SOCKET"] = sock

    def grade_one(student: str, notebooks: dict[str, Path]) -> list[Row]:
        for sub in ("submitted", "autograded", "feedback"):
            shutil.rmtree(course_dir / sub / student, ignore_errors=True)
        student_rows = {}
        for assignment, path in notebooks.items():
            dest = course_dir / "submitted" / student / assignment / f"{assignment}.ipynb"
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, dest)
            row = Row(student, assignment)
            released = _read(release_dir / assignment / f"{assignment}.ipynb")
            try:
                row.flags += check_integrity(_read(dest), released)
            except (ValueError, KeyError, TypeError, AttributeError) as e:
                row.flags.append(f"not a readable notebook ({type(e).__name__})")
            student_rows[assignment] = row
        started = time.monotonic()
        try:
            proc = subprocess.run([sys.executable, "-m", "classroom.autograde", "--grade-student", student,
                                   "--course-dir", str(course_dir), *notebooks], env=env, timeout=student_timeout,
                                  capture_output=True, text=True)
            if proc.returncode != 0:
                for row in student_rows.values():
                    row.flags.append("nbgrader could not grade (part of) this submission")
                sys.stderr.write(proc.stderr[-5000:])
        except subprocess.TimeoutExpired:
            for row in student_rows.values():
                row.flags.append(f"grading stopped after {student_timeout:g} s")
        print(f"graded {student} ({', '.join(notebooks)}) in {time.monotonic() - started:.0f} s", file=sys.stderr)
        return list(student_rows.values())

    rows: list[Row] = []
    try:
        # jobs > 1: students graded side by side (each in its own process, SQLite serialises the gradebook's writes)
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
            for student_rows in pool.map(lambda item: grade_one(*item), found.items()):
                rows += student_rows
    finally:
        _stop(worker)

    with Gradebook(f"sqlite:///{(course_dir / 'gradebook.db').resolve()}") as gb:
        for row in rows:
            released = _read(release_dir / row.notebook / f"{row.notebook}.ipynb")
            for cell in released["cells"]:
                meta = cell.get("metadata", {}).get("nbgrader", {})
                if meta.get("grade"):
                    row.max_points[meta["grade_id"]] = float(meta["points"])
                    row.points[meta["grade_id"]] = 0.0
            try:
                snb = gb.find_submission_notebook(row.notebook, row.notebook, row.student)
                for grade in snb.grades:
                    if grade.name in row.max_points:
                        row.points[grade.name] = float(grade.score or 0)
            except Exception:
                if not any("could not grade" in f or "stopped" in f for f in row.flags):
                    row.flags.append("no grades recorded")
            graded = course_dir / "autograded" / row.student / row.notebook / f"{row.notebook}.ipynb"
            if graded.exists():
                gnb = _read(graded)
                row.messages = _outputs_by_grade_id(gnb)
                if _timeouts(gnb):
                    row.flags.append(f"{_timeouts(gnb)} cell(s) ran past the time limit")
    write_csv(rows, out / "gradebook.csv")
    write_feedback(rows, course_dir, out / "feedback")
    return rows


def write_csv(rows: list[Row], path: Path) -> None:
    keys = list(dict.fromkeys(k for r in rows for k in r.max_points))
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["student", "notebook", *keys, "total", "max_total", "failed", "flags"])
        for r in sorted(rows, key=lambda r: (r.student, r.notebook)):
            w.writerow([r.student, r.notebook, *[_num(r.points[k]) if k in r.max_points else "" for k in keys],
                        _num(r.total), _num(sum(r.max_points.values())), ";".join(r.failed), ";".join(r.flags)])


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


def write_feedback(rows: list[Row], course_dir: Path, out: Path) -> None:
    by_student: dict[str, list[Row]] = {}
    for r in rows:
        by_student.setdefault(r.student, []).append(r)
    for student, srows in by_student.items():
        folder = out / student
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        parts = [f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>Feedback for {html.escape(student)}</title>"
                 "<style>body{font-family:sans-serif;max-width:60em;margin:2em auto}td,th{padding:.3em .6em;"
                 "border-bottom:1px solid #ccc;text-align:left;vertical-align:top}.ok{color:#0072B2}"
                 ".no{color:#D55E00}</style></head><body>", f"<h1>Feedback for {html.escape(student)}</h1>"]
        for r in sorted(srows, key=lambda r: r.notebook):
            full = course_dir / "feedback" / student / r.notebook / f"{r.notebook}.html"
            link = ""
            if full.exists():
                text = CDN_SCRIPT.sub("", full.read_text())  # offline: no MathJax from a CDN
                (folder / f"{r.notebook}.html").write_text(text)
                link = f" (<a href='{html.escape(r.notebook)}.html'>your graded notebook</a>)"
            parts.append(f"<h2>{html.escape(r.notebook)}: {_num(r.total)} / {_num(sum(r.max_points.values()))} "
                         f"points{link}</h2><table><tr><th>check</th><th>points</th><th>what the check said</th></tr>")
            for key, mx in r.max_points.items():
                got = r.points.get(key, 0)
                ok = got >= mx
                msg = "passed" if ok else r.messages.get(key, "no result: the cell did not run")
                parts.append(f"<tr><td>{html.escape(key)}</td><td>{_num(got)} / {_num(mx)}</td>"
                             f"<td class='{'ok' if ok else 'no'}'>{html.escape(msg)}</td></tr>")
            parts.append("</table>")
            if r.flags:
                parts.append("<p>Notes for your teacher: " + html.escape("; ".join(r.flags)) + "</p>")
        parts.append("</body></html>")
        (folder / "index.html").write_text("\n".join(parts))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("submissions", type=Path, nargs="?")
    p.add_argument("--course-dir", type=Path, default=ROOT / "build" / "class")
    p.add_argument("--out", type=Path, default=ROOT / "grades")
    p.add_argument("--student-timeout", type=float, default=float(os.environ.get("ATTN_STUDENT_TIMEOUT", 1800)))
    p.add_argument("--jobs", type=int, default=int(os.environ.get("ATTN_GRADE_JOBS", 1)),
                   help="students graded at once (default 1; each runs one kernel)")
    p.add_argument("--grade-student", help=argparse.SUPPRESS)
    p.add_argument("assignments", nargs="*", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.grade_student:
        return grade_student(args.course_dir, args.grade_student, [str(args.submissions), *args.assignments])
    if args.submissions is None or not args.submissions.is_dir():
        p.error("give the folder of submissions (one folder per student): make autograde SUBMISSIONS=dir")
    rows = autograde(args.submissions, args.course_dir, args.out, student_timeout=args.student_timeout,
                     jobs=args.jobs)
    print(f"graded {len({r.student for r in rows})} students, {len(rows)} notebooks: {args.out / 'gradebook.csv'}, "
          f"feedback in {args.out / 'feedback'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
