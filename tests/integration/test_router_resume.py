"""The router restarted mid-run under the same run id (``docker compose restart router``).

The real router app on a real socket with the real store (SQLite) and two real HTTP fake
upstreams: started with ``resume``, it takes requests, stops (its lifespan ends: drained,
flushed, run ``completed``), starts again with the same settings and takes more. Every
exchange acknowledged to a client in either half is stored exactly once, the run ends
``completed`` with one restart in its provenance; a second router on the run while the
first serves is refused, and without ``resume`` the restart fails as before. The
supervisor of several workers opens its run the same way (``router.run_open``) and says
why it cannot, before it starts any worker.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from tests.support.fake_upstream import FakeUpstream
from tests.support.router_server import RouterServer, dev_settings

from abserve.model.records import REQUEST_ID_HEADER, ROUTER_RESTARTS_KEY
from abserve.router import create_app
from abserve.router.serve import StartupError
from abserve.router.settings import RouterSettings
from abserve.router.workers import Supervisor
from abserve.store import RunExistsError, RunInUseError, Store

pytestmark = pytest.mark.timeout(90)
BODY = {"model": "fake-model", "stream": True, "max_tokens": 8, "temperature": 0,
        "messages": [{"role": "user", "content": "before and after the restart"}]}
PER_HALF = 6


@pytest.fixture
def urls() -> Iterator[dict[str, str]]:
    with FakeUpstream() as a, FakeUpstream() as b:
        yield {"a": a.url, "b": b.url}


def half(settings: RouterSettings) -> list[str]:
    """Serve ``PER_HALF`` streamed requests, then stop the router; the acknowledged ids."""
    acked = []
    with RouterServer(settings) as router:
        for _ in range(PER_HALF):
            resp = httpx.post(router.url + "/v1/chat/completions", json=BODY, timeout=30)
            assert resp.status_code == 200
            assert resp.text.endswith("data: [DONE]\n\n")
            acked.append(resp.headers[REQUEST_ID_HEADER])
    return acked


def start_and_stop(settings: RouterSettings) -> None:
    """The router app's whole lifespan (startup, then shutdown) without serving."""

    async def lifespan() -> None:
        app = create_app(settings)
        async with app.router.lifespan_context(app):
            pass

    asyncio.run(lifespan())


def stored(settings: RouterSettings) -> tuple[str, list[str], object]:
    with Store.open(settings.effective_database_url) as store:
        run = store.get_run(settings.run_id)
        assert run is not None
        ids = [e.request_id for e in store.iter_exchanges(settings.run_id)]
        return run.status, ids, run.provenance.model_dump(mode="json").get(ROUTER_RESTARTS_KEY)


def test_a_restarted_router_resumes_its_run_and_loses_no_exchange(urls, tmp_path: Path) -> None:
    settings = dev_settings(urls, tmp_path, run_id="resume-run", resume=True)
    first = half(settings)
    status, ids, restarts = stored(settings)
    assert (status, sorted(ids), restarts) == ("completed", sorted(first), None)

    second = half(dev_settings(urls, tmp_path, run_id="resume-run", resume=True))
    status, ids, restarts = stored(settings)
    assert status == "completed"
    assert len(set(first + second)) == 2 * PER_HALF
    assert sorted(ids) == sorted(first + second)  # both halves, each exchange exactly once
    assert isinstance(restarts, list)
    assert [(r["previous_status"], r["exchanges_before"]) for r in restarts] == [("completed", PER_HALF)]


def test_a_second_router_on_a_running_run_is_refused(urls, tmp_path: Path) -> None:
    settings = dev_settings(urls, tmp_path, run_id="resume-run", resume=True)
    with RouterServer(settings) as router:
        with pytest.raises(RunInUseError, match="two routers must never write one run"):
            start_and_stop(settings)
        resp = httpx.post(router.url + "/v1/chat/completions", json=BODY, timeout=30)
        assert resp.status_code == 200  # the first router serves on, its run untouched
    status, ids, restarts = stored(settings)
    assert (status, ids, restarts) == ("completed", [resp.headers[REQUEST_ID_HEADER]], None)


def test_without_resume_a_restart_is_refused_as_before(urls, tmp_path: Path) -> None:
    settings = dev_settings(urls, tmp_path, run_id="resume-run")
    half(settings)
    with pytest.raises(RunExistsError):
        start_and_stop(settings)
    status, ids, restarts = stored(settings)
    assert (status, len(ids), restarts) == ("completed", PER_HALF, None)


def test_the_workers_supervisor_refuses_a_run_it_cannot_resume(urls, tmp_path: Path) -> None:
    settings = dev_settings(urls, tmp_path, run_id="resume-run", resume=True, port=0)
    with (RouterServer(settings),  # a live router writes the run
          pytest.raises(StartupError, match="two routers must never write one run")):
        Supervisor(tmp_path / "unused.yaml", settings, 2, {}).run()
    no_resume = dev_settings(urls, tmp_path, run_id="resume-run", port=0)
    with pytest.raises(StartupError, match="already exists"):
        Supervisor(tmp_path / "unused.yaml", no_resume, 2, {}).run()
    assert stored(settings)[0] == "completed"
