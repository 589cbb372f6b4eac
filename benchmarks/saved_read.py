"""Speed and memory of the saved-run readers on files of 100,000 requests (issue 49's target:
two sides of two such files compared in at most 30 s and 1 GiB, so reading must stay well
inside that).

For each tool a file of ``--requests`` requests is written in the tool's own layout, its
per-request values varied around one real record from tests/fixtures/saved/ (so the reader
meets exactly what the tool writes): vLLM's benchmark (``--tokens`` output tokens a request:
that many ITL entries and a generated text), AIPerf (``profile_export.jsonl`` with its
summary, ``inputs.json`` and ``outputs.json`` beside it) and GuideLLM (a JSON report; and a
YAML one of ``--yaml-requests``, the slow path). Then a
fresh Python process opens it with ``open_saved`` and reads every request; it reports the
wall time of that (imports excluded) and its peak resident memory, and the peak of a process
that only imports the readers (the baseline). Run from the repository root::

    python benchmarks/saved_read.py [--requests 100000] [--tokens 64] [--yaml-requests 10000]

Results: benchmarks/saved_read.md.
"""

from __future__ import annotations

import argparse
import copy
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures" / "saved"
JITTER = 1.2345678901234e-5  # times written with all their digits, as the tools write them
# Peak memory is the process's VmHWM: ru_maxrss would count the parent's pages at fork (it
# survives exec), and the parent holds what it generated.
READ = """
import re, sys, time
from abserve.saved import open_saved
def peak_kb():
    return int(re.search(r"VmHWM:\\s+(\\d+)", open("/proc/self/status").read()).group(1))
t0 = time.perf_counter()
if sys.argv[1] == "-":
    print(0, peak_kb(), 0); raise SystemExit
run = open_saved(sys.argv[1])
n = ok = 0
for r in run.requests:
    n += 1; ok += r.ok
print(time.perf_counter() - t0, peak_kb(), n, ok)
"""


def vllm_bench(path: Path, n: int, tokens: int) -> None:
    doc = json.loads((FIXTURES / "vllm-bench" / "run1.json").read_text())
    doc["num_prompts"] = n
    for key, make in (("input_lens", lambda i: 50 + i % 100), ("output_lens", lambda i: tokens),
                      ("ttfts", lambda i: 0.05 + (i % 997) * JITTER),
                      ("itls", lambda i: [0.01 + ((i + j) % 89) * JITTER for j in range(tokens - 1)]),
                      ("latencies", lambda i: 0.05 + tokens * 0.01 + (i % 991) * JITTER),
                      ("start_times", lambda i: 1000.0 + i * 0.01), ("queue_times", lambda i: 0.0),
                      ("generated_texts", lambda i: f"request {i} " + "word " * tokens),
                      ("errors", lambda i: "")):
        doc[key] = [make(i) for i in range(n)]
    path.write_text(json.dumps(doc))


def aiperf(folder: Path, n: int, tokens: int) -> Path:
    source = FIXTURES / "aiperf" / "run1"
    folder.mkdir()
    for name in ("profile_export_aiperf.json",):
        (folder / name).write_bytes((source / name).read_bytes())
    record = json.loads((source / "profile_export.jsonl").read_text().splitlines()[0])
    session = json.loads((source / "inputs.json").read_text())["data"][0]
    output = json.loads((source / "outputs.json").read_text())["data"][0]
    with open(folder / "profile_export.jsonl", "w") as lines:
        for i in range(n):
            r = copy.deepcopy(record)
            r["metadata"]["conversation_id"] = f"session_{i:06d}"
            r["metrics"]["time_to_first_token"]["value"] = 50 + (i % 997) * JITTER * 1e3
            gaps = [10 + (i + j) % 89 * JITTER * 1e3 for j in range(tokens - 1)]
            r["metrics"]["inter_chunk_latency"]["value"] = gaps
            lines.write(json.dumps(r) + "\n")
    for name, entry, write in (("inputs.json", session, _input), ("outputs.json", output, _output)):
        with open(folder / name, "w") as f:
            f.write('{"data": [')
            f.write(", ".join(json.dumps(write(entry, i)) for i in range(n)))
            f.write("]}")
    return folder / "profile_export.jsonl"


def _input(session: dict[str, Any], i: int) -> dict[str, Any]:
    entry = copy.deepcopy(session)
    entry["session_id"] = f"session_{i:06d}"
    # text only (the fixture's 28-px image would make the file 7 KB a request)
    entry["payloads"][0]["messages"][0]["content"] = [{"type": "text", "text": f"prompt {i}"}]
    return entry


def _output(output: dict[str, Any], i: int) -> dict[str, Any]:
    return {**output, "conversation_id": f"session_{i:06d}", "response_text": f"answer {i}"}


def guidellm(path: Path, n: int, tokens: int) -> None:
    report = json.loads((FIXTURES / "guidellm" / "run1.json").read_text())
    bench = report["benchmarks"][0]
    stats = bench["requests"]["successful"][0]
    bench["requests"]["successful"] = []
    head, _, tail = json.dumps(report).partition('"successful": []')
    with open(path, "w") as f:
        f.write(head + '"successful": [')
        for i in range(n):
            s = dict(stats, time_to_first_token_ms=50 + (i % 997) * JITTER * 1e3, output_tokens=tokens)
            f.write(("" if i == 0 else ", ") + json.dumps(s))
        f.write("]" + tail)


def guidellm_yaml(path: Path, n: int, tokens: int) -> None:
    """The same report as YAML (built whole in memory: keep ``n`` modest)."""
    import yaml

    report = json.loads((FIXTURES / "guidellm" / "run1.json").read_text())
    stats = report["benchmarks"][0]["requests"]["successful"][0]
    report["benchmarks"][0]["requests"]["successful"] = [
        dict(stats, time_to_first_token_ms=50 + (i % 997) * JITTER * 1e3, output_tokens=tokens)
        for i in range(n)]
    path.write_text(yaml.safe_dump(report, sort_keys=True))


def measure(source: str) -> tuple[float, float, int, int]:
    done = subprocess.run([sys.executable, "-c", READ, source], capture_output=True, text=True, check=True,
                          env={"PYTHONPATH": str(REPO / "service"), "PATH": "/usr/bin:/bin"})
    seconds, rss_kb, n, *ok = done.stdout.split()
    return float(seconds), int(rss_kb) / 1024, int(n), int(ok[0]) if ok else 0


def main() -> None:
    parser = argparse.ArgumentParser(description="speed and memory of the saved-run readers")
    parser.add_argument("--requests", type=int, default=100_000)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--tools", nargs="+", default=["vllm-bench", "aiperf", "guidellm", "guidellm-yaml"])
    parser.add_argument("--yaml-requests", type=int, default=10_000, help="requests of the YAML report")
    args = parser.parse_args()
    _, base_mb, _, _ = measure("-")
    print(f"baseline (imports only): {base_mb:.0f} MiB peak")
    with tempfile.TemporaryDirectory() as tmp:
        for tool in args.tools:
            t0 = time.perf_counter()
            if tool == "vllm-bench":
                source = Path(tmp) / "vllm-bench.json"
                vllm_bench(source, args.requests, args.tokens)
            elif tool == "aiperf":
                source = aiperf(Path(tmp) / "aiperf", args.requests, args.tokens)
            elif tool == "guidellm-yaml":
                source = Path(tmp) / "guidellm.yaml"
                guidellm_yaml(source, args.yaml_requests, args.tokens)
            else:
                source = Path(tmp) / "guidellm.json"
                guidellm(source, args.requests, args.tokens)
            made = time.perf_counter() - t0
            size = sum(p.stat().st_size for p in source.parent.iterdir()) if tool == "aiperf" \
                else source.stat().st_size
            seconds, mb, n, ok = measure(str(source))
            print(f"{tool}: {n} requests ({ok} ok), {size / 2**20:.0f} MiB on disk (written in "
                  f"{made:.0f} s): read in {seconds:.1f} s, peak {mb:.0f} MiB", flush=True)


if __name__ == "__main__":
    main()
