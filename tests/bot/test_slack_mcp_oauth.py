"""An MCP server in ``auth: oauth`` mode through ``opsbot slack`` as deployed (issue 19).

The docs reference server here trusts only panva's certified ``oidc-provider`` (node), not
the company IdP: opsbot must connect each user to it with the MCP authorization spec. Alice,
linked to her company account, asks for a runbook → a *Connect docs* button only she sees →
she signs in at the server's authorization server → ``/oauth/mcp/callback`` on the Slack
app → the prompt says "Connected to docs" → she asks again and the tool runs with her own
token for that server. A capturing proxy in front of the server shows that it never receives
a token exchanged at the company IdP (those go to the ticketing server only).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import httpx
import jwt
import pytest
from pydantic import SecretStr

from infra.serving import bind_socket, socket_url
from infra.settings import BrokerSettings, McpOAuthClient, McpServerSettings
from infra.tls import shared_ssl_context
from mcp_servers import ReferenceServers
from mcp_servers.app import AuthConfig
from mcp_servers.docs.seed import seed_docs
from mcp_servers.docs.server import build_docs
from mcp_servers.docs.store import DocStore
from mcp_servers.runner import serve_server
from testing.identity import RunningIdp
from testing.slack import (
    FakeSlack,
    SlackSender,
    block_action,
    mention,
)
from testing.third_party_mcp import Capture, capture_proxy
from tests.bot.test_slack_events import _texts
from tests.bot.test_slack_full_stack import _link_from_slack
from tests.fixtures.full_stack import LINK_CALLBACK_URL, full_stack_settings, serving_slack
from tests.fixtures.oidc_provider import CLIENT_ID, CLIENT_SECRET, node, node_provider, sign_in

__all__ = ["node"]  # a fixture, imported for pytest


@pytest.fixture
def mcp_trusted_issuer(dev_idp: RunningIdp) -> tuple[str, str | None]:
    return dev_idp.issuer, dev_idp.jwks_url


async def _ephemerals(fake: FakeSlack, user: str, count: int) -> list[dict[str, Any]]:
    return await fake.wait_for(
        "chat.postEphemeral", count, where=lambda p: p["user"] == user, wait=60
    )


@pytest.fixture
async def stack(
    node: str,
    fake_slack: FakeSlack,
    dev_idp: RunningIdp,
    reference_servers: ReferenceServers,
    sqlite_url: str,
    tmp_path: Path,
) -> AsyncIterator[tuple[str, str, Capture]]:
    """The app's URL, the oauth authorization server's issuer, and what the docs server got."""
    tickets = reference_servers.ticketing
    dev_idp.provider.set_audience(tickets.name, tickets.audience)
    app_sock = bind_socket("127.0.0.1", 0)
    callback = f"{socket_url(app_sock)}/oauth/mcp/callback"
    docs_sock = bind_socket("127.0.0.1", 0)
    async with (
        capture_proxy(f"{socket_url(docs_sock)}/mcp") as (docs_url, capture),
        node_provider(node, callback, resource={"url": docs_url, "scope": "docs:read"}) as issuer,
    ):
        store = await DocStore.open(base_url="https://docs.example")
        await store.seed(seed_docs())
        # The server's audience is the URL opsbot uses (the proxy's), as a deployment
        # behind a reverse proxy names its public URL.
        docs = build_docs(store, AuthConfig(issuer=issuer, audience=docs_url))
        docs_server = McpServerSettings(
            name="docs",
            url=docs_url,
            auth="oauth",
            oauth=McpOAuthClient(
                client_id=CLIENT_ID,
                client_secret=SecretStr(CLIENT_SECRET),
                scopes=["openid", "offline_access", "docs:read"],
            ),
        )
        settings = full_stack_settings(
            fake_slack,
            dev_idp,
            [
                McpServerSettings(name=tickets.name, url=tickets.url, audience=tickets.audience),
                docs_server,
            ],
            sqlite_url,
            tmp_path,
            broker=BrokerSettings(
                link_callback_url=LINK_CALLBACK_URL, mcp_oauth_callback_url=callback
            ),
        )
        try:
            async with serve_server(docs, docs_sock), serving_slack(settings, sock=app_sock) as url:
                yield url, issuer, capture
        finally:
            await store.close()


async def test_an_unconnected_user_connects_an_oauth_server_from_slack_and_asks_again(
    stack: tuple[str, str, Capture], fake_slack: FakeSlack, dev_idp: RunningIdp
) -> None:
    app_url, issuer, capture = stack
    callback = f"{app_url}/oauth/mcp/callback"
    async with (
        aiohttp.ClientSession() as session,
        httpx.AsyncClient(verify=shared_ssl_context()) as browser,
    ):
        sender = SlackSender(app_url, session=session)
        await _link_from_slack(sender, app_url, "U0ALICE", "alice", fake_slack)
        before = len(fake_slack.calls_to("chat.postEphemeral"))

        await sender.post_event(mention("U0ALICE", "search runbooks incident severity", ts="8.1"))
        prompt = (await _ephemerals(fake_slack, "U0ALICE", before + 1))[-1]
        assert prompt["channel"] == "C0GENERAL"
        [button] = prompt["blocks"][1]["elements"]
        assert (button["action_id"], button["value"]) == ("connect_server", "docs")
        assert button["text"]["text"] == "Connect docs"
        # Nobody else was shown the link: it is bound to alice.
        public = json.dumps(fake_slack.calls_to("chat.postMessage"))
        public += json.dumps(fake_slack.calls_to("chat.update"))
        assert button["url"] not in public

        # The click tells the app where the prompt is; the browser opens the button's URL.
        prompt_url = fake_slack.response_url
        click = block_action("U0ALICE", "connect_server", "docs", channel="C0GENERAL")
        status, _ = await sender.post_interaction({**click, "response_url": prompt_url})
        assert status == 200
        page = await sign_in(browser, button["url"], "carol", callback)
        assert page.status_code == 200, page.text
        assert "opsbot can now use docs for you" in page.text
        replaced = await fake_slack.wait_for(
            "response_url", where=lambda p: "Connected to" in str(p.get("text")), wait=30
        )
        assert replaced[-1]["replace_original"] is True
        assert "docs" in replaced[-1]["text"]

        replayed = await browser.get(page.url)  # the same state and code again
        assert replayed.status_code == 400
        assert "already used" in replayed.text

        await sender.post_event(mention("U0ALICE", "search runbooks incident severity", ts="8.2"))
        answer = await fake_slack.wait_for(
            "chat.update", where=lambda p: "incident-severity" in _texts(p["blocks"]), wait=60
        )
        assert "Connect" not in _texts(answer[-1]["blocks"])
        # An exchanged token exists for alice (ticketing); it never reaches docs.
        await sender.post_event(mention("U0ALICE", "show ticket PAY-101", ts="8.3"))
        await fake_slack.wait_for(
            "chat.update", where=lambda p: "PAY-101" in _texts(p["blocks"]), wait=60
        )

    bearers = [
        h["authorization"].removeprefix("Bearer ") for h in capture.headers if "authorization" in h
    ]
    assert bearers, "opsbot never called the docs server with a token"
    assert "tools/call" in capture.methods
    for token in bearers:
        claims = jwt.decode(token, options={"verify_signature": False})
        assert claims["iss"] == issuer  # the server's own authorization server
        assert claims["iss"] != dev_idp.issuer
        assert claims["sub"] == "carol"  # her account there, not opsbot's service
        assert "act" not in claims  # not an RFC 8693 exchanged token
