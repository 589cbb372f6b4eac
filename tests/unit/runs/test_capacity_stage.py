"""A capacity step's rows from stored exchanges (``runs.capacity_stage.step_record``, issue 59)."""

from __future__ import annotations

import json
from pathlib import Path

from abserve.compare.capacity_search import CapacityConfig
from abserve.model.records import ArmOutcome, Exchange
from abserve.runs.capacity_stage import lateness_p95, step_record

CAP = CapacityConfig.model_validate({"slo": {"ttft_s": 1.0, "e2e_s": 3.0}, "start_rate": 1.0,
                                     "step_s": 20, "warmup_s": 5, "drain_s": 10})


def _arm(name: str, ttft: float | None, e2e: float | None, tokens: int = 8) -> ArmOutcome:
    if e2e is None:  # cut at the step's end: cancelled, never finished
        return ArmOutcome(arm=name, status=None, error_class="cancelled", t_send=0.0)
    return ArmOutcome(arm=name, status=200, t_send=0.0, t_first_token=ttft, t_end=e2e,
                      token_times=[ttft + k * 0.01 for k in range(tokens)] if ttft is not None else [],
                      usage={"completion_tokens": tokens})


Times = tuple[float | None, float | None]


def _ex(k: int, at: float, a: Times, b: Times) -> Exchange:
    return Exchange(run_id="r", request_id=f"q{k}", endpoint="chat/completions", stream=True,
                    fingerprint=f"f{k}", started_at=1000.0 + at, tags={"step": "0"},
                    arms={"a": _arm("a", *a), "b": _arm("b", *b)})


def test_rows_pair_the_arms_and_judge_only_the_window() -> None:
    exchanges = [
        _ex(0, 0.0, (0.1, 0.5), (0.1, 0.5)),      # the origin, in the warm-up: not judged
        _ex(1, 6.0, (0.2, 1.0), (2.0, 2.5)),      # b's TTFT beyond the SLO
        _ex(2, 10.0, (0.2, 1.0), (0.3, 4.0)),     # b's e2e beyond the SLO
        _ex(3, 19.0, (0.2, 0.5), (0.3, 2.0)),     # b finishes after the arrivals ended
        _ex(4, 12.0, (0.2, 1.0), (None, None)),   # b cancelled at the cut
        _ex(5, 21.0, (0.2, 1.0), (0.2, 1.0)),     # after step_s: not judged
    ]
    step = step_record(exchanges, 0, 1.0, ("a", "b"), CAP, 0.004)
    assert step.offered == 4
    assert step.arms["a"].met == [1, 1, 1, 1]
    # in arrival order: requests 1, 2, 4, 3
    assert step.arms["b"].met == [0, 0, 0, 1]
    assert step.arms["b"].finished == [1, 1, 0, 1]
    assert step.arms["b"].in_window == [1, 1, 0, 0]
    assert step.arms["b"].tokens == [8, 8, 0, 8]
    assert step.window_s == 15


def test_lateness_is_the_95th_percentile_of_what_the_load_wrote(tmp_path: Path) -> None:
    path = tmp_path / "timings.jsonl"
    path.write_text("\n".join(json.dumps({"lateness_s": k / 1000}) for k in range(101)) + "\n")
    assert lateness_p95(path) == 0.095
    assert lateness_p95(tmp_path / "none.jsonl") is None
