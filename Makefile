# podium — the two commands of the README live here.
#   make demo   create .venv, install podium, run the main job on the embedded default
#   make test   install the test extras (and Debian's PostgreSQL server if missing, for the leaderboard
#               tests, which start their own server on 127.0.0.1, and Debian's Chromium for the dashboard's
#               browser test) and run the default test suite (what CI runs) on TEST_WORKERS pytest-xdist
#               workers, one test file per worker at a time (TEST_WORKERS=0: in one process)
# torch is installed first and pinned (a CPU wheel exists on our machines); override it, e.g.
#   make demo TORCH="torch --index-url https://download.pytorch.org/whl/cu128"
PYTHON ?= python3
VENV   ?= .venv
TORCH  ?= torch==2.13.0
TEST_WORKERS ?= 2
PIP     = $(VENV)/bin/python -m pip
STAMP   = $(VENV)/.podium-installed

.PHONY: demo test test-slow bench mutation lint clean

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip

$(VENV)/.torch-installed: | $(VENV)/bin/python
	$(PIP) install --quiet $(TORCH)
	touch $@

$(STAMP): pyproject.toml $(VENV)/.torch-installed
	$(PIP) install --quiet -e ".[test]"
	touch $@

demo: $(STAMP)
	$(VENV)/bin/podium demo

test: $(STAMP)
	bash scripts/ensure-postgres.sh
	bash scripts/ensure-chromium.sh
	$(VENV)/bin/ruff check podium tests benchmarks
	$(VENV)/bin/python -m pytest -n $(TEST_WORKERS) --dist loadfile

test-slow: $(STAMP)
	$(VENV)/bin/python -m pytest -m slow

bench: $(STAMP)
	$(PIP) install --quiet -e ".[test,bench]"
	$(VENV)/bin/python benchmarks/env_throughput.py

mutation: $(STAMP)
	$(PIP) install --quiet "mutmut>=3.3"
	# one OpenMP thread: mutmut forks each mutant's tests from a process that already ran torch, and a forked
	# child waits forever on the parent's OpenMP threads (such hangs would count as timeouts)
	OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 $(VENV)/bin/mutmut run; $(VENV)/bin/mutmut results

lint: $(STAMP)
	$(VENV)/bin/ruff check podium tests benchmarks
	$(VENV)/bin/ruff format --check podium tests benchmarks

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .ruff_cache
