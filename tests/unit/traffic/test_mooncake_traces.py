"""Mooncake-style traces (``abserve.traffic.sources.mooncake``): hash blocks become shared prompt
text, deterministically; images ride on full blocks; bad lines are refused with file and line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from abserve.traffic.sources import FileSource, RequestsFileError, accepted, check_file, window
from abserve.traffic.sources.mooncake import WORDS, SeenIds, block_text
from abserve.traffic.sources.reader import Accepted


def trace(tmp_path: Path, lines: list[dict[str, Any]], name: str = "t.jsonl") -> Path:
    path = tmp_path / name
    path.write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in lines))
    return path


def line(ts: float, n_in: int, ids: list[int], n_out: int = 4) -> dict[str, Any]:
    return {"timestamp": ts, "input_length": n_in, "output_length": n_out, "hash_ids": ids}


def source(path: Path, **options: Any) -> FileSource:
    return FileSource.model_validate({"path": path, "model": "tiny-llava", **options})


def sent(path: Path, **options: Any) -> list[Accepted]:
    items = list(accepted(source(path, **options)))
    assert all(isinstance(i, Accepted) for i in items), items
    return [i for i in items if isinstance(i, Accepted)]


def parts(item: Accepted) -> list[dict[str, Any]]:
    content: list[dict[str, Any]] = orjson.loads(item.entry.body)["messages"][0]["content"]
    return content


def text(item: Accepted) -> str:
    return "".join(p["text"] for p in parts(item) if p["type"] == "text")


def words(item: Accepted) -> list[str]:
    return text(item).split(" ")[1:]  # every block starts with a space


def test_a_trace_line_becomes_a_greedy_streamed_chat_request_at_its_milliseconds(
        tmp_path: Path) -> None:
    items = sent(trace(tmp_path, [line(0, 600, [0, 1], n_out=7), line(250, 40, [2])]))
    assert [i.arrival for i in items] == [0.0, 0.25]
    body = orjson.loads(items[0].entry.body)
    assert (body["max_tokens"], body["temperature"], body["stream"]) == (7, 0.0, True)
    assert items[0].entry.path == "/v1/chat/completions"
    assert [len(words(i)) for i in items] == [600, 40]  # one word per token
    assert items[0].entry.token_estimate == 600
    assert set(words(items[0])) <= set(WORDS)


def test_lines_share_exactly_the_blocks_their_hash_ids_share(tmp_path: Path) -> None:
    a, b, c = sent(trace(tmp_path, [line(0, 1500, [0, 1, 2]), line(1, 1100, [0, 1, 7]),
                                    line(2, 1536, [5, 1, 2])]), trace={"block_size": 512})
    wa, wb, wc = words(a), words(b), words(c)
    assert wa[:1024] == wb[:1024]  # blocks 0 and 1 shared
    assert wa[1024:1100] != wb[1024:1100]  # block 2 against block 7
    assert wa[:512] != wc[:512]  # block 0 against block 5: the prefix differs from the start
    assert wc[512:1024] == wa[512:1024]  # the same hash id gives the same block, anywhere
    # a partial last block is the start of its hash id's full block
    assert wa[1024:] == wc[1024:1500]
    assert [i.entry.tags["x-abserve-shared-prefix"] for i in (a, b, c)] == ["no", "yes", "no"]


def test_two_walks_send_the_same_bytes_and_another_seed_other_bytes(tmp_path: Path) -> None:
    path = trace(tmp_path, [line(k * 20, 300, [k % 3, 10 + k]) for k in range(6)],)
    first = [i.entry.body for i in sent(path, trace={"block_size": 256})]
    again = [i.entry.body for i in sent(path, trace={"block_size": 256})]
    other = [i.entry.body for i in sent(path, trace={"block_size": 256}, seed=1)]
    assert first == again
    assert all(x != y for x, y in zip(first, other, strict=True))
    assert block_text(0, 3, 5, source(path).trace) == block_text(0, 3, 5, source(path).trace)


def test_images_ride_on_full_blocks_and_match_where_blocks_are_shared(tmp_path: Path) -> None:
    opts = {"trace": {"block_size": 64, "images_per_block": 2}}
    a, b = sent(trace(tmp_path, [line(0, 160, [0, 1, 2]), line(1, 128, [0, 3])]), **opts)
    urls_a = [p["image_url"]["url"] for p in parts(a) if p["type"] == "image_url"]
    urls_b = [p["image_url"]["url"] for p in parts(b) if p["type"] == "image_url"]
    assert (len(urls_a), len(urls_b)) == (4, 4)  # a's last block is partial: no images on it
    assert urls_a[:2] == urls_b[:2]  # block 0's images on both
    assert urls_a[2:] != urls_b[2:]
    assert urls_a[0] != urls_a[1]
    assert [p["type"] for p in parts(a)] == ["text", "image_url", "image_url", "text", "image_url",
                                             "image_url", "text"]
    assert (a.entry.n_images, a.entry.tags["x-abserve-items"]) == (4, "4")
    assert urls_a == [p["image_url"]["url"] for p in parts(sent(trace(
        tmp_path, [line(0, 160, [0, 1, 2])], "again.jsonl"), **opts)[0]) if p["type"] == "image_url"]


def test_format_auto_detects_a_trace_and_the_replay_honours_time_scale(tmp_path: Path) -> None:
    path = trace(tmp_path, [line(k * 100, 10, [k]) for k in range(4)])
    check = check_file(source(path))
    assert (check.requests, check.timed, check.tags["shared-prefix"]) == (4, 4, {"no"})
    assert check.summary()["formats"] == {"mooncake": 4}  # what the report names it by
    offsets = [offset for _, offset in window(source(path, time_scale=0.5), 4)]
    assert offsets == pytest.approx([0.0, 0.05, 0.1, 0.15])


@pytest.mark.parametrize(("bad", "message"), [
    ({"timestamp": 0, "input_length": 10, "hash_ids": [0]}, "missing output_length"),
    ({"timestamp": 0, "input_length": 10, "output_length": 2, "hash_ids": []}, "non-empty list"),
    ({"timestamp": 0, "input_length": 10, "output_length": 2, "hash_ids": [-1]}, "integers >= 0"),
    ({"timestamp": 0, "input_length": 0, "output_length": 2, "hash_ids": [1]}, "positive integer"),
    (line(0, 1100, [0, 1]), "does not fit 2 hash blocks of 512 tokens"),
    (line(0, 600, [0, 1, 2]), "the last block would hold -424"),
    (line(0, 8500, list(range(17))), "17 hash blocks of 512 tokens (8704) are longer than the "
                                     "model's context (8192 tokens)"),
    (line(0, 8190, list(range(16)), n_out=8), "over the model's context (8192 tokens)"),
    ({"input_length": 10, "output_length": 2, "hash_ids": [0]}, "no 'timestamp'"),
])
def test_bad_lines_are_refused_with_file_and_line_or_counted(
        tmp_path: Path, bad: dict[str, Any], message: str) -> None:
    path = trace(tmp_path, [line(0, 10, [0]), bad])
    with pytest.raises(RequestsFileError) as err:
        check_file(source(path, format="mooncake", max_context=8192))
    assert f"{path}:2: " in str(err.value)
    assert message in str(err.value)
    check = check_file(source(path, format="mooncake", max_context=8192, skip_invalid=True))
    assert (check.requests, check.skipped, check.skipped_lines) == (1, 1, [2])


def test_timestamps_going_back_are_refused_only_when_the_replay_uses_them(tmp_path: Path) -> None:
    path = trace(tmp_path, [line(0, 10, [0]), line(500, 10, [1]), line(400, 10, [2])])
    with pytest.raises(RequestsFileError, match=r"t\.jsonl:3: 'timestamp' 400 ms is before"):
        check_file(source(path))
    assert check_file(source(path, replay="closed")).requests == 3


def test_without_a_known_context_long_lines_pass(tmp_path: Path) -> None:
    path = trace(tmp_path, [line(0, 8500, list(range(17)))])
    assert check_file(source(path)).requests == 1  # --max-context / the run's max_model_len


def test_seen_ids_stay_flat_for_ids_numbered_in_order_of_first_use() -> None:
    seen = SeenIds()
    for hash_id in [0, 1, 2, 5, 3, 4, 6]:
        seen.add(hash_id)
    assert (seen.below, seen.above) == (7, set())
    seen.add(10)
    assert [10 in seen, 9 in seen, 6 in seen] == [True, False, True]
    assert seen.above == {10}


def test_blocks_are_exactly_block_size_tokens_of_the_tiny_model_and_a_given_tokenizer(
        tmp_path: Path) -> None:
    from abserve.arms.tiny_model import TinyModelSpec, _train_tokenizer

    tok = _train_tokenizer(TinyModelSpec())
    tok.save_pretrained(tmp_path / "tok")
    path = trace(tmp_path, [line(0, 700, [0, 1]), line(1, 333, [2])])
    for options in ({}, {"tokenizer": str(tmp_path / "tok")}):
        items = sent(path, trace={"block_size": 512, **options})
        lengths = [len(tok.encode(text(i), add_special_tokens=False)) for i in items]
        assert lengths == [700, 333], options
    given = sent(path, trace={"tokenizer": str(tmp_path / "tok" / "tokenizer.json")})
    assert len(set(words(given[0]))) > len(WORDS)  # the tokenizer's own words, more of them


def test_through_the_tiny_models_chat_template_shared_blocks_are_shared_tokens(
        tmp_path: Path) -> None:
    import jinja2

    from abserve.arms.tiny_model import CHAT_TEMPLATE, TinyModelSpec, _train_tokenizer

    tok = _train_tokenizer(TinyModelSpec())
    template = jinja2.Environment(autoescape=False).from_string(CHAT_TEMPLATE)
    path = trace(tmp_path, [line(0, 1100, [0, 1, 2]), line(1, 1300, [0, 1, 3])])
    prompts = [tok.encode(template.render(
        messages=orjson.loads(i.entry.body)["messages"], bos_token="<s>",
        add_generation_prompt=True), add_special_tokens=False) for i in sent(path)]
    head, tail = (len(tok.encode(t, add_special_tokens=False)) for t in ("<s>USER: ", "\nASSISTANT:"))
    assert [len(p) for p in prompts] == [head + 1100 + tail, head + 1300 + tail]
    common = next(k for k, (x, y) in enumerate(zip(*prompts, strict=False)) if x != y)
    assert common == head + 2 * 512  # the template's head, then exactly blocks 0 and 1


def test_a_tokenizer_that_is_not_a_file_is_refused(tmp_path: Path) -> None:
    path = trace(tmp_path, [line(0, 10, [0])])
    with pytest.raises(RequestsFileError, match=r"not a readable tokenizer\.json"):
        check_file(source(path, trace={"tokenizer": str(tmp_path / "none.json")}))


def test_the_report_states_the_block_size_of_a_trace(tmp_path: Path) -> None:
    from abserve.report.imported import file_statement

    path = trace(tmp_path, [line(0, 300, [0, 1])])
    src = source(path, format="mooncake", trace={"block_size": 256, "images_per_block": 1})
    item = {"kind": "file", "profile": "file-t", "file": src.model_dump(),
            "imported": check_file(src).summary()}
    assert file_statement(item) == (f"file-t from {path}: 1 requests, 1 images (a Mooncake trace: "
                                    "256-token hash blocks, 1 images per full block).")


def test_a_config_refuses_a_trace_longer_than_the_servers_max_model_len(tmp_path: Path) -> None:
    import yaml

    from abserve.config import ConfigError, load_experiment

    trace(tmp_path, [line(0, 10, [0]), line(20, 1500, [0, 1, 2])], "trace.jsonl")
    item: dict[str, Any] = {"kind": "file", "file": {"path": "trace.jsonl", "trace": {"block_size": 512}}}
    config = {"name": "t", "arms": {"a": {"lookup": "linear"}, "b": {"lookup": "bisect"}},
              "load": {"profiles": [item]}, "server": {"max_model_len": 1024}}
    (tmp_path / "exp.yaml").write_text(yaml.safe_dump(config))
    with pytest.raises(ConfigError, match=r"trace\.jsonl:2: 3 hash blocks of 512 tokens \(1536\)"):
        load_experiment(tmp_path / "exp.yaml")
    config["server"] = {"max_model_len": 2048}
    (tmp_path / "exp.yaml").write_text(yaml.safe_dump(config))
    (tmp_path / "tok").mkdir()
    item["file"]["trace"]["tokenizer"] = "tok"  # relative to the config, like the file
    (tmp_path / "exp.yaml").write_text(yaml.safe_dump(config))
    with pytest.raises(ConfigError, match=r"trace\.tokenizer: \S+/tok/tokenizer\.json is not"):
        load_experiment(tmp_path / "exp.yaml")
    del item["file"]["trace"]["tokenizer"]
    (tmp_path / "exp.yaml").write_text(yaml.safe_dump(config))
    loaded = load_experiment(tmp_path / "exp.yaml")
    assert loaded.file_source(loaded.load.profiles[0]).max_context == 2048
    imported = loaded.load.profiles[0].imported
    assert imported is not None
    assert imported["tags"]["shared-prefix"] == ["no", "yes"]


def test_a_sampled_trace_counts_only_the_lines_it_sends_as_earlier(tmp_path: Path) -> None:
    path = trace(tmp_path, [line(k * 10, 20, [0]) for k in range(40)])
    items = sent(path, sample=0.3, seed=2)
    assert 0 < len(items) < 40
    assert items[0].entry.tags["x-abserve-source-line"] != "1"  # the sample left line 1 out...
    shared = [i.entry.tags["x-abserve-shared-prefix"] for i in items]
    assert shared == ["no"] + ["yes"] * (len(items) - 1)  # ...so the first one sent is not shared
