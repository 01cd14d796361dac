"""What the servers advertise: only the capabilities they implement, and a description on every
tool and every tool parameter (issue 19), read with the real MCP client over HTTP."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from mcp.shared.exceptions import McpError
from mcp.types import METHOD_NOT_FOUND

from infra.tls import shared_ssl_context
from mcp_servers import AuthConfig, ReferenceServers
from mcp_servers.app import ScopedServer
from mcp_servers.database import build_database
from testing.mcp import MintToken, mcp_session


def undescribed(tool: str, schema: dict[str, Any]) -> list[str]:
    """``tool.param`` for each top-level parameter of ``schema`` without a description."""
    properties = schema.get("properties", {})
    return [
        f"{tool}.{name}"
        for name, prop in properties.items()
        if not str(prop.get("description", "")).strip()
    ]


async def test_every_tool_and_parameter_has_a_description(
    reference_servers: ReferenceServers, mcp_token: MintToken
) -> None:
    missing: list[str] = []
    seen = 0
    for server in reference_servers:
        async with mcp_session(server, mcp_token("alice", server.name)) as session:
            tools = (await session.list_tools()).tools
        assert tools, server.name
        for tool in tools:
            seen += 1
            if not (tool.description or "").strip():
                missing.append(tool.name)
            missing += undescribed(tool.name, tool.inputSchema)
    assert seen >= 12
    assert missing == [], f"tool parameters without a description: {missing}"


async def test_the_optional_query_tool_is_described_too(
    reference_servers: ReferenceServers,
) -> None:
    # run_readonly_query is registered only when enabled (PostgreSQL); listing needs no database.
    auth = AuthConfig(issuer="http://127.0.0.1:1", audience="http://127.0.0.1:1/mcp")
    server = build_database(reference_servers.db, auth, enable_query=True)
    tools = await server.mcp.list_tools()
    assert "run_readonly_query" in {t.name for t in tools}
    assert [p for t in tools for p in undescribed(t.name, t.inputSchema)] == []


async def test_only_implemented_capabilities_are_advertised(
    reference_servers: ReferenceServers, mcp_token: MintToken
) -> None:
    for server in reference_servers:
        async with mcp_session(server, mcp_token("alice", server.name)) as session:
            capabilities = session.get_server_capabilities()
            assert capabilities is not None
            assert capabilities.tools is not None
            assert capabilities.prompts is None, server.name
            assert capabilities.resources is None, server.name
            assert capabilities.completions is None, server.name
            # And the methods of capabilities not claimed are "method not found", not empty.
            for call in (session.list_prompts, session.list_resources):
                with pytest.raises(McpError) as refused:
                    await call()
                assert refused.value.error.code == METHOD_NOT_FOUND


async def test_a_server_that_has_prompts_or_resources_advertises_them() -> None:
    """The pruning follows what is registered: add a resource and a prompt, and they appear."""
    auth = AuthConfig(issuer="http://127.0.0.1:1", audience="http://127.0.0.1:1/mcp")
    server = ScopedServer("extra", auth, "x:read", "test server")

    @server.mcp.resource("test://hello", description="a greeting")
    def hello() -> str:
        return "hello"

    @server.mcp.prompt(description="say hi")
    def greet() -> str:
        return "hi"

    server.asgi_app()
    options = server.mcp._mcp_server.create_initialization_options()
    assert options.capabilities.resources is not None
    assert options.capabilities.prompts is not None
    bare = ScopedServer("bare", auth, "x:read", "test server")
    bare.asgi_app()
    options = bare.mcp._mcp_server.create_initialization_options()
    assert options.capabilities.resources is None
    assert options.capabilities.prompts is None
    assert options.capabilities.tools is not None


async def test_initialize_over_raw_http_lists_only_tools(
    reference_servers: ReferenceServers, mcp_token: MintToken
) -> None:
    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "t", "version": "0"},
        },
    }
    headers = {
        "Authorization": f"Bearer {mcp_token('alice', 'docs')}",
        "Accept": "application/json, text/event-stream",
    }
    async with httpx.AsyncClient(verify=shared_ssl_context()) as http:
        response = await http.post(reference_servers.docs.url, json=initialize, headers=headers)
    assert response.status_code == 200
    capabilities = _one_answer(response)["result"]["capabilities"]
    assert set(capabilities) - {"experimental"} == {"tools"}, capabilities


def _one_answer(response: httpx.Response) -> dict[str, Any]:
    """The JSON-RPC answer of a request, as one JSON body or the data of an event stream."""
    if response.headers.get("content-type", "").startswith("application/json"):
        answer: dict[str, Any] = response.json()
        return answer
    data_line = next(line for line in response.text.splitlines() if line.startswith("data:"))
    answer = json.loads(data_line.removeprefix("data:"))
    return answer


async def test_a_tool_call_is_answered_with_one_json_body(
    reference_servers: ReferenceServers, mcp_token: MintToken
) -> None:
    """No event stream per request: nothing is streamed mid-call, and the stream's tasks and
    framing cost the server (and the client) more CPU than the call (twenty approved writes
    at once queue on the server's loop)."""
    headers = {
        "Authorization": f"Bearer {mcp_token('alice', 'ticketing')}",
        "Accept": "application/json, text/event-stream",
    }
    url = reference_servers.ticketing.url
    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "t", "version": "0"},
        },
    }
    async with httpx.AsyncClient(verify=shared_ssl_context()) as http:
        started = await http.post(url, json=initialize, headers=headers)
        assert started.headers["content-type"].startswith("application/json"), started.headers
        session = {**headers, "Mcp-Session-Id": started.headers["mcp-session-id"]}
        initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        assert (await http.post(url, json=initialized, headers=session)).status_code == 202
        call = {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "tools/call",
            "params": {"name": "get_ticket", "arguments": {"key": "PAY-101"}},
        }
        response = await http.post(url, json=call, headers=session)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("application/json"), response.headers
    assert response.json()["result"]["structuredContent"]["key"] == "PAY-101"
