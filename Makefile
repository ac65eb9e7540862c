# The course's two commands: `make lab` (study) and `make test` (what CI runs).
# Both create .venv on first use and reuse it afterwards.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
KERNEL := attn-course
# Notebooks `make execute` runs (override: make execute NB=notebooks/03_scaled_dot_product_attention.ipynb)
NB     ?= notebooks/*.ipynb notebooks/solutions/*.ipynb
# pytest workers; notebooks are spread over them file by file
JOBS   ?= 2

# The course never touches the network at run time.
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export HF_HUB_DISABLE_TELEMETRY := 1
export PYTHONHASHSEED := 0
export PIP_DISABLE_PIP_VERSION_CHECK := 1

.PHONY: help lab test test-portable execute install check-python clean
.DEFAULT_GOAL := help

# `make help`: the targets in the order a newcomer needs them (first study, then check, then teach).
help:
	@echo "Study and check (README: Two commands):"
	@echo "  make lab            JupyterLab on notebooks/00_welcome.ipynb (creates .venv on first use)"
	@echo "  make test           pytest over tests/ and strict nbval over every notebook"
	@echo "  make test-portable  strict nbval again with the CPU's default and widest SIMD kernels"
	@echo "  make execute        re-run notebooks and save their outputs (NB=path to choose)"
	@echo "  make check-mine     your own stack, my_attn/: which pieces pass, and the first hint for the rest"
	@echo "  make test-mine      notebooks 01-12 but 09: their asserts run on the worked solution of my_attn"
	@echo "The website and the browser:"
	@echo "  make book           the course website into build/book/, offline"
	@echo "  make test-browser   every notebook in JupyterLab in headless Chromium, the website and a slide deck"
	@echo "Teaching (docs/teaching.md, docs/hub.md):"
	@echo "  make slides         one reveal.js talk per lab (docs/teaching.md's plan) into build/slides/, offline"
	@echo "  make quizzes        quiz banks per lab (Moodle XML, keys; ROSTER=file: one quiz per student) into build/quizzes/"
	@echo "  make release        the student edition (nbgrader release) into release/ and build/student-edition/"
	@echo "  make autograde SUBMISSIONS=dir   sandboxed grading into grades/"
	@echo "  make test-class     release, synthetic and attacking students, the gradebook"
	@echo "  make hub / make test-hub         the course on a JupyterHub (as root) / its load test"
	@echo "Data and models:"
	@echo "  make train-dates    regenerate notebook 07's data and checkpoint"
	@echo "  make train-recall   notebook 12's recall curve"
	@echo "  make clean          remove everything the targets create"

# Tests and saved outputs use one torch thread per process: `make test` runs two pytest workers
# (each with its notebook kernels) on the 2-core CI machine, and small matrices are several times
# slower when OpenMP threads fight over the cores.
test test-portable execute: export OMP_NUM_THREADS := 1

check-python:
	@$(PYTHON) -c 'import sys; v = sys.version_info; sys.exit(0) if v >= (3, 10) else sys.exit("This course needs Python 3.10 or newer; found Python %d.%d at %s. Run: make PYTHON=python3.11 ..." % (v[0], v[1], sys.executable))'

$(BIN)/python: | check-python
	$(PYTHON) -m venv $(VENV)

# Reinstalls only when requirements.txt or pyproject.toml change.
$(STAMP): requirements.txt pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --upgrade pip
	$(BIN)/python -m pip install -r requirements.txt
	$(BIN)/python -m pip install --no-deps -e .
	$(BIN)/python -m ipykernel install --sys-prefix --name $(KERNEL) --display-name "Attention course (.venv)"
	touch $(STAMP)

install: check-python $(STAMP)

lab: install
	$(BIN)/python -m attn_lib.course.lab

test: install
	$(BIN)/python -m pytest -n $(JOBS) --dist loadfile --nbval --nbval-current-env \
		--nbval-sanitize-with nbval_sanitize.cfg --nbval-cell-timeout 600 tests notebooks

# Strict nbval over every notebook and solution (no tests/), twice: with PyTorch's plain C++ kernels
# (ATEN_CPU_CAPABILITY=default) and with the widest SIMD kernels this CPU has (avx512 where the CPU has
# avx512f, else avx2). The saved outputs must not depend on the CPU they were recorded on. Non-x86: once, default.
# The default run also limits MKL's and oneDNN's matmul kernels to SSE4 (other CPUs get other BLAS kernels).
PORTABLE_CAPS := default $(shell (cat /proc/cpuinfo 2>/dev/null || sysctl -n machdep.cpu.features machdep.cpu.leaf7_features 2>/dev/null) \
	| grep -qiw avx512f && echo avx512 || { (cat /proc/cpuinfo 2>/dev/null || sysctl -n machdep.cpu.features 2>/dev/null) \
	| grep -qiw avx2 && echo avx2; })
test-portable: install
	@status=0; for cap in $(PORTABLE_CAPS); do \
		if [ $$cap = default ]; then plain="MKL_ENABLE_INSTRUCTIONS=SSE4_2 ONEDNN_MAX_CPU_ISA=SSE41"; else plain=; fi; \
		echo "== strict nbval with ATEN_CPU_CAPABILITY=$$cap $$plain"; \
		env $$plain ATEN_CPU_CAPABILITY=$$cap $(BIN)/python -m pytest -n $(JOBS) --dist loadfile --nbval --nbval-current-env \
			--nbval-sanitize-with nbval_sanitize.cfg --nbval-cell-timeout 600 notebooks || status=1; \
	done; exit $$status

# The learner's own stack (my_attn/, issue 34). `make check-mine` prints one row per piece: notebook, status and the
# first failing check with its hint (MINE=folder to check another package). `make test-mine` runs the notebooks whose
# pieces exist with the course's worked solution of my_attn switched on (ATTN_MINE): their asserts, not their saved
# outputs (round-offs may differ), must pass on the learner-shaped code.
MINE ?=
MINE_NB ?= notebooks/01_*.ipynb notebooks/02_*.ipynb notebooks/03_*.ipynb notebooks/04_*.ipynb notebooks/05_*.ipynb \
	notebooks/06_*.ipynb notebooks/07_*.ipynb notebooks/08_*.ipynb notebooks/09_*.ipynb notebooks/10_*.ipynb \
	notebooks/11_*.ipynb notebooks/12_*.ipynb notebooks/13_*.ipynb
.PHONY: check-mine test-mine
check-mine: install
	@$(BIN)/python -m attn_lib.course.mine $(MINE)

test-mine: export OMP_NUM_THREADS := 1
test-mine: install
	ATTN_MINE=$(CURDIR)/notebooks/solutions/my_attn $(BIN)/python -m pytest -n $(JOBS) --dist loadfile --nbval-lax \
		--nbval-current-env --nbval-cell-timeout 600 $(MINE_NB)

# Re-run notebooks and save their outputs (the outputs nbval checks).
execute: install
	$(BIN)/jupyter nbconvert --to notebook --execute --inplace \
		--ExecutePreprocessor.kernel_name=$(KERNEL) --ExecutePreprocessor.timeout=300 \
		--ExecutePreprocessor.record_timing=False $(NB)

# Everything the targets create: the venvs, the class, site, slide and hub builds, the releases, grades and test results.
clean:
	rm -rf $(VENV) .venv-class build release grades test-results .hypothesis .pytest_cache

# Notebook 07: regenerate data/dates/*.tsv and retrain the date model data/dates/seq2seq.safetensors
# (deterministic, one CPU thread, several minutes).
.PHONY: train-dates
train-dates: install
	$(BIN)/python -m attn_lib.course.data
	$(BIN)/python -m attn_lib.course.train

# Notebook 12: train the four associative-recall models (softmax, linear, Gated DeltaNet, hybrid; 600 steps each,
# one CPU thread, about 2 minutes of CPU time) and rewrite data/recall_curve.json, the curve the notebook plots.
.PHONY: train-recall
train-recall: install
	OMP_NUM_THREADS=1 $(BIN)/python -m attn_lib.course.recall

# The course as a learner sees it: JupyterLab in headless Chromium, driven by Playwright (tests_browser/).
# Needs the system Chromium (Debian/Ubuntu: apt-get install chromium). The network is cut: only the local
# JupyterLab and the website's local server answer. It also checks the website in build/book/ (run
# `make book` first; skipped without it). Screenshots: test-results/browser/ (site: test-results/browser/site/).
# One notebook: make test-browser BROWSER_NB="notebooks/03_*.ipynb"
BROWSER_NB ?=
.PHONY: test-browser
$(VENV)/.browser-installed: requirements-browser.txt | $(STAMP)
	$(BIN)/python -m pip install -r requirements-browser.txt
	touch $@

test-browser: install $(VENV)/.browser-installed
	$(BIN)/python -m pytest tests_browser -v --durations=0 --timeout=1800 $(if $(BROWSER_NB),--notebooks $(BROWSER_NB))

# The course as a website: build/book/ (Sphinx + myst-nb, sphinx-book-theme) from the executed notebooks'
# saved outputs, offline; its packages (requirements-book.txt) go into .venv on first use.
# Open build/book/index.html, or serve it: .venv/bin/python -m http.server -d build/book -b 127.0.0.1
.PHONY: book
$(VENV)/.book-installed: requirements-book.txt | $(STAMP)
	$(BIN)/python -m pip install -r requirements-book.txt
	touch $@

book: install $(VENV)/.book-installed
	$(BIN)/python scripts/build_book.py

# The class on one hub (hub/, docs/hub.md): JupyterHub, configurable-http-proxy (npm, installed into
# build/hub-node/) and a local process spawner; each student a Unix account. Run as root:
#   make hub HUB_ARGS="--ip 0.0.0.0 --port 8000 --roster hub/roster.csv --repo https://github.com/OWNER/REPO"
# The load test: HUB_STUDENTS students at once (default 20; docs/hub.md has the figures) plus one in Chromium; results in test-results/hub/.
HUB_ARGS ?=
HUB_STUDENTS ?= 20
CHP := build/hub-node/node_modules/.bin/configurable-http-proxy
.PHONY: hub test-hub
$(VENV)/.hub-installed: requirements-hub.txt | $(STAMP)
	$(BIN)/python -m pip install -r requirements-hub.txt
	touch $@

$(CHP):
	npm install --no-save --no-audit --no-fund --no-package-lock --prefix build/hub-node configurable-http-proxy@5.3.0

# repo2docker (only to print the user image's Dockerfile: --no-build needs no Docker) in a venv of its own.
build/r2d-venv/bin/repo2docker:
	$(PYTHON) -m venv build/r2d-venv
	build/r2d-venv/bin/python -m pip install jupyter-repo2docker==2026.4.0

hub: install $(VENV)/.hub-installed $(CHP)
	$(BIN)/python -m hub.launch $(HUB_ARGS)

test-hub: install $(VENV)/.hub-installed $(VENV)/.browser-installed $(CHP) build/r2d-venv/bin/repo2docker .venv-class/.installed
	HUB_STUDENTS=$(HUB_STUDENTS) $(BIN)/python -m pytest tests_hub -v -s -W ignore::UserWarning \
		--durations=0 --timeout=900

# Classroom (docs/teaching.md): a student release of every notebook, built with nbgrader, and autograding.
# nbgrader lives in .venv-class, a venv layered over .venv (a .pth file puts .venv's packages on its path),
# so nbgrader's JupyterLab/server extensions never reach the learner's `make lab`. The course directory
# (nbgrader's source/, gradebook.db, submitted/, autograded/) is build/class; the student notebooks go to release/.
#   make release                        student notebooks into release/<notebook>/<notebook>.ipynb, and the student
#                                       edition (a git repo to push for students, no solutions) into build/student-edition/
#   make autograde SUBMISSIONS=dir [JOBS=n]  dir/<student>/...ipynb -> grades/gradebook.csv, students.csv, canvas.csv,
#                                       feedback/, summary.txt
CLASS_VENV   := .venv-class
CLASS_BIN    := $(CLASS_VENV)/bin
CLASS_STAMP  := $(CLASS_VENV)/.installed
COURSE_DIR   ?= build/class
GRADES       ?= grades
SUBMISSIONS  ?=
.PHONY: release autograde test-class
$(CLASS_STAMP): requirements-class.txt | $(STAMP)
	$(BIN)/python -m venv $(CLASS_VENV)
	$(BIN)/python -c 'import sysconfig; print("import site; site.addsitedir(%r)" % sysconfig.get_paths()["purelib"])' \
		> "$$($(CLASS_BIN)/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/course-venv.pth"
	$(CLASS_BIN)/python -m pip install -r requirements-class.txt
	$(CLASS_BIN)/python -m ipykernel install --sys-prefix --name $(KERNEL) --display-name "Attention course (.venv)"
	touch $@

release autograde test-class $(COURSE_DIR)/.released: export OMP_NUM_THREADS := 1
release autograde test-class $(COURSE_DIR)/.released: export PYTHONPATH := $(CURDIR)$(if $(PYTHONPATH),:$(PYTHONPATH))

# Rebuilt when a notebook, a solution or the tooling changes.
$(COURSE_DIR)/.released: notebooks/*.ipynb notebooks/solutions/*.ipynb classroom/*.py | $(CLASS_STAMP)
	$(CLASS_BIN)/python -m classroom.release --course-dir $(COURSE_DIR) --out release
	touch $@

release: install $(CLASS_STAMP) $(COURSE_DIR)/.released

autograde: release
	@test -n "$(SUBMISSIONS)" || { echo "usage: make autograde SUBMISSIONS=dir (one folder per student)"; exit 2; }
	$(CLASS_BIN)/python -m classroom.autograde "$(SUBMISSIONS)" --course-dir $(COURSE_DIR) --out $(GRADES) \
		--jobs $(or $(AUTOGRADE_JOBS),$(JOBS))

# End to end in a temporary course directory: release, synthetic and attacking students, sandboxed autograde
# (needs bubblewrap: apt-get install bubblewrap). The per-cell limit is short here so that the endless-loop
# students cost 30-45 s, not the default 120 s.
test-class: install $(CLASS_STAMP)
	ATTN_CELL_TIMEOUT=30 $(CLASS_BIN)/python -m pytest tests_class -v --durations=0 -p no:cacheprovider

# Slides (docs/teaching.md, "Slides"): one reveal.js talk (15-20 slides) per lab of the teaching plan, from the
# executed notebooks' saved outputs and docs/teaching/instructor_notes.md, into build/slides/lab-NN.html (static) and
# lab-NN.ipynb (live, with jupyterlab-rise). Offline: reveal.js and what nbconvert's template loads are npm-installed
# into build/reveal/ (versions pinned here and in scripts/build_slides.py, NPM_PACKAGES). Rebuilt when a notebook,
# the plan, the instructor notes or the builder changes.
SLIDES_NPM := reveal.js@4.0.2 mathjax@2.7.7 requirejs@2.3.7 jquery@3.7.1
REVEAL_JS  := build/reveal/node_modules/reveal.js/dist/reveal.js
.PHONY: slides quizzes
$(REVEAL_JS):
	npm install --no-save --no-audit --no-fund --no-package-lock --prefix build/reveal $(SLIDES_NPM)

build/slides/index.html: notebooks/*.ipynb docs/teaching.md docs/teaching/instructor_notes.md scripts/build_slides.py \
		classroom/labs.py | $(STAMP) $(REVEAL_JS)
	$(BIN)/python scripts/build_slides.py --out build/slides --reveal build/reveal

slides: install build/slides/index.html

# Quizzes (classroom/quiz_bank.py; docs/teaching/quizzes.md is the committed bank, tests/test_teaching_kit.py checks
# it is current): the Moodle XML export and the banks' keys into build/quizzes/; with ROSTER=file (student ids, one a
# line) also each student's quiz (build/quizzes/students/<id>/lab-NN.md) and the keys (build/quizzes/keys/lab-NN.md).
ROSTER ?=
quizzes: install
	$(BIN)/python -m classroom.quizzes --out build/quizzes $(if $(ROSTER),--roster $(ROSTER))
