"""Sessions through the real router: ``abserve load --requests-file`` (a real headless Locust
run) replays a file of two 3-turn sessions against the router app on a real socket, fanning out
to two real upstreams, arm b slower than arm a. Turn k reaches BOTH arms only after turn k-1
ended on BOTH (the router's answer ends once every arm has, and its exchange is stored) plus
the turn's think time; the ``x-session-id`` header reaches both arms unchanged and the router
records it with the session, turn and shared-prefix tags."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from tests.support import traffic_files as tf
from tests.support.fake_upstream import FakeUpstream, Knobs
from tests.support.router_server import ListSink, RouterServer, dev_settings

REPO = Path(__file__).resolve().parents[2]
THINK_S = 0.15


class TimedUpstream(FakeUpstream):
    """Notes each request's headers, when it arrived and when its answer ended."""

    def __init__(self, knobs: Knobs) -> None:
        super().__init__(knobs)
        self.seen: list[dict[str, Any]] = []

    async def _complete(self, request: Request) -> Response:
        start = time.monotonic()
        turn = len(orjson.loads(await request.body())["messages"]) // 2  # system, then 2 a turn
        note: dict[str, Any] = {"headers": dict(request.headers), "start": start, "turn": str(turn)}
        self.seen.append(note)
        response = await super()._complete(request)
        if isinstance(response, StreamingResponse):
            inner = response.body_iterator

            async def timed() -> AsyncIterator[Any]:
                async for chunk in inner:
                    yield chunk
                note["end"] = time.monotonic()

            response.body_iterator = timed()
        return response

    def turns(self) -> dict[tuple[str, str], dict[str, Any]]:
        """Each request by its session (the affinity header, as the arm received it) and turn."""
        return {(n["headers"].get("x-session-id", "?"), n["turn"]): n for n in self.seen}


@pytest.fixture
def arms() -> Iterator[tuple[TimedUpstream, TimedUpstream]]:
    slow = Knobs(n_tokens=4, first_token_delay_s=0.3)
    with TimedUpstream(Knobs(n_tokens=4)) as a, TimedUpstream(slow) as b:
        yield a, b


@pytest.mark.timeout(120)
def test_turn_k_waits_for_turn_k_minus_1_on_every_arm_and_the_session_header_reaches_both(
        arms: tuple[TimedUpstream, TimedUpstream], tmp_path: Path) -> None:
    a, b = arms
    path = tf.write_jsonl(tmp_path / "chats.jsonl", tf.session_rows(sessions=2, turns=3, think_s=THINK_S))
    sink = ListSink()
    settings = dev_settings({"a": a.url, "b": b.url}, tmp_path, client_waits_for="all_arms",
                            acknowledge="stored")
    with RouterServer(settings, sink) as router:
        proc = subprocess.run(
            [sys.executable, "-m", "abserve", "load", "--requests-file", str(path), "--host", router.url,
             "--model", "fake-model", "--users", "2", "--replay", "closed", "--out", str(tmp_path / "out")],
            cwd=REPO, text=True, capture_output=True, timeout=100,
            env={**os.environ, "PYTHONPATH": str(REPO / "service")})
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "6 requests (6 chat/completions), 0 images; 2 sessions" in proc.stdout
        records = sink.wait_for(6)
    on_a, on_b = a.turns(), b.turns()
    assert set(on_a) == set(on_b) == {(f"chat-{s}", str(t)) for s in range(2) for t in (1, 2, 3)}
    for session in ("chat-0", "chat-1"):
        for turn in (2, 3):
            ended = max(arm[(session, str(turn - 1))]["end"] for arm in (on_a, on_b))
            assert on_b[(session, str(turn - 1))]["end"] == ended  # b, the slow arm, ends last
            for arm in (on_a, on_b):
                assert arm[(session, str(turn))]["start"] >= ended + THINK_S
        for arm in (on_a, on_b):
            assert {arm[(session, t)]["headers"]["x-session-id"] for t in "123"} == {session}
    starts = [on_b[(s, "1")]["start"] for s in ("chat-0", "chat-1")]
    ends = [on_b[(s, "3")]["end"] for s in ("chat-0", "chat-1")]
    assert max(starts) < min(ends)  # the two sessions ran at once (two users)
    tags = sorted((r.tags["session"], r.tags["turn"], r.tags["shared-prefix"], r.tags["x-session-id"])
                  for r in records)
    assert tags == [(f"chat-{s}", str(t), "no" if t == 1 else "yes", f"chat-{s}")
                    for s in range(2) for t in (1, 2, 3)]
