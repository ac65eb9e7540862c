"""attn_lib's layout (#12): every name of ``attn_lib.__all__`` is the documented object, whatever was imported first.

A package attribute and a submodule of the same name collide: ``import attn_lib.tiled_attention`` used to
replace the function ``attn_lib.tiled_attention`` with the module. Here every submodule is imported first
(found with pkgutil, so a new module needs no edit here), then every public name is checked.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import types

import attn_lib


def _all_submodules() -> list[str]:
    names = []
    for info in pkgutil.walk_packages(attn_lib.__path__, prefix="attn_lib."):
        if info.name.rsplit(".", 1)[-1] == "__main__":
            continue
        names.append(info.name)
    return names


def test_every_public_name_is_its_object_after_importing_every_submodule():
    failed = {}
    for name in _all_submodules():
        try:
            importlib.import_module(name)
        except ImportError as error:  # an optional dependency (triton) may be missing on this machine
            failed[name] = error
    assert not [n for n in failed if not isinstance(failed[n], ModuleNotFoundError)], failed
    for name in attn_lib.__all__:
        value = getattr(attn_lib, name)
        assert not isinstance(value, types.ModuleType), f"attn_lib.{name} is the module {value.__name__}, not the object"
        where = attn_lib._LAZY.get(name)
        if where is not None:
            module = importlib.import_module(where)
            assert value is getattr(module, name), f"attn_lib.{name} is not {where}.{name}"
            assert name in getattr(module, "__all__", [name]), f"{where}.__all__ lacks {name}"


def test_no_lazy_name_shares_a_name_with_a_submodule():
    submodules = {n.split(".")[1] for n in _all_submodules()}
    assert not submodules & set(attn_lib._LAZY), submodules & set(attn_lib._LAZY)
    # every top-level module is reachable as an attribute (attn_lib.kv_cache without an import)
    public = {n for n in submodules if not n.startswith("_")}
    assert attn_lib._SUBMODULES >= public, public - attn_lib._SUBMODULES


def test_each_public_name_is_defined_in_one_module():
    """One name per object: a public name is defined in the module that lists it in ``__all__``, never
    re-exported from a second module's ``__all__`` (only attn_lib itself re-exports, lazily)."""
    owners: dict[str, list[str]] = {}
    for name in _all_submodules():
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError:
            continue
        if name.startswith("attn_lib.exercises"):
            continue  # attn_lib.exercises re-exports its submodules' check_* on purpose (star imports)
        for public in getattr(module, "__all__", []):
            obj = getattr(module, public)
            if inspect.isfunction(obj) or inspect.isclass(obj):
                if obj.__module__ != name:
                    owners.setdefault(public, []).append(f"{name} (defined in {obj.__module__})")
    assert not owners, owners


def test_readme_layout_names_every_module():
    """The README's Layout section lists every module of attn_lib (and of attn_lib.models) by name."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    readme = (root / "README.md").read_text(encoding="utf-8")
    layout = readme[readme.index("## Layout"):readme.index("## Tests")]
    named = set(re.findall(r"`([\w/]+)`", layout))
    modules = {p.stem for p in (root / "attn_lib").glob("*.py") if p.stem != "__init__"}
    modules |= {p.stem for p in (root / "attn_lib" / "models").glob("*.py") if p.stem != "__init__"}
    missing = sorted(m for m in modules if m not in named)
    assert not missing, f"README's Layout does not name: {missing}"
