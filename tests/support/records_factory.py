"""Tiny factory of synthetic exchange records with known answers, for judgment tests.

``arm(...)`` builds one arm's outcome from token ids and timings; ``exchange(...)`` puts arms
together; ``run_info(...)`` makes a run whose arms proved their lookup unless told otherwise.
Every logprob is derived deterministically from the token id so that two arms given the same
tokens get bitwise-equal logprobs, and a test changes exactly what it means to change.
"""

from __future__ import annotations

from collections.abc import Sequence

from abserve.records import (
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
