"""Where the hybrid lookup should switch from the linear scan to vLLM's bisect helper.

Times ``abserve.vllm_plugin.lookup.linear_window`` against vLLM's ``get_mm_features_in_window`` on real vLLM
``MultiModalFeatureSpec`` objects for k = 1..64 items and three windows: ``first`` (a prefill
chunk over the first item: the scan stops at once), ``middle`` (a 64-token chunk in the middle
of the prompt) and ``decode`` (one token past the prompt, what the V1 runner asks on every decode
step: the scan's worst case, it reads every item). Rounds are interleaved (every round visits
every cell and both functions in a fresh random order, garbage collector off, ~0.3 ms batches)
and the fastest round is kept (interference only adds time). The crossover of a window is the
smallest k from which bisect is faster at every larger k measured; ``mixed`` sums a decode and a
middle call (a generation makes both kinds), and ``abserve.vllm_plugin.lookup.HYBRID_THRESHOLD`` is set from
its crossover.

    .venv/bin/python -m benchmarks.hybrid_threshold [--rounds 61] [--json out.json]
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import random
import sys
import time
from collections.abc import Callable

from vllm import __version__ as vllm_version
from vllm.multimodal.inputs import MultiModalFeatureSpec, PlaceholderRange
from vllm.multimodal.utils import get_mm_features_in_window

from abserve.vllm_plugin.lookup import HYBRID_THRESHOLD, linear_window

Lookup = Callable[..., tuple[int, int]]
FUNCS: dict[str, Lookup] = {"linear": linear_window, "bisect": get_mm_features_in_window}
KS = (1, 2, 3, 4, 6, 8, 10, 12, 14, 16, 20, 24, 32, 48, 64)
TOKENS, GAP = 4, 12  # the tiny model's 4 tokens per image, some text between images


def features(k: int) -> list[MultiModalFeatureSpec]:
    spans = [PlaceholderRange(offset=GAP + i * (TOKENS + GAP), length=TOKENS) for i in range(k)]
    return [MultiModalFeatureSpec(data=None, modality="image", identifier=f"i{i}", mm_position=pos)
            for i, pos in enumerate(spans)]


def window(place: str, k: int) -> tuple[int, int]:
    prompt = k * (TOKENS + GAP) + GAP
    if place == "first":
        return 0, 64
    if place == "middle":
        return prompt // 2, prompt // 2 + 64
    return prompt, prompt + 1


def per_call_us(fn: Lookup, feats: list[MultiModalFeatureSpec], start: int, end: int, batch: int) -> float:
    began = time.perf_counter_ns()
    for _ in range(batch):
        fn(feats, start, end)
    return (time.perf_counter_ns() - began) / batch / 1000


def measure(rounds: int, places: tuple[str, ...]) -> dict[str, dict[int, dict[str, float]]]:
    cells = [(p, k) for p in places for k in KS]
    data = {c: (features(c[1]), *window(*c)) for c in cells}
    for c, (f, s, e) in data.items():
        assert linear_window(f, s, e) == get_mm_features_in_window(f, s, e), c
    best: dict[str, dict[int, dict[str, float]]] = {p: {k: {} for k in KS} for p in places}
    rng = random.Random(0)
    gc.disable()
    try:
        for _ in range(rounds):
            rng.shuffle(cells)
            for place, k in cells:
                f, s, e = data[(place, k)]
                for name in rng.sample(list(FUNCS), len(FUNCS)):
                    us = per_call_us(FUNCS[name], f, s, e, 300)
                    old = best[place][k].get(name, float("inf"))
                    best[place][k][name] = min(old, us)
    finally:
        gc.enable()
    return best


def crossover(rows: dict[int, dict[str, float]]) -> int | None:
    """Smallest k from which bisect is faster at every larger k measured."""
    found = None
    for k in reversed(KS):
        if rows[k]["bisect"] < rows[k]["linear"]:
            found = k
        else:
            break
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=61)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    began = time.monotonic()
    places = ("first", "middle", "decode")
    best = measure(args.rounds, places)
    print(f"python {platform.python_version()}, vllm {vllm_version}, {platform.machine()}; "
          f"{args.rounds} interleaved rounds; took {time.monotonic() - began:.0f} s; "
          f"HYBRID_THRESHOLD now {HYBRID_THRESHOLD}\n")
    print("| k | " + " | ".join(f"{p} linear µs | {p} bisect µs" for p in places) + " |")
    print("|---:|" + "---:|---:|" * len(places))
    for k in KS:
        cells = " | ".join(f"{best[p][k]['linear']:.3f} | {best[p][k]['bisect']:.3f}" for p in places)
        print(f"| {k} | {cells} |")
    print()
    mixed = {k: {n: best["decode"][k][n] + best["middle"][k][n] for n in FUNCS} for k in KS}
    for p, rows in [*best.items(), ("mixed", mixed)]:
        print(f"crossover ({p}): bisect faster from k = {crossover(rows)}")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({p: {str(k): v for k, v in rows.items()} for p, rows in best.items()}, handle, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
