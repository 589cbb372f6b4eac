"""Every gate a shipped policy declares has a line in ``report.json``, in both modes (issue 47).

``mode: fixed`` once judged latency rules and strata only: the CPU default's critical
``tpot.improvement@128+`` and its ``per_item`` line vanished from the table without a word. Here
every shipped policy (``configs/policy/*.yaml``), judged as ``fixed`` and as ``sequential``, writes
the report of one synthetic stored run (a SQLite store written by the store API, read back by
``abserve report``'s own ``build_report``), and each declared gate must have its line, judged
(an interval or a reason), never missing.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.support.report_runs import exchanges, info

from abserve.compare import Policy, load_policy
from abserve.compare.policy import ArmRoles, Mode
from abserve.ledger.signoff import build_report
from abserve.store import Store

ROOT = Path(__file__).resolve().parents[3]
POLICIES = sorted((ROOT / "configs" / "policy").glob("*.yaml"))
FAST = ("cpu-default", "default")  # make test-fast judges these two; make test every shipped one
CASES = [pytest.param(p, id=p.stem, marks=() if p.stem in FAST else pytest.mark.slow) for p in POLICIES]
RUN = "every-gate"


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('store') / 'abserve.db'}"
    run = info().model_copy(update={"run_id": RUN, "status": "running"})
    with Store.open(url) as store:
        store.create_run(run)
        store.write_exchanges([ex.model_copy(update={"run_id": RUN}) for ex in exchanges(64)])
        store.finish_run(RUN, "completed")
    return url


def declared(policy: Policy) -> set[str]:
    """The name of every gate ``policy`` declares (equality is ``equality_verdict``)."""
    names = {rule.name for rule in policy.metrics}
    names |= {rule.name for rule in policy.improvements}
    names |= {rule.name for rule in policy.per_item}
    names |= {f"{metric}.stratum[{rule.name}]" for rule in policy.strata for metric in rule.metrics}
    return names


@pytest.mark.parametrize("mode", ["fixed", "sequential"])
@pytest.mark.parametrize("path", CASES)
def test_every_declared_gate_has_a_line_in_report_json(db: str, tmp_path: Path, path: Path,
                                                       mode: Mode) -> None:
    shipped = load_policy(path)
    roles = ArmRoles(baseline="a", candidate="b", floor=None)  # the stored run's arms
    policy = shipped.model_copy(update={"mode": mode, "arms": roles})
    paths = build_report(db, RUN, tmp_path, path, policy=policy)
    report = json.loads(paths.json.read_text())
    lines = {m["name"]: m for m in report["metrics"]}
    assert declared(shipped) <= set(lines), f"{path.name} ({mode}) lost {declared(shipped) - set(lines)}"
    assert len(report["metrics"]) == len(declared(shipped)), sorted(lines)
    assert report["equality_verdict"]["outcome"] in {"pass", "fail", "marginal", "inconclusive"}
    for name in declared(shipped):
        line = lines[name]
        assert line["reason"], f"{name} has no reason"
        assert line["outcome"] != "pass" or line["low"] is not None or line["high"] is not None, name


def test_a_fixed_look_judges_the_claimed_improvement_and_the_cost_per_item(db: str, tmp_path: Path) -> None:
    """The CPU default's claim under ``mode: fixed``: b is faster by 2 µs per image per token, so
    the improvement on >= 128 images is proven and the slope is negative (within 0 allowed)."""
    policy = load_policy(ROOT / "configs/policy/cpu-default.yaml").model_copy(update={"mode": "fixed"})
    paths = build_report(db, RUN, tmp_path, Path("unused.yaml"), policy=policy)
    lines = {m["name"]: m for m in json.loads(paths.json.read_text())["metrics"]}
    claim, cost = lines["tpot.improvement@128+"], lines["tpot.per_item"]
    assert claim["outcome"] == "pass", claim["reason"]
    assert claim["kind"] == "improvement"
    assert claim["critical"]
    assert claim["high"] < 0
    assert cost["outcome"] == "pass", cost["reason"]
    assert cost["method"] == "theil-sen"
    assert cost["low"] < cost["estimate"] < cost["high"] <= 0
    assert cost["estimate"] == pytest.approx(-2e-6, abs=1e-6)
