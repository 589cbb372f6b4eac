"""One policy for a run, from its first look: the run records its policy as the router creates
it, later writers keep it, and ``abserve watch``, ``report`` and ``plan`` judge with it
(``--policy`` overrides it and says so). Real SQLite stores, no servers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from tests.support.records_factory import ab_run
from typer.testing import CliRunner

from abserve.cli import app
from abserve.compare import Policy, load_policy
from abserve.config import load_experiment
from abserve.model.provenance import RunProvenance
from abserve.router.run_open import open_run
from abserve.router.settings import RouterSettings
from abserve.runs.provenance import start_provenance
from abserve.store import Store

ROOT = Path(__file__).resolve().parents[3]
RUN = "r-live"


def recorded() -> Policy:
    """The CPU default's policy, renamed so the tests tell where a policy came from."""
    return load_policy(ROOT / "configs/policy/cpu-default.yaml").model_copy(update={"name": "as-recorded"})


def start(db: Path, policy: Policy | None) -> str:
    """A run created as the router creates it (``open_run``), with 70 exchanges; still running."""
    db.parent.mkdir(parents=True, exist_ok=True)
    url = f"sqlite:///{db}"
    given = None if policy is None else RunProvenance(
        policy=policy.model_dump(mode="json"), policy_file="configs/policy/cpu-default.yaml",
        policy_sha256="ab" * 32)
    with Store.open(url) as store:
        open_run(store, RUN, {"primary": "a"}, resume=False, provenance=given)
        store.write_exchanges([ex.model_copy(update={"run_id": RUN}) for ex in ab_run(70, seed=1)])
    return url


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.output


@pytest.fixture(autouse=True)
def repo_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    monkeypatch.delenv("ABSERVE_DATABASE_URL", raising=False)


def test_the_run_is_created_with_its_policy_and_later_writers_keep_it(tmp_path: Path) -> None:
    url = start(tmp_path / "abserve.db", recorded())
    with Store.open(url) as store:
        run = store.get_run(RUN)
        assert run is not None
        assert Policy.model_validate(run.provenance.policy) == recorded()
        # the orchestrator's provenance at the end carries no policy, and another file's hash
        run.provenance = RunProvenance(experiment="x", policy_sha256="cd" * 32)
        store.update_run(run)
        again = store.get_run(RUN)
    assert again is not None
    assert again.provenance.experiment == "x"
    assert Policy.model_validate(again.provenance.policy).name == "as-recorded"
    assert (again.provenance.policy_file, again.provenance.policy_sha256) == (
        "configs/policy/cpu-default.yaml", "ab" * 32)


def test_a_run_recorded_without_a_policy_reads_as_before(tmp_path: Path) -> None:
    url = start(tmp_path / "abserve.db", None)  # a by-hand router, or a store of an older abserve
    with Store.open(url) as store:
        run = store.get_run(RUN)
    assert run is not None
    assert run.provenance.policy is None
    assert "policy" not in run.provenance.model_dump()  # the JSON of older runs is unchanged
    older = (Path(__file__).parents[1] / "store" / "dict_era_provenance.json").read_text()
    assert RunProvenance.model_validate_json(older).policy is None


def test_watch_judges_with_the_recorded_policy(tmp_path: Path) -> None:
    url = start(tmp_path / "abserve.db", recorded())
    rc, out = invoke("watch", RUN, "--db", url, "--once")
    assert rc == 0, out
    assert ("policy as-recorded from the run's own record (recorded at its start from "
            "configs/policy/cpu-default.yaml)") in out
    assert "critical gates (policy as-recorded, judged on 70 exchanges):" in out
    gates = [line.split()[0] for line in out.splitlines() if line.startswith("  ")]
    assert "tpot.improvement@128+" in gates  # the CPU default's gate, not default.yaml's


def test_watch_policy_is_an_override_said_as_such(tmp_path: Path) -> None:
    url = start(tmp_path / "abserve.db", recorded())
    rc, out = invoke("watch", RUN, "--db", url, "--once", "--policy", "configs/policy/default.yaml")
    assert rc == 0, out
    assert ("policy default from configs/policy/default.yaml (--policy, overrides the run's "
            "as-recorded)") in out
    bare = start(tmp_path / "bare" / "abserve.db", None)
    rc, out = invoke("watch", RUN, "--db", bare, "--once", "--policy", "configs/policy/default.yaml")
    assert "policy default from configs/policy/default.yaml (--policy)\n" in out, out


def test_report_and_plan_find_the_store_and_the_recorded_policy(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    start(runs / "latest" / "abserve.db", recorded())
    rc, out = invoke("report", RUN, "--runs", str(runs), "--out", str(tmp_path / "out"))
    assert rc == 3, out  # still running, arms unproven: invalid, judged under the recorded policy
    assert "policy: as-recorded from the run's own record" in out
    assert json.loads((tmp_path / "out" / "report.json").read_text())["policy"]["name"] == "as-recorded"
    rc, out = invoke("plan", RUN, "--runs", str(runs), "--effect-relative", "0.05")
    assert rc == 0, out
    assert f"store: {runs / 'latest' / 'abserve.db'}; policy: as-recorded from the run's own record" in out
    assert "tpot: pilot " in out
    rc, out = invoke("plan", RUN, "--runs", str(runs), "--effect-relative", "0.05", "--policy",
                     "configs/policy/default.yaml")
    assert rc == 0, out
    assert "(--policy, overrides the run's as-recorded)" in out


def test_plan_of_a_run_that_records_no_policy_asks_for_one(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    start(runs / "a" / "abserve.db", None)
    rc, out = invoke("plan", RUN, "--runs", str(runs), "--effect-relative", "0.05")
    assert rc == 4, out
    assert "pass --policy FILE" in out


def test_abserve_run_gives_the_router_the_policy_it_judges_with(tmp_path: Path) -> None:
    """What ``router_settings`` writes for the router: the judged policy, outside the config."""
    config = load_experiment(ROOT / "configs/cpu-default.yaml")
    policy = load_policy(config.policy)
    written = yaml.safe_load(yaml.safe_dump(
        {"arms": {"a": {"url": "http://x:1"}, "b": {"url": "http://x:2"}}, "dev_mode": True,
         "run_provenance": start_provenance(config, policy).model_dump(mode="json")}))
    settings = RouterSettings(**written)
    assert Policy.model_validate(settings.run_provenance.policy) == policy
    assert settings.run_provenance.policy_file == str(config.policy)
    assert settings.run_provenance.policy_sha256 is not None
    assert "run_provenance" not in settings.public_config()  # not part of the stored config
