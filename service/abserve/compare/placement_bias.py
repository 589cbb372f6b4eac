"""The host's placement bias, measured on an A/A' run: the policy's ``unknown_placement_bias``.

Without controlled placement (no placement tags: a compose run on a GPU host without rotation,
a by-hand router run) a latency ``fail`` must exceed its allowance by
``sequential.unknown_placement_bias`` of its metric (``abserve.compare.gates``): part of any
shift may come from where each arm ran (which GPU, its PCIe and NUMA path, its clocks). An A/A'
run measures that part: two arms of the SAME build, placed as the sign-offs place theirs, so the
paired difference ``other - baseline`` of each latency metric is placement plus noise.

Each ``hl`` latency gate of the policy is judged exactly as a sign-off judges it (the whole
judgment: warm-up cut, winsorized pairs, the anytime-valid interval of the shift at the policy's
confidence; ``abserve.compare.judge``); nothing here computes a new statistic. The bias of a
metric is the larger absolute bound of that interval: the largest shift, in either direction,
that the host's placement can add and that the A/A' run does not rule out at the policy's
confidence. Larger than the point estimate on purpose: with it, a fail has to clear everything
the placement could plausibly have added, not just what one run happened to show. The value to
paste is that bound rounded UP to two significant digits, so rounding never loosens it.

Refused (``BiasRefused``): a run without exactly two arms, one of them the baseline; two arms
that recorded different builds (vLLM version or lookup: an A/B run, not an A/A'); a run whose
arms rotated between placements (its shift is counterbalanced, so the bias cancelled out of it);
a run with no metric that has ``min_samples`` paired requests and a bounded interval. Pure.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from abserve.compare.model import Judgment, MetricLine
from abserve.compare.policy import ArmRoles, Policy
from abserve.model.records import RunInfo
from abserve.model.roles import Role, baselines, resolve_roles

ROLES: dict[str, Role] = {"baseline": "baseline", "candidate": "candidate", "noise_floor": "noise_floor"}


class BiasRefused(ValueError):
    """The run cannot measure a placement bias (the one-line reason)."""


@dataclass(frozen=True)
class BiasRow:
    """One latency metric of the A/A' run: its paired shift, interval and the bias it implies."""

    metric: str
    pairs: int
    estimate: float | None
    low: float | None
    high: float | None
    enough: bool  # at least min_samples pairs and a bounded interval

    @property
    def bias(self) -> float | None:
        """The larger absolute bound of the interval (seconds); None when not measured."""
        if not self.enough or self.low is None or self.high is None:
            return None
        return max(abs(self.low), abs(self.high))


def aa_roles(run: RunInfo, arms_seen: Iterable[str]) -> ArmRoles:
    """The run's baseline and its one other arm, as judging roles (no floor).

    Arms: those the run recorded and those its exchanges carry; roles: the recorded ones, any
    left out filled in by the usual rule (``abserve.model.roles``: the arm named ``a`` is the baseline).
    """
    names = sorted(set(run.arms) | set(arms_seen))
    if len(names) != 2:
        raise BiasRefused(f"run {run.run_id!r} has {len(names)} arms ({', '.join(names) or 'none'}); "
                          "an A/A' run for the placement bias has exactly two: one baseline and one other")
    recorded = {name: ROLES.get(_role(run, name) or "") for name in names}
    found = baselines(resolve_roles(recorded))
    if len(found) != 1:
        raise BiasRefused(f"run {run.run_id!r} has {len(found)} baseline arms among {', '.join(names)}; "
                          "an A/A' run for the placement bias has exactly one")
    other = next(name for name in names if name != found[0])
    return ArmRoles(baseline=found[0], candidate=other, floor=None)


def same_build(run: RunInfo, roles: ArmRoles) -> None:
    """Refuse a pair whose recorded builds differ (vLLM version, lookup): its shift is a change."""
    left, right = run.arms.get(roles.baseline), run.arms.get(roles.candidate)
    if left is None or right is None:
        return  # nothing recorded to compare (a by-hand run)
    differ = [f"{field} {getattr(left, field)} vs {getattr(right, field)}"
              for field in ("vllm_version", "expected_lookup")
              if getattr(left, field) != getattr(right, field)
              and (field != "vllm_version" or None not in (left.vllm_version, right.vllm_version))]
    if differ:
        raise BiasRefused(f"run {run.run_id!r} is not an A/A' run: arms {roles.baseline} and "
                          f"{roles.candidate} differ ({'; '.join(differ)})")


def _role(run: RunInfo, name: str) -> str | None:
    arm = run.arms.get(name)
    return arm.role if arm is not None else None


def judging_policy(policy: Policy, roles: ArmRoles) -> Policy:
    """``policy`` judging the A/A' pair: its baseline against the other arm, no floor."""
    return policy.model_copy(update={"arms": roles})


def _row(line: MetricLine, min_samples: int) -> BiasRow:
    bounded = line.low is not None and line.high is not None
    return BiasRow(metric=line.metric, pairs=line.n, estimate=line.estimate, low=line.low, high=line.high,
                   enough=bounded and line.n >= min_samples)


def bias_rows(judgment: Judgment, policy: Policy) -> list[BiasRow]:
    """The bias of each latency metric the policy gates with ``hl`` (see the module docstring)."""
    lines = [m for m in judgment.metrics if m.kind == "shift" and m.stratum is None
             and m.name == f"{m.metric}.hl"]
    if not lines:
        raise BiasRefused(f"policy {policy.name!r} gates no latency metric with statistic hl")
    rotated = [m.metric for m in lines if "counterbalanced" in m.method]
    if rotated:
        raise BiasRefused(f"run {judgment.run_id!r} rotated its arms between placements, so its shift "
                          f"({', '.join(rotated)}) is counterbalanced and the bias cancelled out of it; "
                          "measure the bias on a run that keeps each arm in its place")
    rows = [_row(m, policy.min_samples) for m in lines]
    if not any(r.enough for r in rows):
        most = max(r.pairs for r in rows)
        raise BiasRefused(f"run {judgment.run_id!r} has too few paired requests to bound a bias: at most "
                          f"{most} after the warm-up, {policy.min_samples} needed (policy min_samples)")
    return rows


def round_up(value: float, digits: int = 2) -> float:
    """``value`` (>= 0) rounded up to ``digits`` significant digits: 0.000712 -> 0.00072."""
    if value <= 0 or not math.isfinite(value):
        return 0.0
    scale = 10.0 ** (digits - 1 - math.floor(math.log10(value)))
    return math.ceil(round(value * scale, 9)) / scale


def _decimal(value: float) -> str:
    """``value`` as a YAML float in plain decimals: ``0.00009``, never ``9e-05`` (a string to
    YAML 1.1 readers such as PyYAML, which want a dot in a float)."""
    text = f"{value:.12f}".rstrip("0")
    return text + "0" if text.endswith(".") else text


def snippet(rows: Sequence[BiasRow]) -> str:
    """The policy keys to paste, in YAML flow style: ``sequential: {unknown_placement_bias: {...}}``."""
    values = [f"{r.metric}: {_decimal(round_up(r.bias))}" for r in rows if r.bias is not None]
    return "sequential: {unknown_placement_bias: {" + ", ".join(values) + "}}"
