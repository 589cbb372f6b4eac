"""Write a judgment as ``report.html``, ``report.md``, ``report.json`` and ``junit.xml``.

The HTML is one self-contained file (inline CSS and SVG, no script, no network). The JSON is the
``Judgment`` model itself plus a ``summary`` digest (``abserve.report.views.summary``). JUnit
(``report/junit.py``): a ``verdict`` case, red unless the verdict is pass, then one case per
gate: a critical gate that did not pass is a failure, ``invalid`` an error, a reported
(non-critical) gate that did not pass is skipped, each with its reason, so a CI dashboard shows
red or green exactly as the exit code (0 pass, 1 fail, 2 inconclusive, marginal or unstable,
3 invalid) says.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache, partial
from pathlib import Path
from typing import cast

from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape
from markupsafe import Markup

from abserve.base.units import ms
from abserve.compare.model import PERCENTILES, Judgment
from abserve.model.records import Exchange
from abserve.report import capped, effect, evidence, glossary, sentences, svg, views
from abserve.report.capacity import capacity_view
from abserve.report.junit import Case, junit_suite, verdict_case


@dataclass(frozen=True)
class ReportPaths:
    """Where each report file was written, the exit code of the verdict and the judgment."""

    html: Path
    markdown: Path
    json: Path
    junit: Path
    glossary: Path  # glossary.html, the report's terms explained (report/glossary.py)
    verdict: str
    exit_code: int
    judgment: Judgment | None = field(default=None, repr=False, compare=False)


@cache
def _env() -> Environment:
    """The report's template environment, built once a process: each template is compiled on
    its first render and kept (a fresh environment per report recompiled every template)."""
    env = Environment(
        loader=PackageLoader("abserve.report", "templates"),
        autoescape=select_autoescape(enabled_extensions=("html.j2",), default_for_string=False),
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.filters["ms"] = partial(ms, signed=False, unit=False)
    env.filters["pct"] = lambda v: "n/a" if v is None else f"{v:.2%}"
    env.filters["num"] = lambda v: "n/a" if v is None else f"{v:.4g}"
    env.filters["tojson_pretty"] = lambda v: json.dumps(v, indent=1, sort_keys=True, default=str)
    env.filters["cells"] = views.cells
    env.filters["drift"] = views.drift_sentence
    env.filters["first_last"] = views.first_last
    env.filters["slug"] = glossary.slug
    env.filters["term"] = glossary.term_link  # glossary.html#<term>, checked against the glossary
    env.filters["listed"] = capped.first
    env.filters["cut_lists"] = capped.long_lists_cut
    return env


def charts(j: Judgment) -> tuple[dict[str, Markup], dict[str, str]]:
    """Every plot of the HTML report, as inline SVG, and for each plot left out the one line
    saying why (a panel without data is never drawn empty)."""
    out: dict[str, Markup] = {}
    notes: dict[str, str] = {}
    for metric in ("ttft", "tpot", "itl", "e2e"):
        series = {
            name: [(v * 1000, q) for v, q in zip(arm.distributions[metric], PERCENTILES, strict=True)]
            for name, arm in j.arms.items()
            if metric in arm.distributions and any(math.isfinite(v) for v in arm.distributions[metric])
        }
        if series:
            out[f"dist_{metric}"] = svg.lines(series, f"{metric} distribution per arm", f"{metric} (ms)")
        else:
            notes[f"dist_{metric}"] = f"{metric} distribution: no arm has a {metric} value."
    rows = [  # per-item costs are in another unit: their own trajectory chart shows them
        svg.IntervalRow(
            m.name,
            m.estimate * 1000,
            None if m.low is None else m.low * 1000,
            None if m.high is None else m.high * 1000,
            None if m.threshold is None or m.kind != "shift" else m.threshold * 1000,
            m.outcome,
        )
        for m in j.metrics
        if m.estimate is not None and not views.is_per_item(m)
    ]
    if rows:
        out["paired"] = svg.intervals(rows, "paired differences (candidate - baseline)", "ms")
    else:
        notes["paired"] = "Paired differences: no gate has an estimate (too few pairs)."
    if j.equality and j.equality[0].summary.mismatches:
        main = j.equality[0]
        pair = f"{main.left} vs {main.right}"
        for key, data, title in (
            ("by_position", main.by_position, "first difference by output position"),
            ("drift_by_position", main.drift_by_position, "first logprob drift by output position"),
        ):
            if data:
                bins = capped.binned({k: float(v) for k, v in data.items()})
                if len(bins) < len(data):
                    title = f"{title}, {len(data):,} positions in {len(bins)} ranges"
                out[key] = svg.bars(bins, f"{pair}: {title}", "exchanges")
            else:
                notes[key] = f"{pair}: {title}: none of the mismatches is of this kind."
        out["by_items"] = svg.bars(
            {k: (c.mismatches / c.total if c.total else 0.0) for k, c in main.by_items.items()},
            f"{pair}: mismatch rate by items per request",
            "rate",
        )
    tele = {n: a.telemetry for n, a in j.arms.items()}
    steps = {n: t.gather_calls or t.lookup_calls for n, t in tele.items()}
    if any(steps.values()):
        out["items_per_step"] = svg.bars(
            {n: t.items_examined / steps[n] if steps[n] else 0.0 for n, t in tele.items()},
            "lookup: items examined per engine step",
            "items",
        )
        out["lookup_us"] = svg.bars(
            {n: t.lookup_seconds / steps[n] * 1e6 if steps[n] else 0.0 for n, t in tele.items()},
            "lookup: time per engine step",
            "µs",
        )
    else:
        notes["lookup"] = "Lookup telemetry: no arm recorded a lookup call (plugin not loaded or no proof)."
    return out, notes


def _finite(value: object) -> object:
    """The JSON payload with NaN and infinities replaced by null (strict JSON)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


def _finite_dump(value: object) -> object:
    """``_finite`` in place, for a fresh ``model_dump`` no one else holds: a copy of a long
    run's dump (every look of every path) would double its peak (issue 30)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        for k, v in value.items():
            if isinstance(v, (float, dict, list)):
                value[k] = _finite_dump(v)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            if isinstance(v, (float, dict, list)):
                value[i] = _finite_dump(v)
    return value


def junit_xml(j: Judgment) -> str:
    """One test case for the verdict, one for the run's validity, one per gate: critical gates
    and the verdict decide red or green, a reported gate that did not pass is skipped with its
    reason (``report/junit.py``)."""
    cases = [verdict_case(j.verdict, j.reasons),
             Case("validity", "invalid" if j.invalid_reasons else "pass",
                  "; ".join(j.invalid_reasons) or "valid")]
    if (eq := j.equality_verdict) is not None:
        cases.append(Case("equality", eq.outcome, eq.reason, eq.critical))
    cases += [Case(m.name, m.outcome, m.reason, m.critical) for m in j.metrics]
    return junit_suite(f"abserve.{j.run_id}", f"abserve.{j.run_id}", cases)


def write_report(judgment: Judgment, out_dir: str | Path, baseline: Judgment | None = None,
                 exchanges: Mapping[str, Exchange] | None = None) -> ReportPaths:
    """Write the four report files and the glossary into ``out_dir`` (created); ``baseline`` adds
    a side-by-side; ``exchanges`` (request id -> stored exchange, at least ``evidence.wanted``)
    lets the report show each mismatching request's outputs side by side."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    env = _env()
    plots, missing = charts(judgment)
    first = sentences.first_screen(judgment)
    seqlog = views.sequential_log(judgment)
    context = {
        "j": judgment,
        "base": baseline,
        "charts": plots,
        "missing": missing,
        "sentences": first,
        "effect": effect.effect(judgment),
        "mismatches": evidence.mismatches(judgment, exchanges),
        "has_exchanges": exchanges is not None,
        "image_note": evidence.IMAGE_NOTE,
        "story": views.story(judgment),
        "seqlog": seqlog,
        "rounds": capped.changes_kept(seqlog.looks, capped.MAX_ROWS, lambda row: row.gates) if seqlog
        else capped.Capped(),
        "breakdown_rows": capped.breakdown_rows(judgment.breakdowns),
        "max_block_rows": capped.MAX_BLOCK_ROWS,
        "gate_views": views.gate_views(judgment),
        "capacity": capacity_view(judgment.capacity),
    }
    paths = ReportPaths(
        html=out / "report.html",
        markdown=out / "report.md",
        json=out / "report.json",
        junit=out / "junit.xml",
        glossary=out / glossary.FILE,
        verdict=judgment.verdict,
        exit_code=judgment.exit_code,
        judgment=judgment,
    )
    paths.html.write_text(env.get_template("report.html.j2").render(**context), encoding="utf-8")
    paths.markdown.write_text(env.get_template("report.md.j2").render(**context), encoding="utf-8")
    payload = cast(dict[str, object], _finite_dump(judgment.model_dump(mode="json")))
    summary = views.summary(judgment)  # a digest beside the model, not part of it
    summary["sentences"] = [{"text": x.text, "evidence": x.anchor, "tone": x.tone} for x in first]
    payload["summary"] = _finite(summary)
    if baseline is not None:
        payload["baseline_run"] = _finite_dump(baseline.model_dump(mode="json"))
    with paths.json.open("w", encoding="utf-8") as f:  # streamed: no list of every chunk, no whole text
        json.dump(payload, f, indent=1, sort_keys=True, allow_nan=False)
        f.write("\n")
    paths.junit.write_text(junit_xml(judgment), encoding="utf-8")
    write_glossary(out, env)
    return paths


def write_glossary(out_dir: str | Path, env: Environment | None = None) -> Path:
    """Write ``glossary.html`` (the report's terms, from ``docs/glossary.md``) into ``out_dir``."""
    title, body, _ = glossary.rendered()
    path = Path(out_dir) / glossary.FILE
    path.write_text((env or _env()).get_template("glossary.html.j2").render(title=title, body=body),
                    encoding="utf-8")
    return path
