"""``abserve run`` with several candidates: interim and final family judgments, and their report.

An experiment with two or more ``candidate`` arms is judged as a family
(``abserve.compare.family``: each candidate against the baseline, Holm-corrected); with one
candidate nothing here is used and the two-arm path is unchanged. The sign-off writes each
candidate's full report (the usual four files, judged at its Holm level) under
``OUT/vs-<candidate>/`` and, at the top of ``OUT``, the family's ``report.md`` (verdict, the
correction stated, one line per candidate, which arm is best per images-per-request bucket,
every arm's provenance), ``report.json`` and ``junit.xml`` (one test case per candidate).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from abserve.compare.family import FamilyJudgment, judge_family, roles_for
from abserve.report.junit import Case, junit_suite

if TYPE_CHECKING:
    from abserve.compare.policy import Policy
    from abserve.config import ExperimentConfig
    from abserve.records import Exchange, RunInfo

Family = tuple[str, list[str], str | None]  # baseline, candidates, floor


def family_of(config: ExperimentConfig) -> Family | None:
    """Baseline, candidates and floor when the experiment has two or more candidates, else None."""
    candidates = config.arms_with_role("candidate")
    floors = config.arms_with_role("noise_floor")
    if len(candidates) < 2:
        return None
    return config.baseline, candidates, floors[0] if floors else None


def interim_family(run: RunInfo, exchanges: list[Exchange], policy: Policy, family: Family) -> FamilyJudgment:
    """The family judgment of a running run (its status and proofs come later), for the stop rule."""
    running = run.model_copy(update={"status": "completed", "arms": {}})
    return judge_family(running, exchanges, policy, *family)


def write_family_signoff(db: str, run_id: str, policy: Policy, policy_path: Path, family: Family,
                         out: Path) -> FamilyJudgment:
    """Judge the stored run as a family and write its reports (see the module docstring)."""
    from abserve.report.commands import build_report, open_store

    store = open_store(db)
    try:
        run = store.get_run(run_id)
        if run is None:
            raise ValueError(f"no run {run_id!r} in the store")
        judged = judge_family(run, list(store.iter_exchanges(run_id)), policy, *family)
    finally:
        store.close()
    baseline, _, floor = family
    for name, line in judged.candidates.items():
        build_report(db, run_id, out / f"vs-{name}", policy_path,
                     policy=roles_for(policy, baseline, name, floor, line.alpha))
    (out / "report.json").write_text(json.dumps({"run_id": run_id, **judged.model_dump(mode="json")},
                                                indent=1))
    (out / "report.md").write_text(family_markdown(judged, run))
    (out / "junit.xml").write_text(family_junit(judged, run_id))
    return judged


def _ms(value: float | None) -> str:
    return "n/a" if value is None else f"{value * 1000:+.3f}"


def family_markdown(judged: FamilyJudgment, run: RunInfo) -> str:
    """The family report: verdict, correction, candidates, best arm per items bucket, arms."""
    names = list(judged.candidates)
    lines = [f"# abserve sign-off: {run.run_id}", "",
             f"**Verdict: {judged.verdict.upper()}** (exit {judged.exit_code}): the worst of "
             f"{len(names)} candidates judged against baseline `{judged.baseline}`"
             + (f", noise floor `{judged.floor}`" if judged.floor else "") + ".", "",
             f"**Multiplicity:** {judged.correction}.", "",
             "| candidate | verdict | Holm level (alpha) | confidence | settled at step | full report |",
             "|---|---|---:|---:|---:|---|"]
    for name, line in judged.candidates.items():
        step = line.settled_at_step if line.settled_at_step is not None else "not settled"
        lines.append(f"| {name} | {line.verdict} | {line.alpha:.4g} | {line.confidence:.4g} | {step} | "
                     f"[vs-{name}/report.md](vs-{name}/report.md) |")
    lines += ["", "Reasons:", *[f"- {r}" for name in names for r in
                                (f"{name}: {x}" for x in judged.candidates[name].reasons)], ""]
    if judged.best_by_items:
        lines += ["## Which arm is best, by images per request", "",
                  "Shift of each candidate against the baseline in ms (Hodges-Lehmann estimate "
                  "[interval] of the per-request paired difference; lower is faster; the baseline is 0). "
                  "Descriptive per-bucket intervals, not gates.", "",
                  "| metric | images per request | " + " | ".join(names) + " | best |",
                  "|---|---|" + "---:|" * len(names) + "---|"]
        for row in judged.best_by_items:
            cells = []
            for name in names:
                est = row.shifts.get(name)
                cells.append("" if est is None else f"{_ms(est[0])} [{_ms(est[1])}, {_ms(est[2])}]")
            best = f"**{row.best}**" + (" (clear)" if row.clear else " (not clear)")
            lines.append(f"| {row.metric} | {row.bucket} | " + " | ".join(cells) + f" | {best} |")
        lines.append("")
    lines += ["## Arms", "", "| arm | role | kind | vLLM | proof | env (secrets masked) |",
              "|---|---|---|---|---|---|"]
    for name, prov in sorted(run.arms.items()):
        env = ", ".join(f"{k}={v}" for k, v in prov.server_env.items())
        lines.append(f"| {name} | {prov.role or ''} | {prov.kind} | {prov.vllm_version or 'unknown'} | "
                     f"{prov.proof_state} | {env} |")
    return "\n".join(lines) + "\n"


def family_junit(judged: FamilyJudgment, run_id: str) -> str:
    """One JUnit test case per candidate (``report/junit.py``: only a pass is green)."""
    cases = [Case(f"{judged.baseline} vs {name}", line.verdict,
                  f"at alpha {line.alpha:.4g}: {'; '.join(line.reasons)}")
             for name, line in judged.candidates.items()]
    return junit_suite("abserve family", f"abserve.{run_id}", cases)
