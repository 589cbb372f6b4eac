"""The first screen in words: 3-5 plain sentences generated from the judgment.

A release manager reads the verdict and these sentences and nothing else: whether the outputs
match (and how sensitive that check was), whether the candidate is slower on each critical
latency gate (the shift against its allowance, or what held it open: neighbours on the arms' cores,
drift, placement, warm-up, as the gate recorded), what one more image per request costs or saves,
and why the run stopped. Each sentence names the section below that holds its evidence
(``anchor``: an element id of report.html; ``heading``: the report.md heading).

Pure: everything comes from the ``Judgment``; the golden tests pin the exact wording.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

from abserve.base.units import ms, us
from abserve.compare.model import Judgment, MetricLine
from abserve.report.effect import failing_strata
from abserve.report.unpaired import equality_note, unpaired_statement
from abserve.report.views import stop_sentence

WHAT = {"tpot": "per output token", "ttft": "to the first token", "itl": "between tokens",
        "e2e": "end to end"}
TREND_WHAT = {"tpot": "per output token", "ttft": "of time to the first token"}
NODIFF_WHAT = {"tpot": "per output token", "ttft": "in time to the first token"}


@dataclass(frozen=True)
class Sentence:
    """One sentence of the first screen and where its evidence is."""

    text: str
    anchor: str  # id of the HTML section holding the evidence
    link: str  # the link's words ("output equality")
    heading: str  # the report.md heading holding the evidence
    tone: str  # pass | fail | open (colours the sentence's marker)


def arm_label(j: Judgment, role: str) -> str:
    """``bisect (b)`` for the arm with ``role``: its proven (else expected) lookup and name."""
    name = next((n for n, a in j.arms.items() if a.role == role), None)
    if name is None:
        arms = j.policy.get("arms")
        name = str(arms.get(role)) if isinstance(arms, dict) and arms.get(role) else role
        return f"arm {name}"
    arm = j.arms[name]
    lookup = arm.proven_lookup or arm.expected_lookup
    return f"{lookup} ({name})" if lookup else f"arm {name}"


def _cap(text: str) -> str:
    return text[:1].upper() + text[1:]


_ms = partial(ms, unit=False)  # an interval's bounds: the unit is written once, after the estimate


def _us(v: float) -> str:
    """A magnitude in µs, no sign: the words around it say saves or costs."""
    return us(abs(v), signed=False, unit=False)


def _rate(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.1%}"


def equality_sentence(j: Judgment) -> Sentence:
    base, cand = arm_label(j, "baseline"), arm_label(j, "candidate")
    eq, lines = j.equality_verdict, j.equality
    link = ("#output-equality", "output equality", "Output equality")
    if (note := equality_note(j)) is not None:
        return Sentence(note, *link, "open")
    if eq is None or not lines or lines[0].comparable == 0:
        return Sentence(f"No output could be compared between {base} and {cand}, so equality is "
                        "not shown.", *link, "open")
    main = lines[0]
    n, k = main.comparable, main.summary.mismatches
    counts = main.summary.counts
    tol = eq.drift_tolerance
    how = ("bitwise, logprobs included" if tol == 0 else f"tokens exactly, logprobs to within {tol:g}")
    if j.unpaired is not None:  # saved runs: matched by prompt, compared as the tools saved them
        how = f"matched by prompt, compared by {j.unpaired.equality_compared or 'output'}"
    if k == 0:
        same = counts.get("identical", 0)
        others = n - same
        extra = f" (the other {others} differ only in ways the policy allows)" if others else ""
        bound = ("" if eq.candidate_high is None
                 else f"; a mismatch rate above {_rate(eq.candidate_high)} is ruled out")
        if eq.outcome != "pass":
            rule = j.policy.get("equality")
            res = rule.get("resolution") if isinstance(rule, dict) else None
            excess = rule.get("allowed_excess_rate", 0.0) if isinstance(rule, dict) else 0.0
            bound += (f", not yet below the {_rate(float(excess) + float(res))} the policy needs"
                      if j.sequential and isinstance(res, int | float) else f" (equality {eq.outcome})")
        text = f"Outputs identical on {same} of {n} requests ({how}){extra}{bound}."
        return Sentence(text, "#output-equality", "output equality", "Output equality",
                        "pass" if eq.outcome == "pass" else "open")
    kinds = ", ".join(f"{counts[c]} {c}" for c in ("divergent", "close", "drift") if counts.get(c))
    first = main.examples[0] if main.examples else None
    where = ""
    if first is not None:
        pos = first.position if first.position is not None else first.drift_position
        at = "" if pos is None else f" at output position {pos}"
        where = f"; the first is request {first.request_id}{at}"
    verdict = {"fail": "more than the policy allows", "pass": "within what the policy allows",
               "marginal": "more than the policy allows, though not significantly"}.get(
        eq.outcome, "not yet decided against the policy's allowance")
    floor = "" if eq.floor_rate is None else f"; A/A' floor {_rate(eq.floor_rate)}"
    text = f"Outputs differ on {k} of {n} requests ({kinds}{floor}), {verdict}{where}."
    tone = {"fail": "fail", "pass": "pass"}.get(eq.outcome, "open")
    return Sentence(text, "#mismatches", "the mismatching outputs side by side", "Output equality", tone)


HELD_BY = {  # the cause a gate recorded (abserve.compare.causes), said first
    "neighbours": "other processes used the arms' cores ({})",
    "drift": "{}",
    "placement": "{}",
    "warmup": "the arms were still warming up ({})",
}


def held_by(m: MetricLine) -> str:
    """Why ``m`` is held open, in the words of the cause its gate recorded."""
    if m.cause is None:  # a judgment made before gates recorded their causes
        return "the measurement was not stable enough to decide"
    return HELD_BY[m.cause.kind].format(m.cause.detail)


def latency_sentence(j: Judgment, m: MetricLine) -> Sentence:
    cand = arm_label(j, "candidate")
    what = WHAT.get(m.metric, f"on {m.metric}")
    span = f"{ms(m.estimate)} [{_ms(m.low)}, {_ms(m.high)}]"
    if m.low is None and m.high is None:
        span = f"{ms(m.estimate)}, not yet bounded"
    allowed = ms(m.threshold)
    if m.outcome == "pass":
        text = f"{_cap(cand)} is not slower {what}: {span}, allowed {allowed}."
    elif m.outcome == "fail":
        text = f"{_cap(cand)} is slower {what}: {span}, beyond the allowed {allowed}."
    elif m.outcome == "marginal":
        text = f"{_cap(cand)} may be slower {what}: {span}, allowed {allowed}, not proven either way."
    elif m.cause is not None or m.outcome == "unstable":
        text = f"Not decided whether {cand} is slower {what}: {held_by(m)}; {span}, allowed {allowed}."
    else:
        text = (f"Not yet decided whether {cand} is slower {what}: {span} still spans the "
                f"allowed {allowed}.")
    charted = [lk for lk in m.trajectory if None not in (lk.estimate, lk.low, lk.high)]
    anchor = f"#traj-{m.name}" if j.sequential and len(charted) >= 2 else "#gates"  # as views.gate_view
    tone = {"pass": "pass", "fail": "fail"}.get(m.outcome, "open")
    return Sentence(text, anchor, f"the {m.metric.upper()} gate", "Gates", tone)


def _per_image_phrase(slope: float, low: float, high: float, metric: str, cand: str) -> str:
    what = TREND_WHAT[metric]
    if high < 0:
        return f"{cand} saves {_us(slope)} µs {what} [{_us(high)}, {_us(low)}]"
    if low > 0:
        return f"{cand} costs {_us(slope)} µs more {what} [{_us(low)}, {_us(high)}]"
    return (f"no difference {NODIFF_WHAT[metric]} is shown ({us(slope)} "
            f"[{us(low, unit=False)}, {us(high, unit=False)}])")


def per_image_sentence(j: Judgment) -> Sentence | None:
    """What one more image per request does to the difference, from the per-item gate or the
    trend, with the improvement claim's outcome when the policy makes one."""
    cand = arm_label(j, "candidate")
    phrases: list[str] = []
    gate = next((m for m in j.metrics if m.kind == "per_item" and m.metric == "tpot"), None)
    for metric in ("tpot", "ttft"):
        line = gate if metric == "tpot" and gate is not None else None
        if line is not None and line.estimate is not None and line.low is not None and line.high is not None:
            phrases.append(_per_image_phrase(line.estimate, line.low, line.high, metric, cand))
            continue
        trend = next((t for t in j.trends if t.metric == metric), None)
        if trend is not None:
            phrases.append(_per_image_phrase(trend.slope, trend.low, trend.high, metric, cand))
    claims = [m for m in j.metrics if m.kind == "improvement"]
    if not phrases and not claims:
        return None
    text = "Per image, " + (" and ".join(phrases) if phrases else "no effect could be fitted")
    if phrases and any(row.dimension == "turn" for row in j.turns):
        text += (" (a later turn of a conversation carries more images and more of its prefix "
                 "cached, so these slopes also carry what differs between turns: see the turns)")
    for m in claims:
        where = "overall" if not m.stratum else "on requests with " + m.stratum.replace(
            ">=", "≥").replace("items", "images")
        span = (f"{ms(m.estimate)} [{_ms(m.low)}, {_ms(m.high)}]" if m.estimate is not None
                else "no estimate yet")
        state = {"pass": f"it is proven faster {WHAT.get(m.metric, m.metric)}",
                 "fail": f"it is proven not faster {WHAT.get(m.metric, m.metric)}"}.get(
            m.outcome, f"its being faster {WHAT.get(m.metric, m.metric)} is not yet proven")
        text += f"; {where} {state} ({span})"
    tone = "pass"
    if gate is not None or claims:
        outcomes = {m.outcome for m in claims} | ({gate.outcome} if gate else set())
        tone = "fail" if "fail" in outcomes else "pass" if outcomes == {"pass"} else "open"
    return Sentence(text + ".", "#effect-curve", "the effect of images per request",
                    "Effect of images per request", tone)


def hidden_sentences(j: Judgment) -> list[Sentence]:
    """The failing stratum and tail gates (issue 32): what the overall shift does not show, or
    (a metric whose overall shift failed too) shows as well."""
    failing = failing_strata(j)
    if not failing:
        return []
    overall = {m.metric for m in j.metrics if m.kind == "shift" and m.stratum is None and m.outcome == "fail"}
    if not any(f["metric"] in overall for f in failing):
        lead, too = "Slower where the overall shift does not show it: ", ""
    else:
        lead, too = "Slower on part of the traffic or in its tail: ", " (the overall shift shows it too)"
    text = lead + "; ".join(str(f["text"]) + (too if f["metric"] in overall else "") for f in failing)
    return [Sentence(text + ".", "#effect-strata", "the strata and tails", "Effect of images per request",
                     "fail")]


def prefix_cache_sentences(j: Judgment) -> list[Sentence]:
    """The arms' prefix-cache hit rates when they differ beyond the policy's threshold (issue 51):
    a finding of its own, never a verdict (``abserve.compare.prefix_cache``)."""
    finding = j.prefix_cache
    if finding is None or not finding.flagged:
        return []
    return [Sentence(finding.text, "#conversations", "the prefix cache and latency by turn",
                     "Conversations and the prefix cache", "open")]


def invalid_sentences(j: Judgment) -> list[Sentence]:
    reasons = "; ".join(j.invalid_reasons)
    return [
        Sentence(f"The run is invalid, so no gate decides anything: {reasons}.", "#invalid",
                 "why the run is invalid", "Why the run is invalid", "fail"),
        Sentence(f"The {j.exchanges_judged} judged exchanges are shown below for diagnosis only.",
                 "#gates", "the gates", "Gates", "open"),
    ]


def accepted_sentences(j: Judgment) -> list[Sentence]:
    """Which accepted release the baseline is, when its arm came ``from: accepted`` (``abserve.ledger``)."""
    accepted = j.provenance.accepted_baseline
    if accepted is None:
        return []
    text = (f"The baseline is accepted release {accepted.get('name')}: the build of arm "
            f"{accepted.get('arm')} of run {accepted.get('run_id')}.")
    return [Sentence(text, "#arms-section", "the arms", "Arms", "open")]


def first_screen(j: Judgment) -> list[Sentence]:
    """The 3-5 sentences under the verdict, in reading order, the stop rule last (the accepted
    release a baseline came from first, when it did)."""
    stop, decided = stop_sentence(j)
    stop_s = Sentence(stop, "#run-facts", "how the run stopped", "How the run stopped",
                      "pass" if decided and not j.invalid_reasons else "open")
    if j.invalid_reasons:
        return [*accepted_sentences(j), *invalid_sentences(j), stop_s]
    unpaired = unpaired_statement(j)
    out = [*accepted_sentences(j)]
    if unpaired is not None:  # abserve compare: saved runs, weaker than a paired run
        out.append(Sentence(unpaired, "#run-facts", "how the runs were compared", "How the run stopped",
                            "open"))
    out.append(equality_sentence(j))
    gates = [m for m in j.metrics if m.critical and m.kind == "shift"]
    gates.sort(key=lambda m: m.outcome == "pass")  # what is not passing is said first
    out += [latency_sentence(j, m) for m in gates[:2]]
    if len(gates) > 2:  # the first screen keeps five sentences: the rest are counted
        rest = ", ".join(f"{m.name} {m.outcome}" for m in gates[2:])
        last = out[-1]
        out[-1] = Sentence(f"{last.text[:-1]} (other critical latency gates: {rest}).", "#gates",
                           "the gates", "Gates", last.tone)
    per_image = per_image_sentence(j)
    if per_image is not None:
        out.append(per_image)
    out += hidden_sentences(j)
    out += prefix_cache_sentences(j)
    if j.capacity and j.capacity.get("sentence"):  # the capacity stage (report/capacity.py)
        gate = j.capacity["gates"][0]["outcome"]
        out.append(Sentence(j.capacity["sentence"], "#capacity", "capacity", "Capacity",
                            {"pass": "pass", "fail": "fail"}.get(gate, "open")))
    named = [r.split(" — ", 1)[0].replace(": ", " ", 1) for r in j.reasons if " — " in r]
    if named and (j.verdict not in ("pass", "fail") or not any(x.tone == "fail" for x in out)):
        # what made the verdict, when the sentences above do not already say it
        stop_s = Sentence(f"{stop} Verdict {j.verdict}: {', '.join(named)}.", stop_s.anchor, stop_s.link,
                          stop_s.heading, stop_s.tone)
    return [*out, stop_s]
