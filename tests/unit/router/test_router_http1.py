"""The arms' HTTP client (``router.http1`` + ``router.upstream``) against scripted servers.

Each test runs a real TCP server on loopback that answers with exact bytes, so framing,
keep-alive, pool limits and every way a connection can fail are seen as the router sees
them on the wire.
"""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import ssl
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from abserve.router.http1 import AnswerBroken, ArmTransportError, ConnectFailed
from abserve.router.settings import ArmSettings, Deadlines, PoolLimits
from abserve.router.upstream import ArmClient, UpstreamError, error_class

pytestmark = pytest.mark.server  # each test talks to a server listening on a port

OK_JSON = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}"


class Scripted:
    """A loopback server that answers each request head with ``answer(head, writer)``."""

    def __init__(self, answer: Callable[[bytes, asyncio.StreamWriter], object]) -> None:
        self.answer, self.connections, self.heads = answer, 0, list[bytes]()
        self.port = 0
        self.handlers: set[asyncio.Task[None]] = set()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self.handlers.add(asyncio.current_task())  # type: ignore[arg-type]
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                self.heads.append(head)
                length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                               if line.lower().startswith(b"content-length:")), 0)
                await reader.readexactly(length)
                result = self.answer(head, writer)
                if asyncio.iscoroutine(result):
                    await result
                await writer.drain()
                if writer.is_closing():
                    return
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()


@asynccontextmanager
async def serving(answer: Callable[[bytes, asyncio.StreamWriter], object]
                  ) -> AsyncIterator[Scripted]:
    scripted = Scripted(answer)
    server = await asyncio.start_server(scripted._serve, "127.0.0.1", 0)
    scripted.port = server.sockets[0].getsockname()[1]
    async with server:
        yield scripted
        if scripted.handlers:  # the client closed its connections: let them see it
            await asyncio.wait(scripted.handlers, timeout=1)


def client(port: int, *, path: str = "", pool: PoolLimits | None = None,
           connect_s: float = 5.0, api_key: str | None = None) -> ArmClient:
    arm = ArmSettings(url=f"http://127.0.0.1:{port}{path}", api_key=api_key,
                      deadlines=Deadlines(connect_s=connect_s))
    return ArmClient(arm, pool or PoolLimits())


def write(data: bytes) -> Callable[[bytes, asyncio.StreamWriter], None]:
    return lambda head, writer: writer.write(data)


async def test_keeps_the_connection_alive_and_sends_the_head_it_should() -> None:
    async with serving(write(OK_JSON)) as server, client(
            server.port, path="/prefix", api_key="arm-secret") as arm:
        for _ in range(3):
            answer = await arm.post("/v1/completions", b'{"a": 1}')
            assert (answer.status_code, answer.content) == (200, b"{}")
        assert server.connections == 1
        head = server.heads[0].decode()
        assert head.startswith("POST /prefix/v1/completions HTTP/1.1\r\n")
        for line in (f"host: 127.0.0.1:{server.port}", "content-length: 8",
                     "content-type: application/json", "authorization: Bearer arm-secret"):
            assert line in head.split("\r\n")
        assert "accept-encoding" not in head.lower()


def in_two(first: bytes, then: bytes, pause_s: float = 0.05
           ) -> Callable[[bytes, asyncio.StreamWriter], Coroutine[None, None, None]]:
    """An answer sent in two writes ``pause_s`` apart."""
    async def answer(head: bytes, writer: asyncio.StreamWriter) -> None:
        writer.write(first)
        await writer.drain()
        await asyncio.sleep(pause_s)
        writer.write(then)
    return answer


async def test_reads_a_chunked_stream_as_it_arrives() -> None:
    answer = in_two(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nfirst\r\n",
                    b"6\r\nsecond\r\n0\r\n\r\n")
    async with serving(answer) as server, client(server.port) as arm:
        async with arm.open("POST", "/x", b"{}") as response:
            pieces = [piece async for piece in response.iter_any()]
        assert pieces == [b"first", b"second"]
        await arm.get("/x")
        assert server.connections == 1


async def test_a_body_without_framing_ends_with_the_connection() -> None:
    async def answer(head: bytes, writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\n\r\nuntil the end")
        await writer.drain()
        writer.close()

    async with serving(answer) as server, client(server.port) as arm:
        answer_ = await arm.get("/x")
        assert (answer_.content, answer_.content_type) == (b"until the end", "text/plain")
        await arm.get("/x")
        assert server.connections == 2  # not reused: the server closed it


@pytest.mark.parametrize(("sent", "expected"), [
    (b"", ConnectFailed),  # closed before answering
    (b"garbage\r\n\r\n", ConnectFailed),  # not HTTP
    (b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nshort", AnswerBroken),
    (b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nfirst\r\nzz\r\n", AnswerBroken),
])
async def test_each_way_a_connection_fails_is_classified(
        sent: bytes, expected: type[ArmTransportError]) -> None:
    def answer(head: bytes, writer: asyncio.StreamWriter) -> None:
        writer.write(sent)
        writer.close()

    async with serving(answer) as server, client(server.port) as arm:
        with pytest.raises(expected) as caught:
            async with arm.open("POST", "/x", b"{}") as response:
                await response.read()
        assert error_class(caught.value, answered=expected is AnswerBroken) == (
            "truncated" if expected is AnswerBroken else "connect")
        with pytest.raises(UpstreamError):
            await arm.get("/x")


async def test_a_refused_connection_fails_to_connect() -> None:
    async with serving(write(OK_JSON)) as server:
        port = server.port
    async with client(port) as arm:
        with pytest.raises(ConnectFailed, match="ConnectionRefusedError"):
            async with arm.open("GET", "/health"):
                pass


async def test_the_pool_limit_holds_and_its_wait_counts_as_connecting() -> None:
    release = asyncio.Event()

    async def answer(head: bytes, writer: asyncio.StreamWriter) -> None:
        await release.wait()
        writer.write(OK_JSON)

    pool = PoolLimits(max_connections=1)
    async with serving(answer) as server, client(server.port, pool=pool, connect_s=0.2) as arm:
        first = asyncio.create_task(arm.get("/slow"))
        await asyncio.sleep(0.05)
        with pytest.raises(ConnectFailed, match="connect timeout"):
            async with arm.open("GET", "/waits"):
                pass
        release.set()
        assert (await first).status_code == 200
        assert (await arm.get("/after")).status_code == 200  # the slot came back
        assert server.connections == 1


async def test_an_answer_left_unread_closes_its_connection() -> None:
    answer = in_two(b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\n", b"hello", 0.1)
    async with serving(answer) as server, client(server.port) as arm:
        async with arm.open("GET", "/x") as response:
            assert response.status == 200  # body not read
        assert (await arm.get("/x")).content == b"hello"
        assert server.connections == 2


async def test_connection_close_from_the_server_is_honoured() -> None:
    async with serving(write(b"HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 2\r\n"
                             b"\r\n{}")) as server, client(server.port) as arm:
        await arm.get("/x")
        await arm.get("/x")
        assert server.connections == 2


async def test_idle_connections_expire() -> None:
    pool = PoolLimits(keepalive_expiry_s=0.05)
    async with serving(write(OK_JSON)) as server, client(server.port, pool=pool) as arm:
        await arm.get("/x")
        await asyncio.sleep(0.1)
        await arm.get("/x")
        assert server.connections == 2


def self_signed(tmp_path: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 (as its own CA) and its key, as PEM files."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "arm.test")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=1))
            .not_valid_after(now + datetime.timedelta(hours=1))
            .add_extension(x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    cert_path, key_path = tmp_path / "arm.pem", tmp_path / "arm.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_path, key_path


async def test_an_https_arm_is_verified_against_the_trusted_certificates(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cert, key = self_signed(tmp_path)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    scripted = Scripted(write(OK_JSON))
    server = await asyncio.start_server(scripted._serve, "127.0.0.1", 0, ssl=context)
    port = server.sockets[0].getsockname()[1]
    arm = ArmSettings(url=f"https://127.0.0.1:{port}")
    async with server:
        async with ArmClient(arm, PoolLimits()) as untrusting:
            with pytest.raises(UpstreamError, match="SSLCertVerificationError"):
                await untrusting.get("/health")
        monkeypatch.setenv("SSL_CERT_FILE", str(cert))  # as an operator trusts a private CA
        async with ArmClient(arm, PoolLimits()) as trusting:
            for _ in range(2):
                assert (await trusting.get("/health")).content == b"{}"
        assert scripted.connections == 1  # one kept alive (the refused handshake never served)
        if scripted.handlers:
            await asyncio.wait(scripted.handlers, timeout=1)
