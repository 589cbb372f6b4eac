"""A minimal reader of ``vllm bench serve --save-result --save-detailed`` JSON, for
``abserve compare`` until the full readers of ``abserve.saved`` (AIPerf, GuideLLM, RUN_ID:ARM,
streamed) replace it: ``open_saved`` has their signature, and ``abserve.saved.collect`` imports
it in one place.

It loads the file whole (``json.load``) and yields one ``SavedRequest`` per entry of the
per-request lists (``ttfts``, ``itls``, ``latencies``, ``output_lens``, ``input_lens``,
``generated_texts``, ``errors``). vLLM's benchmark saves no prompts, so ``prompt_key`` is None
and outputs cannot be matched across sides. TPOT is vLLM's own definition:
``(latency - ttft) / (output_len - 1)`` for outputs of more than one token.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from abserve.saved.model import SavedRequest, SavedRun, SavedRunError, SavedRunHeader

PER_REQUEST = ("ttfts", "itls", "latencies", "output_lens")


def _at(values: object, i: int) -> Any:
    return values[i] if isinstance(values, list) and i < len(values) else None


def _request(d: dict[str, Any], i: int) -> SavedRequest:
    error = _at(d.get("errors"), i)
    ttft, latency, out = _at(d["ttfts"], i), _at(d["latencies"], i), _at(d["output_lens"], i)
    itl = _at(d["itls"], i)
    if error or not ttft or not latency:
        return SavedRequest(ok=False, error=str(error or "no latency recorded"))
    tpot = (latency - ttft) / (out - 1) if isinstance(out, int) and out > 1 else None
    text = _at(d.get("generated_texts"), i)
    return SavedRequest(ok=True, ttft=float(ttft), tpot=tpot, e2e=float(latency),
                        itl=tuple(itl) if isinstance(itl, list) else None,
                        input_tokens=_at(d.get("input_lens"), i), output_tokens=out,
                        output_text=text if isinstance(text, str) else None)


def _requests(d: dict[str, Any]) -> Iterator[SavedRequest]:
    for i in range(len(d["ttfts"])):
        yield _request(d, i)


def open_saved(source: str, db: str | None = None) -> SavedRun:
    """Open a ``vllm bench serve`` result file; ``SavedRunError`` (one line) when it is not one."""
    path = Path(source)
    try:
        d = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise SavedRunError(f"{source}: cannot read ({exc.strerror})") from exc
    except ValueError as exc:
        raise SavedRunError(f"{source}: not JSON or truncated ({exc})") from exc
    if not isinstance(d, dict):
        raise SavedRunError(f"{source}: not a saved run this build can read (a JSON object expected)")
    if "ttfts" not in d and "completed" in d:
        raise SavedRunError(f"{source}: a vllm bench serve result without per-request data "
                            "(save it with --save-result --save-detailed)")
    if not all(isinstance(d.get(k), list) for k in PER_REQUEST):
        raise SavedRunError(f"{source}: not a saved run this build can read (a vllm bench serve "
                            "--save-detailed JSON)")
    summary = {k: float(v) for k, v in d.items()
               if k.endswith("_ms") and isinstance(v, int | float) and not isinstance(v, bool)}
    header = SavedRunHeader(tool="vllm-bench", source=source, model=d.get("model_id"),
                            duration_s=d.get("duration"), summary=summary)
    return SavedRun(header, _requests(d))
