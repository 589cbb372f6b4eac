"""The router's FastAPI app: factory, lifespan and the few paths it serves.

``create_app(settings)`` builds an app whose lifespan owns one ``upstream.ArmClient`` per
arm (a keep-alive connection pool with explicit timeouts and limits) and the record
writer (the store's ``BatchWriter``, or an injected sink in tests). Paths: ``POST /v1/chat/completions``,
``POST /v1/completions`` (fanned out), ``GET /v1/models`` (from the primary),
``GET /livez`` (no backend call), ``GET /readyz`` (every arm's ``/health`` answers 200;
otherwise 503 with the reason per arm: a dead arm makes every exchange useless),
``GET /metrics`` (Prometheus). Every other path is a 404: nothing else is proxied.
On shutdown the exchanges in flight are drained and their records flushed.
With ``parent_pid`` (``abserve run`` sets it) the router also shuts down so when that
process is gone, and marks its run ``interrupted`` (``abserve.base.parent_watch``). With
``acknowledge: stored`` (the default) a client's answer ends only once its exchange is
committed to the store (``relay``, ``store.writer``).
A client's ``X-Request-ID`` is recorded in the exchange's tags (``client_request_id``) beside
the router's own id and echoed back; see ``client_request_id`` for what is kept.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager, nullcontext
from dataclasses import dataclass
from typing import Any, Literal

import orjson
from fastapi import FastAPI, Request
from starlette.responses import JSONResponse, Response
from starlette.types import Receive, Scope, Send

from abserve.base.parent_watch import watch_parent
from abserve.model.records import REQUEST_ID_HEADER, TAG_HEADER_PREFIX
from abserve.openai_request.errors import RouterError
from abserve.openai_request.validation import Endpoint, check_request, read_capped
from abserve.router.admission import SharedCounts
from abserve.router.affinity import affinity_headers, header_bytes
from abserve.router.augment import augment, check_sampling
from abserve.router.body_pace import paced
from abserve.router.errors import error_response
from abserve.router.fanout import ArmCall, FanOut, Relay
from abserve.router.http1 import Body
from abserve.router.metrics import CONTENT_TYPE, RouterMetrics
from abserve.router.recording import ExchangeSink, Recorder
from abserve.router.relay import respond
from abserve.router.security import check_bearer
from abserve.router.settings import RouterSettings
from abserve.router.upstream import ArmClient, UpstreamError

log = logging.getLogger("abserve.router")
MAX_TAGS, MAX_TAG_LEN = 24, 256  # a session's turn carries ~13 (run, block, file, session)
# The client's own request id (``X-Request-ID``, as vLLM's benchmark client and most
# gateways send it) is recorded in the tags beside the router's id, so exchanges can be
# matched to the client's logs, and echoed back. Only a printable ASCII id of at most
# ``MAX_CLIENT_ID_LEN`` characters is kept (never truncated: a cut id would match the wrong
# line); any other value is dropped and the reason recorded in ``CLIENT_ID_REFUSED_TAG``.
CLIENT_ID_HEADER = "x-request-id"
CLIENT_ID_TAG, CLIENT_ID_REFUSED_TAG = "client_request_id", "client_request_id_refused"
MAX_CLIENT_ID_LEN = 256


@dataclass
class RouterState:
    """What the lifespan owns and the handlers use."""

    settings: RouterSettings
    clients: dict[str, ArmClient]
    metrics: RouterMetrics
    recorder: Recorder
    answering: int = 0  # clients admitted whose response is not yet sent in full
    shared: SharedCounts | None = None  # a worker of several: the router-wide counts

    def publish(self) -> None:
        """Make this process's counts seen by the other workers (if any)."""
        if self.shared is not None:
            self.shared.publish(self.answering, self.recorder.admitted)


@dataclass
class Orphan:
    """Whether the router's parent (``settings.parent_pid``: ``abserve run``) is gone."""

    gone: bool = False

    def stop(self) -> None:
        """The parent is gone: remember it, and stop as on SIGTERM (drain, flush)."""
        self.gone = True
        os.kill(os.getpid(), signal.SIGTERM)


def _watch_parent(settings: RouterSettings, orphan: Orphan) -> asyncio.Task[None] | None:
    if settings.parent_pid is None:
        return None
    return asyncio.create_task(watch_parent(settings.parent_pid, orphan.stop))


@asynccontextmanager
async def _open_sink(settings: RouterSettings, own_run: bool = True,
                     orphan: Orphan | None = None) -> AsyncIterator[ExchangeSink]:
    """The store's batch writer for this run, created (or with ``resume`` reopened:
    ``router.run_open``); marks the run completed on a clean exit (and
    interrupted when the router's lifespan ends with an error, or when it stopped because
    its parent, ``abserve run``, is gone: ``orphan``). A
    worker of several (``own_run`` False) only writes: its supervisor creates and finishes
    the run (``router.workers``)."""
    from abserve.router.run_open import open_run
    from abserve.store import BatchWriter, Store

    settings.run_dir.mkdir(parents=True, exist_ok=True)
    store = Store.open(settings.effective_database_url, fsync=settings.store_fsync)
    if own_run:
        try:
            open_run(store, settings.run_id, settings.public_config(), settings.resume,
                     settings.run_provenance)
        except Exception:
            store.close()
            raise
    writer = BatchWriter(store, settings.run_id, flush_interval_s=settings.flush_interval_s,
                         claim_owner=own_run)
    writer.start()
    status: Literal["completed", "interrupted"] = "interrupted"  # unless the lifespan ends cleanly
    try:
        yield writer
        status = "interrupted" if orphan is not None and orphan.gone else "completed"
    finally:
        writer.close()
        if own_run:
            store.finish_run(settings.run_id, status)
        close = getattr(store, "close", None)
        if callable(close):
            close()


def create_app(settings: RouterSettings, sink: ExchangeSink | None = None, *,
               own_run: bool = True, shared: SharedCounts | None = None) -> FastAPI:
    """The router app. ``sink`` replaces the store (for tests of one piece); ``own_run``
    False and ``shared`` (the admission counts of all workers) for a worker process of
    several (``router.workers``)."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with AsyncExitStack() as stack:
            orphan = Orphan()
            clients = {name: await stack.enter_async_context(ArmClient(arm, settings.pool))
                       for name, arm in settings.arms.items()}
            out = sink if sink is not None else await stack.enter_async_context(
                _open_sink(settings, own_run, orphan))
            metrics = RouterMetrics()
            recorder = Recorder(out, metrics, settings.run_id, settings.primary,
                                settings.store_prompt_text, settings.prompt_logprobs_fraction,
                                settings.prompt_logprobs_k)
            state = app.state.router = RouterState(settings, clients, metrics, recorder,
                                                   shared=shared)
            recorder.on_recorded = state.publish
            log.info("router up: run %s, arms %s, primary %s", settings.run_id,
                     sorted(settings.arms), settings.primary)
            watch = _watch_parent(settings, orphan)
            yield
            if watch is not None:
                watch.cancel()
            left = await recorder.drain(settings.drain_timeout_s)
            log.info("router down: drained, %d exchanges cancelled", left)

    app = FastAPI(title="abserve router", lifespan=lifespan, docs_url=None, redoc_url=None,
                  openapi_url=None)
    app.add_exception_handler(RouterError, _on_router_error)  # type: ignore[arg-type]

    async def chat(request: Request) -> Response:
        return await fan_out(request, "chat/completions")

    async def completions(request: Request) -> Response:
        return await fan_out(request, "completions")

    # Plain Starlette routes: FastAPI's per-request dependency machinery is of no use to a
    # handler that takes the raw request (measured: see benchmarks/router_overhead.md).
    app.router.add_route("/v1/chat/completions", chat, methods=["POST"])
    app.router.add_route("/v1/completions", completions, methods=["POST"])

    @app.get("/v1/models")
    async def models(request: Request) -> Response:
        state = _state(request)
        check_bearer(request.headers.get("authorization"), settings.api_key)
        try:
            resp = await state.clients[settings.primary].get("/v1/models", timeout_s=10.0)
        except (UpstreamError, TimeoutError) as exc:
            raise RouterError(502, "primary arm unreachable") from exc
        return Response(resp.content, status_code=resp.status_code, media_type=resp.content_type)

    @app.get("/livez")
    async def livez() -> Response:
        return JSONResponse({"status": "ok"})

    @app.get("/readyz")
    async def readyz(request: Request) -> Response:
        state = _state(request)
        names = list(state.clients)
        problems = await asyncio.gather(*(arm_problem(state.clients[n]) for n in names))
        down = {name: why for name, why in zip(names, problems, strict=True) if why is not None}
        ready = not down  # an exchange needs every arm: one dead arm makes every record useless
        body: dict[str, Any] = {"ready": ready, "arms": {name: name not in down for name in names}}
        if down:
            body["reason"] = "; ".join(f"arm {name!r} {why}" for name, why in down.items())
            log.warning("not ready: %s", body["reason"])
        return JSONResponse(body, status_code=200 if ready else 503)

    @app.get("/metrics")
    async def metrics(request: Request) -> Response:
        check_bearer(request.headers.get("authorization"), settings.api_key)
        return Response(_state(request).metrics.render(), media_type=CONTENT_TYPE)

    return app


def _state(request: Request) -> RouterState:
    state: RouterState = request.app.state.router
    return state


async def _on_router_error(request: Request, exc: RouterError) -> Response:
    return error_response(exc)


async def arm_problem(client: ArmClient, timeout_s: float = 2.0) -> str | None:
    """Why an arm is not serving (its ``/health`` answer, or why there was none); None when
    it answers 200. vLLM answers 503 once its engine died; a dead server answers nothing."""
    try:
        status = (await client.get("/health", timeout_s=timeout_s)).status_code
    except UpstreamError as exc:
        return f"is unreachable ({exc})"
    except TimeoutError:
        return f"did not answer /health within {timeout_s:g} s"
    return None if status == 200 else f"answered /health with HTTP {status}"


def _admit(state: RouterState) -> Callable[[], None]:
    """Take a client's admission slot and return the function that gives it back (once).
    Refuse the request (503) when ``max_concurrency`` clients are being answered, or when
    ``max_shadow_backlog`` exchanges have answered their client but still wait for an arm:
    counted over every worker when there are several (``router.admission``)."""
    s, shared = state.settings, state.shared
    with shared.locked() if shared is not None else nullcontext():
        answering, in_flight = (shared.totals() if shared is not None
                                else (state.answering, state.recorder.admitted))
        reason, message = None, ""
        if answering >= s.max_concurrency:
            reason, message = "capacity", "router at capacity, retry later"
        elif in_flight - answering >= s.max_shadow_backlog:
            reason, message = "shadow_backlog", "arms behind on earlier requests, retry later"
        if reason is None:
            return _releaser(state)
    state.metrics.rejected.labels(reason=reason).inc()
    raise RouterError(503, message, headers={"Retry-After": str(s.retry_after_s)})


class Admitted(Response):
    """The client's response; its admission slot is freed once it is sent (or failed), not
    when the last arm ends: a hung shadow holds only a place in ``max_shadow_backlog``."""

    def __init__(self, inner: Response, release: Callable[[], None]) -> None:
        self.inner, self.release, self.background = inner, release, None
        self.status_code, self.raw_headers = inner.status_code, inner.raw_headers

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await self.inner(scope, receive, send)
        finally:
            self.release()
        if self.background is not None:
            await self.background()


def _releaser(state: RouterState) -> Callable[[], None]:
    """Take a client's admission slot; the function returned gives it back (once)."""
    state.answering += 1
    state.publish()
    held = True

    def release() -> None:
        nonlocal held
        if held:
            held = False
            state.answering -= 1
            state.publish()

    return release


async def _read_body(request: Request, s: RouterSettings) -> bytes:
    """The whole body within ``body_timeout_s`` and above the rate floor (408 otherwise,
    ``router.body_pace``) and within ``max_body_bytes`` (413)."""
    chunks = paced(request.stream(), s.min_body_bytes_per_s, s.body_rate_window_s)
    try:
        async with asyncio.timeout(s.body_timeout_s):
            return await read_capped(chunks, request.headers.get("content-length"),
                                     s.max_body_bytes)
    except TimeoutError:
        raise RouterError(408, f"request body not received within {s.body_timeout_s:g} s") from None


def _tags(request: Request, session_headers: list[str]) -> dict[str, str]:
    tags = {}
    for key, value in request.headers.items():
        if key.startswith(TAG_HEADER_PREFIX) and key != REQUEST_ID_HEADER:
            name = key[len(TAG_HEADER_PREFIX):]
            if name in (CLIENT_ID_TAG, CLIENT_ID_REFUSED_TAG) or name in session_headers:
                continue  # the router's to set, from X-Request-ID and the session headers
            tags[name] = value[:MAX_TAG_LEN]
            if len(tags) >= MAX_TAGS:
                break
    return tags


def client_request_id(value: str | None) -> tuple[str | None, str | None]:
    """``(id, None)`` for a usable ``X-Request-ID`` value, ``(None, why)`` for one that
    is not recorded, ``(None, None)`` when none was sent. Usable: 1 to
    ``MAX_CLIENT_ID_LEN`` printable ASCII characters (space to tilde) after trimming."""
    if value is None:
        return None, None
    value = value.strip()
    if not value:
        return None, "empty"
    if len(value) > MAX_CLIENT_ID_LEN:
        return None, f"longer than {MAX_CLIENT_ID_LEN} characters"
    if not all(" " <= ch <= "~" for ch in value):
        return None, "not printable ASCII"
    return value, None


def arm_payload(raw: bytes, client: dict[str, Any], sent: dict[str, Any]) -> Body:
    """The bytes every arm receives for ``sent`` (the client's body ``client``, parsed from
    ``raw``, plus the router's top-level additions), in pieces sent one after another.
    When every addition is a key the client did not send (the usual case), the client's
    own bytes up to the closing brace, then those keys: no re-encoding and no copy of a
    ~1 MB body. Otherwise ``sent`` encoded."""
    added = {key: value for key, value in sent.items() if key not in client}
    same = len(sent) - len(added) == len(client) and all(sent[k] is v for k, v in client.items())
    if not added and same:
        return (raw,)
    end = len(raw)
    while end and raw[end - 1] in b" \t\r\n":  # JSON whitespace after the object
        end -= 1
    if not same or not client or not end or raw[end - 1] != ord("}"):
        return (orjson.dumps(sent),)
    return memoryview(raw)[:end - 1], b"," + orjson.dumps(added)[1:]


async def fan_out(request: Request, endpoint: Endpoint) -> Response:
    """Check the request, send it to every arm at once, relay the primary, record all."""
    state = _state(request)
    s = state.settings
    check_bearer(request.headers.get("authorization"), s.api_key)
    release = _admit(state)  # a body still arriving holds a slot: stalled bodies are bounded
    try:
        raw = await _read_body(request, s)
        checked = await check_request(endpoint, raw, max_images=s.max_images,
                                      allowed_hosts=s.allowed_media_hosts)
        check_sampling(checked, s)
    except RouterError as exc:
        release()
        state.metrics.rejected.labels(reason=str(exc.status)).inc()
        raise
    except BaseException:  # the client went away while sending
        release()
        raise
    sent = dict(checked.body)  # shallow: augment only sets top-level keys; the client's stays
    additions = augment(sent, endpoint, s)
    payload = arm_payload(raw, checked.body, sent)
    request_id = uuid.uuid4().hex
    relay = Relay(additions)
    affinity = affinity_headers(request.headers, s.session_headers)
    lines = header_bytes(affinity)
    t0, started_at = time.perf_counter(), time.time()
    calls = {name: ArmCall(name, state.clients[name], arm.deadlines, f"/v1/{endpoint}", payload,
                           checked.stream, t0, relay if name == s.primary else None, lines)
             for name, arm in s.arms.items()}
    fan = FanOut(calls)
    state.recorder.admitted += 1
    state.publish()
    state.metrics.in_flight.set(state.recorder.admitted)
    fan.start()
    tags, headers = _tags(request, s.session_headers) | affinity, {REQUEST_ID_HEADER: request_id}
    client_id, refused = client_request_id(request.headers.get(CLIENT_ID_HEADER))
    if client_id is not None:
        tags[CLIENT_ID_TAG] = headers[CLIENT_ID_HEADER] = client_id
    elif refused is not None:
        tags[CLIENT_ID_REFUSED_TAG] = refused
    stored = state.recorder.track(checked, fan, request_id, started_at, tags)
    try:
        response = await respond(relay, fan, request.receive, headers,
                                 wait_all=s.client_waits_for == "all_arms",
                                 stored=stored if s.acknowledge == "stored" else None)
    except BaseException:
        release()
        raise
    return Admitted(response, release)

