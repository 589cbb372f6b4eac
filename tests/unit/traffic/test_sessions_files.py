"""Sessions in traffic files: ShareGPT conversations of several turns, OpenAI lines with a
``session_id`` and abserve's corpus lines become turns carrying the recorded history, tagged
``session`` / ``turn`` / ``shared-prefix`` with the ``x-session-id`` header; a session out of
order, split, or with a turn over the router's limits is refused with its file and line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
from tests.support import traffic_files as tf

from abserve.traffic.corpus import build_corpus, write_jsonl
from abserve.traffic.profiles import load_profile
from abserve.traffic.sources import Accepted, FileSource, RequestsFileError, accepted, check_file
from abserve.traffic.sources.imported import Imported
from abserve.traffic.sources.prepare import prepare

TAGS = ("x-abserve-session", "x-abserve-turn", "x-abserve-shared-prefix", "x-session-id")


def source(path: Path, **options: Any) -> FileSource:
    return FileSource.model_validate({"path": path, "model": "tiny-llava", **options})


def sent(src: FileSource) -> list[Accepted]:
    items = list(accepted(src))
    assert all(isinstance(item, Accepted) for item in items), items
    return [item for item in items if isinstance(item, Accepted)]


def session_tags(item: Accepted) -> tuple[str | None, ...]:
    return tuple(item.entry.tags.get(name) for name in TAGS)


def test_a_sharegpt_conversation_is_replayed_turn_by_turn_with_its_recorded_history(
        tmp_path: Path) -> None:
    items = sent(source(tf.sharegpt_sessions_file(tmp_path)))
    assert [session_tags(i) for i in items] == [
        ("conv-a", "1", "no", "conv-a"), ("conv-a", "2", "yes", "conv-a"),
        ("conv-a", "3", "yes", "conv-a"), (None, None, None, None)]  # one turn: as before
    third = orjson.loads(items[2].entry.body)["messages"]
    assert [m["role"] for m in third] == ["system", "user", "assistant", "user", "assistant", "user"]
    assert (third[2]["content"], third[4]["content"]) == ("reply one", "reply two")  # recorded
    kinds = [[p["type"] for p in m["content"]] for m in third if m["role"] == "user"]
    assert kinds == [["text", "image_url"], ["text", "image_url", "text"], ["text"]]
    assert [i.entry.n_images for i in items[:3]] == [1, 2, 2]  # the history resends its images
    assert [i.entry.turn.think_s for i in items[:3] if i.entry.turn] == [0.0, 0.5, 2.0]
    assert orjson.loads(items[0].entry.body)["messages"] == third[:2]
    check = check_file(source(tmp_path / "chats.json"))
    assert (check.requests, check.sessions, check.summary()["sessions"]) == (4, 1, 1)
    assert "; 1 sessions" in check.describe()
    assert "session" not in check.summary()["tags"]  # per session, not a stratum
    assert check.summary()["tags"]["turn"] == ["1", "2", "3"]


def test_without_sessions_a_sharegpt_file_sends_first_turns_only(tmp_path: Path) -> None:
    items = sent(source(tf.sharegpt_sessions_file(tmp_path), sessions=False))
    assert len(items) == 2
    assert all(session_tags(i) == (None,) * 4 for i in items)
    assert "sessions" not in check_file(source(tmp_path / "chats.json", sessions=False)).summary()


def test_openai_lines_with_a_session_id_are_turns_and_their_bodies_are_sent_as_recorded(
        tmp_path: Path) -> None:
    rows = tf.session_rows(sessions=2, turns=3, think_s=0.25)
    path = tf.write_jsonl(tmp_path / "s.jsonl", rows)
    items = sent(source(path))
    assert [session_tags(i)[:3] for i in items] == [
        ("chat-0", "1", "no"), ("chat-0", "2", "yes"), ("chat-0", "3", "yes"),
        ("chat-1", "1", "no"), ("chat-1", "2", "yes"), ("chat-1", "3", "yes")]
    body = orjson.loads(items[2].entry.body)
    assert not {"session_id", "turn", "think_s"} & set(body)
    assert body["messages"] == rows[2]["messages"]
    assert [i.entry.turn.think_s for i in items if i.entry.turn] == [0, 0.25, 0.25] * 2


def test_a_shared_system_prompt_is_a_shared_prefix_of_a_later_sessions_first_turn(
        tmp_path: Path) -> None:
    rows = tf.session_rows(sessions=2, turns=1)
    for row in rows:  # both open with the same system prompt
        row["messages"] = [{"role": "system", "content": "be brief"}, *row["messages"][1:]]
    items = sent(source(tf.write_jsonl(tmp_path / "s.jsonl", rows)))
    assert [session_tags(i)[2] for i in items] == ["no", "yes"]
    rows[1]["messages"][0]["content"] = "be long"
    items = sent(source(tf.write_jsonl(tmp_path / "s.jsonl", rows)))
    assert [session_tags(i)[2] for i in items] == ["no", "no"]


def bad_session(tmp_path: Path, change: Any, **options: Any) -> str:
    rows = tf.session_rows(sessions=2, turns=3)
    change(rows)
    with pytest.raises(RequestsFileError) as info:
        check_file(source(tf.write_jsonl(tmp_path / "s.jsonl", rows), **options))
    return str(info.value)


@pytest.mark.parametrize(("change", "line", "reason"), [
    (lambda rows: rows.insert(2, rows.pop(1)), 2,
     "session chat-0 has turn 1, then turn 3: turns out of order"),
    (lambda rows: rows.pop(0), 1, "session chat-0 starts at turn 2"),
    (lambda rows: rows.append(rows[0] | {"turn": 4}), 7, "session chat-0 comes back after"),
    (lambda rows: rows[4].update(turn=0), 5, "'turn' must be an integer >= 1"),
    (lambda rows: rows[1].update(think_s=-1), 2, "'think_s' must be a number of seconds >= 0"),
    (lambda rows: rows[0].pop("session_id"), 1, "'turn' without a 'session_id'"),
])
def test_a_session_out_of_order_is_refused_with_its_file_and_line(
        tmp_path: Path, change: Any, line: int, reason: str) -> None:
    message = bad_session(tmp_path, change)
    assert message.startswith(f"{tmp_path / 's.jsonl'}:{line}: ")
    assert reason in message


def test_a_turn_over_the_routers_limits_is_refused_and_skip_invalid_drops_its_session(
        tmp_path: Path) -> None:
    def grow(rows: list[dict[str, Any]]) -> None:
        rows[1]["messages"][-1]["content"] = "word " * 400  # turn 2's, in turn 3's history

    message = bad_session(tmp_path, grow, max_body_bytes=1024)
    assert message.startswith(f"{tmp_path / 's.jsonl'}:2: turn 2 of session chat-0: body is ")
    assert "over the router's max_body_bytes (1024)" in message
    rows = tf.session_rows(sessions=2, turns=3)
    grow(rows)
    check = check_file(source(tf.write_jsonl(tmp_path / "s.jsonl", rows), max_body_bytes=1024,
                              skip_invalid=True))
    assert (check.requests, check.sessions, check.skipped, check.skipped_lines) == (4, 2, 2, [2, 3])


def test_a_sampled_file_keeps_or_drops_whole_sessions(tmp_path: Path) -> None:
    rows = tf.session_rows(sessions=40, turns=3)
    items = sent(source(tf.write_jsonl(tmp_path / "s.jsonl", rows), sample=0.5, seed=3))
    turns: dict[str, list[str]] = {}
    for item in items:
        session, turn, _, _ = session_tags(item)
        turns.setdefault(str(session), []).append(str(turn))
    assert 5 < len(turns) < 35
    assert all(numbers == ["1", "2", "3"] for numbers in turns.values())


def test_a_written_session_corpus_is_read_back_as_the_same_sessions(tmp_path: Path) -> None:
    profile = load_profile("conversations", {"session.turns": 3, "images.count": [1, 1]})
    entries = build_corpus(profile, 7, 6, "tiny-llava")
    write_jsonl(entries, tmp_path / "c.jsonl")
    items = sent(source(tmp_path / "c.jsonl"))
    assert [i.entry.body for i in items] == [e.body for e in entries]
    assert [session_tags(i) for i in items] == [
        tuple(e.tags[name] for name in TAGS) for e in entries]
    assert check_file(source(tmp_path / "c.jsonl")).sessions == 2


def test_a_sharegpt_conversation_out_of_order_is_refused(tmp_path: Path) -> None:
    rows = [{"id": "x", "conversations": [{"from": "human", "value": "a"}, {"from": "gpt", "value": "b"},
                                          {"from": "gpt", "value": "c"}, {"from": "human", "value": "d"}]}]
    path = tf.write_jsonl(tmp_path / "c.jsonl", rows)
    with pytest.raises(RequestsFileError, match=r"c\.jsonl:1: conversation turns out of order: "
                                                r"conversations\[2\] is from 'gpt'"):
        check_file(source(path, format="bench-sharegpt"))
    assert check_file(source(path, format="bench-sharegpt", sessions=False)).requests == 1


def test_a_reader_that_knows_a_shared_prefix_tags_it(tmp_path: Path) -> None:
    body = tf.chat_body(0, [])
    entry = prepare(Imported(1, "chat/completions", body, shared_prefix=True), source(tmp_path / "t"),
                    tmp_path, 0)
    assert entry.tags["x-abserve-shared-prefix"] == "yes"
    assert "x-abserve-session" not in entry.tags
    assert entry.turn is None
