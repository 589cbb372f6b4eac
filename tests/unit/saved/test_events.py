"""YAML read as the same parse events ijson gives for the equivalent JSON."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
import yaml

from abserve.saved.events import json_events, objects_at, yaml_events

DOCS: list[Any] = [
    {"a": 1, "b": [1, 2.5, {"c": None, "d": "x"}], "e": {"f": [], "g": {}}, "h": "007", "i": True,
     "j": [[1], [2, 3]], "k": "multi\nline", "l": "null", "m": -0.0, "n": "1e3"},
    [{"x": 1}, "y", 3],
]


@pytest.mark.parametrize("doc", DOCS)
@pytest.mark.parametrize("style", [None, False, True])
def test_yaml_events_equal_json_events(doc: Any, style: bool | None) -> None:
    text = yaml.safe_dump(doc, sort_keys=False, default_flow_style=style)
    as_yaml = list(yaml_events(io.StringIO(text)))
    as_json = list(json_events(io.BytesIO(json.dumps(doc).encode())))
    assert as_yaml == as_json


def test_aliases_are_expanded() -> None:
    shared = {"k": [1, {"deep": "v"}]}
    doc = {"a": shared, "b": [shared, shared], "c": "end"}
    text = yaml.safe_dump(doc)
    assert "&id" in text  # PyYAML wrote an anchor and aliases
    as_json = list(json_events(io.BytesIO(json.dumps(doc, sort_keys=True).encode())))
    assert list(yaml_events(io.StringIO(text))) == as_json
    assert list(yaml_events(io.StringIO("a: &x 1\nb: *x\n"))) == list(
        json_events(io.BytesIO(b'{"a": 1, "b": 1}')))


def test_an_alias_without_its_anchor_is_refused() -> None:
    with pytest.raises(ValueError, match="names no anchor"):
        list(yaml_events(io.StringIO("a: 1\nb: *x\n")))


def test_objects_at_builds_only_what_is_asked() -> None:
    events = json_events(io.BytesIO(json.dumps(DOCS[0]).encode()))
    assert list(objects_at(events, frozenset({"b.item", "e.g"}))) == [
        ("b.item", 1), ("b.item", 2.5), ("b.item", {"c": None, "d": "x"}), ("e.g", {})]
