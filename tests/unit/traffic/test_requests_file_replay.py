"""A traffic file in a run: the config item of kind ``file`` (checked when the config loads,
paths relative to the config, the media hosts router and arms both allow), the replay window
(recorded gaps times ``time_scale``, blocks sending consecutive parts, workers sharing it),
the load process's open and closed loops, and ``abserve load --requests-file`` refusing a bad
file before Locust starts."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.support import traffic_files as tf
from typer.testing import CliRunner

from abserve.cli import app
from abserve.config import ConfigError, ExperimentConfig, load_experiment
from abserve.traffic import run_state, runner
from abserve.traffic.run_state import RunOptions, build_state
from abserve.traffic.sources import FileSource, RequestsFileError, window
from abserve.traffic.sources.replay import block_skip

URL = "https://images.example.com/cat.png"


def timed_file(folder: Path, offsets: list[float]) -> Path:
    rows = [{**tf.chat_body(k, []), "offset": t} for k, t in enumerate(offsets)]
    return tf.write_jsonl(folder / "timed.jsonl", rows)


def lines_of(src: FileSource, total: int, shard: int = 0, shards: int = 1) -> list[tuple[int, float]]:
    return [(int(e.tags["x-abserve-source-line"]), round(t, 6))
            for e, t in window(src, total, shard, shards)]


def test_recorded_gaps_are_scaled_and_a_window_wraps_around(tmp_path: Path) -> None:
    src = FileSource(path=timed_file(tmp_path, [10, 11, 13, 12, 14]), model="m", time_scale=0.5)
    # line 4 was recorded before line 3: sent with it; line 5 keeps its recorded time
    assert lines_of(src, 5) == [(1, 0.0), (2, 0.5), (3, 1.5), (4, 1.5), (5, 2.0)]
    later = src.model_copy(update={"skip": 3, "limit": 4})
    assert lines_of(later, 5) == [(4, 0.0), (5, 1.0), (1, 1.0), (2, 1.5)]
    assert lines_of(src, 5, shard=1, shards=2) == [(2, 0.5), (4, 1.5)]
    assert block_skip([3, 2], 0) == 0
    assert block_skip([3, 2], 3) == 3 + 2 + 3


def options(tmp_path: Path, src: FileSource, requests: int) -> RunOptions:
    return RunOptions(host="http://127.0.0.1:9", profile="", overrides={}, corpus_path=None,
                      requests=requests, duration=0.0, corpus_size=0, shape="closed", rate=0.0,
                      steps=0, sweep_rates=[], seed=None, run_id="r", out_dir=tmp_path / "out",
                      max_error_rate=0.2, min_requests=1, model="tiny-llava", tokenize_url="",
                      timeout_s=5.0, source=src)


def test_the_load_process_replays_open_loop_at_the_recorded_times(tmp_path: Path) -> None:
    src = FileSource(path=timed_file(tmp_path, [0, 0.2, 0.3]), time_scale=0.5, label="file-timed")
    state = build_state(options(tmp_path, src, 3))
    assert state.options.profile_name == "file-timed"
    began = time.perf_counter()
    jobs = [state.take() for _ in range(3)]
    assert state.take() is None
    assert [round(j.arrival.offset, 6) for j in jobs if j and j.arrival] == [0.0, 0.1, 0.15]
    assert time.perf_counter() - began >= 0.14  # take() waited for the last one's time
    assert jobs[0] is not None
    assert jobs[0].entry.tags["x-abserve-profile"] == "file-timed"
    state.close()


def test_closed_loop_sends_back_to_back_and_requests_can_exceed_the_file(tmp_path: Path) -> None:
    src = FileSource(path=timed_file(tmp_path, [0, 50]), replay="closed")
    state = build_state(options(tmp_path, src, 5))
    jobs = [state.take() for _ in range(5)]
    assert all(j is not None and j.scheduled_at is None for j in jobs)
    assert [j.entry.tags["x-abserve-source-line"] for j in jobs if j] == ["1", "2", "1", "2", "1"]
    assert state.take() is None
    state.close()


def experiment(folder: Path, item: dict[str, Any], **extra: Any) -> Path:
    config = {"name": "t", "arms": {"a": {"lookup": "linear"}, "b": {"lookup": "bisect"}},
              "load": {"profiles": [item]}, "blocks": {"count": 2}, **extra}
    path = folder / "exp.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def test_a_file_item_is_checked_when_the_config_loads(tmp_path: Path) -> None:
    tf.openai_file(tmp_path / "data", n=5)
    config = load_experiment(experiment(tmp_path, {"kind": "file", "file": {"path": "data/gateway.jsonl"}}))
    item = config.load.profiles[0]
    assert (item.profile, item.requests) == ("file-gateway", 6)  # every line, path from the config
    assert item.imported is not None
    assert (item.imported["requests"], item.imported["images"]) == (6, 4)
    sent = config.file_source(item, skip=3)
    assert (sent.model, sent.skip, sent.checked) == ("tiny-llava", 3, 6)
    twice = {"kind": "file", "file": {"path": "data/gateway.jsonl"}}
    with pytest.raises(ConfigError, match="'file-gateway' is named twice"):
        load_experiment(experiment(tmp_path, twice, load={"profiles": [twice, twice]}))
    experiment(tmp_path, twice)
    (tmp_path / "data" / "gateway.jsonl").write_text('{"model": "m", "messages": [\n')
    with pytest.raises(ConfigError, match=r"gateway\.jsonl:1: not valid JSON"):
        load_experiment(tmp_path / "exp.yaml")


def media_config(tmp_path: Path, a: str | None, b: str | None, router: list[str]) -> dict[str, Any]:
    path = tf.write_jsonl(tmp_path / "u.jsonl", [tf.chat_body(0, [URL]), tf.chat_body(1, [URL])])
    arms = {name: {"lookup": "linear", **({"args": {"--allowed-media-domains": host}} if host else {})}
            for name, host in (("a", a), ("b", b))}
    return {"name": "t", "arms": arms, "router": {"allowed_media_hosts": router},
            "load": {"profiles": [{"kind": "file", "file": {"path": str(path)}}]}}


@pytest.mark.parametrize(("a", "b", "router", "allowed"), [
    ("images.example.com", "images.example.com", ["Images.Example.com."], True),
    ("images.example.com", None, ["images.example.com"], False),  # arm b would not fetch it
    ("images.example.com", "images.example.com", [], False),  # the router would refuse it
    ("other.example.com", "images.example.com", ["images.example.com"], False),
])
def test_image_urls_need_the_router_and_every_arm_to_allow_their_host(
        tmp_path: Path, a: str | None, b: str | None, router: list[str], allowed: bool) -> None:
    data = media_config(tmp_path, a, b, router)
    if allowed:
        assert ExperimentConfig.model_validate(data).load.profiles[0].requests == 2
    else:
        with pytest.raises(ValueError, match=r"u\.jsonl:1: image URL refused"):
            ExperimentConfig.model_validate(data)


def test_abserve_load_refuses_a_bad_file_before_locust_starts(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    started: list[object] = []
    monkeypatch.setattr(runner, "run_load", started.append)
    rows: list[Any] = [tf.chat_body(0, []), tf.chat_body(1, ["images/none.png"])]
    path = tf.write_jsonl(tmp_path / "bad.jsonl", rows)
    result = CliRunner().invoke(app, ["load", "--requests-file", str(path), "--host", "http://127.0.0.1:9"])
    assert result.exit_code == 4, result.output
    assert f"{path}:2: image file not found" in result.output
    assert started == []
    result = CliRunner().invoke(app, ["load", "--requests-file", str(path), "--host", "http://127.0.0.1:9",
                                      "--skip-invalid", "--time-scale", "0.5", "--sample", "1"])
    assert "1 invalid lines skipped (lines 2)" in result.output
    (spec,) = started
    assert isinstance(spec, runner.LoadSpec)
    assert (spec.requests, spec.profile, spec.source is not None) == (1, "file-bad", True)
    assert spec.source is not None
    assert spec.source.time_scale == 0.5


def test_a_file_that_changes_after_its_check_stops_the_load_with_its_reason(tmp_path: Path) -> None:
    path = timed_file(tmp_path, [0, 0, 0])
    state = build_state(options(tmp_path, FileSource(path=path, replay="closed"), 3))
    path.write_text(path.read_text().splitlines()[0] + "\n")  # two lines gone
    assert state.take() is not None
    with pytest.raises(RequestsFileError, match="1 requests now, 3 when checked"):
        state.take()
    state.close()


def test_a_load_process_given_the_runs_count_does_not_walk_the_file_first(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def walked(_: FileSource) -> None:
        raise AssertionError("the file was walked again")

    monkeypatch.setattr(run_state, "check_file", walked)
    src = FileSource(path=timed_file(tmp_path, [0, 1]), replay="closed", checked=2)
    state = build_state(options(tmp_path, src, 0))
    assert len(state.entries) == 2
    state.close()


def test_abserve_load_refuses_options_that_do_not_apply_to_a_file(tmp_path: Path) -> None:
    path = tf.write_jsonl(tmp_path / "t.jsonl", [tf.chat_body(0, [])])
    for extra in (["--profile", "many-items"], ["--shape", "poisson", "--rate", "2"], ["--duration", "5"]):
        result = CliRunner().invoke(app, ["load", "--requests-file", str(path), "--host", "http://127.0.0.1:9",
                                          *extra])
        assert result.exit_code == 4, (extra, result.output)  # a usage error, before anything is read
        assert "Invalid value" in result.output
