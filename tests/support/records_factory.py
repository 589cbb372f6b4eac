"""Tiny factory of synthetic exchange records with known answers, for judgment tests.

``arm(...)`` builds one arm's outcome from token ids and timings; ``exchange(...)`` puts arms
together; ``run_info(...)`` makes a run whose arms proved their lookup unless told otherwise.
``full_exchange`` / ``full_run_info`` set every field of the record contract (the store's
round-trip samples).
Every logprob is derived deterministically from the token id so that two arms given the same
tokens get bitwise-equal logprobs, and a test changes exactly what it means to change.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence

from abserve.model.records import (
    ArmOutcome,
    ArmProvenance,
    Exchange,
    LookupTelemetry,
    PositionLogprobs,
    RunInfo,
    TopLogprob,
)

VOCAB_TOP = 5  # candidates kept at each position


def position(token_id: int, alternatives: Sequence[int] = (), logprob: float = -0.1) -> PositionLogprobs:
    """The chosen ``token_id`` with top-k: itself first, then ``alternatives`` (or neighbours)."""
    alts = list(alternatives) or [token_id + 1, token_id + 2, token_id + 3, token_id + 4]
    top = [TopLogprob(token=f"t{token_id}", token_id=token_id, logprob=logprob)]
    for rank, alt in enumerate(alts[: VOCAB_TOP - 1], start=1):
        top.append(TopLogprob(token=f"t{alt}", token_id=alt, logprob=logprob - 1.0 * rank))
    return PositionLogprobs(token=f"t{token_id}", token_id=token_id, logprob=logprob, top=top)


def arm(
    name: str,
    tokens: Sequence[int] = (1, 2, 3, 4, 5, 6, 7, 8),
    *,
    ttft: float = 0.05,
    itl: float | Sequence[float] = 0.01,
    logprobs: Sequence[PositionLogprobs] | None = None,
    status: int | None = 200,
    error_class: str | None = None,
    finish_reason: str | None = "length",
    truncated: bool = False,
    usage: dict[str, int] | None = None,
    prompt_tokens: int = 100,
) -> ArmOutcome:
    """One arm's outcome: first token at ``ttft``, then one token every ``itl`` seconds."""
    gaps = [itl] * max(len(tokens) - 1, 0) if isinstance(itl, float | int) else list(itl)
    times = [ttft]
    for gap in gaps[: max(len(tokens) - 1, 0)]:
        times.append(times[-1] + float(gap))
    times = times[: len(tokens)]
    lps = list(logprobs) if logprobs is not None else [position(t) for t in tokens]
    done = (
        usage
        if usage is not None
        else {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": len(tokens),
            "total_tokens": prompt_tokens + len(tokens),
        }
    )
    return ArmOutcome(
        arm=name,
        status=status,
        error_class=error_class,
        t_send=0.0,
        t_first_byte=ttft * 0.9 if tokens else None,
        t_first_token=times[0] if tokens else None,
        token_times=times,
        t_end=(times[-1] if times else ttft) + 0.001,
        text="".join(f"t{t} " for t in tokens),
        token_ids=list(tokens),
        logprobs=lps,
        finish_reason=finish_reason,
        usage=done,
        truncated=truncated,
    )


def exchange(
    index: int,
    arms: Sequence[ArmOutcome],
    *,
    run_id: str = "run-1",
    profile: str = "default",
    items: int = 1,
    started_at: float | None = None,
    extra_tags: dict[str, str] | None = None,
) -> Exchange:
    """An exchange ``index`` (one second apart) carrying the given arms, tagged profile/items."""
    tags = {"profile": profile, "items": str(items), **(extra_tags or {})}
    return Exchange(
        run_id=run_id,
        request_id=f"req-{index:05d}",
        endpoint="chat/completions",
        stream=True,
        fingerprint=f"fp-{index}",
        tags=tags,
        started_at=started_at if started_at is not None else 1_000.0 + index,
        arms={a.arm: a for a in arms},
    )


def provenance(lookup: str | None, proven: str | None = "same", calls: int = 100) -> ArmProvenance:
    """An arm that expected ``lookup`` and proved it (``proven="same"``) or proved ``proven``."""
    return ArmProvenance(
        expected_lookup=lookup,
        proven_lookup=lookup if proven == "same" else proven,
        proof_detail="synthetic",
        patched_modules=["vllm.v1.worker.gpu_model_runner"],
        vllm_version="0.0-test",
        server_args=["--max-num-seqs", "4"],
        telemetry=LookupTelemetry(
            lookup_calls=calls,
            items_examined=calls * (8 if lookup == "linear" else 3),
            lookup_seconds=calls * 1e-6,
            gather_calls=calls // 2,
            gather_seconds=calls * 2e-6,
            items_per_request={"8": calls},
        ),
    )


def run_info(
    arms: dict[str, ArmProvenance] | None = None,
    *,
    run_id: str = "run-1",
    status: str = "completed",
) -> RunInfo:
    """A completed run with arms a (linear), b (bisect) and a2 (linear) unless ``arms`` is given."""
    if arms is None:
        arms = {"a": provenance("linear"), "b": provenance("bisect"), "a2": provenance("linear")}
    return RunInfo(
        run_id=run_id,
        status=status,
        started_at=1_000.0,
        ended_at=2_000.0,
        config={"model": "tiny"},
        provenance={"abserve_version": "0.1.0", "git_commit": "deadbeef", "seed": 7},
        arms=arms,
    )


def ab_run(
    n: int = 60,
    *,
    itl_shift: float = 0.0,
    ttft_shift: float = 0.0,
    arms: Sequence[str] = ("a", "b", "a2"),
    seed: int = 0,
    candidate_tokens: dict[int, list[int]] | None = None,
    floor_tokens: dict[int, list[int]] | None = None,
    items: Sequence[int] = (1, 4, 16, 64),
    profiles: Sequence[str] = ("chat", "many-images"),
    itl_per_item: float = 0.0,
) -> list[Exchange]:
    """``n`` exchanges on ``arms`` with noisy timings; arm ``b`` shifted by the given amounts.

    ``candidate_tokens`` / ``floor_tokens`` replace b's / a2's tokens on the given exchange
    indices; ``itl_per_item`` adds a b-only cost per image (a trend over items).
    """
    import numpy as np

    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        k = items[i % len(items)]
        outs = []
        for name in arms:
            is_b = name == "b"
            ttft = 0.05 + rng.normal(0, 0.002) + (ttft_shift if is_b else 0.0)
            itl = 0.01 + rng.normal(0, 0.0004) + ((itl_shift + itl_per_item * k) if is_b else 0.0)
            override = (candidate_tokens or {}) if is_b else (floor_tokens or {}) if name == "a2" else {}
            outs.append(arm(name, override.get(i, [1, 2, 3, 4, 5, 6, 7, 8]), ttft=ttft, itl=itl))
        out.append(exchange(i, outs, items=k, profile=profiles[i % len(profiles)]))
    return out

# ---- every field set: the store's round-trip samples --------------------------------------
# Records whose every field of the contract is set and none is a default (unicode, control
# characters, -inf and 1e-300 logprobs, 2**31-1 ids, nested config): what is written must be
# what is read back, whatever the backend.


def full_position(i: int) -> PositionLogprobs:
    return PositionLogprobs(
        token=f"tok{i} ünï 🙂",
        logprob=-0.1 * i - 1e-17 if i else -math.inf,
        token_id=1000 + i,
        top=[
            TopLogprob(token=f"alt{i}", logprob=-2.5 - i / 3, token_id=2000 + i),
            TopLogprob(token="\x00\n\t\"'", logprob=-1e300, token_id=None),
        ],
    )


def full_outcome(name: str, seed: int = 0) -> ArmOutcome:
    n = 5 + seed % 3
    return ArmOutcome(
        arm=name,
        status=200 + seed % 2,
        error_class="truncated",
        error_detail="stream ended without [DONE]",
        vllm_request_id=f"chatcmpl-{name}-{seed}",
        t_send=1e-6 * (seed + 1),
        t_first_byte=0.0123456789012345,
        t_first_token=0.1 / 3,
        token_times=[0.1 / 3 + k * 0.0070000000000001 for k in range(n)],
        t_end=1.2345678901234567,
        text="héllo wörld 🙂\nnew line",
        token_ids=[0, 1, 2**31 - 1, 151_643, 7][:n] + [9] * max(0, n - 5),
        logprobs=[full_position(k) for k in range(n)],
        prompt_logprobs=[full_position(k + 100) for k in range(2)],
        finish_reason="length",
        usage={"prompt_tokens": 123, "completion_tokens": n, "total_tokens": 123 + n},
        truncated=True,
    )


def full_exchange(run_id: str, i: int, started_at: float | None = None) -> Exchange:
    return Exchange(
        schema_version=1,
        run_id=run_id,
        request_id=f"req-{i:06d}",
        endpoint="completions" if i % 2 else "chat/completions",
        stream=bool(i % 3),
        fingerprint=f"{i:064x}",
        prompt_text=f"describe image {i} — “quoted”",
        image_hashes=[f"{i:08x}" * 8, "ab" * 32],
        tags={"profile": "multi-image", "items": str(i % 7)},
        started_at=1_700_000_000.123456 + i * 0.001 if started_at is None else started_at,
        arms={"a": full_outcome("a", i), "b": full_outcome("b", i + 1), "a2": full_outcome("a2", i + 2)},
    )


def full_run_info(run_id: str) -> RunInfo:
    return RunInfo(
        run_id=run_id,
        status="running",
        started_at=time.time(),
        ended_at=1.5,
        config={"arms": ["a", "b"], "flush_interval_s": 0.5, "nested": {"k": [1, 2.5, None]}},
        provenance={"host": {"machine": "h"}, "git": "abc123", "seeds": {"load": 1, "server": 2}},
        arms={
            "a": ArmProvenance(
                expected_lookup="linear",
                proven_lookup="linear",
                proof_detail="worker counted linear calls",
                patched_modules=["vllm.x"],
                vllm_version="0.32.0",
                server_args=["--port", "8001"],
                url="http://127.0.0.1:8001",
                placement={"cpus": [0, 1]},
                telemetry=LookupTelemetry(
                    lookup_calls=3,
                    items_examined=9,
                    lookup_seconds=0.25,
                    gather_calls=2,
                    gather_seconds=0.5,
                    items_per_request={"4": 3},
                ),
            )
        },
    )
