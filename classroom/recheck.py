"""The hidden tests: run an exercise's check again, outside the student's kernel, on fresh inputs.

A graded test cell first calls ``attn_lib.exercises.check_*`` in the student's kernel (the check the student
saw), then, inside ``### BEGIN HIDDEN TESTS``, :func:`recheck` with the same arguments. ``recheck`` sends the
student's function (by value, with :mod:`cloudpickle`) to an interpreter that imported ``attn_lib`` and
``torch`` before any student code ran, and runs the check there, with the random inputs of every check drawn
from a different seed. A student's cells that redefine ``check_*``, patch ``attn_lib.exercises`` or patch
``torch.allclose`` change nothing there, and a function that patches the checking code while it runs is
caught: the worker compares every function of ``attn_lib``, ``torch`` and ``math`` before and after.

Where the check runs:

- ``make autograde`` starts one pristine worker (``python -m classroom.recheck --serve SOCKET``) before
  any notebook runs and puts its socket in ``$ATTN_RECHECK_SOCKET``; each re-check is a ``fork`` of it,
  so nothing one student's function does survives into the next re-check (and torch is imported once).
- Without that variable (``nbgrader autograde`` run by hand), each re-check starts a fresh interpreter
  (``python -m classroom.recheck --one``): the same isolation, 3-5 s slower per check.

What this does not defend against: code in the kernel that rewrites this module, ``cloudpickle``, ``socket``
or ``subprocess`` (the transport itself). ``classroom.autograde`` flags every submission whose own cells
mention these (see ``TAMPER_PATTERNS`` there), so the teacher looks at it.
"""

from __future__ import annotations

import json
import os
import socket
import struct
import subprocess
import sys

SOCKET_ENV = "ATTN_RECHECK_SOCKET"
SALT_ENV = "ATTN_RECHECK_SALT"
TIMEOUT_ENV = "ATTN_RECHECK_TIMEOUT"
DEFAULT_SALT = "hidden-tests"
DEFAULT_TIMEOUT = 30.0

# Modules whose functions and classes the worker snapshots: a check can only be fooled through them.
_WATCHED_EXACT = ("torch", "torch.nn.functional", "torch.testing", "torch.special", "torch.linalg", "math", "builtins",
                  "numpy", "cloudpickle")


def _timeout() -> float:
    try:
        return float(os.environ.get(TIMEOUT_ENV, DEFAULT_TIMEOUT))
    except ValueError:
        return DEFAULT_TIMEOUT


# ----------------------------------------------------------------------------------------- kernel side
def recheck(check_name: str, *args) -> None:
    """Run ``attn_lib.exercises.<check_name>(*args)`` in a pristine interpreter on fresh inputs.

    Raises:
        AssertionError: the check did not pass there (its message, with the check's hint), the function could
            not be sent (it refers to something that cannot be pickled), or the re-check ran out of time.
    """
    import cloudpickle

    try:
        blob = cloudpickle.dumps((check_name, args))
    except Exception as e:  # a closure over an open file, a generator, ...
        raise AssertionError(
            f"hidden re-check of {check_name}: your answer could not be sent to the grader "
            f"({type(e).__name__}: {e}); keep the function self-contained.") from None
    path = os.environ.get(SOCKET_ENV)
    reply = _ask_server(path, blob) if path else _ask_fresh_interpreter(blob)
    if not reply.get("passed") is True:
        raise AssertionError(f"hidden re-check on fresh inputs: {reply.get('message', 'no result')}")
    print(f"hidden re-check on fresh inputs: {reply.get('message')}")


def _ask_server(path: str, blob: bytes) -> dict:
    timeout = _timeout()
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(timeout)
            s.connect(path)
            s.sendall(struct.pack("!Q", len(blob)) + blob)
            s.shutdown(socket.SHUT_WR)
            data = b""
            while chunk := s.recv(65536):
                data += chunk
    except socket.timeout:
        return {"passed": False, "message": f"the re-check took longer than {timeout:g} s (an endless loop?)."}
    except OSError as e:
        return {"passed": False, "message": f"the grader's re-check worker is not reachable ({e})."}
    if not data:
        return {"passed": False, "message": "the re-check stopped without a result (it crashed or ran out of time)."}
    return json.loads(data.decode())


def _ask_fresh_interpreter(blob: bytes) -> dict:
    timeout = _timeout()
    try:
        proc = subprocess.run([sys.executable, "-m", "classroom.recheck", "--one"], input=blob,
                              capture_output=True, timeout=timeout + 20)  # + the interpreter's start-up
    except subprocess.TimeoutExpired:
        return {"passed": False, "message": f"the re-check took longer than {timeout:g} s (an endless loop?)."}
    lines = proc.stdout.decode(errors="replace").strip().splitlines()
    if proc.returncode != 0 or not lines:
        return {"passed": False, "message": "the re-check stopped without a result (it crashed or ran out of time)."}
    return json.loads(lines[-1])


# ----------------------------------------------------------------------------------------- worker side
def _prepare() -> None:
    """Import what checks use, in this still pristine interpreter (before any student code)."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import torch

    import importlib
    import pkgutil

    import attn_lib.exercises as exercises

    torch.set_num_threads(1)
    for info in pkgutil.iter_modules(exercises.__path__):  # every check module, and the question registry
        importlib.import_module(f"attn_lib.exercises.{info.name}")


def _snapshot() -> dict:
    """Every function/class attribute of the watched modules, and their classes' attributes (the objects, not
    their ids: an id can be reused once the original is freed)."""
    snap = {}
    for name, mod in list(sys.modules.items()):
        if mod is None or not (name in _WATCHED_EXACT or name.startswith("attn_lib")):
            continue
        try:
            items = list(vars(mod).items())
        except TypeError:
            continue
        for attr, obj in items:
            if callable(obj):
                snap[(name, attr)] = obj
                if isinstance(obj, type) and obj.__module__.startswith("attn_lib"):
                    for cattr, cobj in list(vars(obj).items()):
                        snap[(name, attr, cattr)] = cobj
    import torch

    for cattr, cobj in list(vars(torch.Tensor).items()):
        snap[("torch.Tensor", cattr)] = cobj
    return snap


def _salt_inputs(salt: str) -> None:
    """Make every check draw its random inputs from other seeds than the student's visible check did."""
    for name, mod in list(sys.modules.items()):
        if name.startswith("attn_lib.exercises") and mod is not None and hasattr(mod, "fresh_generator"):
            original = mod.fresh_generator

            def salted(check_name, *a, _original=original, **k):
                return _original(f"{check_name}#{salt}", *a, **k)

            mod.fresh_generator = salted


def run_request(blob: bytes) -> dict:
    """Unpickle (check name, args), run the pristine check, and say whether it passed untampered."""
    import cloudpickle

    import attn_lib.exercises as exercises
    from attn_lib.exercises._core import CheckResult

    _salt_inputs(os.environ.get(SALT_ENV, DEFAULT_SALT))
    before = _snapshot()
    checks = {n: getattr(exercises, n) for n in dir(exercises) if n.startswith("check_")}
    try:
        check_name, args = cloudpickle.loads(blob)
    except Exception as e:
        return {"passed": False, "message": f"your answer could not be loaded by the grader ({type(e).__name__}: {e})."}
    if check_name not in checks:
        return {"passed": False, "message": f"the grader has no check named {check_name!r}."}
    try:
        result = checks[check_name](*args)
    except BaseException as e:  # a check raises only for a grader-side problem (an unknown question id, ...)
        return {"passed": False, "message": f"{check_name} raised {type(e).__name__}: {e}"}
    after = _snapshot()
    changed = sorted(".".join(k) for k in before if after.get(k) is not before[k])  # modules imported since don't count
    if changed:
        return {"passed": False, "message": f"❌ {check_name}: your code replaced part of the checking code while "
                f"it ran ({', '.join(changed[:5])}); the check does not count."}
    if type(result) is not CheckResult:
        return {"passed": False, "message": f"{check_name} did not return a CheckResult."}
    return {"passed": result.passed is True, "message": result.message}


def _run_in_child(blob: bytes) -> dict:
    import signal

    signal.alarm(int(_timeout()) + 1)  # an endless loop ends the child; the client sees no result
    try:
        return run_request(blob)
    finally:
        signal.alarm(0)


def serve(path: str) -> None:
    """Serve re-checks on the Unix socket ``path``, one forked child per request, until terminated."""
    import socketserver

    _prepare()

    class Handler(socketserver.StreamRequestHandler):
        def handle(self):
            (n,) = struct.unpack("!Q", self.rfile.read(8))
            blob = self.rfile.read(n)
            try:
                reply = _run_in_child(blob)
            except BaseException as e:
                reply = {"passed": False, "message": f"the re-check failed: {type(e).__name__}: {e}"}
            self.wfile.write(json.dumps(reply).encode())

    class Server(socketserver.ForkingMixIn, socketserver.UnixStreamServer):
        max_children = 64

    if os.path.exists(path):
        os.unlink(path)
    with Server(path, Handler) as server:
        os.chmod(path, 0o600)
        server.serve_forever()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--serve"] and len(argv) == 2:
        serve(argv[1])
        return 0
    if argv == ["--one"]:
        _prepare()
        blob = sys.stdin.buffer.read()
        reply = _run_in_child(blob)
        sys.stdout.write("\n" + json.dumps(reply) + "\n")
        return 0
    print("usage: python -m classroom.recheck --serve SOCKET | --one  (reads a request on stdin)", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
