"""Items examined per images-per-request bucket: counted by the plugin's counters, summed over
processes, carried into the arm's provenance and summed over combined block runs, so the report
can draw the lookup's work per call against images per request."""

from __future__ import annotations

from dataclasses import fields

from abserve.model.records import ArmProvenance, LookupTelemetry, RunInfo
from abserve.model.telemetry import Counters, ProcessTelemetry, add_counts, sum_counters
from abserve.runs.combine import _summed
from abserve.runs.provenance import proven_provenance
from abserve.vllm_plugin.lookup import bisect_probes, linear_examined


def counted(calls: list[tuple[int, int]]) -> Counters:
    c = Counters()
    for n, examined in calls:
        c.add_lookup(n, examined, 1_000)
    return c


def test_examined_items_are_kept_per_bucket_and_summed_over_processes() -> None:
    linear = counted([(3, linear_examined(3, 2, 3)), (100, linear_examined(100, 50, 52)), (120, 81)])
    assert linear.items_per_request == {"2": 1, "64": 2}
    assert linear.examined_per_request == {"2": 3, "64": 53 + 81}
    other = counted([(100, bisect_probes(100, 50, 52))])
    records = [ProcessTelemetry(pid=p, process_name="EngineCore_DP0", role="engine_core", mode="linear",
                                scope="runner", vllm_version="x", patched=["m"], counters=c)
               for p, c in ((1, linear), (2, other))]
    total = sum_counters(records)
    assert total.examined_per_request == {"2": 3, "64": 53 + 81 + bisect_probes(100, 50, 52)}
    assert sum(total.examined_per_request.values()) == total.items_examined
    old = ProcessTelemetry.from_json({**records[0].to_json(), "counters": {"lookup_calls": 1}})
    assert old.counters.examined_per_request == {}  # a file from an older plugin still reads


def test_provenance_and_combined_blocks_carry_the_buckets() -> None:
    record = ProcessTelemetry(pid=1, process_name="EngineCore_DP0", role="engine_core", mode="bisect",
                              scope="runner", vllm_version="x", patched=["m"],
                              counters=counted([(8, 6), (8, 7)]))
    record.counters.gather_calls = 2
    arm = proven_provenance([record], "bisect")
    assert arm.telemetry.examined_per_request == {"8": 13}
    assert arm.telemetry.items_per_request == {"8": 2}
    runs = [RunInfo(run_id=f"r{i}", started_at=0.0, arms={"b": ArmProvenance(
        telemetry=LookupTelemetry(items_per_request={"8": 2}, examined_per_request={"8": 13}))})
        for i in range(2)]
    assert _summed("b", runs).telemetry.examined_per_request == {"8": 26}


def test_since_a_baseline_a_process_counts_only_what_came_after() -> None:
    """A server kept for a later run (``abserve.arms.arm_pool``): that run's proof and
    provenance see only its own lookups, per process and per bucket."""
    from dataclasses import replace

    from abserve.model.telemetry import prove_lookup, since

    def record(pid: int, counters: Counters) -> ProcessTelemetry:
        return ProcessTelemetry(pid=pid, process_name="VllmWorker", role="worker", mode="linear",
                                scope="runner", vllm_version="x", patched=["m"], counters=counters)

    earlier = counted([(8, 5), (100, 53)])
    earlier.gather_calls = 2
    now = replace(earlier, items_per_request=dict(earlier.items_per_request),
                  examined_per_request=dict(earlier.examined_per_request))
    now.add_lookup(100, 51, 4_000)
    now.gather_calls += 1
    later = since([record(7, now), record(9, counted([(2, 2)]))], [record(7, earlier)])
    assert later[0].counters == Counters(lookup_calls=1, items_examined=51, lookup_ns=4_000,
                                         gather_calls=1, items_per_request={"64": 1},
                                         examined_per_request={"64": 51})
    assert later[1].counters == counted([(2, 2)])  # a process the baseline did not know: all of it
    assert prove_lookup(since([record(7, earlier)], [record(7, earlier)]), "linear").proven is None
    assert prove_lookup(later, "linear").proven == "linear"


def test_every_counter_of_both_kinds_is_summed_by_the_one_sum() -> None:
    one = Counters(1, 2, 3, 4, 5, 6, {"2": 1}, {"2": 3})
    total = Counters(10, 20, 30, 40, 50, 60, {"4": 1}, {"2": 1})
    add_counts(total, one, [f.name for f in fields(Counters)])
    assert total == Counters(11, 22, 33, 44, 55, 66, {"4": 1, "2": 1}, {"2": 4})
    seconds = LookupTelemetry(lookup_calls=1, items_examined=2, lookup_seconds=0.25, gather_calls=3,
                              gather_seconds=0.5, items_per_request={"8": 1},
                              examined_per_request={"8": 2})
    runs = [RunInfo(run_id=f"r{i}", started_at=0.0, arms={"b": ArmProvenance(telemetry=seconds)})
            for i in range(3)]
    assert _summed("b", runs).telemetry == LookupTelemetry(
        lookup_calls=3, items_examined=6, lookup_seconds=0.75, gather_calls=9, gather_seconds=1.5,
        items_per_request={"8": 3}, examined_per_request={"8": 6})
    assert seconds.lookup_calls == 1  # the first block's record is copied, not summed into
