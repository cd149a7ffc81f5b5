# Two commands for a fresh machine:  `make demo` (set up + run the demo)  and  `make test` (set up + tests).
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: setup demo test lint clean

$(BIN)/opsynth: pyproject.toml
	$(PY) -m venv $(VENV)
	# the CPU build of torch first: an open-ended torch requirement would pull a multi-GB CUDA build
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[dev]'
	touch $(BIN)/opsynth

setup: $(BIN)/opsynth

demo: setup
	$(BIN)/opsynth run --preset demo --out runs/demo

test: setup
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -q

lint: setup
	$(BIN)/ruff check .

clean:
	rm -rf runs/demo
