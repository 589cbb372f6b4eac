"""Replaying sessions: a worker takes whole sessions (units), each at the recorded offset of its
first turn; a session's later turns wait for the turn before plus its think time times
``time_scale``; the ``conversations`` profile builds the same sessions on every run and shards
them whole."""

from __future__ import annotations

import time
from pathlib import Path

import orjson
import pytest
import yaml
from tests.support import traffic_files as tf

from abserve.config import ConfigError, load_experiment
from abserve.traffic.corpus import build_corpus, build_entry, write_jsonl
from abserve.traffic.profiles import ProfileError, load_profile
from abserve.traffic.run_state import RunOptions, SessionRunState, build_state
from abserve.traffic.sources import FileSource, check_file
from abserve.traffic.sources.replay import session_window


def options(tmp_path: Path, requests: int, src: FileSource | None = None, **extra: object) -> RunOptions:
    values: dict[str, object] = dict(
        host="http://127.0.0.1:9", profile="conversations", overrides={}, corpus_path=None,
        requests=requests, duration=0.0, corpus_size=0, shape="closed", rate=0.0, steps=4,
        sweep_rates=[], seed=None, run_id="r", out_dir=tmp_path / "out", max_error_rate=0.2,
        min_requests=1, model="tiny-llava", tokenize_url="", timeout_s=5.0, source=src)
    return RunOptions(**{**values, **extra})  # type: ignore[arg-type]


def timed_sessions(tmp_path: Path, think_s: float = 0.0) -> FileSource:
    rows = tf.session_rows(sessions=3, turns=2, think_s=think_s)
    for k, row in enumerate(rows):  # sessions start 1 s apart; later turns' times are ignored
        row["offset"] = float(k // 2) + (0.9 if k % 2 else 0.0)
    path = tf.write_jsonl(tmp_path / "s.jsonl", rows)
    src = FileSource(path=path, model="tiny-llava", time_scale=0.5)
    check = check_file(src)
    return src.model_copy(update={"checked": check.requests, "checked_sessions": check.sessions})


def test_a_worker_takes_whole_sessions_at_their_first_turns_offsets(tmp_path: Path) -> None:
    src = timed_sessions(tmp_path)
    units = list(session_window(src, 6))
    assert [[e.turn.turn for e in u.entries if e.turn] for u in units] == [[1, 2]] * 3
    assert [u.offset for u in units] == [0.0, 0.5, 1.0]
    mine = list(session_window(src, 6, shard=1, shards=2))
    assert [u.entries[0].tags["x-abserve-session"] for u in mine] == ["chat-1"]
    cut = list(session_window(src.model_copy(update={"skip": 1, "limit": 4}), 6))
    assert [[e.turn.turn for e in u.entries if e.turn] for u in cut] == [[2], [1, 2], [1]]


def test_a_later_turn_waits_for_the_turn_before_plus_its_scaled_think_time(tmp_path: Path) -> None:
    src = timed_sessions(tmp_path, think_s=0.2)
    state = build_state(options(tmp_path, 6, src, shape="closed"))
    assert isinstance(state, SessionRunState)
    job = state.take()
    assert job is not None
    assert len(job.later) == 1
    assert job.arrival is not None
    assert job.arrival.offset == 0.0
    ended = time.perf_counter()
    follow = state.follow(job.later[0], ended)
    assert time.perf_counter() - ended >= 0.1  # 0.2 s think x time_scale 0.5
    assert follow.scheduled_at == pytest.approx(ended + 0.1)
    assert follow.entry.tags["x-abserve-turn"] == "2"
    assert state.in_flight == 1  # the session holds one user until its last turn
    state.close()


def test_a_file_without_sessions_is_replayed_request_by_request_as_before(tmp_path: Path) -> None:
    src = FileSource(path=tf.openai_file(tmp_path, n=3), model="tiny-llava", replay="closed")
    state = build_state(options(tmp_path, 4, src))
    assert not isinstance(state, SessionRunState)
    job = state.take()
    assert job is not None
    assert job.later == ()
    assert "x-abserve-session" not in job.entry.tags
    state.close()


def test_the_conversations_profile_is_deterministic_and_spreads_its_images(tmp_path: Path) -> None:
    profile = load_profile("conversations", {"session.turns": 4, "images.count": [3, 3]})
    entries = build_corpus(profile, 11, 8, "m")
    assert [e.body for e in entries] == [e.body for e in build_corpus(profile, 11, 8, "m")]
    assert [e.n_images for e in entries] == [1, 2, 3, 3] * 2  # 3 images over 4 turns
    last = orjson.loads(entries[3].body)["messages"]
    assert [m["role"] for m in last] == ["system"] + ["user", "assistant"] * 3 + ["user"]
    assert last[0] == orjson.loads(entries[4].body)["messages"][0]  # one system prompt
    assert [(e.turn.session, e.turn.turn, e.turn.shared) for e in entries if e.turn][3:5] == [
        ("s0-11", 4, True), ("s1-11", 1, True)]  # the shared system prompt: a shared prefix
    alone = load_profile("conversations", {"session.system_words": 0})
    assert not [e.turn.shared for e in build_corpus(alone, 11, 8, "m") if e.turn][4]
    halves = [build_corpus(profile, 11, 10, "m", shard=k, shards=2) for k in (0, 1)]
    assert [e.index for e in halves[1]] == [4, 5, 6, 7]  # whole sessions per worker
    assert sorted(e.index for h in halves for e in h) == list(range(10))
    assert build_entry(load_profile("many-items"), 1, 0, "m").turn is None


def test_a_generated_session_run_hands_out_sessions_at_an_open_loop_plans_arrivals(
        tmp_path: Path) -> None:
    opts = options(tmp_path, 8, overrides={"session.turns": 4, "session.think_s": 0.5},
                   shape="constant", rate=100.0)
    state = build_state(opts)
    assert isinstance(state, SessionRunState)
    jobs = [state.take(), state.take()]
    assert state.take() is None
    assert [(j.arrival.offset, len(j.later)) for j in jobs if j and j.arrival] == [(0.0, 3), (0.01, 3)]
    first = jobs[0]
    assert first is not None
    assert [e.turn.think_s for e in first.later if e.turn] == [0.5] * 3
    state.close()


def test_a_session_profile_refuses_what_it_cannot_build() -> None:
    with pytest.raises(ProfileError, match="need text"):
        load_profile("conversations", {"text.words": [0, 4]})
    with pytest.raises(ProfileError, match="turns"):
        load_profile("conversations", {"session.turns": 0})


def test_a_config_counts_a_files_sessions_and_refuses_a_router_that_answers_with_the_primary(
        tmp_path: Path) -> None:
    tf.write_jsonl(tmp_path / "chats.jsonl", tf.session_rows(sessions=2, turns=2))
    config = {"name": "t", "arms": {"a": {"lookup": "linear"}, "b": {"lookup": "bisect"}},
              "load": {"profiles": [{"kind": "file", "file": {"path": "chats.jsonl"}}]}}
    (tmp_path / "exp.yaml").write_text(yaml.safe_dump(config))
    item = load_experiment(tmp_path / "exp.yaml").load.profiles[0]
    assert item.imported is not None
    assert (item.requests, item.imported["sessions"]) == (4, 2)
    config["router"] = {"client_waits_for": "primary", "acknowledge": "before_store"}
    (tmp_path / "exp.yaml").write_text(yaml.safe_dump(config))
    with pytest.raises(ConfigError, match="client_waits_for: primary does not wait for"):
        load_experiment(tmp_path / "exp.yaml")


def test_a_written_session_corpus_replayed_with_corpus_gives_each_worker_whole_sessions(
        tmp_path: Path) -> None:
    profile = load_profile("conversations", {"session.turns": 2})
    write_jsonl(build_corpus(profile, 3, 6, "m"), tmp_path / "c.jsonl")
    got = []
    for shard in (0, 1):
        opts = options(tmp_path, 6, corpus_path=tmp_path / "c.jsonl", shard=shard, shards=2,
                       node=f"w{shard}")
        state = build_state(opts)
        assert isinstance(state, SessionRunState)
        while (job := state.take()) is not None:
            got.append((shard, [e.index for e in (job.entry, *job.later)]))
        state.close()
    assert got == [(0, [0, 1]), (0, [4, 5]), (1, [2, 3])]
