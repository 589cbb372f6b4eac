"""Judgments for report tests, from synthetic exchanges with known answers.

The default run mirrors the CPU default's sequential policy on a small scale: arms ``a`` (linear)
and ``b`` (bisect), b faster per token by 2 µs per image, images 2 / 8 / 128 / 512 per request,
ABBA placements over blocks of 8, and the log ``abserve run`` leaves in the provenance. Knobs
make it fail on equality (``mismatch_at``), fail on latency (``shift``), stay undecided (few
requests) or be invalid (an unproven arm). Each arm's telemetry carries items examined per
images bucket the way the plugin counts them (linear scans about 3/4 of the items, bisect
probes about 2·log2 of them).
"""

from __future__ import annotations

import numpy as np
from tests.support.records_factory import arm, exchange, provenance, run_info

from abserve.compare import Judgment, Policy, judge
from abserve.model.provenance import SequentialRecord
from abserve.model.records import Exchange, LookupTelemetry, RunInfo

TOKENS = list(range(1, 13))
ITEMS = (2, 8, 128, 512)
PLACEMENTS = ("a:0,b:1", "a:1,b:0", "a:1,b:0", "a:0,b:1")
STOP = "decided after 6 rounds: every critical gate passed"


def policy(**seq: object) -> Policy:
    return Policy.model_validate({
        "name": "report-test",
        "arms": {"baseline": "a", "candidate": "b", "floor": None},
        "min_samples": 20,
        "mode": "sequential",
        "sequential": {"look_every": 8, "warmup": "fixed",
                       "unknown_placement_bias": {"tpot": 0.0007}, **seq},
        "metrics": [{"metric": "tpot", "allowed_relative": 0.05, "critical": True},
                    {"metric": "ttft", "allowed_relative": 0.05, "critical": True},
                    {"metric": "tpot", "statistic": "p99", "allowed_relative": 0.10}],
        "improvements": [{"metric": "tpot", "min_items": 128, "at_least": 0.0}],
        "per_item": [{"metric": "tpot", "allowed": 0.0}],
    })


def exchanges(n: int = 96, *, shift: float = 0.0, mismatch_at: int | None = None, seed: int = 3,
              hashes: bool = True, tokens: int = 12) -> list[Exchange]:
    """b's gap per token = a's + ``shift`` - 2 µs per image (+ noise); b's tokens differ from
    position 5 on at exchange ``mismatch_at``."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        items, block = ITEMS[i % len(ITEMS)], i // 8
        common = 0.012 + rng.normal(0, 0.001)
        gap_b = common + shift - 2e-6 * items + rng.normal(0, 0.0003)
        a_tokens = TOKENS[:tokens]
        b_tokens = a_tokens[:5] + [40 + t for t in a_tokens[5:]] if i == mismatch_at else a_tokens
        tags = {"block": str(block), "placement": PLACEMENTS[block % 4], "corpus-index": str(i), "seed": "7"}
        ex = exchange(i, [arm("a", a_tokens, ttft=0.4 + rng.normal(0, 0.004), itl=common),
                          arm("b", b_tokens, ttft=0.4 + rng.normal(0, 0.004), itl=gap_b)],
                      items=items, profile="mixed", extra_tags=tags)
        if hashes:
            ex.image_hashes = [f"blake3:{i:04d}{j:04d}" + "ab" * 28 for j in range(items)]
        out.append(ex)
    return out


def sequential_log(rounds: int = 6, stop: str = STOP, decided: bool = True) -> dict[str, object]:
    looks = [{"round": r, "requests": 16 * r, "seconds": 20.0 * r,
              "gates": {"equality": "pass", "tpot.hl": "pass" if r > 3 else "inconclusive"}}
             for r in range(1, rounds + 1)]
    return {"budget": {"min_rounds": 2, "requests": None, "seconds": 540.0}, "rounds": rounds,
            "requests": 16 * rounds, "stop_reason": stop, "decided": decided, "looks": looks}


def telemetry(lookup: str | None) -> LookupTelemetry:
    calls = {"2": 400, "8": 300, "128": 200, "512": 100}
    if lookup == "linear":
        examined = {k: int(c * 0.75 * int(k)) + c for k, c in calls.items()}
    else:
        examined = {k: c * 2 * int(k).bit_length() for k, c in calls.items()}
    return LookupTelemetry(lookup_calls=sum(calls.values()), items_examined=sum(examined.values()),
                           lookup_seconds=0.002, gather_calls=500, gather_seconds=0.01,
                           items_per_request=calls, examined_per_request=examined)


def info(*, proven_b: str | None = "bisect", log: dict[str, object] | None = None) -> RunInfo:
    arms = {"a": provenance("linear"), "b": provenance("bisect", proven=proven_b)}
    for a in arms.values():
        a.telemetry = telemetry(a.expected_lookup)
    run = run_info(arms)
    run.provenance.sequential = SequentialRecord.model_validate(log if log is not None else sequential_log())
    return run


def judged(ex: list[Exchange] | None = None, *, proven_b: str | None = "bisect",
           log: dict[str, object] | None = None) -> Judgment:
    return judge(info(proven_b=proven_b, log=log), ex if ex is not None else exchanges(), policy())


def corpus_exchange(index: int, like: Exchange, *, profile: str = "interleaved", seed: int = 11,
                    scheme: str = "blake3") -> Exchange:
    """``like`` made into the request abserve's corpus sends at (profile, seed, index): its tags
    and its image hashes as the router records them (``scheme:<hex>`` of each image URL)."""
    import orjson

    from abserve.base.url_hash import url_hash
    from abserve.traffic.corpus import build_entry
    from abserve.traffic.profiles import load_profile

    entry = build_entry(load_profile(profile), seed, index, "tiny")
    parts = orjson.loads(entry.body)["messages"][0]["content"]
    urls = [p["image_url"]["url"] for p in parts if p["type"] == "image_url"]
    tags = {**like.tags, "profile": profile, "seed": str(seed), "corpus-index": str(index),
            "items": str(len(urls))}
    hashes = [url_hash(u, scheme) or "" for u in urls]
    return like.model_copy(update={"tags": tags, "image_hashes": hashes})
