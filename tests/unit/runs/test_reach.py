"""Reachability of a config's policy before any server starts (``runs/reach.py`` over
``compare/reachability.py``), on the user's own traffic files and on generated profiles:
``abserve check`` refuses a critical gate the traffic never reaches (exit 4, one line), a gate
the policy does not require is listed as not judged, and the expected cost is said up front."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.support import traffic_files as tf
from typer.testing import CliRunner

from abserve.base import exit_codes
from abserve.cli import app
from abserve.config import load_experiment
from abserve.runs.reach import traffic_parts
from abserve.runs.rounds import parse_budget, preflight_report

REPO = Path(__file__).resolve().parents[3]


def gateway_log(folder: Path, n: int = 30) -> Path:
    """An OpenAI request log with 1-6 local images per request (as in issue 47)."""
    tf.write_images(folder, n=6)
    refs = [f"images/img{j}.{'png' if j % 2 == 0 else 'jpg'}" for j in range(6)]
    rows = [{"body": tf.chat_body(k, refs[: k % 6 + 1]), "tags": {"tenant": f"t{k % 2}"}} for k in range(n)]
    return tf.write_jsonl(folder / "gateway.jsonl", rows)


def user_config(folder: Path, policy: dict[str, Any] | None = None, **extra: Any) -> Path:
    """A config extending the CPU default whose load is the user's own files."""
    config: dict[str, Any] = {
        "extends": str(REPO / "configs" / "cpu-default.yaml"),
        "name": "mine",
        "load": {"users": 1, "profiles": [
            {"kind": "file", "file": {"path": str(gateway_log(folder)), "greedy": True}},
            {"kind": "file", "file": {"path": str(tf.sharegpt_file(folder, n=8)), "max_tokens": 8}}]},
        **extra,
    }
    if policy is not None:
        (folder / "policy.yaml").write_text(yaml.safe_dump(
            {"extends": str(REPO / "configs" / "policy" / "cpu-default.yaml"), **policy}))
        config["policy"] = str(folder / "policy.yaml")
    path = folder / "mine.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def test_the_files_image_counts_are_read_when_the_config_loads(tmp_path: Path) -> None:
    gateway, sharegpt = traffic_parts(load_experiment(user_config(tmp_path)))
    assert gateway.exact
    assert dict(gateway.items) == {k: 5.0 for k in range(1, 7)}
    assert gateway.tags["tenant"] == frozenset({"t0", "t1"})
    assert sharegpt.label == "file-sharegpt"
    assert max(sharegpt.items) == 2
    assert gateway.seconds is not None
    assert gateway.seconds > 1.0


def test_check_refuses_the_issue_47_config_in_one_line(tmp_path: Path) -> None:
    """The CPU default's claim on >= 128 images against files with 1-6 images per request."""
    result = CliRunner().invoke(app, ["check", str(user_config(tmp_path))])
    assert result.exit_code == exit_codes.USAGE
    lines = result.output.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("check refused: policy gate tpot.improvement@128+ cannot be reached: the "
                               "traffic has at most 6 images per request (file-gateway: 1-6; "
                               "file-sharegpt: 0-2); it needs requests with >= 128 images")


def test_run_refuses_it_before_any_server_starts(tmp_path: Path) -> None:
    from abserve.arms.run_paths import RunRefused
    from abserve.runs.orchestrator import run_experiment

    config = user_config(tmp_path)
    with pytest.raises(RunRefused, match=r"tpot.improvement@128\+ cannot be reached"):
        run_experiment(load_experiment(config), config, tmp_path / "out", None)  # type: ignore[arg-type]
    assert not (tmp_path / "out").exists()


def test_a_claim_marked_not_required_runs_and_is_listed_as_not_judged(tmp_path: Path) -> None:
    not_required = {"improvements": [{"metric": "tpot", "min_items": 128, "required": False}]}
    config = load_experiment(user_config(tmp_path, not_required))
    _, rounds, reach = preflight_report(config, None)
    assert rounds is not None  # the CPU default's budget: rounds until decided
    lines = reach.lines()
    assert lines[0].startswith("expected cost: about ")
    assert "tpot.improvement@128+: not judged: the traffic never reaches it (it has at most 6 images" \
        in "\n".join(lines)
    assert any(line.startswith("tpot.stratum[many-images]: not judged") for line in lines)  # a guard


def test_generated_profiles_reach_every_gate_and_say_the_cost(tmp_path: Path) -> None:
    """The CPU default: 53 requests expected (measured: 58-94 to decision, benchmarks/decisive.md)."""
    _, _, reach = preflight_report(load_experiment(REPO / "configs" / "cpu-default.yaml"), None)
    assert reach.refusals() == []
    assert reach.not_judged() == []
    need = reach.expected_requests()
    assert need is not None
    assert 45 <= need <= 95
    assert "s per request from this machine's pace" in reach.lines()[1]
    tight = preflight_report(load_experiment(REPO / "configs" / "cpu-default.yaml"), parse_budget("150s"))[2]
    assert any(line.startswith("warning: the time budget of 150 s is unlikely to fit it")
               for line in tight.lines())


def test_a_request_budget_below_min_samples_is_refused(tmp_path: Path) -> None:
    config = load_experiment(REPO / "configs" / "cpu-default.yaml")
    with pytest.raises(ValueError, match=r"^policy gate tpot.hl cannot be decided: the budget of 26 requests "
                                         r"gives at most 16 pairs of every request, it needs 20"):
        preflight_report(config, parse_budget("26req"))  # 10 warm-up cut by the policy
    with pytest.raises(ValueError, match=r"tpot.improvement@128\+ cannot be decided: .* gives at most "
                                         r"10 pairs of requests with >= 128 images"):
        preflight_report(config, parse_budget("30req"))  # many-items: half of the 20 judged
    preflight_report(config, parse_budget("50req"))


def test_a_generated_profile_out_of_range_is_refused(tmp_path: Path) -> None:
    few = yaml.safe_load((REPO / "configs" / "cpu-default.yaml").read_text())
    few["load"]["profiles"][1]["set"]["images.count"] = [8, 32]
    few["policy"] = str(REPO / "configs" / "policy" / "cpu-default.yaml")
    path = tmp_path / "few.yaml"
    path.write_text(yaml.safe_dump(few))
    with pytest.raises(ValueError, match=r"at most 32 images per request \(multi-image-long-context: 3-8; "
                                         r"many-items: 8-32\)"):
        preflight_report(load_experiment(path), None)


def test_every_shipped_config_passes(tmp_path: Path) -> None:
    """No shipped experiment is refused (configs/cpu-compose.yaml, judged inconclusive by design,
    only warns: docker compose sends its plan)."""
    configs = REPO / "configs"
    shipped = sorted(configs.glob("*.yaml")) + sorted((configs / "selftest").glob("*.yaml"))
    for path in shipped:
        if path.name == "selftest.yaml":
            continue
        preflight_report(load_experiment(path), None)
