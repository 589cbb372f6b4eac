"""Issue 34: the self-test's slow mutant with neighbours on the arms' cores.

Runs ``abserve run configs/selftest/latency.yaml`` (arm ``a`` against ``slow``: 5 ms of sleep per
lookup call; the arms on cores 0 and 1, swapped ABBA) under one of three neighbour cases, one
case per invocation (each starts vLLM servers: run them one at a time):

- ``a``: one busy process pinned to core 0 (an arms' core);
- ``b``: two vLLM servers of another run pinned to core 0, busy with back-to-back requests;
- ``c``: one busy process pinned to core 1 only;
- ``none``: no neighbour added (whatever else the machine runs).

Prints one JSON line per case: verdict, the ``tpot.hl`` line, the injected effect (telemetry),
whether the interval contains it, the report's neighbour facts, and per block and arm the CPU
time and run-queue wait per output token beside the block's TPOT difference (the material of
benchmarks/placement.md, "Neighbours"). The proof holds when the report contains the injected
delay in its interval or ends unstable/invalid naming the neighbours; never a pass.

    .venv/bin/python -m benchmarks.neighbours b --out runs/neighbours
"""

from __future__ import annotations

import argparse
import contextlib
import json
from pathlib import Path
from typing import Any

from tests.support.neighbours import (
    busy_process,
    judged_from_store,
    other_run,
    selftest_latency,
    verdict_of,
)


def proof_holds(seen: dict[str, Any]) -> bool:
    """Contains the injected delay, or unstable/invalid naming the neighbours; never a pass."""
    if seen["verdict"] == "pass" or seen["outcome"] == "pass":
        return False
    named = "foreign load on the arms' cores" in seen["reason"] or any(
        "foreign load" in r for r in seen["invalid"])
    return bool(seen["contains"]) or (seen["outcome"] == "unstable" and named) or (
        seen["verdict"] == "invalid" and named)


def per_block(report: dict[str, Any]) -> list[dict[str, Any]]:
    """Each block's neighbour facts: arms' CPU and wait seconds, cores' foreign shares."""
    rows = []
    for block in verdict_of(report)["blocks"]:
        facts = block.get("neighbours") or {}
        rows.append({"block": block.get("index"), "placement": block.get("placement_label"),
                     "requests": block.get("requests"),
                     "foreign": {c: f.get("foreign") for c, f in (facts.get("cores") or {}).items()},
                     "arms": facts.get("arms")})
    return rows


def block_latency(store_dir: Path, baseline: str = "a", mutant: str = "slow") -> dict[str, dict[str, float]]:
    """Per block: the median TPOT difference (mutant - baseline, s) and each arm's output tokens."""
    import numpy as np

    from abserve.compare.latency import request_latency
    from abserve.store.latest import latest_run

    stored = latest_run(store_dir / "abserve.db", exchanges=True)
    out: dict[str, dict[str, float]] = {}
    if stored is None:
        return out
    diffs: dict[str, list[float]] = {}
    tokens: dict[str, dict[str, int]] = {}
    for ex in stored.exchanges:
        block = ex.tags.get("block", "?")
        lat = {arm: request_latency(o) for arm, o in ex.arms.items()}
        for arm, rl in lat.items():
            if rl is not None:
                tokens.setdefault(block, {}).setdefault(arm, 0)
                tokens[block][arm] += rl.output_tokens
        a, b = lat.get(baseline), lat.get(mutant)
        if a is not None and b is not None and a.tpot is not None and b.tpot is not None:
            diffs.setdefault(block, []).append(b.tpot - a.tpot)
    for block, values in diffs.items():
        out[block] = {"tpot_diff": float(np.median(values)), "pairs": len(values),
                      **{f"tokens_{arm}": n for arm, n in tokens.get(block, {}).items()}}
    return out


def per_token(report: dict[str, Any], store_dir: Path) -> list[dict[str, Any]]:
    """Each block: TPOT difference beside each arm's CPU and run-queue wait per output token (ms)."""
    lat = block_latency(store_dir)
    rows = []
    for row in per_block(report):
        block = lat.get(str(row["block"]), {})
        arms = row.get("arms") or {}
        item: dict[str, Any] = {"block": row["block"], "placement": row["placement"],
                                "foreign": row["foreign"],
                                "tpot_diff_ms": round(1000 * block.get("tpot_diff", float("nan")), 3)}
        for arm, facts in arms.items():
            n = block.get(f"tokens_{arm}") or 0
            if n:
                item[f"{arm}_cpu_ms_per_token"] = round(1000 * facts["cpu_s"] / n, 3)
                item[f"{arm}_wait_ms_per_token"] = round(1000 * facts["wait_s"] / n, 3)
        rows.append(item)
    return rows


def run_case(case: str, out: Path) -> dict[str, Any]:
    out.mkdir(parents=True, exist_ok=True)
    neighbour: contextlib.AbstractContextManager[object] = contextlib.nullcontext()
    if case == "a":
        neighbour = busy_process(0)
    elif case == "b":
        neighbour = other_run(0, out / "other-run")
    elif case == "c":
        neighbour = busy_process(1)
    with neighbour:
        code, report, tail = selftest_latency(out / "run", out / "run.lock")
    seen = verdict_of(report) if report else {}
    if not seen:
        return {"case": case, "exit": code, "error": tail}
    summary = {k: v for k, v in seen.items() if k != "blocks"}
    return {"case": case, "exit": code, **summary, "proof_holds": proof_holds(seen),
            "blocks": per_token(report, out / "run")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("case", choices=["a", "b", "c", "none"])
    parser.add_argument("--out", type=Path, default=Path("runs/neighbours"))
    parser.add_argument("--reread", action="store_true", help="read a finished case's report again")
    args = parser.parse_args()
    out = args.out / args.case
    if args.reread:
        path = out / "run" / "report.json"
        report = json.loads(path.read_text()) if path.is_file() else judged_from_store(out / "run")
        seen = verdict_of(report)
        print(json.dumps({"case": args.case, **{k: v for k, v in seen.items() if k != "blocks"},
                          "proof_holds": proof_holds(seen), "blocks": per_token(report, out / "run")}))
        return
    print(json.dumps(run_case(args.case, out)))


if __name__ == "__main__":
    main()
