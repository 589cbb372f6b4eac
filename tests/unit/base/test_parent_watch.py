"""``abserve.base.parent_watch``: when a child of ``abserve run`` judges its parent gone, and who
watches at all (only a direct child of the pid in ``ABSERVE_PARENT_PID``)."""

from __future__ import annotations

import asyncio
import os

import pytest

from abserve.base.parent_watch import PARENT_PID_ENV, parent_from_env, parent_gone, watch_parent
from abserve.router.settings import RouterSettings


def unused_pid() -> int:
    """A pid no process has now (the highest below the kernel's limit that is free)."""
    pid = 4_000_000
    while pid > 1:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return pid
        except PermissionError:
            pass
        pid -= 1
    raise AssertionError("no free pid")


def test_the_living_parent_is_not_gone() -> None:
    assert not parent_gone(os.getppid())


@pytest.mark.parametrize("pid", [unused_pid(), os.getpid()])
def test_another_pid_than_the_parent_is_gone(pid: int) -> None:
    """A dead pid, or a living process that is not (any more) this process's parent."""
    assert parent_gone(pid)


@pytest.mark.parametrize(("value", "watched"), [
    (str(os.getppid()), True), (str(os.getpid()), False), ("", False), ("12ab", False)])
def test_only_a_direct_child_of_the_env_pid_watches(monkeypatch: pytest.MonkeyPatch, value: str,
                                                    watched: bool) -> None:
    """A grandchild (vLLM's engine, a Locust worker) inherits the variable but not the parent."""
    monkeypatch.setenv(PARENT_PID_ENV, value)
    assert parent_from_env() == (int(value) if watched else None)


def test_without_the_variable_nothing_watches(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(PARENT_PID_ENV, raising=False)
    assert parent_from_env() is None


def test_the_watch_calls_back_once_the_parent_is_gone() -> None:
    calls: list[str] = []
    asyncio.run(asyncio.wait_for(watch_parent(unused_pid(), lambda: calls.append("gone"), 0.01), 5))
    assert calls == ["gone"]


def test_the_watch_waits_while_the_parent_lives() -> None:
    calls: list[str] = []
    with pytest.raises(TimeoutError):
        asyncio.run(asyncio.wait_for(watch_parent(os.getppid(), lambda: calls.append("gone"), 0.01), 0.1))
    assert calls == []


def test_the_parent_pid_is_not_stored_with_the_run() -> None:
    """It differs on every run: a resumed run must not look like another configuration."""
    settings = RouterSettings(arms={"a": {"url": "http://127.0.0.1:1"}}, dev_mode=True, parent_pid=123)
    assert "parent_pid" not in settings.public_config()
    assert RouterSettings(arms={"a": {"url": "http://127.0.0.1:1"}}, dev_mode=True).parent_pid is None
