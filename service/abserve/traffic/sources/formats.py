"""The traffic file formats in one table: adding a format is one entry in ``FORMATS``.

Each ``Format`` names itself (the value of ``--format`` / ``load.profiles[].file.format``),
says what a line of it looks like (one help line, for messages), how ``format: auto``
recognises one of its items (``looks_like``, tried in ``rank`` order: the first that matches
wins), and reads one item into its requests (``read``: the parsed JSON value, its line
number, the source's options; one request, or a conversation's turns). Everything that lists
or picks formats derives from this table: the validation of ``FileOptions.format``
(``check_name``), auto-detection (``detect``), reading (``read_items``) and the ``--format``
help (``names_help``); like the backend table of ``vllm bench serve``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from pydantic_core import PydanticCustomError

from abserve.traffic.sources import bench_datasets, corpus_jsonl, mooncake, openai_jsonl
from abserve.traffic.sources.imported import Imported, LineError

AUTO = "auto"
ARRAY_FORMAT = "bench-sharegpt"  # what ``auto`` reads a file that is one JSON array as


class ReadOptions(mooncake.TraceSource, Protocol):
    """What a reader may use of the file source (``spec.FileSource`` is one)."""

    @property
    def max_tokens(self) -> int: ...

    @property
    def sessions(self) -> bool: ...


Reader = Callable[[Any, int, ReadOptions], list[Imported]]
# a reader for one walk through a file, told which lines the sample keeps
Walker = Callable[[Callable[[int], bool]], Reader]


@dataclass(frozen=True)
class Format:
    """One traffic file format: its name, help line, detection rule and reader."""

    name: str
    help: str  # what one of its lines is, e.g. "an OpenAI request with 'model'"
    looks_like: Callable[[dict[str, Any]], bool]
    read: Reader
    rank: int = 100  # ``auto`` tries lower ranks first (ties: table order)
    # a format whose lines depend on the lines before them (a trace's shared blocks): a new
    # reader per walk of the file (``Walk``) reads it; ``read`` reads a line as a walk's first
    walker: Walker | None = None


class Walk:
    """One walk through a file: the readers of its formats that remember earlier lines."""

    def __init__(self, keep: Callable[[int], bool] = lambda _line: True) -> None:
        self.keep = keep  # whether the sample keeps a line: only kept lines are remembered
        self.readers: dict[str, Reader] = {}

    def reader(self, fmt: Format) -> Reader:
        """``fmt``'s reader in this walk."""
        if fmt.walker is None:
            return fmt.read
        if fmt.name not in self.readers:
            self.readers[fmt.name] = fmt.walker(self.keep)
        return self.readers[fmt.name]


def _sharegpt(value: Any, line: int, options: ReadOptions) -> list[Imported]:
    """A conversation: one request per turn as a session, or its first turn (``sessions: false``)."""
    if options.sessions:
        return bench_datasets.parse_sharegpt_turns(value, line, options.max_tokens)
    return [bench_datasets.parse_sharegpt(value, line, options.max_tokens)]


FORMATS: dict[str, Format] = {fmt.name: fmt for fmt in (
    Format("openai", "an OpenAI request with 'model'", openai_jsonl.looks_like,
           lambda value, line, _options: [openai_jsonl.parse(value, line)], rank=20),
    Format("bench-custom", "a vllm bench custom entry", bench_datasets.looks_like_custom,
           lambda value, line, options: [bench_datasets.parse_custom(value, line, options.max_tokens)],
           rank=40),
    Format("bench-sharegpt", "a vllm bench ShareGPT entry", bench_datasets.looks_like_sharegpt,
           _sharegpt, rank=30),
    Format("corpus", "an abserve corpus line", corpus_jsonl.looks_like,
           lambda value, line, _options: [corpus_jsonl.parse(value, line)], rank=10),
    Format(mooncake.FORMAT, "a Mooncake trace line", mooncake.looks_like,
           lambda value, line, options: mooncake.TraceWalk().read(value, line, options), rank=50,
           walker=lambda keep: mooncake.TraceWalk(keep).read),
)}


def names() -> tuple[str, ...]:
    """Every value ``format`` takes: ``auto``, then the formats in table order."""
    return (AUTO, *FORMATS)


def names_help() -> str:
    """The ``--format`` help: ``auto | openai | ...``."""
    return " | ".join(names())


def check_name(value: Any) -> Any:
    """``FileOptions.format``'s validator: a registered name (pydantic's literal error if not)."""
    allowed = names()
    if isinstance(value, str) and value in allowed:
        return value
    quoted = [repr(name) for name in allowed]
    expected = ", ".join(quoted[:-1]) + " or " + quoted[-1]
    raise PydanticCustomError("literal_error", "Input should be {expected}", {"expected": expected})


def detect(value: Any) -> str:
    """The format of one item (``format: auto``): the first rule, by rank, that matches."""
    if not isinstance(value, dict):
        raise LineError("expected a JSON object")
    tried = sorted(FORMATS.values(), key=lambda fmt: fmt.rank)
    for fmt in tried:
        if fmt.looks_like(value):
            return fmt.name
    helps = [fmt.help for fmt in FORMATS.values()]
    raise LineError(f"unknown line format ({', '.join(helps[:-1])}, or {helps[-1]})")


def read_items(value: Any, line: int, fmt: str, options: ReadOptions,
               walk: Walk | None = None) -> list[Imported]:
    """One item's requests read by the reader of ``fmt`` (``auto``: the detected format's) in
    ``walk`` (none: as the first line of a walk)."""
    return (walk or Walk()).reader(FORMATS[detect(value) if fmt == AUTO else fmt])(
        value, line, options)
