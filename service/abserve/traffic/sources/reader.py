"""Read a traffic file of any supported format into sendable requests, checked, streamed.

``accepted`` walks the file once (``lines.iter_items``), keeps the deterministic sample
(line ``n`` is kept when a hash of (seed, n) falls below ``sample``: the same lines on every
run and every worker, without reading ahead), reads each item with its format's reader and
prepares it (``prepare``). ``check_file`` is that walk with nothing kept but counts and the
bad lines: run before any request is sent, it fails at the first bad line (file and line
number) unless ``skip_invalid``, and always when lines ask for sampling the router refuses.
The turns of sessions (``sessions``) are checked for order on the way and kept or dropped by
the sample a session at a time.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from abserve.model.records import TAG_HEADER_PREFIX
from abserve.traffic.corpus import CorpusEntry, derive_seed
from abserve.traffic.sources import formats
from abserve.traffic.sources.imported import Imported, LineError
from abserve.traffic.sources.lines import RawItem, is_array_file, iter_items
from abserve.traffic.sources.prepare import SamplingRefused, prepare
from abserve.traffic.sources.sessions import SessionTracker
from abserve.traffic.sources.spec import FileSource, RequestsFileError
from abserve.traffic.turns import SESSION_TAG

LISTED = 20  # bad lines named in a message or summary


@dataclass(frozen=True)
class Accepted:
    """One request to send and its recorded arrival (seconds; None when the line has none)."""

    entry: CorpusEntry
    arrival: float | None
    fmt: str = "openai"  # the format its line was read as (detected under ``format: auto``)


@dataclass(frozen=True)
class Problem:
    """A line that cannot be sent, and why."""

    line: int
    reason: str
    sampling: bool = False


@dataclass
class FileCheck:
    """What a checked file will send: counts, and the lines left out (``skip_invalid``)."""

    path: str
    requests: int = 0
    images: int = 0
    skipped: int = 0
    skipped_lines: list[int] = field(default_factory=list)
    sampling: Counter[str] = field(default_factory=Counter)  # seeded / forced-greedy
    endpoints: Counter[str] = field(default_factory=Counter)  # chat/completions, completions
    timed: int = 0  # requests with a recorded arrival
    sessions: int = 0  # sessions among the requests (their turns are replayed in order)
    formats: Counter[str] = field(default_factory=Counter)  # requests per format read
    # for the policy's reachability check (``abserve.compare.reachability``): requests per
    # image count, the words + image tokens estimate of all prompts, the lines' own tags
    items: Counter[int] = field(default_factory=Counter)
    token_estimate: int = 0
    tags: dict[str, set[str]] = field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        """The counts a run records in its provenance (``load_plan[].imported``)."""
        return {"requests": self.requests, "images": self.images, "timed": self.timed,
                "forced_greedy": self.sampling["forced-greedy"], "seeded": self.sampling["seeded"],
                "skipped": self.skipped, "skipped_lines": list(self.skipped_lines),
                "endpoints": dict(self.endpoints),
                "items_per_request": {str(k): n for k, n in sorted(self.items.items())},
                "token_estimate": self.token_estimate,
                "tags": {key: sorted(values) for key, values in sorted(self.tags.items())},
                "formats": dict(sorted(self.formats.items())),
                **({"sessions": self.sessions} if self.sessions else {})}

    def describe(self) -> str:
        """One line for the console: what is sent, what was changed or left out."""
        kinds = ", ".join(f"{n} {k}" for k, n in sorted(self.endpoints.items()))
        text = f"{self.path}: {self.requests} requests ({kinds}), {self.images} images"
        if self.sessions:
            text += f"; {self.sessions} sessions"
        if self.sampling["forced-greedy"]:
            text += f"; {self.sampling['forced-greedy']} asked for sampling, sent greedy"
        if self.sampling["seeded"]:
            text += f"; {self.sampling['seeded']} sampled with the router's seed"
        if self.skipped:
            text += (f"; {self.skipped} invalid lines skipped "
                     f"(lines {_lines(self.skipped_lines, self.skipped)})")
        return text


def read_items(raw: RawItem, src: FileSource, array: bool,
               walk: formats.Walk | None = None) -> list[Imported]:
    """The requests of one item as its format's reader understands them (``formats``:
    auto-detected unless the source names one; a file that is one JSON array is
    ``formats.ARRAY_FORMAT``; a ShareGPT conversation of several turns: one per turn, unless
    ``sessions: false``; ``walk``: the readers of formats that remember earlier lines)."""
    fmt = formats.ARRAY_FORMAT if src.format == formats.AUTO and array else src.format
    return formats.read_items(raw.value, raw.line, fmt, src, walk)


def kept(src: FileSource, line: int) -> bool:
    """Whether the sample keeps line ``line`` (pure in (seed, line))."""
    return src.sample >= 1.0 or derive_seed(src.seed, "sample", line) < src.sample * 2**64


def accepted(src: FileSource) -> Iterator[Accepted | Problem]:
    """Every kept request of the file, prepared, or the problem with it; in file order."""
    array = is_array_file(src.path) if src.path.is_file() else False
    walk = _Walk(src)
    readers = formats.Walk(keep=lambda line: kept(src, line))
    for raw in iter_items(src.path):
        if raw.error is not None:
            if kept(src, raw.line):
                yield Problem(raw.line, raw.error)
            continue
        if src.sample < 1.0 and not src.sessions and not kept(src, raw.line):
            continue
        try:
            imps = read_items(raw, src, array, readers)
        except LineError as exc:
            if kept(src, raw.line):
                yield Problem(raw.line, str(exc))
            continue
        for imp in imps:
            item = walk.one(imp)
            if item is not None:
                yield item


class _Walk:
    """One pass over a file's requests: sessions tracked, requests numbered as accepted."""

    def __init__(self, src: FileSource) -> None:
        self.src, self.base = src, src.path.parent
        self.tracker = SessionTracker()
        self.ordinal = 0

    def one(self, imp: Imported) -> Accepted | Problem | None:
        """``imp`` prepared, the problem with it, or None when the sample leaves it out."""
        src, tracker, turn, what = self.src, self.tracker, None, ""
        try:
            if imp.session is None or not src.sessions:
                imp.session = None
                tracker.end()
                if not kept(src, imp.line):
                    return None
            else:
                turn = tracker.place(imp)
                what = f"turn {turn.turn} of session {turn.session}: "
                if not kept(src, tracker.first_line):
                    return None
            entry = prepare(imp, src, self.base, self.ordinal, turn)
        except LineError as exc:
            if turn is not None:
                tracker.refuse(isinstance(exc, SamplingRefused))
            if not kept(src, tracker.first_line if imp.session else imp.line):
                return None
            return Problem(imp.line, what + str(exc), sampling=isinstance(exc, SamplingRefused))
        self.ordinal += 1
        return Accepted(entry, imp.arrival, imp.fmt)


def check_file(src: FileSource) -> FileCheck:
    """Walk the whole file before anything is sent; raise ``RequestsFileError`` when it cannot
    be sent as asked (the first bad line, lines asking for sampling, or nothing to send)."""
    check = FileCheck(str(src.path))
    refused: list[int] = []  # the first LISTED lines asking for sampling; ``sampling_lines`` all
    sampling_lines = 0
    for item in accepted(src):
        if isinstance(item, Problem):
            if item.sampling:
                sampling_lines += 1
                if len(refused) < LISTED:
                    refused.append(item.line)
            elif not src.skip_invalid:
                raise RequestsFileError(f"{src.path}:{item.line}: {item.reason} "
                                        "(--skip-invalid / skip_invalid: true counts and lists "
                                        "bad lines instead)")
            else:
                check.skipped += 1
                again = check.skipped_lines and check.skipped_lines[-1] == item.line  # turns
                if len(check.skipped_lines) < LISTED and not again:
                    check.skipped_lines.append(item.line)
            continue
        _count(check, item)
    if sampling_lines:
        raise RequestsFileError(
            f"{src.path}: {sampling_lines} requests ask for sampling (lines "
            f"{_lines(refused, sampling_lines)}) and "
            "the router refuses sampling; send them greedy (greedy: true, --greedy) or allow "
            "seeded sampling in the router (seeded_sampling: allow)")
    if not check.requests:
        raise RequestsFileError(f"{src.path}: no request to send"
                                + (f" ({check.skipped} invalid lines skipped)" if check.skipped else ""))
    return check


TAG_VALUES = 32  # distinct values kept per tag of a file's lines (enough to name a stratum)
PER_LINE_TAGS = frozenset({"items", "token-estimate", "corpus-index", "source-line", SESSION_TAG})


def _count(check: FileCheck, item: Accepted) -> None:
    tags = item.entry.tags
    check.requests += 1
    check.sessions += item.entry.turn is not None and item.entry.turn.turn == 1
    check.images += item.entry.n_images
    check.items[item.entry.n_images] += 1
    check.token_estimate += item.entry.token_estimate
    for header, value in tags.items():
        key = header.removeprefix(TAG_HEADER_PREFIX)
        if header.startswith(TAG_HEADER_PREFIX) and key not in PER_LINE_TAGS:
            values = check.tags.setdefault(key, set())
            if len(values) < TAG_VALUES:
                values.add(value)
    check.timed += item.arrival is not None
    check.endpoints[item.entry.path.removeprefix("/v1/")] += 1
    check.formats[item.fmt] += 1
    sampling = tags.get(f"{TAG_HEADER_PREFIX}sampling")
    if sampling:
        check.sampling[sampling] += 1


def _lines(lines: list[int], total: int) -> str:
    """The first lines listed, and how many more there are of ``total``."""
    shown = ", ".join(map(str, lines[:LISTED]))
    return shown + (f" and {total - len(lines[:LISTED])} more" if total > LISTED else "")
