"""Derive nbgrader "source" notebooks from the course notebooks and their worked solutions.

One source of truth: a course notebook ``notebooks/NN_x.ipynb`` gives the text, the stubs and the checks; its
``notebooks/solutions/NN_x_solutions.ipynb`` gives each solution. Nothing is hand-edited in between.

How exercises are found (by structure; no list of today's cells):

- An **exercise cell** is a code cell of the course notebook with a call ``attn_lib.course.exercises.check_NAME(...)``.
  The lines before the first such statement are the **stub** (what the student completes); the check statements
  are the **check**.
- Its **solution** is the code cell of the solutions notebook that makes the same call (same check name and the
  same literal arguments, e.g. the question id of ``check_prediction("03.scale_by_dk", answer)``); the lines
  before its check statement are the solution. A ``check_prediction`` question with no solution cell takes its
  answer from the question registry (``attn_lib.course.exercises.concepts``): ``<variable> = <answer>``.
- Every other cell is explanatory.

What the source notebook gets (nbgrader cell metadata in brackets):

- the stub, then ``### BEGIN SOLUTION`` / the solution / ``### END SOLUTION`` [solution, ``answer_<key>``].
  The release's ClearSolutions stub is empty, so the student gets exactly the course's stub back; in the
  source the solution, coming second, redefines what the stub defined.
- a graded test cell [grade, locked, points, ``<key>``]: the visible check asserts the same ``check_*`` call (the
  learner's feedback while working). There is no hidden test in it: when grading, :mod:`classroom.grade` runs the
  same check in the grader's own process, on other inputs, against the function running in the sandbox.
- every explanatory cell [locked, ``locked_<cell id>``], so nbgrader's checksums restore and report edits.

``<key>`` is the check's name plus its literal arguments (``check_attention_weights``,
``check_prediction_03_scale_by_dk``). Points, by kind (:func:`default_points`): an implementation check
(a function the student writes, tested on fresh inputs) is worth :data:`IMPLEMENTATION_POINTS`, a prediction
(``check_prediction``: a letter or a number, graded on completion) :data:`PREDICTION_POINTS`;
``classroom/points.toml`` (``check_name = points`` or ``grade_id = points``, optional) overrides either.
"""

from __future__ import annotations

import ast
import copy
import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path

# An implementation is worth more than a letter: writing and debugging a function that passes fresh inputs is
# most of a notebook's exercise time, while a prediction takes a minute and is graded on completion. At 10 to 1 the
# 19 predictions are 19 of 349 autograded points (5 %), so completion credit cannot carry a grade (at 3 to 1 they
# were 19 of 118, 16 %, for any answer). docs/teaching.md, "Points per exercise"; tests/course/test_points.py.
PREDICTION_POINTS = 1
IMPLEMENTATION_POINTS = 10
CHECK_PREFIX = "attn_lib.course.exercises.check_"
SCHEMA = 3


class SourceError(ValueError):
    """A course notebook or its solutions do not have the structure this module derives exercises from."""


@dataclass(frozen=True)
class Check:
    """One ``attn_lib.course.exercises.check_*`` statement of a cell."""

    name: str  # "check_attention_weights"
    args: str  # source of the arguments, "attention_weights"
    key: str  # grade id: name + literal arguments
    first_line: int  # 0-based line span of the statement in the cell
    last_line: int


@dataclass(frozen=True)
class Exercise:
    key: str
    points: int
    stub: str
    solution: str
    checks: tuple[Check, ...]
    rest: tuple[str, ...]  # the exercise cell's lines from its first check on, checks replaced later


def _dotted(node: ast.AST) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


def _slug(value) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "_", str(value)).strip("_")


def find_checks(source: str) -> list[Check]:
    """The top-level statements of a cell that call ``attn_lib.course.exercises.check_*``, in order."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    checks = []
    for stmt in tree.body:
        for node in ast.walk(stmt):
            if isinstance(node, ast.Call) and (_dotted(node.func) or "").startswith(CHECK_PREFIX):
                name = _dotted(node.func)[len("attn_lib.course.exercises."):]
                literals = [a.value for a in node.args if isinstance(a, ast.Constant)]
                key = "_".join([name] + [_slug(v) for v in literals if _slug(v)])
                args = ", ".join(ast.get_source_segment(source, a) for a in [*node.args, *node.keywords])
                checks.append(Check(name, args, key, stmt.lineno - 1, stmt.end_lineno - 1))
                break
    return checks


def _text(cell) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else src


def _points_table(path: Path | None) -> dict[str, int]:
    if path is None or not path.exists():
        return {}
    import tomllib

    table = tomllib.loads(path.read_text())
    return {str(k): int(v) for k, v in table.items()}


def default_points(check_name: str) -> int:
    """Points of a graded check when ``points.toml`` does not name it: :data:`PREDICTION_POINTS` for
    ``check_prediction``, :data:`IMPLEMENTATION_POINTS` for every other ``check_*``."""
    return PREDICTION_POINTS if check_name == "check_prediction" else IMPLEMENTATION_POINTS


def _registry_solution(check: Check, stub: str) -> str | None:
    """``<variable> = <answer>`` for a check_prediction whose question is in attn_lib's registry."""
    if check.name != "check_prediction":
        return None
    try:
        from attn_lib.course.exercises import concepts
    except ImportError:
        return None
    call = ast.parse(f"f({check.args})").body[0].value
    if len(call.args) != 2 or not isinstance(call.args[0], ast.Constant) or not isinstance(call.args[1], ast.Name):
        return None
    concepts._load_all()
    question = concepts.QUESTIONS.get(call.args[0].value)
    return None if question is None else f"{call.args[1].id} = {question.answer!r}"


def exercises_of(course_nb: dict, solutions_nb: dict, *, points: dict[str, int] | None = None,
                 where: str = "") -> dict[int, Exercise]:
    """cell index in ``course_nb`` -> its :class:`Exercise`.

    Raises:
        SourceError: an exercise has no solution cell, or a key repeats within the notebook.
    """
    points = points or {}
    solutions: dict[str, tuple[str, Check]] = {}
    for cell in solutions_nb["cells"]:
        if cell["cell_type"] != "code":
            continue
        src = _text(cell)
        found = find_checks(src)
        if found:
            lines = src.split("\n")
            solutions.setdefault(found[0].key, ("\n".join(lines[: found[0].first_line]).strip("\n"), found[0]))
    result, seen = {}, set()
    for i, cell in enumerate(course_nb["cells"]):
        if cell["cell_type"] != "code":
            continue
        src = _text(cell)
        found = find_checks(src)
        if not found:
            continue
        key = found[0].key
        if key in seen:
            raise SourceError(f"{where}: the check {key} appears in two exercise cells; give each its own arguments")
        seen.add(key)
        lines = src.split("\n")
        stub = "\n".join(lines[: found[0].first_line]).rstrip()
        if key in solutions:
            solution = solutions[key][0]
        else:
            solution = _registry_solution(found[0], stub)
            if solution is None:
                raise SourceError(f"{where}: exercise cell {i} calls {found[0].name}({found[0].args}) but the solutions "
                                  f"notebook has no code cell making the same call")
        pts = sum(points.get(c.key, points.get(c.name, default_points(c.name))) for c in found)
        result[i] = Exercise(key, pts, stub, solution, tuple(found), tuple(lines[found[0].first_line:]))
    return result


def _meta(cell: dict, **nbgrader) -> dict:
    cell = copy.deepcopy(cell)
    cell.setdefault("metadata", {})["nbgrader"] = {"schema_version": SCHEMA, "grade": False, "solution": False,
                                                   "locked": False, **nbgrader}
    return cell


def _code_cell(source: str, template: dict) -> dict:
    cell = {"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [], "source": source}
    if "id" in template:
        cell["id"] = template["id"]
    return cell


def _cell_id(cell: dict, index: int, text: str) -> str:
    return _slug(cell.get("id") or hashlib.sha1(f"{index}:{text}".encode()).hexdigest()[:10])


def test_source(ex: Exercise) -> str:
    """The graded test cell: the visible check, asserted (the grader runs its own copy when grading)."""
    rest = list(ex.rest)
    offset = ex.checks[0].first_line
    out = [f"# Graded check ({ex.points} point{'s' if ex.points != 1 else ''}): when your work is graded, "
           "the grader runs this check itself, on other inputs."]
    i = 0
    while i < len(rest):
        check = next((c for c in ex.checks if c.first_line - offset == i), None)
        if check is None:
            out.append(rest[i])
            i += 1
            continue
        out += [f"_check_result = attn_lib.course.exercises.{check.name}({check.args})",
                "assert _check_result, str(_check_result)"]
        i = check.last_line - offset + 1
    while out and not out[-1].strip():
        out.pop()
    return "\n".join(out + ["_check_result"])


def source_notebook(course_nb: dict, solutions_nb: dict, *, points: dict[str, int] | None = None,
                    where: str = "") -> dict:
    """The nbgrader source version of one course notebook (a new dict; the inputs are not changed)."""
    exercises = exercises_of(course_nb, solutions_nb, points=points, where=where)
    nb = copy.deepcopy(course_nb)
    cells = []
    for i, cell in enumerate(course_nb["cells"]):
        if i in exercises:
            ex = exercises[i]
            answer = _code_cell(f"{ex.stub}\n### BEGIN SOLUTION\n{ex.solution}\n### END SOLUTION", cell)
            cells.append(_meta(answer, solution=True, grade_id=f"answer_{ex.key}"))
            test = _code_cell(test_source(ex), {})
            if "id" in cell:
                test["id"] = f"{cell['id']}-check"[:64]
            cells.append(_meta(test, grade=True, locked=True, points=ex.points, grade_id=ex.key))
        else:
            cell = copy.deepcopy(cell)
            if cell["cell_type"] == "code":
                cell["outputs"], cell["execution_count"] = [], None
            cells.append(_meta(cell, locked=True, grade_id=f"locked_{_cell_id(cell, i, _text(cell))}"))
    nb["cells"] = cells
    return nb


@dataclass(frozen=True)
class Assignment:
    name: str  # the notebook's stem: "03_scaled_dot_product_attention"
    notebook: Path
    solutions: Path
    exercises: tuple[Exercise, ...]


def course_assignments(notebooks: Path, *, points_file: Path | None = None) -> list[Assignment]:
    """One assignment per course notebook that has exercises (``NN_*.ipynb`` with a ``solutions/`` partner)."""
    points = _points_table(points_file)
    out = []
    for nb_path in sorted(notebooks.glob("[0-9][0-9]_*.ipynb")):
        sol_path = notebooks / "solutions" / f"{nb_path.stem}_solutions.ipynb"
        course = json.loads(nb_path.read_text())
        if not any(find_checks(_text(c)) for c in course["cells"] if c["cell_type"] == "code"):
            continue
        if not sol_path.exists():
            raise SourceError(f"{nb_path}: has exercises but no {sol_path}")
        ex = exercises_of(course, json.loads(sol_path.read_text()), points=points, where=str(nb_path))
        out.append(Assignment(nb_path.stem, nb_path, sol_path, tuple(ex.values())))
    return out


def write_sources(notebooks: Path, source_dir: Path, *, points_file: Path | None = None) -> list[Assignment]:
    """Write ``source_dir/<assignment>/<assignment>.ipynb`` for every course notebook with exercises."""
    points = _points_table(points_file)
    assignments = course_assignments(notebooks, points_file=points_file)
    for a in assignments:
        nb = source_notebook(json.loads(a.notebook.read_text()), json.loads(a.solutions.read_text()),
                             points=points, where=str(a.notebook))
        out = source_dir / a.name / a.notebook.name
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n")
    return assignments
