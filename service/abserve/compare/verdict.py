"""Outcome rules: one line per gate, then one verdict for the run.

- A latency line compares the interval of ``candidate - baseline`` with the allowed change ``T``
  in the bad direction: ``pass`` when the whole interval is within ``T``, ``fail`` when the whole
  interval is beyond it, ``marginal`` when the estimate is beyond but the interval crosses ``T``,
  ``inconclusive`` when the estimate is within but the interval reaches beyond ``T`` or when
  there are fewer than ``min_samples`` pairs.
- The equality line tests the candidate's mismatch rate against the A/A' floor (one-sided
  Fisher exact), or against ``allowed_excess_rate`` alone when no floor was measured and the
  policy allows that (one-sided exact binomial).
- The run is ``invalid`` before anything else when it cannot be trusted (see ``invalid_reasons``);
  then a failing critical line fails the run, a failing non-critical line makes it marginal, a
  critical inconclusive line makes it inconclusive, and any marginal line makes it marginal.
  A non-critical line whose interval proved a regression is never silent, also when a guard
  held it back as ``unstable`` (a drift, foreign load, a tail not spread over the run): it
  makes the verdict marginal at least (``held``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from abserve.base.units import ms
from abserve.compare.model import EXIT_CODES, EqualityVerdict, Outcome
from abserve.compare.policy import MetricRule, Policy
from abserve.compare.stats.anytime import rate_sequence
from abserve.compare.stats.paired import clopper_pearson, exceeds_rate, excess_over_floor
from abserve.model.records import Exchange, RunInfo


def threshold_for(rule: MetricRule, baseline_value: float | None) -> float:
    """The allowed change: ``max(allowed_relative * |baseline|, allowed_absolute)``."""
    relative = rule.allowed_relative * abs(baseline_value) if baseline_value is not None else 0.0
    return max(relative, rule.allowed_absolute)


def latency_outcome(
    rule: MetricRule, estimate: float, low: float, high: float, threshold: float
) -> tuple[Outcome, str]:
    """Classify one latency interval against its threshold in the rule's bad direction."""
    span = f"{ms(estimate)} [{ms(low)}, {ms(high)}]"
    limit = f"allowed {rule.direction} {ms(threshold, signed=False)}"
    if rule.direction == "either":
        within, beyond = (
            -threshold <= low and high <= threshold,
            low > threshold or high < -threshold,
        )
        est_beyond = abs(estimate) > threshold
    elif rule.direction == "increase":
        within, beyond, est_beyond = high <= threshold, low > threshold, estimate > threshold
    else:
        within, beyond, est_beyond = low >= -threshold, high < -threshold, estimate < -threshold
    if within:
        return "pass", f"{span}: whole interval within the {limit}"
    if beyond:
        return "fail", f"{span}: whole interval beyond the {limit}"
    if est_beyond:
        return "marginal", f"{span}: estimate beyond the {limit}, interval crosses it"
    return "inconclusive", f"{span}: interval reaches beyond the {limit}; more requests needed"


def equality_verdict(k: int, n: int, floor: tuple[int, int] | None, policy: Policy) -> EqualityVerdict:
    """Judge ``k`` mismatches in ``n`` comparable exchanges against the floor ``(k0, n0)``."""
    rule, conf = policy.equality, policy.confidence
    alpha = 1.0 - conf
    cand = clopper_pearson(k, n, conf)
    out = EqualityVerdict(
        floor_measured=floor is not None,
        floor_arm=policy.arms.floor if floor else None,
        candidate_rate=None if n == 0 else cand.estimate,
        candidate_low=cand.low,
        candidate_high=cand.high,
        threshold=rule.allowed_excess_rate,
        critical=rule.critical,
        outcome="inconclusive",
        reason="",
    )
    if n < policy.min_samples:
        out.reason = f"{n} comparable exchanges, fewer than the {policy.min_samples} required"
        return out
    if floor is None:
        if not policy.allow_unmeasured_floor:
            out.reason = "noise floor not measured (no A/A' arm) and the policy requires it"
            return out
        out.p_value = exceeds_rate(k, n, rule.allowed_excess_rate)
        base, against = rule.allowed_excess_rate, "allowed rate (floor not measured)"
    else:
        k0, n0 = floor
        fl = clopper_pearson(k0, n0, conf)
        out.floor_rate, out.floor_low, out.floor_high = fl.estimate, fl.low, fl.high
        out.p_value = excess_over_floor(k, n, k0, n0)
        base = (k0 / n0 if n0 else 0.0) + rule.allowed_excess_rate
        against = f"A/A' floor {k0}/{n0} + allowed {rule.allowed_excess_rate:.4f}"
    rate = k / n
    text = f"{k}/{n} mismatches ({rate:.4f}) vs {against}; one-sided p={out.p_value:.4g}"
    if rate <= base:
        out.outcome, out.reason = "pass", f"{text}: no excess"
    elif out.p_value < alpha:
        out.outcome, out.reason = "fail", f"{text} < {alpha:.3g}: significant excess"
    else:
        out.outcome, out.reason = "marginal", f"{text}: excess observed, not significant"
    return out


def sequential_equality(k: int, n: int, floor: tuple[int, int] | None, policy: Policy,
                        first: str | None = None) -> EqualityVerdict:
    """Equality judged with anytime-valid rate intervals: decided at any look.

    ``fail`` as soon as the excess mismatch rate over the floor (zero without one) is proven
    above ``allowed_excess_rate`` (with an allowed rate of zero one mismatch is proof);
    ``pass`` once every excess above ``allowed_excess_rate + resolution`` is ruled out.
    With a floor each rate gets half of alpha. ``first``: the first mismatching request.
    """
    rule, alpha = policy.equality, 1.0 - policy.confidence
    cand = rate_sequence(k, n, alpha / 2 if floor else alpha)
    out = EqualityVerdict(floor_measured=floor is not None, floor_arm=policy.arms.floor if floor else None,
                          candidate_rate=None if n == 0 else cand.estimate, candidate_low=cand.low,
                          candidate_high=cand.high, threshold=rule.allowed_excess_rate,
                          critical=rule.critical, outcome="inconclusive", reason="")
    excess_low, excess_high, against = cand.low, cand.high, "zero (no A/A' floor)"
    if floor is not None:
        fl = rate_sequence(floor[0], floor[1], alpha / 2)
        out.floor_rate, out.floor_low, out.floor_high = fl.estimate, fl.low, fl.high
        excess_low, excess_high = cand.low - fl.high, cand.high - fl.low
        against = f"the A/A' floor {floor[0]}/{floor[1]}"
    text = (f"{k}/{n} mismatches; excess over {against} in [{max(excess_low, 0):.3f}, "
            f"{excess_high:.3f}] (anytime-valid)")
    if excess_low > rule.allowed_excess_rate:
        named = f"; first mismatching request {first}" if first else ""
        out.outcome, out.reason = "fail", f"{text}: above the allowed {rule.allowed_excess_rate:.3f}{named}"
    elif excess_high <= rule.allowed_excess_rate + rule.resolution:
        out.outcome, out.reason = "pass", (f"{text}: an excess mismatch rate above "
                                           f"{excess_high:.3f} is ruled out")
    else:
        out.reason = (f"{text}: not yet below the resolution {rule.resolution:.3f}; "
                      f"more comparable requests needed")
    return out


def invalid_reasons(
    run: RunInfo, exchanges: list[Exchange], policy: Policy, errors: dict[str, int]
) -> list[str]:
    """Why the run cannot be judged at all (empty when it can).

    ``errors`` counts failed requests per compared arm over ``exchanges``.
    """
    reasons: list[str] = []
    if run.status != "completed":
        reasons.append(f"run status is {run.status!r}, not 'completed'")
    death = run.provenance.arm_death
    if death is not None:  # found by abserve run's watch (arms/watch.py)
        reasons.append(death.reason or f"arm {death.arm!r} died during the run")
    stop = run.provenance.load_stop
    if stop is not None:  # abserve run's load ended before its end (runs/load_plan.py)
        reasons.append(stop.reason or f"the load stopped before its end ({stop.stop_reason})")
    seen = run.provenance.load_seen
    if seen is not None and seen.missing:  # the load's own records (runs/load_seen.py)
        reasons.append(missing_answers(seen.missing, seen.seen))
    load = run.provenance.load
    if load is not None:  # how a load ended, where a run recorded it (stores of earlier compose runs)
        reasons += load_reasons(load, policy.max_error_rate)
    roles = [policy.arms.baseline, policy.arms.candidate]
    if policy.arms.floor and policy.arms.floor in run.arms:
        roles.append(policy.arms.floor)
    for name in roles:
        prov = run.arms.get(name)
        if prov is None:
            reasons.append(f"arm {name!r} is missing from the run")
        elif (prov.expected_lookup is None and prov.proven_lookup is None and not prov.identified
              and policy.require_proof):
            reasons.append(f"arm {name!r} is unproven (it proved no lookup and its server did not say "
                           "what it ran) and the policy requires a proof")
        elif prov.expected_lookup is not None and prov.proven_lookup != prov.expected_lookup:
            proven = prov.proven_lookup or "nothing"
            reasons.append(
                f"arm {name!r} expected lookup {prov.expected_lookup!r} but proved {proven}"
                + (f" ({prov.proof_detail})" if prov.proof_detail else "")
            )
    if not exchanges:
        reasons.append("no exchanges to judge")
        return reasons
    covered = sum(all(r in ex.arms for r in roles) for ex in exchanges)
    coverage = covered / len(exchanges)
    if coverage < policy.min_coverage:
        reasons.append(
            f"coverage gap: {covered}/{len(exchanges)} exchanges ({coverage:.1%}) carry every "
            f"compared arm, below {policy.min_coverage:.1%}"
        )
    for name in roles:
        rate = errors.get(name, 0) / len(exchanges)
        if rate > policy.max_error_rate:
            reasons.append(
                f"arm {name!r} failed {errors.get(name, 0)}/{len(exchanges)} requests "
                f"({rate:.1%}), above {policy.max_error_rate:.1%}"
            )
    return reasons


def missing_answers(missing: int, seen: int) -> str:
    """The reason a run whose clients received answers the store lacks is invalid."""
    return (f"{missing} answer{'s' if missing != 1 else ''} the load received "
            f"{'are' if missing != 1 else 'is'} not in the store ({seen - missing} of {seen} stored)")


LOAD_EXITS = {2: "its setup failed", 3: "its error rate passed the load's limit",
              4: "a Locust worker was lost"}


def load_reasons(load: dict[str, Any], max_error_rate: float) -> list[str]:
    """Why a load that ended early, or saw too many failures at its client, voids the run."""
    reasons: list[str] = []
    profiles = [p for p in load.get("profiles") or [] if isinstance(p, dict)]
    code = load.get("exit_code")
    if code is None:
        reasons.append("the load recorded no end (no load/exit_code): it did not finish")
    elif code != 0:
        where = next((p for p in profiles if p.get("stop_reason") not in (None, "completed")), None)
        detail = f" in profile {where['profile']!r} ({_profile_end(where)})" if where else ""
        reasons.append(f"the load stopped early: exit {code}, "
                       f"{LOAD_EXITS.get(code, 'Locust failed')}{detail}")
    else:  # exit 0, yet a profile ended by something else than its end (its --run-time deadline)
        reasons += [f"the load's profile {p['profile']!r} stopped before its end ({_profile_end(p)})"
                    for p in profiles if p.get("stop_reason") not in (None, "completed")]
    sent = sum(int(p.get("sent") or 0) for p in profiles)
    failed = sum(int(p.get("failures") or 0) for p in profiles)
    if sent and failed / sent > max_error_rate:
        reasons.append(f"the load's client saw {failed}/{sent} requests fail ({failed / sent:.1%}), "
                       f"above {max_error_rate:.1%} (requests the router never answered are no exchange)")
    return reasons


def _profile_end(profile: dict[str, Any]) -> str:
    """``worker_lost, 12 of 40 requests sent``; without counts when no worker left a summary."""
    if not profile.get("planned"):
        return str(profile.get("stop_reason"))
    return f"{profile.get('stop_reason')}, {profile.get('sent')} of {profile.get('planned')} requests sent"


def overall(
    invalid: list[str], lines: Iterable[tuple[str, bool, Outcome, str]], sequential: bool = False,
    held: Iterable[tuple[str, str]] = (),
) -> tuple[Outcome, int, list[str]]:
    """Combine ``(name, critical, outcome, reason)`` lines into the run's verdict and exit code.

    ``sequential``: the critical gates decide; a non-critical line only makes the verdict
    marginal when it proved a fail (its open or marginal state is reported, not gated on).
    ``held``: ``(name, reason)`` of the non-critical lines that proved a regression a guard
    then held back as ``unstable``: each makes the verdict marginal at least, in either mode.
    """
    if invalid:
        return "invalid", EXIT_CODES["invalid"], list(invalid)
    rows = list(lines)
    failed_crit = [r for r in rows if r[2] == "fail" and r[1]]
    failed_other = [r for r in rows if r[2] == "fail" and not r[1]]
    failed_other += [(name, False, "unstable", f"a regression proven, held back as unstable: {reason}")
                     for name, reason in held]
    inconclusive = [r for r in rows if r[2] in ("inconclusive", "unstable") and r[1]]
    marginal = [r for r in rows if r[2] == "marginal" and (r[1] or not sequential)]
    verdict: Outcome
    if failed_crit:
        verdict, chosen = "fail", failed_crit
    elif inconclusive:
        verdict, chosen = "inconclusive", inconclusive
    elif marginal or failed_other:
        verdict, chosen = "marginal", marginal + failed_other
    else:
        verdict, chosen = "pass", []
    reasons = [f"{name}: {outcome} — {reason}" for name, _, outcome, reason in chosen]
    return verdict, EXIT_CODES[verdict], reasons or ["every gate passed"]
