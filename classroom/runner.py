"""Inside a submission's sandbox: run the student's notebook cell by cell and serve its graded functions.

    python -m classroom.runner FD_IN FD_OUT      (started by classroom.sandbox, never by hand)

The grader sends one plan: the cells to run (locked cells as released, the student's own cells as submitted),
the cells to skip, the graded check cells at which to stop, and the per-cell time limit. The runner executes the
cells in an IPython shell (magics and all, as a kernel would), sends each cell's status and its printed output
(text only, capped), and at every graded check cell it stops and answers the grader's requests:

- ``values``: evaluate the check's argument expressions in the notebook's namespace; a function comes back as a
  handle, any other value as data (:mod:`classroom.wire`);
- ``call``: call a handle on the inputs the grader made, send back the result and the inputs as they are after
  the call (so that a change in place is seen); with ``watch``, the names of the plan's watches that fired during
  the call (:class:`_NamedWatch`, what ``check_piece_flash_forward`` watches); with ``attr``, call the handle's
  method of that name, or with ``read`` read that attribute (a method comes back as ``{"method": true}``, the
  grader calls it by name); with ``objects`` (a class piece of ``my_attn``, classroom/pieces.py), a result the wire
  does not carry (an instance, a cache) comes back as a handle of the same table, and the grader may send handles
  back as arguments;
- ``next``: go on with the next cell.

Nothing here decides a grade: the grader compares, in its own process. This file is trusted by no one: the
student's code runs in this process and may rewrite anything in it; the grader treats every answer as data.
"""

from __future__ import annotations

import io
import os
import re
import signal
import sys
import traceback

from classroom import wire

OUTPUT_CAP = 20_000  # characters of printed output kept per cell


class CellTimeout(BaseException):
    pass


class _Capped(io.TextIOBase):
    def __init__(self, cap: int):
        self.cap, self.parts, self.size, self.dropped = cap, [], 0, 0

    def writable(self):
        return True

    def write(self, s):
        s = str(s)
        room = self.cap - self.size
        if room > 0:
            self.parts.append(s[:room])
            self.size += min(len(s), room)
        self.dropped += max(0, len(s) - max(room, 0))
        return len(s)

    def text(self):
        out = "".join(self.parts)
        return out + (f"\n[... {self.dropped} more characters not kept]" if self.dropped else "")


_ACTIVE: list = []  # the profile hook of the watched call in progress (_watch_reference_calls), for other threads
_SEEN_THREADS: set = set()  # the threads that run _thread_profile (all that threading starts once the runner set it)
_THREADS_WATCHED: list = []  # [True] once Runner.run set _thread_profile: a thread not seen is then one unwatched
_get_ident = __import__("threading").get_ident  # bound before the student's code
_sleep = __import__("time").sleep


def _thread_profile(frame, event, arg):
    """The profile function of every thread started in the sandbox (``threading.setprofile``, set before the
    student's first cell and kept): while a graded call is watched, that call's hook sees the thread's calls too.
    A thread sets its profile function when it starts, so before this a worker thread started at import (a queue of
    jobs that ran attn_lib's KVCache for the student's object) was never watched: full points and no flag."""
    ident = _get_ident()
    if ident not in _SEEN_THREADS:
        _SEEN_THREADS.add(ident)
    try:
        hook = _ACTIVE[-1]
    except IndexError:  # no call watched now (or it just ended)
        return
    hook(frame, event, arg)


TURNED_OFF = "(the grader's watch was turned off)"
# what starts another process: code there is never watched (its reports stay in it), so a process started during a
# watched call counts as the watch turned off (a fork that ran attn_lib's KVCache got full points and no flag).
# Seen by an audit hook, which no code can remove once added (:func:`_audit`).
_PROCESS_EVENTS = frozenset({"os.fork", "os.forkpty", "subprocess.Popen", "os.posix_spawn", "os.exec", "os.spawn",
                             "os.system", "pty.spawn"})
_WATCHED_USED: list = []  # the ``used`` list of the watched call in progress


def _audit(event, args):
    if event in _PROCESS_EVENTS and _WATCHED_USED:
        used = _WATCHED_USED[-1]
        if TURNED_OFF not in used:
            used.append(TURNED_OFF)


class _watch_reference_calls:
    """While a graded function runs: every entry into attn_lib's code (issue 41 §5: the reference of every graded
    piece lives there, ``attn_lib.attention.scaled_dot_product_attention`` for notebook 03's) is noted by its
    qualified name, and the grader flags the ones its check does not allow (:data:`classroom.grade.ALLOWED`). An
    entry is a frame of attn_lib's code with no frame of attn_lib's code above it on the stack, whoever called it:
    the student's code, a lambda, ``functools.partial``, ``torch.func.vmap`` or a module's ``__call__`` (so
    ``block(x)`` is seen as ``attn_lib.models.lm.LMBlock.forward``); what attn_lib calls inside is not listed. A
    best effort (the student's process can turn it off; the grader flags that too): the points come from the
    grader's comparison either way."""

    # torch's fused attention, refused by the MultiHeadAttention piece's check (a TorchFunctionMode in the checking
    # process; here the profile hook sees the C call), and the student's own scaled_dot_product_attention, which
    # that piece must call: both reported by these names, which the grader accepts as they are
    TORCH_FUSED = ("scaled_dot_product_attention", "multi_head_attention_forward")
    OWN = (("my_attn", "attention.py"), "scaled_dot_product_attention",
           "my_attn.attention.scaled_dot_product_attention")

    def __init__(self, used: list):
        self.used = used
        functional = sys.modules.get("torch.nn.functional")
        self.fused = {}
        for name in self.TORCH_FUSED if functional is not None else ():
            f = getattr(functional, name, None)
            if f is not None:
                self.fused[id(f)] = f"torch.nn.functional.{name}"
                code = getattr(f, "__code__", None)
                if code is not None:
                    self.fused[id(code)] = f"torch.nn.functional.{name}"
        self.own_file = os.sep + os.path.join(*self.OWN[0])
        try:
            import attn_lib

            root = os.path.dirname(attn_lib.__file__)
        except Exception:  # noqa: BLE001
            root = None
        self.lib = root + os.sep if root else None
        self.top = None

    def _note(self, name: str) -> None:
        if len(self.used) < 1000 and name not in self.used:
            self.used.append(name)

    def _inside_library(self, frame) -> bool:
        while frame is not None and frame is not self.top:
            if self.lib is not None and frame.f_code.co_filename.startswith(self.lib):
                return True
            frame = frame.f_back
        return False

    def hook(self, frame, event, arg):
        if event == "c_call":
            if self.fused and id(arg) in self.fused and not self._inside_library(frame):
                self._note(self.fused[id(arg)])
            return
        if event != "call":
            return
        code = frame.f_code
        if code.co_name == self.OWN[1] and code.co_filename.endswith(self.own_file):
            self._note(self.OWN[2])
        elif id(code) in self.fused and not self._inside_library(frame.f_back):
            self._note(self.fused[id(code)])
        if self.lib is None or not frame.f_code.co_filename.startswith(self.lib):
            return
        up = frame.f_back
        if up is not None and up.f_code.co_filename.startswith("<frozen importlib"):
            return  # the import machinery calling a finder or loader (attn_lib.setup installs one)
        while up is not None and up is not self.top:
            if up.f_code.co_filename.startswith(self.lib):
                return  # attn_lib's own inner call
            up = up.f_back
        code = frame.f_code
        module = os.path.relpath(code.co_filename, os.path.dirname(self.lib.rstrip(os.sep)))[:-3]
        module = module[: -len("/__init__")] if module.endswith("/__init__") else module
        if code.co_name == "<module>":
            return  # an import of one of attn_lib's modules, not a call
        qualname = ".".join(p for p in getattr(code, "co_qualname", code.co_name).split(".") if "<" not in p)
        name = re.sub(r"[^\w.]", "", f"{module.replace(os.sep, '.')}.{qualname}")
        if len(self.used) < 1000 and name not in self.used:
            self.used.append(name)

    def __enter__(self):
        import threading

        self.top = sys._getframe(1)
        self.previous = sys.getprofile()
        self.installed = self.hook  # one bound method, compared by identity below
        _WATCHED_USED.append(self.used)
        _ACTIVE.append(self.installed)  # a thread the function starts, or one started before, is watched too
        threading.setprofile(_thread_profile)
        sys.setprofile(self.installed)
        return self

    def __exit__(self, *exc):
        import threading

        if _WATCHED_USED and _WATCHED_USED[-1] is self.used:
            _WATCHED_USED.pop()
        if sys.getprofile() is not self.installed:
            self.used.append(TURNED_OFF)
        elif _THREADS_WATCHED and TURNED_OFF not in self.used:
            # a thread that never ran _thread_profile was started without it (threading._profile_hook cleared
            # first, or _thread.start_new_thread): what it runs is not watched
            me = _get_ident()

            def unseen():
                return any(i != me and i not in _SEEN_THREADS for i in sys._current_frames())

            if unseen():
                _sleep(0.05)  # a thread just started (a progress bar's monitor) runs its first call now
                if unseen():
                    self.used.append(TURNED_OFF)
        sys.setprofile(self.previous)
        if self.installed in _ACTIVE:
            _ACTIVE.remove(self.installed)
        else:
            self.used.append(TURNED_OFF)
        threading.setprofile(_thread_profile)
        return False


class _NamedWatch:
    """What a check asks the runner to watch by name during a call (``check_piece_flash_forward``: that Triton's
    interpreter launched a kernel, that the launcher computed no attention in torch). The grader names them in the
    plan (``"watch": {"torch": [...], "code": [...]}``, dotted names such as ``torch.matmul`` and
    ``triton.runtime.interpreter.GridExecutor.__call__``); they are resolved here, when the plan arrives, before any
    of the student's cells runs, so a module that later rebinds ``torch.matmul`` or ``GridExecutor.__call__`` (or
    this class) does not change what is watched. ``torch`` names are seen by a ``TorchFunctionMode`` (the function
    object torch dispatches), ``code`` names by the code object that runs (a profile hook, chained to the one of
    :class:`_watch_reference_calls`). With ``interpret_triton``, ``TRITON_INTERPRET=1`` is set before triton is
    first imported, so ``kernel[grid](...)`` runs Triton's interpreter. The reply of a watched call names only the
    requested names that fired, and whether the watch was still in place when the call returned: the grader
    believes no other text (:meth:`classroom.grade.RemoteFunction.__call__`)."""

    def __init__(self, plan: dict):
        import importlib

        watch = plan.get("watch") if isinstance(plan.get("watch"), dict) else {}
        if plan.get("interpret_triton") and "triton" not in sys.modules:
            os.environ["TRITON_INTERPRET"] = "1"
        self.torch: dict = {}  # function object -> name
        self.code: dict = {}  # code object -> name
        for kind in ("torch", "code"):
            for name in watch.get(kind, []) if isinstance(watch.get(kind), list) else []:
                if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z_][\w.]{0,200}", name):
                    continue
                parts, obj = name.split("."), None
                for cut in range(len(parts), 0, -1):
                    try:
                        obj = importlib.import_module(".".join(parts[:cut]))
                    except Exception:  # noqa: BLE001 - not a module: a shorter prefix is
                        continue
                    try:
                        for attr in parts[cut:]:
                            obj = getattr(obj, attr)
                    except Exception:  # noqa: BLE001 - not there: not watched (the check then sees nothing fire)
                        obj = None
                    break
                if obj is None:
                    continue
                if kind == "code" and hasattr(obj, "__code__"):
                    self.code[obj.__code__] = name
                elif kind == "torch":
                    self.torch[obj] = name
        # the same torch functions seen by the profile hook, for a thread other than the call's (a function mode is
        # per thread: a worker thread's torch.matmul went unseen): a C function by identity, a Python one by code
        self.torch_ids = {id(f): n for f, n in self.torch.items()}
        self.torch_code = {f.__code__: n for f, n in self.torch.items() if hasattr(f, "__code__")}
        self.torch_methods = {f.__name__: n for f, n in self.torch.items()  # x.softmax(-1): a bound C method
                              if type(f).__name__ == "method_descriptor" and isinstance(getattr(f, "__name__", 0), str)}
        self.mode_class = None
        if self.torch:
            from torch.overrides import TorchFunctionMode

            watched = self.torch

            class Mode(TorchFunctionMode):
                def __init__(self):
                    super().__init__()
                    self.fired = set()

                def __torch_function__(self, func, types, args=(), kwargs=None):
                    try:
                        name = watched.get(func)
                    except TypeError:  # an unhashable callable
                        name = None
                    if name is not None:
                        self.fired.add(name)
                    return func(*args, **(kwargs or {}))

            self.mode_class = Mode
        # bound now, before the student's code: patching this class later does not reach the runner
        self.call = self._call

    def _call(self, fn, args, kwargs, names, used: list) -> tuple:
        """``fn(*args, **kwargs)`` watched for ``names`` (those of the plan): (result, fired names, intact). A name
        of attn_lib's code (``attn_lib.flash.flash_attention``, or ``attn_lib.flash.*`` for any of that module)
        fires when ``used``, the entries into attn_lib that :class:`_watch_reference_calls` notes, holds it (the
        reply's ``used`` keeps only 20 of them)."""
        names = set(names) if isinstance(names, list) else set()
        import threading

        code = {c: n for c, n in self.code.items() if n in names}
        other_code = {**code, **{c: n for c, n in self.torch_code.items() if n in names}}
        other_c = {i: n for i, n in self.torch_ids.items() if n in names}
        methods = {m: n for m, n in self.torch_methods.items() if n in names}
        tensor = sys.modules["torch"].Tensor if "torch" in sys.modules else None
        fired: set = set()
        previous = sys.getprofile()
        caller = threading.get_ident()

        def hook(frame, event, arg):
            if previous is not None:
                previous(frame, event, arg)
            if event == "call":
                name = (code if threading.get_ident() == caller else other_code).get(frame.f_code)
                if name is not None:
                    fired.add(name)
            elif event == "c_call" and other_c and threading.get_ident() != caller:  # another thread: no mode
                name = other_c.get(id(arg))
                if name is None and methods and tensor is not None and \
                        isinstance(getattr(arg, "__self__", None), tensor):
                    name = methods.get(getattr(arg, "__name__", None))
                if name is not None:
                    fired.add(name)

        mode = self.mode_class() if self.mode_class is not None and names & set(self.torch.values()) else None
        intact = True
        sys.setprofile(hook)
        _ACTIVE.append(hook)  # the threads' profile function (_thread_profile) forwards to it
        try:
            if mode is None:
                result = fn(*args, **kwargs)
            else:
                with mode:
                    result = fn(*args, **kwargs)
                fired |= {n for n in mode.fired if n in names}
        finally:
            if hook in _ACTIVE:
                _ACTIVE.remove(hook)
            else:
                intact = False
            intact = intact and sys.getprofile() is hook
            if intact:  # else left as the student's code left it: _watch_reference_calls notes it too
                sys.setprofile(previous)
        for name in names:
            if isinstance(name, str) and name.startswith("attn_lib.") and any(
                    u == name or (name.endswith(".*") and u.startswith(name[:-1])) for u in used):
                fired.add(name)
        return result, sorted(fired), intact


def _where(error: BaseException) -> str:
    frames = [f for f in traceback.extract_tb(error.__traceback__) if not f.filename.startswith("/opt/grader/")]
    return f"line {frames[-1].lineno} of {frames[-1].name}" if frames else ""


def _error_reply(error: BaseException) -> dict:
    return {"ok": False, "type": type(error).__name__, "msg": str(error)[:2000], "where": _where(error)}


class Runner:
    def __init__(self, fd_in: int, fd_out: int):
        self.fd_in, self.fd_out = fd_in, fd_out
        self.functions = wire.Table()  # what the grader holds by number: functions, and a class piece's objects

    def send(self, meta, arrays=None):
        wire.send(self.fd_out, meta, arrays)

    def run(self) -> None:
        plan, _ = wire.receive(self.fd_in)
        self.named = _NamedWatch(plan)  # before any of the student's cells (see the class)
        import threading

        threading.setprofile(_thread_profile)  # every thread the student's code starts, watched when a call is
        _SEEN_THREADS.add(_get_ident())
        _THREADS_WATCHED.append(True)
        sys.addaudithook(_audit)  # every process it starts, noted when a call is watched
        from IPython.core.interactiveshell import InteractiveShell

        shell = InteractiveShell.instance()
        self.shell = shell
        timeout = float(plan.get("cell_timeout", 120))
        skip = set(plan.get("skip", []))
        serve = set(plan.get("serve", []))
        self.send({"ev": "ready"})
        for index, cell in enumerate(plan["cells"]):
            if cell["kind"] == "graded":
                if cell["grade_id"] in serve:
                    self.send({"ev": "exercise", "key": cell["grade_id"], "index": index})
                    self.serve()
                continue
            if index in skip:
                continue
            self.send({"ev": "start", "index": index})
            out = _Capped(OUTPUT_CAP)
            status, error = "ok", ""

            def on_alarm(signum, frame):
                raise CellTimeout()

            signal.signal(signal.SIGALRM, on_alarm)
            saved = sys.stdout, sys.stderr
            sys.stdout = sys.stderr = out
            try:
                signal.setitimer(signal.ITIMER_REAL, timeout)
                result = shell.run_cell(cell["source"], store_history=False, silent=False)
            except CellTimeout:
                result = None
                status = "timeout"
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
                sys.stdout, sys.stderr = saved
            if result is not None:
                err = result.error_before_exec or result.error_in_exec
                if isinstance(err, CellTimeout):
                    status = "timeout"
                elif err is not None:
                    status, error = "error", f"{type(err).__name__}: {err}"[:2000]
            self.send({"ev": "cell", "index": index, "status": status, "error": error, "output": out.text()})
        self.send({"ev": "done"})

    def serve(self) -> None:
        self.functions = wire.Table()  # a check's handles serve that check only: a full table costs no other check
        while True:
            request, arrays = wire.receive(self.fd_in)
            op = request.get("op")
            if op == "next":
                return
            if op == "values":
                out_arrays, values = [], []
                try:
                    for expr in request["args"]:
                        value = eval(expr, self.shell.user_ns)  # noqa: S307 - the student's own namespace
                        values.append(wire.encode(value, out_arrays, functions=self.functions))
                    self.send({"ok": True, "values": values}, out_arrays)
                except BaseException as e:  # noqa: BLE001 - NameError (not defined), anything
                    self.send(_error_reply(e))
            elif op == "call":
                try:
                    fn = self.functions.get(request.get("fn"))
                    attr, read = request.get("attr"), bool(request.get("read"))
                    if attr is not None and not _attribute_name(attr):
                        raise AttributeError(f"the grader does not ask for {str(attr)[:60]!r}")
                    if request.get("new") is not None:  # one of attn_lib's objects, for the student's to use
                        if request["new"] not in NEW_ALLOWED:
                            raise ValueError("the grader does not make that")
                        import importlib

                        module, _, name = request["new"].rpartition(".")
                        fn = getattr(importlib.import_module(module), name)
                    objects = bool(request.get("objects"))
                    memo = wire.new_memo()  # modules, then the optimiser over their parameters
                    table = self.functions if objects else None
                    args = [wire.decode(a, arrays, memo=memo, build=True, handles=table)
                            for a in request.get("args") or []]
                    named = request.get("kwargs") or {}
                    if not isinstance(named, dict) or not all(isinstance(k, str) and k.isidentifier() for k in named):
                        raise ValueError("malformed keyword arguments")
                    kwargs = {k: wire.decode(v, arrays, memo=memo, build=True, handles=table) for k, v in named.items()}
                except Exception as e:  # noqa: BLE001
                    self.send(_error_reply(e))
                    continue
                sink = _Capped(0)
                saved = sys.stdout, sys.stderr
                sys.stdout = sys.stderr = sink
                used: list[str] = []
                watch = request.get("watch")
                try:
                    method = False
                    with _watch_reference_calls(used):
                        if attr is not None:
                            fn = getattr(fn, attr)  # a property runs here, watched
                        if read:
                            import inspect

                            method, result = inspect.isroutine(fn), fn
                        elif watch is None:
                            result = fn(*args, **kwargs)
                        else:  # a check's named watch (_NamedWatch)
                            result, fired, intact = self.named.call(fn, args, kwargs, watch, used)
                        # encoded watched too: an int subclass's __int__, a __repr__ is the student's code (an
                        # nbytes() whose int ran attn_lib's KVCache.nbytes when encoded went unflagged)
                        reply_arrays = []
                        after_memo = wire.new_memo()
                        encoded = None if method else wire.encode(result, reply_arrays, functions=table,
                                                                  objects=objects)
                        after = [wire.encode(a, reply_arrays, memo=after_memo, functions=table, objects=objects)
                                 for a in args]
                    reply = {"ok": True, "used": _reported(used), "result": encoded, "method": method, "after": after}
                    if watch is not None and not read:
                        reply.update(watched=fired, watch_intact=intact)
                except BaseException as e:  # noqa: BLE001 - the student's function raised
                    reply, reply_arrays = dict(_error_reply(e), used=_reported(used)), []
                finally:
                    sys.stdout, sys.stderr = saved
                self.send(reply, reply_arrays)
            else:
                self.send({"ok": False, "type": "ValueError", "msg": f"unknown request {op!r}", "where": ""})


def _reported(used: list) -> list:
    """What a call reports, at most 100 names: the names that are not attn_lib's first (torch's fused attention, the
    student's own SDPA), then attn_lib's, its argument checks and lazy attributes (which every check allows) last, so
    that many allowed calls cannot push a flagged one out of the report."""
    return sorted(set(used), key=lambda n: (n.startswith("attn_lib."), n.startswith("attn_lib._checks.")
                                            or n.endswith(".__getattr__"), n))[:100]


NEW_ALLOWED = frozenset({"attn_lib.kv_cache.KVCache"})  # what a check may make in the sandbox (LMBlock's cache)
CALLABLE_DUNDERS = frozenset({"__len__"})  # the only special method the grader calls by name (len(cache))


def _attribute_name(name) -> bool:
    """A name the grader may read or call on a class piece's object: an identifier, not a special name (a proxy
    never forwards ``__class__``, ``__reduce__``, ...), except :data:`CALLABLE_DUNDERS`."""
    return isinstance(name, str) and name.isidentifier() and len(name) <= 100 and (
        not (name.startswith("__") and name.endswith("__")) or name in CALLABLE_DUNDERS)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    Runner(int(argv[0]), int(argv[1])).run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
