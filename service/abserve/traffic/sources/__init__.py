"""Bring your own traffic: requests read from a file instead of generated from a profile.

Formats (``docs/traffic-files.md``): OpenAI request JSON Lines as a gateway logs them
(``openai_jsonl``), the custom and ShareGPT data sets of ``vllm bench serve``
(``bench_datasets``), and abserve's own corpus JSON Lines (``corpus_jsonl``), each one entry
of the formats' table (``formats``: name, help line, detection rule, reader). The file is
read as a stream (``lines``), every request checked against the run's router before the
first is sent (``reader.check_file``, ``prepare``), then replayed at its recorded arrival
times or by closed-loop users (``replay``). Names are imported when first used: the config
reads ``spec`` without importing the router's checks.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from abserve.traffic.sources.reader import (
        Accepted,
        FileCheck,
        Problem,
        accepted,
        check_file,
    )
    from abserve.traffic.sources.replay import StreamedEntries, window
    from abserve.traffic.sources.spec import (
        FileFormat,
        FileOptions,
        FileSource,
        Replay,
        RequestsFileError,
        label_for,
    )

_HOMES = {"Accepted": "reader", "FileCheck": "reader", "Problem": "reader", "accepted": "reader",
          "check_file": "reader", "StreamedEntries": "replay", "window": "replay",
          "FileFormat": "spec", "FileOptions": "spec", "FileSource": "spec", "Replay": "spec",
          "RequestsFileError": "spec", "label_for": "spec"}
__all__ = ["Accepted", "FileCheck", "FileFormat", "FileOptions", "FileSource", "Problem", "Replay",
           "RequestsFileError", "StreamedEntries", "accepted", "check_file", "label_for", "window"]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'abserve.traffic.sources' has no attribute {name!r}")
    return getattr(importlib.import_module(f"abserve.traffic.sources.{home}"), name)
