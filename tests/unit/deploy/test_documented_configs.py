"""Every config a documented target runs is accepted before anything starts (issue 57).

``make compose-check`` failed on a fresh clone after ten minutes: its three-arm step's config
was refused by the reachability check ("policy gate tpot.hl cannot be decided: the plan of 16
requests gives at most 6 pairs"), and ``make test`` runs only some of its steps. Here every step
of ``scripts/compose-check.sh`` (and ``scripts/compose-faults.sh``) is mapped to the config it
runs, built by the same code the script calls (``abserve.deploy.check_configs``), and every
config a Makefile target or script names by default is taken as it ships; each goes through
what ``abserve check`` does before its per-arm checks (``abserve.cli.run.check``: the config
loaded, an arm ``from: accepted`` resolved, the policy, budget and reachability checked by
``preflight_report``). vLLM's own parser (the per-arm check, a child process of ~15-45 s each)
is left out: tests/unit/test_ci_examples.py runs the whole ``abserve check`` on the CI configs.
A new step in the script without an entry here fails too.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from abserve.compare import load_policy
from abserve.config import load_experiment
from abserve.deploy.check_configs import BASE, STEPS, derive
from abserve.runs.rounds import preflight_report

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "scripts/compose-check.sh"
# Each step of compose-check.sh -> the config it runs: a shipped file, or a derived one (its
# abserve.deploy.check_configs step). `images` builds and runs images; `journey` runs the GPU
# pages' own commands on their own configs (tests/support/gpu_journey.py checks those).
STEP_CONFIGS = {
    "signoff": "configs/cpu-compose.yaml", "rotation": "configs/cpu-compose.yaml",
    "postgres": "configs/cpu-compose.yaml",
    "arms3": "arms3", "arms3-postgres": "arms3",
    "concurrency": "concurrency", "rotation-concurrency": "concurrency",
    "decide": "decide", "decide-postgres": "decide",
    "text-only": "text-only",
    "ledger-profile": "text-only",  # its nightly extends it with a: {from: accepted}
    "arm-killed": "faults", "orchestrator-stopped": "faults",
}
NO_CONFIG = {"images", "journey"}


def script_steps() -> set[str]:
    """The step names compose-check.sh's `case` accepts (its message listing them)."""
    listed = re.search(r'fail "unknown step \$step \(([^)]*)\)"', SCRIPT.read_text())
    assert listed is not None
    return {s.strip() for s in listed.group(1).split(",")}


def default_configs() -> dict[str, str]:
    """What each target or script runs without arguments: `make run`'s CONFIG, and the default
    CONFIG of every script under scripts/ that names one."""
    found = {"make run": re.search(r"^CONFIG \?= (\S+)$", (ROOT / "Makefile").read_text(), re.M)}
    default = re.compile(r'^CONFIG="?\$\{(?:CONFIG|1):-(configs/[^}]+)\}', re.M)
    for script in sorted((ROOT / "scripts").glob("*.sh")):
        found[script.name] = default.search(script.read_text())
    found["compose-check.sh"] = re.search(r"^CONFIG=(\S+)$", SCRIPT.read_text(), re.M)
    return {where: m.group(1) for where, m in found.items() if m is not None}


def accepted(path: Path) -> None:
    """What ``abserve check PATH`` refuses before its per-arm checks, raised (ValueError)."""
    preflight_report(load_experiment(path), None)


@pytest.fixture
def checkout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder with configs/cpu-compose.yaml, where the derived configs are written; the
    current directory is the repository (the configs' policies are named from there, as the
    stack's orchestrator names them from its /app)."""
    (tmp_path / BASE).parent.mkdir(parents=True)
    shutil.copy(ROOT / BASE, tmp_path / BASE)
    monkeypatch.chdir(ROOT)
    return tmp_path


def test_every_step_of_the_script_has_its_config_here() -> None:
    assert script_steps() - NO_CONFIG == set(STEP_CONFIGS)
    assert set(STEP_CONFIGS.values()) - {"configs/cpu-compose.yaml"} == set(STEPS)
    text = SCRIPT.read_text() + (ROOT / "scripts/compose-faults.sh").read_text()
    for step in STEPS:  # the script derives through the module, never a copy of its own
        assert re.search(rf"(derived|abserve\.deploy\.check_configs) {step}\b", text), step
    assert "yaml.safe_load" not in text


@pytest.mark.parametrize("step", sorted(STEP_CONFIGS))
def test_every_compose_check_step_runs_a_config_abserve_check_accepts(step: str, checkout: Path) -> None:
    source = STEP_CONFIGS[step]
    path = derive(source, checkout) if source in STEPS else ROOT / source
    accepted(path)


def test_every_derived_config_is_written_where_the_stack_mounts_it(checkout: Path) -> None:
    for step in STEPS:
        path = derive(step, checkout)
        assert path.parent == checkout / "configs/local/compose-check"
        assert load_experiment(path).name == STEPS[step][0]
    assert (checkout / "traffic/compose-check/text-only.jsonl").read_text().count("\n") == 96


def test_every_config_a_target_runs_by_default_is_accepted() -> None:
    configs = default_configs()
    assert {"make run", "compose-check.sh", "signoff.sh", "sample-report.sh"} <= set(configs), configs
    for where, config in configs.items():
        try:
            accepted(ROOT / config)
        except ValueError as exc:
            pytest.fail(f"{where} runs {config}, which abserve check refuses: {exc}")


def shipped_experiments() -> list[Path]:
    """Every experiment config shipped under configs/ (configs/selftest.yaml is the self-test's
    own file: its experiments are the files under configs/selftest/)."""
    found = [*(ROOT / "configs").glob("*.yaml"), *(ROOT / "configs/selftest").glob("*.yaml")]
    return [p for p in sorted(found) if p.name != "selftest.yaml"]


@pytest.mark.parametrize("path", shipped_experiments(), ids=lambda p: str(p.relative_to(ROOT / "configs")))
def test_every_shipped_config_is_accepted(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The configs the docs name (`abserve run configs/X.yaml`); an arm `from: accepted`
    (the nightlies) is resolved by the tests that hold a ledger (test_ci_examples, e2e)."""
    monkeypatch.chdir(ROOT)
    accepted(path)


def test_every_config_against_the_accepted_release_is_judged_by_a_release_policy() -> None:
    """A nightly (an arm `from: accepted`) of an unchanged build has nothing to prove: a policy
    with a change's claim (the CPU default's `tpot.improvement@128+`) leaves it INCONCLUSIVE at
    its budget (issue 57). Equality and the latency shifts stay critical."""
    nightlies = [p for p in shipped_experiments() if load_experiment(p).from_ledger()]
    assert {p.name for p in nightlies} >= {"nightly-cpu.yaml", "nightly-gpu.yaml"}
    for path in nightlies:
        policy = load_policy(ROOT / load_experiment(path).policy)
        assert (policy.improvements, policy.per_item) == ((), ()), path.name
        assert policy.equality.critical, path.name
        assert {r.name for r in policy.metrics if r.critical} >= {"tpot.hl", "ttft.hl"}, path.name
