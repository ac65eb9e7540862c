"""Triton's interpreter inside a process that can also compile for a GPU: the one piece built on Triton internals.

The supported way to run Triton kernels on CPU tensors is ``TRITON_INTERPRET=1`` set before ``triton`` is
first imported: ``@triton.jit`` then makes interpreted functions, and :mod:`attn_lib.flash` launches them
directly (``_kernel_is_interpreted``). That mode is fixed for the whole process, so it cannot serve what the
course also does in one process: notebook 09 and the tests run the kernels interpreted on the CPU *and*
:func:`attn_lib.flash.compile_kernel` compiles the same kernels for sm_80/sm_90, which needs compiling
JITFunctions. This module keeps only that: interpreted twins of the compiling kernels, made on demand.

It relies on Triton internals (``triton.runtime.interpreter.InterpretedFunction``, the jitted helpers of
``triton.language``, ``JITFunction.fn``, ``triton.knobs.runtime``); tests/test_flash.py's
``test_triton_internals_the_interpreter_twin_relies_on`` fails when one of them changes, and
``test_interpreter_leaves_triton_as_it_found_it`` checks that a compile still works after an interpreted run.
Source: Triton 3.9's ``triton/runtime/interpreter.py`` and ``triton/runtime/jit.py`` (read, not copied).
"""

from __future__ import annotations

import contextlib
import threading
import types

import triton
import triton.language as tl

__all__ = ["INTERPRET_LOCK", "interpreter_mode", "interpreted", "restore_language"]

INTERPRET_LOCK = threading.RLock()
_INTERPRETED: dict = {}  # JITFunction -> InterpretedFunction twin


def _language_objects():
    """Modules and classes of triton.language that the interpreter patches while it runs."""
    mods = [tl, tl.core, tl.math, tl.standard]
    classes = [v for m in mods for v in vars(m).values() if isinstance(v, type) and v.__module__.startswith("triton.")]
    seen, objs = set(), []
    for o in mods + classes:
        if id(o) not in seen:
            seen.add(id(o))
            objs.append(o)
    return objs


@contextlib.contextmanager
def restore_language():
    """Snapshot triton.language's namespaces and restore them afterwards.

    The interpreter swaps triton.language's functions for NumPy versions while a kernel runs; in
    interpret mode proper (TRITON_INTERPRET=1) nothing else ever compiles, so it does not always
    put them back. Here the same process may compile for a GPU next, so everything is restored.
    """
    objs = _language_objects()
    saved = [(o, dict(vars(o))) for o in objs]
    try:
        yield
    finally:
        for o, before in saved:
            now = dict(vars(o))
            for name in now.keys() - before.keys():
                with contextlib.suppress(AttributeError, TypeError):
                    delattr(o, name)
            for name, value in before.items():
                if now.get(name, _MISSING) is not value:
                    with contextlib.suppress(AttributeError, TypeError):
                        setattr(o, name, value)


_MISSING = object()


def interpreted(jit_fn, interp):
    """The InterpretedFunction twin of a JITFunction (cached).

    The twin runs a clone of the Python function whose globals are a private copy of the original
    module's globals in which every jitted function is replaced by its own twin. So the kernel's
    calls (and triton.language's helpers' calls, e.g. tl.max -> _elementwise_max) reach
    interpreted code, identities match the ones the interpreter checks for its fast NumPy paths,
    and the interpreter's own helper names land in the copy, not in the real modules.
    """
    from triton.runtime.jit import JITFunction

    if jit_fn in _INTERPRETED:
        return _INTERPRETED[jit_fn]
    fn = jit_fn.fn
    namespace: dict = {}  # filled below; lookups happen at call time
    clone = types.FunctionType(fn.__code__, namespace, fn.__name__, fn.__defaults__, fn.__closure__)
    clone.__kwdefaults__, clone.__annotations__ = fn.__kwdefaults__, dict(fn.__annotations__)
    clone.__module__, clone.__qualname__, clone.__doc__ = fn.__module__, fn.__qualname__, fn.__doc__
    twin = _INTERPRETED[jit_fn] = interp.InterpretedFunction(clone)
    namespace.update(fn.__globals__)
    for name, value in fn.__globals__.items():
        if isinstance(value, JITFunction):
            namespace[name] = interpreted(value, interp)
    return twin


@contextlib.contextmanager
def interpreter_mode():
    """Run jitted Triton code under the interpreter inside an ordinary (compiling) process.

    Triton decides at decoration time: ``@triton.jit`` gives a compiling JITFunction unless
    TRITON_INTERPRET=1 was set, and triton.language's own helpers (tl.zeros, tl.max, tl.sum, ...)
    were decorated when triton was first imported. This context (1) turns the interpret knob on,
    (2) swaps every jitted helper in triton.language for an interpreted twin, and (3) restores all
    of it on exit. The caller then launches ``interpreted(kernel)[grid](...)``.
    """
    from triton.runtime import interpreter as interp
    from triton.runtime.jit import JITFunction

    with INTERPRET_LOCK, restore_language(), _interpret_knob():
        for mod in (tl, tl.core, tl.math, tl.standard):
            for name, value in list(vars(mod).items()):
                if isinstance(value, JITFunction):
                    setattr(mod, name, interpreted(value, interp))
        yield interp


@contextlib.contextmanager
def _interpret_knob():
    """Turn Triton's interpret knob on (and the TRITON_INTERPRET variable it mirrors), then restore both."""
    import os

    runtime = getattr(getattr(triton, "knobs", None), "runtime", None)
    scope = getattr(runtime, "scope", None)
    if scope is not None:  # Triton >= 3.4: knobs.runtime.scope() restores the knobs and the environment
        with scope():
            runtime.interpret = True
            yield
        return
    old = os.environ.get("TRITON_INTERPRET")  # pragma: no cover - older Triton reads the variable
    os.environ["TRITON_INTERPRET"] = "1"
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("TRITON_INTERPRET", None)
        else:
            os.environ["TRITON_INTERPRET"] = old
