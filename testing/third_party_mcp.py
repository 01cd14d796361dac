"""Third-party MCP servers from the package registries, and a capturing reverse proxy.

- ``everything_server()``: npm ``@modelcontextprotocol/server-everything`` (pinned) over
  streamable HTTP, run with ``npx``.
- ``time_server()``: PyPI ``mcp-server-time`` (pinned, a stdio server) exposed over
  streamable HTTP by PyPI ``mcp-proxy`` (pinned), both run with ``uvx``.
- ``capture_proxy(upstream)``: forwards every request to ``upstream`` and records what the
  MCP server received (headers, JSON-RPC methods), so a test can show which credential a
  server saw — and that a user's exchanged token never reached it.

Each yields the server's MCP URL; the processes are stopped (their process group) on exit.
``tool_missing()`` names a missing launcher (``npx``/``uvx``) for a skip outside CI.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from infra.serving import bind_socket, serve_asgi
from infra.tls import shared_ssl_context

EVERYTHING = "@modelcontextprotocol/server-everything@2026.8.31"
MCP_PROXY = "mcp-proxy==0.13.0"
MCP_SERVER_TIME = "mcp-server-time==2026.10.19"
_HOP = {"host", "content-length", "transfer-encoding", "connection", "keep-alive"}


def tool_missing(*tools: str) -> str | None:
    """The first of ``tools`` not on PATH, or None."""
    return next((t for t in tools if shutil.which(t) is None), None)


def _free_port() -> int:
    sock = bind_socket()
    port = int(sock.getsockname()[1])
    sock.close()
    return port


@contextlib.asynccontextmanager
async def _process(argv: Sequence[str], port: int, *, ready_s: float = 120) -> AsyncIterator[str]:
    proc = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
        start_new_session=True,  # its own process group: npx/uvx start children
    )
    try:
        deadline = time.monotonic() + ready_s  # the first run may download the package
        while True:
            if proc.returncode is not None:
                raise RuntimeError(f"{argv[0]} exited with {proc.returncode} during start-up")
            try:
                _, writer = await asyncio.open_connection("127.0.0.1", port)
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{' '.join(argv)} did not listen on {port}") from None
                await asyncio.sleep(0.2)
                continue
            writer.close()
            break
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            await asyncio.wait_for(proc.wait(), timeout=5)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            await proc.wait()


@contextlib.asynccontextmanager
async def everything_server() -> AsyncIterator[str]:
    """The reference "everything" server (TypeScript SDK) over streamable HTTP."""
    port = _free_port()
    # ``env`` adds the port to the inherited environment (only settings read ours).
    argv = ["env", f"PORT={port}", "npx", "--yes", EVERYTHING, "streamableHttp"]
    async with _process(argv, port) as url:
        yield url


@contextlib.asynccontextmanager
async def time_server() -> AsyncIterator[str]:
    """The reference "time" server (Python, stdio) behind mcp-proxy's streamable HTTP."""
    port = _free_port()
    argv = [
        "uvx",
        "--from",
        MCP_PROXY,
        "mcp-proxy",
        "--pass-environment",
        "--port",
        str(port),
        "uvx",
        "--",
        "--from",
        MCP_SERVER_TIME,
        "mcp-server-time",
        "--local-timezone",
        "UTC",
    ]
    async with _process(argv, port) as url:
        yield url


@contextlib.asynccontextmanager
async def sse_bridge(legacy_url: str) -> AsyncIterator[str]:
    """A server on MCP's older HTTP+SSE transport (``legacy_url``, its ``/sse`` endpoint)
    made streamable HTTP: one ``mcp-proxy`` in client mode speaks SSE to it and stdio to a
    second one, which serves streamable HTTP (the recipe in docs/mcp-servers.md)."""
    port = _free_port()
    inner = ["uvx", "--", "--from", MCP_PROXY, "mcp-proxy", legacy_url]
    argv = ["uvx", "--from", MCP_PROXY, "mcp-proxy", "--pass-environment", "--port", str(port)]
    async with _process([*argv, *inner], port) as url:
        yield url


@dataclass
class Capture:
    """What the upstream MCP server received through the proxy."""

    headers: list[dict[str, str]] = field(default_factory=list)
    verbs: list[str] = field(default_factory=list)  # the HTTP method of each request
    methods: list[str] = field(default_factory=list)  # JSON-RPC methods posted

    def values(self) -> list[str]:
        return [v for h in self.headers for v in h.values()]


@contextlib.asynccontextmanager
async def capture_proxy(upstream: str) -> AsyncIterator[tuple[str, Capture]]:
    """A reverse proxy on loopback in front of ``upstream`` (an MCP URL); yields its URL."""
    capture = Capture()
    base = upstream.rsplit("/mcp", 1)[0]
    client = httpx.AsyncClient(timeout=httpx.Timeout(30, read=None), verify=shared_ssl_context())

    async def forward(request: Request) -> Response:
        body = await request.body()
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP}
        capture.headers.append(dict(headers))
        capture.verbs.append(request.method)
        with contextlib.suppress(ValueError, AttributeError):
            payload: Any = json.loads(body) if body else None
            if isinstance(payload, dict) and isinstance(payload.get("method"), str):
                capture.methods.append(payload["method"])
        upstream_request = client.build_request(
            request.method, f"{base}{request.url.path}", headers=headers, content=body
        )
        response = await client.send(upstream_request, stream=True)
        out = {k: v for k, v in response.headers.items() if k.lower() not in _HOP}
        return StreamingResponse(
            response.aiter_raw(),
            status_code=response.status_code,
            headers=out,
            background=BackgroundTask(response.aclose),
        )

    app = Starlette(routes=[Route("/{path:path}", forward, methods=["GET", "POST", "DELETE"])])
    sock = bind_socket()
    try:
        async with serve_asgi(app, sock) as url:  # type: ignore[arg-type]
            yield f"{url}/mcp", capture
    finally:
        await client.aclose()
