"""The false-alarm and power benchmarks compute what they claim on synthetic records with known answers."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
from tests.support.records_factory import ab_run, run_info

from abserve.compare import load_policy
from abserve.compare.policy import ArmRoles

BENCH = Path(__file__).resolve().parents[3] / "benchmarks"


def load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def aa_policy():
    policy = load_policy(BENCH.parent / "configs/policy/selftest.yaml")
    return policy.model_copy(update={"arms": ArmRoles(baseline="a", candidate="a2", floor=None)})


@pytest.mark.slow
def test_identical_arms_raise_no_false_alarm_in_windows_or_subsamples() -> None:
    fa = load("false_alarms")
    whole, windows, subs = fa.replay(run_info(), ab_run(124), aa_policy(), size=40, draws=20, seed=1)
    assert whole.verdict == "pass"
    assert windows.judgments == 3
    assert subs.judgments == 20
    assert windows.verdicts["fail"] == 0
    assert subs.verdicts["fail"] == 0
    assert subs.equality_fail == 0


def test_a_real_difference_between_the_pair_is_counted_as_a_false_alarm() -> None:
    fa = load("false_alarms")
    policy = aa_policy().model_copy(update={"arms": ArmRoles(baseline="a", candidate="b", floor=None)})
    _, windows, subs = fa.replay(run_info(), ab_run(84, itl_shift=0.004), policy, size=40, draws=10, seed=1)
    assert windows.verdicts["fail"] == windows.judgments == 2
    assert subs.excludes_zero == 10


def test_paired_and_unpaired_tests_detect_a_shift_and_pairing_needs_fewer_requests() -> None:
    power = load("power")
    rng = np.random.default_rng(0)
    request_cost = rng.lognormal(-4, 0.5, 400)  # large differences between requests
    base = request_cost + rng.normal(0, 2e-4, 400)
    cand = request_cost + rng.normal(0, 2e-4, 400)
    paired, unpaired = power.detects(base[None, :], cand[None, :] + 0.01, 0.05)
    assert paired[0]
    assert unpaired[0]
    paired_n, unpaired_n = power.power_curve(base, cand, 2e-4, 0.05, 200, rng, 0.8)
    assert paired_n is not None
    assert unpaired_n is None or unpaired_n >= 3 * paired_n
