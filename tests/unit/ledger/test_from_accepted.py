"""An arm ``from: accepted``: the config's schema, its resolution from the run's store
(``abserve.ledger.baseline``), the refusal when nothing is accepted (``abserve check`` and
``abserve run`` exit 4 naming ``abserve accept``), the provenance and the report's sentence."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError
from tests.unit.ledger.conftest import POLICY, fill
from typer.testing import CliRunner

from abserve.cli import app
from abserve.compare import Judgment, load_policy
from abserve.config import ExperimentConfig, load_experiment
from abserve.ledger.baseline import NoAcceptedBuild, resolve_accepted
from abserve.ledger.book import accept
from abserve.ledger.signoff import build_report
from abserve.model.arms import ArmConfig
from abserve.report.sentences import first_screen
from abserve.runs.provenance import start_provenance
from abserve.store import Store

ROOT = Path(__file__).resolve().parents[3]
V1 = {"name": "v1", "run_id": "good", "arm": "b", "config_name": "nightly"}  # run good's b, accepted as v1


def nightly_config(tmp_path: Path, baseline: dict[str, object], b: dict[str, object] | None = None) -> Path:
    """The CPU default renamed ``nightly`` (the runs of ``fill``), its arm a replaced by ``baseline``
    (and b by ``b`` when given)."""
    data = yaml.safe_load((ROOT / "configs/cpu-default.yaml").read_text())
    data["name"] = "nightly"
    data["arms"]["a"] = baseline
    data["arms"]["b"] = b or data["arms"]["b"]
    data["policy"] = str(ROOT / data["policy"])
    path = tmp_path / "nightly.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def accepted_store(tmp_path: Path, *names: str) -> str:
    """A store whose passed run ``good`` was accepted as each of ``names``, in turn."""
    url = f"sqlite:///{tmp_path / 'runs' / 'abserve.db'}"
    fill(url)
    build_report(url, "good", tmp_path / "report", POLICY)
    with Store.open(url) as store:
        for i, name in enumerate(names):
            accept(store, "good", name, now=100.0 + i)
    return url


def test_an_arm_from_accepted_sets_only_role_and_cpus() -> None:
    arm = ArmConfig.model_validate({"from": "accepted:v1.2", "cpus": [0], "role": "baseline", "lookup": None})
    assert (arm.from_, arm.accepted_name, arm.cpus) == ("accepted:v1.2", "v1.2", [0])
    assert ArmConfig.model_validate({"from": "accepted"}).accepted_name is None
    with pytest.raises(ValidationError, match="only role and cpus may be set beside it, not args, lookup"):
        ArmConfig.model_validate({"from": "accepted", "lookup": "linear", "args": {"--seed": 1}})
    with pytest.raises(ValidationError, match="from"):
        ArmConfig.model_validate({"from": "yesterday"})


def test_the_arm_is_the_accepted_build_as_baseline(tmp_path: Path) -> None:
    url = accepted_store(tmp_path, "v1", "v2")
    config = load_experiment(nightly_config(tmp_path, {"from": "accepted:v1", "cpus": [0]}))
    assert config.accepted_baseline is None
    resolved = resolve_accepted(config, url)
    a, b = resolved.arms["a"], resolved.arms["b"]
    assert (a.role, a.lookup, a.venv, a.cpus) == ("baseline", "bisect", Path("/opt/venvs/next"), [0])
    assert a.from_ is None
    assert a.install == ["vllm @ git+https://github.com/vllm-project/vllm@" + "ab12" * 10]
    assert a.args == {"--max-num-seqs": 8}
    assert b == config.arms["b"]
    assert resolved.accepted_baseline == V1
    latest = resolve_accepted(load_experiment(nightly_config(tmp_path, {"from": "accepted"})), url)
    assert latest.accepted_baseline is not None
    assert latest.accepted_baseline["name"] == "v2"
    assert latest.arms["a"].cpus is None  # the CPUs are this config's, never the accepted run's
    plain = load_experiment(ROOT / "configs/cpu-default.yaml")
    assert resolve_accepted(plain, "sqlite:///nowhere/at/all.db") is plain  # nothing from the ledger


def test_nothing_accepted_is_one_line_naming_abserve_accept(tmp_path: Path) -> None:
    config = load_experiment(nightly_config(tmp_path, {"from": "accepted"}))
    missing = tmp_path / "none" / "abserve.db"
    with pytest.raises(NoAcceptedBuild, match=r"no accepted build of config 'nightly' in the store .*"
                                              r"`abserve accept RUN_ID --as NAME`"):
        resolve_accepted(config, f"sqlite:///{missing}")
    assert not missing.exists()  # looking created no store
    url = accepted_store(tmp_path, "v1")
    named = load_experiment(nightly_config(tmp_path, {"from": "accepted:v9"}))
    with pytest.raises(NoAcceptedBuild, match="no accepted release 'v9' of config 'nightly'"):
        resolve_accepted(named, url)
    candidate = load_experiment(nightly_config(tmp_path, {"from": "accepted", "role": "candidate"},
                                               {"lookup": "bisect", "role": "baseline"}))
    with pytest.raises(NoAcceptedBuild, match="only the baseline arm may"):
        resolve_accepted(candidate, url)


@pytest.mark.parametrize("command", ["check", "run"])
def test_check_and_run_refuse_without_an_accepted_build(tmp_path: Path, command: str) -> None:
    path = nightly_config(tmp_path, {"from": "accepted", "cpus": [0]})
    result = CliRunner().invoke(app, [command, str(path), "--out", str(tmp_path / "out")])
    assert result.exit_code == 4, result.output
    assert "no accepted build of config 'nightly'" in result.output
    assert "abserve accept" in result.output


def test_the_run_records_it_and_the_report_says_it(tmp_path: Path) -> None:
    url = accepted_store(tmp_path, "v1")
    config = load_experiment(nightly_config(tmp_path, {"from": "accepted"}))
    resolved: ExperimentConfig = resolve_accepted(config, url)
    provenance = start_provenance(resolved, load_policy(POLICY))
    assert provenance.accepted_baseline == V1
    assert "accepted_baseline" not in start_provenance(load_experiment(ROOT / "configs/cpu-default.yaml"),
                                                       load_policy(POLICY)).model_dump()
    judgment = Judgment.model_validate_json((tmp_path / "report" / "report.json").read_text())
    judgment.provenance.accepted_baseline = provenance.accepted_baseline
    first = first_screen(judgment)[0]
    assert first.text == "The baseline is accepted release v1: the build of arm b of run good."
    assert first.anchor == "#arms-section"
