"""Start CPUs for arms that start unpinned (``abserve.arms.start_cpus``).

Arms that will share one core start their CPU workers on CPUs of their own, spread over the
machine, never on another NUMA node than their own CPUs, and with as many CPUs as they run on.
"""

from __future__ import annotations

from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from abserve.arms.start_cpus import numa_nodes, parse_cpu_list, start_binds


def test_arms_sharing_core_0_start_on_alternate_cores() -> None:
    assert start_binds([[0], [0], [0], [0]], [0, 1], {}) == [(0,), (1,), (0,), (1,)]


def test_arms_on_their_own_cores_start_on_cores_of_their_own() -> None:
    assert start_binds([[0], [1]], [0, 1], {}) == [(0,), (1,)]


def test_an_arm_without_cpus_is_left_to_vllm() -> None:
    assert start_binds([None, [0], []], [0, 1], {}) == [None, (0,), None]


def test_start_cpus_stay_on_the_arms_numa_node() -> None:
    nodes = {0: 0, 1: 0, 2: 1, 3: 1}
    assert start_binds([[2], [2], [0, 1]], [0, 1, 2, 3], nodes) == [(2,), (3,), (0, 1)]


def test_too_few_usable_cpus_on_the_node_start_on_the_arms_own() -> None:
    assert start_binds([[0, 1, 2]], [0, 1], {}) == [(0, 1, 2)]


@given(st.lists(st.one_of(st.none(), st.lists(st.integers(0, 7), min_size=1, max_size=4, unique=True)),
                max_size=6),
       st.lists(st.integers(0, 7), min_size=1, max_size=8, unique=True),
       st.dictionaries(st.integers(0, 7), st.integers(0, 1)))
def test_a_bind_has_the_arms_cpu_count_on_its_nodes(targets: list[list[int] | None], usable: list[int],
                                                     node_of: dict[int, int]) -> None:
    for target, bind in zip(targets, start_binds(targets, usable, node_of), strict=True):
        if not target:
            assert bind is None
            continue
        assert bind is not None
        assert len(set(bind)) == len(target)
        if bind != tuple(sorted(target)):
            assert set(bind) <= set(usable)
            assert {node_of.get(c, 0) for c in bind} <= {node_of.get(c, 0) for c in target}


def test_cpu_lists_and_nodes_as_the_kernel_writes_them(tmp_path: Path) -> None:
    assert parse_cpu_list("0-3,8,10-11\n") == [0, 1, 2, 3, 8, 10, 11]
    for node, cpus in (("node0", "0-1"), ("node1", "2-3")):
        (tmp_path / node).mkdir()
        (tmp_path / node / "cpulist").write_text(cpus + "\n")
    assert numa_nodes(tmp_path) == {0: 0, 1: 0, 2: 1, 3: 1}
    assert numa_nodes(tmp_path / "absent") == {}
