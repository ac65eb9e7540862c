"""The messages between the grader and a submission's sandbox: length-prefixed frames of numpy ``.npz`` data.

Never pickle: a frame is an ``.npz`` archive (read with ``allow_pickle=False``) holding one ``meta`` entry (UTF-8
JSON) and the arrays it refers to. Python values are encoded as a JSON tree:

- ``None``, bools, ints, floats and strings as themselves;
- a tensor or numpy array as ``{"T": i}`` (``"torch": true`` for a tensor), its data the array ``a<i>``;
- lists ``{"L": [...]}``, tuples ``{"U": [...]}``, dicts ``{"D": [[key, value], ...]}``, ``...`` as ``{"E": 1}``;
- a function (sandbox side only) ``{"F": handle}``; anything else ``{"X": type name, "r": short repr}``, which the
  other side turns into an :class:`Opaque` value that equals nothing.

This module runs on both sides (the sandbox imports it too): it uses only the standard library and numpy
(torch when a tensor is seen). Every decoder bound (frame size, depth, number of items) is checked.
"""

from __future__ import annotations

import io
import json
import os
import select
import struct
import time

import numpy as np

MAX_FRAME = 64 * 1024 * 1024  # bytes of one message; more is a protocol error
MAX_DEPTH = 32
MAX_ITEMS = 200_000


class WireError(Exception):
    """A frame that is too large, malformed, or did not arrive in time; or the other side is gone."""


class Timeout(WireError):
    pass


class Closed(WireError):
    pass


class Opaque:
    """A value of a type the wire does not carry (a generator, a module, ...): equal to nothing."""

    def __init__(self, type_name: str, text: str = ""):
        self.type_name, self.text = str(type_name)[:80], str(text)[:200]

    def __repr__(self):
        return f"<{self.type_name} {self.text}>".replace("  ", " ")

    def __eq__(self, other):
        return False

    __hash__ = object.__hash__


class Handle:
    """A function that lives on the other side, by its number."""

    def __init__(self, number: int):
        self.number = int(number)


def encode(value, arrays: list, *, functions: list | None = None, _depth: int = 0):
    if _depth > MAX_DEPTH:
        return {"X": "too deeply nested", "r": ""}
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if value is Ellipsis:
        return {"E": 1}
    if isinstance(value, np.generic):
        return encode(value.item(), arrays, functions=functions, _depth=_depth + 1)
    torch = _torch_if_loaded()
    if torch is not None and isinstance(value, torch.Tensor):
        try:
            with torch._C.DisableTorchFunctionSubclass():
                t = torch.Tensor.as_subclass(value, torch.Tensor).detach().cpu()
            if t.dtype == torch.bfloat16:
                t = t.to(torch.float32)
            arrays.append(np.ascontiguousarray(t.resolve_conj().resolve_neg().numpy()))
        except Exception as e:  # noqa: BLE001 - a tensor that cannot become an array
            return {"X": type(value).__name__, "r": f"not convertible ({type(e).__name__})"}
        return {"T": len(arrays) - 1, "torch": True}
    if isinstance(value, np.ndarray):
        if value.dtype.hasobject:
            return {"X": "ndarray of objects", "r": ""}
        arrays.append(np.ascontiguousarray(value))
        return {"T": len(arrays) - 1}
    if type(value) in (list, tuple):
        tag = "L" if type(value) is list else "U"
        return {tag: [encode(v, arrays, functions=functions, _depth=_depth + 1) for v in value[:MAX_ITEMS]]}
    if type(value) is dict:
        return {"D": [[encode(k, arrays, functions=functions, _depth=_depth + 1),
                       encode(v, arrays, functions=functions, _depth=_depth + 1)]
                      for k, v in list(value.items())[:MAX_ITEMS]]}
    if functions is not None and callable(value):
        functions.append(value)
        return {"F": len(functions) - 1}
    try:
        text = repr(value)[:200]
    except Exception:  # noqa: BLE001
        text = ""
    return {"X": type(value).__name__, "r": text}


def _torch_if_loaded():
    import sys

    return sys.modules.get("torch")


def decode(tree, arrays: dict, *, _depth: int = 0):
    """The value of an encoded tree; tensors come back as tensors (``torch`` needed), arrays as arrays."""
    if _depth > MAX_DEPTH:
        raise WireError("the value is nested too deeply")
    if tree is None or isinstance(tree, (bool, int, float, str)):
        return tree
    if isinstance(tree, dict) and len(tree) >= 1:
        if "T" in tree:
            arr = arrays.get(f"a{int(tree['T'])}")
            if arr is None:
                raise WireError("a value refers to a missing array")
            if tree.get("torch"):
                import torch

                return torch.from_numpy(np.array(arr, copy=True))
            return np.array(arr, copy=True)
        if "L" in tree:
            return [decode(v, arrays, _depth=_depth + 1) for v in _items(tree["L"])]
        if "U" in tree:
            return tuple(decode(v, arrays, _depth=_depth + 1) for v in _items(tree["U"]))
        if "D" in tree:
            out = {}
            for pair in _items(tree["D"]):
                if not isinstance(pair, list) or len(pair) != 2:
                    raise WireError("a dict entry is not a pair")
                key = decode(pair[0], arrays, _depth=_depth + 1)
                try:
                    out[key] = decode(pair[1], arrays, _depth=_depth + 1)
                except TypeError:  # an unhashable key
                    raise WireError("a dict key cannot be used as a key") from None
            return out
        if "E" in tree:
            return Ellipsis
        if "F" in tree:
            return Handle(tree["F"])
        if "X" in tree:
            return Opaque(tree.get("X", "?"), tree.get("r", ""))
    raise WireError(f"not an encoded value: {str(tree)[:80]}")


def _items(x):
    if not isinstance(x, list) or len(x) > MAX_ITEMS:
        raise WireError("a list is malformed or too long")
    return x


# ----------------------------------------------------------------------------------------- frames
def pack(meta: dict, arrays: list | None = None) -> bytes:
    buf = io.BytesIO()
    entries = {f"a{i}": a for i, a in enumerate(arrays or [])}
    np.savez(buf, meta=np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8), **entries)
    body = buf.getvalue()
    return struct.pack("!Q", len(body)) + body


def unpack(body: bytes) -> tuple[dict, dict]:
    try:
        with np.load(io.BytesIO(body), allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files if k != "meta"}
            meta = json.loads(z["meta"].tobytes().decode())
    except Exception as e:  # noqa: BLE001 - anything malformed is the same protocol error
        raise WireError(f"a malformed message ({type(e).__name__})") from None
    if not isinstance(meta, dict):
        raise WireError("a message is not an object")
    return meta, arrays


def send(fd: int, meta: dict, arrays: list | None = None) -> None:
    data = memoryview(pack(meta, arrays))
    while data:
        n = os.write(fd, data)
        data = data[n:]


def _read_exact(fd: int, n: int, deadline: float | None) -> bytes:
    chunks, got = [], 0
    while got < n:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise Timeout("no answer in time")
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                raise Timeout("no answer in time")
        chunk = os.read(fd, min(n - got, 1 << 20))
        if not chunk:
            raise Closed("the other side closed the connection")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def receive(fd: int, *, timeout: float | None = None, max_frame: int = MAX_FRAME) -> tuple[dict, dict]:
    deadline = None if timeout is None else time.monotonic() + timeout
    (n,) = struct.unpack("!Q", _read_exact(fd, 8, deadline))
    if n > max_frame:
        raise WireError(f"a message of {n} bytes (more than {max_frame})")
    return unpack(_read_exact(fd, n, deadline))
