"""``abserve run`` served by router replicas on several hosts, one run in one PostgreSQL store
(config ``load.replicas``; ``abserve router --join --db URL --run-id ID`` on the replica's
host, taking the run's settings from the store), across real network boundaries
(``tests.support.netns``): a PostgreSQL host, the orchestrator's host (``abserve run``, its own
router, the load), a replica's host and the arms' host (two ``url:`` fake arms). The replica's
host is killed mid-run: the load goes on through the run's own router, the run completes and is
judged (to a verdict: the arms are identical) from every exchange either router stored, the
replica's among them."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from tests.support.netns import Host, postgres_on, private_net, wait_port
from tests.support.scale_out import (
    ABSERVE,
    ROUTER_PORT,
    count_lines,
    experiment,
    start_fake_arm,
    stored_run,
    tail,
)

from abserve.base import exit_codes
from abserve.traffic.timing import read_timings

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(300)]
REPO = Path(__file__).resolve().parents[2]
RUN_ID = "run-replicas"
N = 240


def _load(replica: Host) -> dict[str, object]:
    return {"users": 4, "max_error_rate": 0.5, "profiles": [{"profile": "interleaved", "requests": N}],
            "replicas": [f"http://{replica.ip}:{ROUTER_PORT}"]}


def test_a_replica_killed_mid_run_loses_nothing_and_the_run_is_judged_whole(tmp_path: Path) -> None:
    out = tmp_path / "out"
    env = {**os.environ, "ABSERVE_RUN_LOCK": str(tmp_path / "run.lock"),
           "ABSERVE_ROUTER_API_KEY": "the-run-key-shared-by-every-replica"}
    with private_net("db", "orch", "router2", "arms") as hosts, postgres_on(hosts["db"]) as db:
        arms = [start_fake_arm(hosts["arms"], tmp_path, delay_s=0.03),
                start_fake_arm(hosts["arms"], tmp_path, delay_s=0.03, port=8001)]
        replica = hosts["router2"].popen(
            [*ABSERVE, "router", "--join", "--db", db, "--run-id", RUN_ID, "--host",
             hosts["router2"].ip, "--port", str(ROUTER_PORT), "--join-wait", "120"],
            log=tmp_path / "replica.log", env=env)
        config = experiment(tmp_path, arms, _load(hosts["router2"]), "replicas")
        run = hosts["orch"].popen(
            [*ABSERVE, "run", str(config), "--out", str(out), "--run-id", RUN_ID, "--db", db],
            log=tmp_path / "run.log", env=env, cwd=REPO)
        wait_port(hosts["orch"], hosts["router2"].ip, ROUTER_PORT, timeout_s=150, proc=replica)
        timings = out / "load" / "block-0" / "interleaved" / "timings-local.jsonl"
        deadline = time.monotonic() + 150
        while count_lines(timings) < N // 4:
            assert time.monotonic() < deadline, tail(tmp_path / "run.log")
            assert run.poll() is None, tail(tmp_path / "run.log")
            time.sleep(0.2)
        hosts["router2"].kill()  # the replica's host is lost mid-run
        code = run.wait(timeout=200)
        stored = stored_run(hosts["orch"], db, RUN_ID)
    log = tail(tmp_path / "run.log")
    assert code in (exit_codes.PASS, exit_codes.INCONCLUSIVE), log  # identical arms: never fail
    records = read_timings([out / "load" / "block-0" / "interleaved" / "timings.jsonl"])
    ids = set(stored["request_ids"])  # type: ignore[call-overload]
    acknowledged = {r.router_request_id for r in records if r.ok}
    assert acknowledged <= ids, f"{len(acknowledged - ids)} acknowledged exchanges not stored"
    assert {r.corpus_index % 2 for r in records if r.ok and r.corpus_index < N // 8} == {0, 1}
    assert stored["status"] == "completed"
    report = json.loads((out / "report.json").read_text())
    assert report["run_status"] == "completed"
    assert report["exchanges_total"] == len(ids), log
    assert report["invalid_reasons"] == [], log
    print(f"exit {code}: {report['verdict']}, reasons {report['invalid_reasons']}; "
          f"{len(records)} sent, {len(acknowledged)} acknowledged, {len(ids)} stored and judged")
