"""SIGKILL the process running ``abserve run``: the run is judged interrupted, never short.

``abserve run`` starts its router and its Locust load as processes of their own; killed with
SIGKILL it can stop neither. Each watches it (``abserve.base.parent_watch``): the router drains,
stops and marks its run ``interrupted`` in the store (not ``completed``, which a later clean
stop of an orphaned router would have written), and Locust ends its load. Real processes
throughout: ``abserve run`` on two ``url:`` arms that are fake vLLM servers (no vLLM here;
the managed arms' own watch lives in ``abserve.vllm_plugin``), killed once some exchanges
are stored; then every process it had started must be gone within 20 s, the stored status
must read ``interrupted``, and ``abserve report`` must judge the run invalid (exit 3).
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
import yaml
from tests.support.fake_upstream import Knobs
from tests.support.tokenizing_upstream import TokenizingUpstream

from abserve.store import Store
from abserve.store.schema import runs_table

pytestmark = [pytest.mark.server, pytest.mark.timeout(120)]
REPO = Path(__file__).resolve().parents[2]
STORED_BEFORE_KILL = 10  # exchanges in the store when the run is killed
GONE_WITHIN_S = 20.0


def experiment(tmp_path: Path, urls: list[str]) -> Path:
    """Two ``url:`` arms and far more load than the test waits for, judged on TPOT."""
    policy = {"name": "killed", "min_samples": 8, "warmup_requests": 2,
              "metrics": [{"metric": "tpot", "statistic": "hl", "allowed_relative": 0.5,
                           "allowed_absolute": 0.002, "critical": True}]}
    (tmp_path / "policy.yaml").write_text(yaml.safe_dump(policy))
    (tmp_path / "model").mkdir()  # url: arms load no model; the run only needs its path to exist
    config = {
        "name": "killed",
        "model": {"path": str(tmp_path / "model"), "served_name": "fake-model"},
        "arms": {"a": {"url": urls[0], "role": "baseline"}, "b": {"url": urls[1], "role": "candidate"}},
        "load": {"users": 2, "profiles": [{"profile": "many-items", "requests": 5000,
                                           "set": {"images.count": [1, 2], "max_tokens": 8}}]},
        "policy": str(tmp_path / "policy.yaml"),
    }
    path = tmp_path / "experiment.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.fixture
def arms() -> Iterator[list[str]]:
    knobs = Knobs(n_tokens=8, token_delay_s=0.005)
    with TokenizingUpstream(knobs) as a, TokenizingUpstream(knobs) as b:
        yield [a.url, b.url]


def stored(db: str) -> tuple[str, int] | None:
    """The run's id and its stored exchanges, once the router created it."""
    with Store.open(db) as store:
        runs = store.list_runs()
        return (runs[0].run_id, store.count_exchanges(runs[0].run_id)) if runs else None


def wait_stored(proc: subprocess.Popen[bytes], out: Path, db: str, timeout_s: float = 60) -> str:
    """The run's id once ``STORED_BEFORE_KILL`` of its exchanges are in the store."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert proc.poll() is None, (out / "run.log").read_text()
        if (out / "abserve.db").exists() and (seen := stored(db)) and seen[1] >= STORED_BEFORE_KILL:
            return seen[0]
        time.sleep(0.3)
    raise AssertionError(f"fewer than {STORED_BEFORE_KILL} exchanges stored in {timeout_s:.0f} s")


def test_a_killed_run_leaves_no_process_and_is_judged_interrupted(tmp_path: Path, arms: list[str]) -> None:
    out = tmp_path / "out"
    out.mkdir()
    db = f"sqlite:///{out / 'abserve.db'}"
    env = {**os.environ, "ABSERVE_RUN_LOCK": str(tmp_path / "run.lock")}
    with (out / "run.log").open("wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", "abserve", "run", str(experiment(tmp_path, arms)),
                                 "--out", str(out)], cwd=REPO, env=env, stdout=log,
                                stderr=subprocess.STDOUT)
    started: list[psutil.Process] = []
    try:
        run_id = wait_stored(proc, out, db)
        started = psutil.Process(proc.pid).children(recursive=True)  # the router and the load
        names = " ".join(" ".join(child.cmdline()) for child in started)
        assert "abserve router" in names, names
        assert "locust" in names, names
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        killed_at = time.monotonic()
        _, alive = psutil.wait_procs(started, timeout=GONE_WITHIN_S)
        assert alive == [], f"still running {GONE_WITHIN_S:.0f} s after the kill: {alive}"
        assert time.monotonic() - killed_at < GONE_WITHIN_S
    finally:
        for child in started:  # nothing left behind if an assertion failed
            if child.is_running():
                child.kill()
        if proc.poll() is None:
            proc.kill()
    router_log = (out / "logs" / "router.log").read_text()
    assert "is gone (abserve run was killed)" in router_log, router_log[-2000:]
    with sqlite3.connect(out / "abserve.db") as conn:  # the stored status, not the one derived
        (status,) = conn.execute(f"SELECT status FROM {runs_table.name} WHERE run_id = ?",
                                 (run_id,)).fetchone()
    assert status == "interrupted"
    seen = stored(db)
    assert seen is not None
    assert seen == (run_id, seen[1])
    assert seen[1] >= STORED_BEFORE_KILL

    report = subprocess.run(
        [sys.executable, "-m", "abserve", "report", run_id, "--db", db, "--out", str(tmp_path / "report"),
         "--policy", str(tmp_path / "policy.yaml")],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert report.returncode == 3, report.stdout + report.stderr
    verdict = json.loads((tmp_path / "report" / "report.json").read_text())
    assert verdict["verdict"] == "invalid"
    assert any("interrupted" in reason for reason in verdict["invalid_reasons"]), verdict["invalid_reasons"]
