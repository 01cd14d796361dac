"""The asyncio network backend under the MCP connection pools (``agent_core.netio``): large
answers, plain and over TLS, read whole through a pool; httpcore's timeouts and errors.
Real sockets on loopback; the TLS certificate is made here (``cryptography``)."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import hashlib
import ipaddress
import socket
import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import httpcore
import httpx
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from agent_core.netio import HIGH_WATER, AsyncioBackend
from agent_core.transport import ConnectionPools

BODY = bytes(range(256)) * (5 * 1024 * 4)  # 5 MiB: far past the backend's read-ahead


def self_signed(tmp_path: Path) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """A server context for 127.0.0.1 and a client context that trusts only it."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=1))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_pem = cert.public_bytes(serialization.Encoding.PEM)
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    directory = tmp_path
    (directory / "cert.pem").write_bytes(cert_pem)
    (directory / "key.pem").write_bytes(key_pem)
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server.load_cert_chain(directory / "cert.pem", directory / "key.pem")
    client = ssl.create_default_context(cadata=cert_pem.decode())
    return server, client


async def _answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Answers each request on the connection with ``BODY`` (keep-alive)."""
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            if not head:
                return
            writer.write(
                b"HTTP/1.1 200 OK\r\ncontent-type: application/octet-stream\r\n"
                + f"content-length: {len(BODY)}\r\n\r\n".encode()
            )
            # In pieces, as a server streams it: the client sees many partial reads.
            for start in range(0, len(BODY), 100_000):
                writer.write(BODY[start : start + 100_000])
                await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()


@contextlib.asynccontextmanager
async def serving(tls: ssl.SSLContext | None = None) -> AsyncIterator[str]:
    server = await asyncio.start_server(_answer, "127.0.0.1", 0, ssl=tls)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"{'https' if tls else 'http'}://127.0.0.1:{port}/mcp"
    finally:
        server.close()


async def fetch_twice(url: str, verify: ssl.SSLContext) -> None:
    pools = ConnectionPools(max_reply_bytes=2 * len(BODY))  # the backend, not the MCP limit
    pool = pools.for_server("big", url, verify)
    assert isinstance(pool._pool._network_backend, AsyncioBackend)  # type: ignore[attr-defined]
    try:
        async with httpx.AsyncClient(transport=pool) as client:
            for _ in range(2):  # the second on the kept-alive connection
                response = await client.get(url)
                assert response.status_code == 200
                assert len(response.content) == len(BODY)
                assert hashlib.sha256(response.content).digest() == hashlib.sha256(BODY).digest()
    finally:
        await pools.aclose()


async def test_a_large_plain_answer_is_read_whole() -> None:
    async with serving() as url:
        await fetch_twice(url, ssl.create_default_context())


async def test_a_large_answer_over_tls_is_read_whole(tmp_path: Path) -> None:
    server, client = self_signed(tmp_path)
    async with serving(server) as url:
        await fetch_twice(url, client)


async def test_tls_to_an_untrusted_server_is_a_connect_error(tmp_path: Path) -> None:
    server, _ = self_signed(tmp_path)
    async with serving(server) as url:
        with pytest.raises(httpx.ConnectError):
            await fetch_twice(url, ssl.create_default_context())


async def test_reads_honour_max_bytes_and_pause_a_fast_sender(tmp_path: Path) -> None:
    server, client = self_signed(tmp_path)
    async with serving(server) as url:
        port = int(url.split(":")[2].split("/")[0])
        stream = await AsyncioBackend().connect_tcp("127.0.0.1", port, timeout=5)
        stream = await stream.start_tls(client, server_hostname="127.0.0.1", timeout=5)
        assert stream.get_extra_info("ssl_object") is not None
        await stream.write(b"GET /mcp HTTP/1.1\r\nhost: x\r\n\r\n", timeout=5)
        await asyncio.sleep(0.3)  # the server sends faster than this client reads
        connection = stream._connection  # type: ignore[attr-defined]
        assert len(connection.buffer) < HIGH_WATER + 256 * 1024
        received = b""
        while len(received) < len(BODY):
            chunk = await stream.read(1000, timeout=5)
            assert 0 < len(chunk) <= 1000
            received += chunk
        assert BODY in received
        await stream.aclose()


async def test_a_silent_server_is_a_read_timeout() -> None:
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()
        writer.close()

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    stream = await AsyncioBackend().connect_tcp("127.0.0.1", port, timeout=5)
    try:
        await stream.write(b"GET / HTTP/1.1\r\n\r\n", timeout=5)
        with pytest.raises(httpcore.ReadTimeout):
            await stream.read(65536, timeout=0.1)
        assert not stream.get_extra_info("is_readable")
    finally:
        await stream.aclose()
        server.close()


async def test_a_closed_connection_reads_empty_and_is_readable() -> None:
    async def closing(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.close()

    server = await asyncio.start_server(closing, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    stream = await AsyncioBackend().connect_tcp("127.0.0.1", port, timeout=5)
    try:
        assert await stream.read(65536, timeout=5) == b""
        # An idle pooled connection the server closed is not reused (httpcore asks this).
        assert stream.get_extra_info("is_readable")
    finally:
        await stream.aclose()
        server.close()


async def test_connecting_to_no_listener_is_a_connect_error() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(httpcore.ConnectError):
        await AsyncioBackend().connect_tcp("127.0.0.1", port, timeout=5)


async def test_a_connect_that_hangs_is_a_connect_timeout() -> None:
    # A listener whose backlog is full drops further SYNs: the next connect hangs.
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    filling: list[socket.socket] = []
    try:
        for _ in range(8):
            s = socket.socket()
            s.setblocking(False)
            with contextlib.suppress(BlockingIOError):
                s.connect(("127.0.0.1", port))
            filling.append(s)
        with pytest.raises(httpcore.ConnectTimeout):
            await AsyncioBackend().connect_tcp("127.0.0.1", port, timeout=0.2)
    finally:
        for s in filling:
            s.close()
        listener.close()
