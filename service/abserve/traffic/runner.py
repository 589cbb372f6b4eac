"""``run_load``: one bounded, headless Locust run in a subprocess, and what it sent.

The orchestrator and ``abserve load`` call this. Locust runs in its own process (gevent's
monkey-patching must not leak into the caller); the run stops by itself after its request
count or duration, or early when the error rate passes the limit. The per-request timings of
every process are merged into ``out_dir/timings.jsonl``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import KW_ONLY, dataclass, field
from pathlib import Path

# not from sender: it imports urllib3 (and ssl), which must come after Locust's gevent patching
from abserve.base.limits import MAX_ERROR_RATE
from abserve.base.parent_watch import PARENT_PID_ENV
from abserve.traffic.corpus import API_KEY_ENV, format_tags
from abserve.traffic.remote import LOCUSTFILE, WORKERS_MISSING, LoadWorkers
from abserve.traffic.shapes import SHAPES, ShapeName
from abserve.traffic.sources.spec import FileSource
from abserve.traffic.timing import read_timings

__all__ = ["LOCUSTFILE", "LoadError", "LoadSpec", "LoadSummary", "WorkersMissing", "locust_args",
           "run_load"]
EXIT_CODES = {0: "ok", 1: "failures", 2: "setup error", 3: "error rate over the limit",
              4: "a worker was lost", 5: "the process that started it was killed"}


class LoadError(RuntimeError):
    """The load run could not start or did not finish as asked."""


class WorkersMissing(LoadError):
    """Load workers on other hosts did not all connect within their wait (``remote``)."""


@dataclass(frozen=True)
class LoadSummary:
    """What a load run sent and where its per-request timings are."""

    run_id: str
    profile: str
    requests_sent: int
    failures: int
    timings_path: Path
    stop_reason: str | None
    exit_code: int
    out_dir: Path
    log_path: Path
    nodes: list[dict[str, object]] = field(default_factory=list)

    @property
    def error_rate(self) -> float:
        return self.failures / self.requests_sent if self.requests_sent else 0.0

    @property
    def abort_reason(self) -> str | None:
        """Why the load stopped before sending its requests, or None when it completed.

        Locust's exit code alone does not say so: it is 1 whenever any request failed
        (``--exit-code-on-error``), even one below the allowed error rate, which the judgment
        weighs; only a stop reason other than ``completed`` (error rate exceeded, setup) does.
        """
        return self.stop_reason if self.stop_reason not in (None, "completed") else None


@dataclass(frozen=True)
class LoadSpec:
    """One bounded load run: what to send, where and how (``run_load``'s settings).

    Exactly one of ``requests`` and ``duration``. ``tags`` go on every request as
    ``x-abserve-KEY`` headers and end up in the router's ``Exchange.tags`` (the orchestrator
    tags each block and its placement this way). ``api_key`` is given to the Locust process
    only (as ``ABSERVE_API_KEY``), never set in this process's environment."""

    profile: str | Path
    host: str
    _: KW_ONLY
    run_id: str
    out_dir: Path
    requests: int | None = None
    duration: float | None = None
    users: int = 4
    seed: int | None = None
    shape: ShapeName = "closed"
    rate: float = 0.0
    max_error_rate: float = MAX_ERROR_RATE
    model: str | None = None
    tokenize_url: str | None = None
    overrides: Sequence[str] = ()
    timeout_s: float = 600.0
    corpus: Path | None = None
    sweep_rates: Sequence[float] | None = None
    processes: int = 1
    deadline_s: float | None = None
    tags: Mapping[str, str] | None = None
    api_key: str | None = field(default=None, repr=False)
    # abserve run owns its router, which never restarts: a refused request fails at once
    # (the locustfile's own default, for a client whose router may restart: `abserve load`)
    connect_retry_s: float = 0.0
    # a traffic file (``abserve.traffic.sources``) instead of the profile's generated corpus;
    # ``requests`` is then how many of its accepted requests to send (``profile``: its label)
    source: FileSource | None = None
    # Locust workers on other hosts (``abserve.traffic.remote``) instead of ``processes`` here
    workers: LoadWorkers | None = None
    # more router replicas of the same run: request k goes to host k mod n (``sender``)
    also_hosts: Sequence[str] = ()


def locust_args(spec: LoadSpec) -> list[str]:
    """The ``--abserve-*`` options (shared by local, master and worker processes)."""
    if spec.shape not in SHAPES:
        raise LoadError(f"unknown shape {spec.shape!r} (one of {', '.join(SHAPES)})")
    if (spec.requests is None) == (spec.duration is None):
        raise LoadError("give exactly one of requests or duration")
    if spec.shape != "closed" and spec.rate <= 0 and not spec.sweep_rates:
        raise LoadError(f"shape {spec.shape!r} needs a positive rate")
    args = ["--host", spec.host, "--abserve-profile", str(spec.profile),
            "--abserve-run-id", spec.run_id, "--abserve-out", str(spec.out_dir),
            "--abserve-shape", spec.shape, "--abserve-rate", str(spec.rate),
            "--abserve-max-error-rate", str(spec.max_error_rate),
            "--abserve-timeout", str(spec.timeout_s),
            "--abserve-connect-retry", str(spec.connect_retry_s)]
    args += ["--abserve-requests", str(spec.requests)] if spec.requests else [
        "--abserve-duration", str(spec.duration)]
    optional = {"--abserve-seed": spec.seed, "--abserve-model": spec.model,
                "--abserve-tokenize-url": spec.tokenize_url, "--abserve-corpus": spec.corpus,
                "--abserve-set": ";".join(spec.overrides) if spec.overrides else None,
                "--abserve-sweep-rates": ",".join(map(str, spec.sweep_rates))
                if spec.sweep_rates else None,
                "--abserve-tags": format_tags(dict(spec.tags)) if spec.tags else None,
                "--abserve-source": spec.source.model_dump_json() if spec.source else None,
                "--abserve-also-hosts": ",".join(spec.also_hosts) if spec.also_hosts else None}
    for flag, value in optional.items():
        if value is not None:
            args += [flag, str(value)]
    return args


def run_load(spec: LoadSpec) -> LoadSummary:
    """Run headless Locust until the load is sent (or stopped early) and summarize it."""
    out_dir = Path(spec.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    for stale in [*out_dir.glob("timings-*.jsonl"), *out_dir.glob("node-*.json")]:
        stale.unlink()
    if not LOCUSTFILE.is_file():
        raise LoadError(f"locustfile not found at {LOCUSTFILE}")
    common = locust_args(spec)
    cmd = [sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), "--headless",
           "-u", str(spec.users), "-r", str(spec.users), "--only-summary", "--stop-timeout", "5",
           *common]
    if spec.workers is not None:
        if spec.processes > 1:
            raise LoadError("give either processes (on this host) or workers (on other hosts)")
        if spec.users < spec.workers.count:
            raise LoadError(f"{spec.users} users cannot keep {spec.workers.count} load workers busy: "
                            "give at least one user per worker")
        cmd += spec.workers.master_args()
    elif spec.processes > 1:
        cmd += ["--processes", str(spec.processes)]
    budget = spec.deadline_s or ((spec.duration or 0) + spec.timeout_s + 120)
    if spec.workers is not None:
        budget += spec.workers.connect_timeout_s
    cmd += ["--run-time", f"{int(budget)}s"]
    log_path = out_dir / "locust.log"
    # Locust stops by itself if this process is killed (abserve.base.parent_watch)
    env = {**os.environ, "PYTHONUNBUFFERED": "1", PARENT_PID_ENV: str(os.getpid())}
    if spec.api_key is not None:
        env[API_KEY_ENV] = spec.api_key
    with log_path.open("w") as log:
        try:
            proc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, env=env,
                                  timeout=budget + 60, check=False)
        except subprocess.TimeoutExpired as exc:
            raise LoadError(f"load run did not stop within {budget + 60:.0f}s; see {log_path}") \
                from exc
    return summarize(out_dir, spec.run_id, str(spec.profile), proc.returncode, log_path)


def summarize(out_dir: Path, run_id: str, profile: str, exit_code: int,
              log_path: Path) -> LoadSummary:
    """Merge the per-process timing files and node summaries of a finished run."""
    nodes = [json.loads(p.read_text()) for p in sorted(out_dir.glob("node-*.json"))]
    reasons = [n["stop_reason"] for n in nodes if n.get("stop_reason")]
    missing = next((r for r in reasons if str(r).startswith(WORKERS_MISSING)), None)
    if missing is not None:
        raise WorkersMissing(f"load refused: {str(missing).partition(': ')[2]} (log: {log_path})")
    if exit_code == 2 or any(str(r).startswith("setup") for r in reasons):
        detail = next((r for r in reasons if str(r).startswith("setup")), "see the log")
        raise LoadError(f"load setup failed: {detail} (log: {log_path})")
    parts = sorted(out_dir.glob("timings-*.jsonl"))
    records = read_timings(parts)
    merged = out_dir / "timings.jsonl"
    with merged.open("wb") as fh:
        for part in parts:
            fh.write(part.read_bytes())
    return LoadSummary(run_id=run_id, profile=profile, requests_sent=len(records),
                       failures=sum(not r.ok for r in records), timings_path=merged,
                       stop_reason=reasons[0] if reasons else None, exit_code=exit_code,
                       out_dir=out_dir, log_path=log_path, nodes=nodes)
