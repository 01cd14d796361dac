"""Token checks at the servers, over HTTP with the real MCP client.

Each refusal is read from the HTTP response the client got (status and WWW-Authenticate).
"""

from __future__ import annotations

import httpx
import pytest

from infra.tls import shared_ssl_context
from mcp_servers import ReferenceServers
from testing.mcp import MintToken, TestIssuer, http_refusal, mcp_session


def _www(response: httpx.Response) -> str:
    return response.headers.get("www-authenticate", "")


async def test_valid_token_is_accepted_on_every_server(
    reference_servers: ReferenceServers, mcp_token: MintToken
) -> None:
    for server, tool, args in (
        (reference_servers.ticketing, "search_tickets", {}),
        (reference_servers.docs, "search_docs", {"query": "refund"}),
        (reference_servers.database, "recent_deploys", {}),
    ):
        async with mcp_session(server, mcp_token("alice", server.name)) as session:
            result = await session.call_tool(tool, args)
            assert not result.isError, result.content


async def test_no_token_gets_401_with_resource_metadata(
    reference_servers: ReferenceServers,
) -> None:
    for server in reference_servers:
        response = await http_refusal(server, None)
        assert response.status_code == 401
        www = _www(response)
        assert www.startswith("Bearer ")
        assert "resource_metadata=" in www
        assert "/.well-known/oauth-protected-resource/mcp" in www


async def test_token_in_query_string_is_refused(
    reference_servers: ReferenceServers, mcp_token: MintToken
) -> None:
    token = mcp_token("alice", "ticketing")
    url = f"{reference_servers.ticketing.url}?access_token={token}"
    only_query = await http_refusal(url, None)
    assert only_query.status_code == 401
    assert 'error="invalid_request"' in _www(only_query)
    # Also refused when a valid header is sent alongside: the query token is never accepted.
    both = await http_refusal(url, token)
    assert both.status_code == 401
    assert "only in the header" in _www(both)


async def test_wrong_audience_is_refused(
    reference_servers: ReferenceServers, mcp_token: MintToken
) -> None:
    docs_token = mcp_token("alice", "docs")
    response = await http_refusal(reference_servers.ticketing, docs_token)
    assert response.status_code == 401
    assert 'error="invalid_token"' in _www(response)
    assert "audience" in _www(response)


async def test_ticketing_token_cannot_call_docs_or_database(
    reference_servers: ReferenceServers, mcp_token: MintToken
) -> None:
    token = mcp_token("carol", "ticketing")
    for server in (reference_servers.docs, reference_servers.database):
        response = await http_refusal(server, token)
        assert response.status_code == 401
        assert 'error="invalid_token"' in _www(response)


async def test_multi_audience_token_is_refused(
    reference_servers: ReferenceServers, mcp_token: MintToken
) -> None:
    both = [reference_servers.ticketing.audience, reference_servers.docs.audience]
    response = await http_refusal(
        reference_servers.ticketing, mcp_token("alice", "ticketing", aud=both)
    )
    assert response.status_code == 401


async def test_audience_must_match_exactly(
    reference_servers: ReferenceServers, mcp_token: MintToken
) -> None:
    near = reference_servers.ticketing.audience + "/"
    response = await http_refusal(
        reference_servers.ticketing, mcp_token("alice", "ticketing", aud=near)
    )
    assert response.status_code == 401


async def test_expired_token_is_refused(
    reference_servers: ReferenceServers, mcp_token: MintToken
) -> None:
    expired = mcp_token("alice", "ticketing", expires_in=-5)
    response = await http_refusal(reference_servers.ticketing, expired)
    assert response.status_code == 401
    assert 'error="invalid_token"' in _www(response)
    assert "expired" in _www(response)


async def test_wrong_issuer_and_foreign_signature_are_refused(
    reference_servers: ReferenceServers, mcp_token: MintToken, mcp_test_issuer: TestIssuer
) -> None:
    wrong_issuer = mcp_token("alice", "ticketing", iss="http://127.0.0.1:1/evil")
    forged = mcp_token("alice", "ticketing", signing_key=mcp_test_issuer.other_key)
    for token in (wrong_issuer, forged, "not-a-jwt"):
        response = await http_refusal(reference_servers.ticketing, token)
        assert response.status_code == 401
        assert 'error="invalid_token"' in _www(response)


async def test_missing_tool_scope_gets_403_insufficient_scope(
    reference_servers: ReferenceServers, mcp_token: MintToken
) -> None:
    erin = mcp_token("erin", "ticketing")  # contractors: tickets:read only
    response = await http_refusal(
        reference_servers.ticketing,
        erin,
        "create_ticket",
        {"project": "PAY", "title": "x" * 5, "description": "", "idempotency_key": "erin-0001"},
    )
    assert response.status_code == 403
    www = _www(response)
    assert 'error="insufficient_scope"' in www
    assert 'scope="tickets:write"' in www
    assert (await reference_servers.tickets.all_changes()) == []


async def test_token_without_the_servers_base_scope_gets_403(
    reference_servers: ReferenceServers, mcp_token: MintToken
) -> None:
    response = await http_refusal(
        reference_servers.docs, mcp_token("alice", "docs", scope="something:else")
    )
    assert response.status_code == 403
    assert "insufficient_scope" in _www(response)


async def test_read_scope_still_works_after_a_refusal(
    reference_servers: ReferenceServers, mcp_token: MintToken
) -> None:
    erin = mcp_token("erin", "ticketing")
    await http_refusal(reference_servers.ticketing, erin, "close_ticket", {})
    async with mcp_session(reference_servers.ticketing, erin) as session:
        result = await session.call_tool("search_tickets", {})
        assert not result.isError


async def test_protected_resource_metadata(reference_servers: ReferenceServers) -> None:
    server = reference_servers.ticketing
    base = server.url.removesuffix("/mcp")
    async with httpx.AsyncClient(verify=shared_ssl_context()) as http:
        document = (await http.get(f"{base}/.well-known/oauth-protected-resource/mcp")).json()
    assert document["resource"] == server.audience
    assert document["scopes_supported"] == ["tickets:read", "tickets:write"]
    assert document["bearer_methods_supported"] == ["header"]
    assert len(document["authorization_servers"]) == 1


@pytest.mark.parametrize("header", ["Basic YWxpY2U6eA==", "Bearer", "Token abc"])
async def test_malformed_authorization_header_gets_401(
    reference_servers: ReferenceServers, header: str
) -> None:
    async with httpx.AsyncClient(verify=shared_ssl_context()) as http:
        response = await http.post(
            reference_servers.ticketing.url,
            headers={"Authorization": header, "Accept": "application/json, text/event-stream"},
            json={"jsonrpc": "2.0", "id": 1, "method": "ping"},
        )
    assert response.status_code == 401
    assert "resource_metadata=" in response.headers["www-authenticate"]


async def test_a_session_is_bound_to_the_credential_that_opened_it(
    reference_servers: ReferenceServers, mcp_token: MintToken
) -> None:
    url = reference_servers.ticketing.url
    accept = {"Accept": "application/json, text/event-stream"}
    alice = {**accept, "Authorization": f"Bearer {mcp_token('alice', 'ticketing')}"}
    mallory = {**accept, "Authorization": f"Bearer {mcp_token('mallory', 'ticketing')}"}
    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "test", "version": "0"},
        },
    }
    call = {
        "jsonrpc": "2.0",
        "id": 2,
        "method": "tools/call",
        "params": {"name": "get_ticket", "arguments": {"key": "PAY-101"}},
    }
    async with httpx.AsyncClient(verify=shared_ssl_context()) as http:
        opened = await http.post(url, json=initialize, headers=alice)
        assert opened.status_code == 200
        session = {"mcp-session-id": opened.headers["mcp-session-id"]}
        hijack = await http.post(url, json=call, headers={**mallory, **session})
        assert hijack.status_code == 404
        assert "PAY-101" not in hijack.text


async def test_tokens_never_reach_the_logs(
    reference_servers: ReferenceServers, mcp_token: MintToken, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("DEBUG")
    good = mcp_token("alice", "ticketing")
    expired = mcp_token("alice", "ticketing", expires_in=-5)
    wrong = mcp_token("alice", "docs")
    for token in (expired, wrong):
        await http_refusal(reference_servers.ticketing, token)
    await http_refusal(f"{reference_servers.ticketing.url}?access_token={good}", None)
    async with mcp_session(reference_servers.ticketing, good) as session:
        await session.call_tool("get_ticket", {"key": "PLAT-201"})
    # Server-side records only: the client logs its own URL (which is why a token must never
    # go in a query string).
    client = ("httpx", "httpcore", "mcp.client")
    logged = "\n".join(
        record.getMessage() for record in caplog.records if not record.name.startswith(client)
    )
    assert any(r.name.startswith("mcp.server") for r in caplog.records)  # server logs captured
    for token in (good, expired, wrong):
        assert token not in logged
        assert token.split(".")[2] not in logged  # not even the signature part


class SwitchableBearer(httpx.Auth):
    """Sends whatever token is current: a client refreshing its token mid-session."""

    def __init__(self, token: str) -> None:
        self.token = token

    def auth_flow(self, request: httpx.Request):  # type: ignore[no-untyped-def]
        request.headers["Authorization"] = f"Bearer {self.token}"
        yield request


async def test_each_call_is_authorised_with_the_token_it_carries(
    reference_servers: ReferenceServers, mcp_token: MintToken
) -> None:
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    # Same user (the session stays theirs), but the refreshed token carries other groups:
    # the call must be decided by the token it arrived with, not the one that opened the session.
    auth = SwitchableBearer(mcp_token("alice", "ticketing", groups=["team-payments"]))
    async with (
        create_mcp_http_client(auth=auth) as http,
        streamable_http_client(reference_servers.ticketing.url, http_client=http) as (r, w, _),
        ClientSession(r, w) as session,
    ):
        await session.initialize()
        first = await session.call_tool("search_tickets", {"limit": 100})
        assert {t["project"] for t in (first.structuredContent or {})["tickets"]} == {"PAY"}
        auth.token = mcp_token("alice", "ticketing", groups=["team-platform"])
        second = await session.call_tool("search_tickets", {"limit": 100})
        assert {t["project"] for t in (second.structuredContent or {})["tickets"]} == {"PLAT"}


async def test_oversized_body_is_refused_and_the_server_keeps_serving(
    reference_servers: ReferenceServers, mcp_token: MintToken
) -> None:
    token = mcp_token("alice", "ticketing")
    headers = {
        "Authorization": f"Bearer {token}",
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
    }
    async with httpx.AsyncClient(verify=shared_ssl_context()) as http:
        response = await http.post(
            reference_servers.ticketing.url, content=b"x" * 1_100_000, headers=headers
        )
    assert response.status_code == 413
    async with mcp_session(reference_servers.ticketing, token) as session:
        assert not (await session.call_tool("get_ticket", {"key": "PAY-101"})).isError
