"""``abserve watch RUN_ID``: live progress of a run, read from its store while it runs.

Any flow writes its exchanges to a store (``abserve run``, the ``docker compose`` sign-off, a
router started by hand), so the store is the one place every flow can be watched from. Each
refresh reads what was recorded since the last one (by row id; the whole run again when the
count says a row was committed out of order, as PostgreSQL with several router workers can),
counts requests, errors and mismatches per arm, and judges the stored exchanges as the rounds
loop of ``abserve run`` does (``abserve.runs.rounds.interim_judgment``) under the policy the
run recorded as it started (``abserve.report.locate``: the one every look of the run judges
with), else ``configs/policy/default.yaml``; ``--policy`` overrides it and says so. Judging
costs about a second per thousand exchanges, so it runs only when new exchanges arrived and at
most every N refreshes, N chosen so judging takes at most a quarter of the watch's time. The
frame itself is ``abserve.runs.watch_frame``.

Output: a rich ``Live`` panel on a terminal; one plain status line per refresh otherwise
(``docker logs``, CI logs); with ``--once`` one plain frame and exit. The watch ends with 0
once the run's status is final (``completed`` or ``interrupted``), and with 4
(``abserve.base.exit_codes.USAGE``) and one line when the store or the run does not exist
(``--wait S``: after waiting up to S seconds for them to appear).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import typer
from rich.console import Console
from rich.live import Live
from sqlalchemy import select
from sqlalchemy.exc import SQLAlchemyError

from abserve.base import exit_codes
from abserve.compare import Policy, PolicyError, load_policy
from abserve.model.records import Exchange, RunInfo
from abserve.report.judging import DEFAULT_POLICY, ReportError, open_store
from abserve.report.locate import LocateError, find_policy, find_store, override_note
from abserve.runs.rounds import interim_judgment, parse_budget
from abserve.runs.watch_frame import (
    FINAL_STATUSES,
    Frame,
    Gate,
    count_arms,
    critical_gates,
    judge_stride,
    plain_frame,
    primary_arm,
    rich_frame,
    roles_for_arms,
    run_clock,
    status_line,
)
from abserve.store import Store, StoreError
from abserve.store.rows import exchange_from_row
from abserve.store.schema import exchanges_table

PAGE = 512
Budget = tuple[float | None, int | None]


class ExchangeCache:
    """One run's exchanges, read incrementally (see the module docstring)."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self.by_id: dict[int, Exchange] = {}
        self.last_id = 0

    def _read_new(self, store: Store) -> None:
        cols = exchanges_table.c
        while True:
            stmt = (select(exchanges_table).where(cols.run_id == self.run_id, cols.id > self.last_id)
                    .order_by(cols.id).limit(PAGE))
            with store.engine.connect() as conn:
                rows = [row._mapping for row in conn.execute(stmt)]
            for row in rows:
                self.by_id[int(row["id"])] = exchange_from_row(row)
            if rows:
                self.last_id = int(rows[-1]["id"])
            if len(rows) < PAGE:
                return

    def refresh(self, store: Store) -> list[Exchange]:
        """Every exchange of the run recorded so far."""
        committed = store.count_exchanges(self.run_id)  # counted first: every row read after it
        self._read_new(store)
        if len(self.by_id) < committed:  # a row committed after a later id was read: start over
            self.by_id, self.last_id = {}, 0
            self._read_new(store)
        return list(self.by_id.values())


@dataclass
class Watcher:
    """Looks at a run once per refresh, judging it when due."""

    store: Store
    run_id: str
    policy: Policy
    every_s: float
    budget: Budget = (None, None)
    now: Callable[[], float] = time.time
    cache: ExchangeCache = field(init=False)
    refreshes: int = 0
    stride: int = 1
    judged_refresh: int | None = None
    judged_at: int | None = None
    gates: list[Gate] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.cache = ExchangeCache(self.run_id)

    def _due(self, exchanges: int, final: bool) -> bool:
        if exchanges == 0 or exchanges == self.judged_at:
            return False
        return final or self.judged_refresh is None or self.refreshes - self.judged_refresh >= self.stride

    def _judge(self, run: RunInfo, exchanges: list[Exchange], primary: str | None) -> None:
        began = time.monotonic()
        arms = {a for ex in exchanges for a in ex.arms}
        judgment = interim_judgment(run, exchanges, roles_for_arms(self.policy, arms, primary))
        self.stride = judge_stride(time.monotonic() - began, self.every_s)
        self.gates, self.judged_at = critical_gates(judgment), len(exchanges)
        self.judged_refresh = self.refreshes

    def look(self) -> Frame:
        """One frame of the run as it is stored now."""
        run = self.store.get_run(self.run_id)
        if run is None:
            raise ReportError(f"run {self.run_id!r} is no longer in the store")
        exchanges = self.cache.refresh(self.store)
        primary = primary_arm(run, (a for ex in exchanges for a in ex.arms), self.policy)
        final = run.status in FINAL_STATUSES
        if self._due(len(exchanges), final):
            self._judge(run, exchanges, primary)
        self.refreshes += 1
        note = f"judged every {self.stride} refreshes" if self.stride > 1 else ""
        return Frame(run_id=run.run_id, status=run.status, exchanges=len(exchanges),
                     counts=count_arms(exchanges, primary),
                     clock=run_clock(run, len(exchanges), self.now(), self.budget),
                     policy=self.policy.name, gates=self.gates, judged_at=self.judged_at, judge_note=note)


# ---- opening the run and its policy ----------------------------------------------------


def store_url(run_id: str, db: str | None, runs: Path) -> str:
    if db is not None:
        return db
    try:
        return f"sqlite:///{find_store(run_id, runs)}"
    except LocateError as exc:
        raise ReportError(str(exc)) from exc


def open_run(run_id: str, db: str | None, runs: Path, wait_s: float,
             sleep: Callable[[float], None] = time.sleep) -> tuple[str, Store, RunInfo]:
    """The store and the run, waiting up to ``wait_s`` for both to appear."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            url = store_url(run_id, db, runs)
            store = open_store(url)
        except (ReportError, StoreError, SQLAlchemyError, OSError) as exc:
            problem: str = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        else:
            run = store.get_run(run_id)
            if run is not None:
                return url, store, run
            store.close()
            problem = f"no run {run_id!r} in the store"
        if time.monotonic() >= deadline:
            raise ReportError(problem)
        sleep(min(1.0, max(deadline - time.monotonic(), 0.0)))


def choose_policy(run_id: str, url: str, run: RunInfo, given: Path | None) -> tuple[Policy, str]:
    """``--policy`` (said to override the run's own when the run recorded one), else the policy
    the run recorded, else the default; and where it came from."""
    path = given
    if path is None:
        store = Path(url.removeprefix("sqlite:///")) if url.startswith("sqlite:///") else None
        try:
            found = find_policy(run_id, store, run.provenance)
        except LocateError:
            path = DEFAULT_POLICY
        else:
            return found.policy, found.source
    how = "the run records none" if given is None else override_note(run.provenance)
    try:
        return load_policy(path), f"{path} ({how})"
    except PolicyError as exc:
        raise ReportError(f"{exc}; pass --policy FILE") from exc


# ---- the loop ----------------------------------------------------------------------------


def frames(watcher: Watcher, sleep: Callable[[float], None] = time.sleep) -> Iterator[Frame]:
    """A frame per refresh, the last one once the run's status is final."""
    while True:
        try:
            frame = watcher.look()
        except (StoreError, SQLAlchemyError) as exc:  # a store briefly unreachable: try again
            typer.echo(f"watch: reading the store failed ({type(exc).__name__}); retrying", err=True)
        else:
            yield frame
            if frame.final:
                return
        sleep(watcher.every_s)


def show(watcher: Watcher, once: bool, console: Console) -> None:
    """Render frames until the run ends (``once``: one plain frame)."""
    if once:
        typer.echo(plain_frame(next(frames(watcher))))
        return
    last: Frame | None = None
    if console.is_terminal:
        with Live(console=console, auto_refresh=False, transient=False) as live:
            for last in frames(watcher):
                live.update(rich_frame(last), refresh=True)
    else:
        for last in frames(watcher):
            typer.echo(status_line(last))
    if last is not None:
        ended = f"watch: run {watcher.run_id} is {last.status}; the watch ends"
        if console.is_terminal:
            console.print(ended, markup=False, highlight=False)
        else:
            typer.echo(ended)


def run_watch(run_id: str, db: str | None, policy: Path | None, every_s: float, once: bool,
              budget: str | None = None, wait_s: float = 0.0, runs: Path = Path("runs"),
              console: Console | None = None) -> int:
    """``abserve watch``: the exit code (0 once the run ended or after ``once``; 4 on errors)."""
    try:
        if every_s <= 0:
            raise ReportError(f"--every must be positive, not {every_s}")
        limits = parse_budget(budget) if budget else None
        url, store, run = open_run(run_id, db, runs, wait_s)
    except (ReportError, ValueError) as exc:
        typer.echo(f"error: {exc}", err=True)
        return exit_codes.USAGE
    try:
        chosen, source = choose_policy(run_id, url, run, policy)
        typer.echo(f"watch: run {run_id}; policy {chosen.name} from {source}", err=True)
        watcher = Watcher(store, run_id, chosen, every_s,
                          (limits.seconds, limits.requests) if limits else (None, None))
        show(watcher, once, console or Console())
    except ReportError as exc:
        typer.echo(f"error: {exc}", err=True)
        return exit_codes.USAGE
    except KeyboardInterrupt:
        return exit_codes.INTERRUPTED
    finally:
        store.close()
    return exit_codes.PASS
