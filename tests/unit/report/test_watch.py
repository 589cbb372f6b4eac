"""``abserve watch`` against a real SQLite store written with the record factories, run as the CLI."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from io import StringIO
from pathlib import Path

import pytest
from rich.console import Console
from tests.support.records_factory import ab_run, arm, exchange, run_info
from typer.testing import CliRunner

from abserve.cli import app
from abserve.compare import load_policy
from abserve.model.provenance import RunProvenance
from abserve.model.records import Exchange
from abserve.runs.watch_frame import (
    Gate,
    duration,
    interval_text,
    judge_stride,
    recorded_budget,
    roles_for_arms,
)
from abserve.runs.watch_report import ExchangeCache, Watcher, show
from abserve.store import Store

ROOT = Path(__file__).resolve().parents[3]
POLICY = str(ROOT / "configs/policy/default.yaml")
RUN = "live"


def exchanges(n: int, start: int = 0, candidate_tokens: dict[int, list[int]] | None = None) -> list[Exchange]:
    made = ab_run(n + start, arms=("a", "b"), candidate_tokens=candidate_tokens)[start:]
    return [ex.model_copy(update={"run_id": RUN}) for ex in made]


def new_run(url: str, provenance: dict[str, object] | None = None, started_ago: float = 65.0) -> Store:
    store = Store.open(url)
    run = run_info({}, run_id=RUN, status="running").model_copy(
        update={"started_at": time.time() - started_ago, "ended_at": None,
                "provenance": RunProvenance.model_validate(provenance or {}), "config": {"primary": "a"}})
    store.create_run(run)
    return store


@pytest.fixture
def url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'abserve.db'}"


@pytest.fixture
def store(url: str) -> Iterator[Store]:
    s = new_run(url, {"sequential": {"budget": {"seconds": 600.0, "requests": 400}}})
    # 70 exchanges; b's output differs from a's on two of them, and one of b's answers failed
    s.write_exchanges(exchanges(70, candidate_tokens={15: [9, 9, 9], 40: [1, 2, 7]}))
    s.write_exchanges([exchange(70, [arm("a"), arm("b", status=500, error_class="http_status")], run_id=RUN)])
    yield s
    s.close()


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["watch", *args])
    return result.exit_code, result.output


def test_once_prints_one_plain_frame(store: Store, url: str) -> None:
    rc, out = invoke(RUN, "--db", url, "--policy", POLICY, "--once")
    assert rc == 0, out
    assert f"run {RUN}: running, 71 exchanges, elapsed 1m0" in out
    assert "of the budget left" in out
    assert "8m5" in out
    assert "329 requests of the budget left" in out
    rows = {line.split()[0]: line.split()[1:] for line in out.splitlines() if line[:2] in ("a ", "b ")}
    assert rows == {"a": ["71", "0", "0"], "b": ["71", "1", "2"]}
    assert "critical gates (policy default, judged on 71 exchanges):" in out
    gates = [line.split()[0] for line in out.splitlines() if line.startswith("  ")]
    assert gates == ["equality", "tpot.hl", "ttft.hl"]
    assert "mismatch rate in [" in out
    assert "] ms, allowed +" in out


def test_without_a_policy_the_default_is_used_and_said(store: Store, url: str,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    rc, out = invoke(RUN, "--db", url, "--once")
    assert rc == 0, out
    assert "policy default from configs/policy/default.yaml (the run records none)" in out


def test_without_a_budget_only_the_elapsed_time_shows(url: str) -> None:
    s = new_run(url, started_ago=5.0)
    try:
        rc, out = invoke(RUN, "--db", url, "--policy", POLICY, "--once")
    finally:
        s.close()
    assert rc == 0, out
    assert f"run {RUN}: running, 0 exchanges, elapsed 5s\n" in out
    assert "budget" not in out
    assert "not judged yet" in out
    rc, out = invoke(RUN, "--db", url, "--policy", POLICY, "--once", "--budget", "2m")
    assert "1m5" in out, out
    assert "of the budget left" in out, out


def test_the_store_url_may_come_from_the_environment(store: Store, url: str,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ABSERVE_DATABASE_URL", url)  # as the compose services have it
    rc, out = invoke(RUN, "--policy", POLICY, "--once")
    assert rc == 0, out
    assert f"run {RUN}: running, 71 exchanges" in out


def test_a_missing_store_or_run_is_one_line_and_exit_4(store: Store, url: str, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ABSERVE_DATABASE_URL", raising=False)
    for args, message in (
        (["nope", "--db", url], "error: no run 'nope' in the store"),
        ([RUN, "--db", f"sqlite:///{tmp_path / 'none.db'}"], "error: no store at"),
        ([RUN, "--runs", str(tmp_path / "empty")], "error: no --db given and no runs folder"),
    ):
        rc, out = invoke(*args, "--policy", POLICY, "--once")
        assert rc == 4, out
        assert out.count("\n") == 1, out
        assert out.startswith(message), out


def test_plain_status_lines_until_the_run_ends(store: Store, url: str) -> None:
    def writer() -> None:
        for start in (71, 81):
            time.sleep(0.6)
            store.heartbeat(RUN)
            store.write_exchanges(exchanges(10, start=start))
        time.sleep(0.6)
        store.finish_run(RUN, "completed")

    thread = threading.Thread(target=writer)
    thread.start()
    began = time.monotonic()
    rc, out = invoke(RUN, "--db", url, "--policy", POLICY, "--every", "0.2")
    thread.join()
    assert rc == 0, out
    assert time.monotonic() - began < 30
    lines = [line for line in out.splitlines() if line.startswith(f"watch {RUN}: ")]
    assert len(lines) >= 3, out
    assert lines[0].startswith(f"watch {RUN}: running, 71 exchanges")
    assert "| a 71 req/0 err/0 mism" in lines[0]
    assert lines[-1].startswith(f"watch {RUN}: completed, 91 exchanges")
    assert "b 91 req/1 err/2 mism" in lines[-1]
    assert "tpot.hl pass" in lines[-1]
    assert out.rstrip().endswith(f"watch: run {RUN} is completed; the watch ends")


def test_it_waits_for_the_run_when_told(url: str) -> None:
    made: list[Store] = []
    timer = threading.Timer(0.8, lambda: made.append(new_run(url)))
    timer.start()
    try:
        rc, out = invoke(RUN, "--db", url, "--policy", POLICY, "--once", "--wait", "20")
    finally:
        timer.join()
        for s in made:
            s.close()
    assert rc == 0, out
    assert f"run {RUN}: running, 0 exchanges" in out


def test_a_terminal_gets_the_live_panel(store: Store) -> None:
    store.finish_run(RUN, "completed")
    buffer = StringIO()
    console = Console(file=buffer, force_terminal=True, width=120)
    show(Watcher(store, RUN, load_policy(POLICY), every_s=0.1), once=False, console=console)
    text = buffer.getvalue()
    for piece in ("completed, 71 exchanges", "arms", "mismatches", "equality", "tpot.hl", "the watch ends"):
        assert piece in text, text


def test_it_judges_only_new_exchanges(store: Store) -> None:
    watcher = Watcher(store, RUN, load_policy(POLICY), every_s=10.0)
    first = watcher.look()
    judged = watcher.judged_refresh
    again = watcher.look()
    assert first.judged_at == again.judged_at == 71
    assert watcher.judged_refresh == judged, "nothing new: no second judgment"
    store.write_exchanges(exchanges(5, start=71))
    assert watcher.look().judged_at == 76


def test_the_cache_reads_new_rows_and_rereads_what_it_missed(store: Store) -> None:
    cache = ExchangeCache(RUN)
    assert len(cache.refresh(store)) == 71
    store.write_exchanges(exchanges(4, start=71))
    assert len(cache.refresh(store)) == 75
    cache.by_id.pop(min(cache.by_id))  # as if a row had been committed below an id already read
    stored = {ex.request_id for ex in store.iter_exchanges(RUN)}
    assert {ex.request_id for ex in cache.refresh(store)} == stored


def test_judging_is_spaced_out_when_it_is_slow() -> None:
    assert judge_stride(0.2, every_s=10) == 1
    assert judge_stride(5.0, every_s=10) == 2
    assert judge_stride(12.0, every_s=10) == 5


def test_budget_and_roles_read_defensively() -> None:
    def recorded(provenance: dict[str, object]) -> tuple[float | None, int | None]:
        return recorded_budget(RunProvenance.model_validate(provenance))

    assert recorded({"sequential": {"budget": {"seconds": 500.0, "requests": None}}}) == (500.0, None)
    assert recorded({"budget": {"requests": 40}}) == (None, 40)
    assert recorded({"sequential": {"rounds": 2}, "budget": {"requests": 40}}) == (None, 40)
    assert recorded({"sequential": {"budget": {}}, "budget": {"requests": 40}}) == (None, None)
    assert recorded({"budget": 3}) == (None, None)
    policy = load_policy(POLICY)
    assert roles_for_arms(policy, ["a", "b", "a2"], "a") is policy
    other = roles_for_arms(policy, ["old", "new"], "new").arms
    assert (other.baseline, other.candidate, other.floor) == ("new", "old", None)


def test_text_pieces() -> None:
    assert (duration(5), duration(245), duration(3725)) == ("5s", "4m05s", "1h02m")
    half_open = Gate("tpot.hl", "inconclusive", -1e-5, None, 5e-4)
    assert interval_text(half_open) == "[-0.010, ?] ms, allowed +0.500"
    assert interval_text(Gate("x", "inconclusive")) == "no interval yet"
