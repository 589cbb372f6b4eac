"""The heavy-marker check (``tests/support/heavy_marks.py``) fails what it must and only that.

A small test file runs under pytest in a child process with the plugin loaded: each unmarked
way of starting a process or a server fails with the one line naming the marker; marked
tests, tests that only read ``/proc``, and a wide fixture's teardown pass.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path

import pytest
from tests.support.heavy_marks import HEAVY_MARKERS, TESTS_ROOT, heavy_by_folder

REPO = TESTS_ROOT.parent
CASES = '''
import asyncio, multiprocessing, os, socket, subprocess, sys
import pytest

PASS = [sys.executable, "-c", "pass"]

def listen():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()

def test_unmarked_process():
    subprocess.run(PASS, check=True)

@pytest.mark.process
def test_marked_process():
    subprocess.run(PASS, check=True)

def test_unmarked_server():
    listen()

@pytest.mark.process
def test_process_mark_does_not_cover_a_server():
    listen()

@pytest.mark.server
def test_marked_server():
    listen()

@pytest.mark.process
def test_a_server_after_a_child_process_needs_server():
    subprocess.run(PASS, check=True)
    listen()

def test_unmarked_uvicorn():
    from tests.support.fake_upstream import FakeUpstream
    with FakeUpstream():
        pass

def test_unmarked_asyncio_subprocess():
    async def child():
        proc = await asyncio.create_subprocess_exec(*PASS)
        return await proc.wait()
    assert asyncio.run(child()) == 0

def test_unmarked_multiprocessing():
    proc = multiprocessing.Process(target=os.getpid)
    proc.start()
    proc.join()

def test_reading_proc_starts_nothing():
    assert os.cpu_count()
    assert open("/proc/self/stat").read()

@pytest.fixture(scope="module")
def child():
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield proc
    proc.kill()
    proc.wait()
    subprocess.run(PASS, check=True)  # in the teardown of whichever test ends the module

@pytest.mark.process
def test_first_user(child):
    assert child.poll() is None

def test_later_user(child):
    assert child.poll() is None

def test_bystander_last_in_the_module():
    pass
'''


FLAGGED = [  # test, what it started, during, the marker the line asks for
    ("test_unmarked_process", "starts a child process (*python* -c pass)", "call", "process"),
    ("test_unmarked_server", "starts a server (listens on ('127.0.0.1', *))", "call", "server"),
    ("test_process_mark_does_not_cover_a_server", "starts a server*", "call", "server"),
    ("test_a_server_after_a_child_process_needs_server", "starts a server*", "call", "server"),
    ("test_unmarked_uvicorn", "starts a server (uvicorn on 127.0.0.1:*)", "call", "server"),
    ("test_unmarked_asyncio_subprocess", "starts a child process*", "call", "process"),
    ("test_unmarked_multiprocessing", "starts a child process (multiprocessing*", "call", "process"),
    ("test_later_user", "uses fixture 'child', which started a child process*", "setup", "process"),
]


@pytest.mark.slow
@pytest.mark.process  # runs pytest in a child process
def test_unmarked_starts_fail_with_one_line_and_marked_ones_pass(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    pytester.makepyfile(test_cases=CASES)
    result = pytester.runpytest_subprocess("-p", "tests.support.heavy_marks", "-p", "no:cacheprovider",
                                           "-W", "ignore::pytest.PytestUnknownMarkWarning")
    result.assert_outcomes(passed=5, failed=7, errors=1)  # a fixture that starts: an error at setup
    result.stdout.fnmatch_lines_random([
        f"test_cases.py::{name} {what} during {when} but is not marked: add @pytest.mark.{marker}*"
        for name, what, when, marker in FLAGGED])
    for name in ("test_marked_process", "test_marked_server", "test_reading_proc_starts_nothing",
                 "test_first_user", "test_bystander_last_in_the_module"):
        assert f"{name} " not in result.stdout.str()


@pytest.mark.parametrize(("path", "heavy"), [
    (TESTS_ROOT / "integration" / "test_x.py", True),
    (TESTS_ROOT / "e2e" / "sub" / "test_x.py", True),
    (TESTS_ROOT / "compose_stack" / "test_x.py", True),
    (TESTS_ROOT / "unit" / "integration" / "test_x.py", False),
    (TESTS_ROOT / "unit" / "test_x.py", False),
    (Path("/elsewhere/integration/test_x.py"), False),
])
def test_the_heavy_folders_are_the_top_level_ones(path: Path, heavy: bool) -> None:
    assert heavy_by_folder(path) is heavy


def test_every_heavy_marker_is_declared_with_what_it_means() -> None:
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    declared = {line.split(":")[0] for line in config["tool"]["pytest"]["ini_options"]["markers"]}
    assert set(HEAVY_MARKERS) <= declared
