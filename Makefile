# Attention by Hand: `make lab` opens the course, `make test` checks everything.
# Both create the virtual environment in .venv when it is missing (only python3 >= 3.10 and make needed).

PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
# extra pip arguments, e.g. PIP_ARGS="--index-url <PyTorch's CPU wheel index>" to avoid the CUDA build
PIP_ARGS ?=
SUBMISSIONS ?= submissions
OUT    ?= grades
PYTEST_WORKERS ?= 2
LAB_ARGS ?=

.PHONY: setup lab test test-fast bench train exercises check-exercises grade test-browser clean help

help:
	@echo "make lab          open the course in JupyterLab (creates .venv if missing)"
	@echo "make test         run the whole test suite, notebooks included (creates .venv if missing)"
	@echo "make setup        only build the environment"
	@echo "make bench        run the benchmarks (BENCH_QUICK=1 for a one-minute run)"
	@echo "make train        retrain the capstone's checkpoints (notebook 11) in course_utils/checkpoints/"
	@echo "make exercises    regenerate exercises/ from solutions/"
	@echo "make grade SUBMISSIONS=dir [OUT=grades]   grade a folder of submissions"
	@echo "make test-browser drive JupyterLab in headless Chromium"

setup: $(STAMP)

$(STAMP): requirements.txt pyproject.toml $(wildcard etc/*/*.json)
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q $(PIP_ARGS) -r requirements.txt
	$(PY) -m pip install -q --no-deps -e .
	mkdir -p $(VENV)/etc && cp -R etc/ipython etc/jupyter $(VENV)/etc/
	@touch $(STAMP)

lab: $(STAMP)
	@# --allow-root only where we are root (containers); LAB_ARGS passes more, e.g. LAB_ARGS="--no-browser --port 8890"
	$(VENV)/bin/jupyter lab $$([ "$$(id -u)" = 0 ] && echo --allow-root) $(LAB_ARGS) notebooks/

test: $(STAMP)
	@# one BLAS thread per worker: two workers on two cores, no oversubscription
	OMP_NUM_THREADS=$${OMP_NUM_THREADS:-1} $(PY) -m pytest -rs -n $(PYTEST_WORKERS) --dist loadscope --nbval --nbval-sanitize-with notebooks/sanitize.cfg \
		--nbval-current-env tests notebooks

bench: $(STAMP)
	$(PY) -m benchmarks.run

train: $(STAMP)
	@# one thread: seeded training then rebuilds the committed checkpoints exactly
	OMP_NUM_THREADS=1 $(PY) -m course_utils.induction

exercises: $(STAMP)
	$(PY) -m course_utils.exercises solutions exercises

check-exercises: $(STAMP)
	$(PY) -m course_utils.exercises solutions exercises --check

grade: $(STAMP)
	@# exit code 1 means "graded, not everyone passed": the report is written, so make succeeds
	$(PY) -m course_utils.grade --batch "$(SUBMISSIONS)" --out "$(OUT)" || test $$? -eq 1

test-browser: $(STAMP)
	RUN_BROWSER_TESTS=1 $(PY) -m pytest -p no:xdist tests/browser -v

clean:
	rm -rf $(VENV) grades .pytest_cache
