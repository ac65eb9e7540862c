"""`make test-class`: the student release and sandboxed autograding, end to end, in a temporary course directory.

1. release every course notebook (nbgrader generate_assignment) and check the student version cell by cell;
2. synthetic students submit notebook 03: correct ones graded before and after the others (``a_correct_first``,
   ``-z_correct_last é``), typical wrong answers, a raising and a looping function, edited locked cells, patched
   checks, the attackers of issue 24 (``x1``-``x4``), each attack in more than one form, and the CPU hog of
   issue 41 (``-x5_hog``: 60 busy children in sessions of their own, graded beside ``-z_correct_last é``);
3. autograde them in one run (``jobs=2``), then again (resume, stale points);
4. assert the gradebook CSV cell by cell, nbgrader's gradebook, the feedback pages, and that no attacker reached
   anything or left a process or a file behind.
"""

from __future__ import annotations

import csv
import json
import os
import re
import shutil
import tempfile
import time
from pathlib import Path

import pytest

from classroom import source
from classroom.autograde import autograde
from classroom.gradebook import uncell
from classroom.release import points_table, release

ROOT = Path(__file__).resolve().parent.parent
NB = "03_scaled_dot_product_attention"
# notebook 03's graded checks in notebook order: the predict-then-check question comes first
P = "check_prediction_03_scale_by_dk"
KEYS = [P, "check_attention_weights", "check_attention", "check_self_attention"]
# their points (classroom.source.default_points): a prediction 1, an implementation 3; MAX = notebook 03's total
WEIGHTS = [source.PREDICTION_POINTS] + [source.IMPLEMENTATION_POINTS] * 3
MAX = sum(WEIGHTS)

# ---- the students' answers (notebook 03): one string per answer cell
SOLVED_ATTENTION = '''\
def attention(query, key, value, scale=None, bias=None):
    scores = query @ key.transpose(-2, -1) * (1 / math.sqrt(query.shape[-1]) if scale is None else scale)
    w = torch.softmax(scores if bias is None else scores + bias, dim=-1)
    return w @ value
'''
SOLVED_SELF = '''\
def self_attention(x, w_q, w_k, w_v):
    q, k, v = x @ w_q, x @ w_k, x @ w_v
    return torch.softmax(q @ k.T / math.sqrt(w_q.shape[1]), dim=-1) @ v
'''
NO_SCALE = '''\
def attention_weights(query, key):
    return torch.softmax(query @ key.transpose(-2, -1), dim=-1)
'''
BIAS_BEFORE_SCALE = '''\
def attention(query, key, value, scale=None, bias=None):
    scores = query @ key.transpose(-2, -1)
    if bias is not None:
        scores = scores + bias
    return torch.softmax(scores * (1 / math.sqrt(query.shape[-1]) if scale is None else scale), dim=-1) @ value
'''
SCALE_D_MODEL = '''\
def self_attention(x, w_q, w_k, w_v):
    q, k, v = x @ w_q, x @ w_k, x @ w_v
    return torch.softmax(q @ k.T / math.sqrt(x.shape[1]), dim=-1) @ v
'''
RAISES = '''\
def attention_weights(query, key):
    raise ValueError("I give up")
'''
# An endless loop in the cell itself (a function that never returns is stopped by the check's own time limit
# instead, with its own message): nbgrader's per-cell time limit stops it, and `attention` is never defined.
LOOPS = '''\
while True:
    pass


def attention(query, key, value, scale=None, bias=None):
    return value
'''
PATCHED_CHECK = '''\
def attention_weights(query, key):
    return query @ key.transpose(-2, -1)

attn_lib.course.exercises.check_attention_weights = lambda fn: attn_lib.course.exercises.CheckResult("x", True, "✅ passed")
'''
PATCHED_TORCH = '''\
def attention(query, key, value, scale=None, bias=None):
    return value

torch.allclose = lambda *args, **kwargs: True
'''
IMPORTS = "import math\n\nimport torch\n\n"


def _cells_by_id(nb):
    return {c["metadata"]["nbgrader"]["grade_id"]: c for c in nb["cells"] if "nbgrader" in c.get("metadata", {})}


def _text(cell):
    return "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    # The gradebook is SQLite and nbgrader commits once per cell: on tmpfs those commits cost no disk sync.
    shm = Path("/dev/shm")
    tmp = Path(tempfile.mkdtemp(prefix="class-test-", dir=shm)) if shm.is_dir() else tmp_path_factory.mktemp("course")
    started = time.monotonic()
    assignments = release(ROOT / "notebooks", tmp / "course", tmp / "release", edition=tmp / "edition")
    print(f"release: {time.monotonic() - started:.0f} s")
    yield tmp, assignments
    if tmp.parent == shm:
        import subprocess

        subprocess.run(["rm", "-rf", str(tmp)])  # 1,100 nested folders (issue 41): deeper than shutil.rmtree goes


def test_release_has_every_notebook_with_exercises(course):
    tmp, assignments = course
    with_checks = sorted(p.stem for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")
                         if "attn_lib.course.exercises.check_" in p.read_text())
    assert [a.name for a in assignments] == with_checks
    for a in assignments:
        assert (tmp / "release" / a.name / f"{a.name}.ipynb").exists()


def test_student_version_cell_by_cell(course):
    """Stubs exactly as in the course, graded checks locked with points, no solution and no hidden test."""
    tmp, assignments = course
    for a in assignments:
        course_nb = json.loads(a.notebook.read_text())
        student = json.loads((tmp / "release" / a.name / f"{a.name}.ipynb").read_text())
        cells = _cells_by_id(student)
        assert len(cells) == len(student["cells"]), "every cell carries nbgrader metadata"
        exercises = source.exercises_of(course_nb, json.loads(a.solutions.read_text()))
        for ex in exercises.values():
            answer, test = cells[f"answer_{ex.key}"], cells[ex.key]
            assert _text(answer).rstrip() == ex.stub  # the course's stub, unchanged
            assert answer["metadata"]["nbgrader"]["solution"] and not answer["metadata"]["nbgrader"]["locked"]
            meta = test["metadata"]["nbgrader"]
            assert meta["grade"] and meta["locked"] and meta["points"] == ex.points
            assert f"attn_lib.course.exercises.{ex.checks[0].name}(" in _text(test)
            assert "HIDDEN" not in _text(test) and "recheck" not in _text(test)
        released_text = json.dumps(student)
        assert "BEGIN SOLUTION" not in released_text
        for ex in exercises.values():  # no solution line survives (a solution's longest line, as a probe)
            probe = max((ln for ln in ex.solution.splitlines() if ln.strip() not in ex.stub), key=len, default="")
            if len(probe.strip()) > 25:
                assert probe.strip() not in released_text, (a.name, probe)
        locked = [c for c in student["cells"] if not c["metadata"]["nbgrader"]["solution"]]
        assert all(c["metadata"]["nbgrader"]["locked"] for c in locked)
        assert len(student["cells"]) == len(course_nb["cells"]) + len(exercises)  # each exercise: answer + check


def test_source_version_has_solution_and_no_hidden_tests(course):
    """No hidden test in any notebook: the grader runs the checks in its own process (classroom.grade)."""
    tmp, assignments = course
    src = json.loads((tmp / "course" / "source" / NB / f"{NB}.ipynb").read_text())
    cells = _cells_by_id(src)
    assert "### BEGIN SOLUTION" in _text(cells["answer_check_attention_weights"])
    assert "attn_lib.course.exercises.check_attention_weights(attention_weights)" in _text(cells["check_attention_weights"])
    assert "HIDDEN" not in json.dumps(src) and "recheck" not in json.dumps(src)


def test_teaching_guide_lists_the_points(course):
    _, assignments = course
    guide = (ROOT / "docs" / "teaching.md").read_text()
    assert points_table(assignments) in guide, "regenerate with: python -m classroom.release --points-table"


def _edition_texts(edition: Path):
    for p in sorted(edition.rglob("*")):
        if p.is_file() and ".git" not in p.relative_to(edition).parts:
            yield p, p.read_bytes().decode("utf-8", errors="replace")


def test_student_edition_has_no_solution_and_no_prediction_answer(course):
    """The folder a teacher pushes for the students: released notebooks, attn_lib, data, requirements, README,
    a git repository; no solution's code, no hidden test, no prediction's answer, hint or explanation."""
    import subprocess
    import sys

    from attn_lib.course.exercises.concepts import QUESTIONS, _load_all

    tmp, assignments = course
    edition = tmp / "edition"
    for f in ("README.md", "Makefile", "requirements.txt", "pyproject.toml", "attn_lib/__init__.py", "data"):
        assert (edition / f).exists(), f
    assert subprocess.run(["git", "-C", str(edition), "log", "--oneline"], capture_output=True, text=True).stdout
    assert not list(edition.rglob("*solutions*")) and not list(edition.rglob("__pycache__"))
    names = sorted(p.stem for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    assert sorted(p.name for p in (edition / "notebooks").iterdir()) == names
    for a in assignments:  # the released notebook, byte for byte
        assert (edition / "notebooks" / a.name / f"{a.name}.ipynb").read_bytes() == \
            (tmp / "release" / a.name / f"{a.name}.ipynb").read_bytes()
    probes = set()
    for a in assignments:
        sol = json.loads(a.solutions.read_text())
        for cell in sol["cells"]:  # every line of every solution cell that is not in the course notebook's stub
            if cell["cell_type"] == "code" and "check_" in _text(cell):
                probes |= {ln.strip() for ln in _text(cell).splitlines() if len(ln.strip()) > 30}
        course_text = a.notebook.read_text()
        probes = {p for p in probes if p not in course_text}
    # attn_lib is the course's library (every notebook imports it; its checks compare with its own reference
    # functions): a solution line that is also a line of attn_lib is library code, not a leak of the solutions
    library = "\n".join(p.read_text() for p in (ROOT / "attn_lib").rglob("*.py") if not p.name.startswith("predict_"))
    probes = {p for p in probes if p not in library}
    _load_all()
    secrets = {q.explanation for q in QUESTIONS.values()} | {h for q in QUESTIONS.values() for h in q.hints.values()}
    assert len(probes) > 20 and len(secrets) > 30
    for path, text in _edition_texts(edition):
        for bad in ("BEGIN SOLUTION", "HIDDEN TESTS", "notebooks/solutions"):
            assert bad not in text, (path, bad)
        leaked = [p for p in probes if p in text] + [s for s in secrets if s in text]
        assert not leaked, (path, leaked[:3])
    # the answers are not importable from the edition's attn_lib, and check_prediction records a valid answer
    probe = ("from attn_lib.course.exercises.concepts import QUESTIONS, _load_all, check_prediction; _load_all(); "
             "print(len(QUESTIONS), {q.answer for q in QUESTIONS.values()}, bool(check_prediction('03.scale_by_dk', 'b')), "
             "bool(check_prediction('03.scale_by_dk', 'z')), bool(check_prediction('08.cache_length', 12)))")
    out = subprocess.run([sys.executable, "-c", probe], cwd=edition, env=dict(os.environ, PYTHONPATH=str(edition)),
                         capture_output=True, text=True, timeout=120)
    assert out.stdout.split() == [str(len(QUESTIONS)), "{None}", "True", "False", "True"], out.stderr[-2000:]


def test_links_inside_released_notebooks_resolve(course):
    """Each notebook sits in a folder of its own (nbgrader's layout): links to other notebooks and to the glossary
    must still open a file, in the release and in the student edition."""
    tmp, _ = course
    link = re.compile(r"\]\(([^)#\s]+\.(?:ipynb|md))(?:#[^)]*)?\)")
    checked = 0
    for top in (tmp / "release", tmp / "edition" / "notebooks"):
        for nb_path in sorted(top.glob("*/*.ipynb")):
            for cell in json.loads(nb_path.read_text())["cells"]:
                if cell["cell_type"] != "markdown":
                    continue
                for target in link.findall(_text(cell)):
                    if "://" in target:
                        continue
                    assert (nb_path.parent / target).resolve().is_file(), (nb_path.name, target)
                    checked += 1
    assert checked > 50


def _submission(tmp: Path, student: str, answers: dict[str, str], edit=None) -> None:
    nb = json.loads((tmp / "release" / NB / f"{NB}.ipynb").read_text())
    for cell in nb["cells"]:
        gid = cell["metadata"]["nbgrader"]["grade_id"]
        if gid in answers:
            cell["source"] = answers[gid]
    if edit:
        edit(nb)
    path = tmp / "submissions" / student / NB / f"{NB}.ipynb"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(nb))


def _edit_locked(nb):
    cells = nb["cells"]
    test = next(c for c in cells if c["metadata"]["nbgrader"]["grade_id"] == "check_attention_weights")
    test["source"] = "pass  # no check here"
    md = next(c for c in cells if c["cell_type"] == "markdown" and c["metadata"]["nbgrader"]["locked"])
    md["source"] = "I rewrote the introduction."
    victim = [c for c in cells if c["cell_type"] == "markdown"][-1]
    cells.remove(victim)
    nb["_deleted"] = victim["metadata"]["nbgrader"]["grade_id"]


# ---- attackers (issue 24): each attack in more than one form; a correct student is graded before and after them
ATTACK_GRADEBOOK = r'''
import os, sqlite3, glob
found = []
for top in ("/", "/dev/shm", "/tmp", "/work", "/root", "/home"):
    for dirpath, dirs, files in os.walk(top):
        if dirpath.startswith(("/proc", "/sys", "/usr")):
            dirs[:] = []
            continue
        for f in files:
            p = os.path.join(dirpath, f)
            if f == "gradebook.db":
                found.append(p)
                try:
                    db = sqlite3.connect(p); db.execute("UPDATE grade SET manual_score = 0, auto_score = 0"); db.commit()
                except Exception as e:
                    print("gradebook:", type(e).__name__)
            elif f.endswith(".ipynb") or f == "gradebook.csv":
                found.append(p)
                try:
                    open(p, "w").write("{}")
                except Exception as e:
                    print("overwrite:", type(e).__name__)
for pid in os.listdir("/proc"):  # the SUBMISSIONS folder from the parents' command lines
    try:
        found.append(open(f"/proc/{pid}/cmdline").read())
    except Exception:
        pass
print("FOUND", len(found), [f for f in found if "submissions" in f or "gradebook" in f or "class-test" in f])
'''
ATTACK_DAEMON = r'''
import os, subprocess, sys, time
marker = "/dev/shm/attn-issue24-marker"
if os.fork() == 0:                      # form 1: double fork, new session, keeps the inherited pipes open
    os.setsid()
    if os.fork() == 0:
        time.sleep(8)
        for p in (marker, "/tmp/attn-issue24-marker"):
            try: open(p, "w").write("forged")
            except Exception: pass
        time.sleep(600)
    os._exit(0)
subprocess.Popen(["/bin/sh", "-c", "sleep 600; echo forged > " + marker], start_new_session=True)  # form 2
'''
FRAME_READER = '''\
import inspect, torch
def attention_weights(query, key):
    frame = inspect.currentframe().f_back
    while frame is not None:                       # look for the check's expected value in the callers
        for v in list(frame.f_locals.values()):
            if isinstance(v, torch.Tensor) and v.shape == query.shape[:-1] + key.shape[-2:-1] and v is not query:
                return v
        frame = frame.f_back
    return torch.zeros(query.shape[:-1] + key.shape[-2:-1])
'''
PATCH_OBFUSCATED = '''\
import importlib, torch
def attention(query, key, value):
    return value
_m = vars(importlib.import_module("attn_lib" + ".course.exercises"))
_m["check_" + "attention"] = lambda fn: _m["CheckResult"]("x", True, "passed")
getattr(__import__("to" + "rch"), "all" + "close").__self__  # touch
vars(__import__("to" + "rch"))["all" + "close"] = lambda *a, **k: True
'''
TRANSFORMER = '''\
def _blank(lines):
    return [] if any("check_" in ln for ln in lines) else lines
get_ipython().input_transformers_cleanup.append(_blank)

def self_attention(x, w_q, w_k, w_v):
    return x
'''
PREDICT_IMPORT = '''\
try:
    from attn_lib.course.exercises.concepts import QUESTIONS, _load_all
    _load_all()
    answer = QUESTIONS["03.scale_by_dk"].answer      # form 1: import the answer
except Exception as e:
    print("import:", type(e).__name__, e)
    import re, attn_lib.course.exercises, os
    text = open(os.path.join(os.path.dirname(attn_lib.course.exercises.__file__), "predict_questions.py")).read()
    m = re.search(r'answer="(\\w)"', text)             # form 2: read it from the source file
    answer = m.group(1) if m else ...
'''
EXITS = "import os\nos._exit(3)\n"  # kills the notebook's process in its cell
IGNORES_SIGNALS = "import signal\nfor s in (signal.SIGINT, signal.SIGALRM, signal.SIGTERM):\n    signal.signal(s, signal.SIG_IGN)\nwhile True:\n    pass\n"
FLOOD = '''\
import os
print("<script>alert('stored')</script><img src=x onerror=alert(1)>")
print("x" * 50_000_000)                    # form 1: 50 MB through print
os.write(1, b"y" * 50_000_000)             # form 2: 50 MB straight to the file descriptor
'''
HIDDEN_SCRIPT_MD = "<script>alert('markdown')</script>"


def _add_cell_after(grade_id, source, cell_type="code"):
    def edit(nb):
        i = next(i for i, c in enumerate(nb["cells"]) if c["metadata"].get("nbgrader", {}).get("grade_id") == grade_id)
        cell = {"cell_type": cell_type, "metadata": {}, "source": source}
        if cell_type == "code":
            cell.update(outputs=[], execution_count=None)
        nb["cells"].insert(i + 1, cell)
    return edit


def _edits(*fns):
    def edit(nb):
        for f in fns:
            f(nb)
    return edit


def _sandbox_processes() -> list[int]:
    from classroom.sandbox import UID_BASE

    pids = []
    for pid in os.listdir("/proc"):
        try:
            uid = os.stat(f"/proc/{pid}").st_uid
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
        except (FileNotFoundError, ProcessLookupError, PermissionError, NotADirectoryError):
            continue
        if UID_BASE <= uid < UID_BASE + 4000 or b"attn-issue24-marker" in cmd:
            pids.append(int(pid))
    return pids


# ---- the CPU hog (issue 41 §4): 60 busy children, each in a session of its own, beside an honest classmate.
# It stops by itself: its children spin at most 60 s from the fork and never past an absolute time written into the
# submission (60 s after it is written), so the notebook graded again from the top (its own starved first cell runs
# past the hard time limit) adds only seconds; its waiting cells keep its sandbox, and so the children, alive while
# the classmates beside it are graded.
HOG_NAME = "attn-hog-41"  # the children's /proc/<pid>/comm: how the test finds them
HOG = '''\
import os, time
_until = min(time.time() + 60, {hard_end})
for _ in range(60):
    try:
        pid = os.fork()
    except OSError:                      # the sandbox's process limit
        break
    if pid == 0:
        try:
            os.setsid()                  # out of the notebook's session and process group
            with open("/proc/self/comm", "w") as f:
                f.write("{name}")
            while time.time() < _until:  # busy
                pass
        finally:
            os._exit(0)
'''
HOG_WAIT = "import time\ntime.sleep(max(0, min(20, _until - time.time())))\n"


def _add_cell_first(source):
    def edit(nb):  # before the notebook's first code cell
        i = next(i for i, c in enumerate(nb["cells"]) if c["cell_type"] == "code")
        nb["cells"].insert(i, {"cell_type": "code", "metadata": {}, "source": source, "outputs": [],
                               "execution_count": None})
    return edit


def _hog_processes() -> list[int]:
    pids = []
    for pid in os.listdir("/proc"):
        try:
            if pid.isdigit() and Path(f"/proc/{pid}/comm").read_text().strip() == HOG_NAME:
                pids.append(int(pid))
        except OSError:
            continue
    return pids


class HogWatch:
    """Samples the hog's children twice a second while autograde runs: how many are running, whether each leads a
    session of its own, the CPU each has used, and the cgroups (v1: cpu, memory, pids; v2: its one path) each was
    in when it was first seen running; ``timeline`` keeps (time, running, cgroup paths) for the report."""

    def __init__(self):
        import threading

        self.samples: list[tuple[float, int]] = []  # (time, children running)
        self.first: dict[int, dict[str, str]] = {}  # pid -> {controller ("" in v2): cgroup path} when first seen
        self.timeline: list[tuple[float, int, set]] = []
        self.own_session = True
        self.ticks: dict[int, int] = {}             # pid -> utime + stime, in clock ticks
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()

    def _run(self):
        while not self._stop.wait(0.5):
            running, paths = 0, set()
            for pid in _hog_processes():
                try:
                    stat = Path(f"/proc/{pid}/stat").read_text()
                    lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
                except OSError:
                    continue
                fields = stat[stat.rindex(")") + 2:].split()  # state, ppid, pgrp, session, ... utime (11), stime (12)
                self.ticks[pid] = max(self.ticks.get(pid, 0), int(fields[11]) + int(fields[12]))
                if fields[0] in "ZX":
                    continue
                running += 1
                self.own_session &= fields[3] == str(pid)
                groups = {}
                for line in lines:
                    _, controllers, path = line.split(":", 2)
                    for c in controllers.split(",") if controllers else ([""] if len(lines) == 1 else []):
                        if c in ("cpu", "memory", "pids", ""):
                            groups[c] = path
                self.first.setdefault(pid, groups)
                paths |= set(groups.values())
            self.samples.append((time.monotonic(), running))
            self.timeline.append((time.monotonic(), running, paths))


@pytest.fixture(scope="module")
def graded(course):
    tmp, assignments = course
    a = next(a for a in assignments if a.name == NB)
    solutions = {f"answer_{e.key}": e.solution for e in a.exercises}
    shutil.rmtree(tmp / "submissions", ignore_errors=True)
    _submission(tmp, "a_correct_first", solutions)
    _submission(tmp, "s2_wrong", {"answer_check_attention_weights": IMPORTS + NO_SCALE,
                                  "answer_check_attention": IMPORTS + SOLVED_ATTENTION,
                                  "answer_check_self_attention": IMPORTS + SCALE_D_MODEL})
    _submission(tmp, "s3_raises_loops", {"answer_check_attention_weights": RAISES,
                                         "answer_check_attention": LOOPS,
                                         "answer_check_self_attention": IMPORTS + SOLVED_SELF})
    deleted = {}

    def edit(nb):
        _edit_locked(nb)
        deleted["id"] = nb.pop("_deleted")

    _submission(tmp, "s4_edited_locked", {"answer_check_attention": IMPORTS + SOLVED_ATTENTION,
                                          "answer_check_self_attention": IMPORTS + SOLVED_SELF}, edit=edit)
    _submission(tmp, "s5_patched", {"answer_check_attention_weights": IMPORTS + PATCHED_CHECK,
                                    "answer_check_attention": IMPORTS + PATCHED_TORCH,
                                    "answer_check_self_attention": IMPORTS + SOLVED_SELF})
    (tmp / "submissions" / "s5_patched" / "notes.ipynb").write_text("{}")  # not a course notebook: ignored
    wrong = {"answer_check_attention_weights": IMPORTS + NO_SCALE, "answer_check_attention": IMPORTS + BIAS_BEFORE_SCALE,
             "answer_check_self_attention": IMPORTS + SCALE_D_MODEL}
    # x1: gradebook, classmates' notebooks, grades, parents' command lines; a daemon that outlives grading
    _submission(tmp, "x1_escape", wrong, edit=_edits(_add_cell_after("check_attention_weights", ATTACK_GRADEBOOK),
                                                     _add_cell_after("check_attention", ATTACK_DAEMON)))
    # x2: the expected value from the calling frame; obfuscated patches; an input transformer; the answer imported
    _submission(tmp, "x2_cheats", {P.replace("check_", "answer_check_", 1): PREDICT_IMPORT,
                                   "answer_check_attention_weights": FRAME_READER,
                                   "answer_check_attention": PATCH_OBFUSCATED,
                                   "answer_check_self_attention": IMPORTS + TRANSFORMER})
    # x3: right answers, but the process exits after exercise 1 and ignores every signal in a loop after exercise 2
    _submission(tmp, "x3_dies", solutions, edit=_edits(_add_cell_after("check_attention_weights", EXITS),
                                                       _add_cell_after("check_attention", IGNORES_SIGNALS)))
    # x4: 100 MB of output, script in its output and in a markdown cell
    _submission(tmp, "x4_flood", solutions, edit=_edits(_add_cell_after("check_attention", FLOOD),
                                                        _add_cell_after("check_attention", HIDDEN_SCRIPT_MD, "markdown")))
    # its own first cell waits 8 s (an honest, slow cell): its checks then run while the hog beside it spins at full
    # speed (the grader runs only the cells the checks need, so an honest notebook 03 takes 5-10 s to grade)
    _submission(tmp, "-z_correct_last é", solutions, edit=_add_cell_first("import time\ntime.sleep(8)\n"))
    # x5: the CPU hog; its name sorts first, so it is graded from the start beside "-z_correct_last é" (JOBS=2),
    # and the classmates after that one on the other job while it lasts
    hog = HOG.format(hard_end=round(time.time() + 60), name=HOG_NAME)
    _submission(tmp, "-x5_hog", solutions, edit=_edits(_add_cell_first(hog),
                                                      *[_add_cell_after(k, HOG_WAIT) for k in KEYS[:3]]))
    hostile_entries(tmp)
    victim = tmp / "submissions" / "a_correct_first" / NB / f"{NB}.ipynb"
    victim_bytes = victim.read_bytes()
    before_tmp = set(Path(tempfile.gettempdir()).iterdir())
    import classroom.autograde as ag

    original, spans = ag.grade_one_notebook, {}

    def timed(student, *args, **kwargs):  # when each student's grading ran, to set beside the hog's
        start = time.monotonic()
        try:
            return original(student, *args, **kwargs)
        finally:
            spans[student] = (start, time.monotonic())

    started = time.monotonic()
    ag.grade_one_notebook = timed
    try:
        with HogWatch() as watch:
            rows = autograde(tmp / "submissions", tmp / "course", tmp / "grades", student_timeout=600, jobs=2)
    finally:
        ag.grade_one_notebook = original
    print(f"autograde of {len(rows)} students: {time.monotonic() - started:.0f} s")
    with (tmp / "grades" / "gradebook.csv").open() as f:
        table = {uncell(r["student"]): r for r in csv.DictReader(f)}  # "'-z...": a formula-looking id, quoted
    time.sleep(9)  # the daemons' first write would come 8 s after they started
    left = [p for p in set(Path(tempfile.gettempdir()).iterdir()) - before_tmp if p.name.startswith("attn-")]
    return tmp, rows, table, deleted["id"], victim_bytes, left, (watch, spans)


DEEP_JSON = "[" * 100_000 + "]" * 100_000


def hostile_entries(tmp: Path) -> None:
    """Issue 41 §2-3 in SUBMISSIONS: none of these may stop the class or be read through a link; each is a line in
    summary.txt, and a notebook that is a link, a FIFO or unreadable JSON is that student's 0."""
    subs = tmp / "submissions"
    source = tmp / "course" / "source" / NB / f"{NB}.ipynb"  # the teacher's notebook, with the solutions
    (subs / "h_link" / NB).mkdir(parents=True)
    (subs / "h_link" / NB / f"{NB}.ipynb").symlink_to(source)
    (subs / "h_link" / "zeros.ipynb").symlink_to("/dev/zero")
    (subs / "h_fifo").mkdir()
    os.mkfifo(subs / "h_fifo" / f"{NB}.ipynb")
    nest(subs / "h_fifo", 1100)                                   # 1,100 nested folders
    (subs / "h_fifo" / os.fsdecode(b"bad\xff.ipynb")).write_text("{}")  # a file name that is not UTF-8
    (subs / os.fsdecode(b"\xff\xfe")).mkdir()                       # a folder name that is not UTF-8
    (subs / "h_folder_link").symlink_to(subs / "a_correct_first")  # a classmate's folder, through a link
    (subs / "h_dev").symlink_to("/dev/zero")
    (subs / "@A1").mkdir()                                         # a formula-looking id, and JSON nested 100,000 deep
    (subs / "@A1" / f"{NB}.ipynb").write_text(DEEP_JSON)
    for name in ("\ufb01ona", "fiona", "\u212aelly", "Kelly"):     # the "fi" ligature, the Kelvin sign
        (subs / name).mkdir()
        (subs / name / f"{NB}.ipynb").write_text(DEEP_JSON)


def test_hostile_entries_are_one_students_error_each(graded):
    tmp, rows, table, *_ = graded
    for student in ("h_link", "h_fifo", "@A1"):
        assert (table[student]["total"], table[student]["failed"]) == ("0", ";".join(KEYS)), student
        assert "could not grade" in table[student]["flags"]
    assert "not a regular file" in table["h_link"]["flags"] and "RecursionError" in table["@A1"]["flags"]
    assert not {"h_folder_link", "h_dev", "fiona", "\ufb01ona", "Kelly", "\u212aelly"} & set(table)
    summary = (tmp / "grades" / "summary.txt").read_text(encoding="utf-8")
    for line in (f"h_link: h_link/{NB}/{NB}.ipynb is a symbolic link; refused", "h_link: h_link/zeros.ipynb is a "
                 "symbolic link", f"h_fifo: h_fifo/{NB}.ipynb is a FIFO", "is more than 12 folders deep",
                 "'h_folder_link' in SUBMISSIONS is a symbolic link", "'h_dev' in SUBMISSIONS is a symbolic link",
                 "folder '\\xff\\xfe' is not a valid student id", "h_fifo/bad\\xff.ipynb is not a course notebook",
                 "folders 'fiona' and '\ufb01ona' name the same student", "'Kelly' and '\u212aelly'"):
        assert line in summary, (line, summary)
    assert (tmp / "grades" / "canvas.csv").read_text().count("'@A1") == 2  # Student and SIS Login ID, as text
    assert "BEGIN SOLUTION" not in "".join(p.read_text() for p in (tmp / "grades" / "feedback").rglob("*.html"))


def test_gradebook_header(graded):
    tmp = graded[0]
    header = (tmp / "grades" / "gradebook.csv").read_text().splitlines()[0]
    assert header == "student,notebook," + ",".join(KEYS) + ",total,max_total,failed,flags"


@pytest.mark.parametrize("student, points, flags", [
    ("a_correct_first", [1, 1, 1, 1], []),
    ("-z_correct_last é", [1, 1, 1, 1], []),
    ("s2_wrong", [0, 0, 1, 0], []),
    ("s3_raises_loops", [0, 0, 0, 1], ["ran past the time limit"]),
    ("s4_edited_locked", [0, 0, 1, 1], ["locked cell check_attention_weights edited", "locked cell locked_", "deleted"]),
    ("s5_patched", [0, 0, 0, 1], ["own code assigns into attn_lib", "own code assigns into torch/math/numpy"]),
    ("x1_escape", [0, 0, 0, 0], []),
    ("x2_cheats", [0, 0, 0, 0], []),
    ("x3_dies", [1, 1, 1, 1], ["stopped the notebook's process; graded again without it",
                               "ran past the hard time limit; graded again without it"]),
    ("x4_flood", [1, 1, 1, 1], []),
])
def test_gradebook_cell_by_cell(graded, student, points, flags):
    _, _, table, deleted, *_ = graded
    row = table[student]
    assert row["notebook"] == NB
    points = [p * w for p, w in zip(points, WEIGHTS)]  # passed (1) or not (0), times the check's weight
    assert [int(row[k]) for k in KEYS] == points, row
    assert (int(row["total"]), int(row["max_total"])) == (sum(points), MAX)
    assert row["failed"] == ";".join(k for k, p in zip(KEYS, points) if not p)
    if student.startswith(("a_", "-z")):
        assert row["flags"] == ""
    for flag in flags:
        assert flag in row["flags"], (flag, row["flags"])
    if student == "s4_edited_locked":
        assert f"locked cell {deleted} deleted" in row["flags"]


def test_per_student_summary_and_canvas_export(graded):
    """grades/students.csv: one row per student (totals, per notebook, flags); grades/canvas.csv: Canvas's import
    columns, a Points Possible row, the same points."""
    tmp, _, table, *_ = graded
    with (tmp / "grades" / "students.csv").open() as f:
        students = {uncell(r["student"]): r for r in csv.DictReader(f)}
    assert set(students) == set(table)
    assert "'-z_correct_last é" in (tmp / "grades" / "canvas.csv").read_text()  # a spreadsheet reads it as text
    for name, row in table.items():
        s = students[name]
        assert (s["total"], s["max_total"], s[NB]) == (row["total"], str(MAX), row["total"])
        assert s["percent"] == f"{100 * int(row['total']) / MAX:.1f}" and s["missing"] == ""
        assert all(f"{NB}: {flag}" in s["flags"] for flag in row["flags"].split(";") if flag)
    lines = (tmp / "grades" / "canvas.csv").read_text().splitlines()
    canvas = list(csv.reader(lines))
    assert canvas[0] == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", f"{NB} (attention course)"]
    assert canvas[1] == ["Points Possible", "", "", "", "", str(MAX)]
    assert {uncell(r[3]): r[5] for r in canvas[2:]} == {name: row["total"] for name, row in table.items()}


def test_canvas_export_matches_a_canvas_roster(tmp_path):
    from classroom.gradebook import write_reports

    (tmp_path / "gradebook.csv").write_text(
        "student,notebook,check_a,total,max_total,failed,flags\n"
        f"ann,{NB},1,1,2,check_b,\nann,00_welcome,2,2,2,,\nbob,{NB},2,2,2,,locked cell x edited\nzed,{NB},0,0,2,,\n")
    roster = tmp_path / "export.csv"
    roster.write_text("Student,ID,SIS User ID,SIS Login ID,Section,Quiz 1 (12)\n"
                      "    Points Possible,,,,,10\n"
                      "\"Lee, Ann\",101,S1,ann,Lab A,7\n\"Berg, Bob\",102,S2,bob,Lab B,9\n")
    problems = write_reports(tmp_path, roster)
    assert problems == [f"zed: not in the Canvas roster {roster}; left out of canvas.csv"]
    rows = list(csv.reader((tmp_path / "canvas.csv").read_text().splitlines()))
    assert rows[0][5:] == [f"00_welcome (attention course)", f"{NB} (attention course)"]
    assert rows[1][5:] == ["2", "2"]
    assert rows[2:] == [["Lee, Ann", "101", "S1", "ann", "Lab A", "2", "1"], ["Berg, Bob", "102", "S2", "bob", "Lab B", "", "2"]]
    with (tmp_path / "students.csv").open() as f:
        students = {r["student"]: r for r in csv.DictReader(f)}
    assert students["bob"]["missing"] == "00_welcome" and students["bob"]["total"] == "2"
    assert students["bob"]["flags"] == f"{NB}: locked cell x edited" and students["ann"]["total"] == "3"
    bad = tmp_path / "bad.csv"
    bad.write_text("name,score\n")
    with pytest.raises(ValueError, match="missing"):
        write_reports(tmp_path, bad)


def test_gradebook_db_has_the_grader_scores(graded):
    tmp, rows, *_ = graded
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{tmp / 'course' / 'gradebook.db'}") as gb:
        for r in rows:
            for gid in KEYS:
                g = gb.find_grade(gid, NB, NB, r.student)
                assert g.manual_score is None and g.auto_score == r.points[gid], (r.student, gid)


def test_attackers_reach_nothing_and_leave_nothing(graded):
    tmp, rows, table, _, victim_bytes, *_ = graded
    assert (tmp / "submissions" / "a_correct_first" / NB / f"{NB}.ipynb").read_bytes() == victim_bytes
    page = (tmp / "grades" / "feedback" / "x1_escape" / "index.html").read_text()
    found = re.search(r"FOUND (\d+) \[(.*?)\]", html_unescape(page))
    assert found and found.group(2) == "", found and found.group(2)  # no gradebook, no submission, no course dir
    assert not Path("/dev/shm/attn-issue24-marker").exists() and not Path("/tmp/attn-issue24-marker").exists()
    assert _sandbox_processes() == []
    assert graded[5] == []  # the grader's own temporary folders are gone too


def test_cpu_hog_is_held_to_its_sandbox_and_the_classmate_beside_it_keeps_full_points(graded):
    """Issue 41 §4: x5's 60 busy children, each in a session of its own, ran while the honest "-z_correct_last é"
    was graded beside it (JOBS=2); each was in its sandbox's cgroup (cpu, memory and pids alike), under its quota
    of one core; the honest classmates kept full points and no time-out flag; nothing of the hog is left."""
    from classroom.sandbox import Cgroup

    tmp, rows, table, *_, (watch, spans) = graded
    if Cgroup.mode() is None:
        pytest.skip("no writable cgroups here: autograde grades one submission at a time (test_sandbox_is_one_cgroup)")
    most = max(n for _, n in watch.samples)
    assert most >= 50, most  # 60 asked; the sandbox's limit of 64 processes holds the rest
    assert watch.own_session
    start, end = spans["-z_correct_last é"]
    assert spans["-x5_hog"][0] < start + 5  # graded from the start, side by side
    during = [n for t, n in watch.samples if start <= t <= end]
    share = sum(n >= 50 for n in during) / len(during)
    t0 = spans["-x5_hog"][0]
    print(f"\nhog: {most} children; -z_correct_last é graded in {end - start:.0f} s beside it, the hog spinning in "
          f"{100 * share:.0f} % of that; the hog graded in {spans['-x5_hog'][1] - t0:.0f} s; flags "
          f"{table['-x5_hog']['flags']!r}; timeline (s, running, cgroups): "
          f"{[(round(t - t0), n, sorted(g)) for t, n, g in watch.timeline[::10]]}")
    # its checks, after its 8-second cell, beside the spinning hog: at least 2 s of samples, its end among them
    assert during[-1] >= 50 and sum(n >= 50 for n in during) >= 4, (share, during)
    # every child, when first seen running, was in its sandbox's cgroup in each hierarchy (v1) or in v2
    for pid, groups in watch.first.items():
        assert set(groups) in ({"cpu", "memory", "pids"}, {"cpu", "memory"}, {""}), (pid, groups)
        assert len(set(groups.values())) == 1, (pid, groups)
        assert re.fullmatch(r"/attn-sandbox-\d+-\d+", next(iter(groups.values()))), (pid, groups)
    # under one core: the CPU its children used is at most the time they ran (plus a sampling interval)
    spinning = [t for t, n in watch.samples if n]
    used = sum(watch.ticks.values()) / os.sysconf("SC_CLK_TCK")
    ran = spinning[-1] - spinning[0] + 1.5
    print(f"hog's children: {used:.1f} CPU seconds in {ran:.0f} s, sandboxes "
          f"{sorted({g for groups in watch.first.values() for g in groups.values()})}")
    assert used <= 1.1 * ran + 1, (used, ran)
    for honest in ("-z_correct_last é", "a_correct_first"):
        assert (int(table[honest]["total"]), table[honest]["flags"]) == (MAX, ""), table[honest]
    assert _hog_processes() == []
    assert not list(Path("/sys/fs/cgroup").glob("*/attn-sandbox-*")) + list(Path("/sys/fs/cgroup").glob("attn-sandbox-*"))

def html_unescape(s):
    import html

    return html.unescape(s)


def test_feedback_is_escaped_capped_and_names_the_hint(graded):
    tmp = graded[0]
    page = (tmp / "grades" / "feedback" / "s2_wrong" / "index.html").read_text()
    assert f"check_attention_weights</td><td>0 / {source.IMPLEMENTATION_POINTS}" in page
    assert "missing 1/sqrt(d_k) scale" in page and "1/sqrt(d_model)" in page
    x1 = (tmp / "grades" / "feedback" / "x1_escape" / "index.html").read_text()  # exercise 2's bias, scaled too
    assert f"check_attention</td><td>0 / {source.IMPLEMENTATION_POINTS}" in x1 and "you added the bias before scaling" in x1
    s3 = (tmp / "grades" / "feedback" / "s3_raises_loops" / "index.html").read_text()
    assert "I give up" in s3
    flood = tmp / "grades" / "feedback" / "x4_flood" / "index.html"
    assert flood.stat().st_size < 300_000
    text = flood.read_text()
    assert "<script>alert" not in text and "<img src=x" not in text and "&lt;script&gt;alert(&#x27;stored" in text
    for f in (tmp / "grades" / "feedback").rglob("*.html"):
        t = f.read_text()
        assert "HIDDEN" not in t and "<script" not in t
        others = [r.student for r in graded[1] if r.student != f.parent.name and len(r.student) > 3]
        assert not any(f"Feedback for {o}<" in t for o in others)


def test_predictions_graded_on_completion_without_the_answers(graded):
    page = html_unescape((graded[0] / "grades" / "feedback" / "x2_cheats" / "index.html").read_text())
    assert "import: KeyError" in page  # the answers are not importable in the sandbox ...
    assert "not answered" in page      # ... nor readable from the file: nothing to copy
    assert "counts when answered" in html_unescape(
        (graded[0] / "grades" / "feedback" / "a_correct_first" / "index.html").read_text())


def test_regrade_resumes_and_never_keeps_stale_points(graded):
    tmp, rows, *_ = graded
    (tmp / "submissions" / "-z_correct_last é" / NB / f"{NB}.ipynb").write_text('{"cells": 3')  # cannot be graded
    started = time.monotonic()
    rows2 = autograde(tmp / "submissions", tmp / "course", tmp / "grades", student_timeout=600, jobs=2)
    took = time.monotonic() - started
    assert took < 30, f"the unchanged submissions were graded again ({took:.0f} s)"
    row = next(r for r in rows2 if r.student == "-z_correct_last é")
    assert row.total == 0 and any(f.startswith("could not grade") for f in row.flags)
    assert "could not grade -z_correct_last é" in (tmp / "grades" / "summary.txt").read_text()
    assert next(r for r in rows2 if r.student == "a_correct_first").total == MAX
    # issue 41 §3: a resubmission that cannot be read, or is a link, takes the earlier points away everywhere
    x4 = tmp / "submissions" / "x4_flood" / NB / f"{NB}.ipynb"
    x4.write_text(DEEP_JSON)
    x3 = tmp / "submissions" / "x3_dies" / NB / f"{NB}.ipynb"
    x3.unlink()
    x3.symlink_to(tmp / "submissions" / "a_correct_first" / NB / f"{NB}.ipynb")
    rows3 = autograde(tmp / "submissions", tmp / "course", tmp / "grades", student_timeout=600, jobs=2)
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{tmp / 'course' / 'gradebook.db'}") as gb:
        for student in ("x4_flood", "x3_dies"):
            assert next(r for r in rows3 if r.student == student).total == 0
            assert [gb.find_grade(k, NB, NB, student).auto_score for k in KEYS] == [0] * len(KEYS)


def test_sandbox_holds_when_the_teacher_is_not_root(course):
    """The grader run by an unprivileged account (as a teacher without root runs it; setpriv to uid 65534): each
    sandbox is then a user namespace. A correct student keeps full marks; the escaping attacker (x1) finds no
    gradebook, no submission and no course folder, and nothing of it outlives the run."""
    import subprocess
    import sys

    from hub.course_hub import blocked_dirs

    if os.geteuid() != 0:
        pytest.skip("needs root to switch to an unprivileged uid (CI runs as root)")
    tmp, assignments = course
    a = next(a for a in assignments if a.name == NB)
    solutions = {f"answer_{e.key}": e.solution for e in a.exercises}
    work = Path(tempfile.mkdtemp(prefix="attn-unpriv-"))
    opened = []
    try:
        os.chmod(work, 0o755)
        shutil.copytree(tmp / "course", work / "course")
        shutil.copytree(tmp / "release", work / "release")
        _submission(work, "u_correct", solutions)
        _submission(work, "u_x1_escape", {"answer_check_attention": "def attention(q, k, v):\n    return v\n"},
                    edit=_edits(_add_cell_after("check_attention_weights", ATTACK_GRADEBOOK),
                                _add_cell_after("check_attention", ATTACK_DAEMON)))
        subprocess.run(["chown", "-R", "65534:65534", str(work)], check=True)
        for d in blocked_dirs([os.path.realpath(sys.executable), sys.prefix, ROOT]):  # a Python under /root
            opened.append((d, d.stat().st_mode))
            os.chmod(d, d.stat().st_mode | 0o001)
        env = {"PATH": "/usr/bin:/bin", "HOME": str(work), "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1",
               "LANG": "C.UTF-8", "ATTN_CELL_TIMEOUT": os.environ.get("ATTN_CELL_TIMEOUT", "30")}
        r = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable, "-m",
                            "classroom.autograde", str(work / "submissions"), "--course-dir", str(work / "course"),
                            "--out", str(work / "grades"), "--jobs", "2"], env=env, capture_output=True, text=True,
                           timeout=600)
        assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
        with (work / "grades" / "gradebook.csv").open() as f:
            table = {row["student"]: row for row in csv.DictReader(f)}
        assert (table["u_correct"]["total"], table["u_correct"]["flags"]) == (str(MAX), "")
        assert table["u_x1_escape"]["total"] == "0"
        page = html_unescape((work / "grades" / "feedback" / "u_x1_escape" / "index.html").read_text())
        found = re.search(r"FOUND (\d+) \[(.*?)\]", page)
        assert found and found.group(2) == "", found and found.group(2)
        time.sleep(3)  # the daemon started in cell 5, its first write is 8 s later: the cells after it take longer
        assert not Path("/dev/shm/attn-issue24-marker").exists() and not Path("/tmp/attn-issue24-marker").exists()
        left = [p.pid for p in __import__("psutil").process_iter(["uids"]) if p.info["uids"] and p.info["uids"].real == 65534]
        assert left == [], left
    finally:
        for d, mode in reversed(opened):
            os.chmod(d, mode)
        shutil.rmtree(work, ignore_errors=True)


def test_student_ids_are_distinct_and_errors_are_listed(tmp_path):
    from classroom.autograde import find_submissions

    names = ["john smith", "john_smith", "José", "Zoë", "-dash", "...", ".hidden", "Alice", "alice", "two"]
    for n in names:
        (tmp_path / n).mkdir()
        (tmp_path / n / f"{NB}.ipynb").write_text("{}")
    (tmp_path / "two" / NB).mkdir()
    (tmp_path / "two" / NB / f"{NB}.ipynb").write_text("{}")
    found, errors, _ = find_submissions(tmp_path, {NB})
    assert {"john smith", "john_smith", "José", "Zoë", "-dash", "two"} <= set(found)
    assert "Alice" not in found and "alice" not in found
    assert found["two"][NB] == "two copies of this notebook in the student's folder"
    text = "\n".join(errors)
    for n in ("'...'", "'.hidden'", "'Alice' and 'alice'", "two: 2 copies"):
        assert n in text, (n, text)


# ---- issue 41: a hostile class. Symbolic links, FIFOs, devices, deep folders, bad names: one student's error each.
def _collect(tmp: Path, assignment: str):
    """nbgrader collect with the hub's OwnerCheckedCollect over the exchange in tmp; (collected students, log)."""
    import logging

    from nbgrader.auth import Authenticator
    from nbgrader.coursedir import CourseDirectory
    from traitlets.config import Config

    from classroom.config import _alembic_on_path
    from classroom.exchange import OwnerCheckedCollect

    _alembic_on_path()  # nbgrader creates the gradebook with alembic
    c = Config()
    c.CourseDirectory.root = str(tmp / "course")
    c.CourseDirectory.course_id = "attn"
    c.CourseDirectory.assignment_id = assignment
    c.Exchange.root = str(tmp / "exchange")
    coursedir = CourseDirectory(config=c)
    collect = OwnerCheckedCollect(coursedir=coursedir, authenticator=Authenticator(config=c), config=c)
    lines = []

    class Keep(logging.Handler):
        def emit(self, record):
            lines.append(record.getMessage())

    collect.log.addHandler(Keep())
    collect.start()
    submitted = tmp / "course" / "submitted"
    return sorted(p.name for p in submitted.iterdir()) if submitted.is_dir() else [], "\n".join(lines)


def test_collect_never_follows_a_link_and_one_bad_entry_never_stops_the_class(tmp_path):
    """Issue 41 §2-3 on the hub's exchange: real accounts (daemon, bin, sys, nobody) own their inbound folders.
    bin's own folder holds a link to the teacher's source notebook and to /dev/zero; a link named after daemon's
    submission points at a folder daemon owns; sys leaves a malformed timestamp, a dangling link, a FIFO and a plain
    file named like submissions; nobody nests 1,100 folders. Every such entry is a REFUSED line; daemon, bin and
    nobody are collected, with no solution, no zeros and no link in the course folder."""
    if os.geteuid() != 0:
        pytest.skip("needs root to own folders as the students' accounts (CI runs as root)")
    ids = {n: __import__("pwd").getpwnam(n).pw_uid for n in ("daemon", "bin", "sys", "nobody")}
    (tmp_path / "course" / "source" / NB).mkdir(parents=True)
    secret = tmp_path / "course" / "source" / NB / f"{NB}.ipynb"
    secret.write_text('{"cells": [], "SOLUTION": "### BEGIN SOLUTION"}')
    inbound = tmp_path / "exchange" / "attn" / "inbound"
    inbound.mkdir(parents=True)
    os.chmod(inbound, 0o1733)

    def folder(name, owner, ts="2026-12-03 10:00:00.000000 UTC", files=None):
        d = inbound / f"{name}+{NB}+{ts}+r{len(list(inbound.iterdir()))}"
        d.mkdir()
        (d / "timestamp.txt").write_text(ts)
        for f, text in (files or {f"{NB}.ipynb": '{"cells": []}'}).items():
            (d / f).write_text(text)
        for p in [d, *d.rglob("*")]:
            os.lchown(p, ids[owner], ids[owner])
        return d

    honest = folder("daemon", "daemon")
    own = folder("bin", "bin", files={"notes.txt": "mine"})
    (own / f"{NB}.ipynb").symlink_to(secret)               # the teacher's source notebook, through a link
    (own / "zeros").symlink_to("/dev/zero")                 # a device, through a link
    (own / "sub").mkdir()
    (own / "sub" / "source").symlink_to(secret.parent)      # a folder, through a link
    for p in (own / f"{NB}.ipynb", own / "zeros", own / "sub", own / "sub" / "source"):
        os.lchown(p, ids["bin"], ids["bin"])
    later = "2026-12-03 11:00:00.000000 UTC"
    victim_link = inbound / f"daemon+{NB}+{later}+evil"    # named after daemon, newer, pointing at daemon's folder
    victim_link.symlink_to(honest)
    os.lchown(victim_link, ids["bin"], ids["bin"])
    folder("daemon", "bin", ts="2026-12-03 12:00:00.000000 UTC")  # a real folder in daemon's name, bin's
    folder("sys", "sys", ts="not-a-time")                   # a malformed timestamp
    (inbound / f"sys+{NB}+{later}+dangling").symlink_to(tmp_path / "nowhere")
    os.mkfifo(inbound / f"sys+{NB}+{later}+fifo")
    (inbound / f"sys+{NB}+{later}+file").write_text("{}")
    for p in inbound.glob("sys+*"):
        os.lchown(p, ids["sys"], ids["sys"])
    deep = folder("nobody", "nobody")
    nest(deep, 1100)
    subprocess_run(["chown", "-R", f"{ids['nobody']}:{ids['nobody']}", str(deep)])

    started = time.monotonic()
    collected, log = _collect(tmp_path, NB)
    assert time.monotonic() - started < 30
    assert collected == ["bin", "daemon", "nobody"], log
    sub = tmp_path / "course" / "submitted"
    assert (sub / "daemon" / NB / f"{NB}.ipynb").read_text() == '{"cells": []}'   # not replaced by the link
    assert (sub / "bin" / NB / "notes.txt").read_text() == "mine"
    copied = [p for p in (tmp_path / "course" / "submitted").rglob("*")]
    assert not any(p.is_symlink() for p in copied)
    assert not any("BEGIN SOLUTION" in p.read_text() for p in copied if p.is_file())
    assert sum(p.stat().st_size for p in copied if p.is_file()) < 10_000
    for refused in (f"{NB}.ipynb': a symbolic link", "zeros': a symbolic link", "sub/source': a symbolic link",
                    "evil': it is a symbolic link", "but its owner is 'bin'", "not-a-time", "dangling': it is a "
                    "symbolic link", "fifo': it is a FIFO", "file': it is a file", "more than 12 folders deep"):
        assert refused in log, (refused, log)
    assert log.count("REFUSED") >= 10
    subprocess_run(["rm", "-rf", str(tmp_path / "exchange"), str(tmp_path / "course")])


def subprocess_run(cmd):
    import subprocess

    subprocess.run(cmd, check=True)


def nest(top: Path, n: int) -> None:
    """n folders, each inside the last (deeper than Python's recursion limit), a file at the bottom."""
    fd = os.open(top, os.O_RDONLY)
    for _ in range(n):
        os.mkdir("d", dir_fd=fd)
        inner = os.open("d", os.O_RDONLY, dir_fd=fd)
        os.close(fd)
        fd = inner
    os.close(os.open("x.txt", os.O_CREAT | os.O_WRONLY, dir_fd=fd))
    os.close(fd)


# Issue 41 §1: the course's own solutions, submitted as an honest student fills in the release (the stub, then the
# solution; a prediction answered with the registry's answer), graded through the autograde path, get full points.
# Every notebook, by default: a subset let three honest solutions lose points unseen (05's given split_heads, 11's
# keyword argument, 14's hinted tiled_attention). Since grading reuses one grade process per job, all of them take
# about 100 s with jobs=2 on the 2-core machine (2026-12-03); ATTN_CLASS_SOLUTIONS_SUBSET=1 grades 00 and 10 only.
SOLUTION_SUBSET = ("00_welcome", "10_capstone_decoder")


def test_every_solution_notebook_gets_full_points(course, monkeypatch):
    tmp, assignments = course
    monkeypatch.setenv("ATTN_CELL_TIMEOUT", "120")  # the course's own limit: notebook 10 trains for 30-60 s
    every = os.environ.get("ATTN_CLASS_SOLUTIONS_SUBSET") != "1"
    chosen = [a for a in assignments if every or a.name in SOLUTION_SUBSET]
    assert len(chosen) == (len(assignments) if every else len(SOLUTION_SUBSET))
    subs = tmp / "honest-submissions"
    for a in chosen:
        nb = json.loads((tmp / "release" / a.name / f"{a.name}.ipynb").read_text())
        answers = {f"answer_{e.key}": f"{e.stub}\n{e.solution or source._registry_solution(e.checks[0], e.stub)}"
                   for e in a.exercises}
        for c in nb["cells"]:
            gid = c["metadata"]["nbgrader"]["grade_id"]
            if gid in answers:
                c["source"] = answers[gid]
        path = subs / "honest" / a.name / f"{a.name}.ipynb"
        path.parent.mkdir(parents=True)
        path.write_text(json.dumps(nb))
    started = time.monotonic()
    rows = autograde(subs, tmp / "course", tmp / "honest-grades", student_timeout=600, jobs=2)
    print(f"{len(rows)} solution notebooks graded in {time.monotonic() - started:.0f} s")
    assert sorted(r.notebook for r in rows) == sorted(a.name for a in chosen)
    for r in rows:
        assert (r.total, r.flags) == (sum(r.max_points.values()), []), (r.notebook, r.flags,
                                                                        {k: r.messages.get(k) for k in r.failed})


# ---- issue 41 §4-5: resources per sandbox, no bomb in the grader, nothing outlives it, the grader's own records
def test_wire_refuses_compressed_entries():
    """A 50 MB array compressed into a message of a few kB: refused before numpy inflates it."""
    import io

    import numpy as np

    from classroom import wire

    buf = io.BytesIO()
    np.savez_compressed(buf, meta=np.frombuffer(b'{"ev": "done"}', dtype=np.uint8), a0=np.zeros(50_000_000, np.uint8))
    body = buf.getvalue()
    assert len(body) < 200_000
    with pytest.raises(wire.WireError, match="compressed"):
        wire.unpack(body)
    meta, arrays = wire.unpack(wire.pack({"ev": "done"}, [np.arange(3)])[8:])  # what the runner sends: stored
    assert meta == {"ev": "done"} and arrays["a0"].tolist() == [0, 1, 2]


FORKS = '''\
import os, time
for _ in range(6):
    if os.fork() == 0:
        os.setsid()
        time.sleep(20)
        os._exit(0)
time.sleep(15)                  # the sandbox ends with its notebook: it stays while the test counts
'''


def test_sandbox_is_one_cgroup(course, tmp_path, monkeypatch, capsys):
    """Every process of a sandbox is in one cgroup with a CPU quota of one core and one memory limit; the cgroup
    is gone with the sandbox. Where there are none, autograde grades one submission at a time and says so."""
    from classroom import sandbox

    if sandbox.Cgroup.mode() is None:
        pytest.skip("no writable cgroups on this machine (autograde falls back to one job; checked below)")
    lib = sandbox.library_dir(Path(tempfile.mkdtemp(prefix="attn-cgroup-")))
    box = sandbox.Sandbox(lib)
    try:
        cg = box.cgroup
        assert cg is not None and box.proc.pid in cg.pids()
        # a cell that forks 6 children, each in a session of its own (the CPU hog of issue 41, asleep here):
        # every one of them is in the sandbox's cgroup, under its one quota
        box.send({"cells": [{"kind": "code", "grade_id": None, "source": FORKS}], "skip": [], "serve": [],
                  "cell_timeout": 30})
        assert box.receive(timeout=120)[0]["ev"] == "ready" and box.receive(timeout=30)[0]["ev"] == "start"
        deadline, most = time.monotonic() + 20, 0
        while time.monotonic() < deadline and most < 8:
            most = max(most, len(cg.pids()))
            time.sleep(0.2)
        assert most >= 8, most  # bwrap, the runner, its 6 children (and bwrap's init in the PID namespace)
        files = {f.name: f.read_text().split() for d in cg.dirs for f in d.iterdir()
                 if f.name in ("cpu.max", "cpu.cfs_quota_us", "memory.max", "memory.limit_in_bytes", "pids.max")}
        quota = files.get("cpu.max", files.get("cpu.cfs_quota_us"))[0]
        memory = int(files.get("memory.max", files.get("memory.limit_in_bytes"))[0])
        assert quota == "100000" and abs(memory - box.limits.memory_bytes) < 1 << 20, files
    finally:
        box.kill()
        shutil.rmtree(lib.parent, ignore_errors=True)
    assert not any(d.exists() for d in cg.dirs)
    monkeypatch.setattr(sandbox.Cgroup, "mode", staticmethod(lambda: None))
    (tmp_path / "empty").mkdir()
    tmp, _ = course
    autograde(tmp_path / "empty", tmp / "course", tmp_path / "grades", jobs=2)
    assert "grading one submission at a time (JOBS=2 asked)" in capsys.readouterr().err


MEMORY_HOG = '''\
import os, time
kids = []
for _ in range(3):                      # each child alone stays under the per-process limit (RLIMIT_AS)
    pid = os.fork()
    if pid == 0:
        try:
            block = b"x" * (800 << 20)  # written, so resident
            time.sleep(4)               # held while the others fill theirs
            os._exit(0)
        except MemoryError:
            os._exit(3)
        finally:
            os._exit(4)
    kids.append(pid)
print("statuses", [os.waitpid(p, 0)[1] for p in kids])
'''


def test_sandbox_memory_is_limited_as_a_whole(tmp_path):
    """Issue 41 §4: three children of one cell each fill 800 MB, each under the sandbox's limit of 2 GiB per
    process but 2.4 GB together: the sandbox's one memory limit stops them (the kernel kills one in the cgroup),
    where a limit per process (RLIMIT_AS) alone let three children hold 10.5 GB."""
    from classroom import sandbox

    if sandbox.Cgroup.mode() is None:
        pytest.skip("no writable cgroups on this machine (autograde grades one submission at a time)")
    lib = sandbox.library_dir(tmp_path)
    box = sandbox.Sandbox(lib, limits=sandbox.Limits(memory_bytes=2 * 1024 ** 3))
    try:
        cg = box.cgroup
        box.send({"cells": [{"kind": "code", "grade_id": None, "source": MEMORY_HOG}], "skip": [], "serve": [],
                  "cell_timeout": 60})
        assert box.receive(timeout=120)[0]["ev"] == "ready" and box.receive(timeout=30)[0]["ev"] == "start"
        try:
            record = box.receive(timeout=90)[0]
            output = record.get("output", "")
        except Exception as e:  # noqa: BLE001 - the kernel may choose the notebook's own process
            output = f"the notebook's process stopped ({type(e).__name__})"
        mem = next((d for d in cg.dirs if (d / "memory.limit_in_bytes").exists() or (d / "memory.max").exists()))
        if (mem / "memory.max_usage_in_bytes").exists():
            peak = int((mem / "memory.max_usage_in_bytes").read_text())
            killed = int((mem / "memory.oom_control").read_text().split("oom_kill ")[1].split()[0])
        else:
            peak = int((mem / "memory.peak").read_text()) if (mem / "memory.peak").exists() else 0
            killed = int((mem / "memory.events").read_text().split("oom_kill ")[1].split()[0])
    finally:
        box.kill()
    print(f"\n{output.strip()}; peak {peak / 1024 ** 3:.2f} GiB, {killed} killed by the sandbox's limit")
    assert killed >= 1 and peak <= 2 * 1024 ** 3, (killed, peak, output)
    assert "statuses [0, 0, 0]" not in output


def _descends_from(pid: int, ancestor: int) -> bool:
    for _ in range(64):
        if pid == ancestor:
            return True
        try:
            pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])  # the parent's pid
        except (FileNotFoundError, ProcessLookupError, PermissionError, IndexError, ValueError):
            return False
        if pid <= 1:
            return False
    return False


def _grader_processes(under: int | None = None) -> list[int]:
    """This checkout's grade processes and sandboxes (their command line names classroom.grade or classroom.runner,
    and their command line or environment this checkout); with ``under``, only those that descend from that pid."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
            if b"classroom.grade\0" not in cmd and b"classroom.runner" not in cmd:
                continue
            where = cmd + Path(f"/proc/{pid}/environ").read_bytes()
        except (FileNotFoundError, ProcessLookupError, PermissionError, NotADirectoryError):
            continue
        if str(ROOT).encode() in where and (under is None or _descends_from(int(pid), under)):
            found.append(int(pid))
    return found


def _as_at_a_terminal():
    """In the child, before exec: Ctrl-C and kill behave as for a command typed at a terminal. A shell without job
    control starts background commands with SIGINT ignored, and the ignoring is inherited through make and pytest
    (CI started that way: the autograde under test then never saw the Ctrl-C, issue 41)."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


@pytest.mark.parametrize("how", ["kill -9", "Ctrl-C", "kill"])
def test_killed_grader_leaves_nothing(course, tmp_path, how):
    """A notebook that sleeps in a cell; the autograde process is killed (SIGKILL), interrupted (SIGINT) or
    terminated (SIGTERM) while its sandbox runs: no grade process and no sandbox is left, nothing is recorded for the
    stopped student, and a stop (not kill -9) exits 130 saying so."""
    import signal
    import subprocess
    import sys

    tmp, _ = course
    shutil.copytree(tmp / "course", tmp_path / "course")
    shutil.copytree(tmp / "release", tmp_path / "release")
    _submission(tmp_path, "k_sleeper", {}, edit=_add_cell_after("check_attention_weights", "import time\ntime.sleep(600)"))
    env = dict(os.environ, ATTN_CELL_TIMEOUT="600")
    log = tmp_path / "autograde.log"  # a file, not a pipe nobody reads: a full pipe would block autograde's writes
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "classroom.autograde", str(tmp_path / "submissions"),
                                 "--course-dir", str(tmp_path / "course"), "--out", str(tmp_path / "grades")],
                                env=env, stdout=out, stderr=subprocess.STDOUT, preexec_fn=_as_at_a_terminal)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            # this run's grade process and its sandbox (a process left by an earlier test must not start the clock:
            # a stop during autograde's own start-up is another case)
            if len(_grader_processes(under=proc.pid)) >= 2:
                break
            time.sleep(0.5)
        else:
            pytest.fail("the sandbox did not start")
        time.sleep(3)  # the notebook's cells run up to the sleep
        proc.send_signal({"kill -9": signal.SIGKILL, "Ctrl-C": signal.SIGINT, "kill": signal.SIGTERM}[how])
        try:
            code = proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            pytest.fail(f"autograde did not exit within 60 s of the {how}; its output:\n"
                        + log.read_text(errors="replace")[-3000:])
        if how != "kill -9":
            assert code == 130 and "stopped: the students graded before the stop" in log.read_text(), \
                log.read_text(errors="replace")[-3000:]
        deadline = time.monotonic() + 20
        while _grader_processes() and time.monotonic() < deadline:
            time.sleep(0.5)
        assert _grader_processes() == []
    finally:
        proc.kill()
        proc.wait()
    csv_path = tmp_path / "grades" / "gradebook.csv"
    assert not csv_path.exists() or "k_sleeper" not in csv_path.read_text()


def test_salt_is_drawn_per_run(course, tmp_path, monkeypatch):
    """The graded inputs' seeds are salted with a secret that each run draws anew, outside the sandbox."""
    import classroom.autograde as ag

    tmp, _ = course
    shutil.copytree(tmp / "course", tmp_path / "course")
    (tmp_path / "subs" / "someone").mkdir(parents=True)
    (tmp_path / "subs" / "someone" / f"{NB}.ipynb").write_text("{}")
    salts = []

    def fake(*args, salt, **kwargs):
        salts.append(salt)
        return {"status": "could not grade", "scores": {}, "messages": {}, "cells": [], "flags": ["could not grade"]}

    monkeypatch.setattr(ag, "grade_one_notebook", fake)
    for _ in range(2):
        ag.autograde(tmp_path / "subs", tmp_path / "course", tmp_path / "grades")
    assert len(salts) == 2 and salts[0] != salts[1] and all(re.fullmatch(r"[0-9a-f]{32}", s) for s in salts)
    assert salts[0] not in (ROOT / "classroom" / "grade.py").read_text()


FORGER = '''\
import sys
from classroom import wire
for index in range(100):                          # a record of "this" cell, whichever it is: all ok, nothing shown
    wire.send(int(sys.argv[-1]), {"ev": "cell", "index": index, "status": "ok", "error": "",
                                  "output": "(nothing to see here)"})
raise ValueError("the real error")
'''


WRAPS_REFERENCE = '''\
import math, torch


def attention_weights(query, key):
    from attn_lib.attention import scaled_dot_product_attention as reference
    reference(query, key, key)                    # the exercise's reference, inside the sandbox
    return torch.softmax(query @ key.transpose(-2, -1) / math.sqrt(query.shape[-1]), dim=-1)
'''


def test_forged_records_are_not_believed(course):
    """A cell that sends its own record of itself ("nothing to see here") and then fails: the grader believes
    neither record, shows no forged text, and flags it. A graded function that calls the check's own reference
    (attn_lib.attention.scaled_dot_product_attention, in the sandbox's attn_lib) is flagged."""
    from classroom.grade import grade_notebook
    from classroom.sandbox import library_dir

    tmp, _ = course
    released = json.loads((tmp / "release" / NB / f"{NB}.ipynb").read_text())
    nb = json.loads(json.dumps(released))
    _add_cell_after("check_attention_weights", FORGER)(nb)
    next(c for c in nb["cells"] if c["metadata"].get("nbgrader", {}).get("grade_id") ==
         "answer_check_attention_weights")["source"] = WRAPS_REFERENCE
    lib = library_dir(Path(tempfile.mkdtemp(prefix="attn-forge-")))
    try:
        result = grade_notebook(nb, released, lib, cell_timeout=30, budget_s=300)
    finally:
        shutil.rmtree(lib.parent, ignore_errors=True)
    forged = [c for c in result["cells"] if "wire.send" in c["source"]]
    assert len(forged) == 1 and forged[0]["status"] == "forged", forged[0]["error"]
    assert not any("nothing to see here" in c["output"] + c["error"] for c in result["cells"])  # only its source
    assert any("sent a cell record it was not asked for" in f for f in result["flags"]), result["flags"]
    assert result["scores"]["check_attention_weights"] == source.IMPLEMENTATION_POINTS
    assert "check_attention_weights: the graded function called the check's own reference, " \
           "attn_lib.attention.scaled_dot_product_attention" in result["flags"], result["flags"]


# ---- issue 41 §5, the last items: every graded function that runs attn_lib's reference is flagged, however it calls
# it; student text never reaches the teacher's flags; a bomb on the wire is refused before it inflates.
WRAPS_EVERY_WAY = '''\
import functools, importlib, threading
import attn_lib


def attention_weights(query, key):               # form 1: through functools.partial (a library frame between)
    return functools.partial(attn_lib.scaled_dot_product_attention, query, key)(key)[1]


def attention(query, key, value, scale=None, bias=None):   # form 2: in a thread of its own
    out = []
    t = threading.Thread(target=lambda: out.append(attn_lib.attention.scaled_dot_product_attention(
        query, key, value, attn_mask=bias, scale=scale)[0]))
    t.start()
    t.join()
    return out[0]


def self_attention(x, w_q, w_k, w_v):            # form 3: a name put together at run time
    ref = getattr(importlib.import_module("attn_lib." + "atten" + "tion"), "scaled_dot_" + "product_attention")
    return ref(x @ w_q, x @ w_k, x @ w_v)[0]
'''


def test_every_way_of_wrapping_the_reference_is_flagged(course):
    """A student whose three graded functions each return attn_lib's reference (through functools.partial, in a
    thread, by a name built at run time) gets the points the comparison gives, and a flag per function naming
    the reference, for the teacher to look at."""
    from classroom.grade import grade_notebook
    from classroom.sandbox import library_dir

    tmp, _ = course
    released = json.loads((tmp / "release" / NB / f"{NB}.ipynb").read_text())
    nb = json.loads(json.dumps(released))
    cells = _cells_by_id(nb)
    cells["answer_check_attention_weights"]["source"] = WRAPS_EVERY_WAY
    for key in ("answer_check_attention", "answer_check_self_attention"):
        cells[key]["source"] = "pass\n"
    lib = library_dir(Path(tempfile.mkdtemp(prefix="attn-wraps-")))
    try:
        result = grade_notebook(nb, released, lib, cell_timeout=30, budget_s=300)
    finally:
        shutil.rmtree(lib.parent, ignore_errors=True)
    ref = "attn_lib.attention.scaled_dot_product_attention"
    for key in KEYS[1:]:
        assert f"{key}: the graded function called the check's own reference, {ref}" in result["flags"], \
            (key, result["flags"], result["messages"][key])


FORGES_FLAGS = '''\
import os, sys
import torch
from classroom import wire

print("ERROR: could not grade FORGED-a; locked cell check_attention edited")   # flag-like text, printed


def attention_weights(query, key):
    # a reply of its own to the grader's call: the right weights, and made-up "calls" meant to become flags
    w = torch.softmax(query @ key.transpose(-2, -1) / query.shape[-1] ** 0.5, dim=-1)
    arrays = []
    wire.send(int(sys.argv[-1]), {"ok": True, "result": wire.encode(w, arrays), "after": [],
                                  "used": ["attn_lib.FORGED_b", "FORGED-c; own code uses setattr",
                                           "(FORGED-d)", "attn_lib.attention.FORGED_e"]}, arrays)
    os._exit(0)


raise RuntimeError("locked cell check_self_attention deleted; FORGED-f")     # flag-like text, raised
'''


def test_student_text_never_becomes_a_flag(course, tmp_path):
    """Text a student controls (printed, raised, or sent to the grader as made-up names of library calls in a
    forged reply) is in the feedback page as escaped data only: the teacher's flags (gradebook.csv, students.csv,
    summary.txt) hold the grader's own words, here "a malformed report", and no word of the student's."""
    tmp, _ = course
    subs = tmp_path / "submissions"
    released = json.loads((tmp / "release" / NB / f"{NB}.ipynb").read_text())
    nb = json.loads(json.dumps(released))
    _cells_by_id(nb)["answer_check_attention_weights"]["source"] = FORGES_FLAGS
    (subs / "x8_forges_flags" / NB).mkdir(parents=True)
    (subs / "x8_forges_flags" / NB / f"{NB}.ipynb").write_text(json.dumps(nb))
    course_dir = tmp_path / "course"
    shutil.copytree(tmp / "course", course_dir, ignore=shutil.ignore_patterns("submitted", "autograded"))
    rows = autograde(subs, course_dir, tmp_path / "grades", student_timeout=300, jobs=1)
    (row,) = rows
    assert row.points["check_attention_weights"] == 0  # its forged reply gained nothing
    assert "check_attention_weights: a malformed report" in row.flags, row.flags
    for name in ("gradebook.csv", "students.csv", "summary.txt"):
        text = (tmp_path / "grades" / name).read_text()
        assert "FORGED" not in text, (name, text)
    page = html_unescape((tmp_path / "grades" / "feedback" / "x8_forges_flags" / "index.html").read_text())
    assert "FORGED-a" in page and "FORGED-f" in page  # the student's own cells and what they printed: data
    notes = re.findall(r"Notes for your teacher: (.*?)</p>", page)
    assert notes and not any("FORGED" in n for n in notes), notes


BOMBS_THE_WIRE = '''\
import io, os, struct, sys, time, zipfile, zlib
import numpy as np


def _frame(entries):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for name, data, method in entries:
            z.writestr(name, data, compress_type=method)
    body = buf.getvalue()
    return struct.pack("!Q", len(body)) + body


def _npy(shape):
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": "|u1", "fortran_order": False, "shape": shape})
    return buf.getvalue()


def _zip(entries):                               # (name, data, method, size, crc) -> a zip archive, by hand
    local, central = b"", b""
    for name, data, method, size, crc in entries:
        n = name.encode()
        head = struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, 0, method, 0, 0, crc, len(data), size, len(n), 0)
        central += struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 20, 20, 0, method, 0, 0, crc, len(data), size,
                               len(n), 0, 0, 0, 0, 0, len(local)) + n
        local += head + n + data
    end = struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, len(entries), len(entries), len(central), len(local), 0)
    return local + central + end


def attention_weights(query, key):              # 2 GiB of zeros, deflated into a 2 MB message
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    zeros = bytes(1 << 24)
    first = c.compress(_npy((2 << 30,)) + zeros) + c.flush(zlib.Z_SYNC_FLUSH)
    again = c.compress(zeros) + c.flush(zlib.Z_SYNC_FLUSH)   # the same block, again and again: 16 MiB each
    data = first + again * ((2 << 30 >> 24) - 2) + c.flush(zlib.Z_FINISH)
    meta = io.BytesIO()
    np.lib.format.write_array(meta, np.frombuffer(b'{"ok": true, "result": null, "after": []}', np.uint8))
    body = _zip([("meta.npy", meta.getvalue(), 0, len(meta.getvalue()), zlib.crc32(meta.getvalue())),
                 ("a0.npy", data, 8, (2 << 30) - (1 << 24) + len(_npy((2 << 30,))), 0)])
    os.write(int(sys.argv[-1]), struct.pack("!Q", len(body)) + body)
    time.sleep(60)


def attention(query, key, value, scale=None, bias=None):   # stored, but its header claims 2**40 bytes
    meta = io.BytesIO()
    np.lib.format.write_array(meta, np.frombuffer(b'{"ok": true, "result": null, "after": []}', np.uint8))
    frame = _frame([("meta.npy", meta.getvalue(), zipfile.ZIP_STORED),
                    ("a0.npy", _npy((1 << 40,)) + bytes(100), zipfile.ZIP_STORED)])
    os.write(int(sys.argv[-1]), frame)
    time.sleep(60)
'''


def test_a_bomb_on_the_wire_is_refused_before_it_inflates(course, tmp_path):
    """Issue 41 §5, the grader's own memory: a graded function that answers the grader's call with a decompression
    bomb (2 GiB of zeros deflated into a 2 MB message) or with a stored array whose header claims 2**40 bytes. The
    grade process (as autograde runs it, with its own memory limit) refuses both before numpy allocates: both
    checks fail with the protocol error, the student's other answer is still graded, and the grade process never
    grows past a few hundred MB."""
    import subprocess
    import sys

    from classroom.sandbox import library_dir

    tmp, _ = course
    released = json.loads((tmp / "release" / NB / f"{NB}.ipynb").read_text())
    nb = json.loads(json.dumps(released))
    cells = _cells_by_id(nb)
    cells["answer_check_attention_weights"]["source"] = BOMBS_THE_WIRE
    cells["answer_check_attention"]["source"] = "pass\n"  # the stub would define attention again
    cells["answer_check_self_attention"]["source"] = IMPORTS + SOLVED_SELF  # stands alone (not on attention)
    lib = library_dir(Path(tempfile.mkdtemp(prefix="attn-bomb-")))
    job, res = tmp_path / "job.json", tmp_path / "result.json"
    job.write_text(json.dumps({"submitted": nb, "released": released, "library": str(lib), "cell_timeout": 60,
                               "budget_s": 300, "salt": "bomb"}))
    env = dict(os.environ, PYTHONPATH=str(ROOT), ATTN_GRADER_MEMORY=str(3 * 1024 ** 3))
    proc = subprocess.Popen([sys.executable, "-m", "classroom.grade", str(job), str(res)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    err = proc.stderr.read().decode(errors="replace")
    assert os.waitstatus_to_exitcode(status) == 0, err[-3000:]
    result = json.loads(res.read_text())
    assert usage.ru_maxrss < 1024 ** 2, usage.ru_maxrss  # KiB: under 1 GiB (the bomb alone would be 2 GiB)
    assert result["scores"]["check_attention_weights"] == 0 and result["scores"]["check_attention"] == 0
    assert "compressed entry" in result["messages"]["check_attention_weights"], result["messages"]
    assert "header does not match" in result["messages"]["check_attention"], result["messages"]
    assert result["scores"]["check_self_attention"] == source.IMPLEMENTATION_POINTS, result["messages"]
    shutil.rmtree(lib.parent, ignore_errors=True)


def _exchange_config(tmp: Path, assignment: str, student: str | None = None):
    from traitlets.config import Config

    c = Config()
    c.CourseDirectory.root = str(tmp / "course")
    c.CourseDirectory.course_id = "attn"
    c.CourseDirectory.assignment_id = assignment
    if student:
        c.CourseDirectory.student_id = student
        c.Exchange.cache = str(tmp / f"cache-{student}")
        c.Exchange.assignment_dir = str(tmp / f"home-{student}")
    c.Exchange.root = str(tmp / "exchange")
    return c


def _fetch_feedback(tmp: Path, assignment: str, student: str) -> list[Path]:
    """nbgrader fetch_feedback as ``student`` (their cache of what they submitted): the pages it fetched."""
    from nbgrader.auth import Authenticator
    from nbgrader.coursedir import CourseDirectory
    from nbgrader.exchange.default.fetch_feedback import ExchangeFetchFeedback

    c = _exchange_config(tmp, assignment, student)
    fetch = ExchangeFetchFeedback(coursedir=CourseDirectory(config=c), authenticator=Authenticator(config=c), config=c)
    fetch.start()
    return sorted((tmp / f"home-{student}").rglob("*.html"))


def test_a_link_to_the_source_gets_no_solution_back_through_feedback(course, tmp_path):
    """Issue 41 §2, the whole round trip: bin submits notebook 03 as a link to the teacher's source notebook (with
    the solutions) and a link to the source of 04, not released yet; daemon submits the release as it is. The
    course's collect refuses the links, autograde grades what was collected, return_feedback and nbgrader's
    release_feedback publish the pages, and each student fetches theirs (fetch_feedback, from their own cache of
    the submission, links and all): bin gets no page, daemon gets theirs, and no page holds a solution cell."""
    if os.geteuid() != 0:
        pytest.skip("needs root to own folders as the students' accounts (CI runs as root)")
    from nbgrader.auth import Authenticator
    from nbgrader.coursedir import CourseDirectory
    from nbgrader.exchange.default.release_feedback import ExchangeReleaseFeedback

    from classroom.return_feedback import return_feedback

    tmp, assignments = course
    later = "04_masking"
    shutil.copytree(tmp / "course", tmp_path / "course", ignore=shutil.ignore_patterns("submitted", "autograded",
                                                                                        "feedback"))
    sources = {nb: tmp_path / "course" / "source" / nb / f"{nb}.ipynb" for nb in (NB, later)}
    solutions = [e.solution.strip() for a in assignments if a.name in (NB, later) for e in a.exercises if e.solution]
    in_sources = "".join(_text(c) for p in sources.values() for c in json.loads(p.read_text())["cells"])
    assert solutions and all(s in in_sources for s in solutions)  # the sources do hold the solutions
    ids = {n: __import__("pwd").getpwnam(n).pw_uid for n in ("daemon", "bin")}
    inbound = tmp_path / "exchange" / "attn" / "inbound"
    inbound.mkdir(parents=True)
    os.chmod(inbound, 0o1733)
    ts = "2026-12-03 10:00:00.000000 UTC"
    released = (tmp_path / "course" / "release" / NB / f"{NB}.ipynb").read_text()
    for student, files in (("daemon", {f"{NB}.ipynb": released}),
                           ("bin", {f"{NB}.ipynb": sources[NB], f"{later}.ipynb": sources[later]})):
        for top in (inbound, tmp_path / f"cache-{student}" / "attn"):  # the exchange, and the student's own cache
            d = top / f"{student}+{NB}+{ts}+r1" if top == inbound else top / f"{student}+{NB}+{ts}"
            d.mkdir(parents=True)
            (d / "timestamp.txt").write_text(ts)
            (d / "submission_secret.txt").write_text(f"secret-of-{student}")
            for name, what in files.items():
                if isinstance(what, Path):
                    (d / name).symlink_to(what)  # the attack: the teacher's source, through a link
                else:
                    (d / name).write_text(what)
            for p in [d, *d.rglob("*")]:
                os.lchown(p, ids[student], ids[student])
    collected, log = _collect(tmp_path, NB)
    assert collected == ["bin", "daemon"], log
    assert f"{NB}.ipynb': a symbolic link" in log and f"{later}.ipynb': a symbolic link" in log, log
    rows = autograde(tmp_path / "course" / "submitted", tmp_path / "course", tmp_path / "grades",
                     student_timeout=300, jobs=1)
    assert [(r.student, r.notebook) for r in rows] == [("daemon", NB)]
    assert return_feedback(NB, tmp_path / "course", tmp_path / "grades") == ["daemon"]
    c = _exchange_config(tmp_path, NB)
    ExchangeReleaseFeedback(coursedir=CourseDirectory(config=c), authenticator=Authenticator(config=c),
                            config=c).start()
    pages = {s: _fetch_feedback(tmp_path, NB, s) for s in ("daemon", "bin")}
    assert pages["bin"] == [] and len(pages["daemon"]) == 1, pages
    published = list((tmp_path / "exchange" / "attn" / "feedback").glob("*.html"))
    assert len(published) == 1
    for page in [*pages["daemon"], *published, *(tmp_path / "grades").rglob("*.html")]:
        text = html_unescape(page.read_text())
        assert "BEGIN SOLUTION" not in text and "END SOLUTION" not in text, page
        for s in solutions:
            assert s not in text, (page, s[:80])
    subprocess_run(["rm", "-rf", str(tmp_path / "exchange"), str(tmp_path / "course")])


def test_only_the_cells_a_check_needs_run():
    """Issue 39 §4: the grader skips the locked cells that no student cell and no check's arguments need, by the
    names each cell defines and reads (Python's own scopes: a function's parameters and locals are its own); a
    locked cell that changes a needed object or sets global state runs; a student cell whose names cannot be told
    from its syntax, or ATTN_GRADE_EVERY_CELL=1, runs every cell."""
    from classroom.grade import EVERY_CELL, not_needed

    def plan(*cells):
        out = []
        for kind, source in cells:
            out.append({"kind": "graded", "grade_id": source, "source": ""} if kind == "graded" else
                       {"kind": "code", "source": source, "grade_id": None, "students": kind == "student"})
        return out

    cells = plan(
        ("locked", "import attn_lib\nattn_lib.setup()"),                           # 0: global state
        ("locked", "import math\nimport torch\nimport matplotlib.pyplot as plt"),   # 1: defines torch, math
        ("locked", "d_k = 4\nquery = torch.randn(3, d_k)"),                         # 2: a global the student reads
        ("locked", "fig, ax = plt.subplots()\nax.plot([1, 2])\nax.set_title('demo')"),  # 3: a plot: skipped
        ("locked", "scale = 1 / math.sqrt(d_k)"),                                   # 4: defines scale: needed
        ("locked", "cache = []"),                                                   # 5
        ("locked", "cache.append(2)"),                                             # 6: changes cache
        ("locked", "torch.set_default_dtype(torch.float64)"),                      # 7: global state
        ("locked", "out = [query for query in range(3)]\nprint(len(out))"),         # 8: its own query: skipped
        ("student", "def attention(query, key):\n    w = torch.softmax(query @ key.T * scale, -1)\n"
                    "    return w, cache"),
        ("graded", "check_attention"),
        ("locked", "print(attention(query, query))"),                              # 11: after every check: skipped
    )
    exercises = {"check_attention": {"points": 1.0, "checks": [("check_attention", "attention")]}}
    assert not_needed(cells, exercises) == {3, 8, 11}
    cells[9]["source"] += "\nprint(globals()['d_k'])"  # names the syntax does not tell: every cell runs
    assert not_needed(cells, exercises) == set()
    cells[9]["source"] = "def attention(query, key):\n    return query"
    assert not_needed(cells, exercises) == {2, 3, 4, 5, 6, 8, 11}
    os.environ[EVERY_CELL] = "1"
    try:
        assert not_needed(cells, exercises) == set()
    finally:
        del os.environ[EVERY_CELL]
