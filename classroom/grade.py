"""Grade one submitted notebook: its code runs in a sandbox, the checks run here, in the grader's process.

For each graded check cell of the release, in notebook order, the runner in the sandbox (:mod:`classroom.runner`)
stops after the cells before it; the grader asks for the check's arguments there (a function comes back as a
handle), calls the pristine ``attn_lib.course.exercises.check_*`` of this process with a :class:`RemoteFunction` in place
of the student's function, and so makes the inputs, sends them, gets the outputs back as arrays and compares them
here. The expected values never leave this process. The inputs are drawn from other seeds than the notebook's
visible checks: their seeds are salted with a secret that :mod:`classroom.autograde` draws for each run, outside
the sandbox (the job file is in the grader's own temporary folder), so a student who reads this file still cannot
predict them (issue 41 §5).

A class piece of the student's ``my_attn`` (classroom/pieces.py) is handed to its check as a :class:`RemoteObject`:
the class and every object made from it stay in the sandbox, in the runner's table, and the check calls them, their
methods and reads their plain attributes by name; what the in-process checks watch in their own process (attn_lib's
own ``forward`` run on the student's object, torch's fused attention, the student's own SDPA) is reported by the
runner and judged here (:data:`REFUSED`).

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
from dataclasses import dataclass
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
            cells.append({"kind": "code", "source": source, "grade_id": gid, "students": bool(meta.get("solution"))})
        for s in extras.get(gid, []):
            cells.append({"kind": "code", "source": s, "grade_id": None})
    return cells, exercises


# ------------------------------------------------------------------------------------- what the checks need
# A submission is graded by its checks, not by the notebook's demonstrations: the locked cells that no student cell
# and no check argument depends on (plots, the pretrained model's tour, timing tables) are not run. What a cell
# defines and reads is read from its syntax; anything the syntax cannot tell (a star import, exec, globals(), a
# magic, a cell that does not parse) in a student's cell means every cell runs, as before.
DYNAMIC_NAMES = frozenset({"globals", "locals", "vars", "eval", "exec", "execfile", "get_ipython", "__import__",
                           "__builtins__", "builtins", "dir", "importlib", "runpy", "sys", "inspect", "__main__"})
DYNAMIC_ATTRS = frozenset({"__dict__", "__globals__", "__builtins__", "f_globals", "f_locals", "user_ns"})
# a statement such as ``attn_lib.setup()`` or ``torch.set_default_dtype(...)``: global state the student's code sees
STATE_CALL = re.compile(r"(set|setup|seed|manual_seed|use_|enable|disable|_set|install|register|patch|config)")
EVERY_CELL = "ATTN_GRADE_EVERY_CELL"  # set to 1: run every cell of the notebook, needed or not


@dataclass(frozen=True)
class CellNames:
    defines: frozenset
    reads: frozenset
    imports: frozenset  # names bound by an import statement
    state: frozenset  # the roots of top-level calls that may set global state (``torch`` of torch.manual_seed(0))
    dynamic: bool  # what it defines or reads cannot be told from its syntax


def cell_names(source: str) -> CellNames:
    """What a cell defines and reads at the notebook's level, by name, from its syntax after IPython's own
    transforms (magics become calls): Python's own scopes (:mod:`symtable`) say which names a function reads from
    the notebook (its parameters and locals are its own); over-approximated where unsure (``x += 1`` reads x)."""
    import ast
    import symtable

    try:
        from IPython.core.inputtransformer2 import TransformerManager

        code = TransformerManager().transform_cell(source)
        tree = ast.parse(code)
        top = symtable.symtable(code, "<cell>", "exec")
    except Exception:  # noqa: BLE001 - a cell that does not parse: its names are unknown
        return CellNames(frozenset(), frozenset(), frozenset(), frozenset(), True)
    defines, reads, imports, dynamic, state = set(), set(), set(), False, set()
    for sym in top.get_symbols():
        if sym.is_referenced():
            reads.add(sym.get_name())
        if sym.is_assigned() or sym.is_imported() or sym.is_namespace():
            defines.add(sym.get_name())
    stack = list(top.get_children())
    while stack:  # functions, classes, comprehensions: what they read from, or bind in, the notebook
        table = stack.pop()
        stack += table.get_children()
        for sym in table.get_symbols():
            if sym.is_global() or (table.get_type() == "class" and not sym.is_assigned() and not sym.is_free()):
                if sym.is_referenced():
                    reads.add(sym.get_name())
                if sym.is_declared_global() and (sym.is_assigned() or sym.is_imported() or sym.is_namespace()):
                    defines.add(sym.get_name())
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id in DYNAMIC_NAMES:
            dynamic = True
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                if alias.name == "*":
                    dynamic = True
                imports.add(alias.asname or alias.name.split(".")[0])
        elif isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name):
            reads.add(node.target.id)  # x += 1 reads x
        if isinstance(node, ast.Attribute) and node.attr in DYNAMIC_ATTRS:
            dynamic = True  # f.__globals__, get_ipython().user_ns, ...
    for stmt in tree.body:
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call) \
                and isinstance(stmt.value.func, ast.Attribute) and STATE_CALL.match(stmt.value.func.attr):
            root = stmt.value.func
            while isinstance(root, (ast.Attribute, ast.Call)):
                root = root.value if isinstance(root, ast.Attribute) else root.func
            if isinstance(root, ast.Name):
                state.add(root.id)
    return CellNames(frozenset(defines), frozenset(reads), frozenset(imports), frozenset(state), dynamic)


def not_needed(cells: list[dict], exercises: dict[str, dict]) -> set[int]:
    """The indices of the locked cells that nothing graded needs: no student cell, no check's arguments and no
    needed cell after it reads a name it defines or changes, and it sets no global state. Empty (every cell runs)
    when a student's cell hides what it reads (see :data:`DYNAMIC_NAMES`) or :data:`EVERY_CELL` is set."""
    import builtins
    import os

    if os.environ.get(EVERY_CELL) == "1":
        return set()
    names = [cell_names(c["source"]) if c["kind"] == "code" else None for c in cells]
    defined = set().union(*(n.defines for n in names if n))
    ignore = set(dir(builtins)) - defined  # print, len: never wanted unless a cell rebinds them
    imported = set().union(*(n.imports for n in names if n))
    modules = imported - set().union(*(n.defines - n.imports for n in names if n))  # bound by imports only
    wanted: set[str] = set()
    skipped: set[int] = set()
    for i in range(len(cells) - 1, -1, -1):
        cell, n = cells[i], names[i]
        if cell["kind"] == "graded":
            for _, args in exercises.get(cell["grade_id"], {}).get("checks", []):
                a = cell_names(f"__check__({args})")
                if a.dynamic:
                    return set()
                wanted |= a.reads - {"__check__"} - ignore
            continue
        if cell.get("students", True):
            if n.dynamic:
                return set()
            wanted |= n.reads - ignore
            continue
        needed = n.dynamic or bool(n.state & imported) or bool(n.defines & wanted) or bool((n.reads & wanted) - modules)
        if needed:
            wanted |= n.reads - ignore
        else:
            skipped.add(i)
    return skipped


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


REFERENCE_NAME = re.compile(r"attn_lib(\.[A-Za-z_][A-Za-z0-9_]{0,60}){1,6}")
# attn_lib's code that a graded function may run by itself (the runner reports every entry into attn_lib's code,
# classroom.runner._watch_reference_calls): the package's lazy attributes and argument checks, always; and, for the
# checks that hand the student attn_lib's own objects, their parts: notebook 10's decoder_block uses block.attn,
# block.norm1, block.ffn (never block(x), LMBlock.forward, the reference), train_step and sample call the model
# and the course's copy_loss. Every other entry is flagged: the reference of a graded piece is somewhere in attn_lib.
ALWAYS_ALLOWED = re.compile(r"attn_lib(\.\w+)*\.__getattr__|attn_lib\._checks\.\w+")
ALLOWED = {
    "check_decoder_block": re.compile(r"attn_lib\.(?!models\.lm\.LMBlock\.forward$)(mha|models\.blocks|models\.lm|"
                                      r"variants|positional|attention|gqa|kv_cache)\.[\w.]+"),
    "check_train_step": re.compile(r"attn_lib\.(models\.lm\.DecoderLM\.(forward|_run|_mask|blocks|head_dim|num_\w+)|"
                                   r"course\.capstone\.(copy_loss|_check_batch))"),
    "check_sample": re.compile(r"attn_lib\.models\.lm\.DecoderLM\.(forward|_run|_mask)"),
}
# notebook 05's exercise 2 says "you may use split_heads and merge_heads (attn_lib's, or your own)": the reshapes
# are given, the attention is the student's
ALLOWED["check_multi_head_attention"] = re.compile(r"attn_lib\.mha\.(split_heads|merge_heads)")
# notebook 14's ring step: its hint hands the block's attention to attn_lib's tiled_attention; the exercise is the
# visibility rule and the merge
ALLOWED["check_ring_step"] = re.compile(r"attn_lib\.tiled\.tiled_attention")
# the my_attn package's decoder (classroom/pieces.py): attn_lib's DecoderLM runs the student's LMBlock, whose
# parts may be attn_lib's, as in check_decoder_block; attn_lib's LMBlock.forward stays flagged
ALLOWED["check_piece_decoder_training"] = ALLOWED["check_decoder_block"]


_KNOWN: dict[str, bool] = {}


def is_library_code(name: str) -> bool:
    """Whether ``name`` (``attn_lib.attention.scaled_dot_product_attention``, ``attn_lib.models.lm.LMBlock.forward``)
    names a function or class of attn_lib's own source: the longest prefix that is a module file of attn_lib, then
    the definitions in it (read with :mod:`ast`, nothing imported). A name the student made up is not, so no
    student text reaches a flag."""
    import ast

    if name in _KNOWN:
        return _KNOWN[name]
    ok = False
    parts = name.split(".")
    lib = Path(__file__).resolve().parent.parent
    for cut in range(len(parts) - 1, 0, -1):
        base = lib.joinpath(*parts[:cut])
        path = base / "__init__.py" if base.is_dir() else base.with_suffix(".py")
        if not path.is_file():
            continue
        try:
            body = ast.parse(path.read_text()).body
        except (OSError, SyntaxError, ValueError):
            break
        for i, part in enumerate(parts[cut:]):
            within = body if i == 0 else [n for n in ast.walk(node) if n is not node]  # nested: any depth
            node = next((n for n in within if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                         and n.name == part), None)
            if node is None:
                break
        else:
            ok = True
        break
    if len(_KNOWN) < 10_000:
        _KNOWN[name] = ok
    return ok


def unexpected_library_calls(check_name: str, calls: set[str]) -> list[str]:
    """The entries into attn_lib's code that a graded function made (as the runner reported them, names checked
    by :data:`REFERENCE_NAME`) and its check does not allow (:data:`ALLOWED`), sorted."""
    allowed = ALLOWED.get(check_name)
    return sorted(n for n in calls if n not in OTHER_REPORTS and (refused_calls(check_name, {n}) or (
        not ALWAYS_ALLOWED.fullmatch(n) and not (allowed and allowed.fullmatch(n)))))


# the runner's other reports (classroom.runner._watch_reference_calls), accepted by these exact names: torch's fused
# attention (which the MultiHeadAttention piece may not call) and the student's own SDPA (which it must call)
OTHER_REPORTS = frozenset({"torch.nn.functional.scaled_dot_product_attention",
                           "torch.nn.functional.multi_head_attention_forward",
                           "my_attn.attention.scaled_dot_product_attention"})
# the class pieces of my_attn (classroom/pieces.py): what their check refuses, as the in-process check's _Refuse and
# its TorchFunctionMode do: attn_lib's own version of the methods the student writes (super().forward, or
# attn_lib's class's forward called on the student's object), and for MultiHeadAttention torch's fused attention.
# Reported by the runner, so a best effort, as the flags are; the points still come from the comparisons.
REFUSED = {
    "check_piece_BPETokenizer": re.compile(r"attn_lib\.tokenization\.BPETokenizer\."
                                           r"(train|tokenize_word|encode|decode)"),
    "check_piece_MultiHeadAttention": re.compile(r"attn_lib\.mha\.MultiHeadAttention\.forward|"
                                                   r"torch\.nn\.functional\.\w+"),
    "check_piece_EncoderBlock": re.compile(r"attn_lib\.models\.blocks\.EncoderBlock\.forward"),
    "check_piece_DecoderBlock": re.compile(r"attn_lib\.models\.blocks\.DecoderBlock\.forward"),
    "check_piece_KVCache": re.compile(r"attn_lib\.kv_cache\.KVCache\.\w+"),
    "check_piece_LMBlock": re.compile(r"attn_lib\.models\.lm\.LMBlock\.forward"),
    "check_piece_DecoderLM": re.compile(r"attn_lib\.models\.lm\.DecoderLM\.(forward|_run)"),
    "check_piece_RingKVCache": re.compile(r"attn_lib\.windows\.RingKVCache\.(update|reset|nbytes|seq_len|positions)"),
}
# what the class pieces' code may run of attn_lib's: the class's own __init__ and argument checks (the student's
# class subclasses attn_lib's and writes the methods above), the helpers its stub imports, and the parts a block
# is made of (attn_lib's MultiHeadAttention inside an EncoderBlock, its KVCache, ...); REFUSED above wins
ALLOWED["check_piece_BPETokenizer"] = re.compile(r"attn_lib\.tokenization\.[\w.]+")
ALLOWED["check_piece_MultiHeadAttention"] = re.compile(r"attn_lib\.(mha|masks|positional|kv_cache)\.[\w.]+")
ALLOWED["check_piece_EncoderBlock"] = ALLOWED["check_piece_DecoderBlock"] = ALLOWED["check_decoder_block"]
ALLOWED["check_piece_LMBlock"] = ALLOWED["check_decoder_block"]
ALLOWED["check_piece_DecoderLM"] = re.compile(r"attn_lib\.(mha|models\.lm|variants|positional|attention|gqa|kv_cache|"
                                              r"tiled)\.[\w.]+")  # its layers are attn_lib's LMBlock
ALLOWED["check_piece_KVCache"] = re.compile(r"attn_lib\.kv_cache\.(_check_chunk|KVCacheProtocol[\w.]*)")
ALLOWED["check_piece_RingKVCache"] = re.compile(r"attn_lib\.windows\.RingKVCache\.__init__")


def refused_calls(check_name: str, calls: set[str]) -> list[str]:
    """The reported entries that the class piece's check refuses (:data:`REFUSED`), sorted."""
    refused = REFUSED.get(check_name)
    return sorted(n for n in calls if refused is not None and refused.fullmatch(n))


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
        cls = NotImplementedError
    elif not (isinstance(cls, type) and issubclass(cls, Exception)) or name in ("StopIteration",):
        cls = type(name, (Exception,), {})
    try:
        error = cls(text)
    except Exception:  # noqa: BLE001 - an exception class whose constructor wants other arguments
        error = type(name, (Exception,), {})(text)
    try:
        error._from_sandbox = True  # its traceback is the grader's, not the student's
    except AttributeError:  # pragma: no cover - every builtin exception takes attributes
        pass
    return error


def watched_names(watch: dict, reply: dict) -> set[str] | None:
    """The names of ``watch`` (the grader's own) that the runner's reply says fired, in its ``watched`` list:
    ``torch`` and ``code`` names, and ``library`` names matched by the runner against its entries into attn_lib
    (``"attn_lib.flash.*"``: any entry into that module, ``attn_lib.flash.flash_attention`` or
    ``attn_lib.flash._run``); None when the reply says the watch was turned off during the call, or has no report.
    Only the grader's names come out: no student text becomes a verdict."""
    if reply.get("watch_intact") is not True or not isinstance(reply.get("watched"), list):
        return None
    used = reply.get("used") if isinstance(reply.get("used"), list) else []
    if "(the grader's watch was turned off)" in used:
        return None
    said = {str(n) for n in reply["watched"]}
    return {n for kind in ("torch", "code", "library") for n in watch.get(kind, []) if n in said}


def sandbox_watches(exercises: dict) -> dict:
    """What the runner must set up before the student's first cell for this notebook's checks (merged into its
    plan): a check with a ``sandbox_watch`` (``check_piece_flash_forward``) names the torch functions and the
    Python code it watches during its calls, which the runner resolves before any student code runs
    (:class:`classroom.runner._NamedWatch`), and whether Triton runs interpreted (``TRITON_INTERPRET=1``)."""
    import attn_lib.course.exercises as checks

    from classroom import pieces

    watch: dict[str, list[str]] = {"torch": [], "code": []}
    interpret = False
    for exercise in exercises.values():
        for name, _ in exercise.get("checks", []):
            check = getattr(checks, name, None) or pieces.check_for(name)
            spec = getattr(check, "sandbox_watch", None)
            if callable(spec):
                spec = spec()
                for kind in watch:
                    watch[kind] += [n for n in spec.get(kind, []) if n not in watch[kind]]
                interpret = interpret or bool(spec.get("interpret_triton"))
    if not (watch["torch"] or watch["code"] or interpret):
        return {}
    return {"watch": watch, "interpret_triton": interpret}


class RemoteFunction:
    """Stands for the student's function: a call sends the inputs to the sandbox and returns its outputs."""

    def __init__(self, box, number: int, name: str):
        self.box, self.number, self.__name__ = box, number, name
        # a check's named watch for the next calls ({"torch": [...], "code": [...], "library": [...]}, see
        # watched_call); after each such call, ``fired`` = the watched names that fired, or None if the watch was off
        self.watch, self.fired = None, None

    def __call__(self, *args, **kwargs):
        return self._request(args, kwargs)

    def _request(self, args, kwargs, **extra):
        from attn_lib.course.exercises import _core

        if self.box.dead:
            raise SandboxGone("your notebook's process had stopped")
        calls = getattr(self.box, "remote_calls", 0) + 1
        self.box.remote_calls = calls
        if calls > MAX_REMOTE_CALLS:
            raise SandboxGone(f"the check made more than {MAX_REMOTE_CALLS} calls into the sandbox")
        arrays: list = []
        memo = wire.new_memo()  # an optimiser names the parameters of a model sent before it
        request = {"op": "call", "fn": self.number, "args": [wire.encode(a, arrays, memo=memo) for a in args],
                   **extra}
        if kwargs:  # a check that calls fn(..., scale=s): the keyword arguments travel by name
            request["kwargs"] = {k: wire.encode(v, arrays, memo=memo) for k, v in kwargs.items()}
        if self.watch:
            request["watch"] = [n for k in ("torch", "code", "library") for n in self.watch.get(k, [])]
        self.box.send(request, arrays)
        try:
            reply, data = self.box.receive(timeout=max(_core.TIME_LIMIT_S, 1) + 10)
        except wire.Timeout:
            raise _core._TimeLimit() from None
        except wire.WireError as e:
            raise SandboxGone(f"your function stopped the notebook's process ({e})") from None
        used = reply.get("used", [])
        for name in used if isinstance(used, list) else []:
            name = str(name)
            if (REFERENCE_NAME.fullmatch(name) and is_library_code(name)) \
                    or name == "(the grader's watch was turned off)" or name in OTHER_REPORTS:
                self.box.reference_calls.add(name)  # checked names only: no student text reaches a flag
            else:
                self.box.reference_calls.add("(a malformed report)")
        if not reply.get("ok"):
            raise _remote_error(reply)
        if self.watch:
            self.fired = watched_names(self.watch, reply)
        if reply.get("method") is True and extra.get("read"):
            return RemoteMethod(self, extra["attr"])
        try:
            result = self._proxies(wire.decode(reply.get("result"), data))
            after = [self._proxies(wire.decode(a, data)) for a in reply.get("after", [])]
        except wire.WireError as e:
            raise SandboxGone(f"your function's result could not be read ({e})") from None
        for original, now in zip(args, after):  # a change in place, as the check would have seen it
            _apply_in_place(original, now)
        return result

    def _proxies(self, value):
        return value


MAX_REMOTE_CALLS = 20_000  # calls (and attribute reads) of one sandbox's objects; the checks make a few hundred
MAX_REMOTE_OBJECTS = 2_000  # proxies of the sandbox's objects in one check (the checks need a few dozen; the
# runner's table holds wire.MAX_HANDLES, so a flood of objects ends here, as a failed check, first)


class RemoteObject(RemoteFunction):
    """Stands for an object of a class piece of ``my_attn`` (classroom/pieces.py) that lives in the sandbox: the
    class itself, an instance, a cache a method returned. Calling it, calling a method (``mine.update(k, v)``,
    ``cls.train(...)``, ``mine.double().eval()``), ``len()`` and reading a plain attribute (``cache.seq_len``,
    ``tok.merges``: ints, strs, lists, dicts, tensors) go to the sandbox by name; what the wire cannot carry comes
    back as another :class:`RemoteObject`, and a proxy passed as an argument goes back as its handle. Special
    names (``__class__``, ``__reduce__``, ...) are never forwarded; an attribute set here stays here (attn_lib's
    ``claim_cache`` notes the layer that owns a cache). ``isinstance`` questions of the checks
    (:func:`attn_lib.course.exercises._core.is_instance`) are answered from the names of the classes its type
    has, as the sandbox reported them: data that can only make a check go on to compare values."""

    _grader_remote = True

    def __init__(self, box, number: int, name: str, mro: tuple = ()):
        super().__init__(box, number, name)
        self._mro = tuple(mro)
        count = getattr(box, "remote_objects", 0) + 1
        box.remote_objects = count
        if count > MAX_REMOTE_OBJECTS:
            raise SandboxGone(f"your code handed the grader more than {MAX_REMOTE_OBJECTS} objects")

    def __call__(self, *args, **kwargs):
        return self._request(args, kwargs, objects=True)

    def __getattr__(self, name: str):
        if name.startswith("__") and name.endswith("__") or name in ("box", "number", "_mro"):
            raise AttributeError(name)
        return self._request((), {}, objects=True, attr=name, read=True)

    def __len__(self):
        return self._request((), {}, objects=True, attr="__len__")

    def __bool__(self):
        return True

    def __repr__(self):
        return f"<your {self.__name__}, in the sandbox>"

    def __copy__(self):
        return self

    def __deepcopy__(self, memo):
        return self

    def __reduce_ex__(self, protocol):
        raise TypeError("an object in the sandbox cannot be pickled")

    def _wire_handle(self) -> int:
        return self.number

    def _grader_isinstance(self, cls) -> bool:
        name = f"{getattr(cls, '__module__', '')}.{getattr(cls, '__qualname__', '')}"
        return name in self._mro

    def _grader_new(self, cls, *args):
        """``cls(*args)`` made in the sandbox, one of the runner's :data:`classroom.runner.NEW_ALLOWED` (a KV cache
        of attn_lib's for the student's block): a proxy."""
        return self._request(args, {}, objects=True, new=f"{cls.__module__}.{cls.__qualname__}")

    def _grader_reports(self) -> set:
        """The runner's reports of the calls since the check began (``box.reference_calls``)."""
        return set(self.box.reference_calls)

    def _proxies(self, value, _depth: int = 0):
        if isinstance(value, wire.Handle):
            return RemoteObject(self.box, value.number, f"{self.__name__} result", value.mro)
        if _depth < wire.MAX_DEPTH and type(value) in (list, tuple):
            return type(value)(self._proxies(v, _depth + 1) for v in value)
        if _depth < wire.MAX_DEPTH and type(value) is dict:
            return {k: self._proxies(v, _depth + 1) for k, v in value.items()}
        return value


class RemoteMethod:
    """``proxy.name``, a method of an object in the sandbox: calling it calls it there, by name."""

    def __init__(self, owner: RemoteObject, name: str):
        self.owner, self.name, self.__name__ = owner, name, name

    def __call__(self, *args, **kwargs):
        return self.owner._request(args, kwargs, objects=True, attr=self.name)

    def __repr__(self):
        return f"<method {self.name} of {self.owner!r}>"


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
    from classroom import pieces

    values = []
    for v, expr in zip(reply.get("values", []), _split_args(args)):
        value = wire.decode(v, data)
        if isinstance(value, wire.Handle):  # a class piece's class: a proxy of objects; else a function
            value = RemoteObject(box, value.number, pieces.class_name(name) or expr, value.mro) \
                if pieces.is_class_check(name) else RemoteFunction(box, value.number, expr)
        values.append(value)
    if name == "check_prediction":
        return prediction_completion(*values[:2]) if len(values) >= 2 else (False, "malformed check")
    check = getattr(exercises, name, None)
    if check is None:  # a piece of the student's my_attn/ (classroom/pieces.py)
        check, values = pieces.check_for(name), pieces.keyword_calls(values)
    if not name.startswith("check_") or check is None:
        return False, f"the grader has no check {name!r}"
    from attn_lib.course.exercises import _core

    try:
        result = check(*values)
    except SandboxGone as e:
        return False, f"❌ {name}: {e}."
    except _core._TimeLimit:  # a class piece's object read or called outside the check's call(): no answer in time
        return False, (f"❌ {pieces.class_name(name) or name}: your code did not answer within "
                       f"{max(_core.TIME_LIMIT_S, 1) + 10:g} s (is there a loop that never ends?).")
    except Exception as e:  # noqa: BLE001 - the check failed on a grader-side problem
        return False, f"❌ {name}: could not be graded ({type(e).__name__}: {e})"
    if box.dead:  # the call that timed out or broke the protocol ended the sandbox
        return False, result.message if not result.passed else f"❌ {name}: the notebook's process stopped."
    refused = refused_calls(name, box.reference_calls)
    if result.passed is True and name in REFUSED and "(the grader's watch was turned off)" in box.reference_calls:
        from classroom import pieces

        return False, (f"❌ {pieces.class_name(name) or name}: not yet. Part of your code ran where the grader cannot "
                       "watch it (another process, or with the profiler turned off): compute it in the call itself.")
    if result.passed is True and refused:  # what the in-process check refuses (its _Refuse, its TorchFunctionMode)
        from classroom import pieces

        return False, (f"❌ {pieces.class_name(name) or name}: not yet. Your code called {', '.join(refused[:3])} "
                       "(super().forward?): that is the piece you write, so compute it yourself.")
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
    skip: set[int] = not_needed(cells, exercises)  # the demonstrations no check needs are not run
    deadline = time.monotonic() + budget_s
    restarts = 0
    while len(results) < len(exercises):
        pending = [k for k in exercises if k not in results]
        box = sb_mod.Sandbox(library, limits=limits)
        current, grading = None, None
        recorded: set[int] = set()  # cells recorded in this run of the notebook
        try:
            box.send({"cells": cells, "skip": sorted(skip), "serve": pending, "cell_timeout": cell_timeout,
                      **sandbox_watches(exercises)})
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
                            box.remote_calls = box.remote_objects = 0  # the bounds of RemoteObject, per check
                            ok, message = grade_check(box, name, args)
                            ok_all, messages = ok_all and ok, messages + [message]
                            unexpected = unexpected_library_calls(name, box.reference_calls)
                            own = sorted(set(unexpected) & _references(name))
                            others = [n for n in unexpected if n not in own and not n.startswith("(")]
                            for note in (n for n in unexpected if n.startswith("(")):
                                flags.append(f"{key}: {note[1:-1]}")  # the watch turned off, a malformed report
                            if own:
                                flags.append(f"{key}: the graded function called the check's own reference, "
                                             f"{', '.join(own[:5])}")
                            if others:
                                flags.append(f"{key}: the graded function ran attn_lib's own code (the library's "
                                             f"implementation of a graded piece?): {', '.join(others[:5])}")
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


def _grade_job(job_path: str, result_path: str) -> None:
    job = load_json(Path(job_path))
    result = grade_notebook(job["submitted"], job["released"], Path(job["library"]),
                            cell_timeout=float(job["cell_timeout"]), budget_s=float(job["budget_s"]),
                            salt=str(job.get("salt", SALT)))
    tmp = Path(result_path).with_suffix(".tmp")
    tmp.write_text(json.dumps(result))  # ASCII: a lone surrogate a student printed is escaped, not an error
    tmp.replace(result_path)


def serve() -> int:
    """``python -m classroom.grade --serve``: grade one submission after another, each a line ``JOB\tRESULT`` on
    stdin, answered ``done`` (or ``failed``) on stdout. Python, torch and the checks are imported once per worker,
    not once per submission (issue 39 §4); each submission still gets a sandbox of its own. The worker holds no
    student's data between two lines: the job and the result are files of autograde's own temporary folder."""
    import sys
    import traceback

    for line in sys.stdin:
        parts = line.rstrip("\n").split("\t")
        if len(parts) != 2:
            continue
        try:
            _grade_job(*parts)
            reply = "done"
        except MemoryError:
            return 1  # a process that ran out of memory may be broken: autograde starts another
        except Exception:  # noqa: BLE001 - a grader-side failure: this submission only
            traceback.print_exc()
            reply = "failed"
        sys.stdout.write(reply + "\n")
        sys.stdout.flush()
    return 0


def main(argv=None) -> int:
    """python -m classroom.grade JOB.json RESULT.json: grade one notebook; python -m classroom.grade --serve:
    grade one after another (:func:`serve`, what autograde runs)."""
    import sys

    argv = sys.argv[1:] if argv is None else argv
    _limit_self()
    if argv[:1] == ["--serve"]:
        import torch  # noqa: F401 - imported once, before the first submission
        import attn_lib.course.exercises  # noqa: F401

        return serve()
    _grade_job(argv[0], argv[1])
    return 0


if __name__ == "__main__":
    import sys

    sys.exit(main())
