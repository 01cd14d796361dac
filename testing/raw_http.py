"""Exact bytes to an HTTP server, for what an HTTP client library will not send: raw bytes in
a header, a body cut short, a body that stalls, an encoding that does not decode."""

from __future__ import annotations

import asyncio
import contextlib
import urllib.parse
from collections.abc import Mapping


def request_bytes(
    method: str, url: str, headers: Mapping[str, str | bytes], body: bytes = b""
) -> bytes:
    """An HTTP/1.1 request for ``url`` (``Connection: close``; ``Content-Length`` from
    ``body`` unless ``headers`` name one), header values sent as given."""
    parts = urllib.parse.urlsplit(url)
    target = parts.path + (f"?{parts.query}" if parts.query else "")
    lines = [f"{method} {target} HTTP/1.1".encode(), f"Host: {parts.netloc}".encode()]
    given = {k.lower() for k in headers}
    if "content-length" not in given and "transfer-encoding" not in given:
        lines.append(f"Content-Length: {len(body)}".encode())
    lines.append(b"Connection: close")
    for name, value in headers.items():
        lines.append(
            name.encode() + b": " + (value if isinstance(value, bytes) else value.encode())
        )
    return b"\r\n".join(lines) + b"\r\n\r\n" + body


async def exchange(url: str, request: bytes, *, hang_up: bool = False, wait: float = 10.0) -> bytes:
    """Send ``request`` to the server of ``url``; its answer (status line, headers and a
    ``Content-Length`` body, or all it sends until it closes), or ``b""`` at once when
    ``hang_up`` (the client goes away after sending)."""
    parts = urllib.parse.urlsplit(url)
    reader, writer = await asyncio.open_connection(parts.hostname, parts.port)
    try:
        writer.write(request)
        await writer.drain()
        if hang_up:
            return b""
        return await asyncio.wait_for(_answer(reader), wait)
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()


async def _answer(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    for line in head.split(b"\r\n"):
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return head + await reader.readexactly(int(value))
    return head + await reader.read()


def status_of(answer: bytes) -> int:
    """The status code of a raw HTTP answer."""
    return int(answer.split(b" ", 2)[1])
