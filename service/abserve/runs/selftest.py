"""``abserve selftest``: prove on real servers that the verdicts catch what they must.

A comparison service earns trust only by failing wrong builds and passing identical ones.
``configs/selftest.yaml`` names a few experiments (each an ordinary ``abserve run`` config, run
one after another so no more than four servers share the machine; an arm's server that a later
experiment wants again is kept for it, ``abserve.arms.arm_pool``) and the checks to make on
their stored records (``abserve.runs.selftest_checks``): the A/A' pair must pass, the real
change is reported as measured, the correctness mutant must fail on equality naming the first
divergent request and position, the slowness mutant must fail on latency with its injected
effect inside the reported interval, and the mutant that stalls requests after their first token
must fail the CPU default's gates on a tail. Each check judges the same stored records with its
own arm roles (``policy.arms``; a check may name its own policy), writes its own report, and the
whole selftest writes ``selftest.json`` and ``selftest.md`` (a table of expected vs actual
verdicts, rendered by ``abserve.runs.selftest_md``). Exit 0 only if
every expectation holds; 1 if one does not; 3 if an experiment could not run.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import yaml
from rich.console import Console

from abserve.arms.arm_pool import ArmPool, managed
from abserve.base.config_paths import rebase_selftest
from abserve.base.packaged import resolve_config
from abserve.compare import load_policy
from abserve.compare.policy import ArmRoles, Policy
from abserve.runs.selftest_checks import (
    CheckResult,
    CheckSpec,
    ExperimentOutcome,
    SelftestConfig,
    SelftestResult,
    evaluate,
)
from abserve.runs.selftest_md import results_markdown, results_table

EXIT_OK, EXIT_EXPECTATION, EXIT_NOT_RUN = 0, 1, 3


def load_selftest(path: Path) -> SelftestConfig:
    """A selftest file or packaged name; its policy and experiments relative to the file."""
    path = resolve_config(path)
    raw = yaml.safe_load(Path(path).read_text())
    if not isinstance(raw, dict):
        raise ValueError(f"{path}: expected a mapping at the top level")
    return SelftestConfig.model_validate(rebase_selftest(raw, path.parent))


def planned_pool(experiments: dict[str, Path], out: Path) -> ArmPool:
    """A pool that keeps an arm's server for the later experiments that want one like it
    (``abserve.arms.arm_pool``); an experiment that cannot be read is left to ``run_one``."""
    from abserve.arms.run_paths import RunPaths, RunRefused
    from abserve.config import load_experiment
    from abserve.runs.orchestrator import ensure_model, make_servers

    pool = ArmPool()
    for name, path in experiments.items():
        try:
            config = load_experiment(path)
            made = make_servers(config, ensure_model(config), RunPaths(out / "experiments" / name))
        except (RunRefused, ValueError, OSError):
            continue
        pool.expect(managed(config, made).values())
    return pool


def run_one(name: str, config_path: Path, out: Path, console: Console,
            pool: ArmPool | None = None) -> ExperimentOutcome:
    """Run one experiment with ``abserve run`` and find its run id in its store."""
    from abserve.arms.run_paths import RunError
    from abserve.config import load_experiment
    from abserve.runs.orchestrator import run_experiment

    outcome = ExperimentOutcome(name=name, config=str(config_path), out_dir=str(out))
    began = time.monotonic()
    try:
        outcome.exit_code = run_experiment(load_experiment(config_path), config_path, out, console,
                                           pool=pool)
        outcome.run_id = stored_run_id(out)
    except (RunError, ValueError, OSError) as exc:
        outcome.error = f"{type(exc).__name__}: {exc}"
    outcome.seconds = time.monotonic() - began
    return outcome


def stored_run_id(out: Path) -> str | None:
    """The newest run in an experiment's store."""
    from abserve.store.latest import latest_run

    stored = latest_run(out / "abserve.db", exchanges=False)
    return stored.run.run_id if stored else None


def roles_policy(policy: Policy, spec: CheckSpec) -> Policy:
    """The selftest policy with this check's arms in the baseline/candidate/floor roles."""
    arms = ArmRoles(baseline=spec.baseline, candidate=spec.candidate, floor=spec.floor)
    return policy.model_copy(update={"arms": arms})


def judge_check(spec: CheckSpec, experiment: ExperimentOutcome, policy: Policy, out: Path) -> CheckResult:
    """Judge the experiment's stored records for one check, write its report, evaluate it."""
    from abserve.report import write_report
    from abserve.report.judging import judge_with_evidence
    from abserve.store import Store

    def not_run(why: str) -> CheckResult:
        return CheckResult(name=spec.name, experiment=spec.experiment,
                           arms=f"{spec.baseline} vs {spec.candidate}", expected=spec.expect,
                           verdict="not run", holds=False, details=[why])

    if experiment.run_id is None:
        return not_run(f"experiment {experiment.name} did not run: {experiment.error}")
    with Store.open(f"sqlite:///{(Path(experiment.out_dir) / 'abserve.db').resolve()}") as store:
        run = store.get_run(experiment.run_id)
        if run is None:
            return not_run(f"run {experiment.run_id} is not in the store under {experiment.out_dir}")
        judgment, mismatching = judge_with_evidence(store, experiment.run_id, roles_policy(policy, spec))
    report_dir = out / "checks" / spec.name
    write_report(judgment, report_dir, exchanges=mismatching)  # mismatches shown side by side
    if spec.expect == "fail-latency" and spec.delay_us is None:
        delay = configured_delay_us(Path(experiment.config), spec.candidate)
        spec = spec.model_copy(update={"delay_us": delay})
    return evaluate(spec, judgment, str(report_dir))


def configured_delay_us(config_path: Path, arm: str) -> float | None:
    """The slowness mutant's delay per lookup call as the experiment configures it."""
    from abserve.config import load_experiment
    from abserve.vllm_plugin.mutants import DEFAULT_DELAY_US, DELAY_ENV

    chosen = load_experiment(config_path).arms.get(arm)
    if chosen is None or chosen.mutant != "slow":
        return None
    return float(chosen.mutant_env.get(DELAY_ENV, DEFAULT_DELAY_US))


def run_selftest(config_path: Path, out: Path, console: Console, rejudge: bool = False) -> int:
    """Run every experiment, make every check, write the results; return the exit code.

    ``rejudge``: run nothing; judge the records an earlier selftest left in ``out`` again.
    """
    config = load_selftest(config_path)
    policy = load_policy(config.policy)
    out.mkdir(parents=True, exist_ok=True)
    started = time.time()
    if rejudge:
        earlier = SelftestResult.model_validate_json((out / "selftest.json").read_text())
        experiments = {e.name: e.model_copy(update={"out_dir": str(out / "experiments" / e.name)})
                       for e in earlier.experiments}  # where they are now, if OUT was moved
    else:
        pool = planned_pool(config.experiments, out)
        try:
            experiments = {name: run_one(name, path, out / "experiments" / name, console, pool)
                           for name, path in config.experiments.items()}
        finally:
            pool.close()
    checks = [judge_check(spec, experiments[spec.experiment], load_policy(spec.policy) if spec.policy
                          else policy, out) for spec in config.checks]
    not_run = any(e.run_id is None for e in experiments.values())
    ok = all(c.holds for c in checks) and not not_run
    code = EXIT_OK if ok else EXIT_NOT_RUN if not_run else EXIT_EXPECTATION
    result = SelftestResult(ok=ok, exit_code=code, started_at=started, ended_at=time.time(),
                            policy=str(config.policy), experiments=list(experiments.values()),
                            checks=checks)
    write_results(result, out)
    console.print(results_table(result))
    for c in checks:
        for detail in c.details:
            console.print(f"[bold]{c.name}[/]: {detail}", soft_wrap=True, highlight=False)
    console.print(f"results: {out / 'selftest.md'}, {out / 'selftest.json'}; "
                  f"reports: {out / 'checks'}/<check>/")
    console.print(f"selftest: [bold {'green' if ok else 'red'}]{'OK' if ok else 'FAILED'}[/] (exit {code})")
    return code


def write_results(result: SelftestResult, out: Path) -> None:
    """``selftest.json`` (the result as data) and ``selftest.md`` (``abserve.runs.selftest_md``)."""
    (out / "selftest.json").write_text(json.dumps(result.model_dump(mode="json"), indent=2))
    (out / "selftest.md").write_text(results_markdown(result))
