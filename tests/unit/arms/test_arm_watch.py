"""The arm watch of ``abserve run`` (``arms/watch.py``) against real processes and a real
HTTP server standing in for vLLM's ``/health``: a killed process or an engine that answers
503 is a death found within about a second, named with its cause and the first error line
its log gained; ``watch_arms`` interrupts the main thread even in a blocking wait."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from tests.support.fake_upstream import FakeUpstream, closed_port_url

from abserve.arms.watch import ArmDeath, ArmDied, ArmWatch, exit_cause, first_error_line, watch_arms

pytestmark = pytest.mark.timeout(60)


@dataclass
class Arm:
    """A stand-in server: a real process, a log file and a URL serving /health."""

    name: str
    log_path: Path
    url: str
    process: subprocess.Popen[bytes] | None = None


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    yield proc
    proc.kill()
    proc.wait()


def wait_death(watch: ArmWatch, timeout_s: float = 10.0) -> ArmDeath:
    deadline = time.monotonic() + timeout_s
    while watch.death is None:
        assert time.monotonic() < deadline, "no death found"
        time.sleep(0.05)
    return watch.death


def test_first_error_line_names_the_cause_not_the_traceback_header() -> None:
    log = ("INFO 12-01 10:00:00 [api_server.py:1] started\n"
           "WARNING something odd\n"
           "Traceback (most recent call last):\n"
           '  File "x.py", line 1, in <module>\n'
           "RuntimeError: CPU Generator does not use offset\n"
           "ERROR 12-01 10:00:01 [core.py:2] EngineCore failed\n")
    assert first_error_line(log) == "RuntimeError: CPU Generator does not use offset"
    assert first_error_line("INFO fine\nWARNING also fine\n") is None
    assert (first_error_line("ERROR " + "x" * 1000) or "").endswith("...")


def test_exit_causes_name_the_signal() -> None:
    assert exit_cause(-9) == "its process was killed by SIGKILL"
    assert exit_cause(1) == "its process exited with code 1"


@pytest.mark.server
def test_a_killed_process_is_found_within_a_second_with_its_log_line(
        tmp_path: Path, sleeper: subprocess.Popen[bytes]) -> None:
    log = tmp_path / "b.log"
    log.write_text("ERROR at startup, before the watch: not this run's cause\n")
    with FakeUpstream() as up:
        arms = {"a": Arm("a", tmp_path / "a.log", up.url),
                "b": Arm("b", log, up.url, sleeper)}
        watch = ArmWatch(arms, interval_s=0.2).start()
        try:
            time.sleep(0.5)
            assert watch.death is None
            with log.open("a") as handle:
                handle.write("INFO serving\nERROR 12-01 [core.py:1] EngineCore hit an exception\n")
            sleeper.send_signal(signal.SIGKILL)
            killed = time.monotonic()
            death = wait_death(watch)
            found = time.monotonic() - killed
        finally:
            watch.stop()
    assert found < 1.5, found
    assert death.arm == "b"
    assert death.cause == "its process was killed by SIGKILL"
    assert death.log_line == "ERROR 12-01 [core.py:1] EngineCore hit an exception"
    assert "arm 'b' died during the run" in death.describe()


@pytest.mark.server
def test_health_503_twice_is_a_death_and_one_is_not(tmp_path: Path) -> None:
    with FakeUpstream() as up:
        watch = ArmWatch({"a": Arm("a", tmp_path / "a.log", up.url)}, interval_s=0.1).start()
        try:
            up.knobs.health_status = 503
            death = wait_death(watch)
        finally:
            watch.stop()
    assert death.cause == "/health answered HTTP 503 2 times in a row"
    assert death.log_line is None


def test_an_unreachable_health_is_a_death_after_unresponsive_s(tmp_path: Path) -> None:
    watch = ArmWatch({"a": Arm("a", tmp_path / "a.log", closed_port_url())}, interval_s=0.1,
                     unresponsive_s=0.5).start()
    try:
        death = wait_death(watch)
    finally:
        watch.stop()
    assert death.cause == "no answer from /health for 0.5 s (ConnectError)"


@pytest.mark.server
def test_watch_arms_interrupts_a_blocking_wait_in_the_main_thread(
        tmp_path: Path, sleeper: subprocess.Popen[bytes]) -> None:
    with FakeUpstream() as up:
        arms = {"b": Arm("b", tmp_path / "b.log", up.url, sleeper)}
        started = time.monotonic()
        with pytest.raises(ArmDied) as raised, watch_arms(arms, interval_s=0.2):
            subprocess.Popen(["sh", "-c", f"sleep 0.5; kill -9 {sleeper.pid}"])
            subprocess.run(["sleep", "30"], timeout=60, check=False)  # the load, blocked
    assert time.monotonic() - started < 5
    assert raised.value.death.arm == "b"
    assert "SIGKILL" in str(raised.value)
    assert signal.getsignal(signal.SIGUSR1) is signal.SIG_DFL


@pytest.mark.server
def test_no_death_after_the_watch_stopped(tmp_path: Path, sleeper: subprocess.Popen[bytes]) -> None:
    with FakeUpstream() as up, watch_arms({"b": Arm("b", tmp_path / "b.log", up.url, sleeper)},
                                          interval_s=0.1) as watch:
        time.sleep(0.3)
    sleeper.kill()
    time.sleep(0.3)
    assert watch.death is None
