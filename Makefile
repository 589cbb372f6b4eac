# The two commands of the README: `make run` and `make test`. Both set up what is missing first.
PY := .venv/bin/python
CONFIG ?= configs/cpu-default.yaml
OUT ?= runs/latest

.PHONY: setup lock run test test-fast lint compose-check compose-faults compose-images
setup:
	@bash scripts/setup.sh

# Regenerates requirements/cpu-dev.lock.txt, the hashed lock setup installs, from pyproject.toml
# (scripts/lock.sh: pip-compile through your pip settings, which must reach torch==2.13.0+cpu).
lock:
	@bash scripts/lock.sh

# `make run` succeeds when the run reached a verdict (pass 0, fail 1, inconclusive or marginal 2)
# and fails when it could not: invalid 3, or a tool error (4 usage or refused input, 5 internal
# error, 130 interrupted). Gate CI on `abserve run`'s own code (abserve/base/exit_codes.py).
run: setup
	@$(PY) -m abserve run $(CONFIG) --out $(OUT); code=$$?; \
	if [ $$code -le 2 ]; then echo "make run: verdict reached (exit $$code); report in $(OUT)"; \
	elif [ $$code -eq 3 ]; then echo "make run: the run is INVALID (exit 3); report in $(OUT)" >&2; exit 3; \
	else echo "make run: abserve did not judge a run (tool error, exit $$code: see the message above)" >&2; \
	exit $$code; fi

# tests/compose_stack runs `make compose-check` as a test (marker compose; root; about 10 minutes,
# benchmarks/compose.md). Its fault cases (`make compose-faults`, about 8 minutes more) run
# with COMPOSE_FAULTS=1. scripts/test.sh runs the compose lane beside the tests that need
# neither vLLM nor containers, then the vLLM lane alone; PYTEST_ARGS run one plain session.
COMPOSE_FAULTS ?= 0
test: setup
	COMPOSE_FAULTS=$(COMPOSE_FAULTS) bash scripts/test.sh $(PYTEST_ARGS)

# The edit-run loop: every unit test that needs no server, vLLM, database, browser or
# container, and is not marked slow (coverage simulations, memory checks, every shipped policy:
# make test runs them); limit 3 minutes of pytest (benchmarks/ci_time.md); short child processes
# (marker process) stay in. Hypothesis tests run
# a quarter of their examples here (tests/support/fast_examples.py); `make test` runs them all.
# tests/support/heavy_marks.py fails a test that starts a process or a server unmarked.
# `make test` (CI) runs everything.
FAST := not server and not vllm and not postgres and not browser and not compose and not slow
test-fast: setup
	ABSERVE_EXAMPLES_DIVISOR=4 $(PY) -m pytest -q -p no:cacheprovider tests/unit -m "$(FAST)" $(PYTEST_ARGS)

# ruff; the layers and no import cycles (.importlinter, import-linter); mypy
lint: setup
	.venv/bin/ruff check service loadtest tests benchmarks scripts
	.venv/bin/lint-imports .importlinter
	.venv/bin/mypy

# The GPU host's docker compose stack, executed on this machine (no GPU): engine installed and
# started if missing, the CPU runtime image imported, every step through docker-compose.yml +
# docker-compose.cpu.yml (its orchestrator: `abserve run --target compose`): the sign-off, a
# 2-block rotation, PostgreSQL, three arms, concurrency, a decisive family, a text-only file;
# then everything torn down (scripts/compose-check.sh; times in benchmarks/compose.md).
compose-check: setup
	@bash scripts/compose-check.sh

# The fault cases on the same stack (scripts/compose-faults.sh): an arm container killed
# mid-run, the orchestrator stopped; each asserts what the sign-off then says.
compose-faults: setup
	@bash scripts/compose-check.sh arm-killed orchestrator-stopped

# The GPU host's Dockerfiles (docker/abserve.Dockerfile, docker/vllm-cpu.Dockerfile for the
# vLLM image's CPU twin) built from a local Debian base and wheelhouse, then run once.
compose-images: setup
	@bash scripts/compose-check.sh images
