#!/usr/bin/env bash
# Same reports, byte for byte: renders every run of the given stores with git revision REV (a
# `git worktree` of it) and with the working tree, then `diff -r`s the two. A refactoring that
# promises "nothing a user sees changes" proves it here: report.json, report.md, report.html
# and junit.xml of recorded runs must come out identical.
#
#   scripts/report_bytes.sh REV STORE.db [STORE.db ...]
#
# Each side reads its own copy of each store (a report never sees the other side's writes).
# Exit 0: every file identical; 1: a difference (the diff is printed); 2: bad use or a render
# that failed on one side only. A run that records no policy (by hand, compose) is judged with
# $POLICY if set. The interpreter is $PYTHON (default: .venv/bin/python); the rendered files
# stay under $KEEP if set (else a temporary directory removed at the end).
set -euo pipefail

if [[ $# -lt 2 ]]; then
    echo "usage: $0 REV STORE.db [STORE.db ...]" >&2
    exit 2
fi
rev=$1
shift
repo=$(git rev-parse --show-toplevel)
python=${PYTHON:-$repo/.venv/bin/python}
work=${KEEP:-$(mktemp -d)}
[[ -z ${POLICY:-} ]] || POLICY=$(realpath "$POLICY")
mkdir -p "$work"
tree=$(mktemp -d)/rev
cleanup() {
    git -C "$repo" worktree remove --force "$tree" >/dev/null 2>&1 || true
    [[ -n ${KEEP:-} ]] || rm -rf "$work"
}
trap cleanup EXIT
git -C "$repo" worktree add --detach --quiet "$tree" "$rev"

# report SOURCE_ROOT RUN_ID STORE OUT [ARGS...]: `abserve report` of the abserve under SOURCE_ROOT
report() {
    local root=$1 run_id=$2 store=$3 out=$4
    shift 4
    (cd "$work" && PYTHONPATH="$root/service" "$python" -m abserve report "$run_id" \
        --db "sqlite:///$store" --out "$out" "$@")
}

# render SIDE SOURCE_ROOT STORE: every run of STORE, rendered by the abserve under SOURCE_ROOT
render() {
    local side=$1 root=$2 store=$3 name copy run_id out log code failed=0
    name=$(basename "$store" .db)
    copy="$work/stores/$side/$name.db"
    mkdir -p "$(dirname "$copy")"
    "$python" -c 'import sqlite3, sys; sqlite3.connect(sys.argv[1]).backup(sqlite3.connect(sys.argv[2]))' \
        "$store" "$copy"
    for run_id in $("$python" -c 'import sqlite3, sys
for (r,) in sqlite3.connect(sys.argv[1]).execute("select run_id from abserve_runs order by run_id"):
    print(r)' "$copy"); do
        out="$work/$side/$name/$run_id" log="$work/$side.$name.$run_id.log"
        code=0
        report "$root" "$run_id" "$copy" "$out" >"$log" 2>&1 || code=$?
        if [[ $code -gt 2 ]] && grep -q -- "pass --policy" "$log" && [[ -n ${POLICY:-} ]]; then
            code=0
            report "$root" "$run_id" "$copy" "$out" --policy "$POLICY" >"$log" 2>&1 || code=$?
        fi
        # the exit code is the verdict's (0 pass, 1 fail, 2 inconclusive): compared too
        mkdir -p "$out" && echo "$code" >"$out/exit_code"
        if [[ ! -f $out/report.json ]]; then
            echo "$side: $name/$run_id did not render (exit $code; log $log)" >&2
            failed=1
        fi
    done
    return $failed
}

status=0
for store in "$@"; do
    [[ -f $store ]] || { echo "no store $store" >&2; exit 2; }
    before=0 after=0
    render rev "$tree" "$store" || before=$?
    render tree "$repo" "$store" || after=$?
    [[ $before == "$after" ]] || status=2
done
if diff -r "$work/rev" "$work/tree"; then
    runs=$(find "$work/tree" -name exit_code | wc -l)
    files=$(find "$work/tree" -type f ! -name exit_code | wc -l)
    echo "identical: $files files and the exit codes of $runs runs in $# stores ($rev vs the working tree)"
else
    status=$(( status > 1 ? status : 1 ))
fi
exit $status
