"""``abserve accept RUN_ID --as NAME [--db URL] [--runs DIR]`` end to end over a real SQLite
store written by ``abserve report``: a passed sign-off is accepted (exit 0), a failed, unknown or
unreported run refused with exit 4 and one line saying why; a report stands when its ledger
entry cannot be written."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.support.records_factory import run_info
from tests.unit.ledger.conftest import POLICY, fill
from typer.testing import CliRunner

from abserve.cli import app
from abserve.ledger import book
from abserve.ledger.book import latest_accepted
from abserve.store import Store


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.output


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``runs/latest/abserve.db`` holding ``good`` (passed) and ``slow`` (failed), both reported,
    and ``unreported`` (one store for the module: the tests only add accepted builds to it)."""
    tmp_path = tmp_path_factory.mktemp("ledger-cli")
    db = tmp_path / "runs" / "latest" / "abserve.db"
    url = f"sqlite:///{db}"
    fill(url)
    with Store.open(url) as store:
        store.create_run(run_info(run_id="unreported"))
    for run_id, code in (("good", 0), ("slow", 1)):
        rc, text = invoke("report", run_id, "--db", url, "--out", str(tmp_path / run_id),
                          "--policy", str(POLICY))
        assert rc == code, text
    return tmp_path / "runs"


def test_accept_a_passed_sign_off(runs: Path) -> None:
    rc, text = invoke("accept", "good", "--as", "v0.8.0", "--runs", str(runs))
    assert rc == 0, text
    assert f"store: {runs / 'latest' / 'abserve.db'}" in text
    assert "accepted run good arm b as release 'v0.8.0' of config 'nightly' (vLLM 0.0-test" in text
    with Store.open(f"sqlite:///{runs / 'latest' / 'abserve.db'}") as store:
        accepted = latest_accepted(store, "nightly")
    assert accepted is not None
    assert (accepted.name, accepted.run_id, accepted.arm) == ("v0.8.0", "good", "b")


@pytest.mark.parametrize(("run_id", "said"), [
    ("slow", "did not pass: its verdict is fail (exit 1)"),
    ("unreported", "run `abserve report unreported --out DIR` first"),
    ("ghost", "no store under"),
])
def test_accept_refuses_with_exit_4(runs: Path, run_id: str, said: str) -> None:
    rc, text = invoke("accept", run_id, "--as", "v1", "--runs", str(runs))
    assert rc == 4, text
    assert said in " ".join(text.split())
    assert text.count("accept refused:") == 1


def test_accept_of_an_unknown_run_in_a_named_store_exits_4(runs: Path, tmp_path: Path) -> None:
    rc, text = invoke("accept", "ghost", "--as", "v1", "--db", f"sqlite:///{runs / 'latest' / 'abserve.db'}")
    assert (rc, "no run 'ghost' in the store" in text) == (4, True), text
    rc, text = invoke("accept", "good", "--as", "v1", "--db", f"sqlite:///{tmp_path / 'missing.db'}")
    assert (rc, "no store at" in text) == (4, True), text


def test_a_report_stands_when_its_ledger_entry_cannot_be_written(
        runs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    """(Without pytest's log capture the warning goes to stderr: logging's last-resort handler.)"""
    def broken(*_args: object) -> None:
        raise OSError("disk full\nsecond line")

    monkeypatch.setattr(book, "record_entry", broken)
    rc, text = invoke("report", "good", "--runs", str(runs), "--out", str(tmp_path / "again"),
                      "--policy", str(POLICY))
    assert rc == 0, text
    assert "verdict: pass" in text
    assert [r.getMessage() for r in caplog.records if r.name == "abserve.ledger"] == [
        "ledger: the entry of run good was not written: OSError: disk full second line"]
