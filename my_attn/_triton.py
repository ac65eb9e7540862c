"""Given, not a piece: launch a Triton kernel on GPU tensors (compiled) or on CPU tensors (Triton's interpreter).

Triton's own way to run a kernel on the CPU is ``TRITON_INTERPRET=1`` set before ``triton`` is first imported; then
``kernel[grid](...)`` runs the interpreter. In a process that imported triton without it (a notebook, the course's
checks), :func:`launch` runs an interpreted twin of your kernel instead (attn_lib._triton_interp), so the same
``@triton.jit`` function runs on CPU tensors here and compiles on a GPU.
"""

from __future__ import annotations


def launch(kernel, grid, *args, **constexprs) -> None:
    """``kernel[grid](*args, **constexprs)``, interpreted when the tensors are on the CPU.

    Args:
        kernel: your ``@triton.jit`` function. grid: a tuple of ints, the number of programs along each axis.
        args: tensors (their pointers) and numbers, in the kernel's order. constexprs: its ``tl.constexpr`` values.
    """
    import torch

    on_gpu = any(isinstance(a, torch.Tensor) and a.is_cuda for a in args)
    if on_gpu or type(kernel).__name__ == "InterpretedFunction":  # compiled, or TRITON_INTERPRET=1 at import
        kernel[grid](*args, **constexprs)
        return
    from attn_lib import _triton_interp

    with _triton_interp.interpreter_mode() as interp:
        _triton_interp.interpreted(kernel, interp)[grid](*args, **constexprs)
