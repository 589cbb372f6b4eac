"""The streaming reduction of a run: one compact digest per exchange, fed page by page.

The judgment needs, of each exchange, only its paired latency values, tags, start time,
each arm's scalar outcome (status, times, usage) and, per compared arm pair, the equality
class and first divergence. ``Digester.feed`` reads a page of full exchanges, keeps exactly
that and lets the page go: the scalars in typed columns (``abserve.compare.slim``: a
``SlimExchange`` per exchange reads back its ``SlimOutcome``s and ``RequestLatency``s, without
per-token gaps) and a ``PairDigest`` per pair, the common identical shape as one flag byte
(``abserve.compare.pair_digests``). The memory of a judgment grows by ~420 bytes per identical
3-arm exchange instead of one pydantic object per token position and top-k candidate.

What the report shows in full is bounded: per pair the full ``PairResult`` and exchange of
the earliest mismatches (``MAX_EXAMPLES`` plus the fixed warm-up, which may drop some).
A policy whose logprob tolerance is only known at the end (``drift_floor_quantile`` with a
floor arm) keeps the full exchanges that are not identical at tolerance 0 and compares them
again at the final tolerance: an exchange identical at tolerance 0 is identical at any.

A ``Digester`` kept across a sequential run's rounds is fed only each round's new
exchanges (``launch.looks.IncrementalLooks``: ``Store.iter_new_raw_exchanges`` and
``iter_missing_raw_exchanges``): a look costs the new exchanges'
reading and comparing, not a re-read of the run. Feeding an exchange twice is a no-op.
Pure: no I/O.
"""

from __future__ import annotations

import bisect
from array import array
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import cast

import numpy as np

from abserve.compare.aggregate import MAX_EXAMPLES, equality_line
from abserve.compare.equality import PairDigest, PairResult, compare_pair
from abserve.compare.latency import RequestLatency, items_of, request_latency, request_latency_times
from abserve.compare.model import EqualityLine
from abserve.compare.pair_digests import PairDigests
from abserve.compare.policy import Policy
from abserve.compare.slim import RunLatencies, SlimColumns, SlimExchange
from abserve.model.records import Exchange, SlimOutcome
from abserve.model.token_columns import ArmColumns, RawExchange, slim_outcome

Key = tuple[float, str]


@dataclass
class _Kept:
    """The earliest mismatches of one pair, in start order, each with what builds its full
    exchange again (``RawExchange.full``: the stored row, a fraction of the validated
    ``Exchange`` with its per-token models) for the report's evidence."""

    limit: int
    keys: list[Key] = field(default_factory=list)
    items: list[tuple[PairResult, Callable[[], Exchange]]] = field(default_factory=list)

    def offer(self, key: Key, result: PairResult, exchange: Callable[[], Exchange]) -> None:
        if len(self.keys) >= self.limit and key >= self.keys[-1]:
            return
        at = bisect.bisect(self.keys, key)
        self.keys.insert(at, key)
        self.items.insert(at, (result, exchange))
        if len(self.keys) > self.limit:
            self.keys.pop()
            self.items.pop()


def _comparable(arm: ArmColumns) -> bool:
    doc, status = arm.doc, arm.doc.get("status")
    return (doc.get("error_class") is None and status is not None and 200 <= status < 300
            and not doc.get("truncated") and arm.has_tokens)


def _plain_identical(left: ArmColumns | None, right: ArmColumns | None) -> bool:
    """Both outcomes comparable, with equal token ids, logprobs (top-k included) and prompt
    logprobs: then ``compare_pair`` says ``identical`` at any tolerance with no logprob gap.
    Packed arms are compared as stored bytes (``ArmColumns.compare_key``; one string table
    per exchange, so equal indices are equal texts), arms stored as JSON (a v1 row, or an
    arm the columns cannot hold) as decoded lists. A NaN never compares equal, so an arm
    holding one takes the full path, as does any pair whose bytes differ (``-0.0`` against
    ``0.0`` is then found equal there) or one packed arm against one not."""
    if left is None or right is None or left.packed != right.packed or left.nan or right.nan:
        return False
    if not (_comparable(left) and _comparable(right)):
        return False
    if left.packed:
        return left.compare_key == right.compare_key
    return all(left.doc.get(k) == right.doc.get(k) for k in ("token_ids", "logprobs", "prompt_logprobs"))


def _usage_differs(left: dict[str, int] | None, right: dict[str, int] | None) -> bool:
    if left is None or right is None:
        return (left is None) != (right is None)
    return any(left.get(k) != right.get(k) for k in ("prompt_tokens", "completion_tokens"))


class Digester:
    """Digests of a run's exchanges under one policy; feed pages, then judge
    (``abserve.compare.judge.judge_digest``)."""

    def __init__(self, policy: Policy) -> None:
        roles, rule = policy.arms, policy.equality
        self.policy = policy
        self.pairs = [(roles.baseline, other) for other in (roles.candidate, roles.floor) if other]
        self.deferred = rule.drift_floor_quantile is not None and roles.floor is not None
        self.feed_tolerance = 0.0 if self.deferred else rule.drift_tolerance
        self.columns = SlimColumns()
        self.slim: dict[str, SlimExchange] = {}
        self.latencies = RunLatencies(self.slim)
        self.digests = {p: PairDigests(self.slim) for p in self.pairs}
        limit = MAX_EXAMPLES + max(policy.warmup_requests, 0)
        self.kept = {p: _Kept(limit) for p in self.pairs}
        self.recheck: dict[str, Exchange] = {}  # deferred tolerance: not identical at 0
        self.floor_deltas = array("d")  # per row, deferred only: baseline/floor drift where tokens agree
        self.has_floor_delta = array("b")
        self._mismatch = frozenset(rule.mismatch_classes)
        self._ordered: list[SlimExchange] | None = None

    def __len__(self) -> int:
        return len(self.slim)

    def feed(self, exchanges: Iterable[Exchange]) -> int:
        """Digest exchanges not seen before; returns how many were new."""
        new = 0
        for ex in exchanges:
            if ex.request_id not in self.slim:
                self._add(ex)
                new += 1
        if new:
            self._ordered = None
        return new

    def feed_raw(self, raws: Iterable[RawExchange]) -> int:
        """``feed`` from decoded, unvalidated records (``Store.iter_raw_exchanges``): an
        exchange whose compared arms returned equal token data (ids, logprobs, top-k, prompt
        logprobs) is digested from its stored columns; any other is validated and compared in
        full (``compare_pair``), so every class and example is what ``feed`` would give."""
        new = 0
        for raw in raws:
            if raw.request_id in self.slim:
                continue
            new += 1
            if all(_plain_identical(raw.arms.get(left), raw.arms.get(right)) for left, right in self.pairs):
                self._add_identical(raw)
            else:
                self._add(raw.full(), raw.full)
        if new:
            self._ordered = None
        return new

    def _keep(self, request_id: str, started_at: float, tags: dict[str, str], image_hashes: list[str],
              arms: dict[str, tuple[SlimOutcome, RequestLatency | None]]) -> SlimExchange:
        """Store an exchange's scalars (image hashes only where no ``items`` tag counts them)."""
        hashes = [] if "items" in tags else image_hashes
        ex = self.columns.append(request_id, started_at, tags, hashes, arms)
        self.slim[request_id] = ex
        if self.deferred:  # read only for a deferred tolerance (``tolerance``)
            self.floor_deltas.append(0.0)
            self.has_floor_delta.append(0)
        return ex

    def _floor_delta(self, ex: SlimExchange, delta: float) -> None:
        self.floor_deltas[ex.row], self.has_floor_delta[ex.row] = delta, 1

    def _add_identical(self, raw: RawExchange) -> None:
        rid = raw.request_id
        arms = {}
        for a, stored in raw.arms.items():
            slim = slim_outcome(stored)
            arms[a] = (slim, request_latency_times(stored.times(), slim))
        ex = self._keep(rid, raw.started_at, raw.tags, raw.image_hashes, arms)
        profile, items = raw.tags.get("profile", "untagged"), items_of(ex)
        for pair in self.pairs:
            left, right = raw.arms[pair[0]].doc, raw.arms[pair[1]].doc
            prompts = raw.arms[pair[0]].prompt_positions, raw.arms[pair[1]].prompt_positions
            sampled = None if prompts[0] is None or prompts[1] is None else prompts[0]
            self.digests[pair].add(ex, PairDigest(
                rid, "identical", None, 0.0, None, sampled, None if sampled is None else 0.0, None,
                left.get("status") != right.get("status"),
                left.get("finish_reason") != right.get("finish_reason"),
                _usage_differs(left.get("usage"), right.get("usage")), None, None, profile, items))
            if self.deferred and pair == self.pairs[-1]:
                self._floor_delta(ex, 0.0)

    def _add(self, full: Exchange, again: Callable[[], Exchange] | None = None) -> None:
        """Digest a full exchange; ``again`` builds it anew (kept instead of it, for evidence)."""
        rid = full.request_id
        arms = {a: (SlimOutcome.of(o), request_latency(o, keep_gaps=False)) for a, o in full.arms.items()}
        ex = self._keep(rid, full.started_at, full.tags, full.image_hashes, arms)
        key = (full.started_at, rid)
        profile, items = full.tags.get("profile", "untagged"), items_of(full)
        for pair in self.pairs:
            left, right = pair
            r = compare_pair(rid, left, right, full.arms.get(left), full.arms.get(right),
                             drift_tolerance=self.feed_tolerance)
            r.profile, r.items = profile, items
            self.digests[pair].add(ex, PairDigest.of(r))
            if self.deferred:
                if r.cls != "identical":
                    self.recheck[rid] = full
                if pair == self.pairs[-1] and r.cls in ("identical", "drift"):
                    self._floor_delta(ex, max(r.max_logprob_delta, r.prompt_logprob_delta or 0.0))
            elif r.cls in self._mismatch:
                self.kept[pair].offer(key, r, again or (lambda: full))

    def ordered(self) -> list[Exchange]:
        """The slim exchanges in start order (as ``judge`` orders them): ``SlimExchange``s,
        which answer what the judgment reads of an ``Exchange`` (``abserve.compare.slim``)."""
        if self._ordered is None:
            self._ordered = sorted(self.slim.values(), key=lambda ex: (ex.started_at, ex.request_id))
        return cast(list[Exchange], self._ordered)

    def tolerance(self, compared: list[Exchange], floor: str | None) -> float:
        """The logprob tolerance over ``compared`` (``aggregate.drift_tolerance``'s rule)."""
        rule = self.policy.equality
        if not self.deferred or floor is None or rule.drift_floor_quantile is None:
            return rule.drift_tolerance
        rows = (self.slim[ex.request_id].row for ex in compared if ex.request_id in self.slim)
        deltas = [self.floor_deltas[r] for r in rows if self.has_floor_delta[r]]
        if not deltas:
            return rule.drift_tolerance
        return max(rule.drift_tolerance, float(np.quantile(deltas, rule.drift_floor_quantile)))

    def equality_line(self, compared: list[Exchange], left: str, right: str,
                      tolerance: float) -> EqualityLine:
        """One pair's roll-up over ``compared`` (in start order) at ``tolerance``."""
        pair = (left, right)
        digests = self.digests.get(pair) or PairDigests({})
        if self.deferred:
            return self._deferred_line(compared, pair, digests, tolerance)
        results = (d for ex in compared if (d := digests.get(ex.request_id)) is not None)  # streamed
        kept = {r.request_id for r, _ in self.kept[pair].items}  # a few: not a set of every id
        ids = {ex.request_id for ex in compared if ex.request_id in kept}
        examples = [r for r, _ in self.kept[pair].items if r.request_id in ids]
        return equality_line(results, left, right, self.policy, examples=examples)

    def _deferred_line(self, compared: list[Exchange], pair: tuple[str, str],
                       digests: PairDigests, tolerance: float) -> EqualityLine:
        left, right = pair
        results: list[PairDigest] = []
        examples: list[PairResult] = []
        for ex in compared:
            rid = ex.request_id
            d = digests.get(rid)
            if d is None:
                continue
            full = self.recheck.get(rid)
            if full is not None:
                r = compare_pair(rid, left, right, full.arms.get(left), full.arms.get(right),
                                 drift_tolerance=tolerance)
                r.profile, r.items = d.profile, d.items
                d = PairDigest.of(r)
                if r.cls in self._mismatch and len(examples) < MAX_EXAMPLES:
                    examples.append(r)
            results.append(d)
        return equality_line(results, left, right, self.policy, examples=examples)

    def evidence(self, ids: set[str]) -> dict[str, Exchange]:
        """The full exchanges the digest kept among ``ids`` (the report's mismatches)."""
        out = {rid: ex for rid, ex in self.recheck.items() if rid in ids}
        for kept in self.kept.values():
            out.update({r.request_id: build() for r, build in kept.items if r.request_id in ids})
        return out
