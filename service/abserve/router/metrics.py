"""Prometheus metrics of the router, per arm, in a registry owned by one app instance.

Per arm: requests, errors by class, time to first token and end-to-end latency
histograms, and equality mismatches so far (token ids differing from the primary's, a
cheap first look; the judgment step does the real comparison). Router-wide: requests
rejected before fan-out by reason, and exchanges in flight.

Several worker processes (``router.workers``) share their metrics through
prometheus-client's multiprocess mode: the supervisor sets ``PROMETHEUS_MULTIPROC_DIR``
before starting them, every value is kept in a file there, and whichever worker answers
``/metrics`` renders the sum over all workers (in flight: summed over live workers).
"""

from __future__ import annotations

import os
from typing import NamedTuple

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest, multiprocess
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from abserve.model.records import Exchange

_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)

CONTENT_TYPE = CONTENT_TYPE_LATEST
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"


class _ArmMetrics(NamedTuple):
    requests: Counter
    ttft: Histogram
    e2e: Histogram
    mismatches: Counter


class RouterMetrics:
    """The router's metric families; one instance per app (tests build many apps)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter("abserve_router_arm_requests", "Requests sent to an arm",
                                ["arm"], registry=r)
        self.errors = Counter("abserve_router_arm_errors", "Failed arm requests by class",
                              ["arm", "error_class"], registry=r)
        self.ttft = Histogram("abserve_router_arm_ttft_seconds", "Send to first token",
                              ["arm"], buckets=_BUCKETS, registry=r)
        self.e2e = Histogram("abserve_router_arm_e2e_seconds", "Send to end of answer",
                             ["arm"], buckets=_BUCKETS, registry=r)
        self.mismatches = Counter("abserve_router_arm_mismatches",
                                  "Exchanges whose token ids differ from the primary's",
                                  ["arm"], registry=r)
        self.rejected = Counter("abserve_router_rejected", "Requests refused before fan-out",
                                ["reason"], registry=r)
        self.in_flight = Gauge("abserve_router_in_flight", "Exchanges in flight", registry=r,
                               multiprocess_mode="livesum")
        self._arms: dict[str, _ArmMetrics] = {}

    def _arm(self, name: str) -> _ArmMetrics:
        """The arm's labelled children, looked up once (``labels`` costs a lock and a check)."""
        children = self._arms.get(name)
        if children is None:
            children = self._arms[name] = _ArmMetrics(
                self.requests.labels(arm=name), self.ttft.labels(arm=name),
                self.e2e.labels(arm=name), self.mismatches.labels(arm=name))
        return children

    def observe(self, exchange: Exchange, primary: str) -> None:
        """Count one finished exchange."""
        reference = exchange.arms.get(primary)
        for name, arm in exchange.arms.items():
            children = self._arm(name)
            children.requests.inc()
            if arm.error_class is not None:
                self.errors.labels(arm=name, error_class=arm.error_class).inc()
            elif arm.t_end is not None:
                children.e2e.observe(arm.t_end - arm.t_send)
            if arm.t_first_token is not None:
                children.ttft.observe(arm.t_first_token - arm.t_send)
            if (name != primary and reference is not None and reference.ok and arm.ok
                    and arm.token_ids != reference.token_ids):
                children.mismatches.inc()

    def render(self) -> bytes:
        """The exposition text: this app's registry, or every worker's in multiprocess mode."""
        if os.environ.get(MULTIPROC_ENV):
            merged = CollectorRegistry()
            multiprocess.MultiProcessCollector(merged)
            return generate_latest(merged)
        return generate_latest(self.registry)
