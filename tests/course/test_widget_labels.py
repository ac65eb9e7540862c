"""Every widget of the course's explorers shows its whole label (no "temperat…")."""

import ipywidgets as widgets
import torch

from attn_lib.course import viz


def _controls(box):
    found = []
    for child in getattr(box, "children", ()):
        if isinstance(child, (widgets.IntSlider, widgets.FloatLogSlider, widgets.Dropdown)):
            found.append(child)
        found += _controls(child)
    return found


def test_explorer_labels_are_not_cut():
    attentions = tuple(torch.softmax(torch.randn(1, 2, 4, 4), -1) for _ in range(2))
    boxes = [viz.temperature_explorer(), viz.mask_explorer(), viz.attention_explorer(attentions, list("abcd"))]
    controls = [c for box in boxes for c in _controls(box)]
    assert len(controls) >= 7, [c.description for c in controls]
    for c in controls:
        assert c.style.description_width == "initial", c.description
