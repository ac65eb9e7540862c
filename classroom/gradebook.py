"""What a teacher reads after ``make autograde``: one line per student, and the same for an LMS to import.

    python -m classroom.gradebook [grades] [--roster canvas_export.csv] [--section NAME]

From ``grades/gradebook.csv`` (one row per student and notebook, one column per check) it writes

- ``grades/students.csv``: one row per student: ``student``, ``total``, ``max_total``, ``percent``, one column per
  notebook (its points, empty when the student submitted nothing for it), ``missing`` (notebooks that others
  submitted and this student did not, ``;``-separated), ``could_not_grade`` (notebooks graded 0 because they could
  not be graded) and ``flags`` (``notebook: flag`` for everything the teacher should look at);
- ``grades/canvas.csv``: Canvas's gradebook import format (Grades > Import): the columns ``Student``, ``ID``,
  ``SIS User ID``, ``SIS Login ID``, ``Section``, then one column per notebook named ``<notebook> (attention
  course)``, and a second row ``Points Possible`` with each notebook's maximum (Canvas creates an assignment
  for a column it does not know and takes its points from that row). Canvas matches a row to a student by ``ID``,
  ``SIS User ID`` or ``SIS Login ID``: with ``--roster`` (the CSV Canvas exports from the same course's
  gradebook) the first five columns are copied from the row whose ``SIS Login ID`` (else ``Student``) equals the
  course's student id; without it the student id is written as ``SIS Login ID``.

``make autograde`` writes both after every run.
"""

from __future__ import annotations

import argparse
import csv
import io
import sys
from pathlib import Path

CANVAS_COLUMNS = ["Student", "ID", "SIS User ID", "SIS Login ID", "Section"]
CANVAS_SUFFIX = " (attention course)"


FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def cell(value) -> str:
    """A CSV field a spreadsheet reads as text: one that begins like a formula (``=``, ``+``, ``-``, ``@``, a tab
    or a carriage return, e.g. a student id ``-2+3`` or ``@A1``) gets a leading apostrophe (OWASP's rule against
    CSV injection); :func:`uncell` takes it off again."""
    text = str(value)
    return "'" + text if text.startswith(FORMULA_START) else text


def uncell(text: str) -> str:
    return text[1:] if text.startswith("'") and text[1:].startswith(FORMULA_START) else text


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


def read_gradebook(path: Path) -> tuple[list[str], dict[str, float], dict[str, dict[str, dict]]]:
    """(notebooks, max points per notebook, student -> notebook -> row) of gradebook.csv."""
    with path.open(newline="", encoding="utf-8") as f:
        rows = [{k: uncell(v) for k, v in r.items()} for r in csv.DictReader(f)]
    notebooks = sorted({r["notebook"] for r in rows})
    maxima = {nb: max(float(r["max_total"]) for r in rows if r["notebook"] == nb) for nb in notebooks}
    by_student: dict[str, dict[str, dict]] = {}
    for r in rows:
        by_student.setdefault(r["student"], {})[r["notebook"]] = r
    return notebooks, maxima, by_student


def student_summary(notebooks, maxima, by_student) -> list[dict[str, str]]:
    out = []
    max_total = sum(maxima.values())
    for student in sorted(by_student):
        rows = by_student[student]
        total = sum(float(r["total"]) for r in rows.values())
        flags = [f"{nb}: {f}" for nb, r in sorted(rows.items()) for f in r["flags"].split(";") if f]
        line = {"student": student, "total": _num(total), "max_total": _num(max_total),
                "percent": f"{100 * total / max_total:.1f}" if max_total else ""}
        for nb in notebooks:
            line[nb] = _num(float(rows[nb]["total"])) if nb in rows else ""
        line["missing"] = ";".join(nb for nb in notebooks if nb not in rows)
        line["could_not_grade"] = ";".join(nb for nb, r in sorted(rows.items()) if "could not grade" in r["flags"])
        line["flags"] = "; ".join(flags)
        out.append(line)
    return out


def read_roster(path: Path) -> dict[str, dict[str, str]]:
    """A Canvas gradebook export: course student id (its SIS Login ID, else its Student) -> its first five columns."""
    with path.open(newline="", encoding="utf-8-sig") as f:
        reader = csv.DictReader(f)
        missing = [c for c in CANVAS_COLUMNS if c not in (reader.fieldnames or [])]
        if missing:
            raise ValueError(f"roster {path}: a Canvas gradebook export has the columns {CANVAS_COLUMNS}; "
                             f"missing {missing}")
        roster = {}
        for row in reader:
            if row["Student"].strip() in ("Points Possible", "Test Student") or not row["Student"].strip():
                continue
            key = row["SIS Login ID"].strip() or row["Student"].strip()
            roster[key] = {c: row[c] for c in CANVAS_COLUMNS}
    return roster


def canvas_csv(notebooks, maxima, by_student, roster: dict | None = None, section: str = "") -> tuple[str, list[str]]:
    """The Canvas import file's text, and the students the roster does not have (left out of the file)."""
    f = io.StringIO()
    w = csv.writer(f, lineterminator="\n")
    w.writerow(CANVAS_COLUMNS + [nb + CANVAS_SUFFIX for nb in notebooks])
    w.writerow(["Points Possible", "", "", "", ""] + [_num(maxima[nb]) for nb in notebooks])
    unknown = []
    for student in sorted(by_student):
        if roster is not None:
            if student not in roster:
                unknown.append(student)
                continue
            first = [roster[student][c] for c in CANVAS_COLUMNS]
        else:
            first = [student, "", "", student, section]
        rows = by_student[student]
        w.writerow([cell(x) for x in first] + [_num(float(rows[nb]["total"])) if nb in rows else "" for nb in notebooks])
    return f.getvalue(), unknown


def write_reports(grades: Path, roster: Path | None = None, section: str = "") -> list[str]:
    """grades/students.csv and grades/canvas.csv from grades/gradebook.csv; returns the problems (roster misses)."""
    notebooks, maxima, by_student = read_gradebook(grades / "gradebook.csv")
    summary = student_summary(notebooks, maxima, by_student)
    f = io.StringIO()
    w = csv.DictWriter(f, ["student", "total", "max_total", "percent", *notebooks, "missing", "could_not_grade",
                           "flags"], lineterminator="\n")
    w.writeheader()
    w.writerows({k: cell(v) for k, v in row.items()} for row in summary)
    (grades / "students.csv").write_text(f.getvalue(), encoding="utf-8")
    text, unknown = canvas_csv(notebooks, maxima, by_student, read_roster(roster) if roster else None, section)
    (grades / "canvas.csv").write_text(text, encoding="utf-8")
    return [f"{s}: not in the Canvas roster {roster}; left out of canvas.csv" for s in unknown]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("grades", type=Path, nargs="?", default=Path("grades"))
    p.add_argument("--roster", type=Path, help="the Canvas gradebook export of the course (matches the students)")
    p.add_argument("--section", default="", help="the Section column without a roster")
    args = p.parse_args(argv)
    if not (args.grades / "gradebook.csv").exists():
        p.error(f"no {args.grades / 'gradebook.csv'}: run make autograde first")
    problems = write_reports(args.grades, args.roster, args.section)
    print(f"wrote {args.grades / 'students.csv'} and {args.grades / 'canvas.csv'}")
    for line in problems:
        print("warning:", line, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
