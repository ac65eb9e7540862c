"""nbgrader's round trip on the class hub, across real Unix accounts (root only; ``make test-hub``).

The teacher (``attnteach``) releases notebook 03 into the hub's exchange; three students of the class fetch it and
answer it, one correctly, one partly, one not at all, and submit; one of them also tries to reach a classmate
through the exchange (list, read, overwrite, submit in their name, read their feedback). The teacher collects,
autogrades through the sandbox (``classroom.autograde``, run as the teacher: an unprivileged account, so each
sandbox is a user namespace), returns the feedback (``classroom.return_feedback`` + ``nbgrader release_feedback``),
and each student fetches theirs. Every command runs as its account (``runuser``), with the nbgrader configuration
the hub gives every server (``hub.course_hub.write_nbgrader_config``): what the Assignments and Formgrader tabs do,
through the same exchange classes.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from classroom.source import IMPLEMENTATION_POINTS, PREDICTION_POINTS, course_assignments
from hub.course_hub import REPO_ROOT, ensure_unix_user, write_nbgrader_config
from tests_hub.class_hub import TEACHER

NB = "03_scaled_dot_product_attention"
FULL = PREDICTION_POINTS + 3 * IMPLEMENTATION_POINTS  # notebook 03: one prediction, three implementations
PARTIAL = PREDICTION_POINTS + IMPLEMENTATION_POINTS  # the partial student: the prediction and exercise 2
COURSE = "attn-course"
NBGRADER = REPO_ROOT / ".venv-class" / "bin" / "nbgrader"
PYTHON = REPO_ROOT / ".venv-class" / "bin" / "python"
NO_SCALE = ("import math\nimport torch\n\ndef attention_weights(query, key):\n"
            "    return torch.softmax(query @ key.transpose(-2, -1), dim=-1)\n")


def as_user(name: str, args: list[str], cwd: str | None = None, config: Path | None = None, timeout: float = 300,
            check: bool = True) -> subprocess.CompletedProcess:
    home = f"/home/{name}"
    env = {"HOME": home, "USER": name, "LOGNAME": name, "PATH": f"{PYTHON.parent}:/usr/bin:/bin",
           "PYTHONPATH": str(REPO_ROOT), "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "LANG": "C.UTF-8", "JUPYTER_CONFIG_PATH": str(config or "")}
    if os.environ.get("ATTN_CELL_TIMEOUT"):
        env["ATTN_CELL_TIMEOUT"] = os.environ["ATTN_CELL_TIMEOUT"]
    r = subprocess.run(["runuser", "-u", name, "--", "env", "-i", *[f"{k}={v}" for k, v in env.items()], *args],
                       cwd=cwd or home, capture_output=True, text=True, timeout=timeout)
    if check and r.returncode != 0:
        raise AssertionError(f"{name}: {' '.join(map(str, args))} exited {r.returncode}:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
    return r


@pytest.fixture(scope="module")
def round_trip(class_hub):
    if not NBGRADER.exists():
        pytest.skip("nbgrader not installed (.venv-class: make release)")
    t0 = time.monotonic()
    config = write_nbgrader_config(class_hub.tmp / "shared", COURSE)  # what the hub writes when it has nbgrader
    exchange = class_hub.tmp / "shared" / "nbgrader" / "exchange"
    teacher = ensure_unix_user(TEACHER)
    good, partial, empty = class_hub.names[:3]
    for s in (good, partial, empty):
        ensure_unix_user(s)
    course = f"/home/{TEACHER}/nbgrader-course"
    # the teacher: notebook 03's release (source with solutions and the gradebook in their own course folder)
    as_user(TEACHER, [str(PYTHON), "-m", "classroom.release", "--only", NB, "--course-dir", course,
                      "--out", f"/home/{TEACHER}/released-copy"], config=config)
    as_user(TEACHER, [str(NBGRADER), "release_assignment", NB], cwd=course, config=config)
    # the students: fetch, answer, submit
    a = next(a for a in course_assignments(REPO_ROOT / "notebooks") if a.name == NB)
    solutions = {f"answer_{e.key}": e.solution for e in a.exercises}
    answers = {good: solutions,
               partial: {"answer_check_prediction_03_scale_by_dk": solutions["answer_check_prediction_03_scale_by_dk"],
                         "answer_check_attention_weights": NO_SCALE,
                         "answer_check_attention": solutions["answer_check_attention"]},
               empty: {}}
    shared_tmp = class_hub.tmp / "answers"
    shared_tmp.mkdir(exist_ok=True)
    os.chmod(shared_tmp, 0o755)
    def student_turn(s):  # the three students at once, as a class does
        as_user(s, [str(NBGRADER), "fetch_assignment", NB], config=config)
        (shared_tmp / f"{s}.json").write_text(json.dumps(answers[s]))
        os.chmod(shared_tmp / f"{s}.json", 0o644)
        as_user(s, [str(PYTHON), "-c", (
            "import json, sys; p = sys.argv[1]; nb = json.load(open(p)); a = json.load(open(sys.argv[2]))\n"
            "for c in nb['cells']:\n"
            "    gid = c['metadata'].get('nbgrader', {}).get('grade_id')\n"
            "    if gid in a: c['source'] = a[gid]\n"
            "json.dump(nb, open(p, 'w'))"), f"/home/{s}/{NB}/{NB}.ipynb", str(shared_tmp / f"{s}.json")], config=config)
        as_user(s, [str(NBGRADER), "submit", NB], config=config)

    with ThreadPoolExecutor(3) as pool:
        list(pool.map(student_turn, (good, partial, empty)))
    inbound = exchange / COURSE / "inbound"
    inbound_mode = inbound.stat().st_mode & 0o7777
    own = {s: next(p for p in inbound.iterdir() if p.name.startswith(f"{s}+")) for s in (good, partial, empty)}
    own_modes = {s: p.stat().st_mode & 0o7777 for s, p in own.items()}
    # the partial student goes after the good one, through the exchange
    attempts = {
        "list inbound": as_user(partial, ["ls", str(inbound)], check=False),
        "overwrite": as_user(partial, ["cp", f"/home/{partial}/{NB}/{NB}.ipynb", str(own[good] / f"{NB}.ipynb")], check=False),
        "rename": as_user(partial, ["mv", str(own[good]), str(inbound / "taken")], check=False),
        "delete": as_user(partial, ["rm", "-rf", str(own[good])], check=False),
        "write into": as_user(partial, ["touch", str(own[good] / "extra.ipynb")], check=False),
    }
    time.sleep(1.1)  # a later timestamp than the victim's: the newest submission of a student is the one collected
    attempts["submit as"] = as_user(partial, [str(NBGRADER), "submit", NB, f"--student={good}"], config=config, check=False)
    forged = [p for p in inbound.iterdir() if p.name.startswith(f"{good}+") and p != own[good]]
    # the teacher: collect, autograde in the sandbox (as the teacher: unprivileged), return the feedback
    collect = as_user(TEACHER, [str(NBGRADER), "collect", NB], cwd=course, config=config)
    grade = as_user(TEACHER, [str(PYTHON), "-m", "classroom.autograde", f"{course}/submitted", "--course-dir", course,
                              "--out", f"/home/{TEACHER}/grades", "--jobs", "3"], config=config, timeout=600, check=False)
    ret = as_user(TEACHER, [str(PYTHON), "-m", "classroom.return_feedback", NB, "--course-dir", course,
                            "--grades", f"/home/{TEACHER}/grades"], config=config)
    as_user(TEACHER, [str(NBGRADER), "release_feedback", NB], cwd=course, config=config)
    with ThreadPoolExecutor(3) as pool:
        fetched = dict(zip((good, partial, empty), pool.map(
            lambda s: as_user(s, [str(NBGRADER), "fetch_feedback", NB], config=config), (good, partial, empty))))
    attempts["fetch feedback as"] = as_user(partial, [str(NBGRADER), "fetch_feedback", NB, f"--student={good}"],
                                            config=config, check=False)
    attempts["list feedback"] = as_user(partial, ["ls", str(exchange / COURSE / "feedback")], check=False)
    print(f"\nnbgrader round trip (release, 3 students, collect, sandboxed autograde, feedback): "
          f"{time.monotonic() - t0:.0f} s")
    yield dict(own_modes=own_modes, inbound_mode=inbound_mode, config=config, exchange=exchange, course=Path(course), students=(good, partial, empty), own=own,
               forged=forged, attempts=attempts, collect=collect, grade=grade, ret=ret, fetched=fetched,
               teacher=teacher, solutions=solutions)
    for s in (good, partial, empty):  # the accounts themselves go with the class hub's cleanup
        shutil.rmtree(f"/home/{s}/{NB}", ignore_errors=True)


def _feedback_pages(student: str) -> list[Path]:
    return sorted(Path(f"/home/{student}/{NB}/feedback").rglob("*.html"))


def test_teacher_grades_the_collected_submissions_in_the_sandbox(round_trip):
    rt = round_trip
    assert rt["grade"].returncode == 0, rt["grade"].stdout[-3000:] + rt["grade"].stderr[-3000:]
    good, partial, empty = rt["students"]
    rows = {r["student"]: r for r in __import__("csv").DictReader(
        open(f"/home/{TEACHER}/grades/gradebook.csv"))}
    assert set(rows) == {good, partial, empty}, (rt["collect"].stdout[-3000:], rt["collect"].stderr[-3000:],
                                                 rt["grade"].stderr[-2000:])
    assert (rows[good]["total"], rows[partial]["total"], rows[empty]["total"]) == (str(FULL), str(PARTIAL), "0"), rows
    # partial: the prediction and the solved attention (it stands alone), an unscaled attention_weights, no
    # self_attention
    assert rows[good]["flags"] == "" and \
        rows[partial]["failed"] == "check_attention_weights;check_self_attention"
    # the collected files are the teacher's, in nbgrader's layout
    assert (rt["course"] / "submitted" / good / NB / f"{NB}.ipynb").stat().st_uid == rt["teacher"].pw_uid


def test_each_student_gets_only_their_own_feedback(round_trip):
    rt = round_trip
    good, partial, empty = rt["students"]
    for s, total in ((good, FULL), (partial, PARTIAL), (empty, 0)):
        pages = _feedback_pages(s)
        assert len(pages) == 1, (s, pages, rt["fetched"][s].stdout[-1000:], rt["fetched"][s].stderr[-1000:])
        text = pages[0].read_text()
        assert f"Feedback for {s}</h1>" in text and f"{NB}: {total} / {FULL} points" in text
        others = [o for o in rt["students"] if o != s]
        assert not any(o in text for o in others), (s, others)
        assert pages[0].stat().st_uid == Path(f"/home/{s}").stat().st_uid  # fetched by the student, into their home


def test_a_student_cannot_read_overwrite_or_submit_for_another(round_trip):
    rt = round_trip
    good, partial, _ = rt["students"]
    at = rt["attempts"]
    # create only, no listing, sticky: entries stay their owner's (nbgrader may add setgid, harmless)
    assert rt["inbound_mode"] & 0o1777 == 0o1733, oct(rt["inbound_mode"])
    assert set(rt["own_modes"].values()) == {0o755}, rt["own_modes"]  # not nbgrader's 0777
    for what in ("list inbound", "overwrite", "rename", "delete", "write into", "list feedback"):
        assert at[what].returncode != 0 and ("Permission denied" in at[what].stderr
                                             or "Operation not permitted" in at[what].stderr), (what, at[what].stderr)
    # the victim's submission is untouched: their own folder, their own answers
    victim = json.loads((rt["own"][good] / f"{NB}.ipynb").read_text())
    answer = next(c for c in victim["cells"] if c["metadata"]["nbgrader"].get("grade_id") == "answer_check_attention_weights")
    assert "".join(answer["source"]) == rt["solutions"]["answer_check_attention_weights"]
    # nbgrader lets any account submit under another's name (the newest is collected) ...
    assert at["submit as"].returncode == 0 and len(rt["forged"]) == 1
    assert rt["forged"][0].stat().st_uid != rt["own"][good].stat().st_uid
    assert rt["forged"][0].name.split("+")[2] > rt["own"][good].name.split("+")[2]  # newer: nbgrader would take it
    # ... and the course's collect refuses it: the good student's own submission is the one graded
    assert "REFUSED" in rt["collect"].stderr + rt["collect"].stdout and rt["forged"][0].name in rt["collect"].stderr
    collected = (rt["course"] / "submitted" / good / NB / f"{NB}.ipynb").read_text()
    assert rt["solutions"]["answer_check_attention_weights"].splitlines()[-1] in collected
    assert "return torch.softmax(query @ key.transpose(-2, -1), dim=-1)" not in collected
    # and fetching feedback under the victim's name gets the attacker nothing of the victim's
    pages = list(Path(f"/home/{partial}").rglob("*.html"))
    assert pages and not any(f"Feedback for {good}<" in p.read_text() for p in pages)
