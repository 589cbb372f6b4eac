"""A gate's line: the one builder of a ``MetricLine`` that both judgment paths start from.

Every line of the fixed-sample judgment (``abserve.compare.judge_fixed``) and of the sequential
one (``abserve.compare.gates``, ``quantile_cs``, and through ``gates.shift_line`` the strata) is
made by ``gate_line``, named for its rule and not yet judged (``inconclusive``, no interval),
then filled in by the method that measured it; ``finite`` is how a line shows an interval's
bound. Pure.
"""

from __future__ import annotations

import math

from abserve.compare.model import MetricLine
from abserve.compare.policy import ImprovementRule, MetricRule, PerItemRule, Policy

GateRule = MetricRule | ImprovementRule | PerItemRule


def finite(x: float) -> float | None:
    """An interval's bound as a line shows it: None where it is unbounded (or not a number)."""
    return x if math.isfinite(x) else None


def gate_line(rule: GateRule, n: int, policy: Policy, *, statistic: str | None = None,
              reason: str = "") -> MetricLine:
    """The line of ``rule``'s gate over ``n`` pairs, not yet judged (``inconclusive``, ``reason``).

    ``statistic``: what the line gates (default: the rule's own; ``mean`` for an improvement or
    a per-item rule, whose bad direction is an increase until the caller says otherwise).
    """
    own, bad = (rule.statistic, rule.direction) if isinstance(rule, MetricRule) else ("mean", "increase")
    return MetricLine(name=rule.name, metric=rule.metric, statistic=statistic or own, direction=bad,
                      critical=rule.critical, n=n, confidence=policy.confidence, outcome="inconclusive",
                      reason=reason)


NOT_REACHED = "not judged: the traffic never reaches it"


def guarded(line: MetricLine, critical: bool, required: bool, reached: bool) -> MetricLine:
    """A critical gate the policy does not require (``required: false``) is a guard: critical
    only once it fails, so an open one never holds a sequential run (``gates.stop_now``); one
    that no request reached (``reached`` false) says it was not judged, and why."""
    if not reached and not (critical and required):
        line.reason = f"{NOT_REACHED} ({line.reason})" if line.reason else NOT_REACHED
    if critical and not required:
        line.guard = True
        line.critical = line.outcome == "fail"
    return line
