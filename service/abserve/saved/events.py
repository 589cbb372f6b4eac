"""JSON and YAML documents as one stream of parse events, and objects built from parts of it.

GuideLLM saves the same report as JSON or YAML. Both are read here as ijson's event tuples
``(prefix, event, value)`` (prefix ``benchmarks.item.requests.successful.item``...): JSON by
ijson itself, YAML by PyYAML's event parser (libyaml's when built) with each scalar resolved
the way ``yaml.safe_load`` would (int, float, bool, null, else string). Neither is held
whole; ``objects_at`` builds just the objects under the given prefixes, one at a time.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import IO, Any

import ijson
import yaml

Event = tuple[str, str, Any]
#: What reading a damaged JSON or YAML file can raise (UnicodeDecodeError is a ValueError;
#: IndexError: events out of the order a valid document gives).
READ_ERRORS: tuple[type[Exception], ...] = (ValueError, ijson.JSONError, yaml.YAMLError, OSError, IndexError)
_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_CONSTRUCT = yaml.SafeLoader(" ")  # resolves and constructs plain scalars
_RESOLVER = yaml.resolver.Resolver()
_STR = "tag:yaml.org,2002:str"


def json_events(f: IO[bytes]) -> Iterator[Event]:
    events: Iterator[Event] = ijson.parse(f, use_float=True)
    return events


def _scalar(event: yaml.ScalarEvent) -> Any:
    """The value ``yaml.safe_load`` gives a scalar (built directly: the loader's
    ``construct_object`` would keep every node it ever built)."""
    if event.style and event.tag in (None, "!", "tag:yaml.org,2002:str"):
        return event.value  # quoted or block: a string, unless explicitly tagged
    tag = event.tag if event.tag not in (None, "!") else _RESOLVER.resolve(
        yaml.ScalarNode, event.value, event.implicit)
    if tag == _STR:
        return event.value
    build = _CONSTRUCT.yaml_constructors.get(tag)
    if build is None:
        raise ValueError(f"a YAML scalar tagged {tag}")
    return build(_CONSTRUCT, yaml.ScalarNode(tag, event.value))


class _Frame:
    """An open YAML mapping or sequence: its prefix, and the key whose value comes next."""

    __slots__ = ("key", "kind", "prefix")

    def __init__(self, kind: str, prefix: str) -> None:
        self.kind, self.prefix, self.key = kind, prefix, None  # type: tuple[str, str, str | None]


def _join(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name


def _here(top: _Frame | None) -> str:
    if top is None:
        return ""
    return _join(top.prefix, top.key or "") if top.kind == "map" else _join(top.prefix, "item")


def _expanded(events: Iterable[yaml.Event]) -> Iterator[yaml.Event]:
    """YAML events with every alias replaced by the events of the node it names (PyYAML's
    dumper writes an anchor for an object met twice); only anchored nodes are kept."""
    anchors: dict[str, list[yaml.Event]] = {}
    recording: list[list[Any]] = []  # [anchor, events, depth]
    for event in events:
        if isinstance(event, yaml.AliasEvent):
            if event.anchor not in anchors:
                raise ValueError(f"YAML alias *{event.anchor} names no anchor")
            replay = anchors[event.anchor]
            for open_node in recording:
                open_node[1].extend(replay)
            yield from replay
            continue
        for open_node in recording:
            open_node[1].append(event)
        anchor = getattr(event, "anchor", None)
        if anchor and isinstance(event, yaml.ScalarEvent):
            anchors[anchor] = [event]
        elif anchor and isinstance(event, yaml.CollectionStartEvent):
            recording.append([anchor, [event], 0])
        if isinstance(event, yaml.CollectionStartEvent | yaml.CollectionEndEvent):
            step = 1 if isinstance(event, yaml.CollectionStartEvent) else -1
            for open_node in recording:
                open_node[2] += step
            while recording and recording[-1][2] == 0:
                done = recording.pop()
                anchors[done[0]] = done[1]
        yield event


def yaml_events(f: IO[str]) -> Iterator[Event]:
    """ijson-style events of a YAML document (aliases expanded)."""
    stack: list[_Frame] = []
    for event in _expanded(yaml.parse(f, Loader=_LOADER)):
        top = stack[-1] if stack else None
        if isinstance(event, yaml.MappingEndEvent | yaml.SequenceEndEvent):
            frame = stack.pop()
            yield frame.prefix, "end_map" if frame.kind == "map" else "end_array", None
            _value_done(stack)
            continue
        if not isinstance(event, yaml.ScalarEvent | yaml.MappingStartEvent | yaml.SequenceStartEvent):
            continue  # stream and document events
        if top is not None and top.kind == "map" and top.key is None:
            if not isinstance(event, yaml.ScalarEvent):
                raise ValueError("a YAML mapping key that is not a scalar")
            top.key = str(_scalar(event))
            yield top.prefix, "map_key", top.key
            continue
        here = _here(top)
        if isinstance(event, yaml.ScalarEvent):
            value = _scalar(event)
            yield here, _kind(value), value
            _value_done(stack)
        else:
            kind = "map" if isinstance(event, yaml.MappingStartEvent) else "seq"
            yield here, "start_map" if kind == "map" else "start_array", None
            stack.append(_Frame(kind, here))


def _value_done(stack: list[_Frame]) -> None:
    """The value of the innermost mapping's current key is complete: a key comes next."""
    if stack and stack[-1].kind == "map":
        stack[-1].key = None


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    return "string"


def objects_at(events: Iterable[Event], prefixes: frozenset[str]) -> Iterator[tuple[str, Any]]:
    """(prefix, value) of every value found at one of ``prefixes``, built one at a time."""
    builder: Any = None
    at = ""
    depth = 0
    for prefix, event, value in events:
        if builder is None:
            if prefix not in prefixes or event in ("map_key", "end_map", "end_array"):
                continue
            if event not in ("start_map", "start_array"):
                yield prefix, value
                continue
            builder, at, depth = ijson.ObjectBuilder(), prefix, 0
        builder.event(event, value)
        if event in ("start_map", "start_array"):
            depth += 1
        elif event in ("end_map", "end_array"):
            depth -= 1
            if depth == 0:
                yield at, builder.value
                builder = None
