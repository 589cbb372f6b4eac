"""Longer answers against more requests: which buys a tighter paired TPOT difference per second?

Reads one run of ``benchmarks/configs/output-tokens.yaml`` (the CPU default's many-image
profile twice, max_tokens 24 and 96, interleaved in the same blocks) and prints, per profile:
the judged pairs, the sd of the per-request TPOT difference (candidate - baseline, robust: 1.4826
x MAD), the mean seconds one request took (the slower arm's end-to-end time) and their product
``sd x sqrt(seconds per request)``: the sd of the mean difference after one second of load. The
smaller it is, the sooner a gate of a given margin decides.

    .venv/bin/python -m benchmarks.output_tokens runs/output-tokens
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

from abserve.compare.latency import request_latency
from abserve.store import Store


def per_profile(run_dir: Path) -> dict[str, tuple[list[float], list[float]]]:
    """Profile -> (TPOT differences in seconds, seconds per request), warm-up left out."""
    run_id = json.loads((run_dir / "report.json").read_text())["run_id"]
    store = Store.open(f"sqlite:///{(run_dir / 'abserve.db').resolve()}")
    out: dict[str, tuple[list[float], list[float]]] = defaultdict(lambda: ([], []))
    try:
        for ex in store.iter_exchanges(run_id):
            if ex.tags.get("block") == "warmup":
                continue
            a, b = request_latency(ex.arms["a"]), request_latency(ex.arms["b"])
            if a is None or b is None or a.tpot is None or b.tpot is None:
                continue
            diffs, seconds = out[ex.tags.get("profile", "untagged")]
            diffs.append(b.tpot - a.tpot)
            seconds.append(max(a.e2e or 0.0, b.e2e or 0.0))
    finally:
        store.close()
    return dict(out)


def main(run_dir: str) -> None:
    print("| profile | pairs | TPOT diff sd (ms) | s per request | sd x sqrt(s/request) (ms) |")
    print("|---|---|---|---|---|")
    for profile, (diffs, seconds) in sorted(per_profile(Path(run_dir)).items()):
        d = np.asarray(diffs)
        sd = 1.4826 * float(np.median(np.abs(d - np.median(d))))
        spr = float(np.mean(seconds))
        print(f"| {profile} | {len(d)} | {sd * 1e3:.3f} | {spr:.2f} | {sd * np.sqrt(spr) * 1e3:.3f} |")


if __name__ == "__main__":
    main(sys.argv[1])
