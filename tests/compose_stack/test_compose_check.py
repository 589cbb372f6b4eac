"""`make compose-check` as a test: the GPU host's docker compose stack, run for real on CPU.

Runs ``scripts/compose-check.sh`` (the very script of ``make compose-check``): it installs and
starts a container engine if none is there, imports the CPU stack's runtime image, runs
``scripts/signoff.sh`` with ``docker-compose.yml`` + ``docker-compose.cpu.yml`` on the tiny
model (its orchestrator service: ``abserve run --target compose``) and asserts the verdict, the
arms' proofs and the exit code: the GPU engineer's journey (every shell block of the GPU
pages, run as written on a stand-in GPU host, sign-offs stored in SQLite and in the ledger
profile's PostgreSQL); then it tears everything
down; the second case runs the fault steps (``make compose-faults``: an arm killed, the
orchestrator stopped) the same way. This test then checks that
the machine was left as found: no container, no compose network, no dockerd it started, the
firewall as before. Needs root (the engine) and about 15-25 minutes (benchmarks/compose.md);
marker ``compose``: ``PYTEST_ARGS='-m "not compose"' make test`` leaves it out while
developing. ``make test`` runs the first case; the fault cases with ``COMPOSE_FAULTS=1``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LOG = ROOT / ".abserve" / "compose" / "check.log"


def firewall_rules(saved: str) -> set[str]:
    """What a firewall does, from ``iptables-save`` output: every rule and user chain, and
    every built-in chain's policy unless it is ACCEPT, each with its table. A table that is
    not loaded and a loaded table with no rules and ACCEPT policies filter the same, and
    ``iptables-save`` prints them differently: the first time an engine starts it loads the
    tables (or this check installs iptables at all, so there was nothing to print before),
    and stopping it cannot unload them; ``scripts/compose-engine.sh`` restores either case
    to no rules and ACCEPT policies."""
    rules: set[str] = set()
    table = ""
    for line in saved.splitlines():
        if line.startswith("*"):
            table = line[1:]
        elif line.startswith(":"):
            chain, policy = line[1:].split(" [")[0].split()
            if policy != "ACCEPT":
                rules.add(f"{table} {chain} {policy}")
        elif line.startswith("-"):
            rules.add(f"{table} {line}")
    return rules


def firewall() -> set[str]:
    """The host's IPv4 firewall rules now (none when iptables is not installed)."""
    if shutil.which("iptables-save") is None:
        return set()
    return firewall_rules(subprocess.run(["iptables-save"], capture_output=True, text=True,
                                         check=False).stdout)


def test_an_empty_loaded_table_is_no_firewall_and_a_left_rule_or_chain_is_not() -> None:
    empty = "*filter\n:INPUT ACCEPT [7:36]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [7:36]\nCOMMIT\n"
    assert firewall_rules(empty) == firewall_rules("") == set()
    left = empty.replace("COMMIT", ":DOCKER - [0:0]\n-A FORWARD -j DOCKER\nCOMMIT")
    assert firewall_rules(left) == {"filter DOCKER -", "filter -A FORWARD -j DOCKER"}
    assert firewall_rules(empty.replace(":FORWARD ACCEPT", ":FORWARD DROP")) == {"filter FORWARD DROP"}


def bridge_names(ip_link: str) -> set[str]:
    """The container-engine bridges (``docker0``, ``br-<network>``) in ``ip -o link``'s output."""
    names = {line.split(":", 2)[1].strip().split("@")[0] for line in ip_link.splitlines() if ":" in line}
    return {n for n in names if n == "docker0" or n.startswith("br-")}


def bridges() -> set[str]:
    return bridge_names(subprocess.run(["ip", "-o", "link"], capture_output=True, text=True,
                                       check=False).stdout)


def test_bridges_are_the_engines_links_only() -> None:
    out = ("1: lo: <LOOPBACK,UP> mtu 65536 qdisc noqueue state UNKNOWN\n"
           "2: eth0@if9: <BROADCAST,UP> mtu 1500 qdisc noqueue state UP\n"
           "3: docker0: <NO-CARRIER,UP> mtu 1500 qdisc noqueue state DOWN\n"
           "741: br-6e070de1bf30: <NO-CARRIER,UP> mtu 1500 qdisc noqueue state DOWN\n")
    assert bridge_names(out) == {"docker0", "br-6e070de1bf30"}
    assert bridge_names("") == set()


def engine_answers() -> bool:
    if shutil.which("docker") is None:
        return False
    return subprocess.run(["docker", "info"], capture_output=True, check=False).returncode == 0


def ours_running() -> bool:
    """Whether the engine that answers is the dockerd scripts/compose-engine.sh started."""
    pidfile = Path(os.environ.get("ABSERVE_DOCKER_ROOT", "/var/lib/abserve-docker")) / "dockerd.pid"
    try:
        os.kill(int(pidfile.read_text().strip()), 0)
    except (OSError, ValueError):
        return False
    return True


@pytest.mark.compose
@pytest.mark.timeout(3000)
# Every step runs scripts/signoff.sh, whose orchestrator service is `abserve run --target compose`
# (the one orchestrator). journey: the GPU engineer's journey (issue 57,
# tests/support/gpu_journey.py), every shell block of the GPU pages run as written on a
# stand-in GPU host: the own-change recipe to a PASS, the lookup sign-off (three arms), the
# placement-bias A/A', the GPU release series (a release stored in the ledger profile's
# PostgreSQL, accepted, a nightly against it decided, the ledger site), and the 4-block
# rotation as its plan (ABSERVE_JOURNEY_QUICK: four more sign-offs would double the lane;
# `make compose-check` runs it whole). The other steps (decide-postgres: a family with a mutant
# arm stored in PostgreSQL; text-only; rotation; arms3; concurrency) are `make compose-check`'s,
# which runs every step, not `make test`'s: the compose lane must stay within CI's time
# (benchmarks/ci_time.md). The rotation's plan and combine are unit-tested
# (tests/unit/deploy/test_rotation.py, tests/unit/runs/test_combine.py), every step's config by
# tests/unit/deploy/test_documented_configs.py, the router's pacing under concurrency by
# tests/integration.
@pytest.mark.parametrize("steps", [["journey"],
                                   ["arm-killed", "orchestrator-stopped"]],
                         ids=["compose-check", "compose-faults"])
def test_compose_check_runs_the_gpu_stack_on_cpu_and_leaves_the_machine_as_found(
        steps: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ABSERVE_JOURNEY_QUICK", "1")  # the rotation's plan only (gpu_journey.QUICK)
    assert os.geteuid() == 0, "the compose check installs and starts a container engine: run as root"
    engine_before = engine_answers()
    if engine_before and not ours_running() and os.environ.get("ABSERVE_COMPOSE_USE_ENGINE") != "1":
        pytest.skip("a Docker engine the check did not start is running: the check refuses it "
                    "(ABSERVE_COMPOSE_USE_ENGINE=1 runs it there, removing only what it labelled)")
    firewall_before, bridges_before = firewall(), bridges()
    LOG.parent.mkdir(parents=True, exist_ok=True)
    with LOG.open("w") as log:
        result = subprocess.run(["bash", str(ROOT / "scripts" / "compose-check.sh"), *steps], cwd=ROOT,
                                stdout=log, stderr=subprocess.STDOUT, timeout=2900, check=False)
    tail = "\n".join(LOG.read_text(errors="replace").splitlines()[-60:])
    assert result.returncode == 0, f"compose-check failed (log {LOG}):\n{tail}"
    assert f"all steps passed: {' '.join(steps)}" in tail
    if engine_before:  # an engine that was there is left running, with nothing of ours in it
        names = subprocess.run(["docker", "ps", "-a", "--format", "{{.Names}}"], capture_output=True,
                               text=True, check=False).stdout.split()
        assert not [n for n in names if n.startswith("abserve-check-")], names
        for kind in (["ps", "-a"], ["network", "ls"], ["volume", "ls"], ["image", "ls"]):
            left = subprocess.run(["docker", *kind, "-q", "--filter", "label=com.abserve.check"],
                                  capture_output=True, text=True, check=False).stdout.split()
            assert not left or os.environ.get("ABSERVE_COMPOSE_KEEP_IMAGES") == "1", (kind, left)
    else:
        assert not engine_answers(), "the dockerd the check started is still running"
        assert firewall() == firewall_before, "the engine's firewall rules were left behind"
        links_left = bridges() - bridges_before  # the engine's bridges; any there before are not ours
        assert not links_left, f"the engine's network links were left behind: {sorted(links_left)}"
