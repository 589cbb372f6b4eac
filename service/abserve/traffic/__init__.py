"""Load generation for abserve: profiles, a reproducible multimodal corpus, shapes, timings.

The pure parts (profiles, corpus, calibration, shapes, timing) are importable without Locust;
``locust_user`` is the Locust glue used by ``loadtest/locustfile.py``, and ``run_load`` runs a
bounded headless Locust in a subprocess.
"""

from abserve.traffic.corpus import CorpusEntry, build_corpus, read_jsonl, write_jsonl
from abserve.traffic.profiles import TrafficProfile, available_profiles, load_profile
from abserve.traffic.runner import LoadError, LoadSummary, run_load
from abserve.traffic.shapes import Arrival, plan_arrivals
from abserve.traffic.timing import StreamTimer, TimingRecord, read_timings

__all__ = [
    "Arrival",
    "CorpusEntry",
    "LoadError",
    "LoadSummary",
    "StreamTimer",
    "TimingRecord",
    "TrafficProfile",
    "available_profiles",
    "build_corpus",
    "load_profile",
    "plan_arrivals",
    "read_jsonl",
    "read_timings",
    "run_load",
    "write_jsonl",
]
