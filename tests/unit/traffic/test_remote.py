"""The pure parts of load from several hosts (``abserve.traffic.remote``) and of the config's
``load.workers``: addresses, the master's options, what a shipment may name, and the spread of
requests over router replicas (``sender.send_entry``: request k to replica k mod n, the next
one when a replica cannot be reached)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from abserve.traffic import sender
from abserve.traffic.remote import LoadWorkers, receive, shipment, split_address
from abserve.traffic.timing import TimingRecord


def test_addresses_split_into_host_and_port() -> None:
    assert split_address("10.0.0.5:6000") == ("10.0.0.5", 6000)
    assert split_address("load-master") == ("load-master", 5557)
    assert split_address("[fd00::1]:7000") == ("fd00::1", 7000)
    for bad in ("", ":80", "host:0", "host:http", "a:b:c"):
        with pytest.raises(ValueError, match="HOST:PORT"):
            split_address(bad)


def test_the_master_waits_for_its_workers_and_asks_them_to_ship() -> None:
    workers = LoadWorkers(count=3, bind="10.0.0.5:6000", connect_timeout_s=30)
    args = workers.master_args()
    assert args[args.index("--expect-workers") + 1] == "3"
    assert args[args.index("--master-bind-host") + 1] == "10.0.0.5"
    assert args[args.index("--abserve-worker-wait") + 1] == "30.0"
    assert args[args.index("--abserve-ship") + 1] == "1"
    assert workers.reachable_host == "10.0.0.5"


def test_a_master_listening_everywhere_needs_an_address_to_advertise() -> None:
    with pytest.raises(ValueError, match="advertise"):
        _ = LoadWorkers(count=1, bind="0.0.0.0:5557").reachable_host
    assert LoadWorkers(count=1, advertise="orch.internal").reachable_host == "orch.internal"
    with pytest.raises(ValidationError):
        LoadWorkers(count=0)
    with pytest.raises(ValidationError):
        LoadWorkers(count=1, bind="nowhere:99999")


def test_a_shipment_lands_where_a_worker_beside_the_master_writes(tmp_path: Path) -> None:
    timings = tmp_path / "spool.jsonl"
    timings.write_text('{"a": 1}\n')
    receive(tmp_path / "out", shipment("worker1", timings, {"sent": 1, "stop_reason": None}))
    assert (tmp_path / "out" / "timings-worker1.jsonl").read_text() == '{"a": 1}\n'
    summary = json.loads((tmp_path / "out" / "node-worker1-remote.json").read_text())
    assert summary == {"sent": 1, "stop_reason": None, "node": "worker1", "shipped": True}
    with pytest.raises(ValueError, match="bad worker name"):
        receive(tmp_path / "out", {"node": "../../etc/x", "timings": "", "summary": {}})


class _Entry:
    path = "/v1/chat/completions"

    def __init__(self, index: int) -> None:
        self.index = index


def _fake_attempt(down: set[str], tried: list[str]) -> Any:
    def attempt(pool: object, host: str, entry: Any, *_: object) -> TimingRecord:
        tried.append(host)
        return TimingRecord(run_id="r", corpus_index=entry.index, profile="p", worker="w",
                            error="connect" if host in down else None, sent_at=0.0)
    return attempt


def test_request_k_goes_to_replica_k_mod_n_and_fails_over(monkeypatch: pytest.MonkeyPatch) -> None:
    tried: list[str] = []
    monkeypatch.setattr(sender, "_attempt", _fake_attempt({"http://r1"}, tried))
    opts = sender.SendOptions(run_id="r", profile="p", worker="w", timeout_s=1, connect_retry_s=0)
    hosts = ["http://r0", "http://r1", "http://r2"]
    for k in range(6):
        sender.send_entry(None, hosts, _Entry(k), opts)  # type: ignore[arg-type]
    # k=1 and k=4 were for r1, which is down: each went on to r2 at once
    assert tried == ["http://r0", "http://r1", "http://r2", "http://r2", "http://r0",
                     "http://r1", "http://r2", "http://r2"]


def test_workers_that_never_came_refuse_the_run(monkeypatch: pytest.MonkeyPatch) -> None:
    from abserve.arms.run_paths import RunRefused
    from abserve.runs import load_plan
    from abserve.traffic import runner

    def refused(spec: object) -> None:
        raise runner.WorkersMissing("load refused: 1 of 2 load workers connected within 8 s")

    monkeypatch.setattr(runner, "run_load", refused)
    with pytest.raises(RunRefused, match="1 of 2 load workers"):  # abserve run exits 4
        load_plan._run_load(None)  # type: ignore[arg-type]


def test_a_master_that_gave_up_on_its_workers_is_read_as_refused(tmp_path: Path) -> None:
    from abserve.traffic.runner import WorkersMissing, summarize

    (tmp_path / "node-master-1.json").write_text(json.dumps(
        {"node": "master", "stop_reason": "workers_missing: 1 of 2 load workers connected within 8 s"}))
    with pytest.raises(WorkersMissing, match="load refused: 1 of 2 load workers connected within 8 s"):
        summarize(tmp_path, "r", "p", 2, tmp_path / "locust.log")
