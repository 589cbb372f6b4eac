"""What the first screen says of an unpaired judgment (``abserve compare`` of saved runs).

A reader must not take it for a paired run: one sentence says how many saved runs each side
had, that this is weaker than a paired abserve run (which sends every request to both builds at
the same instant) and which command would run one; with one run per side, that nothing can
pass and the run-to-run spread assumed; where both sides have repeats, the measured ratio of
run-to-run to within-run spread. Pure: everything comes from ``Judgment.unpaired``.
"""

from __future__ import annotations

from abserve.compare.model import Judgment, UnpairedFacts


def _runs(n: int, side: str) -> str:
    return f"{n} {side} run{'s' if n != 1 else ''}"


def spread_phrase(facts: UnpairedFacts) -> str:
    """The run-to-run spread the latency intervals stood on, in words."""
    if facts.design == "single-run" and facts.measured_spread:
        return ("with one run on a side nothing can pass, and a fail must exceed the allowance plus "
                "the run-to-run spread measured on the side with repeats")
    if facts.design == "single-run":
        return (f"with one run per side nothing can pass, and a fail must exceed the allowance plus "
                f"the run-to-run spread assumed by the policy (±{facts.assumed_spread:.0%} of the "
                "baseline, saved.run_to_run_spread)")
    if facts.spread_ratio:
        ratios = ", ".join(f"{metric.upper()} {r:.1f}x" for metric, r in facts.spread_ratio.items())
        return (f"the runs are clusters; run-to-run spread over within-run error: {ratios} "
                "(1x: runs agree as their requests predict)")
    return "the runs are clusters, the run-to-run spread measured on the side with repeats"


def unpaired_statement(j: Judgment) -> str | None:
    """The first screen's sentence on an unpaired judgment; None for a paired run."""
    facts = j.unpaired
    if facts is None:
        return None
    tools = ", ".join(facts.tools)
    return (f"Unpaired comparison of saved runs ({tools}): {_runs(len(facts.baseline_sources), 'baseline')} "
            f"against {_runs(len(facts.candidate_sources), 'candidate')}, weaker than a paired abserve run, "
            f"which sends every request to both builds at once (run one: {facts.paired_command}); "
            f"{spread_phrase(facts)}.")


def equality_note(j: Judgment) -> str | None:
    """Why an unpaired judgment measured no equality (None when it did, or for a paired run)."""
    if j.unpaired is None or j.unpaired.equality_note is None:
        return None
    unmatched = "; ".join(f"{k} {v}" for k, v in j.unpaired.unmatched.items())
    return (f"Output equality was not measured: {j.unpaired.equality_note}"
            + (f" ({unmatched})" if unmatched else "") + ".")
