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


def _module_imports():
    """attn_lib module -> the attn_lib modules it imports at module level (not inside functions)."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    graph = {}
    for path in (root / "attn_lib").rglob("*.py"):
        rel = path.relative_to(root).with_suffix("")
        name = ".".join(rel.parts).removesuffix(".__init__")
        tree = ast.parse(path.read_text(encoding="utf-8"))
        deps = set()
        for node in tree.body:  # top level only: a function-level import runs on use, not on import
            if isinstance(node, ast.If) and "__main__" in ast.unparse(node.test):
                continue  # the script entry point runs only as `python -m`
            if isinstance(node, ast.If):  # `if triton is not None:` style guards still run at import time
                nodes = node.body + node.orelse
            elif isinstance(node, ast.Try):
                nodes = node.body
            else:
                nodes = [node]
            for n in nodes:
                if isinstance(n, ast.ImportFrom) and n.module and n.module.startswith("attn_lib"):
                    deps.add(n.module)
                elif isinstance(n, ast.Import):
                    deps.update(a.name for a in n.names if a.name.startswith("attn_lib"))
        graph[name] = {d for d in deps if d != name}
    return graph


def test_no_import_cycle_inside_attn_lib():
    graph = _module_imports()
    state = {}

    def visit(node, path):
        state[node] = "open"
        for dep in sorted(graph.get(node, ())):
            if dep == "attn_lib":  # the package's lazy __init__ imports only _setup and pretrained
                continue
            if state.get(dep) == "open":
                raise AssertionError("import cycle: " + " -> ".join(path + [dep]))
            if dep not in state:
                visit(dep, path + [dep])
        state[node] = "done"

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])


def test_no_module_of_the_math_imports_plotting():
    """The attention math imports neither matplotlib nor attn_lib.viz nor attn_lib.diagrams at import time."""
    import ast
    from pathlib import Path

    math_modules = ["attention", "masks", "mha", "positional", "kv_cache", "quantization", "gqa", "tiled", "_tiling",
                    "flash", "mla", "windows", "variants", "sparse", "linear", "deltanet", "_checks"]
    root = Path(__file__).resolve().parent.parent / "attn_lib"
    for name in math_modules:
        tree = ast.parse((root / f"{name}.py").read_text(encoding="utf-8"))
        for node in tree.body:
            mods = []
            if isinstance(node, ast.ImportFrom) and node.module:
                mods = [node.module]
            elif isinstance(node, ast.Import):
                mods = [a.name for a in node.names]
            for m in mods:
                assert not (m.startswith("matplotlib") or m in ("attn_lib.viz", "attn_lib.diagrams")), \
                    f"attn_lib.{name} imports {m}"
    graph = _module_imports()
    for name in math_modules:  # nor through another attn_lib module
        seen, todo = set(), [f"attn_lib.{name}"]
        while todo:
            m = todo.pop()
            assert m not in ("attn_lib.viz", "attn_lib.diagrams"), f"attn_lib.{name} reaches {m} at import time"
            for dep in graph.get(m, ()):
                if dep not in seen and dep != "attn_lib":
                    seen.add(dep)
                    todo.append(dep)


def test_every_model_decodes_with_one_name():
    """#23 §5: decoding was ``generate``, ``generate_greedy`` or ``greedy_decode`` depending on the model; now every
    model of attn_lib.models decodes with ``generate`` (through the one loop, attn_lib.models.decoding.sample_loop)."""
    from attn_lib.models import Seq2SeqTransformer
    from attn_lib.models.lm import DecoderLM

    for cls in (DecoderLM, Seq2SeqTransformer):
        assert callable(getattr(cls, "generate", None)), cls
        assert not {"greedy_decode", "generate_greedy"} & set(dir(cls)), cls
