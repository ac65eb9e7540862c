"""Docstrings of attn_lib's public functions and classes give shapes, dtypes, errors and a source (#23).

Every public name (``__all__``) of every public module of attn_lib (found with pkgutil; ``exercises`` is the
students' package and keeps its own style) is scored on four features, each a regex over the docstring
(for a class: the class, its ``__init__`` and, for an ``nn.Module``, its ``forward``):

========  ===================================================================================================
shapes    a shape in attn_lib's letters, e.g. ``(B, L)``, ``(..., L, E)``, ``(H,)``, ``(V, D)``; or, for a
          function that takes and returns no tensor, the words "no tensors"
dtypes    a dtype or type: float32, bfloat16, int64, bool, int, str, "dtype", ... ("no tensors" too)
raises    a ``Raises:`` section (``Raises: nothing of its own (...)`` counts: it says so)
source    a ``Source:`` line, a paper (et al., §, section N, Algorithm N, Eq. N, arXiv), the library it
          matches (transformers', torch's, HuggingFace's, torch.nn.X), or "the course's own"
========  ===================================================================================================

Run this file as a script for the full table: ``.venv/bin/python tests/test_docstrings.py``.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re

import attn_lib

# #23 asked for 90 %; every public function and class reached all four (212 of 212, 2026-12-02), so the test keeps
# it there: a new public name needs the four too.
GOAL = 1.0
THRESHOLD = 1.0

_SHAPE = re.compile(
    r"\((?:\.\.\.|…|[A-Z][A-Za-z]{0,3}\b|\d+)[^,()\n]{0,12}"  # first dim: ..., B, Hkv, H·E, H * E, 3
    r"(?:\s*,\s*[^,()\n]{1,24})*\s*,(?:\s*[^,()\n]{1,24})?\s*\)"  # at least one comma: (H,), (B, L), (..., L, E)
    r"|\([a-z_]{1,8},(?:\s*[A-Z][A-Za-z_]{0,5}\b,)*\s*[A-Z][A-Za-z_]{0,5}\)"  # (layers, H, T_out, S)
    r"|\b[Nn]o tensors?\b"
)
_DTYPE = re.compile(
    r"\b(?:b?float(?:16|32|64)?|half|double|dtype|u?int(?:8|16|32|64)?|long|bool|str|complex(?:64|128)?)s?\b"
)
_NO_TENSORS = re.compile(r"\b[Nn]o tensors?\b")  # a function without tensors has no dtype to give
_RAISES = re.compile(r"^\s*Raises\b", re.M)
_SOURCE = re.compile(
    r"^\s*Sources?\b|et al\.|§|\bsection \d|\bAlgorithm \d|\b[Ee]q(?:uation|\.)\s*\(?\d|arXiv"
    r"|\btransformers'|\bHuggingFace's|\btorch's|\bPyTorch's|\btorch\.nn\.\w+|\bflash-attn's|course's own"
    r"|\b[A-Z][a-z]+(?: and [A-Z][a-z]+)?,? \(?(?:19|20)\d\d\b",
    re.M,
)
FEATURES = ("shapes", "dtypes", "raises", "source")


def public_modules() -> list[str]:
    """The public modules of attn_lib that list names in ``__all__`` (no ``_private``, no ``exercises``)."""
    names = []
    for info in pkgutil.walk_packages(attn_lib.__path__, prefix="attn_lib."):
        parts = info.name.split(".")[1:]
        if info.ispkg or parts[:2] == ["course", "exercises"] or any(p.startswith("_") for p in parts):
            continue
        try:
            module = importlib.import_module(info.name)
        except ModuleNotFoundError:  # an optional dependency (triton) missing on this machine
            continue
        if getattr(module, "__all__", None):
            names.append(info.name)
    return sorted(names)


def docstring(obj) -> str:
    """The text scored: a function's docstring; a class's, plus its ``__init__`` and ``forward`` (nn.Module)."""
    parts = [inspect.getdoc(obj) or ""]
    if inspect.isclass(obj):
        for attr in ("__init__", "forward"):
            method = obj.__dict__.get(attr)
            if method is not None and method.__doc__:
                parts.append(inspect.cleandoc(method.__doc__))
    return "\n".join(parts)


def score(doc: str) -> dict[str, bool]:
    return {
        "shapes": bool(_SHAPE.search(doc)),
        "dtypes": bool(_DTYPE.search(doc) or _NO_TENSORS.search(doc)),
        "raises": bool(_RAISES.search(doc)),
        "source": bool(_SOURCE.search(doc)),
    }


def audit(modules: list[str] | None = None) -> list[tuple[str, dict[str, bool]]]:
    """``(module.name, {feature: present})`` for every public function and class of ``modules``."""
    rows = []
    for name in modules if modules is not None else public_modules():
        module = importlib.import_module(name)
        for public in module.__all__:
            obj = getattr(module, public, None)
            if inspect.isfunction(obj) or inspect.isclass(obj):
                rows.append((f"{name}.{public}", score(docstring(obj))))
    return rows


def test_the_regexes_recognise_the_usual_spellings():
    assert score("x: (B, L) int64 token ids.\n\nRaises:\n    ValueError: bad.\n\nSource: Vaswani et al. 2017")["source"]
    good = "(..., L, E) float32\nRaises:\n    TypeError: x\nSource: the course's own: notebook 03"
    assert all(score(good).values())
    for shape in ("(B, L)", "(H,)", "(V, D)", "(L, S)", "(..., Hkv, S, Ev)", "(B, 1, 1, S)", "(H·E, d_in)", "(layers, H, L, S)"):
        assert score(shape)["shapes"], shape
    for not_shape in ("(Vaswani et al. 2017, section 3.2.1)", "(Shazeer 2019, MQA)", "(the default)", "(B)"):
        assert not score(not_shape)["shapes"], not_shape
    for dtype in ("int", "bool", "float32", "bfloat16", "a str", "dtype"):
        assert score(dtype)["dtypes"], dtype
    assert not score("see torch.Tensor")["source"]


def test_public_docstrings_give_shapes_dtypes_errors_and_a_source():
    rows = audit()
    missing = [f"{name}: no {', '.join(f for f in FEATURES if not s[f])}" for name, s in rows if not all(s.values())]
    full = len(rows) - len(missing)
    assert full >= THRESHOLD * len(rows), (
        f"{full}/{len(rows)} public functions/classes have all four (shapes, dtypes, Raises:, source); "
        f"{THRESHOLD:.0%} needed (goal {GOAL:.0%}). Missing:\n" + "\n".join(missing)
    )


if __name__ == "__main__":
    rows = audit()
    print(f"{sum(all(s.values()) for _, s in rows)}/{len(rows)} have all four")
    for name, s in rows:
        if not all(s.values()):
            print(f"{name}: no {', '.join(f for f in FEATURES if not s[f])}")
