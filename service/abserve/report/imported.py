"""What the report says about traffic read from files (``load.profiles`` items of kind ``file``).

``abserve run`` checks every traffic file before the first request and records what it sends
in the run's provenance (``load_plan[].imported``, ``abserve.traffic.sources.FileCheck``): how
many requests and images, how many lines asked for sampling and were sent greedy (temperature
0, tagged ``sampling=forced-greedy``) or sampled with the router's seed, and the invalid lines
left out. A reviewer must see that the requests judged are not exactly the user's: one
sentence per file says so (``abserve check`` prints the same sentence before a run). Pure:
everything comes from the ``Judgment``; each load item read defensively (it is the config as dumped).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from abserve.compare.model import Judgment


def _count(facts: Mapping[str, Any], key: str) -> int:
    value = facts.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def file_statement(item: Mapping[str, Any]) -> str | None:
    """One load-plan item of kind ``file`` as a sentence; None when it is not one."""
    facts, source = item.get("imported"), item.get("file")
    if item.get("kind") != "file" or not isinstance(facts, Mapping) or not isinstance(source, Mapping):
        return None
    text = (f"{item.get('profile', 'file')} from {source.get('path', '?')}: "
            f"{_count(facts, 'requests')} requests, {_count(facts, 'images')} images")
    trace, read_as = source.get("trace"), facts.get("formats")
    detected = isinstance(read_as, Mapping) and list(read_as) == ["mooncake"]  # format: auto
    if (source.get("format") == "mooncake" or detected) and isinstance(trace, Mapping):
        text += (f" (a Mooncake trace: {trace.get('block_size', '?')}-token hash blocks, "
                 f"{trace.get('images_per_block', 0)} images per full block)")
    if greedy := _count(facts, "forced_greedy"):
        text += (f"; {greedy} asked for sampling and were changed to greedy (temperature 0, "
                 "tagged sampling=forced-greedy)")
    if seeded := _count(facts, "seeded"):
        text += f"; {seeded} sampled as sent, with the router's seed"
    if skipped := _count(facts, "skipped"):
        listed = facts.get("skipped_lines")
        lines = [str(n) for n in listed] if isinstance(listed, list) else []
        more = ", ..." if skipped > len(lines) else ""
        text += f"; {skipped} invalid lines left out (lines {', '.join(lines)}{more})"
    return text + "."


def imported_statements(j: Judgment) -> list[str]:
    """One sentence per traffic file of the run's load plan; none for generated traffic."""
    out = []
    for item in j.provenance.load_plan:
        line = file_statement(item)
        if line is not None:
            out.append(line)
    return out
