"""The least a Python proxy in the router's place can do: the overhead benchmark's floor.

A raw ASGI app under the same server stack as ``abserve router`` (uvicorn, uvloop,
httptools) that reads the whole body, parses it once with orjson (a router must know the
request is valid JSON before any arm sees it), sends the client's bytes to ONE upstream
with aiohttp and relays the answer's bytes as they arrive. No schema or media checks, no
added fields, no second arm, no parsing of the answer, no records, no metrics. What
``router_overhead.py`` measures for this path is what this machine charges for a Python
store-and-forward hop of a ~1 MB request, before the router does any of its own work.

    python -m benchmarks.floor_proxy --port 8200 --upstream http://127.0.0.1:8011
"""

from __future__ import annotations

import argparse
from typing import Any

import aiohttp
import orjson
import uvicorn


def make_app(upstream: str) -> Any:
    session: aiohttp.ClientSession | None = None

    async def read_body(receive: Any) -> bytes:
        parts = []
        while True:
            message = await receive()
            parts.append(message.get("body", b""))
            if not message.get("more_body"):
                return b"".join(parts)

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        nonlocal session
        if scope["type"] == "lifespan":
            await receive()  # startup
            session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=128),
                                            auto_decompress=False)
            await send({"type": "lifespan.startup.complete"})
            await receive()  # shutdown
            await session.close()
            await send({"type": "lifespan.shutdown.complete"})
            return
        if scope["path"] == "/livez":
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"ok"})
            return
        raw = await read_body(receive)
        orjson.loads(raw)  # the one check a router cannot skip
        assert session is not None
        async with session.post(upstream + scope["path"], data=raw,
                                headers={"content-type": "application/json"}) as resp:
            ctype = resp.headers.get("content-type", "application/json").encode()
            await send({"type": "http.response.start", "status": resp.status,
                        "headers": [(b"content-type", ctype)]})
            async for data in resp.content.iter_any():
                await send({"type": "http.response.body", "body": data, "more_body": True})
        await send({"type": "http.response.body", "body": b""})

    return app


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--upstream", required=True)
    args = parser.parse_args()
    uvicorn.run(make_app(args.upstream.rstrip("/")), host="127.0.0.1", port=args.port,
                loop="uvloop", http="httptools", log_level="warning", backlog=2048)


if __name__ == "__main__":
    main()
