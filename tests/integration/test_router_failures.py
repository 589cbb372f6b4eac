"""The router when upstreams or clients misbehave, against real local HTTP upstreams."""

from __future__ import annotations

import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml
from tests.support.fake_upstream import FakeUpstream, Knobs, closed_port_url, free_port
from tests.support.router_server import ListSink, RouterServer, dev_settings

from abserve.store import Store

pytestmark = pytest.mark.timeout(90)

BODY = {"model": "fake-model", "stream": True, "max_tokens": 8,
        "messages": [{"role": "user", "content": "hello"}]}
URL = "/v1/chat/completions"


@pytest.fixture
def ups() -> Iterator[tuple[FakeUpstream, FakeUpstream]]:
    with FakeUpstream() as a, FakeUpstream() as b:
        yield a, b


def serve(urls: dict[str, str], tmp_path: Path, **kw: object) -> tuple[RouterServer, ListSink]:
    sink = ListSink()
    return RouterServer(dev_settings(urls, tmp_path, **kw), sink), sink


def timed_stream(url: str) -> tuple[float, str]:
    t = time.perf_counter()
    text = httpx.post(url + URL, json=BODY, timeout=30).text
    return time.perf_counter() - t, text


def test_slow_shadow_does_not_delay_the_client(ups, tmp_path) -> None:
    a, b = ups
    a.knobs = Knobs(token_delay_s=0.01)
    router, sink = serve({"a": a.url, "b": b.url}, tmp_path)
    fast, slow = [], []
    with router:
        for _ in range(8):  # interleaved: shadow as fast as the primary, then 10x slower
            b.knobs = Knobs(token_delay_s=0.01)
            fast.append(timed_stream(router.url)[0])
            b.knobs = Knobs(token_delay_s=0.1)
            took, text = timed_stream(router.url)
            slow.append(took)
            assert text.endswith("data: [DONE]\n\n")
        records = sink.wait_for(16)
    # A shadow that held the client back would add 0.07-0.7 s to each slow-shadow request.
    # The best of 8 resists the noise of a shared 2-core machine (loaded, the spread
    # between runs of the same request reaches 0.2 s); quiet, the difference is ~1 ms.
    assert min(slow) - min(fast) < 0.020, (fast, slow)
    shadow = [x.arms["b"] for x in records if x.arms["b"].t_end and x.arms["b"].t_end > 0.6]
    assert len(shadow) == 8
    assert statistics.median(slow) < 0.4  # client done long before the shadow


def test_refused_shadow_leaves_client_served_and_is_recorded(ups, tmp_path) -> None:
    a, _ = ups
    router, sink = serve({"a": a.url, "b": closed_port_url()}, tmp_path)
    with router:
        _, text = timed_stream(router.url)
        (ex,) = sink.wait_for(1)
    assert text.endswith("data: [DONE]\n\n")
    assert "error" not in text
    assert ex.arms["a"].ok
    assert len(ex.arms["a"].token_ids) == 8
    assert ex.arms["b"].error_class == "connect"
    assert ex.arms["b"].status is None


def test_refused_primary_is_502_without_fallback(ups, tmp_path) -> None:
    _, b = ups
    router, sink = serve({"a": closed_port_url(), "b": b.url}, tmp_path)
    with router:
        resp = httpx.post(router.url + URL, json=BODY)
        (ex,) = sink.wait_for(1)
    assert resp.status_code == 502
    assert resp.json()["error"]["code"] == 502
    assert ex.arms["b"].ok  # the shadow was called and recorded, but never relayed


def test_primary_killed_mid_stream_client_sees_error_and_record_truncated(ups, tmp_path) -> None:
    a, b = ups
    a.knobs = Knobs(die_after_chunks=3, token_delay_s=0.01)
    router, sink = serve({"a": a.url, "b": b.url}, tmp_path)
    with router:
        resp = httpx.post(router.url + URL, json=BODY)
        (ex,) = sink.wait_for(1)
    assert resp.status_code == 200  # the head was already sent
    assert "[DONE]" not in resp.text
    assert '"error"' in resp.text
    assert ex.arms["a"].truncated
    assert ex.arms["a"].error_class == "truncated"
    assert len(ex.arms["a"].token_ids) == 2
    assert ex.arms["b"].ok


def test_first_token_and_idle_deadlines_are_separate(ups, tmp_path) -> None:
    a, b = ups
    deadlines = {"first_token_s": 0.5, "idle_s": 0.15}
    arms = {"a": {"url": a.url, "deadlines": deadlines}, "b": {"url": b.url,
                                                            "deadlines": deadlines}}
    router, sink = serve({"a": a.url, "b": b.url}, tmp_path, arms=arms)
    with router:
        a.knobs, b.knobs = Knobs(first_token_delay_s=0.3), Knobs(token_delay_s=0.3)
        ok = httpx.post(router.url + URL, json=BODY)  # slow prefill, within first-token
        a.knobs = Knobs(first_token_delay_s=1.0)
        late = httpx.post(router.url + URL, json=BODY)
        first, second = sink.wait_for(2)
    assert ok.text.endswith("data: [DONE]\n\n")
    assert first.arms["a"].ok
    assert first.arms["b"].error_class == "timeout_idle"  # stalled after its first token
    assert late.status_code == 504
    assert second.arms["a"].error_class == "timeout_first_token"


def test_client_disconnect_cancels_every_upstream_without_leaks(ups, tmp_path) -> None:
    a, b = ups
    a.knobs = b.knobs = Knobs(token_delay_s=0.2, n_tokens=50)
    router, sink = serve({"a": a.url, "b": b.url}, tmp_path)
    with router:
        baseline = router.task_names()
        with httpx.stream("POST", router.url + URL, json=BODY) as resp:
            next(resp.iter_raw())
            gone = time.monotonic()
        (ex,) = sink.wait_for(1, timeout_s=3)
        deadline = time.monotonic() + 2
        while (a.observed.active or b.observed.active) and time.monotonic() < deadline:
            time.sleep(0.01)
        left = router.task_names()
        state = router.app.state.router
    assert len(a.observed.cancelled_at) == 1
    assert len(b.observed.cancelled_at) == 1
    assert max(a.observed.cancelled_at + b.observed.cancelled_at) - gone < 1.0
    assert {arm.error_class for arm in ex.arms.values()} == {"cancelled"}
    assert len(left) == len(baseline)
    assert not [n for n in left if n.startswith("arm-")]
    assert not state.recorder.pending
    assert state.recorder.admitted == 0


def test_client_leaving_right_after_done_cancels_nothing(ups, tmp_path) -> None:
    """A client that closes as soon as it reads [DONE] (as OpenAI's client does) had its whole
    answer: the primary's record stays a success and a slower shadow streams to its end."""
    a, b = ups
    a.knobs = Knobs(n_tokens=5)
    b.knobs = Knobs(token_delay_s=0.1, n_tokens=5)
    router, sink = serve({"a": a.url, "b": b.url}, tmp_path)
    with router:
        with httpx.stream("POST", router.url + URL, json=BODY) as resp:
            for chunk in resp.iter_raw():
                if b"[DONE]" in chunk:
                    break
        (ex,) = sink.wait_for(1, timeout_s=5)
    assert ex.arms["a"].ok, (ex.arms["a"].error_class, ex.arms["a"].error_detail)
    assert ex.arms["b"].ok
    assert len(ex.arms["b"].token_ids) == 5
    assert b.observed.cancelled_at == []


async def test_concurrency_cap_answers_503_fast_with_retry_after(ups, tmp_path) -> None:
    a, b = ups
    a.knobs = b.knobs = Knobs(token_delay_s=0.1)
    router, sink = serve({"a": a.url, "b": b.url}, tmp_path, max_concurrency=2,
                         retry_after_s=3)
    with router:
        async with httpx.AsyncClient(base_url=router.url, timeout=30) as client, \
                client.stream("POST", URL, json=BODY) as r1, \
                client.stream("POST", URL, json=BODY) as r2:
            t = time.perf_counter()
            third = await client.post(URL, json=BODY)
            took = time.perf_counter() - t
            assert r1.status_code == r2.status_code == 200
        sink.wait_for(2)
    assert third.status_code == 503
    assert third.headers["retry-after"] == "3"
    assert took < 0.1
    assert third.json()["error"]["code"] == 503
    assert a.observed.requests == 2


def test_garbage_from_shadow_is_bad_response(ups, tmp_path) -> None:
    a, b = ups
    b.knobs = Knobs(garbage=True)
    router, sink = serve({"a": a.url, "b": b.url}, tmp_path)
    with router:
        _, text = timed_stream(router.url)
        (ex,) = sink.wait_for(1)
    assert text.endswith("data: [DONE]\n\n")
    assert ex.arms["b"].error_class == "bad_response"


def test_upstream_error_status_passes_through_as_a_direct_call_would(ups, tmp_path) -> None:
    a, b = ups
    a.knobs = Knobs(status=400)
    router, sink = serve({"a": a.url, "b": b.url}, tmp_path)
    with router:
        resp = httpx.post(router.url + URL, json=BODY)
        direct = httpx.post(a.url + URL, json=BODY)
        (ex,) = sink.wait_for(1)
    assert resp.status_code == 400
    assert resp.json() == direct.json()
    assert ex.arms["a"].error_class == "http_status"
    assert ex.arms["a"].status == 400


def test_sigterm_mid_stream_drains_streams_and_flushes_records(ups, tmp_path) -> None:
    """The router as a real subprocess (``abserve router --config``), stopped mid-stream."""
    a, b = ups
    a.knobs, b.knobs = Knobs(token_delay_s=0.05, n_tokens=20), Knobs(token_delay_s=0.1, n_tokens=20)
    port = free_port()
    config = {"arms": {"a": {"url": a.url}, "b": {"url": b.url, "role": "candidate"}},
              "primary": "a", "dev_mode": True, "run_dir": str(tmp_path), "run_id": "sigterm",
              "port": port, "drain_timeout_s": 10, "seeded_sampling": "allow"}
    path = tmp_path / "router.yaml"
    path.write_text(yaml.safe_dump(config))
    proc = subprocess.Popen([sys.executable, "-m", "abserve", "router", "--config", str(path)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(url + "/livez").status_code == 200:
                    break
            except httpx.TransportError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise
                time.sleep(0.1)
        texts: list[str] = []

        def client() -> None:
            with httpx.stream("POST", url + URL, json=BODY, timeout=30) as resp:
                texts.append("".join(resp.iter_text()))

        threads = [threading.Thread(target=client) for _ in range(3)]
        for t in threads:
            t.start()
        while a.observed.active < 3 or b.observed.active < 3:
            time.sleep(0.01)
        proc.send_signal(signal.SIGTERM)
        for t in threads:
            t.join(timeout=20)
        # uvicorn re-raises the captured SIGTERM after its graceful shutdown
        assert proc.wait(timeout=20) in (0, -signal.SIGTERM)
        log = proc.stdout.read().decode() if proc.stdout else ""
        assert "router down: drained, 0 exchanges cancelled" in log
    finally:
        if proc.poll() is None:
            proc.kill()
    assert len(texts) == 3
    assert all(t.endswith("data: [DONE]\n\n") for t in texts)
    store = Store.open(f"sqlite:///{tmp_path / 'abserve.db'}")
    records = list(store.iter_exchanges("sigterm"))
    run = store.get_run("sigterm")
    assert run is not None
    assert run.status == "completed"
    assert len(records) == 3
    assert all(x.arms["b"].ok and len(x.arms["b"].token_ids) == 20 for x in records)
