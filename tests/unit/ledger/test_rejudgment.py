"""The ledger keeps the sign-off (issue 57, item 8): a run's ledger row is its verdict under the
policy recorded with the run; ``abserve report RUN --policy other.yaml --out elsewhere`` (a
re-judgment) writes its report and leaves the row alone, so ``abserve accept`` decides on the
sign-off. Real SQLite stores, the real commands (``abserve report``, ``abserve accept``)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from tests.support.records_factory import ab_run
from tests.unit.ledger.conftest import POLICY, SIGNOFFS, signoff_run
from typer.testing import CliRunner

from abserve.cli import app
from abserve.compare import load_policy
from abserve.ledger.book import entry_of, record_entry
from abserve.ledger.entry import ArmBuild, LedgerEntry
from abserve.ledger.signoff import rejudgment
from abserve.store import Store


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.output


@pytest.fixture
def store(tmp_path: Path) -> str:
    """Run ``good`` (it passes under the default policy), which recorded that policy at its start
    as ``abserve run`` does, with arms a and b; not yet reported."""
    url = f"sqlite:///{tmp_path / 'abserve.db'}"
    run = signoff_run("good")
    run.provenance.policy = load_policy(POLICY).model_dump(mode="json")
    run.provenance.policy_file = str(POLICY)
    shift, seed, _ = SIGNOFFS["good"]
    with Store.open(url) as opened:
        opened.create_run(run)
        opened.write_exchanges([ex.model_copy(update={"run_id": "good"})
                                for ex in ab_run(70, itl_shift=shift, seed=seed, arms=("a", "b"))])
        opened.finish_run("good", "completed")
    return url


@pytest.fixture
def strict(tmp_path: Path) -> Path:
    """A throwaway policy: the default one asking for far more requests than the run has."""
    data = yaml.safe_load(POLICY.read_text())
    data.update(name="throwaway-strict", min_samples=100_000)
    path = tmp_path / "strict.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def verdict_in_ledger(url: str) -> tuple[str, str | None]:
    with Store.open(url) as opened:
        entry = entry_of(opened, "good")
    assert entry is not None
    return entry.verdict, entry.report_dir


def test_a_rejudgment_leaves_the_sign_off_and_accept_decides_on_it(store: str, strict: Path,
                                                                   tmp_path: Path) -> None:
    rc, text = invoke("report", "good", "--db", store, "--out", str(tmp_path / "signoff"))
    assert rc == 0, text  # the sign-off: judged under the policy recorded with the run
    assert "ledger: not written" not in text
    rc, text = invoke("report", "good", "--db", store, "--out", str(tmp_path / "explore"),
                      "--policy", str(strict))
    assert rc == 2, text  # inconclusive under the throwaway policy: its report is written ...
    assert (tmp_path / "explore" / "report.html").is_file()
    said = " ".join(text.split())
    assert ("ledger: not written, a re-judgment: policy 'throwaway-strict' is not the one recorded "
            f"with the run ('default' from {POLICY}); the run's row keeps its sign-off's verdict") in said
    assert verdict_in_ledger(store) == ("pass", str((tmp_path / "signoff").resolve()))  # ... not the row
    rc, text = invoke("accept", "good", "--as", "v1", "--db", store)
    assert rc == 0, text
    assert "accepted run good arm b as release 'v1'" in text


def test_a_rejudgment_alone_is_no_sign_off(store: str, strict: Path, tmp_path: Path) -> None:
    rc, text = invoke("report", "good", "--db", store, "--out", str(tmp_path / "explore"),
                      "--policy", str(strict))
    assert rc == 2, text
    rc, text = invoke("accept", "good", "--as", "v1", "--db", store)
    assert rc == 4, text
    assert "has no ledger entry" in " ".join(text.split())


def test_the_recorded_policy_given_by_name_is_still_the_sign_off(store: str, tmp_path: Path) -> None:
    rc, text = invoke("report", "good", "--db", store, "--out", str(tmp_path / "again"),
                      "--policy", str(POLICY))
    assert rc == 0, text
    assert verdict_in_ledger(store)[0] == "pass"


def test_a_two_arm_report_of_a_family_run_leaves_the_familys_row(store: str) -> None:
    family = LedgerEntry(run_id="good", recorded_at=1.0, verdict="fail", exit_code=1,
                         arms=[ArmBuild(name="a", role="baseline"), ArmBuild(name="b", role="candidate"),
                               ArmBuild(name="c", role="candidate")])
    with Store.open(store) as opened:
        record_entry(opened, family)
        run = opened.get_run("good")
        assert run is not None
        why = rejudgment(opened, run, load_policy(POLICY))
    assert why == "the run's row is its family's sign-off (candidates b, c)"
