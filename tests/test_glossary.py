"""The glossary holds every term a notebook defines in bold, and every entry points to a notebook that exists.

What counts as a *defined* term (notebooks 00 onwards, markdown cells; solutions excluded). A bold span
``**X**`` is a definition when the words around it say that X is being named or explained:

1. a naming phrase ends right before it: "called", "known as", "named", "we call", "is termed"
   ("This property is called **permutation equivariance**");
2. it follows A, An or The at the start of a sentence, a line or a list item ("A **tokenizer** cuts the text",
   "The **model view** shows all 72 heads"); or
3. it is followed, after an optional parenthesis, by "—", "is", "are", "means" or "measures" ("**uptraining** (...)
   — ...", "Its **queries** are the output of ...");
4. it follows "a" or "an" and is followed by a colon ("compare it with a **positional baseline**: what ...");
5. it opens a list item, starts with a small letter and is followed, after an optional parenthesis, by a colon
   ("- **interleaved** (the RoFormer paper, ...): pairs (0, 1), ...").

Rules 4 and 5 were added when issue 39 found four bold terms (positional baseline, permutation null,
interleaved/half-split, Bonferroni) missing from the glossary that rules 1-3 did not see.

Bold used for emphasis or as a paragraph label ("**Time:**", "**Predict, then check.**", "**not**") matches none of
these. The few emphasis uses that do match one are listed in EMPHASIS, each with its reason.

A term is in the glossary when it, or its singular, is an entry's headword, one of the headword's " / "-separated
parts, or the text in parentheses after it; "X and Y" needs both X and Y.
"""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
GLOSSARY = ROOT / "notebooks" / "glossary.md"
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))

#: Bold words that match a definition pattern but are emphasis or labels, not terms.
EMPHASIS = {
    "optional": "00: the label of the optional sections, explained where it is used",
    "question in mind": "03: the library analogy's words, not a term",
    "the task": "06: emphasis in a list of measured effects",
    "memory": "09: a paragraph label (Memory / Time) in the benchmark discussion",
    "the inner loop": "09: names a part of the kernel being walked through, the loop of the tiling section",
    "explorer": "06: the name of the course's own widget, described where it is shown",
    "2–3× speed-up": "09: a measured claim, set in bold as emphasis",
    "unknown words": "01: the label of one of two problems in a list (unknown words, size)",
    "size": "01: the label of one of two problems in a list (unknown words, size)",
    "subject → verb": "06: a role under test, as the label of its result in a list",
    "adjective → noun": "06: a role under test, as the label of its result in a list",
    "verb → object": "06: a role under test, as the label of its result in a list",
    "convert": "08: a step of the uptraining recipe, the label of a numbered list item",
    "measure the drop": "08: a step of the uptraining recipe, the label of a numbered list item",
}

NAMING = re.compile(r"\b(?:called|known as|named|we call|is termed)\s+(?:(?:a|an|the)\s+)?$", re.I)
OPENING = re.compile(r"(?:^|\n|[.!?]\s+|\n\s*(?:[-*]|\d+\.)\s+|^\s*(?:[-*]|\d+\.)\s+)(?:A|An|The)\s+$", re.I)
EXPLAINED = re.compile(r"^\s*(?:\([^)]*\)\s*)?(?:—|is\b|are\b|means\b|measures\b)")
ARTICLE = re.compile(r"\b(?:a|an)\s+$", re.I)
LIST_ITEM = re.compile(r"(?:^|\n)\s*(?:[-*]|\d+\.)\s+$")
COLON = re.compile(r"^\s*(?:\([^)]*\)\s*)?:")
BOLD = re.compile(r"\*\*([^*\n]+?(?:\n[^*\n]+?)?)\*\*")  # a bold span may wrap onto a second line


def defined_terms(source: str):
    """The bold spans of one markdown cell that the module docstring's rule calls definitions."""
    for m in BOLD.finditer(source):
        before, after = source[max(0, m.start() - 60):m.start()], source[m.end():m.end() + 160]
        term = " ".join(m.group(1).split())
        if NAMING.search(before) or OPENING.search(before) or EXPLAINED.match(after):
            yield term
        elif COLON.match(after) and (ARTICLE.search(before)
                                     or LIST_ITEM.search(before) and len(term) > 1 and term[0].islower()):
            yield term


def glossary_keys(text: str) -> set[str]:
    keys = set()
    for m in re.finditer(r"^\*\*(.+?)\*\*(?:\s*\(([^)]*)\))?", text, re.M):
        head = m.group(1).replace("`", "").lower()
        keys.add(head)
        keys.add(re.sub(r"\s*\(.*?\)", "", head).strip())
        keys.update(a.strip() for a in re.findall(r"\(([^)]*)\)", head))
        keys.update(p.strip() for p in re.split(r" / |, ", head))
        if m.group(2):
            keys.add(m.group(2).lower().strip())
    return keys


def _forms(term: str) -> set[str]:
    t = re.sub(r"^(?:a|an|the)\s+", "", term.replace("`", "").lower().strip())
    forms = {t, t.removesuffix("s"), t.removesuffix("es")}
    if t.endswith("ies"):
        forms.add(t[:-3] + "y")
    return forms


def in_glossary(term: str, keys: set[str]) -> bool:
    parts = re.split(r"\s+and\s+", term.strip())
    return all(_forms(p) & keys for p in parts)


def missing_terms(glossary_text: str) -> list[str]:
    keys = glossary_keys(glossary_text)
    missing = []
    for path in NOTEBOOKS:
        for i, cell in enumerate(nbformat.read(path, as_version=4).cells):
            if cell.cell_type != "markdown":
                continue
            for term in defined_terms(cell.source):
                if term.lower() not in EMPHASIS and not in_glossary(term, keys):
                    missing.append(f"{path.name} cell {i}: **{term}**")
    return missing


def test_every_term_a_notebook_defines_in_bold_is_in_the_glossary():
    missing = missing_terms(GLOSSARY.read_text(encoding="utf-8"))
    assert not missing, "add to notebooks/glossary.md (or to EMPHASIS, with a reason):\n" + "\n".join(missing)


def test_the_rule_finds_definitions_and_skips_emphasis():
    cell = ("This property is called **permutation equivariance**. A **tokenizer** cuts text. **Time:** 5 minutes.\n"
            "It does **not** flip. **uptraining** (GQA) — more steps. Its **queries** are the decoder's.")
    assert list(defined_terms(cell)) == ["permutation equivariance", "tokenizer", "uptraining", "queries"]
    cell = ("We compare it with a **positional baseline**: what the head gives any token.\n"
            "- **interleaved** (the RoFormer paper, GPT-J, Meta's original LLaMA code): pairs (0, 1).\n"
            "- **a**: a previous-token head\n**Pearson's r** measures a line. **Label**: not a term.")
    assert list(defined_terms(cell)) == ["positional baseline", "interleaved", "Pearson's r"]


@pytest.mark.parametrize("term", ["positional baseline", "permutation null", "interleaved / half-split",
                                  "Bonferroni correction", "Pearson's r"])
def test_the_issue_39_terms_are_entries_and_removing_one_is_caught(term):
    text = GLOSSARY.read_text(encoding="utf-8")
    entry = re.search(r"^\*\*" + re.escape(term) + r"\*\*.*?(?:\n\n|\Z)", text, re.M | re.S)
    assert entry, f"{term} is not a glossary entry"
    assert missing_terms(text.replace(entry.group(0), "")), term


@pytest.mark.parametrize("term", ["tokenizer", "vocabulary", "uptraining", "Triton", "LayerNorm", "HBM / SRAM",
                                  "absmax quantisation", "additive mask", "δ"])
def test_removing_an_entry_is_caught(term):
    """The issue 27 terms are entries; dropping one of those that a notebook defines in bold fails the check."""
    text = GLOSSARY.read_text(encoding="utf-8")
    entry = re.search(r"^\*\*" + re.escape(term) + r"\*\*.*?(?:\n\n|\Z)", text, re.M | re.S)
    assert entry, f"{term} is not a glossary entry"
    if term in ("tokenizer", "vocabulary"):  # 01 defines both in bold ("a **tokenizer** cuts the text ...")
        assert missing_terms(text.replace(entry.group(0), "")), term


def test_glossary_is_alphabetical_and_every_entry_names_a_notebook():
    text = GLOSSARY.read_text(encoding="utf-8")
    entries = re.findall(r"^\*\*(.+?)\*\*(.*?)(?=\n\n|\Z)", text, re.M | re.S)
    assert len(entries) > 70
    for head, body in entries:
        links = re.findall(r"\]\(([0-9]{2}_[a-z0-9_]+\.ipynb)\)", body)
        assert links or re.search(r"see \*[^*]+\*", body), f"{head}: no notebook link"
        for link in links:
            assert (ROOT / "notebooks" / link).exists(), (head, link)
    # case, punctuation and symbols ignored; "_" and "-" count as spaces; δ is spelled delta
    sort_key = [re.sub(r"[^a-z0-9 ]", "", re.sub(r"[_-]", " ", h.lower().replace("δ", "delta"))) for h, _ in entries]
    out_of_order = [(a, b) for a, b in zip(sort_key, sort_key[1:]) if a > b]
    assert not out_of_order, out_of_order
