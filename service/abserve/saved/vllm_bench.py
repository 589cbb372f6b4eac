"""Reader of ``vllm bench serve --save-result --save-detailed`` result files, streamed.

The file (vLLM's ``vllm/benchmarks/serve.py``, the same schema the Rust vllm-bench writes) is
one JSON object: the run's settings (``date``, ``backend``, ``model_id``, ``num_prompts``...),
then per-request columns in request order (``input_lens``, ``output_lens``, ``ttfts``,
``itls``, ``latencies``, ``start_times``, ``queue_times``, ``generated_texts``, ``errors``),
then the summary (``mean_ttft_ms``, ``p99_itl_ms``...). Times are seconds in the columns,
milliseconds in the summary. A failed request has a non-empty ``errors`` entry (its TTFT and
output length are 0). Without ``--save-detailed`` only ``latencies`` survives, with no way to
tell which request failed: such a file is refused as having no per-request data.

vLLM's benchmark does not save prompts, so ``prompt_key`` is None for every request here
(equality across sides needs a tool that saved them, or an abserve arm); the generated texts
are kept as ``output_text``. Columns are read side by side (``abserve.saved.jsonscan``): one
scan of the bytes, then each column parsed once from its own file handle.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from itertools import zip_longest
from pathlib import Path
from typing import Any

from abserve.saved.events import READ_ERRORS
from abserve.saved.jsonscan import LayoutError, Span, scan_keys, stream_array, top_level
from abserve.saved.keys import tpot
from abserve.saved.model import SavedRequest, SavedRun, SavedRunError, SavedRunHeader

COLUMNS = ("ttfts", "itls", "latencies", "input_lens", "output_lens", "generated_texts", "errors")
MARKERS = ("backend", "endpoint_type")  # with ``date`` and ``model_id``: a vllm-bench result


def looks_like(keys: set[str]) -> bool:
    """Whether the first keys of a JSON object are a vllm-bench result's."""
    return "date" in keys and "model_id" in keys and any(m in keys for m in MARKERS)


def _started_at(date: Any) -> float | None:
    try:
        return time.mktime(time.strptime(str(date), "%Y%m%d-%H%M%S"))
    except ValueError:
        return None


def _summary(small: dict[str, Any]) -> dict[str, float]:
    return {k: float(v) for k, v in small.items()
            if isinstance(v, int | float) and not isinstance(v, bool)}


def _column(path: Path, small: dict[str, Any], large: dict[str, Span], key: str) -> Iterator[Any] | None:
    if key in large:
        return stream_array(path, large[key])
    value = small.get(key)
    return iter(value) if isinstance(value, list) else None


def read(path: Path, source: str) -> SavedRun:
    """The run in a vllm-bench result file; SavedRunError naming ``source`` when it cannot be read."""
    try:
        spans = scan_keys(path)
        dates = sum(1 for s in spans if s.key == "date")
        if dates > 1:
            raise SavedRunError(f"{source}: holds {dates} vllm-bench runs appended to one file "
                                "(--append-result); save each run to a file of its own")
        small, large = top_level(path, spans)
    except LayoutError as exc:
        raise SavedRunError(f"{source}: not a readable vllm-bench result: {exc}") from None
    if "ttfts" not in small and "ttfts" not in large:
        raise SavedRunError(f"{source}: a vllm-bench result without per-request data (saved without "
                            "--save-detailed: no per-request TTFT, ITL or errors); rerun with "
                            "--save-result --save-detailed")
    header = SavedRunHeader(tool="vllm-bench", source=source, model=small.get("model_id"),
                            started_at=_started_at(small.get("date")),
                            duration_s=small.get("duration"), summary=_summary(small))
    columns = {key: _column(path, small, large, key) for key in COLUMNS}
    return SavedRun(header, _requests(source, columns))


def _requests(source: str, columns: dict[str, Iterator[Any] | None]) -> Iterator[SavedRequest]:
    present = [k for k, v in columns.items() if v is not None]
    iterators = [v for v in columns.values() if v is not None]
    n = 0
    try:
        for row in zip_longest(*iterators, fillvalue=_MISSING):
            if any(v is _MISSING for v in row):
                short = [k for k, v in zip(present, row, strict=True) if v is _MISSING]
                raise SavedRunError(f"{source}: column {short[0]} ends after {n} requests while "
                                    "others go on (a damaged file)")
            yield _request(dict(zip(present, row, strict=True)))
            n += 1
    except SavedRunError:
        raise
    except READ_ERRORS as exc:  # a file damaged inside a column
        raise SavedRunError(f"{source}: unreadable after {n} requests ({exc})") from None


_MISSING = object()


def _request(row: dict[str, Any]) -> SavedRequest:
    error = row.get("errors") or None
    output_tokens = row.get("output_lens")
    ttft = row.get("ttfts")
    ok = error is None and (ttft or 0) > 0
    itl = tuple(row["itls"]) if isinstance(row.get("itls"), list) else None
    e2e = row.get("latencies")
    if e2e is None and ok and ttft is not None:
        e2e = ttft + sum(itl or ())
    if not ok:
        text = row.get("generated_texts") or None
        return SavedRequest(ok=False, error=str(error or "no first token"),
                            input_tokens=row.get("input_lens"), output_text=text)
    return SavedRequest(ok=True, ttft=ttft, tpot=tpot(e2e, ttft, output_tokens), e2e=e2e, itl=itl,
                        input_tokens=row.get("input_lens"), output_tokens=output_tokens,
                        output_text=row.get("generated_texts"))
