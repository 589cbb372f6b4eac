"""The family sign-off's own files: ``report.md`` and ``junit.xml`` of a run with several candidates.

``abserve.runs.family`` judges the family and writes these at the top of ``OUT`` beside each
candidate's full report under ``OUT/vs-<candidate>/``. The Markdown states the verdict, the
multiplicity correction, one line per candidate, which arm is best per images-per-request
bucket and every arm's provenance; the JUnit has a verdict case and one case per candidate
(the one JUnit writer, ``abserve.report.junit``). Pure: models in, text out.
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING

from abserve.base.units import ms
from abserve.report.junit import Case, junit_suite, verdict_case

if TYPE_CHECKING:
    from abserve.compare.family import FamilyJudgment
    from abserve.model.records import RunInfo

_ms = partial(ms, unit=False)  # the table's header says "in ms"


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
    """The family's ``verdict`` case, then one per candidate, each critical (``report/junit.py``:
    only a pass is green; each candidate's own gates are in its ``vs-<candidate>/junit.xml``)."""
    cases = [verdict_case(judged.verdict, judged.reasons)]
    cases += [Case(f"{judged.baseline} vs {name}", line.verdict,
                   f"at alpha {line.alpha:.4g}: {'; '.join(line.reasons)}")
              for name, line in judged.candidates.items()]
    return junit_suite("abserve family", f"abserve.{run_id}", cases)
