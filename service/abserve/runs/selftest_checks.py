"""What ``abserve selftest`` expects of each judgment, and whether it got it. Pure.

A check judges one stored run with one pair of arms and compares the verdict with what a
trustworthy service must say:

- ``pass``: an A/A' pair (same build twice) must pass outright;
- ``measured``: the real change is reported as measured; only an invalid run breaks it;
- ``fail-equality``: a correctness mutant must fail on the equality gate, and the report must
  name the first divergent request and the output position where it diverged;
- ``fail-tail``: a mutant that stalls a share of requests must fail the run on the tail gate
  ``metric`` (``tpot.p99``: a stall after the first token, which the mean shift clips as a spike);
- ``fail-latency``: a slowness mutant must fail on the latency gate, and the injected effect must
  lie inside the reported interval. The injected effect is derived from both servers' own
  telemetry: the extra time per lookup call of the mutant over the baseline, times lookup
  calls per engine step (each output token costs one engine step, and each step calls the
  lookup once per request in the batch). The configured delay times calls per step is shown
  beside it as a lower bound (a delay never ends before its deadline).
  ``amplification`` (default 1.0: strict containment) lets the interval cover a value up to that
  factor above the injected effect instead: on a 2-core machine a pause of 5 ms inside the engine
  step cost 5.9-6.5 ms per output token beside one CPU hog (busy or sleeping; the rest of the step ran
  about 1-1.5 ms slower after it), so the served effect is not the pause alone. ``shortfall``
  (default 0.0) lets it fall that fraction below the injected effect: beside CPU hogs a sleeping
  pause leaves its core to them, and the scheduler then credits the sleeper, so the rest of the
  mutant's step is interrupted less than the baseline's (beside two hogs here: 4.83 ms served for
  5.06 ms injected, interval [4.60, 5.06] ms). An interval wholly outside [(1 - ``shortfall``) x,
  ``amplification`` x] the injected effect always fails; whether strict containment held is
  recorded either way (``CheckResult.contained``).
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from abserve.base.units import ms
from abserve.compare.model import Judgment, MetricLine
from abserve.model.records import LookupTelemetry

_ms = partial(ms, signed=False)  # "1.234 ms": magnitudes, the words say which way

Expect = Literal["pass", "measured", "fail-equality", "fail-latency", "fail-tail"]


class CheckSpec(BaseModel):
    """One judgment the selftest makes: which run, which arms, what it must conclude."""

    model_config = ConfigDict(extra="forbid")
    name: str = Field(pattern=r"^[A-Za-z0-9._-]+$")
    experiment: str
    baseline: str
    candidate: str
    floor: str | None = None
    expect: Expect
    metric: str = "tpot.hl"  # the latency line a fail-latency (fail-tail) check reads
    policy: Path | None = None  # the policy this check judges with (default: the selftest's)
    amplification: float = Field(default=1.0, ge=1.0)  # served effect may reach this x injected
    shortfall: float = Field(default=0.0, ge=0.0, lt=1.0)  # ... or fall this fraction below it
    delay_us: float | None = None  # the mutant's configured delay per lookup call


class InjectedEffect(BaseModel):
    """The latency a slowness mutant injected per engine step, from telemetry."""

    calls_per_step: float  # lookup calls per gather step on the mutant arm
    extra_per_call_s: float  # mutant's mean lookup time minus the baseline's
    expected_s: float  # extra_per_call_s * calls_per_step: the effect on time per token
    configured_s: float | None = None  # configured delay * calls_per_step (lower bound)


class CheckResult(BaseModel):
    """The outcome of one check, as ``selftest.json`` and the table show it."""

    name: str
    experiment: str
    arms: str  # "a vs a2"
    expected: Expect
    verdict: str
    holds: bool
    details: list[str] = Field(default_factory=list)
    report_dir: str | None = None
    injected: InjectedEffect | None = None
    contained: bool | None = None  # fail-latency: injected effect strictly inside the interval


def _per_call(t: LookupTelemetry) -> float | None:
    return t.lookup_seconds / t.lookup_calls if t.lookup_calls else None


def injected_effect(baseline: LookupTelemetry, mutant: LookupTelemetry,
                    delay_us: float | None) -> InjectedEffect | None:
    """The per-token effect the mutant injected; None when the telemetry cannot tell."""
    base, slow = _per_call(baseline), _per_call(mutant)
    if base is None or slow is None or not mutant.gather_calls:
        return None
    per_step = mutant.lookup_calls / mutant.gather_calls
    return InjectedEffect(
        calls_per_step=per_step,
        extra_per_call_s=slow - base,
        expected_s=(slow - base) * per_step,
        configured_s=None if delay_us is None else delay_us * 1e-6 * per_step,
    )


def _line(judgment: Judgment, name: str) -> MetricLine | None:
    return next((m for m in judgment.metrics if m.name == name), None)


def _summary(judgment: Judgment) -> list[str]:
    out = []
    if judgment.equality_verdict is not None:
        out.append(f"equality {judgment.equality_verdict.outcome}: {judgment.equality_verdict.reason}")
    out += [f"{m.name} {m.outcome}: {m.reason}" for m in judgment.metrics]
    out += [f"invalid: {r}" for r in judgment.invalid_reasons]
    return out


def check_pass(judgment: Judgment) -> tuple[bool, list[str]]:
    return judgment.verdict == "pass", _summary(judgment)


def check_measured(judgment: Judgment) -> tuple[bool, list[str]]:
    return judgment.verdict != "invalid", _summary(judgment)


def check_fail_equality(judgment: Judgment) -> tuple[bool, list[str]]:
    """Fail on equality, with the first divergent request and position named."""
    eq = judgment.equality_verdict
    details = _summary(judgment)
    examples = judgment.equality[0].examples if judgment.equality else []
    first = examples[0] if examples else None
    if first is not None:
        where = first.position if first.position is not None else first.drift_position
        kind = "tokens" if first.position is not None else "logprobs only"
        details.insert(0, f"first divergent request {first.request_id} at output position {where} "
                          f"({first.cls}, {kind}; {first.items} items)")
    named = first is not None and (first.position is not None or first.drift_position is not None)
    ok = judgment.verdict == "fail" and eq is not None and eq.outcome == "fail" and named
    return ok, details


def check_fail_tail(judgment: Judgment, spec: CheckSpec) -> tuple[bool, list[str]]:
    """The run fails, and the tail line ``spec.metric`` is among the failing gates."""
    line = _line(judgment, spec.metric)
    details = _summary(judgment)
    if line is None:
        details.insert(0, f"the policy has no {spec.metric} line")
        return False, details
    details.insert(0, f"{spec.metric} {line.outcome}: {line.reason}")
    return judgment.verdict == "fail" and line.outcome == "fail", details


def check_fail_latency(judgment: Judgment, spec: CheckSpec,
                       effect: InjectedEffect | None) -> tuple[bool, list[str], bool | None]:
    """Fail on the latency line, with the injected effect inside its interval (or, with
    ``amplification`` > 1 or ``shortfall`` > 0, the interval meeting
    [(1 - shortfall) x injected, amplification x injected])."""
    line = _line(judgment, spec.metric)
    details = _summary(judgment)
    if line is None or effect is None or line.low is None or line.high is None:
        details.insert(0, f"no {spec.metric} interval or no telemetry to derive the injected effect")
        return False, details, None
    injected = effect.expected_s
    least, most = injected * (1 - spec.shortfall), injected * spec.amplification
    covered = line.high >= least and line.low <= most
    where, note = "inside", ""
    if not covered:
        where = "OUTSIDE"
    elif line.low > injected:
        where, note = "below", (f"; the served effect exceeds it by at least {_ms(line.low - injected)}, "
                                f"within the allowed {spec.amplification:g}x = {_ms(most)}")
    elif line.high < injected:
        where, note = "above", (f"; the served effect falls short of it by at least "
                                f"{_ms(injected - line.high)}, within the allowed {spec.shortfall:.0%} "
                                f"below = {_ms(least)}")
    details.insert(0, (
        f"injected {_ms(injected)} per token ({effect.calls_per_step:.3f} lookup calls per step x "
        f"{_ms(effect.extra_per_call_s)} extra per call; configured delay gives {_ms(effect.configured_s)}): "
        f"{where} the reported {spec.metric} interval [{_ms(line.low)}, {_ms(line.high)}] "
        f"(estimate {_ms(line.estimate)}){note}"
    ))
    return judgment.verdict == "fail" and line.outcome == "fail" and covered, details, where == "inside"


def evaluate(spec: CheckSpec, judgment: Judgment, report_dir: str | None = None) -> CheckResult:
    """Compare one judgment with what its check expects."""
    effect, contained = None, None
    if spec.expect == "fail-latency":
        base, cand = judgment.arms.get(spec.baseline), judgment.arms.get(spec.candidate)
        if base is not None and cand is not None:
            effect = injected_effect(base.telemetry, cand.telemetry, spec.delay_us)
        holds, details, contained = check_fail_latency(judgment, spec, effect)
    elif spec.expect == "fail-equality":
        holds, details = check_fail_equality(judgment)
    elif spec.expect == "fail-tail":
        holds, details = check_fail_tail(judgment, spec)
    elif spec.expect == "pass":
        holds, details = check_pass(judgment)
    else:
        holds, details = check_measured(judgment)
    return CheckResult(
        name=spec.name,
        experiment=spec.experiment,
        arms=f"{spec.baseline} vs {spec.candidate}",
        expected=spec.expect,
        verdict=judgment.verdict,
        holds=holds,
        details=details,
        report_dir=report_dir,
        injected=effect,
        contained=contained,
    )


SELFTEST_SCHEMA_VERSION = 1


class SelftestConfig(BaseModel):
    """The experiments to run and the checks to make on their records."""

    model_config = ConfigDict(extra="forbid")
    policy: Path
    experiments: dict[str, Path] = Field(min_length=1)  # name -> experiment config
    checks: list[CheckSpec] = Field(min_length=1)

    @model_validator(mode="after")
    def _known_experiments(self) -> SelftestConfig:
        unknown = sorted({c.experiment for c in self.checks} - set(self.experiments))
        if unknown:
            raise ValueError(f"checks name experiments that are not configured: {unknown}")
        return self


class ExperimentOutcome(BaseModel):
    """One experiment as it ran: where its records are, or why it did not run."""

    name: str
    config: str
    out_dir: str
    run_id: str | None = None
    exit_code: int | None = None  # of its own report (under the experiment's policy)
    error: str | None = None
    seconds: float = 0.0


class SelftestResult(BaseModel):
    """The content of ``selftest.json``."""

    schema_version: int = SELFTEST_SCHEMA_VERSION
    ok: bool
    exit_code: int
    started_at: float
    ended_at: float
    policy: str
    experiments: list[ExperimentOutcome]
    checks: list[CheckResult]
