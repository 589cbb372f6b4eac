"""Reader of GuideLLM benchmark reports (``guidellm run --output json|yaml``), streamed.

A report (GuideLLM 0.8: ``metadata``, ``config``, ``benchmarks``; checked against a real
report made here) holds one benchmark per strategy it ran (a sweep makes several); each
keeps its per-request statistics under ``requests.successful`` / ``errored`` /
``incomplete``: ``time_to_first_token_ms``, ``request_latency`` (s), ``prompt_tokens``,
``output_tokens``, the ``output`` text and ``request_args`` (the request body as JSON: the
prompt). GuideLLM keeps no per-token times, so ``itl`` is None. A report with one benchmark is
read as it is; with several, ``PATH#N`` picks the N-th (from 1), and without it the report is
refused with the list. A report whose benchmarks kept no requests is refused.

``prompt_key`` comes from ``request_args`` (text and image hashes of the body), or from a
``prompt`` string where an older report saved one; None otherwise. JSON goes the fast way
(``abserve.saved.guidellm_json``: benchmarks and requests located by bytes, requests built by
ijson's C backend). YAML (keys sorted: a benchmark's times and the report's model come after
the requests) is read twice as parse events (``abserve.saved.events``): once for the
benchmarks' model, times and summary, once for the chosen benchmark's requests; about 15 s per
100,000 requests each time (benchmarks/saved_read.md).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from abserve.saved import guidellm_json
from abserve.saved.events import READ_ERRORS, Event, json_events, objects_at, yaml_events
from abserve.saved.jsonscan import end_of_object
from abserve.saved.keys import body_key, prompt_key, tpot
from abserve.saved.model import SavedRequest, SavedRun, SavedRunError, SavedRunHeader

BENCH = "benchmarks.item"
STATUSES = ("successful", "errored", "incomplete")
REQUESTS = frozenset(f"{BENCH}.requests.{status}.item" for status in STATUSES)
_REQUESTS_AT = f"{BENCH}.requests."
SUMMARY_STATS = {"mean": "mean", "median": "median", "percentiles.p99": "p99"}


@dataclass
class _Benchmark:
    """What the first pass learns of one benchmark."""

    strategy: dict[str, Any] = field(default_factory=dict)
    model: str | None = None
    start_time: float | None = None
    duration: float | None = None
    measured: dict[str, float] = field(default_factory=dict)  # scheduler_metrics.measure_*
    requests: int = 0
    summary: dict[str, float] = field(default_factory=dict)

    @property
    def started_at(self) -> float | None:
        return self.start_time if self.start_time is not None else self.measured.get("start")

    @property
    def duration_s(self) -> float | None:
        if self.duration is not None:
            return self.duration
        if "start" in self.measured and "end" in self.measured:
            return self.measured["end"] - self.measured["start"]
        return None

    @property
    def label(self) -> str:
        kind = self.strategy.get("type_", "?")
        load = self.strategy.get("streams") or self.strategy.get("rate")
        return f"{kind}@{load}" if load is not None else str(kind)


def _events(path: Path, is_yaml: bool) -> Callable[[], Iterator[Event]]:
    def events() -> Iterator[Event]:
        if is_yaml:
            with open(path, encoding="utf-8") as f:
                yield from yaml_events(f)
        else:
            with open(path, "rb") as f:
                yield from json_events(f)

    return events


def _survey(events: Iterator[Event]) -> tuple[list[_Benchmark], str | None]:
    benches: list[_Benchmark] = []
    model: str | None = None
    for prefix, event, value in events:
        if prefix == BENCH and event == "start_map":
            benches.append(_Benchmark())
        elif prefix.startswith(_REQUESTS_AT):
            if prefix in REQUESTS and event == "start_map":
                benches[-1].requests += 1
        elif prefix.startswith(BENCH + ".") and event != "map_key":
            _note(benches[-1], prefix[len(BENCH) + 1:], event, value)
        elif prefix == "config.spec.backend.model" and event == "string":
            model = value
    return benches, model


def _note(bench: _Benchmark, prefix: str, event: str, value: Any) -> None:
    if event in ("start_map", "end_map", "start_array", "end_array"):
        return
    if prefix.startswith("config.strategy."):
        bench.strategy[prefix.removeprefix("config.strategy.")] = value
    elif prefix in ("config.backend.model", "worker.backend_model"):
        bench.model = str(value)
    elif prefix == "start_time" and event == "number":
        bench.start_time = float(value)
    elif prefix == "duration" and event == "number":
        bench.duration = float(value)
    elif prefix.startswith("scheduler_metrics.measure_") and prefix.endswith("_time") and event == "number":
        bench.measured[prefix.removeprefix("scheduler_metrics.measure_").removesuffix("_time")] = float(value)
    elif prefix.startswith("metrics.") and event == "number":
        name, _, rest = prefix.removeprefix("metrics.").partition(".successful.")
        if rest in SUMMARY_STATS:
            bench.summary[f"{name}.{SUMMARY_STATS[rest]}"] = float(value)


def read(path: Path, source: str, is_yaml: bool, pick: int | None = None) -> SavedRun:
    """The run in a GuideLLM report; ``pick`` (from 1) chooses among several benchmarks.

    JSON goes the fast way; where that finds no request records (a layout whose records do
    not open with the markers it knows), the report is walked as events like YAML."""
    located: list[guidellm_json.Located] | None = None
    events = _events(path, is_yaml)
    try:
        if not is_yaml:
            located, benches = _survey_json(path)
            model = None
            if not any(b.requests for b in benches):
                located = None
        if located is None:
            benches, model = _survey(events())
    except READ_ERRORS as exc:
        raise SavedRunError(f"{source}: not a readable GuideLLM report ({_reason(exc)})") from None
    index = _pick(benches, source, pick)
    bench = benches[index]
    if bench.requests == 0:
        raise SavedRunError(f"{source}: a GuideLLM benchmark without per-request data "
                            "(saved with sample_size 0?)")
    header = SavedRunHeader(tool="guidellm", source=source, model=bench.model or model,
                            started_at=bench.started_at, duration_s=bench.duration_s, summary=bench.summary)
    if located is None:
        return SavedRun(header, _requests(objects_at(_only(events(), index), REQUESTS), source))
    found = guidellm_json.requests(path, located[index])
    return SavedRun(header, _requests(((f"{BENCH}.requests.{s}.item", r) for s, r in found), source))


def _survey_json(path: Path) -> tuple[list[guidellm_json.Located], list[_Benchmark]]:
    """The JSON report's benchmarks: located by bytes, their own fields by a short walk each."""
    end_of_object(path, path.stat().st_size)  # a cut report ends elsewhere
    located = guidellm_json.locate(path)
    benches = []
    for place in located:
        bench = _Benchmark(requests=sum(place.counts.values()))
        for prefix, event, value in guidellm_json.head_events(path, place.offset):
            if event != "map_key":
                _note(bench, prefix, event, value)
        benches.append(bench)
    return located, benches


def _pick(benches: list[_Benchmark], source: str, pick: int | None) -> int:
    if not benches:
        raise SavedRunError(f"{source}: a GuideLLM report with no benchmarks")
    if pick is None and len(benches) > 1:
        names = ", ".join(f"#{i} {b.label}" for i, b in enumerate(benches, start=1))
        raise SavedRunError(f"{source}: a GuideLLM report with {len(benches)} benchmarks ({names}); "
                            f"name one as {source}#N")
    index = (pick or 1) - 1
    if not 0 <= index < len(benches):
        raise SavedRunError(f"{source}: no benchmark #{pick} (the report has {len(benches)})")
    return index


def _reason(exc: BaseException) -> str:
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return text[:200]


def _only(events: Iterator[Event], index: int) -> Iterator[Event]:
    """The events of benchmark ``index`` (0-based) alone."""
    at = -1
    for item in events:
        prefix, event, _ = item
        if prefix == BENCH and event == "start_map":
            at += 1
        if at == index and prefix.startswith(BENCH):
            yield item
        elif at > index:
            return


def _requests(found: Iterator[tuple[str, Any]], source: str) -> Iterator[SavedRequest]:
    try:
        for prefix, stats in found:
            yield _request(stats, prefix.split(".")[-2])
    except READ_ERRORS as exc:
        raise SavedRunError(f"{source}: unreadable ({_reason(exc)})") from None


def _key(stats: dict[str, Any]) -> str | None:
    args = stats.get("request_args")
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except ValueError:
            args = None
    if isinstance(args, dict):
        key = body_key(args.get("body"))
        if key is not None:
            return key
    prompt = stats.get("prompt")
    return prompt_key(prompt) if isinstance(prompt, str) else None


def _seconds(stats: dict[str, Any], name: str, scale: float = 1.0) -> float | None:
    value = stats.get(name)
    return float(value) * scale if isinstance(value, int | float) else None


def _request(stats: dict[str, Any], status: str) -> SavedRequest:
    key, text = _key(stats), stats.get("output")
    inputs = stats.get("prompt_tokens")
    if status != "successful":
        info: dict[str, Any] = stats["info"] if isinstance(stats.get("info"), dict) else {}
        error = info.get("error") or stats.get("error") or status
        return SavedRequest(ok=False, error=str(error), input_tokens=inputs, prompt_key=key,
                            output_text=text)
    ttft = _seconds(stats, "time_to_first_token_ms", 1e-3)
    e2e = _seconds(stats, "request_latency")
    outputs = stats.get("output_tokens")
    return SavedRequest(ok=True, ttft=ttft, tpot=tpot(e2e, ttft, outputs), e2e=e2e,
                        input_tokens=inputs, output_tokens=outputs, prompt_key=key, output_text=text)
