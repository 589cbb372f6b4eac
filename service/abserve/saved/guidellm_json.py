"""The fast way through a GuideLLM JSON report: markers found by bytes, requests built in C.

Walking every parse event of a report in Python costs about 15 s per 100,000 requests, twice
(once to learn the benchmarks, once for the requests). In JSON the report's objects announce
themselves: every benchmark opens with ``{"type_": "generative_benchmark"`` and every
per-request record with ``{"type_": "generative_request_stats"``, and the request lists are the
only arrays under the keys ``successful`` / ``errored`` / ``incomplete`` (the metrics hold
objects there). One scan of the bytes (``abserve.saved.jsonscan.find_all``) finds them all:
where each benchmark starts and how many requests each list holds. A benchmark's own fields
are then read by parse events from its start up to its ``requests`` key (configuration and
metrics: a few kilobytes), and its requests by ijson's C builder from the same start, exactly
as many as were counted. A quote inside a JSON string is always escaped, so none of these
markers can match inside ``request_args`` or an output text.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path
from typing import Any

import ijson

from abserve.saved.jsonscan import find_all

STATUSES = ("successful", "errored", "incomplete")
_MARKS = re.compile(rb'\{\s*"type_"\s*:\s*"generative_(benchmark|request_stats)"'
                    rb'|"(successful|errored|incomplete)"\s*:\s*\[')


@dataclass
class Located:
    """One benchmark: where its object starts and how many requests each status list holds."""

    offset: int
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(STATUSES, 0))


def locate(path: Path) -> list[Located]:
    """Every benchmark of the report, in order."""
    benches: list[Located] = []
    status: str | None = None
    for found in find_all(path, _MARKS):
        kind, listed = found.group(1), found.group(2)
        if kind == b"benchmark":
            benches.append(Located(found.start()))
            status = None
        elif listed is not None:
            status = listed.decode()
        elif kind == b"request_stats" and benches and status is not None:
            benches[-1].counts[status] += 1
    return benches


def head_events(path: Path, offset: int) -> Iterator[tuple[str, str, Any]]:
    """Parse events of the benchmark at ``offset`` (prefixes relative to it) until its
    ``requests`` key."""
    with open(path, "rb") as f:
        f.seek(offset)
        for prefix, event, value in ijson.parse(f, use_float=True):
            if prefix == "" and event == "map_key" and value == "requests":
                return
            yield prefix, event, value


def requests(path: Path, bench: Located) -> Iterator[tuple[str, dict[str, Any]]]:
    """(status, record) of every counted request of the benchmark, built by ijson's C backend;
    ValueError when fewer come than were counted (a damaged report)."""
    for status in STATUSES:
        count = bench.counts[status]
        if count == 0:
            continue
        with open(path, "rb") as f:
            f.seek(bench.offset)
            got = 0
            for stats in islice(ijson.items(f, f"requests.{status}.item", use_float=True), count):
                got += 1
                yield status, stats
            if got < count:
                raise ValueError(f"{got} of {count} {status} requests readable")
