"""A real store holding a release ledger, for the ledger site's tests, benchmark and screenshots.

``entry(...)`` makes a ``LedgerEntry`` with the few numbers a test sets (a tpot gate with its
interval and allowance, equality, two arm builds); ``add_signoff`` records its run in
``abserve_runs`` (through the store API) and the entry in ``abserve_ledger`` (SQLAlchemy, as the
report writer does); ``add_accepted`` an ``AcceptedBuild``; ``write_fake_report`` a small
report folder whose ``report.html`` names its run as the real one does (its title).
``release_stream`` fills a store with a config's series of candidates, one accepted.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from sqlalchemy import insert, update

from abserve.ledger.entry import (
    AcceptedBuild,
    ArmBuild,
    CIFacts,
    EqualityFacts,
    GateEffect,
    LedgerEntry,
)
from abserve.model.records import RunInfo
from abserve.store import Store
from abserve.store.schema import accepted_table, ledger_table, runs_table

T0 = 1_796_083_200.0  # 2026-12-01 00:00 UTC: the first sign-off of a stream


def arm(name: str, role: str, version: str, *, image: str | None = None, sha: str | None = None,
        args: tuple[str, ...] = (), differ: tuple[str, ...] = ()) -> ArmBuild:
    return ArmBuild(name=name, role=role, vllm_version=version, image=image, git_sha=sha,
                    server_args=list(args), flags_differ=list(differ), proof="proven bisect")


def entry(run_id: str, config: str = "cpu-default", *, t: float = T0, verdict: str = "pass",
          tpot: tuple[float, float, float] = (0.0002, -0.0001, 0.0005), threshold: float = 0.001,
          ttft: tuple[float, float, float] | None = None, mismatches: int = 0, comparable: int = 480,
          candidate: ArmBuild | None = None, baseline: ArmBuild | None = None,
          report_dir: Path | None = None, ci: CIFacts | None = None,
          accepted_from: str | None = None) -> LedgerEntry:
    """A sign-off: a critical tpot gate ``(estimate, low, high)`` in seconds, optionally ttft."""
    gates = [GateEffect(name="tpot.hl", metric="tpot", critical=True, outcome=verdict if verdict in
                        ("pass", "fail") else "inconclusive", estimate=tpot[0], low=tpot[1], high=tpot[2],
                        threshold=threshold)]
    if ttft is not None:
        gates.append(GateEffect(name="ttft.hl", metric="ttft", critical=True, outcome="pass",
                                estimate=ttft[0], low=ttft[1], high=ttft[2], threshold=0.01))
    gates.append(GateEffect(name="e2e.p99", metric="e2e", critical=False, outcome="pass", estimate=0.002))
    rate = mismatches / comparable if comparable else None
    return LedgerEntry(
        run_id=run_id, recorded_at=t, started_at=t - 600, duration_s=600.0, config_name=config,
        config_sha256="ab" * 32, verdict=verdict,
        exit_code={"pass": 0, "fail": 1, "invalid": 3}.get(verdict, 2),
        requests=comparable, exchanges_total=comparable + 16,
        arms=[baseline or arm("a", "baseline", "0.31.0"),
              candidate or arm("b", "candidate", "0.32.0", args=("--max-num-seqs", "8"),
                               differ=("--max-num-seqs",))],
        gates=gates,
        equality=EqualityFacts(outcome="pass" if mismatches == 0 else "fail", comparable=comparable,
                               mismatches=mismatches, rate=rate, bound=(rate or 0.0) + 0.006),
        ci=ci or CIFacts(), report_dir=None if report_dir is None else str(report_dir),
        accepted_from=accepted_from,
    )


def add_run(store: Store, run_id: str, started_at: float, status: str = "completed",
            experiment: str | None = None) -> None:
    """A run row; ``status`` completed, running (owned by this live process) or half-written
    (running, its owner gone long ago: read as interrupted)."""
    info = RunInfo(run_id=run_id, started_at=started_at, status="running",
                   provenance={"experiment": experiment} if experiment else {})
    store.create_run(info)
    if status == "completed":
        store.finish_run(run_id, "completed")
    elif status == "half-written":
        with store.engine.begin() as conn:
            conn.execute(update(runs_table).where(runs_table.c.run_id == run_id)
                         .values(heartbeat_at=started_at, owner_host="gone-host", owner_pid=2**22 - 3))


def add_entry_row(store: Store, e: LedgerEntry, text: str | None = None) -> None:
    """The ledger row of ``e`` (its JSON, or ``text`` as the entry column: a newer or torn one)."""
    with store.engine.begin() as conn:
        conn.execute(insert(ledger_table), {
            "run_id": e.run_id, "recorded_at": e.recorded_at, "config_name": e.config_name,
            "verdict": e.verdict, "exit_code": e.exit_code,
            "entry": text if text is not None else e.model_dump_json()})


def add_signoff(store: Store, e: LedgerEntry) -> None:
    """A completed run with its ledger entry."""
    add_run(store, e.run_id, e.started_at or e.recorded_at)
    add_entry_row(store, e)


def add_accepted(store: Store, e: LedgerEntry, name: str, at: float) -> AcceptedBuild:
    build = e.arm("candidate")
    assert build is not None
    a = AcceptedBuild(name=name, config_name=e.config_name or "", run_id=e.run_id, arm=build.name,
                      accepted_at=at, build=build)
    with store.engine.begin() as conn:
        conn.execute(insert(accepted_table), {"name": name, "config_name": a.config_name, "run_id": e.run_id,
                                              "accepted_at": at, "accepted": a.model_dump_json()})
    return a


def write_fake_report(folder: Path, run_id: str, verdict: str = "pass", html_body: str = "") -> Path:
    """A report folder: report.html titled as the real one (``abserve RUN_ID: verdict``), .md,
    .json and junit.xml."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "report.html").write_text(
        f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>abserve {run_id}: {verdict}'
        f"</title></head><body><h1>{run_id}</h1>{html_body}</body></html>", encoding="utf-8")
    (folder / "report.md").write_text(f"# {run_id}\n", encoding="utf-8")
    (folder / "report.json").write_text(json.dumps({"run_id": run_id, "verdict": verdict}), encoding="utf-8")
    (folder / "junit.xml").write_text("<testsuites/>", encoding="utf-8")
    return folder


def release_stream(store: Store, reports: Path, n: int = 8, config: str = "cpu-default",
                   accept_at: int = 2) -> list[LedgerEntry]:
    """``n`` sign-offs of ``config`` an hour apart, each with a report folder; candidate
    0.32.0rc<i>; the one at ``accept_at`` accepted as ``v0.32-rc{accept_at}``; the last one
    slower (fail) with one mismatch and a flag more."""
    made: list[LedgerEntry] = []
    for i in range(n):
        last = i == n - 1
        run_id = f"{config}-{time.strftime('%Y%m%d-%H%M', time.gmtime(T0 + 3600 * i))}"
        cand = arm("b", "candidate", f"0.32.0rc{i}", image=f"vllm/vllm-openai:rc{i}", sha=f"{i:x}" * 12,
                   args=("--max-num-seqs", "8", *(("--enable-chunked-prefill",) if last else ())),
                   differ=("--max-num-seqs",))
        e = entry(run_id, config, t=T0 + 3600 * i, verdict="fail" if last else "pass",
                  tpot=(0.0016, 0.0012, 0.002) if last else (0.0001 * (i % 3), -0.0002, 0.0004 + 0.0001 * i),
                  ttft=(0.001, -0.002, 0.004), mismatches=1 if last else 0, candidate=cand,
                  report_dir=write_fake_report(reports / run_id, run_id, "fail" if last else "pass"),
                  ci=CIFacts(provider="github", commit=f"{i:x}" * 40, branch="main",
                             pipeline_url=f"https://github.com/example/vllm/actions/runs/{1000 + i}"),
                  accepted_from=made[accept_at].run_id if i > accept_at else None)
        add_signoff(store, e)
        if i == accept_at:
            add_accepted(store, e, f"v0.32-rc{i}", T0 + 3600 * i + 60)
        made.append(e)
    return made
