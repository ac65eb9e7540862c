"""The notebooks' prose stays true to the notebooks themselves (issue 39, §2).

- Notebook 00's course map lists every notebook on disk, in order, with the minutes of its "Time" line and the
  earlier notebooks its "You need" line links to; so a new notebook (13, 14, ...) fails here until it is mapped.
- The README's table of measured run times lists every notebook, and the run times that 00 and the teaching guide
  quote agree with it.
- Every cross-reference in a notebook's Markdown points at something that exists, in the direction it says:
  "notebook NN" and links to notebooks name a notebook on disk; "section N" / "§N" names a numbered heading
  ("## N · ...") of this notebook (or of the notebook linked just before it); "section N below/above" and
  "section below/above" point the right way; and the numbered headings of a notebook skip no number.
"""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
NUMBERS = [p.name[:2] for p in NOTEBOOKS]


def _markdown(path: Path) -> list[str]:
    """Every cell's Markdown, with code cells as empty strings (cell indices kept)."""
    nb = nbformat.read(path, as_version=4)
    return [c.source if c.cell_type == "markdown" else "" for c in nb.cells]


def _cells(path: Path) -> list[str]:
    return [c.source for c in nbformat.read(path, as_version=4).cells]


def _box(path: Path) -> str:
    """The "You will learn / You need / Time" box at the top of a notebook."""
    for source in _markdown(path)[:4]:
        if "**You need:**" in source:
            return source
    raise AssertionError(f"{path.name}: no 'You need' box in its first cells")


def _time_minutes(path: Path) -> int:
    m = re.search(r"\*\*Time:\*\*\s*about (\d+) minutes", _box(path))
    assert m, f"{path.name}: its box has no 'Time: about N minutes' line"
    return int(m.group(1))


def _needs(path: Path) -> list[str]:
    """The earlier notebooks the 'You need' line links to, in course order."""
    box = _box(path)
    need = box[box.index("**You need:**"):]
    need = need[:need.index("**Time:**")] if "**Time:**" in need else need
    linked = set(re.findall(r"\]\((\d\d)_\w+\.ipynb\)", need))
    return sorted(n for n in linked if n < path.name[:2])


def _course_map() -> list[tuple[str, str, str, str]]:
    """00's map: (link text, link target, builds on, minutes) per row."""
    source = next(s for s in _markdown(ROOT / "notebooks" / "00_welcome.ipynb") if s.startswith("## The course map"))
    rows = re.findall(r"^\| \[([^\]]+)\]\(([^)]+)\) \| [^|]+ \| ([^|]+) \| ([^|]+) \|$", source, re.M)
    assert rows, "no rows found in 00's course map"
    return [tuple(part.strip() for part in row) for row in rows]


def test_course_map_lists_every_notebook_with_its_time_and_needs():
    rows = _course_map()
    assert [target for _, target, _, _ in rows] == [p.name for p in NOTEBOOKS], \
        "00's course map must list every notebooks/NN_*.ipynb, in order (a new notebook needs its row)"
    for (text, target, builds_on, minutes), path in zip(rows, NOTEBOOKS):
        assert text.startswith(path.name[:2] + " "), (text, target)
        assert int(minutes) == _time_minutes(path), \
            f"{target}: the map says {minutes} minutes, the notebook's Time line {_time_minutes(path)}"
        needs = _needs(path)
        assert builds_on == (", ".join(needs) if needs else "—"), \
            f"{target}: the map says it builds on {builds_on!r}, its 'You need' line links to {needs}"


def test_teaching_guide_minutes_are_the_notebooks_time_lines():
    """docs/teaching.md's table of objectives quotes each notebook's minutes; they follow the notebook's box."""
    text = (ROOT / "docs" / "teaching.md").read_text()
    rows = dict(re.findall(r"^\| `(\d\d)_\w+` \| (\d+)(?: \(\+\d+\))? \| ", text, re.M))
    for path in NOTEBOOKS:
        if path.name[:2] in rows:
            assert int(rows[path.name[:2]]) == _time_minutes(path), (path.name, rows[path.name[:2]])


def test_readme_notebook_table_lists_every_notebook():
    text = (ROOT / "README.md").read_text()
    section = text[text.index("## The notebooks"):]
    section = section[:section.index("\n## ", 3)]
    listed = re.findall(r"^\| `(\d\d_\w+)` \| [^|\d]", section, re.M)  # not the table of seconds
    assert listed == [p.stem for p in NOTEBOOKS], "README's table of notebooks must list every notebook, in order"


def _readme_seconds() -> dict[str, int]:
    text = (ROOT / "README.md").read_text()
    return {m.group(1): int(m.group(2)) for m in re.finditer(r"^\| `(\d\d)_\w+` \| (\d+) \| \d+ \|$", text, re.M)}


def test_readme_times_list_every_notebook_and_the_quoted_times_agree():
    seconds = _readme_seconds()
    assert sorted(seconds) == NUMBERS, "README's table of run times must list every notebook"
    assert max(seconds.values()) < 60, "every notebook runs in under a minute (README's measured times)"
    live = {"07", "10", "11"}  # the three that train a model live
    others = [s for n, s in seconds.items() if n not in live]
    welcome = _markdown(ROOT / "notebooks" / "00_welcome.ipynb")
    teaching = (ROOT / "docs" / "teaching.md").read_text()
    quotes = [
        (welcome[0], r"most in (\d+)–(\d+) s, the three that train a model live\s+\(07, 10 and 11\) in about (\d+)–(\d+) s"),
        ("\n".join(welcome), r"(\d+)–(\d+) s for most, about (\d+)–(\d+) s for 07, 10 and 11"),
        (teaching, r"run in (\d+)-(\d+) s on a laptop CPU, 07, 10 and 11 \(which train models live[^)]*\)\s+in about (\d+)-(\d+) s"),
    ]
    for text, pattern in quotes:
        m = re.search(pattern, text)
        assert m, f"the run-time sentence {pattern!r} is gone: update this test with the new wording"
        lo, hi, live_lo, live_hi = (int(g) for g in m.groups())
        assert lo <= min(others) and max(others) <= hi, (pattern, others)
        assert all(live_lo - 3 <= seconds[n] <= live_hi + 3 for n in live), (pattern, {n: seconds[n] for n in live})


# ---------------------------------------------------------------------------------------------------------------
# Cross-references

HEADING = re.compile(r"^#{2,3} (\d+)([a-z]?) · ", re.M)
SECTION = re.compile(r"(?:\b[Ss]ections? |§ ?)(\d+)([a-z]?)(?![.\d])(?:'s)?(?:,? (below|above))?")
NOTEBOOK = re.compile(r"\b[Nn]otebooks? (\d\d)\b(?![–-])(?:(?:,| and| or) (\d\d)\b(?![–-]))*")
RELATIVE = re.compile(r"\b(?:the )?section (below|above)\b", re.I)


def _headings(path: Path) -> dict[str, int]:
    """'N' or 'Nb' -> the index of the cell whose heading carries that number."""
    found = {}
    for i, source in enumerate(_markdown(path)):
        for m in HEADING.finditer(source):
            found[m.group(1) + m.group(2)] = i
    return found


def _is_paper_reference(source: str, start: int) -> bool:
    """A section of a paper, not of a notebook: "et al. ..., section 2", "[Gemma 2](https://...) (§2, ...)"."""
    line_start = source.rfind("\n", 0, start) + 1
    before = source[max(line_start, start - 80):start]
    return bool(re.search(r"et al\.|\]\(https?://[^)]*\)[^.]*$|arXiv|Table \d+ \($", before))


def _references_cell(source: str) -> bool:
    return source.lstrip().startswith("## References") or "\n## References" in source


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name[:2])
def test_numbered_headings_skip_no_number(path):
    numbers = sorted({int(n.rstrip("abcdefgh")) for n in _headings(path)})
    assert numbers == list(range(1, len(numbers) + 1)) or not numbers, \
        f"{path.name}: its numbered sections are {numbers}, with a gap"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name[:2])
def test_cross_references_point_at_something_that_exists(path):
    cells = _markdown(path)
    everything = _cells(path)
    own = _headings(path)
    problems = []
    for i, source in enumerate(cells):
        if not source or _references_cell(source):
            continue
        for m in NOTEBOOK.finditer(source):
            for number in re.findall(r"\d\d", m.group(0)):
                if number not in NUMBERS:
                    problems.append(f"cell {i}: {m.group(0)!r}: there is no notebook {number}")
        for target in re.findall(r"\]\((\d\d_\w+\.ipynb)\)", source):
            if not (ROOT / "notebooks" / target).exists():
                problems.append(f"cell {i}: a link to {target}, which does not exist")
        for m in SECTION.finditer(source):
            if _is_paper_reference(source, m.start()):
                continue
            number, direction = m.group(1) + m.group(2), m.group(3)
            # "[07 Cross-attention](07_cross_attention.ipynb) (section 6 ...)": a section of the linked notebook
            line_start = source.rfind("\n", 0, m.start()) + 1
            linked = re.findall(r"\]\((\d\d)_\w+\.ipynb\)[^.;]*$|\b[Nn]otebook (\d\d)(?:'s)?,?\s*$",
                                source[max(line_start - 1, m.start() - 80):m.start()])
            other = next((a or b for a, b in linked[-1:]), None)
            if other and other != path.name[:2]:
                target = next(p for p in NOTEBOOKS if p.name.startswith(other))
                if number not in _headings(target):
                    problems.append(f"cell {i}: {m.group(0)!r} of notebook {other}: it has no section {number}")
                continue
            if number not in own:
                problems.append(f"cell {i}: {m.group(0)!r}: this notebook has no section {number} "
                                f"(its numbered sections: {sorted(own)})")
            elif direction == "below" and own[number] <= i or direction == "above" and own[number] > i:
                problems.append(f"cell {i}: {m.group(0)!r}, but section {number} is in cell {own[number]}")
        for m in RELATIVE.finditer(source):
            direction = m.group(1).lower()
            span = range(i + 1, len(cells)) if direction == "below" else range(0, i)
            if not any(re.search(r"^#{2,3} ", cells[j], re.M) for j in span):
                problems.append(f"cell {i}: {m.group(0)!r}, but no section starts {direction} it")
            # "`name` (section below)": the section that introduces the name is in that direction: "below" when
            # no earlier cell mentions it yet, "above" when an earlier cell does
            sentence = source[max(source.rfind(". ", 0, m.start()), source.rfind("\n\n", 0, m.start()), 0):m.start()]
            names = re.findall(r"`([^`]+)`", sentence)
            if names:
                name = names[-1].split(".")[-1]
                first = next((j for j, text in enumerate(everything) if j != i and name in text), None)
                if first is None or (first < i) != (direction == "above"):
                    problems.append(f"cell {i}: `{names[-1]}` ({m.group(0)}), but it is first met in cell {first}")
    assert not problems, f"{path.name}:\n" + "\n".join(problems)


# ---------------------------------------------------------------------------------------------------------------
# Prose generated from measurements

@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name[:2])
def test_generated_prose_is_saved_with_its_cell(path):
    """A cell that writes its finding as Markdown (`display(Markdown(...))`, issue 39 §2: numbers quoted from a
    measurement come from its output) is committed with that Markdown among its outputs."""
    nb = nbformat.read(path, as_version=4)
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "code" and "display(Markdown(" in cell.source:
            markdown = [o for o in cell.outputs if o.get("output_type") == "display_data" and "text/markdown" in o.data]
            assert markdown, f"{path.name} cell {i} writes Markdown but was saved without it: re-execute the notebook"
            assert not re.search(r"\{[a-z_]+[^}]*\}", markdown[-1].data["text/markdown"]), \
                f"{path.name} cell {i}: an unformatted placeholder in the generated Markdown (a missing f?)"
