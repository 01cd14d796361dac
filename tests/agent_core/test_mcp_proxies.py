"""MCP traffic goes through the proxy settings give (``agent_core.proxies``): HTTP_PROXY for an
http:// server (absolute-form requests), HTTPS_PROXY for an https:// one (a CONNECT tunnel),
the health probe too, and nothing through the proxy when NO_PROXY names the server. A tiny
proxy on loopback records what it carried; the https server is the fake MCP server behind a
TLS front with a certificate made here."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from pydantic import ValidationError

from agent_core import Answer
from agent_core.factory import agent_config
from agent_core.proxies import Proxies, parse_no_proxy
from infra.settings import Settings
from testing.agent import ScriptedChatModel, call, fake_mcp_server
from tests.agent_core.test_mcp_timeouts import echo, make_agent, run
from tests.agent_core.test_netio import self_signed


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except ConnectionError:
        pass
    finally:
        writer.close()


async def _forward(
    first: bytes, reader: asyncio.StreamReader, to: asyncio.StreamWriter, seen: list[str]
) -> None:
    """Client to upstream: each request's target made origin-form, its body passed on."""
    head = first
    try:
        while head:
            line, _, rest = head.partition(b"\r\n")
            method, target, version = line.decode().split(" ")
            seen.append(f"{method} {target}")
            parts = urlsplit(target)
            path = parts.path + (f"?{parts.query}" if parts.query else "")
            to.write(f"{method} {path} {version}\r\n".encode() + rest)
            length = next(
                (
                    int(h.split(b":", 1)[1])
                    for h in rest.split(b"\r\n")
                    if h.lower().startswith(b"content-length:")
                ),
                0,
            )
            if length:
                to.write(await reader.readexactly(length))
            await to.drain()
            head = await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        to.close()


@contextlib.asynccontextmanager
async def tiny_proxy() -> AsyncIterator[tuple[str, list[str]]]:
    """A forward (http://) and CONNECT (https://) proxy; yields its URL and what it saw."""
    seen: list[str] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()
            return
        method, target, _ = head.split(b"\r\n", 1)[0].decode().split(" ")
        if method == "CONNECT":
            seen.append(f"CONNECT {target}")
            host, port = target.rsplit(":", 1)
            up_reader, up_writer = await asyncio.open_connection(host, int(port))
            writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
            await writer.drain()
            await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
            return
        parts = urlsplit(target)
        up_reader, up_writer = await asyncio.open_connection(parts.hostname, parts.port)
        await asyncio.gather(_forward(head, reader, up_writer, seen), _pipe(up_reader, writer))

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}", seen
    finally:
        server.close()


@contextlib.asynccontextmanager
async def tls_front(plain_url: str, tmp_path: Path) -> AsyncIterator[tuple[str, Any]]:
    """The server at ``plain_url`` behind TLS; yields its https URL and a trusting context."""
    server_ctx, client_ctx = self_signed(tmp_path)
    upstream = urlsplit(plain_url)

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(upstream.hostname, upstream.port)
        await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))

    server = await asyncio.start_server(serve, "127.0.0.1", 0, ssl=server_ctx)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"https://127.0.0.1:{port}{upstream.path}", client_ctx
    finally:
        server.close()


async def one_call(url: str, proxies: Proxies) -> None:
    model = ScriptedChatModel(steps=[call("fake_lookup", item="X-1"), echo])
    agent = make_agent(url, model, timeout_s=10, proxies=proxies)
    try:
        result, _ = await run(agent, "look X-1 up")
        assert isinstance(result, Answer)
        assert "X-1" in result.answer, result
    finally:
        await agent.settle()
        await agent.pools.aclose()


async def test_http_proxy_carries_an_http_servers_calls_and_probe() -> None:
    async with fake_mcp_server() as (url, plan), tiny_proxy() as (proxy, seen):
        await one_call(url, Proxies(http=proxy, https="http://127.0.0.1:9"))
        assert plan.calls["lookup"] == 1
    assert f"GET {url}" in seen  # the health probe
    assert f"POST {url}" in seen  # initialize, initialized, the call
    assert f"DELETE {url}" in seen  # the session's end


async def test_https_proxy_tunnels_an_https_servers_calls_and_probe(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with (
        fake_mcp_server() as (plain, plan),
        tls_front(plain, tmp_path) as (url, trusting),
        tiny_proxy() as (proxy, seen),
    ):
        # The pools and the probe trust the test's certificate (they share one context).
        for module in ("agent_core.sessions", "agent_core.health"):
            monkeypatch.setattr(f"{module}.shared_ssl_context", lambda: trusting)
        await one_call(url, Proxies(https=proxy, http="http://127.0.0.1:9"))
        assert plan.calls["lookup"] == 1
    netloc = urlsplit(url).netloc
    # One tunnel for the probe, at least one for the session's pool.
    assert seen.count(f"CONNECT {netloc}") >= 2, seen
    assert all(s == f"CONNECT {netloc}" for s in seen), seen


async def test_no_proxy_keeps_a_server_direct() -> None:
    async with fake_mcp_server() as (url, plan), tiny_proxy() as (proxy, seen):
        await one_call(url, Proxies(http=proxy, https=proxy, no_proxy=("127.0.0.1",)))
        assert plan.calls["lookup"] == 1
    assert seen == []


def test_settings_give_the_agent_its_proxies(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.internal:3128")
    monkeypatch.setenv("HTTP_PROXY", "http://plain.internal:3128")
    monkeypatch.setenv("NO_PROXY", "localhost, .corp.example ,10.0.0.0/8,tickets:8443")
    proxies = agent_config(Settings(_env_file=None)).proxies  # type: ignore[call-arg]
    assert proxies.for_url("https://api.example.com/mcp") == "http://proxy.internal:3128"
    assert proxies.for_url("http://api.example.com/mcp") == "http://plain.internal:3128"
    for direct in (
        "http://localhost:8101/mcp",
        "https://docs.corp.example/mcp",
        "https://corp.example/mcp",
        "http://10.1.2.3/mcp",
        "https://tickets:8443/mcp",
    ):
        assert proxies.for_url(direct) is None, direct
    assert proxies.for_url("https://tickets:443/mcp") == "http://proxy.internal:3128"
    assert proxies.for_url("https://notcorp.example/mcp") == "http://proxy.internal:3128"
    assert Proxies(https="http://p:1", no_proxy=parse_no_proxy("*")).for_url("https://x") is None


@pytest.mark.parametrize(
    "value", ["proxy.internal:3128", "socks5://proxy.internal:1080", "http://", "ftp://p:21"]
)
def test_a_proxy_url_opsbot_cannot_use_stops_start_up(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    """Refused by the settings, naming the variable, instead of failing every MCP call."""
    monkeypatch.setenv("HTTPS_PROXY", value)
    with pytest.raises(ValidationError, match="is not a proxy URL"):
        Settings(_env_file=None)  # type: ignore[call-arg]


def test_an_empty_proxy_variable_means_direct(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "")
    monkeypatch.setenv("HTTP_PROXY", "")
    settings = Settings(_env_file=None)  # type: ignore[call-arg]
    assert settings.https_proxy is None
    assert settings.http_proxy is None
