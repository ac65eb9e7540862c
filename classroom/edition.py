"""The student edition: what ``make release`` builds for students, a folder the teacher pushes as its own repository.

    build/student-edition/
        README.md, Makefile (make lab, make test), requirements.txt, pyproject.toml, .gitignore,
        environment.yml, postBuild     (repo2docker: the Zero to JupyterHub user image is built from this folder)
        notebooks/<nb>/<nb>.ipynb     the released notebooks (nbgrader's release: stubs, locked cells, no output),
                                      and the notebooks without exercises; each folder has a copy of glossary.md
        attn_lib/                     the course's package, with the prediction answers withheld
        data/                         the course's data (corpus, dates model, recall curve)

It holds no solution (no ``notebooks/solutions/``, no solution cell, no ``### BEGIN SOLUTION``), no hidden test
(there are none: the grader runs the checks in its own process) and no prediction answer: each
``attn_lib/course/exercises/predict_questions.py`` keeps its questions' prompts and choices but not the answer, the hints (a hint
for every wrong choice names the right one by elimination) or the explanation; ``check_prediction`` then records a
valid answer and says the answer is discussed in class. Notebooks sit one per folder, as nbgrader's exchange hands
them out, so the links between notebooks are written ``../04_masking/04_masking.ipynb`` (:func:`fix_links`) and
work in both. ``make release`` makes the folder a git repository with one commit (``git push URL main`` publishes
it; docs/hub.md).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# Sentences of the course notebooks that send the reader to the solutions; what the student edition says instead.
SOLUTION_SENTENCES = [
    (re.compile(r"Worked solutions are in `notebooks/solutions/`\."),
     "Your teacher hands out the worked solutions after the deadline."),
    (re.compile(r"Solutions: `notebooks/solutions/[\w.-]+_solutions\.ipynb`\."),
     "Your teacher hands out the worked solutions after the deadline."),
    (re.compile(r"The worked solution is in\s+`notebooks/solutions/my_attn/`\."),
     "Your teacher hands out the worked solution after the deadline."),
]
NOTEBOOK_LINK = re.compile(r"\]\((\d\d_[\w-]+)\.ipynb(#[^)]*)?\)")


def fix_links(text: str, notebooks: set[str]) -> str:
    """Markdown links of one notebook, for the one-folder-per-notebook layout of nbgrader's release:
    ``](04_masking.ipynb)`` becomes ``](../04_masking/04_masking.ipynb)`` (``glossary.md`` is copied into each
    folder, so its links stay); the sentences that point at ``notebooks/solutions/`` are replaced."""
    def link(m: re.Match) -> str:
        name = m.group(1)
        if name not in notebooks:
            return m.group(0)
        return f"](../{name}/{name}.ipynb{m.group(2) or ''})"

    text = NOTEBOOK_LINK.sub(link, text)
    for pattern, replacement in SOLUTION_SENTENCES:
        text = pattern.sub(replacement, text)
    return text


def fix_notebook(nb: dict, notebooks: set[str]) -> dict:
    for cell in nb["cells"]:
        if cell["cell_type"] == "markdown":
            src = cell["source"]
            text = "".join(src) if isinstance(src, list) else src
            cell["source"] = fix_links(text, notebooks)
    return nb


def course_notebooks(notebooks_dir: Path) -> list[str]:
    return sorted(p.stem for p in notebooks_dir.glob("[0-9][0-9]_*.ipynb"))


def withheld_predictions() -> dict[str, str]:
    """predict_questions.py -> the same module with every question's answer, hints and explanation left out."""
    from attn_lib.course.exercises import concepts

    concepts._load_all()
    lines = ['"""Every notebook\'s "predict, then check" questions, as the student edition ships them: the answers are '
             'withheld\n(your teacher discusses them in class; see attn_lib.course.exercises.concepts)."""', "",
             "from attn_lib.course.exercises.concepts import Question, register", ""]
    for q in concepts.QUESTIONS.values():
        lines.append(f"register(Question(id={q.id!r}, prompt={q.prompt!r}, choices={dict(q.choices)!r}, "
                     "answer=None, explanation=''))")
    return {"predict_questions.py": "\n".join(lines) + "\n"}


README = """\
# Attention, from scratch: the student edition

The notebooks of the attention course, with their exercises to do. Your teacher grades your work.

## Two commands

You need Python 3.10 or newer and `make` (Linux or macOS):

```bash
make lab     # creates .venv, installs requirements.txt and attn_lib, opens JupyterLab on the first notebook
make test    # checks that the course environment works (imports, the course kernel)
```

On the class hub none of this is needed: your teacher's link opens this course in your browser.

## How it works

- `notebooks/NN_name/NN_name.ipynb`, one folder per notebook; start with `notebooks/00_welcome/00_welcome.ipynb`.
  Terms are explained in the `glossary.md` next to each notebook.
- Each exercise is a cell that says `raise NotImplementedError  # your code here`: write your code there. The
  cell after it runs the course's check on your answer (✅ or ❌ with a hint). Do not edit the other cells: they are
  locked, and grading puts them back as released.
- "Predict, then check" questions: write your prediction (a letter or a number). In this edition the answers are
  not included: your prediction is recorded, counts when you answer, and the answer is discussed in class.
- `my_attn/` is your own attention stack: stubs that you replace, piece by piece, as the notebooks teach them.
  `make check-mine` shows which pieces pass and the first hint for the rest; `ATTN_MINE=1 make lab` runs the
  notebooks on your pieces.
- Worked solutions are not in this edition: your teacher hands them out after the deadline.
- Submit as your teacher says (the Assignments tab on the hub, or your notebook files).
"""

MAKEFILE = """\
# The student edition's two commands: `make lab` (study) and `make test` (check the environment).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1

.PHONY: lab test install check-mine
$(VENV)/.installed: requirements.txt pyproject.toml
\t$(PYTHON) -m venv $(VENV)
\t$(BIN)/python -m pip install -r requirements.txt
\t$(BIN)/python -m pip install --no-deps -e .
\t$(BIN)/python -m ipykernel install --sys-prefix --name attn-course --display-name "Attention course (.venv)"
\ttouch $@

install: $(VENV)/.installed

lab: install
\t$(BIN)/python -m jupyter lab --ServerApp.root_dir=$(CURDIR) notebooks/00_welcome/00_welcome.ipynb

check-mine: install
\t@$(BIN)/python -m attn_lib.course.mine

test: install
\t$(BIN)/python -c "import attn_lib, torch, transformers; from attn_lib.course.exercises import check_prediction; \\
\t\tprint('attn_lib', attn_lib.__file__, '| torch', torch.__version__, '|', check_prediction('03.scale_by_dk', 'b'))"
"""

GITIGNORE = ".venv/\n__pycache__/\n*.pyc\n.ipynb_checkpoints/\n"


def build_edition(release_dir: Path, out: Path, notebooks_dir: Path = ROOT / "notebooks", *,
                  git: bool = True) -> Path:
    """Write the student edition into ``out`` (replaced) from nbgrader's release (``release_dir/<nb>/``) and the
    course notebooks without exercises; with ``git``, make it a repository with one commit on branch ``main``."""
    shutil.rmtree(out, ignore_errors=True)
    (out / "notebooks").mkdir(parents=True)
    names = course_notebooks(notebooks_dir)
    glossary = notebooks_dir / "glossary.md"
    for name in names:
        dest = out / "notebooks" / name
        if (release_dir / name).is_dir():
            shutil.copytree(release_dir / name, dest)
        else:  # a notebook without exercises: the course's own, its links fixed
            dest.mkdir()
            nb = fix_notebook(json.loads((notebooks_dir / f"{name}.ipynb").read_text()), set(names))
            (dest / f"{name}.ipynb").write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n")
        if glossary.exists():
            shutil.copy2(glossary, dest / "glossary.md")
    shutil.copytree(ROOT / "attn_lib", out / "attn_lib", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    # the learner's own stack: the stubs only (the worked solution stays in notebooks/solutions/)
    shutil.copytree(ROOT / "my_attn", out / "my_attn", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for fname, text in withheld_predictions().items():
        (out / "attn_lib" / "course" / "exercises" / fname).write_text(text)
    shutil.copytree(ROOT / "data", out / "data", ignore=shutil.ignore_patterns("__pycache__"))
    # environment.yml + postBuild: repo2docker builds the Zero to JupyterHub user image from this folder
    for f in ("requirements.txt", "pyproject.toml", "environment.yml", "postBuild"):
        shutil.copy2(ROOT / f, out / f)
    (out / "README.md").write_text(README)
    (out / "Makefile").write_text(MAKEFILE)
    (out / ".gitignore").write_text(GITIGNORE)
    for d, _, files in os.walk(out):
        os.chmod(d, 0o755)
        for f in files:
            os.chmod(os.path.join(d, f), 0o755 if f == "postBuild" else 0o644)
    if git:
        env = dict(os.environ, GIT_AUTHOR_NAME="attention course", GIT_AUTHOR_EMAIL="course@localhost",
                   GIT_COMMITTER_NAME="attention course", GIT_COMMITTER_EMAIL="course@localhost")
        for args in (["init", "--quiet", "--initial-branch", "main"], ["add", "--all"],
                     ["commit", "--quiet", "-m", "Student edition of the attention course (make release)"]):
            subprocess.run(["git", "-C", str(out), *args], check=True, env=env, capture_output=True)
    return out
