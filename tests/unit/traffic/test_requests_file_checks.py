"""A traffic file is checked whole before anything is sent: bad lines fail with their file and
line (or are counted and listed with ``skip_invalid``), image URLs follow the router's media
rule, the router's limits hold, and sampling is sent, made greedy or refused as the run says."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
from tests.support import traffic_files as tf

from abserve.traffic.sources import FileSource, RequestsFileError, check_file, window
from abserve.traffic.sources.reader import kept


def source(path: Path, **options: Any) -> FileSource:
    return FileSource.model_validate({"path": path, "model": "tiny-llava", **options})


def good_rows(n: int = 4) -> list[dict[str, Any]]:
    return [tf.chat_body(k, []) for k in range(n)]


def refused(tmp_path: Path, bad: Any, **options: Any) -> str:
    """The error of a file whose third line is ``bad`` (a row, or raw text)."""
    path = tmp_path / "t.jsonl"
    rows = [orjson.dumps(r).decode() for r in good_rows()]
    rows[2] = bad if isinstance(bad, str) else orjson.dumps(bad).decode()
    path.write_text("\n".join(rows) + "\n")
    with pytest.raises(RequestsFileError) as info:
        check_file(source(path, **options))
    return str(info.value)


@pytest.mark.parametrize(("bad", "reason"), [
    ('{"model": "m", "messages": [', "not valid JSON"),
    ([1, 2], "expected a JSON object"),
    ({"model": "m", "messages": [{"role": "user", "content": [{"type": "hologram", "x": 1}]}],
      "temperature": 0},
     "content part"),
    ({"foo": 1}, "unknown line format"),
    (tf.chat_body(0, ["images/missing.png"]), "image file not found"),
    ({"model": "m", "messages": "hi", "temperature": 0}, "the router would refuse it"),
    ({"model": "m", "prompt": "x", "temperature": 0, "timestamp": "yesterday"}, "timestamp"),
    ({**tf.chat_body(0, []), "tags": {"Bad Key": "1"}}, "tag key"),
    ({**tf.chat_body(0, []), "tags": {"profile": "mine"}}, "reserved"),
])
def test_a_bad_line_fails_with_its_file_and_line_number(tmp_path: Path, bad: Any, reason: str) -> None:
    message = refused(tmp_path, bad)
    assert f"{tmp_path / 't.jsonl'}:3: " in message
    assert reason in message


def test_a_body_over_the_routers_limits_is_refused(tmp_path: Path) -> None:
    tf.write_images(tmp_path)
    big = tf.chat_body(0, ["images/img0.png"] * 3)
    assert "over the router's max_images (2)" in refused(tmp_path, big, max_images=2)
    assert len(orjson.dumps(big)) < 600  # over the limit once its images are inlined
    assert "over the router's max_body_bytes (600)" in refused(tmp_path, big, max_body_bytes=600)


def test_http_image_urls_pass_only_for_hosts_router_and_arms_allow(tmp_path: Path) -> None:
    url = tf.chat_body(0, ["https://images.example.com/cat.png"])
    assert "host is not allowed" in refused(tmp_path, url)
    assert "never fetches" in refused(tmp_path, tf.chat_body(0, ["http://169.254.169.254/x.png"]),
                                      allowed_media_hosts=["169.254.169.254"])
    path = tf.write_jsonl(tmp_path / "ok.jsonl", [url])
    check = check_file(source(path, allowed_media_hosts=["images.example.com"]))
    assert check.requests == 1
    assert check.images == 1
    (entry, _), = window(source(path, allowed_media_hosts=["images.example.com"]), 1)
    assert "https://images.example.com/cat.png" in entry.body.decode()  # sent as is, not fetched


def test_skip_invalid_counts_and_lists_the_bad_lines(tmp_path: Path) -> None:
    rows: list[Any] = good_rows(6)
    rows[1] = {"foo": 1}
    rows[4] = tf.chat_body(0, ["nope.png"])
    path = tf.write_jsonl(tmp_path / "t.jsonl", rows)
    check = check_file(source(path, skip_invalid=True))
    assert (check.requests, check.skipped, check.skipped_lines) == (4, 2, [2, 5])
    assert "2 invalid lines skipped (lines 2, 5)" in check.describe()
    assert [int(e.tags["x-abserve-source-line"]) for e, _ in window(
        source(path, skip_invalid=True), check.requests)] == [1, 3, 4, 6]


def test_sampling_is_refused_with_a_count_unless_greedy_or_allowed(tmp_path: Path) -> None:
    rows = good_rows(5)
    rows[1]["temperature"] = 0.7
    del rows[3]["temperature"]  # unset: vLLM samples
    path = tf.write_jsonl(tmp_path / "t.jsonl", rows)
    with pytest.raises(RequestsFileError, match=r"2 requests ask for sampling \(lines 2, 4\)"):
        check_file(source(path))
    with pytest.raises(RequestsFileError, match="ask for sampling"):
        check_file(source(path, skip_invalid=True))  # a policy, not a bad line
    greedy = check_file(source(path, greedy=True))
    assert greedy.sampling["forced-greedy"] == 2
    assert "2 asked for sampling, sent greedy" in greedy.describe()
    sent = [(orjson.loads(e.body), e.tags) for e, _ in window(source(path, greedy=True), 5)]
    assert [b["temperature"] for b, _ in sent] == [0] * 5
    assert [t.get("x-abserve-sampling") for _, t in sent] == [None, "forced-greedy", None,
                                                              "forced-greedy", None]
    seeded = [orjson.loads(e.body) for e, _ in window(source(path, seeded_sampling="allow"), 5)]
    assert seeded[1]["temperature"] == 0.7
    assert "temperature" not in seeded[3]  # sent as it is


def test_the_sample_is_deterministic_and_about_its_fraction(tmp_path: Path) -> None:
    path = tf.write_jsonl(tmp_path / "t.jsonl", good_rows(400))
    total = check_file(source(path, sample=0.1, seed=7)).requests
    a = [e.tags["x-abserve-source-line"] for e, _ in window(source(path, sample=0.1, seed=7), total)]
    b = [e.tags["x-abserve-source-line"] for e, _ in window(source(path, sample=0.1, seed=7), len(a))]
    assert a == b
    assert 20 <= len(a) <= 60
    other = [line for line in range(1, 401) if kept(source(path, sample=0.1, seed=8), line)]
    assert other != [int(x) for x in a]


def test_a_missing_or_empty_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(RequestsFileError, match="no such file"):
        check_file(source(tmp_path / "nope.jsonl"))
    (tmp_path / "empty.jsonl").write_text("\n\n")
    with pytest.raises(RequestsFileError, match="no request to send"):
        check_file(source(tmp_path / "empty.jsonl"))


def test_without_a_run_model_each_line_must_name_one(tmp_path: Path) -> None:
    path = tf.bench_custom_file(tmp_path)
    with pytest.raises(RequestsFileError, match=r"custom\.jsonl:1: .*names no 'model'"):
        check_file(FileSource(path=path))


def test_many_bad_lines_are_counted_and_the_first_twenty_named(tmp_path: Path) -> None:
    rows = good_rows(30)
    for row in rows[:25]:
        row["temperature"] = 1.0
    path = tf.write_jsonl(tmp_path / "t.jsonl", rows)
    named = ", ".join(str(n) for n in range(1, 21))
    with pytest.raises(RequestsFileError, match=rf"25 requests ask for sampling \(lines {named} and 5 more"):
        check_file(source(path))
    rows = [{"foo": 1}] * 22 + good_rows(1)
    check = check_file(source(tf.write_jsonl(tmp_path / "u.jsonl", rows), skip_invalid=True))
    assert (check.skipped, len(check.skipped_lines)) == (22, 20)
    assert "22 invalid lines skipped (lines 1, 2," in check.describe()
    assert "20 and 2 more)" in check.describe()
