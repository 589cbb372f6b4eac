# The two commands of the README: `make run` and `make test`. Both set up what is missing first.
PY := .venv/bin/python
CONFIG ?= configs/cpu-default.yaml
OUT ?= runs/latest

.PHONY: setup run test lint
setup:
	@bash scripts/setup.sh

run: setup
	$(PY) -m abserve run $(CONFIG) --out $(OUT)

test: setup
	$(PY) -m pytest -q -p no:cacheprovider $(PYTEST_ARGS)

lint: setup
	.venv/bin/ruff check service loadtest tests benchmarks scripts
	.venv/bin/mypy
