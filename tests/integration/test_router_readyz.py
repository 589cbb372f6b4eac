"""``/readyz`` of the standalone router (``abserve router``) when an arm is dead: not ready
(503) with the reason per arm, whether the arm's server is gone (connection refused) or its
engine died (vLLM's ``/health`` answers 503); ready again once every arm answers."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from tests.support.fake_upstream import FakeUpstream, closed_port_url
from tests.support.router_server import RouterServer, dev_settings

pytestmark = pytest.mark.timeout(60)


def test_readyz_is_not_ready_with_the_reason_when_an_arm_is_dead(tmp_path: Path) -> None:
    with FakeUpstream() as a, FakeUpstream() as b:
        settings = dev_settings({"a": a.url, "b": b.url, "c": closed_port_url()}, tmp_path)
        with RouterServer(settings) as router:
            b.knobs.health_status = 503
            ready = httpx.get(f"{router.url}/readyz", timeout=10)
            assert ready.status_code == 503
            body = ready.json()
            assert body["ready"] is False
            assert body["arms"] == {"a": True, "b": False, "c": False}
            assert "arm 'b' answered /health with HTTP 503" in body["reason"]
            assert "arm 'c' is unreachable (ConnectionRefusedError)" in body["reason"]


def test_readyz_follows_the_arm_back_to_health(tmp_path: Path) -> None:
    with FakeUpstream() as a, FakeUpstream() as b, \
            RouterServer(dev_settings({"a": a.url, "b": b.url}, tmp_path)) as router:
        b.knobs.health_status = 503
        assert httpx.get(f"{router.url}/readyz", timeout=10).status_code == 503
        b.knobs.health_status = 200
        ready = httpx.get(f"{router.url}/readyz", timeout=10)
        assert ready.status_code == 200
        assert ready.json() == {"ready": True, "arms": {"a": True, "b": True}}
