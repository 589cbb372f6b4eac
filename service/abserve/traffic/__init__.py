"""Load generation for abserve: profiles, a reproducible multimodal corpus, shapes, timings,
and traffic files (``abserve.traffic.sources``: bring your own requests).

The pure parts (profiles, corpus, calibration, shapes, timing) are importable without Locust;
``locust_user`` is the Locust glue used by ``loadtest/locustfile.py``, and ``run_load`` runs a
bounded headless Locust in a subprocess. The names below are imported when first used, so
importing one submodule (the config reads ``sources.spec``) does not import them all.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from abserve.traffic.corpus import CorpusEntry, build_corpus, read_jsonl, write_jsonl
    from abserve.traffic.profiles import TrafficProfile, available_profiles, load_profile
    from abserve.traffic.runner import LoadError, LoadSummary, run_load
    from abserve.traffic.shapes import Arrival, plan_arrivals
    from abserve.traffic.timing import StreamTimer, TimingRecord, read_timings

_HOMES = {
    "Arrival": "shapes", "CorpusEntry": "corpus", "LoadError": "runner", "LoadSummary": "runner",
    "StreamTimer": "timing", "TimingRecord": "timing", "TrafficProfile": "profiles",
    "available_profiles": "profiles", "build_corpus": "corpus", "load_profile": "profiles",
    "plan_arrivals": "shapes", "read_jsonl": "corpus", "read_timings": "timing",
    "run_load": "runner", "write_jsonl": "corpus",
}
__all__ = ["Arrival", "CorpusEntry", "LoadError", "LoadSummary", "StreamTimer", "TimingRecord",
           "TrafficProfile", "available_profiles", "build_corpus", "load_profile",
           "plan_arrivals", "read_jsonl", "read_timings", "run_load", "write_jsonl"]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'abserve.traffic' has no attribute {name!r}")
    return getattr(importlib.import_module(f"abserve.traffic.{home}"), name)
