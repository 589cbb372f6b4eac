"""Incremental looks of a sequential run: each look reads only what was stored since the last.

``abserve run`` with a budget judges the stored exchanges after every round
(``abserve.runs.rounds``). Re-reading and re-digesting the whole run at every look makes a
run's total judging work grow with the square of its length. ``IncrementalLooks`` keeps the
run's ``Digester`` (``abserve.compare.digest``) in the run's process across looks and feeds it,
at each look, only the rows stored since the last one, found by row id (the store numbers rows
as they are inserted).

A row id is taken when a row is inserted, not when its transaction commits: on PostgreSQL a
batch can take its ids before another batch and commit after it, so a look that read past
those ids would pass its rows over. Each look therefore also counts the run's rows up to the
largest id it has read; more than it digested means a late commit, and only then are the
run's ids scanned for the missing rows. An exchange that started before others but was written
after them (the router writes as exchanges end) simply has a larger id. A row is never digested
twice: the digest keys exchanges by request id, unique within a run.

An experiment with several candidates (``launch.family``) is judged at each look by Holm's
step-down, each candidate at one of a few levels (``compare.family.holm_levels``): a digest per
candidate and level is kept and fed the same rows, so its looks cost the new exchanges too.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from abserve.compare.digest import Digester
from abserve.compare.family import Family, holm_levels, roles_for
from abserve.compare.policy import Policy
from abserve.model.token_columns import RawExchange

if TYPE_CHECKING:
    from abserve.store import Store


class IncrementalLooks:
    """The digest of a sequential run kept across its looks (see the module doc)."""

    def __init__(self, policy: Policy, family: Family | None = None) -> None:
        self.policy = policy
        self.digest = Digester(policy)
        self.family_digests: dict[tuple[str, float], Digester] = {}
        if family is not None:
            baseline, candidates, floor = family
            for level in holm_levels(len(candidates), 1.0 - policy.confidence):
                for name in candidates:
                    judged_as = roles_for(policy, baseline, name, floor, level)
                    self.family_digests[(name, level)] = Digester(judged_as)
        self.last_row = 0  # the largest row id read
        self.read_last_look = 0  # exchanges read by the latest look (what it cost)
        self.late_rows = 0  # rows found below an id already read (committed late), in all

    def update(self, store: Store, run_id: str) -> Digester:
        """Feed the exchanges stored since the last look; returns the digest of all so far."""
        read = self._feed(store.iter_new_raw_exchanges(run_id, self.last_row))
        if store.count_exchanges_through(run_id, self.last_row) > len(self.digest):
            late = self._feed(store.iter_missing_raw_exchanges(run_id, self.last_row, self.digest.slim))
            self.late_rows += late
            read += late
        self.read_last_look = read
        return self.digest

    def _feed(self, rows: Iterable[tuple[int, RawExchange]]) -> int:
        read = 0
        for row, raw in rows:
            self.digest.feed_raw((raw,))
            for digest in self.family_digests.values():
                digest.feed_raw((raw,))
            self.last_row = max(self.last_row, row)
            read += 1
        return read

    def family_digest(self, candidate: str, level: float) -> Digester:
        """The digest of ``candidate`` judged at Holm level ``level`` (made with the family)."""
        return self.family_digests[(candidate, level)]
