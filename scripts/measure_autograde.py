"""Measure `make autograde` for a class: N synthetic students of notebook 03, graded with JOBS at once.

    .venv-class/bin/python scripts/measure_autograde.py [--students 30] [--jobs 2] [--work build/measure]
                                                        [--course-dir build/class]

Not part of CI (it takes minutes). It needs `make release` done (``--course-dir``, build/class/, with its
release/). Run it with the Python that `make autograde` uses (``.venv-class/bin/python``). It writes N
submissions into WORK/submissions (mostly correct answers, some wrong, some left empty, so that the run looks
like a class), runs what `make autograde` runs:

    /usr/bin/time -v python -m classroom.autograde WORK/submissions --course-dir WORK/class --out WORK/grades --jobs n

(OMP_NUM_THREADS=1 and PYTHONPATH=the course, as the Makefile sets them; WORK/class is a copy of the course
directory, so the teacher's gradebook is not touched), samples the memory of the whole process tree every 0.5 s
(grader, sandboxes: the sum of RSS and of PSS), and prints the figures that docs/teaching.md gives: wall time, time
per student, the per-submission times the grader prints, peak memory, and the load average before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
NB = "03_scaled_dot_product_attention"
WRONG = {  # a typical wrong answer per exercise
    "answer_check_attention_weights": "import math\nimport torch\n\ndef attention_weights(query, key):\n"
                                      "    return torch.softmax(query @ key.transpose(-2, -1), dim=-1)\n",
    "answer_check_attention": "import math\nimport torch\n\ndef attention(query, key, value, scale=None, bias=None):\n"
                              "    scores = query @ key.transpose(-2, -1) / math.sqrt(query.shape[-1])  # scale ignored\n"
                              "    return torch.softmax(scores if bias is None else scores + bias, dim=-1) @ value\n",
}


def make_submissions(dest: Path, students: int, release_dir: Path) -> dict[str, int]:
    """dest/<student>/NB/NB.ipynb: every 5th student partly wrong, every 10th left empty, the rest correct."""
    sys.path.insert(0, str(ROOT))
    from classroom.source import course_assignments

    a = next(a for a in course_assignments(ROOT / "notebooks") if a.name == NB)
    solutions = {f"answer_{e.key}": e.solution for e in a.exercises}
    released = json.loads((release_dir / NB / f"{NB}.ipynb").read_text())
    shutil.rmtree(dest, ignore_errors=True)
    kinds = {"correct": 0, "partial": 0, "empty": 0}
    for i in range(students):
        kind = "empty" if i % 10 == 9 else "partial" if i % 5 == 4 else "correct"
        kinds[kind] += 1
        answers = {} if kind == "empty" else dict(solutions, **(WRONG if kind == "partial" else {}))
        nb = json.loads(json.dumps(released))
        for cell in nb["cells"]:
            gid = cell["metadata"].get("nbgrader", {}).get("grade_id")
            if gid in answers:
                cell["source"] = answers[gid]
        path = dest / f"student{i + 1:02d}" / NB / f"{NB}.ipynb"
        path.parent.mkdir(parents=True)
        path.write_text(json.dumps(nb))
    return kinds


class Sampler(threading.Thread):
    """Peak memory of a process tree: the sum over its processes of RSS and of PSS (shared pages shared out)."""

    def __init__(self, pid: int, every_s: float = 0.5):
        super().__init__(daemon=True)
        self.pid, self.every_s, self.stop = pid, every_s, threading.Event()
        self.peak_rss = self.peak_pss = 0
        self.peak_processes = 0

    def run(self):
        while not self.stop.is_set():
            try:
                procs = [psutil.Process(self.pid)] + psutil.Process(self.pid).children(recursive=True)
            except psutil.Error:
                break
            rss = pss = 0
            for p in procs:
                try:
                    m = p.memory_full_info()
                    rss, pss = rss + m.rss, pss + m.pss
                except psutil.Error:
                    pass
            self.peak_rss, self.peak_pss = max(self.peak_rss, rss), max(self.peak_pss, pss)
            self.peak_processes = max(self.peak_processes, len(procs))
            self.stop.wait(self.every_s)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--students", type=int, default=30)
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--work", type=Path, default=ROOT / "build" / "measure")
    p.add_argument("--course-dir", type=Path, default=ROOT / "build" / "class")
    args = p.parse_args(argv)
    course_dir = args.course_dir.resolve()
    if not (course_dir / "gradebook.db").exists() or not (course_dir / "release" / NB).is_dir():
        sys.exit("run `make release` first")
    work = args.work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    kinds = make_submissions(work / "submissions", args.students, course_dir / "release")
    shutil.rmtree(work / "class", ignore_errors=True)
    shutil.rmtree(work / "grades", ignore_errors=True)
    shutil.copytree(course_dir, work / "class")
    cmd = ["/usr/bin/time", "-v", sys.executable, "-m", "classroom.autograde", str(work / "submissions"),
           "--course-dir", str(work / "class"), "--out", str(work / "grades"), "--jobs", str(args.jobs)]
    env = dict(os.environ, OMP_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join([str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    load_before = os.getloadavg()
    started = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=ROOT)
    sampler = Sampler(proc.pid)
    sampler.start()
    out, _ = proc.communicate()
    wall = time.monotonic() - started
    sampler.stop.set()
    sampler.join()
    load_after = os.getloadavg()
    (work / "autograde.log").write_text(out)
    per = [float(s) for s in re.findall(r"graded \S+ / \S+ in ([\d.]+) s", out)]
    max_rss_kb = re.search(r"Maximum resident set size \(kbytes\): (\d+)", out)
    result = {
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "command": " ".join(["python"] + cmd[3:]),
        "students": args.students, "kinds": kinds, "jobs": args.jobs, "exit_status": proc.returncode,
        "cpus": os.cpu_count(), "load_before": [round(x, 1) for x in load_before],
        "load_after": [round(x, 1) for x in load_after],
        "wall_s": round(wall, 1), "wall_per_student_s": round(wall / args.students, 1),
        "per_submission_s": {"n": len(per), "median": statistics.median(per) if per else None,
                             "min": min(per, default=None), "max": max(per, default=None)},
        "peak_tree_rss_mib": round(sampler.peak_rss / 2 ** 20), "peak_tree_pss_mib": round(sampler.peak_pss / 2 ** 20),
        "peak_processes": sampler.peak_processes,
        "max_rss_one_process_mib": round(int(max_rss_kb.group(1)) / 1024) if max_rss_kb else None,
    }
    (work / "result.json").write_text(json.dumps(result, indent=2))
    print(out[-1500:])
    print(json.dumps(result, indent=2))
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())
