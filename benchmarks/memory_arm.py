"""A fake arm that answers from memory: the least CPU an upstream can spend per request.

For the router's benchmarks the arms must not be the bottleneck: on a 2-core machine
every millisecond an arm spends parsing a 1 MB request is taken from the router. This
arm is a bare asyncio protocol (uvloop): it reads a request's head and ``Content-Length``
bytes of body WITHOUT parsing them, and writes one precomputed streamed answer in a single
write: a vLLM 0.32-shaped chat stream (``chunked`` transfer encoding) of ``--tokens``
tokens, each with its token id and top-5 logprobs, then the usage chunk and ``[DONE]``
(what the router asks every arm for). ``GET /health`` answers 200. Keep-alive as HTTP/1.1.

    python -m benchmarks.memory_arm --port 8011 [--tokens 16]
"""

from __future__ import annotations

import argparse
import asyncio

import orjson
import uvloop

HEALTH = b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n"
BAD = b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"


def stream_answer(tokens: int) -> bytes:
    """The whole HTTP response of one streamed chat request, chunked."""
    head = {"id": "chatcmpl-memory", "object": "chat.completion.chunk", "created": 0,
            "model": "fake-model"}
    events = [{**head, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""},
                                    "logprobs": None, "finish_reason": None}],
               "prompt_token_ids": [1, 2, 3, 4, 5]}]
    for i in range(tokens):
        top = [{"token": f"t{i + j}", "logprob": -0.1 * (j + 1), "bytes": None}
               for j in range(5)]
        events.append({**head, "choices": [{
            "index": 0, "delta": {"content": f"t{i}"},
            "logprobs": {"content": [{"token": f"t{i}", "logprob": -0.1, "bytes": None,
                                      "top_logprobs": top}]},
            "finish_reason": "length" if i == tokens - 1 else None, "stop_reason": None,
            "token_ids": [100 + i]}]})
    events.append({**head, "choices": [], "usage": {"prompt_tokens": 5,
                                                    "completion_tokens": tokens,
                                                    "total_tokens": 5 + tokens}})
    body = [b"data: " + orjson.dumps(e) + b"\n\n" for e in events] + [b"data: [DONE]\n\n"]
    chunks = b"".join(b"%x\r\n%s\r\n" % (len(part), part) for part in body) + b"0\r\n\r\n"
    return (b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\n"
            b"transfer-encoding: chunked\r\n\r\n" + chunks)


class Arm(asyncio.Protocol):
    """One connection: requests in, precomputed answers out (pipelining not needed)."""

    def __init__(self, answer: bytes) -> None:
        self.answer = answer
        self.buf = bytearray()
        self.need = -1  # body bytes still to come; -1 while reading a head
        self.transport: asyncio.WriteTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's TCPTransport

    def data_received(self, data: bytes) -> None:
        assert self.transport is not None
        if self.need > 0:  # body bytes: count them, keep none
            take = min(self.need, len(data))
            self.need -= take
            data = data[take:]
            if self.need == 0:
                self.need = -1
                self.transport.write(self.answer)
            if not data:
                return
        self.buf += data
        while self.need < 0:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            head, rest = bytes(self.buf[:end]), self.buf[end + 4:]
            self.buf = bytearray()
            if head.startswith(b"GET "):
                self.transport.write(HEALTH)
                self.buf = rest
                continue
            length = _content_length(head)
            if length is None:
                self.transport.write(BAD)
                self.transport.close()
                return
            if len(rest) >= length:
                self.transport.write(self.answer)
                self.buf = rest[length:]
            else:
                self.need = length - len(rest)


def _content_length(head: bytes) -> int | None:
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return int(value.strip())
    return None


async def serve(port: int, tokens: int) -> None:
    answer = stream_answer(tokens)
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: Arm(answer), "127.0.0.1", port, backlog=2048)
    async with server:
        await server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--tokens", type=int, default=16)
    args = parser.parse_args()
    uvloop.run(serve(args.port, args.tokens))


if __name__ == "__main__":
    main()
