"""Micro-benchmark of the window lookup: vLLM's helper vs abserve's linear and bisect lookups.

Measures microseconds per call of ``vllm.multimodal.utils.get_mm_features_in_window`` (the change
under test, arm ``b`` in a served comparison), ``abserve.vllm_plugin.lookup.linear_window`` (the scan it
replaced, arm ``a``) and ``abserve.vllm_plugin.lookup.bisect_window`` (vLLM's algorithm re-stated) on real
vLLM ``MultiModalFeatureSpec`` objects, for requests of k items and a token window at the start,
middle or end of the prompt, or just past it (a V1 decode step). All three are measured side by
side in one run, interleaved: every round visits every (k, window) in a fresh random order and
times each function there in a fresh random order, so drift on a shared machine hits all alike.
Batches are short (default 0.5 ms) so that most fit inside one scheduler slice; the table gives
the fastest round (``timeit``'s advice: interference only ever adds time) and, as a check, the
linear ÷ vLLM ratio of the medians. Prints a markdown table (see ``benchmarks/lookup.md``).

    .venv/bin/python -m benchmarks.lookup_bench [--rounds 101] [--json out.json]
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import random
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from vllm import __version__ as vllm_version
from vllm.multimodal.inputs import MultiModalFeatureSpec, PlaceholderRange
from vllm.multimodal.utils import get_mm_features_in_window

from abserve.vllm_plugin.lookup import bisect_probes, bisect_window, linear_examined, linear_window

Lookup = Callable[..., tuple[int, int]]  # vLLM types its helper for its own feature class
LOOKUPS: dict[str, Lookup] = {
    "vllm": get_mm_features_in_window,
    "bisect": bisect_window,
    "linear": linear_window,
}
PLACES = ("start", "middle", "end", "decode")


@dataclass(frozen=True)
class Case:
    k: int
    place: str
    start: int
    end: int
    lo: int
    hi: int


@dataclass
class Row:
    case: Case
    us: dict[str, float]  # fastest round's µs per call, per lookup
    median_us: dict[str, float]  # median over rounds of µs per call, per lookup
    spread: dict[str, float]  # interquartile range over rounds ÷ median, per lookup
    linear_items: int
    bisect_probes: int


def build_features(k: int, tokens: int, gap: int) -> list[MultiModalFeatureSpec]:
    """k items of ``tokens`` tokens each, ``gap`` text tokens before each one."""
    return [
        MultiModalFeatureSpec(
            data=None,
            modality="image",
            identifier=f"img{i}",
            mm_position=PlaceholderRange(offset=gap + i * (tokens + gap), length=tokens),
        )
        for i in range(k)
    ]


def window_for(place: str, prompt_len: int, width: int) -> tuple[int, int]:
    if place == "start":
        return 0, width
    if place == "middle":
        begin = max(0, prompt_len // 2 - width // 2)
        return begin, begin + width
    if place == "end":
        return max(0, prompt_len - width), prompt_len
    return prompt_len, prompt_len + 1  # decode: one token past the prompt


def per_call_us(fn: Lookup, feats: Sequence[Any], start: int, end: int, calls: int) -> float:
    began = time.perf_counter_ns()
    for _ in range(calls):
        fn(feats, start, end)
    return (time.perf_counter_ns() - began) / calls / 1000.0


def calibrate(fn: Lookup, feats: Sequence[Any], start: int, end: int, batch_ms: float) -> int:
    """Calls per batch so that one batch takes about ``batch_ms``."""
    calls = 1
    while True:
        us = per_call_us(fn, feats, start, end, calls)
        if us * calls >= batch_ms * 100:  # a tenth of the target, then scale
            return max(1, int(calls * batch_ms * 1000 / (us * calls)))
        calls *= 4


def run(ks: Sequence[int], width: int, tokens: int, gap: int, rounds: int, batch_ms: float) -> list[Row]:
    feats = {k: build_features(k, tokens, gap) for k in ks}
    cases: list[Case] = []
    for k in ks:
        prompt_len = k * (tokens + gap) + gap
        for place in PLACES:
            start, end = window_for(place, prompt_len, width)
            results = {name: fn(feats[k], start, end) for name, fn in LOOKUPS.items()}
            if len(set(results.values())) != 1:
                raise SystemExit(f"lookups disagree at k={k} {place}: {results}")
            lo, hi = results["vllm"]
            cases.append(Case(k, place, start, end, lo, hi))
    calls = {
        (c, name): calibrate(fn, feats[c.k], c.start, c.end, batch_ms)
        for c in cases
        for name, fn in LOOKUPS.items()
    }
    samples: dict[tuple[Case, str], list[float]] = {key: [] for key in calls}
    rng = random.Random(0)
    gc.disable()
    try:
        for _ in range(rounds):
            for c in rng.sample(cases, len(cases)):
                for name in rng.sample(list(LOOKUPS), len(LOOKUPS)):
                    us = per_call_us(LOOKUPS[name], feats[c.k], c.start, c.end, calls[c, name])
                    samples[c, name].append(us)
    finally:
        gc.enable()
    return [
        Row(
            case=c,
            us={name: min(samples[c, name]) for name in LOOKUPS},
            median_us={name: statistics.median(samples[c, name]) for name in LOOKUPS},
            spread={name: _relative_iqr(samples[c, name]) for name in LOOKUPS},
            linear_items=linear_examined(c.k, c.lo, c.hi),
            bisect_probes=bisect_probes(c.k, c.lo, c.hi),
        )
        for c in cases
    ]


def _relative_iqr(values: Sequence[float]) -> float:
    if len(values) < 2:
        return 0.0
    q1, _, q3 = statistics.quantiles(values, n=4)
    return (q3 - q1) / statistics.median(values)


def markdown(rows: Sequence[Row]) -> str:
    head = (
        "| k | window | tokens | items hit | vLLM µs | bisect µs | linear µs "
        "| linear ÷ vLLM | bisect ÷ vLLM | linear ÷ vLLM (medians) | linear items | bisect probes |\n"
        "|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n"
    )
    lines = []
    for r in rows:
        c, us, med = r.case, r.us, r.median_us
        lines.append(
            f"| {c.k} | {c.place} | [{c.start}, {c.end}) | {c.hi - c.lo} "
            f"| {us['vllm']:.2f} | {us['bisect']:.2f} | {us['linear']:.2f} "
            f"| {us['linear'] / us['vllm']:.2f} | {us['bisect'] / us['vllm']:.2f} "
            f"| {med['linear'] / med['vllm']:.2f} "
            f"| {r.linear_items} | {r.bisect_probes} |"
        )
    return head + "\n".join(lines) + "\n"


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ks", default="1,8,64,512,4096,16384", help="items per request, comma-separated")
    p.add_argument("--window", type=int, default=512, help="window width in tokens")
    p.add_argument("--tokens-per-item", type=int, default=16)
    p.add_argument("--gap", type=int, default=16, help="text tokens before each item")
    p.add_argument("--rounds", type=int, default=101)
    p.add_argument("--batch-ms", type=float, default=0.5, help="target time of one timed batch")
    p.add_argument("--json", help="also write the rows as JSON to this path")
    args = p.parse_args(argv)
    if args.window < 1 or args.tokens_per_item < 1 or args.gap < 0 or args.rounds < 1:
        p.error("--window, --tokens-per-item and --rounds must be >= 1, --gap >= 0")
    return args


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    ks = [int(k) for k in args.ks.split(",")]
    began = time.monotonic()
    rows = run(ks, args.window, args.tokens_per_item, args.gap, args.rounds, args.batch_ms)
    print(
        f"python {platform.python_version()}, vllm {vllm_version}, {platform.machine()}; "
        f"items of {args.tokens_per_item} tokens after {args.gap} text tokens each; "
        f"window {args.window} tokens; {args.rounds} interleaved rounds "
        f"of ~{args.batch_ms} ms batches; took {time.monotonic() - began:.0f} s"
    )
    spreads = sorted(v for r in rows for v in r.spread.values())
    print(
        f"spread (IQR over rounds ÷ median) across all cells: median {statistics.median(spreads):.0%}, "
        f"max {spreads[-1]:.0%}\n"
    )
    print(markdown(rows))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump([asdict(r) for r in rows], out, indent=1)


if __name__ == "__main__":
    main(sys.argv[1:])
