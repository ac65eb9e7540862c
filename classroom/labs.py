"""The labs of the teaching plan, read from the plan itself (docs/teaching.md, "A plan for 12 labs of 90 minutes").

The plan's table is the one place that says which notebooks make up a lab; the slides (``make slides``,
scripts/build_slides.py), the quizzes (:mod:`classroom.quizzes`), the instructor notes and the misconceptions page
follow it, so a change to the plan changes them all; tests/test_teaching_kit.py checks that every notebook on disk
is in exactly one lab. Standard library only (no nbgrader, no torch).

    python -m classroom.labs      # prints the labs as the plan defines them
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GUIDE = ROOT / "docs" / "teaching.md"
PLAN_HEADING = "## A plan for"


@dataclass(frozen=True)
class Lab:
    """One row of the plan's table."""

    number: int  # 1, 2, ...
    optional: bool  # "9 (optional)"
    notebooks: tuple[str, ...]  # notebook stems, in the row's order: ("00_welcome", "01_tokens_and_embeddings")
    present: str  # "present first (15 min)"
    in_class: str  # "exercises in class"
    homework: str

    @property
    def slug(self) -> str:
        """``lab-01``: the name of its slide deck and quiz."""
        return f"lab-{self.number:02d}"

    @property
    def prefixes(self) -> tuple[str, ...]:
        """The notebooks' two-digit numbers: ("00", "01")."""
        return tuple(n[:2] for n in self.notebooks)

    @property
    def title(self) -> str:
        return f"Lab {self.number}" + (" (optional)" if self.optional else "")


class PlanError(ValueError):
    """The plan's table is missing or a row names a notebook that does not exist."""


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def labs(guide: Path = GUIDE, notebooks: Path = ROOT / "notebooks") -> list[Lab]:
    """The plan's labs, in order.

    Raises:
        PlanError: no plan table in ``guide``, or a row names a notebook number with no ``notebooks/NN_*.ipynb``.
    """
    text = guide.read_text(encoding="utf-8")
    start = text.find(PLAN_HEADING)
    if start < 0:
        raise PlanError(f"{guide}: no section starting with {PLAN_HEADING!r}")
    lines = text[start:].splitlines()
    try:
        header = next(i for i, ln in enumerate(lines) if ln.startswith("| lab |"))
    except StopIteration:
        raise PlanError(f"{guide}: the plan has no table starting with '| lab |'") from None
    stems = {p.stem[:2]: p.stem for p in sorted(notebooks.glob("[0-9][0-9]_*.ipynb"))}
    found = []
    for line in lines[header + 2:]:
        if not line.startswith("|"):
            break
        lab, nbs, present, in_class, homework = _cells(line)[:5]
        m = re.fullmatch(r"(\d+)(\s*\(optional\))?", lab)
        if m is None:
            raise PlanError(f"{guide}: a plan row's lab column is {lab!r}, expected a number or 'N (optional)'")
        numbers = re.findall(r"\d\d", nbs)
        missing = [n for n in numbers if n not in stems]
        if not numbers or missing:
            raise PlanError(f"{guide}: lab {lab} names notebooks {nbs!r}; no notebooks/NN_*.ipynb for {missing or nbs}")
        found.append(Lab(int(m.group(1)), bool(m.group(2)), tuple(stems[n] for n in numbers), present, in_class,
                         homework))
    if not found:
        raise PlanError(f"{guide}: the plan's table has no rows")
    return found


def main() -> None:  # pragma: no cover - a listing
    for lab in labs():
        print(f"{lab.slug}: {lab.title}: {', '.join(lab.notebooks)}")


if __name__ == "__main__":  # pragma: no cover
    main()
