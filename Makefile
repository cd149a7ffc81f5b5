# Two commands for a fresh machine:  `make demo` (set up + run the demo)  and  `make test` (set up + tests).
# Needs Python >= 3.11 (PY=python3.11 to pick one) and a C++ compiler (torch.compile builds CPU kernels with g++).
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
TORCH_VERSION := 2.13.0
# Where torch comes from. Empty: pip's own configuration (a local mirror, a company index). On a machine with only
# public PyPI, whose Linux torch wheel is the CUDA build (several GB with its nvidia packages), use the CPU build:
#   make demo TORCH_INDEX=https://download.pytorch.org/whl/cpu
TORCH_INDEX ?=

.PHONY: setup demo test lint clean check-python check-compiler

check-python:
	@$(PY) -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null || { \
	  echo "opsynth needs Python >= 3.11; $(PY) is $$($(PY) --version 2>/dev/null || echo missing): run make PY=python3.11"; exit 1; }

check-compiler:
	@command -v $${CXX:-g++} >/dev/null || { \
	  echo "torch.compile needs a C++ compiler and $${CXX:-g++} is not on PATH: install one (apt-get install g++) or set CXX"; exit 1; }

$(BIN)/opsynth: pyproject.toml | check-python
	$(PY) -m venv $(VENV)
	# torch first, pinned: an open-ended torch requirement would resolve by itself (on public PyPI, to the CUDA build)
	$(BIN)/pip install -q $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX)) torch==$(TORCH_VERSION)
	$(BIN)/pip install -q -e '.[dev]'
	touch $(BIN)/opsynth

setup: $(BIN)/opsynth

demo: setup check-compiler
	$(BIN)/opsynth run --preset demo --out runs/demo

test: setup check-compiler
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -q

lint: setup
	$(BIN)/ruff check .

clean:
	rm -rf runs/demo
