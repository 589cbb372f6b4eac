"""The first screen names the cause a gate recorded for holding it open (neighbours, drift,
placement, warm-up), one test per cause, on synthetic runs judged for real: a run made unstable
by neighbours on the arms' core no longer reads "the difference drifted over the run"."""

from __future__ import annotations

from tests.support.records_factory import run_info
from tests.unit.compare.test_sequential_judge import judged, policy, run

from abserve.compare import judge
from abserve.compare.model import Judgment, MetricLine
from abserve.model.provenance import BlockNeighbours, BlockRecord, CoreLoad, RunProvenance
from abserve.report.sentences import first_screen, held_by


def held(j: Judgment, outcome: str, cause: str) -> str:
    """The first-screen sentence of the tpot gate, once its outcome and recorded cause are checked."""
    line = next(m for m in j.metrics if m.name == "tpot.hl")
    assert line.outcome == outcome, line.reason
    assert line.cause is not None
    assert line.cause.kind == cause
    return next(s.text for s in first_screen(j) if "per output token" in s.text and "slower" in s.text)


def test_drift() -> None:
    j = judged(run(128, drift_at=64, seed=5, shift=-0.001))
    text = held(j, "unstable", "drift")
    assert text.startswith("Not decided whether bisect (b) is slower per output token: the difference "
                           "drifted by +"), text
    assert " over the run; " in text
    assert "warming" not in text
    assert "cores" not in text


def test_neighbours_not_drift() -> None:
    """The issue-47 run: neighbours on the arms' core, and a drift they caused."""
    share = CoreLoad(busy=0.9, arms=0.37, foreign=0.53, foreign_threads=3, top=[("python3", 0.4)])
    blocks = [BlockRecord(index=i, neighbours=BlockNeighbours(seconds=10.0, cores={"0": share}))
              for i in range(4)]
    info = run_info({"a": run_info().arms["a"], "b": run_info().arms["b"]})
    info.provenance = RunProvenance(blocks=blocks)
    for exchanges in (run(128, drift_at=64, seed=5, shift=-0.001), run(96, seed=1)):
        j = judge(info, exchanges, policy())
        text = held(j, "unstable", "neighbours")
        assert text.startswith("Not decided whether bisect (b) is slower per output token: other "
                               "processes used the arms' cores (core 0: 53% of its time went to 3 "
                               "threads outside the arms (python3 40%) in block 0, above the policy's "
                               "neighbours.max_foreign_share of 50%); "), text
        assert "drifted" not in text


def test_placement() -> None:
    p = policy(sequential={"look_every": 8, "warmup": "fixed", "unknown_placement_bias": {"tpot": 0.002}})
    j = judged(run(96, shift=0.0012, placement=None), p)
    text = held(j, "inconclusive", "placement")
    assert ("is slower per output token: the placement bias of 2.000 ms (a placement abserve did "
            "not control") in text, text
    assert "drifted" not in text


def test_warmup() -> None:
    """A cold candidate the fixed warm-up did not cut: the drift is the arms warming up."""
    p = policy(warmup_requests=4, sequential={"look_every": 8, "warmup": "fixed", "clip": 0.0})
    j = judged(run(120, cold=40, seed=3), p)
    text = held(j, "unstable", "warmup")
    assert text.startswith("Not decided whether bisect (b) is slower per output token: the arms were "
                           "still warming up (arm b's "), text
    assert "was still settling until exchange 40 of the 116 judged); " in text


def test_a_judgment_without_causes_says_no_cause() -> None:
    line = MetricLine(name="tpot.hl", metric="tpot", statistic="hl", direction="increase", critical=True,
                      n=40, confidence=0.95, outcome="unstable", reason="r")
    assert held_by(line) == "the measurement was not stable enough to decide"
