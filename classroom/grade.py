"""Grade one submitted notebook: its code runs in a sandbox, the checks run here, in the grader's process.

For each graded check cell of the release, in notebook order, the runner in the sandbox (:mod:`classroom.runner`)
stops after the cells before it; the grader asks for the check's arguments there (a function comes back as a
handle), calls the pristine ``attn_lib.course.exercises.check_*`` of this process with a :class:`RemoteFunction` in place
of the student's function, and so makes the inputs, sends them, gets the outputs back as arrays and compares them
here. The expected values never leave this process. The inputs are drawn from other seeds than the notebook's
visible checks: their seeds are salted with a secret that :mod:`classroom.autograde` draws for each run, outside
the sandbox (the job file is in the grader's own temporary folder), so a student who reads this file still cannot
predict them (issue 41 §5).

Predictions (``check_prediction``) are graded on **completion**: a valid answer (one of the choices, or a number)
earns the point, right or wrong; the feedback says which. The answers are not in the sandbox.

A cell that kills the notebook's process or runs past the hard time limit is skipped and the notebook runs again
from the top (at most :data:`MAX_RESTARTS` times); checks already graded keep their result. A function that hangs
or breaks the protocol fails its own check only.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from pathlib import Path

from classroom import sandbox as sb_mod
from classroom import wire
from classroom.source import find_checks

MAX_RESTARTS = 4
SALT = "graded"  # only when no run's salt is given (a direct call of grade_notebook)
GRACE_S = 15  # the hard limit of a cell: the runner's own limit plus this


def _text(cell) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else str(src)


def _meta(cell) -> dict:
    m = cell.get("metadata", {}) if isinstance(cell, dict) else {}
    m = m.get("nbgrader", {}) if isinstance(m, dict) else {}
    return m if isinstance(m, dict) else {}


def plan_cells(submitted: dict, released: dict) -> tuple[list[dict], dict[str, dict]]:
    """The cells to run, in the release's order: locked cells as released (a student's edit is undone), answer
    cells as submitted (the release's stub if deleted), the student's added code cells after the cell they
    followed; graded check cells as markers. And grade id -> {points, checks: [(name, argument sources)]}."""
    sub_cells = [c for c in submitted.get("cells", []) if isinstance(c, dict)] if isinstance(submitted, dict) else []
    released_ids = [_meta(c).get("grade_id") for c in released["cells"]]
    answers, extras, last = {}, {}, None
    for c in sub_cells:
        gid = _meta(c).get("grade_id")
        if gid in released_ids:
            last = gid
            answers.setdefault(gid, c)
        elif c.get("cell_type") == "code":
            extras.setdefault(last, []).append(_text(c))
    cells = [{"kind": "code", "source": s, "grade_id": None} for s in extras.get(None, [])]
    exercises = {}
    for c in released["cells"]:
        meta = _meta(c)
        gid = meta.get("grade_id")
        if meta.get("grade"):
            checks = [(k.name, k.args) for k in find_checks(_text(c))]
            exercises[gid] = {"points": float(meta.get("points", 0)), "checks": checks}
            cells.append({"kind": "graded", "grade_id": gid, "source": ""})
        elif c.get("cell_type") == "code":
            source = _text(answers[gid]) if meta.get("solution") and gid in answers else _text(c)
            cells.append({"kind": "code", "source": source, "grade_id": gid})
        for s in extras.get(gid, []):
            cells.append({"kind": "code", "source": s, "grade_id": None})
    return cells, exercises


def _split_args(args: str) -> list[str]:
    import ast

    call = ast.parse(f"f({args})", mode="eval").body
    return [ast.unparse(a) for a in call.args]


# ------------------------------------------------------------------------------------- the checks, here
def _salt_checks(salt: str = SALT) -> None:
    import sys

    import attn_lib.course.exercises  # noqa: F401 - every check module
    import attn_lib.course.mine  # noqa: F401 - and the pieces' (classroom/pieces.py)

    for name, mod in list(sys.modules.items()):
        if name.startswith("attn_lib.course.exercises") and mod is not None and hasattr(mod, "fresh_generator") \
                and not getattr(mod.fresh_generator, "_salted", False):
            original = mod.fresh_generator

            def salted(check_name, *a, _original=original, **k):
                return _original(f"{check_name}#{salt}", *a, **k)

            salted._salted = True
            mod.fresh_generator = salted


def _references(check_name: str) -> set[str]:
    """The functions of attn_lib's core that the check ``check_name`` compares with: what its module imports from
    them (``attn_lib.attention.scaled_dot_product_attention`` for ``check_attention``)."""
    import inspect
    import sys

    import attn_lib.course.exercises as exercises

    check = getattr(exercises, check_name, None)
    module = sys.modules.get(getattr(check, "__module__", ""), None)
    if module is None:
        return set()
    out = set()
    for value in vars(module).values():
        if inspect.isfunction(value) and value.__module__.startswith("attn_lib.") \
                and not value.__module__.startswith(("attn_lib.course.exercises", "attn_lib._checks")):
            out.add(f"{value.__module__}.{value.__name__}")
    return out


REFERENCE_NAME = re.compile(r"attn_lib(\.[A-Za-z_][A-Za-z0-9_]{0,60}){1,4}")


class SandboxGone(Exception):
    pass


def _remote_error(reply: dict) -> BaseException:
    """The student's exception as one the check understands (its type name and message; no traceback object)."""
    import builtins

    name = re.sub(r"\W", "", str(reply.get("type", "Exception")))[:60] or "Exception"
    msg = str(reply.get("msg", ""))[:2000]
    where = str(reply.get("where", ""))[:200]
    text = f"{msg} ({where})" if where else msg
    cls = getattr(builtins, name, None)
    if name == "NotImplementedError":
        return NotImplementedError(text)
    if not (isinstance(cls, type) and issubclass(cls, Exception)) or name in ("StopIteration",):
        cls = type(name, (Exception,), {})
    try:
        return cls(text)
    except Exception:  # noqa: BLE001 - an exception class whose constructor wants other arguments
        return type(name, (Exception,), {})(text)


class RemoteFunction:
    """Stands for the student's function: a call sends the inputs to the sandbox and returns its outputs."""

    def __init__(self, box, number: int, name: str):
        self.box, self.number, self.__name__ = box, number, name

    def __call__(self, *args):
        from attn_lib.course.exercises import _core

        if self.box.dead:
            raise SandboxGone("your notebook's process had stopped")
        arrays: list = []
        memo = wire.new_memo()  # an optimiser names the parameters of a model sent before it
        self.box.send({"op": "call", "fn": self.number, "args": [wire.encode(a, arrays, memo=memo) for a in args]},
                      arrays)
        try:
            reply, data = self.box.receive(timeout=max(_core.TIME_LIMIT_S, 1) + 10)
        except wire.Timeout:
            raise _core._TimeLimit() from None
        except wire.WireError as e:
            raise SandboxGone(f"your function stopped the notebook's process ({e})") from None
        if not reply.get("ok"):
            raise _remote_error(reply)
        used = reply.get("used", [])
        for name in used if isinstance(used, list) else []:
            name = str(name)
            if REFERENCE_NAME.fullmatch(name) or name == "(the grader's watch was turned off)":
                self.box.reference_calls.add(name)  # checked names only: no student text reaches a flag
            else:
                self.box.reference_calls.add("(a malformed report)")
        try:
            result = wire.decode(reply.get("result"), data)
            after = [wire.decode(a, data) for a in reply.get("after", [])]
        except wire.WireError as e:
            raise SandboxGone(f"your function's result could not be read ({e})") from None
        for original, now in zip(args, after):  # a change in place, as the check would have seen it
            _apply_in_place(original, now)
        return result


def _apply_in_place(original, now) -> None:
    import torch

    try:
        if isinstance(original, torch.nn.Module) and isinstance(now, wire.ModuleState):
            with torch.no_grad():  # by name and shape only: the sandbox's values, never its code
                for name, p in original.named_parameters():
                    new = now.params.get(name)
                    if isinstance(new, torch.Tensor) and new.shape == p.shape:
                        p.copy_(new.to(p.dtype))
                for name, b in original.named_buffers():
                    new = now.buffers.get(name)
                    if b is not None and isinstance(new, torch.Tensor) and new.shape == b.shape:
                        b.copy_(new.to(b.dtype))
        elif isinstance(original, torch.Generator) and isinstance(now, torch.Generator):
            original.set_state(now.get_state())
        elif isinstance(original, torch.Tensor) and isinstance(now, torch.Tensor):
            if now.shape == original.shape and now.dtype == original.dtype:
                original.copy_(now)
            else:
                original.set_(now.to(original.dtype) if now.dtype != original.dtype else now)
        elif type(original) is list and type(now) is list:
            original[:] = now
        elif type(original) is dict and type(now) is dict:
            original.clear()
            original.update(now)
    except Exception:  # noqa: BLE001
        pass


def prediction_completion(question_id, answer) -> tuple[bool, str]:
    from attn_lib.course.exercises.concepts import QUESTIONS, _load_all, check_prediction

    _load_all()
    q = QUESTIONS.get(question_id)
    if q is None:
        return False, f"the grader has no question {question_id!r}"
    if isinstance(answer, wire.Opaque) or answer is None or answer is Ellipsis:
        return False, f"❌ check_prediction({question_id!r}): not answered (0 points: predictions count when answered)."
    feedback = check_prediction(question_id, answer).message
    if q.choices:
        valid = isinstance(answer, str) and answer.strip().lower() in q.choices
    else:
        valid = isinstance(answer, (int, float)) and not isinstance(answer, bool)
    if not valid:
        return False, f"{feedback} (not a valid answer: 0 points)"
    return True, f"{feedback} (a prediction counts when answered: full points)"


def grade_check(box, name: str, args: str) -> tuple[bool, str]:
    import attn_lib.course.exercises as exercises

    box.send({"op": "values", "args": _split_args(args)})
    try:
        reply, data = box.receive(timeout=60)
    except wire.Timeout:
        return False, f"❌ {name}: evaluating its arguments did not finish."
    if not reply.get("ok"):
        return False, f"❌ {name}: {_remote_error(reply).__class__.__name__}: {reply.get('msg', '')}"[:2000]
    values = []
    for v, expr in zip(reply.get("values", []), _split_args(args)):
        value = wire.decode(v, data)
        values.append(RemoteFunction(box, value.number, expr) if isinstance(value, wire.Handle) else value)
    if name == "check_prediction":
        return prediction_completion(*values[:2]) if len(values) >= 2 else (False, "malformed check")
    check = getattr(exercises, name, None)
    if check is None:  # a piece of the student's my_attn/ (classroom/pieces.py)
        from classroom import pieces

        check, values = pieces.check_for(name), pieces.keyword_calls(values)
    if not name.startswith("check_") or check is None:
        return False, f"the grader has no check {name!r}"
    try:
        result = check(*values)
    except SandboxGone as e:
        return False, f"❌ {name}: {e}."
    except Exception as e:  # noqa: BLE001 - the check failed on a grader-side problem
        return False, f"❌ {name}: could not be graded ({type(e).__name__}: {e})"
    if box.dead:  # the call that timed out or broke the protocol ended the sandbox
        return False, result.message if not result.passed else f"❌ {name}: the notebook's process stopped."
    return bool(result.passed is True), result.message


# ------------------------------------------------------------------------------------- one notebook
def grade_notebook(submitted: dict, released: dict, library: Path, *, cell_timeout: float,
                   budget_s: float, limits=None, salt: str = SALT) -> dict:
    """{"scores": {grade id: points}, "max": {...}, "messages": {...}, "cells": [...], "flags": [...]}

    The cell records and the flags are the grader's own: a record is kept only for the cell the grader saw start
    and only once (a second record, or one for another cell, is a flag, not a record), and a flag never quotes
    the student's text (issue 41 §5)."""
    _salt_checks(salt)
    cells, exercises = plan_cells(submitted, released)
    results: dict[str, tuple[float, str]] = {}
    outputs: dict[int, dict] = {}
    flags: list[str] = []
    skip: set[int] = set()
    deadline = time.monotonic() + budget_s
    restarts = 0
    while len(results) < len(exercises):
        pending = [k for k in exercises if k not in results]
        box = sb_mod.Sandbox(library, limits=limits)
        current, grading = None, None
        recorded: set[int] = set()  # cells recorded in this run of the notebook
        try:
            box.send({"cells": cells, "skip": sorted(skip), "serve": pending, "cell_timeout": cell_timeout})
            box.receive(timeout=120)  # ready
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise wire.Timeout("the submission's time budget is spent")
                msg, _ = box.receive(timeout=min(left, cell_timeout + GRACE_S))
                ev = msg.get("ev")
                if ev == "start":
                    current = int(msg.get("index", -1))
                elif ev == "cell":
                    idx = msg.get("index", -1)
                    idx = idx if isinstance(idx, int) and not isinstance(idx, bool) else -1
                    if idx != current or idx in recorded:  # a record the runner did not send for this cell
                        note = "the notebook's process sent a cell record it was not asked for (forged?)"
                        if note not in flags:
                            flags.append(note)
                        if idx in recorded:  # two records of one cell: neither is believed
                            outputs[idx] = {"status": "forged", "output": "", "error": (
                                "this cell sent more than one record of what it did (a forged record?); "
                                "neither is shown")}
                        continue
                    recorded.add(idx)
                    if 0 <= idx < len(cells):
                        outputs.setdefault(idx, {"status": str(msg.get("status"))[:20],
                                                 "error": str(msg.get("error", ""))[:2000],
                                                 "output": str(msg.get("output", ""))[:20_000]})
                        if msg.get("status") == "timeout" and f"cell {idx} ran past" not in " ".join(flags):
                            flags.append(f"cell {idx} ran past the time limit ({cell_timeout:g} s)")
                    current = None
                elif ev == "exercise":
                    key = msg.get("key")
                    if key in exercises and key not in results:
                        grading = key
                        ok_all, messages = True, []
                        for name, args in exercises[key]["checks"]:
                            box.reference_calls = set()
                            ok, message = grade_check(box, name, args)
                            ok_all, messages = ok_all and ok, messages + [message]
                            hits = (box.reference_calls & _references(name)) | (
                                box.reference_calls - {n for n in box.reference_calls if n.startswith("attn_lib")})
                            if hits:
                                flags.append(f"{key}: the graded function called the check's own reference, "
                                             f"{', '.join(sorted(hits)[:5])}")
                            if box.dead:
                                break
                        results[key] = (exercises[key]["points"] if ok_all else 0.0, " ".join(messages))
                        if box.dead:
                            raise wire.Closed("the sandbox stopped during a check")
                        grading = None
                    box.send({"op": "next"})
                elif ev == "done":
                    break
                else:
                    raise wire.WireError("an unexpected message")  # its text is the student's: not quoted
        except wire.WireError as e:
            why = "ran past the hard time limit" if isinstance(e, wire.Timeout) else "stopped the notebook's process"
            if grading is not None and grading not in results:
                results[grading] = (0.0, f"❌ grading this check {why}.")
            if current is not None:
                skip.add(current)
                flags.append(f"cell {current} {why}; graded again without it")
            elif grading is None:
                flags.append(f"the notebook's process {why} ({e})")
        finally:
            box.kill()
        if len(results) == len(exercises) or (current is None and grading is None):
            break
        restarts += 1
        if restarts > MAX_RESTARTS or time.monotonic() > deadline:
            flags.append("gave up after too many restarts" if restarts > MAX_RESTARTS else "time budget spent")
            break
    for key in exercises:
        if key not in results:
            results[key] = (0.0, "could not grade: the notebook stopped before this check")
    return {"scores": {k: v[0] for k, v in results.items()}, "max": {k: e["points"] for k, e in exercises.items()},
            "messages": {k: v[1] for k, v in results.items()},
            "cells": [{"index": i, "grade_id": c.get("grade_id"), "source": c["source"][:20_000], **outputs[i]}
                      for i, c in enumerate(cells) if i in outputs and _is_students(c, released)],
            "flags": flags}


def _is_students(cell: dict, released: dict) -> bool:
    gid = cell.get("grade_id")
    if gid is None:
        return True
    return any(_meta(c).get("grade_id") == gid and _meta(c).get("solution") for c in released["cells"])


def digest(*parts: bytes) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(hashlib.sha256(p).digest())
    return h.hexdigest()


def load_json(path: Path):
    return json.loads(Path(path).read_text())


GRADER_MEMORY = int(__import__("os").environ.get("ATTN_GRADER_MEMORY", 8 * 1024 ** 3))


def _limit_self() -> None:
    """The grade process: dies with the autograde process that started it (Ctrl-C, ``kill -9``: its sandbox goes
    with it, ``--die-with-parent``), and its own memory is limited (the soft limit of its address space; the
    sandbox sets its own)."""
    import os
    import resource

    from classroom.sandbox import _die_with_parent

    _die_with_parent()
    if os.getppid() == 1:  # the parent was already gone
        os._exit(1)
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    if hard == resource.RLIM_INFINITY or hard >= GRADER_MEMORY:
        resource.setrlimit(resource.RLIMIT_AS, (GRADER_MEMORY, hard))


def main(argv=None) -> int:
    """python -m classroom.grade JOB.json RESULT.json: grade one notebook (a process of its own per submission)."""
    import sys

    argv = sys.argv[1:] if argv is None else argv
    job = load_json(Path(argv[0]))
    _limit_self()
    result = grade_notebook(job["submitted"], job["released"], Path(job["library"]),
                            cell_timeout=float(job["cell_timeout"]), budget_s=float(job["budget_s"]),
                            salt=str(job.get("salt", SALT)))
    tmp = Path(argv[1]).with_suffix(".tmp")
    tmp.write_text(json.dumps(result))  # ASCII: a lone surrogate a student printed is escaped, not an error
    tmp.replace(argv[1])
    return 0


if __name__ == "__main__":
    import sys

    sys.exit(main())
