"""Return the sandboxed grader's feedback through nbgrader's exchange (the class hub).

    python -m classroom.return_feedback ASSIGNMENT [--course-dir ~/nbgrader-course] [--grades grades]
    nbgrader release_feedback ASSIGNMENT

``make autograde`` writes one escaped page per student (``grades/feedback/<student>/index.html``). nbgrader's
``release_feedback`` publishes ``<course-dir>/feedback/<student>/<assignment>/<notebook>.html`` under a name only
that submission's owner can compute (a hash with the secret nbgrader stored in their submission), so this copies
each collected student's page there, with the submission's ``timestamp.txt`` and ``submission_secret.txt`` that
nbgrader needs. Students then run ``nbgrader fetch_feedback ASSIGNMENT`` (or the Assignments tab).
Only students whose submission was collected (``<course-dir>/submitted/<student>/<assignment>/``) and graded get a page.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path


def return_feedback(assignment: str, course_dir: Path, grades: Path) -> list[str]:
    """Copy each graded student's page into nbgrader's feedback folder; the students it did, sorted."""
    if not assignment or "/" in assignment or assignment.startswith("."):
        raise ValueError(f"assignment must be a notebook name such as 03_scaled_dot_product_attention, got {assignment!r}")
    submitted = course_dir / "submitted"
    if not submitted.is_dir():
        raise FileNotFoundError(f"no {submitted}: run `nbgrader collect {assignment}` first")
    done = []
    for student_dir in sorted(p for p in submitted.iterdir() if p.is_dir()):
        sub = student_dir / assignment
        page = grades / "feedback" / student_dir.name / "index.html"
        if not (sub / f"{assignment}.ipynb").exists() or not page.exists():
            continue
        dest = course_dir / "feedback" / student_dir.name / assignment
        dest.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(page, dest / f"{assignment}.html")
        for f in ("timestamp.txt", "submission_secret.txt"):
            if (sub / f).exists():
                shutil.copyfile(sub / f, dest / f)
        done.append(student_dir.name)
    return done


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("assignment")
    p.add_argument("--course-dir", type=Path, default=Path("~/nbgrader-course").expanduser())
    p.add_argument("--grades", type=Path, default=Path("grades"))
    args = p.parse_args(argv)
    done = return_feedback(args.assignment, args.course_dir, args.grades)
    print(f"feedback of {len(done)} students ready for: nbgrader release_feedback {args.assignment}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
