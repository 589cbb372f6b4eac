"""The traffic file formats' table (``abserve.traffic.sources.formats``): one entry registers a
format everywhere: validation of ``format``, auto-detection, reading and the ``--format`` help."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
import typer
from pydantic import ValidationError
from tests.support import traffic_files as tf

from abserve.cli import app
from abserve.traffic.sources import FileOptions, FileSource, accepted, formats
from abserve.traffic.sources.imported import Imported, LineError
from abserve.traffic.sources.reader import Accepted

THROWAWAY = "throwaway-trace"


def _looks_like(value: dict[str, Any]) -> bool:
    return "throwaway_prompt" in value


def _read(value: Any, line: int, options: formats.ReadOptions) -> list[Imported]:
    body = {"messages": [{"role": "user", "content": str(value["throwaway_prompt"])}],
            "max_tokens": options.max_tokens, "temperature": 0.0}
    return [Imported(line, "chat/completions", body, None, {}, THROWAWAY)]


@pytest.fixture
def throwaway(monkeypatch: pytest.MonkeyPatch) -> formats.Format:
    """A format registered for one test only: one entry in the table, nothing else."""
    fmt = formats.Format(THROWAWAY, "a throwaway trace line", _looks_like, _read)
    monkeypatch.setitem(formats.FORMATS, THROWAWAY, fmt)
    return fmt


def test_a_registered_format_is_valid_detected_read_and_listed(throwaway: formats.Format,
                                                               tmp_path: Path) -> None:
    assert FileOptions(path=tmp_path / "t.jsonl", format=THROWAWAY).format == THROWAWAY
    assert formats.detect({"throwaway_prompt": "hi"}) == THROWAWAY
    assert formats.names_help().endswith(f"| corpus | mooncake | {THROWAWAY}")
    with pytest.raises(LineError, match=r"or a throwaway trace line\)$"):
        formats.detect({"neither": 1})
    path = tf.write_jsonl(tmp_path / "t.jsonl", [{"throwaway_prompt": f"p{k}"} for k in range(3)])
    items = list(accepted(FileSource(path=path, model="tiny", max_tokens=5)))
    assert [type(i) for i in items] == [Accepted] * 3
    bodies = [orjson.loads(i.entry.body) for i in items if isinstance(i, Accepted)]
    assert [b["messages"][0]["content"] for b in bodies] == ["p0", "p1", "p2"]
    assert {b["max_tokens"] for b in bodies} == {5}


def test_without_the_entry_the_format_is_refused_and_not_detected(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="Input should be 'auto', 'openai', 'bench-custom', "
                                              "'bench-sharegpt', 'corpus' or 'mooncake'"):
        FileOptions(path=tmp_path / "t.jsonl", format=THROWAWAY)
    with pytest.raises(LineError, match="unknown line format"):
        formats.detect({"throwaway_prompt": "hi"})
    assert formats.names_help() == "auto | openai | bench-custom | bench-sharegpt | corpus | mooncake"


def test_auto_tries_lower_ranks_first(monkeypatch: pytest.MonkeyPatch) -> None:
    line = {"throwaway_prompt": "hi", "conversations": [{"from": "human", "value": "hi"}]}
    late = formats.Format(THROWAWAY, "a throwaway trace line", _looks_like, _read)
    monkeypatch.setitem(formats.FORMATS, THROWAWAY, late)
    assert formats.detect(line) == "bench-sharegpt"
    monkeypatch.setitem(formats.FORMATS, THROWAWAY, formats.Format(
        THROWAWAY, "a throwaway trace line", _looks_like, _read, rank=1))
    assert formats.detect(line) == THROWAWAY


def test_the_load_commands_format_help_is_the_tables() -> None:
    load = typer.main.get_command(app).commands["load"]  # type: ignore[attr-defined]
    [option] = [p for p in load.params if "--format" in p.opts]
    assert option.help == formats.names_help()
