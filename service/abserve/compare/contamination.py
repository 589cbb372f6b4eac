"""Foreign load on the arms' cores: when it makes the latency judgment "cannot tell". Pure.

``abserve run`` records, per block, how much of each of the arms' CPUs' wall time went to
threads outside the arms' server process trees (``abserve.arms.neighbours``, kept in the
run's provenance as ``blocks[i].neighbours``). A third party on the arms' core does not slow
both arms alike: the issue-34 run, with two vLLM servers of another run on the self-test's core,
measured a known +5.5 ms per output token as +1.4 ms [-1.1, +4.0] (benchmarks/placement.md,
"Neighbours" for why). So beyond the policy's ``neighbours.max_foreign_share`` (the worst
core of the worst block):

- ``action: unstable`` (the default): every latency line becomes ``unstable`` with the
  neighbours named, so foreign load can turn a decision into "cannot tell" and never a
  regression into a pass. A ``fail`` too, unless it is beyond what neighbours can cause:
  they shrank a known regression in some runs and inflated it in others (+11.0 ms [+8.7,
  +13.3] for 5.9 ms injected, benchmarks/placement.md "Neighbours"), so a shift fail stays a
  fail only while its interval clears its allowance plus the largest bias measured
  (``neighbours.widen``; issue 58: neighbours widen, not erase); with ``keep_fails`` every
  fail stays a fail, its reason naming the neighbours.
- ``action: invalid``: the run is invalid, the neighbours named.

Equality is never touched: outputs do not depend on who else uses the core.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from abserve.base.units import ms
from abserve.compare.causes import hold
from abserve.compare.model import MetricLine
from abserve.compare.policy import NeighbourRule
from abserve.model.provenance import CoreLoad, RunProvenance


@dataclass(frozen=True)
class Contamination:
    """The worst core of the worst block, and every block's sentence."""

    share: float  # the largest foreign share of a watched core in one block
    where: str  # "core 0: 38% of its time went to 6 threads outside the arms (...) in block 2"
    facts: list[str]  # one sentence per watched core, for the report's run facts

    def exceeds(self, rule: NeighbourRule) -> bool:
        return rule.max_foreign_share is not None and self.share > rule.max_foreign_share


def describe_core(cpu: str, core: CoreLoad) -> str:
    """``core 0: 38% of its time went to 6 threads outside the arms (python3 30%, ...)``."""
    threads = core.foreign_threads
    named = ", ".join(f"{comm} {share_of:.0%}" for comm, share_of in core.top if share_of >= 0.01)
    return (f"core {cpu}: {core.foreign:.0%} of its time went to {threads} thread{'s' * (threads != 1)} "
            f"outside the arms" + (f" ({named})" if named else ""))


def contamination(provenance: RunProvenance) -> Contamination | None:
    """The run's neighbour facts from its block records; None when none were recorded.

    One sentence per watched core: its worst block, and the mean share over the blocks."""
    per_core: dict[str, list[tuple[float, str]]] = {}
    for block in provenance.blocks:
        cores = block.neighbours.cores if block.neighbours is not None else {}
        for cpu, core in cores.items():
            text = f"{describe_core(cpu, core)} in block {block.index}"
            per_core.setdefault(cpu, []).append((core.foreign, text))
    if not per_core:
        return None
    facts, worst = [], (-1.0, "")
    for cpu in sorted(per_core):
        shares = per_core[cpu]
        top = max(shares, key=lambda st: st[0])
        mean = sum(st[0] for st in shares) / len(shares)
        facts.append(f"{top[1]} (the worst of {len(shares)} blocks; mean {mean:.0%})")
        worst = max(worst, top, key=lambda st: st[0])
    return Contamination(share=worst[0], where=worst[1], facts=facts)


def reason_for(found: Contamination, rule: NeighbourRule) -> str:
    return (f"foreign load on the arms' cores: {found.where}, above the policy's "
            f"neighbours.max_foreign_share of {rule.max_foreign_share:.0%}")


def beyond_bias(line: MetricLine, rule: NeighbourRule) -> bool:
    """Whether a shift fail's interval clears its allowance plus the neighbours' largest bias."""
    bias = rule.widen.get(line.metric)
    if line.kind == "tail":  # judged per request with the widened allowance (compare.tail_gate)
        return line.fail_beyond_neighbours
    if bias is None or line.kind not in ("shift", "stratum") or line.direction != "increase":
        return False
    return line.low is not None and line.threshold is not None and line.low > line.threshold + bias


def apply_contamination(lines: Sequence[MetricLine], invalid: list[str], provenance: RunProvenance,
                        rule: NeighbourRule) -> Contamination | None:
    """Mark the latency lines (or the run) for foreign load beyond the rule; return the facts."""
    found = contamination(provenance)
    if found is None or not found.exceeds(rule):
        return found
    why = reason_for(found, rule)
    if rule.action == "invalid":
        invalid.append(why)
        return found
    for line in lines:
        if line.outcome == "fail" and rule.keep_fails:
            line.reason += f"; a fail despite {why} (the size of the effect is not to be trusted)"
        elif line.outcome == "fail" and beyond_bias(line, rule):
            bias = ms(rule.widen[line.metric], signed=False)
            line.reason += (f"; a fail despite {why}: beyond its allowance by more than the largest bias "
                            f"neighbours were measured to cause ({bias})")
        else:
            line.outcome = "unstable"
            line.reason += f"; cannot tell: {why}"
            hold(line, "neighbours", f"{found.where}, above the policy's neighbours.max_foreign_share "
                                     f"of {rule.max_foreign_share:.0%}")
    return found
