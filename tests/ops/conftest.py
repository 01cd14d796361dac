"""The app as deployed (``serve_slack`` from Settings, like tests/bot/test_slack_full_stack.py)
against the dev IdP, the reference MCP servers, the fake Slack — plus a fourth MCP server,
``search``, that a test can stop, and an optional OTLP endpoint."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import httpx
import pytest
from mcp.server.fastmcp import FastMCP
from prometheus_client.parser import text_string_to_metric_families

from infra.serving import bind_socket, serve_asgi, socket_url
from infra.settings import (
    McpServerSettings,
    ObservabilitySettings,
)
from infra.tls import shared_ssl_context
from mcp_servers import ReferenceServers
from testing.identity import RunningIdp, sign_in_at_login_page
from testing.slack import FakeSlack, SlackSender
from tests.fixtures.full_stack import full_stack_settings, reference_mcp, serving_slack

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def parse_metrics(text: str) -> Samples:
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            samples[(s.name, frozenset(s.labels.items()))] = s.value
    return samples


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def delta(before: Samples, after: Samples, name: str, **labels: str) -> float:
    return value(after, name, **labels) - value(before, name, **labels)


@dataclass
class OpsApp:
    url: str
    sender: SlackSender
    fake_slack: FakeSlack
    servers: ReferenceServers
    stop_search: Callable[[], Awaitable[None]]
    stop_app: Callable[[], Awaitable[None]]

    async def scrape(self) -> Samples:
        async with httpx.AsyncClient(verify=shared_ssl_context()) as http:
            response = await http.get(f"{self.url}/metrics")
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/plain")
        return parse_metrics(response.text)

    async def link(self, user: str, username: str) -> None:
        """``/ops link`` → the IdP's login page → ``/oauth/callback``."""
        status, body = await self.sender.post_command("link", user=user)
        assert status == 200
        login_url = json.loads(body)["blocks"][1]["elements"][0]["url"]
        async with httpx.AsyncClient(verify=shared_ssl_context()) as http:
            reply = await sign_in_at_login_page(http, login_url, username)
            page = await http.get(f"{self.url}/oauth/callback", params=reply)
        assert page.status_code == 200, page.text

    async def command(self, text: str, user: str) -> str:
        status, body = await self.sender.post_command(text, user=user)
        assert status == 200, body
        return str(json.loads(body)["text"]) if body.startswith("{") else body


@pytest.fixture
def mcp_trusted_issuer(dev_idp: RunningIdp) -> tuple[str, str | None]:
    return dev_idp.issuer, dev_idp.jwks_url


@pytest.fixture
def otlp_endpoint() -> str | None:
    """Override to export traces (an OTLP/HTTP traces URL)."""
    return None


@pytest.fixture
async def ops_app(
    fake_slack: FakeSlack,
    dev_idp: RunningIdp,
    reference_servers: ReferenceServers,
    sqlite_url: str,
    tmp_path: Path,
    otlp_endpoint: str | None,
) -> AsyncIterator[OpsApp]:
    search = FastMCP("search", stateless_http=True)

    @search.tool()
    def find(text: str) -> str:
        """Search everything (a stand-in server that the tests stop)."""
        return text

    search_sock = bind_socket("127.0.0.1", 0)
    search_url = f"{socket_url(search_sock)}/mcp"
    search_stack = contextlib.AsyncExitStack()
    await search_stack.enter_async_context(serve_asgi(search.streamable_http_app(), search_sock))

    mcp = reference_mcp(dev_idp, reference_servers)
    mcp.append(McpServerSettings(name="search", url=search_url, audience=search_url))
    settings = full_stack_settings(
        fake_slack,
        dev_idp,
        mcp,
        sqlite_url,
        tmp_path,
        observability=ObservabilitySettings(otlp_endpoint=otlp_endpoint),
    )
    # The tests may stop the app early; closing the stack again is then a no-op.
    app_stack = contextlib.AsyncExitStack()
    try:
        url = await app_stack.enter_async_context(serving_slack(settings))
        async with aiohttp.ClientSession() as session:
            yield OpsApp(
                url,
                SlackSender(url, session=session),
                fake_slack,
                reference_servers,
                search_stack.aclose,
                app_stack.aclose,
            )
    finally:
        await app_stack.aclose()
        await search_stack.aclose()
