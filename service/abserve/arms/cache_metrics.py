"""Each arm's prefix-cache counters, read from its server's Prometheus ``/metrics`` per block.

A config with the prefix cache on is judged fairly only if both arms' caches evolve alike; the
report states each arm's hit rate and flags a difference (``abserve.compare.prefix_cache``).
vLLM counts, per engine, the prompt tokens it looked up in its prefix cache
(``vllm:prefix_cache_queries``) and the tokens it found there (``vllm:prefix_cache_hits``);
Prometheus' text format writes the counters with a ``_total`` suffix and one line per label set
(model, engine). ``abserve run`` reads both counters of every arm through the arm's URL right
before and right after each block, and keeps the difference in the block's record
(``BlockRecord.prefix_cache``): the warm-up and the proof's probe stay outside.

``parse_prefix_cache`` is pure; ``read_prefix_cache`` and ``BlockCacheReader`` are the I/O. An
arm whose ``/metrics`` cannot be read (an endpoint without it) or that counted no query in the
block (the prefix cache off) is left out, never guessed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import Protocol

import httpx

from abserve.model.provenance import PrefixCacheCounts

QUERIES = "vllm:prefix_cache_queries"
HITS = "vllm:prefix_cache_hits"
TIMEOUT_S = 5.0


class HasUrl(Protocol):
    """An arm's server, as far as its metrics are concerned."""

    @property
    def url(self) -> str: ...


def _sample(line: str) -> tuple[str, float] | None:
    """``(name, value)`` of one sample line of Prometheus' text format; None for comments."""
    text = line.strip()
    if not text or text.startswith("#"):
        return None
    brace, space = text.find("{"), text.find(" ")
    if brace != -1 and (space == -1 or brace < space):  # name{labels} value [timestamp]
        name, rest = text[:brace], text[text.rfind("}") + 1:]
    else:  # name value [timestamp]
        name, _, rest = text.partition(" ")
    fields = rest.split()
    if not fields:
        return None
    try:
        return name.strip(), float(fields[0])
    except ValueError:
        return None


def parse_prefix_cache(text: str) -> PrefixCacheCounts | None:
    """The prefix-cache queries and hits in a ``/metrics`` page, summed over its label sets
    (engines); None when the page has neither counter (not a vLLM server, or one too old)."""
    totals = {QUERIES: 0.0, HITS: 0.0}
    seen = False
    for line in text.splitlines():
        sample = _sample(line)
        if sample is None:
            continue
        name, value = sample
        base = name.removesuffix("_total")
        if base in totals:
            totals[base] += value
            seen = True
    if not seen:
        return None
    return PrefixCacheCounts(queries=round(totals[QUERIES]), hits=round(totals[HITS]))


def read_prefix_cache(url: str, timeout: float = TIMEOUT_S) -> PrefixCacheCounts | None:
    """The counters of the server at ``url`` now; None when its ``/metrics`` cannot be read."""
    try:
        response = httpx.get(f"{url.rstrip('/')}/metrics", timeout=timeout)
    except httpx.HTTPError:
        return None
    if response.status_code != 200:
        return None
    return parse_prefix_cache(response.text)


def block_counts(before: Mapping[str, PrefixCacheCounts | None],
                 after: Mapping[str, PrefixCacheCounts | None]) -> dict[str, PrefixCacheCounts]:
    """Per arm, what its counters grew by between two reads; only arms read both times that
    counted a query (a counter that went down, a restarted server, is left out)."""
    out: dict[str, PrefixCacheCounts] = {}
    for arm, end in after.items():
        start = before.get(arm)
        if start is None or end is None:
            continue
        queries, hits = end.queries - start.queries, end.hits - start.hits
        if queries > 0 and 0 <= hits <= queries:
            out[arm] = PrefixCacheCounts(queries=queries, hits=hits)
    return out


@dataclass
class BlockCacheReader:
    """``with BlockCacheReader(servers) as cache:`` around a block; ``cache.counts`` after it."""

    servers: Mapping[str, HasUrl]
    before: dict[str, PrefixCacheCounts | None] = field(default_factory=dict)
    counts: dict[str, PrefixCacheCounts] = field(default_factory=dict)

    def read(self) -> dict[str, PrefixCacheCounts | None]:
        return {name: read_prefix_cache(server.url) for name, server in self.servers.items()}

    def __enter__(self) -> BlockCacheReader:
        self.before = self.read()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        if kind is None:
            self.counts = block_counts(self.before, self.read())
