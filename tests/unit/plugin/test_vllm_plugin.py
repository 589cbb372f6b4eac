"""The vLLM plugin patches exactly the modules its scope names, through vLLM's own plugin
loader, records what it did per process, and stays out of the way when not asked; in an
arm's server whose ``abserve run`` is killed, it stops the server's whole process group."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import psutil
import pytest

from abserve import vllm_plugin
from abserve.model.telemetry import read_telemetry
from abserve.vllm_plugin.lookup import bisect_probes

RUNNER = vllm_plugin.RUNNER_MODULES
ENGINE = vllm_plugin.ENGINE_MODULES


def run_python(code: str, env: dict[str, str]) -> dict[str, Any]:
    """Run code in a fresh interpreter (as a vLLM process would) and return its JSON."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("ABSERVE_")}
    full_env.update({"VLLM_PLUGINS": "abserve", "VLLM_NO_USAGE_STATS": "1", **env})
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=full_env,
        capture_output=True,
        text=True,
        timeout=240,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


PATCHED = f"""
    import importlib, json
    from vllm.plugins import load_general_plugins
    load_general_plugins()
    modes = {{}}
    for name in {RUNNER + ENGINE!r}:
        module = importlib.import_module(name)
        modes[name] = getattr(module.get_mm_features_in_window, "abserve_mode", None)
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner
    timed = getattr(GPUModelRunner._gather_mm_embeddings, "abserve_timed", False)
    result = {{"modes": modes, "timed": timed}}
"""

COUNTED = """
    from types import SimpleNamespace as NS
    from abserve import vllm_plugin
    import vllm.v1.worker.gpu_model_runner as m
    feats = [NS(mm_position=NS(offset=10 * i, length=4)) for i in range(100)]
    assert m.get_mm_features_in_window(feats, 500, 520) == (50, 52)
    assert m.get_mm_features_in_window(feats, 0, 8) == (0, 1)
    c = vllm_plugin.current_telemetry().counters
    result.update({"calls": c.lookup_calls, "examined": c.items_examined,
                   "hist": c.items_per_request, "ns": c.lookup_ns})
"""

REGISTERED = """
    import json
    from abserve import vllm_plugin
    vllm_plugin.register()
    result = {}
"""

PRINTED = """
    print(json.dumps(result))
"""

# Every fresh interpreter the vLLM tests below need: (code, environment, with a telemetry folder).
# Each imports vLLM (about 8-30 s), so the module runs them two at a time, once, up front, and
# one interpreter per environment answers every question asked of that environment: what the
# plugin loader patched, and (where a mode is set) what the patched lookup counts.
MODES = ("linear", "bisect", "hybrid")
PROBES: dict[str, tuple[str, dict[str, str], bool]] = {
    "unset": (PATCHED + PRINTED, {}, True),
    **{mode: (PATCHED + COUNTED + PRINTED, {"ABSERVE_MM_LOOKUP": mode}, True) for mode in MODES},
    "all-bisect": (PATCHED + PRINTED,
                   {"ABSERVE_MM_LOOKUP": "bisect", "ABSERVE_MM_LOOKUP_SCOPE": "all"}, False),
    "hybrid-101": (REGISTERED + COUNTED + PRINTED,
                   {"ABSERVE_MM_LOOKUP": "hybrid", "ABSERVE_MM_HYBRID_THRESHOLD": "101"}, False),
}


@dataclass(frozen=True)
class Probe:
    """One fresh interpreter's printed JSON and its telemetry folder (None: none was given)."""

    result: dict[str, Any]
    telemetry: Path | None


@pytest.fixture(scope="module")
def probes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Probe]:
    def one(key: str) -> Probe:
        code, env, with_telemetry = PROBES[key]
        folder = tmp_path_factory.mktemp(f"telemetry-{key}") if with_telemetry else None
        extra = {"ABSERVE_TELEMETRY_DIR": str(folder)} if folder else {}
        return Probe(run_python(code, {**env, **extra}), folder)

    with ThreadPoolExecutor(max_workers=2) as pool:  # the machine's two cores
        return dict(zip(PROBES, pool.map(one, PROBES), strict=True))


def test_entry_point_is_registered_for_vllm() -> None:
    names = {ep.name: ep.value for ep in entry_points(group="vllm.general_plugins")}
    assert names.get("abserve") == "abserve.vllm_plugin:register"


@pytest.mark.vllm  # imports vLLM in subprocesses (the module's probes)
def test_unset_mode_leaves_vllm_untouched_and_records_only_what_identifies_the_arm(
        probes: dict[str, Probe]) -> None:
    probe = probes["unset"]
    assert set(probe.result["modes"].values()) == {None}
    assert probe.result["timed"] is False
    assert probe.telemetry is not None
    (record,) = read_telemetry(probe.telemetry)  # an arm whose change is not the lookup: its identity
    assert record.mode is None
    assert record.patched == []
    assert record.counters.lookup_calls == 0
    assert record.vllm_version == vllm_plugin.installed_vllm_version() is not None
    assert record.argv
    assert record.argv[0] == "-c"


@pytest.mark.vllm  # imports vLLM in subprocesses (the module's probes)
@pytest.mark.parametrize("mode", MODES)
def test_runner_scope_patches_runner_modules_only(mode: str, probes: dict[str, Probe]) -> None:
    probe = probes[mode]
    modes = probe.result["modes"]
    assert {modes[m] for m in RUNNER} == {mode}
    assert {modes[m] for m in ENGINE} == {None}
    assert probe.result["timed"] is True
    assert probe.telemetry is not None
    (record,) = read_telemetry(probe.telemetry)
    assert record.mode == mode
    assert sorted(record.patched) == sorted(RUNNER)
    assert record.vllm_version
    assert record.skipped == {}


@pytest.mark.vllm  # imports vLLM in subprocesses (the module's probes)
def test_all_scope_also_patches_the_engine_core(probes: dict[str, Probe]) -> None:
    assert set(probes["all-bisect"].result["modes"].values()) == {"bisect"}


@pytest.mark.vllm  # imports vLLM in subprocesses (the module's probes)
def test_patched_lookup_counts_its_work(probes: dict[str, Probe]) -> None:
    linear, bisect = probes["linear"].result, probes["bisect"].result
    assert linear["calls"] == bisect["calls"] == 2
    assert linear["examined"] == 53 + 2  # scans up to the first item past each window
    assert bisect["examined"] == bisect_probes(100, 50, 52) + bisect_probes(100, 0, 1)
    assert 2 * 2 * 6 <= bisect["examined"] <= 2 * 2 * 7  # two bisects of ~log2(100) probes, twice
    assert linear["hist"] == {"64": 2}
    assert int(linear["ns"]) > 0
    # hybrid: 100 items is above the default threshold (vLLM's helper), below a raised one (the scan)
    assert probes["hybrid"].result["examined"] == bisect["examined"]
    assert probes["hybrid-101"].result["examined"] == linear["examined"]


def test_absent_and_non_binding_modules_are_skipped_and_said_so(monkeypatch: pytest.MonkeyPatch) -> None:
    skipped: dict[str, str] = {}
    assert not vllm_plugin._module_exists("vllm.v1.worker.no_such_runner", skipped)
    assert skipped == {"vllm.v1.worker.no_such_runner": "absent in this vLLM"}


def test_invalid_mode_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ABSERVE_MM_LOOKUP", "binary")
    with pytest.raises(ValueError, match="expected one of linear, bisect, hybrid"):
        vllm_plugin.register()


# An arm's server as abserve run starts it: its own session (process group), ABSERVE_PARENT_PID
# set to the run's pid; the plugin registered (as vLLM does at start-up) and a child of its own
# (as vLLM's engine process). The parent, standing in for abserve run, is then SIGKILLed.
ARM_SERVER = ("import subprocess, time; from abserve import vllm_plugin; vllm_plugin.register(); "
              "subprocess.Popen(['sleep', '60']); time.sleep(60)")
RUN = ("import os, subprocess, sys; subprocess.Popen([sys.executable, '-c', sys.argv[1]], "
       "start_new_session=True, env={**os.environ, 'ABSERVE_PARENT_PID': str(os.getpid())}).wait()")


@pytest.mark.process
def test_an_arm_whose_run_is_killed_stops_its_whole_process_group() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ABSERVE_")}
    run = subprocess.Popen([sys.executable, "-c", RUN, ARM_SERVER], env=env)
    started: list[psutil.Process] = []
    try:
        deadline = time.monotonic() + 30
        # the server and its child, which it starts once the plugin is registered
        while len(started) < 2 and time.monotonic() < deadline:
            started = psutil.Process(run.pid).children(recursive=True)
            time.sleep(0.1)
        assert len(started) == 2, started
        run.kill()
        run.wait(timeout=10)
        _, alive = psutil.wait_procs(started, timeout=10)
        assert alive == []
    finally:
        for proc in started:
            if proc.is_running():
                proc.kill()
