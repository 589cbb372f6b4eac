"""The capacity stage of ``abserve run``: open-loop rate steps on the same arms, judged as it goes.

After the latency load (``abserve.runs.load_plan``) and with the same servers, a second router
(its own SQLite store under ``OUT/capacity/``, run ``<run>-capacity``, so the latency gates never
see a request of this stage) receives Poisson or constant arrivals at one offered rate per step:
every request goes to both arms at once, so both see the same schedule, which never depends on
their answers. Each step sends ``step_s`` seconds of arrivals through headless Locust (enough
users that none waits for a free one), lets ``drain_s`` pass, then stops the load: whatever is
still running is cancelled on both arms by the router, so the next step starts from idle arms.
Arrivals in the first ``warmup_s`` of a step are sent and not judged.

After each step the stored exchanges become a ``StepRecord`` (per arm: SLO met, finished, output
tokens), the load generator's own lateness is read from its timings (a rate it cannot hold ends
the stage, never a made-up knee), ``compare.capacity_gates.judge_capacity`` judges all steps so
far, a line is printed, and ``compare.capacity_search.next_rate`` picks the next rate. The
stage ends when both gates are decided, the search has nothing left to test, or its budget
cannot fit another step; the record goes to the run's provenance (``capacity``), from which the
report judges it again.
"""

from __future__ import annotations

import json
import secrets
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from abserve.arms import arm_servers
from abserve.arms.run_paths import RunPaths
from abserve.arms.server import free_port
from abserve.compare.capacity import ArmStep, CapacityFinding, StepRecord
from abserve.compare.capacity_gates import judge_capacity
from abserve.compare.capacity_search import CapacityConfig, next_rate, steps_to_resolve
from abserve.compare.latency import output_tokens, request_latency
from abserve.compare.model import DECIDED
from abserve.model.records import Exchange
from abserve.runs.router_process import RouterProcess, router_settings

if TYPE_CHECKING:
    from abserve.runs.context import RunContext

STAGE_TAG = "capacity"


def step_record(exchanges: list[Exchange], index: int, rate: float, arms: tuple[str, ...],
                cap: CapacityConfig, lateness_p95_s: float | None) -> StepRecord:
    """One step's rows from its stored exchanges: arrivals in ``[warmup_s, step_s)`` after the
    step's first arrival, in arrival order; an arm's request that did not finish never met."""
    ordered = sorted(exchanges, key=lambda ex: ex.started_at)
    origin = ordered[0].started_at if ordered else 0.0
    judged = [ex for ex in ordered if cap.warmup_s <= ex.started_at - origin < cap.step_s]
    rows = {arm: ArmStep(met=[], finished=[], tokens=[], in_window=[]) for arm in arms}
    for ex in judged:
        for arm in arms:
            met, done, tokens, in_window = arm_row(ex, arm, origin, cap)
            rows[arm].met.append(met)
            rows[arm].finished.append(done)
            rows[arm].tokens.append(tokens)
            rows[arm].in_window.append(in_window)
    return StepRecord(index=index, rate=rate, window_s=cap.step_s - cap.warmup_s,
                      lateness_p95_s=lateness_p95_s, arms=rows)


def arm_row(ex: Exchange, arm: str, origin: float, cap: CapacityConfig) -> tuple[int, int, int, int]:
    """One arm's row for one request: SLO met, finished, output tokens, finished within the
    step's arrival window (the arm's times count from the fan-out, ``started_at``)."""
    outcome = ex.arms.get(arm)
    lat = request_latency(outcome, keep_gaps=False) if outcome is not None else None
    if outcome is None or lat is None or lat.e2e is None or outcome.t_end is None:
        return 0, 0, 0, 0
    in_window = ex.started_at + outcome.t_end - origin <= cap.step_s
    return int(cap.slo.met(lat)), 1, output_tokens(outcome), int(in_window)


def lateness_p95(timings: Path) -> float | None:
    """The 95th percentile of how late the load generator sent against its plan (None: none read)."""
    if not timings.is_file():
        return None
    late = [rec["lateness_s"] for rec in map(json.loads, timings.read_text().splitlines())
            if rec.get("lateness_s") is not None]
    return float(np.quantile(late, 0.95)) if late else None


def progress_line(finding: CapacityFinding, step: StepRecord) -> str:
    """One line per step: the rate, each arm's attainment and goodput, the knees so far."""
    stats = next(s for s in finding.steps if s.rate == step.rate)
    arms = "; ".join(f"{a} {st.met}/{st.offered} met ({st.attainment:.0%}, {st.goodput:.2f}/s, "
                     f"{st.tokens_per_s:.0f} tok/s{'' if st.holds else ', broke'})"
                     for a, st in stats.arms.items())
    knees = ", ".join(f"{k.arm} [{k.held_to or 0:.3g}, {k.broke_at or float('inf'):.3g})"
                      for k in finding.knees.values())
    late = f", lateness p95 {step.lateness_p95_s * 1000:.0f} ms" if step.lateness_p95_s is not None else ""
    return f"capacity step {step.index}: {step.rate:.3g}/s offered{late}: {arms}; knees {knees}"


class CapacityRun:
    """The stage's state: the steps so far and the record the provenance keeps."""

    def __init__(self, ctx: RunContext, cap: CapacityConfig) -> None:
        self.ctx, self.cap = ctx, cap
        config = ctx.config
        self.baseline = config.baseline
        others = [n for n in config.arms if n != self.baseline]
        self.candidate = (config.arms_with_role("candidate") or others)[0]
        self.steps: list[StepRecord] = []
        self.stop_reason = ""
        self.paths = RunPaths(ctx.paths.out / "capacity")
        self.run_id = f"{ctx.run_id}-capacity"

    def record(self) -> dict[str, Any]:
        return {"rules": self.cap.rules().model_dump(mode="json"), "baseline": self.baseline,
                "candidate": self.candidate, "looks": self.cap.max_steps, "seed": self.cap.seed,
                "arrivals": self.cap.arrivals, "profile": self._item().profile,
                "set": {**self._item().set, **self.cap.set},
                "step_s": self.cap.step_s, "warmup_s": self.cap.warmup_s, "drain_s": self.cap.drain_s,
                "steps": [s.model_dump(mode="json") for s in self.steps], "stop_reason": self.stop_reason}

    def _item(self) -> Any:
        items = self.ctx.config.load.profiles
        return next((i for i in items if i.profile == self.cap.profile), items[0])

    def run(self) -> dict[str, Any]:
        """Every step until the stage is decided or spent; the provenance record."""
        ctx, cap = self.ctx, self.cap
        self.paths.log("x").parent.mkdir(parents=True, exist_ok=True)
        settings = router_settings(ctx.config, ctx.servers, self.paths, self.run_id, free_port())
        # every user of the fastest step may wait for its answer at once: none refused for that
        settings["max_concurrency"] = max(int(str(settings.get("max_concurrency", 256))),
                                          cap.users_for(cap.max_rate))
        router = RouterProcess(settings, self.paths, secrets.token_urlsafe(24),
                               arm_servers.router_arms(ctx.config, ctx.servers)[1])
        began = time.monotonic()
        ctx.console.print(cap.expected_cost(), markup=False, highlight=False)
        router.start()
        try:
            self._search(router, began)
        finally:
            router.stop()
        ctx.console.print(f"capacity: {self.stop_reason}", markup=False, highlight=False)
        return self.record()

    def _search(self, router: RouterProcess, began: float) -> None:
        cap = self.cap
        while True:
            rate, why = next_rate(self._tested(), cap)
            if rate is None:
                self.stop_reason = why
                return
            if len(self.steps) >= cap.max_steps:
                self.stop_reason = f"max_steps ({cap.max_steps}) reached; {self._needs()}"
                return
            if time.monotonic() - began + cap.step_cost_s > cap.budget_s:
                self.stop_reason = f"budget ({cap.budget_s:.0f} s) cannot fit another step; {self._needs()}"
                return
            step = self._step(router, len(self.steps), rate)
            if step.lateness_p95_s is not None and step.lateness_p95_s > cap.max_lateness_s:
                self.stop_reason = (f"the load generator could not hold {rate:.3g}/s on this host (p95 "
                                    f"lateness {step.lateness_p95_s:.2f} s > {cap.max_lateness_s:.2f} s); "
                                    "that step is left out")
                return
            self.steps.append(step)
            finding = judge_capacity(self.record())
            self.ctx.console.print(progress_line(finding, step), markup=False, highlight=False)
            if all(g.outcome in DECIDED for g in finding.gates):
                self.stop_reason = "every capacity gate decided"
                return

    def _tested(self) -> dict[str, dict[float, bool]]:
        finding = judge_capacity(self.record()) if self.steps else None
        tested: dict[str, dict[float, bool]] = {self.baseline: {}, self.candidate: {}}
        for step in finding.steps if finding else []:
            for arm in tested:
                tested[arm][step.rate] = step.arms[arm].holds
        return tested

    def _needs(self) -> str:
        finding = judge_capacity(self.record())
        brackets = {k.arm: (k.held_to, k.broke_at) for k in finding.knees.values()}
        more = steps_to_resolve(brackets, self.cap)
        return (f"about {more} more steps ({more * self.cap.step_cost_s:.0f} s) would bracket every knee "
                f"within {self.cap.resolution:.0%}" if more else "the knees are bracketed; more requests "
                "per step (a longer step_s) would narrow the intervals")

    def _step(self, router: RouterProcess, index: int, rate: float) -> StepRecord:
        from abserve.store import Store
        from abserve.traffic.runner import LoadSpec, run_load

        ctx, cap, item = self.ctx, self.cap, self._item()
        out_dir = self.paths.out / f"step-{index}"
        run_load(LoadSpec(
            item.profile, router.url, duration=cap.step_s, users=cap.users_for(rate),
            seed=cap.seed + 7919 * (index + 1), run_id=self.run_id, out_dir=out_dir,
            model=ctx.config.model.served_name,
            tokenize_url=arm_servers.tokenize_url(ctx.config, ctx.servers),
            overrides=[f"{key}={json.dumps(value)}" for key, value in {**item.set, **cap.set}.items()],
            max_error_rate=1.0, tags={"stage": STAGE_TAG, "step": str(index)},
            shape=cap.arrivals, rate=rate, api_key=router.api_key,
            timeout_s=cap.step_s + cap.drain_s, deadline_s=cap.step_s + cap.drain_s))
        with Store.open(self.paths.database_url) as store:
            exchanges = _settled(store, self.run_id, index)
        time.sleep(cap.pause_s)
        return step_record(exchanges, index, rate, (self.baseline, self.candidate), cap,
                           lateness_p95(out_dir / "timings.jsonl"))


def _settled(store: Any, run_id: str, index: int, quiet_s: float = 1.5,
             limit_s: float = 30.0) -> list[Exchange]:
    """The step's exchanges once the router stopped adding any (cancelled ones included)."""
    deadline, last, since = time.monotonic() + limit_s, -1, time.monotonic()
    while time.monotonic() < deadline:
        count = store.count_exchanges(run_id)
        if count != last:
            last, since = count, time.monotonic()
        elif time.monotonic() - since >= quiet_s:
            break
        time.sleep(0.3)
    return [ex for ex in store.iter_exchanges(run_id) if ex.tags.get("step") == str(index)]


def store_capacity(database_url: str, run_id: str, record: dict[str, Any]) -> None:
    """Keep the stage's record with the run (``RunInfo.provenance.capacity``)."""
    from abserve.store import Store

    with Store.open(database_url) as store:
        run = store.get_run(run_id)
        if run is not None:
            run.provenance.capacity = record
            store.update_run(run)

