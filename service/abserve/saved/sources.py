"""``open_saved``: one side's recorded run, whatever tool saved it, its reader chosen by content.

A SOURCE of ``abserve compare`` is one of:

- a ``vllm bench serve --save-result --save-detailed`` JSON file (``abserve.saved.vllm_bench``);
- an AIPerf ``profile_export.jsonl`` (or its summary ``profile_export_aiperf.json``, or the
  artifact directory holding both; ``abserve.saved.aiperf``);
- a GuideLLM report, JSON or YAML (``PATH#N`` for its N-th benchmark; a directory holding
  GuideLLM's default ``benchmarks.json`` or ``benchmarks.yaml``; ``abserve.saved.guidellm``);
- ``RUN_ID:ARM``, an arm of a stored abserve run (``--db URL`` or the store under ``runs/``;
  ``abserve.saved.abserve_arm``).

The file's first 64 KiB decide, never its name. Anything else (an unknown, empty, truncated
or damaged file, a file without per-request data) raises ``SavedRunError`` whose one line
names the source and why: here, before any request is read, for what the head, the tail and
a first look can tell; from the requests iterator for damage found only while streaming.

Which tools save prompts (and so allow equality matched by prompt):
AIPerf (``inputs.json`` beside the export), GuideLLM (``request_args``) and abserve arms; vLLM's
benchmark does not (its ``prompt_key`` is None).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from abserve.saved import abserve_arm, aiperf, guidellm, vllm_bench
from abserve.saved.model import SavedRun, SavedRunError

HEAD = 64 << 10
IN_FOLDER = ("profile_export.jsonl", "benchmarks.json", "benchmarks.yaml")  # AIPerf, GuideLLM defaults
_KEYS = re.compile(r'"((?:[^"\\]|\\.){1,64})"\s*:')
_YAML_GUIDELLM = re.compile(r"(?m)^(benchmarks:|guidellm_version:|\s+guidellm_version:)")
KNOWN = ("a vllm bench serve --save-detailed JSON, an AIPerf profile_export.jsonl, a GuideLLM report "
         "(JSON or YAML) or RUN_ID:ARM")


def open_saved(source: str, db: str | None = None, runs: Path = Path("runs")) -> SavedRun:
    """The run ``source`` names, header read and requests ready to stream (one pass)."""
    path, pick = _path_and_pick(source)
    if path is None:
        if abserve_arm.split_source(source) is not None:
            return abserve_arm.read(source, db, runs)
        raise SavedRunError(f"{source}: no such file, and not RUN_ID:ARM")
    if path.is_dir():
        inside = [path / name for name in IN_FOLDER if (path / name).is_file()]
        if len(inside) != 1:
            raise SavedRunError(f"{source}: a directory holding {'none' if not inside else 'several'} of "
                                f"{', '.join(IN_FOLDER)}; name the result file")
        path = inside[0]
    return _read_file(path, source, pick)


def _path_and_pick(source: str) -> tuple[Path | None, int | None]:
    path = Path(source)
    if path.exists():
        return path, None
    base, sep, number = source.rpartition("#")
    if sep and number.isdigit() and Path(base).is_file():
        return Path(base), int(number)
    return None, None


def _head(path: Path, source: str) -> str:
    try:
        with open(path, "rb") as f:
            raw = f.read(HEAD)
    except OSError as exc:
        raise SavedRunError(f"{source}: cannot be read ({exc.strerror or exc})") from None
    if not raw.strip():
        raise SavedRunError(f"{source}: an empty file")
    return raw.decode("utf-8", "replace").lstrip("\ufeff \t\r\n")


def _read_file(path: Path, source: str, pick: int | None) -> SavedRun:
    head = _head(path, source)
    if pick is not None and not _is_guidellm(head):
        raise SavedRunError(f"{source}: #N picks a benchmark of a GuideLLM report, and this is not one")
    if head.startswith("{"):
        return _read_json(path, source, head, pick)
    if _YAML_GUIDELLM.search(head):
        return guidellm.read(path, source, is_yaml=True, pick=pick)
    raise SavedRunError(f"{source}: not a result file abserve reads ({KNOWN})")


def _is_guidellm(head: str) -> bool:
    return bool(_YAML_GUIDELLM.search(head)) or (head.startswith("{") and "benchmarks" in _keys(head))


def _keys(head: str) -> set[str]:
    return {m.group(1) for m in _KEYS.finditer(head)}


def _first_line(head: str) -> object:
    line, newline, _ = head.partition("\n")
    if not newline:
        return None
    try:
        return json.loads(line)
    except ValueError:
        return None


def _read_json(path: Path, source: str, head: str, pick: int | None) -> SavedRun:
    first = _first_line(head)
    if aiperf.is_record(first):
        return aiperf.read(path, source)
    if aiperf.is_raw_record(first):
        raise SavedRunError(f"{source}: an AIPerf raw export (--export-level raw); give the "
                            "profile_export.jsonl beside it")
    keys = _keys(head)
    if vllm_bench.looks_like(keys):
        return vllm_bench.read(path, source)
    if "benchmarks" in keys and ("metadata" in keys or "config" in keys):
        return guidellm.read(path, source, is_yaml=False, pick=pick)
    if aiperf.is_summary(keys):
        records = aiperf.records_beside(path)
        if records is None:
            raise SavedRunError(f"{source}: an AIPerf summary without its per-request export beside "
                                "it (profile_export.jsonl: run with --export-level records)")
        return aiperf.read(records, source)
    raise SavedRunError(f"{source}: a JSON file but not a result abserve reads ({KNOWN})")
