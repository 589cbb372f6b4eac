"""Router replicas on several hosts, one run, one PostgreSQL store (``abserve.router.replica``),
across real network boundaries (``tests.support.netns``): a PostgreSQL host, two router hosts
(the run's owner and a ``--join`` replica), a client host sending ``abserve load`` over both
(``--also-host``: request k to replica k mod 2) and the arms' host. The joined replica's host
is killed mid-run: the load goes on through the owner, every exchange any replica
acknowledged is in the store, both replicas' among them, and ``abserve report`` judges the
one run, completed, from every replica's exchanges."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import pytest
from tests.support.netns import postgres_on, private_net
from tests.support.scale_out import (
    ABSERVE,
    count_lines,
    router_config,
    start_fake_arm,
    start_router,
    stored_run,
    tail,
)

from abserve.base import exit_codes
from abserve.traffic.timing import read_timings

pytestmark = [pytest.mark.postgres]  # a PostgreSQL host of its own
RUN_ID = "replicas"
N = 160


def _policy(tmp_path: Path) -> Path:
    import yaml

    policy = {"name": "replicas", "min_samples": 8, "warmup_requests": 0,
              "metrics": [{"metric": "tpot", "statistic": "hl", "allowed_relative": 0.5,
                           "allowed_absolute": 0.01, "critical": True}]}
    path = tmp_path / "policy.yaml"
    path.write_text(yaml.safe_dump(policy))
    return path


@pytest.mark.timeout(240)
def test_a_killed_replica_loses_nothing_acknowledged_and_the_run_is_judged(tmp_path: Path) -> None:
    out = tmp_path / "load"
    with private_net("db", "router1", "router2", "client", "arms") as hosts, \
            postgres_on(hosts["db"]) as db:
        arms = {"a": start_fake_arm(hosts["arms"], tmp_path, delay_s=0.02),
                "b": start_fake_arm(hosts["arms"], tmp_path, delay_s=0.02, port=8001)}
        config = router_config(tmp_path / "router.yaml", arms, db, RUN_ID)
        owner = start_router(hosts["router1"], config, tmp_path)
        replica = start_router(hosts["router2"], config, tmp_path, join=True)
        load = hosts["client"].popen(
            [*ABSERVE, "load", "--host", owner, "--also-host", replica, "--profile", "interleaved",
             "--requests", str(N), "--users", "4", "--seed", "5", "--model", "fake-model",
             "--out", str(out), "--max-error-rate", "0.5"], log=tmp_path / "load.log")
        deadline = time.monotonic() + 120
        while count_lines(out / "timings-local.jsonl") < N // 4:
            assert time.monotonic() < deadline, tail(tmp_path / "load.log")
            assert load.poll() is None, tail(tmp_path / "load.log")
            time.sleep(0.2)
        hosts["router2"].kill()  # the replica's host is lost: no drain, no goodbye
        assert load.wait(timeout=150) == 0, tail(tmp_path / "load.log")
        owner_proc = hosts["router1"].procs[0]
        owner_proc.send_signal(signal.SIGTERM)  # the run's owner stops cleanly: completed
        owner_proc.wait(timeout=60)
        run = stored_run(hosts["client"], db, RUN_ID)
        report = hosts["client"].run([*ABSERVE, "report", RUN_ID, "--db", db, "--out",
                                      str(tmp_path / "report"), "--policy", str(_policy(tmp_path))])
    stored = set(run["request_ids"])  # type: ignore[call-overload]
    records = read_timings([out / "timings.jsonl"])
    acknowledged = {r.router_request_id for r in records if r.ok}
    assert acknowledged <= stored, f"{len(acknowledged - stored)} acknowledged exchanges not stored"
    # the replica answered its share (odd requests) before it died; the owner took it after
    by_replica = {r.corpus_index % 2 for r in records if r.ok and r.corpus_index < N // 8}
    assert by_replica == {0, 1}
    assert len(stored) >= len(acknowledged) >= N // 2
    assert run["status"] == "completed"
    # one run judged from every replica's exchanges; the fake arms prove nothing of themselves
    # (a hand-run router records no arm provenance: real vLLM arms do, `abserve prove`), so
    # that is all that keeps this verdict from deciding
    summary = json.loads((tmp_path / "report" / "report.json").read_text())
    assert summary["run_status"] == "completed"
    assert summary["exchanges_total"] == len(stored)
    assert summary["invalid_reasons"] == ["arm 'a' is missing from the run",
                                          "arm 'b' is missing from the run"], summary["invalid_reasons"]
    assert summary["metrics"][0]["n"] == len(stored)
    assert report.returncode == exit_codes.INVALID
    print(f"{len(records)} sent, {len(acknowledged)} acknowledged, {len(stored)} stored and judged")
