# Attention by Hand: `make lab` opens the course, `make test` checks everything.
# Both create the virtual environment in .venv when it is missing (only python3 >= 3.10 and make needed).

PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
# two stamps: the course (what make lab needs) and, on top of it, the test tools (pytest, nbval, playwright)
COURSE_STAMP := $(VENV)/.installed-course
STAMP  := $(VENV)/.installed
# The installer. auto: uv where it can be had (the uv command, else UV_PIN from the package index into UV_BOOTSTRAP,
# a folder of its own beside the environment), else pip, with the same pins; uv: uv or stop; pip: pip.
# uv reads no pip configuration: etc/uv_pip.py hands it pip's (its index, extra indexes, find-links, certificate).
INSTALLER ?= auto
UV ?= uv
UV_PIN ?= uv==0.13.9
UV_BOOTSTRAP ?= $(VENV)-uv
# extra arguments for every install: PIP_ARGS for pip (e.g. PIP_ARGS="--no-cache-dir"), UV_ARGS for uv
PIP_ARGS ?=
UV_ARGS ?=
# the installer make setup chose, for every later install into the environment (the test tools)
INSTALLER_FILE := $(VENV)/.installer
# install ARGS... with that installer (pip where none was recorded: an environment made before uv)
INSTALL = inst="$$(cat $(INSTALLER_FILE) 2>/dev/null || echo pip)"; [ "$$inst" = pip ] || [ -x "$$inst" ] || inst=pip; \
	install() { if [ "$$inst" = pip ]; then echo "$(PY) -m pip install $(PIP_ARGS) $$*"; $(PY) -m pip install $(PIP_ARGS) "$$@"; \
	else $(PY) etc/uv_pip.py "$$inst" install $(UV_ARGS) "$$@"; fi; }
# Which build of PyTorch. On Linux, PyPI's torch is the CUDA build (triton and about fifteen nvidia-* packages, several
# GB). auto: PyTorch's CPU wheel index when nvidia-smi finds no GPU and that index answers within TORCH_INDEX_TIMEOUT
# seconds, else the default index; default: pip's default index (PyPI); a URL: torch from that index, e.g.
# TORCH_INDEX=https://download.pytorch.org/whl/cu126 or .../rocm6.4. macOS and Windows: PyPI's build (no CUDA).
TORCH_INDEX ?= auto
TORCH_CPU_INDEX := https://download.pytorch.org/whl/cpu
TORCH_INDEX_TIMEOUT ?= 3
# triton (Linux only, about 700 MB installed) runs notebook 14's kernels; WITH_TRITON=0 leaves it out
WITH_TRITON ?= 1
SUBMISSIONS ?= submissions
OUT    ?= grades
GRADE_ARGS ?=
# make bench-grade: e.g. BENCH_GRADE_ARGS="--class hostile" (see python -m benchmarks.grade_class --help)
BENCH_GRADE_ARGS ?=
PYTEST_WORKERS ?= 2
LAB_ARGS ?=
# instructors: nbgrader in its own environment, so that the course environment stays as learners have it
NBGRADER_VENV ?= .venv-nbgrader
NBGRADER_STAMP := $(NBGRADER_VENV)/.installed
NBGRADER_PIP_ARGS ?=
# the workshop hub (instructors/jupyterhub/install.py, as root): its own environment, the learners' copy of the course
# and the hub's files in HUB_DIR, apart from this clone; HUB_PYTHON builds it (>= 3.11.5, runnable by every account,
# or HUB_INSTALL_ARGS=--copy-python to copy it into HUB_DIR); its proxy from npm
HUB_DIR ?= /srv/attention-by-hand
HUB_PYTHON ?= $(PYTHON)
HUB_INSTALL_ARGS ?=
CHP_VERSION ?= 5.3.0
# make test-hub installs a hub of its own here (kept, so that a second run is quick)
HUB_TEST_DIR ?= /var/tmp/attention-by-hand-hub-test

.PHONY: setup lab lab-zh twins check-twins lint test test-fast test-sandbox bench bench-grade train exercises check-exercises grade test-browser nbgrader-setup test-nbgrader hub-setup test-hub progress progress-clear clean help

help:
	@echo "make lab          open the course in JupyterLab at the notebooks' index (creates .venv if missing)"
	@echo "make lab-zh       the same, at the Chinese edition's index (中文版)"
	@echo "make test         run the test suite, notebooks included (creates .venv if missing); not the sandbox's"
	@echo "make setup        only build the course environment (TORCH_INDEX=default|<url> to choose the torch build)"
	@echo "                  with uv where it can be had, else pip (INSTALLER=pip to take pip, INSTALLER=uv to insist on uv)"
	@echo "                  WITH_TRITON=0 leaves out triton (about 700 MB; notebook 14 and exercise 14 need it)"
	@echo "make test-fast    lint, then the suite without executing the notebooks (a few minutes less)"
	@echo "make test-sandbox the grader's tests that run submissions in its bubblewrap sandbox (batches, attacks)"
	@echo "make lint         ruff (checks, format) on the Python packages and tests, mypy on course_utils (pyproject.toml)"
	@echo "make bench        run the benchmarks (BENCH_QUICK=1 for a one-minute run)"
	@echo "make bench-grade  a class of 100 graded through fork servers, then with a sandbox per submission (needs bubblewrap)"
	@echo "make train        retrain the checkpoints of notebooks 11 and 16 in course_utils/capstone/checkpoints/"
	@echo "make exercises    regenerate exercises/ from solutions/ (and exercises/zh-CN/ from solutions/zh-CN/)"
	@echo "make twins        rebuild the Chinese twins from the English notebooks, run those whose code changed"
	@echo "make grade SUBMISSIONS=dir [OUT=grades] [GRADE_ARGS=...]   grade a folder of submissions"
	@echo "make progress     your own progress through the exercises (recorded by each check() where the kernel runs)"
	@echo "make progress-clear   delete that record"
	@echo "make test-browser drive JupyterLab in headless Chromium"
	@echo "make nbgrader-setup   install nbgrader for instructors into $(NBGRADER_VENV)"
	@echo "make test-nbgrader    nbgrader's round trip on solutions/: generate, release, submit, collect, autograde"
	@echo "make hub-setup    install the workshop hub (JupyterHub, the course, nbgrader, the exchange) into HUB_DIR (root)"
	@echo "make test-hub     the installed hub on localhost (root): Unix learners in Chromium, the attacks, the grading"

setup: $(COURSE_STAMP)

$(COURSE_STAMP): requirements.txt pyproject.toml $(wildcard etc/*/*.json etc/*/*.py) etc/uv_pip.py etc/bytecode.py
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@# the installer: uv (on PATH, or bootstrapped from the package index: one wheel, about 20 MB), else pip
	@want="$(INSTALLER)"; inst=pip; \
	if [ "$$want" = pip ]; then \
		echo "== 1/4 installer: pip (INSTALLER=pip)"; \
	elif found="$$(command -v "$(UV)")" && "$$found" --version >/dev/null 2>&1; then \
		inst="$$found"; echo "== 1/4 installer: $$("$$inst" --version) ($$inst)"; \
	elif [ -x "$(UV_BOOTSTRAP)/bin/uv" ] && "$(UV_BOOTSTRAP)/bin/uv" --version >/dev/null 2>&1; then \
		inst="$(abspath $(UV_BOOTSTRAP))/bin/uv"; echo "== 1/4 installer: $$("$$inst" --version) ($(UV_BOOTSTRAP))"; \
	else \
		echo "== 1/4 installer: $(UV_PIN) from the package index into $(UV_BOOTSTRAP) (about 20 MB; INSTALLER=pip skips it)"; \
		if $(PY) -m pip install $(PIP_ARGS) --target "$(UV_BOOTSTRAP)" "$(UV_PIN)" && \
			"$(UV_BOOTSTRAP)/bin/uv" --version >/dev/null 2>&1; then \
			inst="$(abspath $(UV_BOOTSTRAP))/bin/uv"; \
		else \
			rm -rf "$(UV_BOOTSTRAP)"; \
			[ "$$want" = uv ] && { echo "INSTALLER=uv, but uv could not be had (see above)" >&2; exit 1; }; \
			echo "uv could not be had: pip installs the same pins (slower)"; \
		fi; \
	fi; \
	echo "$$inst" > $(INSTALLER_FILE)
	@# torch first, from the index TORCH_INDEX picks (a torch already installed at the pinned version stays)
	@$(INSTALL); index="$(TORCH_INDEX)"; \
	if [ "$$index" = auto ]; then \
		index=default; \
		if [ "$$(uname -s)" = Linux ] && ! nvidia-smi -L >/dev/null 2>&1; then \
			if timeout $(TORCH_INDEX_TIMEOUT) $(PY) -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=float(sys.argv[2]))' \
				"$(TORCH_CPU_INDEX)/torch/" "$(TORCH_INDEX_TIMEOUT)" >/dev/null 2>&1; then \
				index="$(TORCH_CPU_INDEX)"; \
				echo "no NVIDIA GPU: installing PyTorch's CPU build (make setup TORCH_INDEX=default for PyPI's CUDA build)"; \
			else \
				echo "no NVIDIA GPU, but $(TORCH_CPU_INDEX) was not reachable within $(TORCH_INDEX_TIMEOUT) s: torch from the default index"; \
			fi; \
		fi; \
	fi; \
	if [ "$$index" != default ]; then \
		echo "== 2/4 PyTorch from $$index: about 190 MB to download for the CPU build"; \
		install --index-url "$$index" "$$(grep -E '^torch==' requirements.txt)" || \
			echo "could not install torch from $$index: torch from the default index"; \
	else \
		echo "== 2/4 PyTorch comes with the next step, from the default index (on Linux the CUDA build: several GB)"; \
	fi
	@echo "== 3/4 JupyterLab, matplotlib, numpy, ipywidgets, triton (Linux) and their dependencies (requirements.txt): about 90 MB, triton about 200 MB more"
	@# WITH_TRITON=0: every pin but triton's (notebook 14 then says why it cannot run; its tests skip)
	@$(INSTALL); if [ "$(WITH_TRITON)" = 0 ]; then grep -v '^triton==' requirements.txt > $(VENV)/requirements-without-triton.txt; \
		echo "(requirements.txt without triton: WITH_TRITON=0)"; install -r $(VENV)/requirements-without-triton.txt; \
	else \
		install -r requirements.txt; \
	fi
	@echo "== 4/4 course_utils from this folder (editable, nothing to download), then the bytecode of what a grading imports"
	@$(INSTALL); install -q --no-deps -e .
	mkdir -p $(VENV)/etc && cp -R etc/ipython etc/jupyter $(VENV)/etc/
	mkdir -p $(VENV)/share/jupyter/lab/settings && cp etc/lab/overrides.json $(VENV)/share/jupyter/lab/settings/
	@# written here, where the environment is writable: the grader's sandbox mounts it read-only (etc/bytecode.py)
	PYTHONDONTWRITEBYTECODE= $(PY) etc/bytecode.py
	@touch $@

# the test tools, for every target but setup, lab and lab-zh
$(STAMP): requirements-test.txt $(COURSE_STAMP)
	@echo "== the test tools (pytest, nbval, playwright, ruff; requirements-test.txt): about 65 MB; make lab needs none"
	@$(INSTALL); install -r requirements-test.txt
	@touch $@

lab: $(COURSE_STAMP)
	@# root: the repository, so that exercises/ and solutions/ are in the file browser. default_url is the page the
	@# browser opens and the URL the server prints (headless: the one to copy), so both land on the notebooks' index
	@# (a file named on the command line would open only in a local browser; the printed URL would be the Launcher).
	@# --allow-root only where we are root (containers); LAB_ARGS passes more, e.g. LAB_ARGS="--no-browser --port 8890"
	$(VENV)/bin/jupyter lab --ServerApp.root_dir=. $$([ "$$(id -u)" = 0 ] && echo --allow-root) \
		--LabApp.default_url=/lab/tree/notebooks/README.md $(LAB_ARGS)

lab-zh: $(COURSE_STAMP)
	@# the Chinese edition: its notebooks run in zh-CN folders, where the grader and the figures speak Chinese
	$(VENV)/bin/jupyter lab --ServerApp.root_dir=. $$([ "$$(id -u)" = 0 ] && echo --allow-root) \
		--LabApp.default_url=/lab/tree/notebooks/zh-CN/README.md $(LAB_ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff check course_utils authoring benchmarks tests etc
	$(VENV)/bin/ruff format --check course_utils authoring benchmarks tests etc
	$(VENV)/bin/mypy

test: $(STAMP) lint
	@# one BLAS thread per worker: two workers on two cores, no oversubscription
	@# the tests that grade in the sandbox (each submission a bubblewrap process of its own) run in make test-sandbox;
	@# loadscope keeps a notebook's cells (and a module's or class's tests) on one worker: the contract test is one
	@# class per exercise (tests/grade/exercises/test_contract.py), so that the exercises spread over the workers
	OMP_NUM_THREADS=$${OMP_NUM_THREADS:-1} $(PY) -m pytest -rs --durations=15 -n $(PYTEST_WORKERS) --dist loadscope --nbval --nbval-sanitize-with notebooks/sanitize.cfg \
		--nbval-current-env -m "not requires_sandbox" tests notebooks

test-fast: $(STAMP) lint
	@# tests/ only, without nbval: the notebooks are not executed cell by cell (the library, grader and twins' tests run)
	OMP_NUM_THREADS=$${OMP_NUM_THREADS:-1} $(PY) -m pytest -rs -n $(PYTEST_WORKERS) --dist loadscope -m "not requires_sandbox" tests

test-sandbox: $(STAMP)
	@# without bubblewrap these tests skip and say why (in CI, CI=true, they fail instead: CI installs it)
	OMP_NUM_THREADS=$${OMP_NUM_THREADS:-1} $(PY) -m pytest -rs --durations=10 -n $(PYTEST_WORKERS) --dist loadscope -m requires_sandbox tests

bench: $(STAMP)
	$(PY) -m benchmarks.run

bench-grade: $(STAMP)
	@# the class of 100 graded both ways and 100 bare torch imports, in one run: ratios, load, every verdict compared
	$(PY) -m benchmarks.grade_class $(BENCH_GRADE_ARGS)

train: $(STAMP)
	@# one thread: seeded training then rebuilds the committed checkpoints exactly
	OMP_NUM_THREADS=1 $(PY) -m course_utils.capstone
	OMP_NUM_THREADS=1 $(PY) -m course_utils.capstone.recall

exercises: $(STAMP)
	$(PY) -m authoring.exercises solutions exercises
	$(PY) -m authoring.exercises solutions/zh-CN exercises/zh-CN

check-exercises: $(STAMP)
	$(PY) -m authoring.exercises solutions exercises --check
	$(PY) -m authoring.exercises solutions/zh-CN exercises/zh-CN --check

twins: $(STAMP)
	@# code from the English notebooks, Chinese markdown kept by cell id; twins whose code changed are re-run
	$(PY) -m authoring.twins sync --execute changed || test $$? -eq 1
	@# the exercises' two commands, not a recursive make: a sub-make would check the environment's stamps again
	@# without the options this make was given (make -o .venv/.installed twins must install nothing)
	$(PY) -m authoring.exercises solutions exercises
	$(PY) -m authoring.exercises solutions/zh-CN exercises/zh-CN
	$(PY) -m authoring.twins check

check-twins: $(STAMP)
	$(PY) -m authoring.twins check

grade: $(STAMP)
	@# exit code 1 means "graded, not everyone passed": the report is written, so make succeeds (2: nothing to grade)
	@# SUBMISSIONS: a folder of files, or nbgrader's collected folder (submitted/, a folder per learner)
	@# GRADE_ARGS passes more, e.g. GRADE_ARGS="--lang zh --exercise mha --timeout 60" (see --help)
	$(PY) -m course_utils.grade --batch "$(SUBMISSIONS)" --out "$(OUT)" $(GRADE_ARGS) || test $$? -eq 1

test-browser: $(STAMP)
	RUN_BROWSER_TESTS=1 $(PY) -m pytest -p no:xdist tests/browser -v

nbgrader-setup: $(NBGRADER_STAMP)

$(NBGRADER_STAMP): requirements-nbgrader.txt $(STAMP)
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' || \
		{ echo "nbgrader 0.9 needs Python >= 3.11; $(PYTHON) is older: make nbgrader-setup PYTHON=python3.11" >&2; exit 1; }
	@test -x $(NBGRADER_VENV)/bin/python || $(PYTHON) -m venv $(NBGRADER_VENV)
	$(NBGRADER_VENV)/bin/python -m pip install -q $(NBGRADER_PIP_ARGS) -r requirements-nbgrader.txt
	@# nbgrader runs each notebook in the kernel its metadata names, python3: there, the course environment's Python
	JUPYTER_PATH=$(abspath $(NBGRADER_VENV))/share/jupyter $(PY) -m ipykernel install --prefix $(abspath $(NBGRADER_VENV)) \
		--name python3 --display-name "Python 3 (attention-by-hand)"
	@touch $@

test-nbgrader: $(STAMP)
	@# where nbgrader cannot be installed the test is skipped and says why (in CI, CI=true, it fails instead)
	@$(MAKE) --no-print-directory nbgrader-setup || echo "make nbgrader-setup failed: the round-trip test will say why"
	RUN_NBGRADER_TESTS=1 NBGRADER_VENV=$(NBGRADER_VENV) $(PY) -m pytest -p no:xdist -rs tests/nbgrader -v

hub-setup:
	@# as root: learners' servers run as their own Unix users, from HUB_DIR (readable by all, writable by root only)
	$(HUB_PYTHON) instructors/jupyterhub/install.py --prefix "$(HUB_DIR)" --chp-version $(CHP_VERSION) $(HUB_INSTALL_ARGS)

test-hub: $(STAMP)
	@# where the hub cannot be installed (not root, no npm) the test is skipped and says why (in CI, CI=true, it fails)
	@# the test's hub: this Python copied into it (a pyenv Python under /root is not runnable by learners), no triton
	@$(MAKE) --no-print-directory hub-setup HUB_DIR="$(HUB_TEST_DIR)" HUB_PYTHON="$(PY)" \
		HUB_INSTALL_ARGS="--copy-python --without-triton" || echo "make hub-setup failed: the workshop test will say why"
	RUN_HUB_TESTS=1 HUB_DIR="$(HUB_TEST_DIR)" $(PY) -m pytest -p no:xdist -rs -s tests/hub -v

progress: $(COURSE_STAMP)
	@# what check() recorded: exercises passed, mistakes named and fixed, time spent (FIGURE=progress.png saves a figure)
	@$(PY) -m course_utils.grade.history $(if $(FIGURE),--figure "$(FIGURE)")

progress-clear: $(COURSE_STAMP)
	@$(PY) -m course_utils.grade.history --clear

clean:
	rm -rf $(VENV) $(UV_BOOTSTRAP) $(NBGRADER_VENV) grades .pytest_cache
