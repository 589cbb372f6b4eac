"""Sample records for the store tests: every field of the record contract set, none default."""

from __future__ import annotations

import math
import time

from abserve.records import (
    ArmOutcome,
    ArmProvenance,
    Exchange,
    LookupTelemetry,
    PositionLogprobs,
    RunInfo,
    TopLogprob,
)


def position(i: int) -> PositionLogprobs:
    return PositionLogprobs(
        token=f"tok{i} ünï 🙂",
        logprob=-0.1 * i - 1e-17 if i else -math.inf,
        token_id=1000 + i,
        top=[
            TopLogprob(token=f"alt{i}", logprob=-2.5 - i / 3, token_id=2000 + i),
            TopLogprob(token="\x00\n\t\"'", logprob=-1e300, token_id=None),
        ],
    )


def outcome(arm: str, seed: int = 0) -> ArmOutcome:
    n = 5 + seed % 3
    return ArmOutcome(
        arm=arm,
        status=200 + seed % 2,
        error_class="truncated",
        error_detail="stream ended without [DONE]",
        vllm_request_id=f"chatcmpl-{arm}-{seed}",
        t_send=1e-6 * (seed + 1),
        t_first_byte=0.0123456789012345,
        t_first_token=0.1 / 3,
        token_times=[0.1 / 3 + k * 0.0070000000000001 for k in range(n)],
        t_end=1.2345678901234567,
        text="héllo wörld 🙂\nnew line",
        token_ids=[0, 1, 2**31 - 1, 151_643, 7][:n] + [9] * max(0, n - 5),
        logprobs=[position(k) for k in range(n)],
        prompt_logprobs=[position(k + 100) for k in range(2)],
        finish_reason="length",
        usage={"prompt_tokens": 123, "completion_tokens": n, "total_tokens": 123 + n},
        truncated=True,
    )


def exchange(run_id: str, i: int, started_at: float | None = None) -> Exchange:
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
        arms={"a": outcome("a", i), "b": outcome("b", i + 1), "a2": outcome("a2", i + 2)},
    )


def run_info(run_id: str) -> RunInfo:
    return RunInfo(
        run_id=run_id,
        status="running",
        started_at=time.time(),
        ended_at=1.5,
        config={"arms": ["a", "b"], "flush_interval_s": 0.5, "nested": {"k": [1, 2.5, None]}},
        provenance={"host": "h", "git": "abc123", "seeds": [1, 2]},
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
