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
        if name.startswith("attn_lib.course.exercises"):
            continue  # attn_lib.course.exercises re-exports its submodules' check_* on purpose (star imports)
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
    for sub in ("models", "course"):
        modules |= {p.stem for p in (root / "attn_lib" / sub).glob("*.py") if p.stem != "__init__"}
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


CORE = {"tokenization", "positional", "attention", "masks", "mha", "kv_cache", "quantization", "gqa", "tiled", "_tiling",
        "block_sparse",
        "flash", "flash_kernels", "_triton_interp", "mla", "windows", "variants", "sparse", "linear", "deltanet",
        "_checks", "paged", "serving", "speculative", "ring"}
CORE |= {"compressed"}  # issue 36: DeepSeek-V4's CSA / HCA (notebook 13); its own line, for parallel branches
FORBIDDEN = ("attn_lib.course", "matplotlib", "ipywidgets", "bertviz", "nbgrader")


def _core_files():
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent / "attn_lib"
    return [root / f"{m}.py" for m in sorted(CORE)] + sorted((root / "models").glob("*.py"))


def test_attn_lib_holds_the_core_and_one_machinery_package():
    """#33: ``ls attn_lib/`` shows the attention a learner studies, plus ``course/`` (what runs the course)."""
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent / "attn_lib"
    modules = {p.stem for p in root.glob("*.py")} - {"__init__"}
    packages = {p.name for p in root.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert modules == CORE, (sorted(modules - CORE), sorted(CORE - modules))
    assert packages == {"course", "models"}, packages


def test_no_core_module_imports_the_machinery_or_a_plotting_library():
    """#33's import rule, anywhere in a core module (a function-level import too, and ``importlib.import_module``
    with a literal name): never ``attn_lib.course``, matplotlib, ipywidgets, bertviz or nbgrader."""
    import ast

    offences = []
    for path in _core_files():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = []
            if isinstance(node, ast.ImportFrom):
                names = [node.module or ""] + [f"{node.module}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.Call) and ast.unparse(node.func).endswith("import_module") and node.args \
                    and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
                names = [node.args[0].value]
            offences += [f"{path.name}:{node.lineno} imports {n}" for n in names if n.startswith(FORBIDDEN)]
    assert not offences, offences


def test_importing_the_core_loads_no_plotting_library():
    """Importing every core module (and the package) loads neither matplotlib, ipywidgets, bertviz nor nbgrader."""
    import subprocess
    import sys

    mods = [f"attn_lib.{p.stem}" if p.parent.name == "attn_lib" else f"attn_lib.models.{p.stem}" for p in _core_files()]
    mods = [m.removesuffix(".__init__") for m in mods if m != "attn_lib._triton_interp"]
    code = ("import importlib, sys\n"
            f"for m in {mods!r}:\n"
            "    try:\n        importlib.import_module(m)\n"
            "    except ModuleNotFoundError as e:\n        assert e.name == 'triton', e\n"
            f"print(sorted(n for n in sys.modules if n.split('.')[0] in {['matplotlib', 'ipywidgets', 'bertviz', 'nbgrader']!r}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[]", out.stdout[-2000:]


def test_every_model_decodes_with_one_name():
    """#23 §5: decoding was ``generate``, ``generate_greedy`` or ``greedy_decode`` depending on the model; now every
    model of attn_lib.models decodes with ``generate`` (through the one loop, attn_lib.models.decoding.sample_loop)."""
    from attn_lib.models import Seq2SeqTransformer
    from attn_lib.models.lm import DecoderLM

    for cls in (DecoderLM, Seq2SeqTransformer):
        assert callable(getattr(cls, "generate", None)), cls
        assert not {"greedy_decode", "generate_greedy"} & set(dir(cls)), cls
