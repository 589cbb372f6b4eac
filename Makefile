# The two commands of the README: `make run` and `make test`. Both set up what is missing first.
PY := .venv/bin/python
CONFIG ?= configs/cpu-default.yaml
OUT ?= runs/latest

.PHONY: setup run test lint
setup:
	@bash scripts/setup.sh

# `make run` succeeds when the run reached a verdict (pass 0, fail 1, inconclusive or marginal 2)
# and fails when it could not (invalid 3, or an error); gate CI on `abserve run`'s own code.
run: setup
	@$(PY) -m abserve run $(CONFIG) --out $(OUT); code=$$?; \
	if [ $$code -le 2 ]; then echo "make run: verdict reached (exit $$code); report in $(OUT)"; \
	else exit $$code; fi

test: setup
	$(PY) -m pytest -q -p no:cacheprovider $(PYTEST_ARGS)

lint: setup
	.venv/bin/ruff check service loadtest tests benchmarks scripts
	.venv/bin/mypy
