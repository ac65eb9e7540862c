"""What a learner should see in each cell, read from the notebook as committed (made by `make execute`).

Nothing here is written per notebook: a cell is a *figure cell* because its saved outputs hold
an ``image/png``, a *widget cell* because they hold a widget view, a *check cell* because it calls
an exercise ``check_*`` function or shows a check's "✅"/"❌" message, a *bertviz cell* because it
holds bertviz's HTML and script (whose parameters give the tokens and heads it must draw).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
CHECK_MARKS = ("✅", "❌")
CHECK_CALL = re.compile(r"\bcheck_\w+\s*\(")

# ipywidgets model names -> the kind of control the browser test drives.
SLIDER_MODELS = {
    "IntSliderModel", "FloatSliderModel", "FloatLogSliderModel", "SelectionSliderModel",
    "IntRangeSliderModel", "FloatRangeSliderModel", "SelectionRangeSliderModel",
}
DROPDOWN_MODELS = {"DropdownModel"}
PROGRESS_MODELS = {"IntProgressModel", "FloatProgressModel"}


@dataclass
class BertvizView:
    """One bertviz visualisation saved in a cell (from the parameters its script embeds)."""

    kind: str  # "head" (head_view), "model" (model_view) or "other"
    layers: int | None = None  # layers shown
    heads: int | None = None  # attention heads per layer
    left_tokens: list[str] = field(default_factory=list)
    right_tokens: list[str] = field(default_factory=list)


@dataclass
class CellExpectation:
    index: int  # position among all cells (markdown included), as JupyterLab lists them
    cell_type: str
    source: str
    images: int = 0  # top-level image/png outputs (figures)
    widget_views: int = 0  # top-level widget outputs
    sliders: int = 0  # sliders inside those widgets (from the saved widget state, when saved)
    dropdowns: int = 0
    progress_bars: int = 0
    check_messages: list[str] = field(default_factory=list)
    calls_check: bool = False
    stderr: list[str] = field(default_factory=list)  # stderr streams saved (e.g. a warning the author kept)
    saved_errors: list[str] = field(default_factory=list)
    bertviz: list[BertvizView] = field(default_factory=list)

    @property
    def label(self) -> str:
        first = next((line for line in self.source.splitlines() if line.strip()), "")
        return f"cell {self.index + 1} ({first[:60]!r})"


@dataclass
class NotebookExpectation:
    path: Path
    rel: str  # path relative to the course root, as the server sees it
    cells: list[CellExpectation]
    is_solutions: bool

    @property
    def code_cells(self) -> list[CellExpectation]:
        return [c for c in self.cells if c.cell_type == "code"]


def _text(value) -> str:
    return "".join(value) if isinstance(value, list) else (value or "")


def _widget_models(state: dict, model_id: str, seen: set[str] | None = None) -> list[str]:
    """Model names of a widget and everything it contains (children, linked outputs)."""
    seen = set() if seen is None else seen
    if model_id in seen or model_id not in state:
        return []
    seen.add(model_id)
    model = state[model_id]
    names = [model.get("model_name", "")]
    refs: list[str] = []

    def collect(value):
        if isinstance(value, str) and value.startswith("IPY_MODEL_"):
            refs.append(value[len("IPY_MODEL_"):])
        elif isinstance(value, list):
            for v in value:
                collect(v)
        elif isinstance(value, dict):
            for v in value.values():
                collect(v)

    collect(model.get("state", {}).get("children", []))
    for ref in refs:
        names += _widget_models(state, ref, seen)
    return names


_PARAMS = re.compile(r"const params = ")


def _bertviz_view(script: str) -> BertvizView | None:
    m = _PARAMS.search(script)
    if not m:
        return None
    try:
        params, _ = json.JSONDecoder().raw_decode(script, m.end())
    except ValueError:
        return None
    # head_view.js groups its lines by head ("headAttention"); model_view.js draws one thumbnail
    # ("attn_background") per layer and head.
    kind = "head" if "headAttention" in script else "model" if "attn_background" in script else "other"
    view = BertvizView(kind=kind)
    try:
        attention = params["attention"][int(params.get("default_filter", 0))]
        view.layers = len(attention["attn"])
        view.heads = len(attention["attn"][0])
        view.left_tokens = list(attention["left_text"])
        view.right_tokens = list(attention["right_text"])
    except (KeyError, IndexError, TypeError, ValueError):
        pass
    return view


def read_notebook(path: Path, root: Path) -> NotebookExpectation:
    nb = json.loads(path.read_text(encoding="utf-8"))
    state = nb.get("metadata", {}).get("widgets", {}).get(WIDGET_STATE, {}).get("state", {})
    cells = []
    for i, cell in enumerate(nb["cells"]):
        exp = CellExpectation(index=i, cell_type=cell["cell_type"], source=_text(cell.get("source")))
        if cell["cell_type"] == "code":
            exp.calls_check = bool(CHECK_CALL.search(exp.source))
            for out in cell.get("outputs", []):
                kind = out.get("output_type")
                data = out.get("data", {})
                if kind == "error":
                    exp.saved_errors.append(f"{out.get('ename')}: {out.get('evalue')}")
                if kind == "stream":
                    text = _text(out.get("text"))
                    if out.get("name") == "stderr":
                        exp.stderr.append(text)
                    elif text.lstrip().startswith(CHECK_MARKS):
                        exp.check_messages.append(text.strip())
                if "image/png" in data:
                    exp.images += 1
                if WIDGET_VIEW in data:
                    exp.widget_views += 1
                    model_id = data[WIDGET_VIEW].get("model_id", "")
                    names = _widget_models(state, model_id)
                    exp.sliders += sum(n in SLIDER_MODELS for n in names)
                    exp.dropdowns += sum(n in DROPDOWN_MODELS for n in names)
                    exp.progress_bars += sum(n in PROGRESS_MODELS for n in names)
                elif "text/plain" in data and "text/html" not in data:
                    text = _text(data["text/plain"]).strip()
                    if text.startswith(CHECK_MARKS):
                        exp.check_messages.append(text)
                # bertviz's script and its parameters: a Javascript output (html_action="view"),
                # or inline in one HTML output (html_action="return").
                for mime in ("application/javascript", "text/html"):
                    script = _text(data.get(mime))
                    if "bertviz-" in script and "const params = " in script:
                        view = _bertviz_view(script)
                        if view is not None:
                            exp.bertviz.append(view)
                        break
        cells.append(exp)
    rel = path.resolve().relative_to(root.resolve()).as_posix()
    return NotebookExpectation(
        path=path, rel=rel, cells=cells,
        is_solutions="solutions" in Path(rel).parts,
    )
