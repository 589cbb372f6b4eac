"""Admission across workers (``router.admission``): the limits hold for the router as a whole.

``SharedCounts`` on its own (slots, sums, a restarted worker's slot), then two real router
apps sharing one counts file as two workers do, each with its own store and port, against
a slow real upstream: one worker may take every slot of ``max_concurrency`` (with
per-worker shares it refused the second client while the other worker was idle), and once
the router as a whole is full the other worker refuses too.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.support.fake_upstream import FakeUpstream, Knobs
from tests.support.router_server import RouterServer, dev_settings

from abserve.router.admission import SharedCounts, create_counts

pytestmark = pytest.mark.timeout(60)
CHAT = {"model": "fake-model", "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 4, "temperature": 0, "stream": True}


def test_counts_are_per_worker_slots_summed(tmp_path: Path) -> None:
    path = tmp_path / "admission.bin"
    create_counts(path, 3)
    first, second = SharedCounts(path, 0), SharedCounts(path, 2)
    first.publish(2, 5)
    second.publish(1, 1)
    assert first.totals() == second.totals() == (3, 6)
    restarted = SharedCounts(path, 2)  # a dead worker's slot is zeroed by its successor
    assert first.totals() == (2, 5)
    with first.locked():
        assert restarted.totals() == (2, 5)
    with pytest.raises(ValueError, match="no slot 3"):
        SharedCounts(path, 3)
    for counts in (first, second, restarted):
        counts.close()


def post(url: str) -> int:
    return httpx.post(f"{url}/v1/chat/completions", json=CHAT, timeout=30).status_code


def wait_until(check: Any, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.05)


def test_two_workers_admit_against_the_router_wide_limit(tmp_path: Path) -> None:
    path = tmp_path / "admission.bin"
    create_counts(path, 2)
    shared = [SharedCounts(path, i) for i in range(2)]
    with FakeUpstream(Knobs(first_token_delay_s=2.0)) as a, FakeUpstream() as b:
        settings = [dev_settings({"a": a.url, "b": b.url}, tmp_path / f"w{i}",
                                 max_concurrency=2) for i in range(2)]
        with RouterServer(settings[0], shared=shared[0]) as one, \
                RouterServer(settings[1], shared=shared[1]) as other, \
                ThreadPoolExecutor(2) as pool:
            slow = [pool.submit(post, one.url) for _ in range(2)]  # both slots, one worker
            wait_until(lambda: shared[1].totals()[0] == 2)
            refused = httpx.post(f"{other.url}/v1/chat/completions", json=CHAT, timeout=10)
            assert refused.status_code == 503
            assert "capacity" in refused.text
            assert [f.result() for f in slow] == [200, 200]
            wait_until(lambda: shared[0].totals() == (0, 0))
            assert post(other.url) == 200
    for counts in shared:
        counts.close()
