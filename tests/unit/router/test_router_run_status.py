"""The router's run in the store ends ``completed`` only when the router's lifespan ends
cleanly; a lifespan that ends with an error leaves it ``interrupted`` (it was marked
completed in a ``finally``, so a crashed router's run passed for a finished one), and so
does one that stopped because its parent, ``abserve run``, is gone."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from abserve.router.app import Orphan, _open_sink
from abserve.router.settings import RouterSettings
from abserve.store import Store


def settings(tmp_path: Path) -> RouterSettings:
    return RouterSettings(arms={"a": {"url": "http://127.0.0.1:1"}}, dev_mode=True,
                          run_dir=tmp_path, run_id="status-run")


async def lifespan(s: RouterSettings, crash: bool) -> None:
    async with _open_sink(s):
        if crash:
            raise RuntimeError("the router crashed")


@pytest.mark.parametrize(("crash", "status"), [(False, "completed"), (True, "interrupted")])
def test_the_run_is_completed_only_on_a_clean_exit(tmp_path: Path, crash: bool, status: str) -> None:
    s = settings(tmp_path)
    if crash:
        with pytest.raises(RuntimeError):
            asyncio.run(lifespan(s, crash))
    else:
        asyncio.run(lifespan(s, crash))
    with Store.open(s.effective_database_url) as store:
        run = store.get_run("status-run")
    assert run is not None
    assert run.status == status


def test_a_router_whose_parent_is_gone_marks_its_run_interrupted(tmp_path: Path) -> None:
    """A clean stop because ``abserve run`` was killed (``Orphan.gone``) is no completed run."""
    s = settings(tmp_path)
    orphan = Orphan(gone=True)  # what Orphan.stop sets before it SIGTERMs the router

    async def stopped_as_orphan() -> None:
        async with _open_sink(s, orphan=orphan):
            pass

    asyncio.run(stopped_as_orphan())
    with Store.open(s.effective_database_url) as store:
        run = store.get_run("status-run")
    assert run is not None
    assert run.status == "interrupted"
