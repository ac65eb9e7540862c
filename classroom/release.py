"""``make release``: the student version of every course notebook, built with nbgrader.

    python -m classroom.release [--course-dir build/class] [--out release] [--notebooks notebooks]

1. :func:`classroom.source.write_sources` derives ``<course-dir>/source/<nb>/<nb>.ipynb`` (solutions marked,
   cells locked, graded checks with hidden tests) from ``notebooks/`` and ``notebooks/solutions/``;
2. ``nbgrader generate_assignment`` (through its API) writes ``<course-dir>/release/<nb>/<nb>.ipynb`` and
   records every cell's checksum in ``<course-dir>/gradebook.db``, which ``make autograde`` grades against;
3. the release is copied to ``--out`` (``release/``, not committed), one folder per notebook;
4. the student edition (:mod:`classroom.edition`) is built into ``--edition`` (``build/student-edition/``): the
   released notebooks, ``attn_lib`` without the prediction answers, requirements and a README, as a git repository
   the teacher pushes for the students.

Before nbgrader sees them, the source notebooks' links to other notebooks are rewritten for the one-folder-per-
notebook layout (``../04_masking/04_masking.ipynb``), ``glossary.md`` is copied next to each, and the sentences that
point at ``notebooks/solutions/`` are replaced (:func:`classroom.edition.fix_links`).
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

from classroom.config import api, write_config
from classroom.edition import build_edition, course_notebooks, fix_notebook
from classroom.source import write_sources

ROOT = Path(__file__).resolve().parent.parent


def release(notebooks: Path, course_dir: Path, out: Path | None, *, points_file: Path | None = None,
            edition: Path | None = None, only: list[str] | None = None) -> list:
    """``only``: release just these notebooks (names such as ``03_scaled_dot_product_attention``)."""
    import json

    course_dir.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(course_dir / "source", ignore_errors=True)
    assignments = write_sources(notebooks, course_dir / "source", points_file=points_file)
    if only:
        unknown = set(only) - {a.name for a in assignments}
        if unknown:
            raise ValueError(f"only: {sorted(unknown)} are not notebooks with exercises; "
                             f"expected some of {[a.name for a in assignments]}")
        for a in assignments:
            if a.name not in only:
                shutil.rmtree(course_dir / "source" / a.name)
        assignments = [a for a in assignments if a.name in only]
    names = set(course_notebooks(notebooks))
    for a in assignments:
        src = course_dir / "source" / a.name / f"{a.name}.ipynb"
        src.write_text(json.dumps(fix_notebook(json.loads(src.read_text()), names), indent=1, ensure_ascii=False) + "\n")
        if (notebooks / "glossary.md").exists():
            shutil.copy2(notebooks / "glossary.md", src.parent / "glossary.md")
    write_config(course_dir)
    nbg = api(course_dir)
    for a in assignments:
        result = nbg.generate_assignment(a.name, force=True, create=True)
        if not result["success"]:
            raise RuntimeError(f"nbgrader generate_assignment {a.name} failed:\n{result.get('error') or result.get('log')}")
    if out is not None:
        shutil.rmtree(out, ignore_errors=True)
        shutil.copytree(course_dir / "release", out)
    if edition is not None:
        build_edition(course_dir / "release", edition, notebooks)
    return assignments


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--notebooks", type=Path, default=ROOT / "notebooks")
    p.add_argument("--course-dir", type=Path, default=ROOT / "build" / "class")
    p.add_argument("--out", type=Path, default=ROOT / "release")
    p.add_argument("--edition", type=Path, default=ROOT / "build" / "student-edition",
                   help="where the student edition goes (a git repository to push for the students)")
    p.add_argument("--only", nargs="+", metavar="NOTEBOOK", help="release only these notebooks")
    p.add_argument("--points", type=Path, default=ROOT / "classroom" / "points.toml")
    p.add_argument("--points-table", action="store_true", help="print the points per exercise (Markdown) and stop")
    args = p.parse_args(argv)
    if args.points_table:
        from classroom.source import course_assignments

        print(points_table(course_assignments(args.notebooks, points_file=args.points)))
        return 0
    assignments = release(args.notebooks, args.course_dir, args.out, points_file=args.points,
                          edition=None if args.only else args.edition, only=args.only)
    total = sum(e.points for a in assignments for e in a.exercises)
    print(f"released {len(assignments)} notebooks, {sum(len(a.exercises) for a in assignments)} graded exercises "
          f"({total} points) into {args.out}" + ("" if args.only else f"; the student edition: {args.edition}"))
    return 0


def points_table(assignments) -> str:
    """The teacher's guide's table: notebook, graded check (its grade id), points."""
    lines = ["| notebook | graded check (grade id) | points |", "|---|---|---:|"]
    for a in assignments:
        for e in a.exercises:
            lines.append(f"| `{a.name}` | `{e.key}` | {e.points} |")
        lines.append(f"| `{a.name}` | **total** | **{sum(e.points for e in a.exercises)}** |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
