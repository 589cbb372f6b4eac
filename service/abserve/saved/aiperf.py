"""Reader of AIPerf's per-request export (``profile_export.jsonl``) with its run summary.

AIPerf (``aiperf profile``, export level ``records``, the default) writes into its artifact
directory one JSON line per request: ``metadata`` (session, turn, phase, cancellation) and
``metrics``, each ``{"value": ..., "unit": ...}`` (``time_to_first_token`` and
``request_latency`` in ms, ``inter_chunk_latency`` a list, token counts), plus ``error`` for
a failed request. Beside it: the summary ``profile_export_aiperf.json`` (``<prefix>.json``
under ``--profile-export-prefix``: the model, start time, duration and aggregates),
``inputs.json`` (every request body, by session: the prompts) and, with
``--export-outputs-json``, ``outputs.json`` (every response text).

``itl`` is AIPerf's ``inter_chunk_latency``: the gaps between streamed chunks (a chunk may
carry more than one token; a fast server's whole answer can come in one, all gaps 0).

Prompts: ``prompt_key`` comes from ``inputs.json`` (text and image hashes of the body) when it
is there, else None. Outputs: ``output_text`` from ``outputs.json`` when it is there. Lines are
read one at a time; the two side files are streamed and joined by (session, turn)
(``abserve.saved.lookahead``). Only the profiling phase is read (warm-up records, if a
version writes them, are skipped).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any, TypeGuard

import ijson
import orjson

from abserve.saved.events import READ_ERRORS
from abserve.saved.keys import body_key, tpot
from abserve.saved.lookahead import Lookahead
from abserve.saved.model import SavedRequest, SavedRun, SavedRunError, SavedRunHeader

SUMMARY_STATS = ("avg", "p50", "p90", "p99")
_TO_SECONDS = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0, "sec": 1.0, "seconds": 1.0}
Turn = tuple[str, int]


def is_record(doc: Any) -> TypeGuard[dict[str, Any]]:
    """Whether a parsed JSONL line is an AIPerf per-request record."""
    return isinstance(doc, dict) and isinstance(doc.get("metadata"), dict) and "metrics" in doc


def is_raw_record(doc: Any) -> bool:
    return isinstance(doc, dict) and isinstance(doc.get("metadata"), dict) and "responses" in doc


def is_summary(doc_keys: set[str]) -> bool:
    return "aiperf_version" in doc_keys or ("input_config" in doc_keys and "benchmark_duration" in doc_keys)


def records_beside(summary: Path) -> Path | None:
    """The per-request export that belongs to an AIPerf summary file."""
    stem = summary.name.removesuffix(".json")
    for name in (stem.removesuffix("_aiperf") + ".jsonl", stem + ".jsonl"):
        candidate = summary.with_name(name)
        if candidate.is_file():
            return candidate
    return None


def summary_beside(records: Path) -> Path | None:
    stem = records.name.removesuffix(".jsonl")
    for name in (stem + "_aiperf.json", stem + ".json"):
        candidate = records.with_name(name)
        if candidate.is_file():
            return candidate
    return None


def _seconds(metric: Any) -> float | list[float] | None:
    if not isinstance(metric, dict) or metric.get("value") is None:
        return None
    scale = _TO_SECONDS.get(str(metric.get("unit", "ms")).lower(), 1e-3)
    value = metric["value"]
    if isinstance(value, list):
        return [float(v) * scale for v in value]
    return float(value) * scale


def _count(metrics: dict[str, Any], *names: str) -> int | None:
    for name in names:
        metric = metrics.get(name)
        if isinstance(metric, dict) and isinstance(metric.get("value"), int | float):
            return int(metric["value"])
    return None


def _model(config: dict[str, Any]) -> str | None:
    items = (config.get("models") or {}).get("items") if isinstance(config.get("models"), dict) else None
    names = [str(m["name"]) for m in items or [] if isinstance(m, dict) and m.get("name")]
    if not names:
        endpoint: dict[str, Any] = config["endpoint"] if isinstance(config.get("endpoint"), dict) else {}
        names = [str(n) for n in endpoint.get("model_names") or []]
    return ",".join(names) or None


def _header(source: str, summary: Path | None) -> SavedRunHeader:
    if summary is None:
        return SavedRunHeader(tool="aiperf", source=source)
    try:
        doc = json.loads(summary.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise SavedRunError(f"{source}: its AIPerf summary {summary} is unreadable ({exc})") from None
    try:
        started = datetime.fromisoformat(str(doc.get("start_time"))).timestamp()
    except ValueError:
        started = None
    figures = {f"{name}.{stat}": float(value[stat]) for name, value in doc.items()
               if isinstance(value, dict) for stat in SUMMARY_STATS
               if isinstance(value.get(stat), int | float)}
    return SavedRunHeader(tool="aiperf", source=source, model=_model(doc.get("input_config") or {}),
                          started_at=started, duration_s=_duration(doc.get("benchmark_duration")),
                          summary=figures)


def _duration(value: Any) -> float | None:
    """The summary's ``benchmark_duration`` (``{"unit": "sec", "avg": ...}``) in seconds."""
    if not isinstance(value, dict) or not isinstance(value.get("avg"), int | float):
        return None
    seconds = _seconds({"value": value["avg"], "unit": value.get("unit", "sec")})
    return seconds if isinstance(seconds, float) else None


def _inputs(path: Path) -> Iterator[tuple[Turn, str | None]]:
    with open(path, "rb") as f:
        for session in ijson.items(f, "data.item", use_float=True):
            for turn, body in enumerate(session.get("payloads") or []):
                yield (str(session.get("session_id")), turn), body_key(body)


def _outputs(path: Path) -> Iterator[tuple[Turn, str | None]]:
    with open(path, "rb") as f:
        for entry in ijson.items(f, "data.item", use_float=True):
            turn = (str(entry.get("conversation_id")), int(entry.get("turn_index") or 0))
            yield turn, entry.get("response_text")


def read(path: Path, source: str) -> SavedRun:
    """The run in an AIPerf ``profile_export.jsonl`` (and the files beside it)."""
    check_complete(path, source)
    header = _header(source, summary_beside(path))
    inputs, outputs = path.with_name("inputs.json"), path.with_name("outputs.json")
    prompts = Lookahead(_inputs(inputs)) if inputs.is_file() else None
    texts = Lookahead(_outputs(outputs)) if outputs.is_file() else None
    return SavedRun(header, _requests(path, source, prompts, texts))


def _last_line(path: Path) -> bytes:
    with open(path, "rb") as f:
        f.seek(max(path.stat().st_size - (1 << 20), 0))
        lines = f.read().rstrip().splitlines()
    return lines[-1] if lines else b""


def check_complete(path: Path, source: str) -> None:
    """Refuse an export whose last line is cut off (AIPerf stopped while writing it)."""
    try:
        json.loads(_last_line(path))
    except ValueError:
        raise SavedRunError(f"{source}: its last line is not complete JSON (a truncated export)") from None


def _requests(path: Path, source: str, prompts: Lookahead[Turn, str | None] | None,
              texts: Lookahead[Turn, str | None] | None) -> Iterator[SavedRequest]:
    seen = 0
    try:
        with open(path, "rb") as f:
            for number, line in enumerate(f, start=1):
                doc = _record(line, number, source)
                if doc is None or doc["metadata"].get("benchmark_phase", "profiling") != "profiling":
                    continue
                meta = doc["metadata"]
                turn = (str(meta.get("conversation_id")), int(meta.get("turn_index") or 0))
                key = prompts.take(turn) if prompts else None
                text = texts.take(turn) if texts else None
                seen += 1
                yield _request(doc, key, text)
    except SavedRunError:
        raise
    except READ_ERRORS as exc:  # inputs.json or outputs.json beside it damaged
        raise SavedRunError(f"{source}: a file beside it is unreadable ({exc})") from None
    if seen == 0:
        raise SavedRunError(f"{source}: an AIPerf export with no profiling records")


def _record(line: bytes, number: int, source: str) -> dict[str, Any] | None:
    if not line.strip():
        return None
    try:
        doc = orjson.loads(line)  # about 3 times json's speed on these lines
    except orjson.JSONDecodeError:
        raise SavedRunError(f"{source}: line {number} is not JSON (a damaged export)") from None
    if not is_record(doc):
        raise SavedRunError(f"{source}: line {number} is not an AIPerf per-request record")
    return doc


def _request(doc: dict[str, Any], key: str | None, text: str | None) -> SavedRequest:
    metrics = doc.get("metrics") or {}
    inputs = _count(metrics, "usage_prompt_tokens", "input_sequence_length")
    error = doc.get("error")
    if error or doc["metadata"].get("was_cancelled"):
        message = error.get("message") if isinstance(error, dict) else None
        return SavedRequest(ok=False, error=str(message or error or "cancelled"), input_tokens=inputs,
                            prompt_key=key, output_text=text)
    ttft, e2e = _seconds(metrics.get("time_to_first_token")), _seconds(metrics.get("request_latency"))
    gaps = _seconds(metrics.get("inter_chunk_latency"))
    outputs = _count(metrics, "usage_completion_tokens", "output_sequence_length")
    ttft_s = ttft if isinstance(ttft, float) else None
    e2e_s = e2e if isinstance(e2e, float) else None
    return SavedRequest(ok=True, ttft=ttft_s, tpot=tpot(e2e_s, ttft_s, outputs), e2e=e2e_s,
                        itl=tuple(gaps) if isinstance(gaps, list) else None, input_tokens=inputs,
                        output_tokens=outputs, prompt_key=key, output_text=text)
