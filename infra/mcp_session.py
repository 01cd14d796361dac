"""One MCP client session opened the SDK's way (its HTTP client's timeouts, opsbot's shared
TLS context), for a one-off call outside an agent run: the audit reconciler's change-log
read, tests and benches. Agent runs open theirs in ``agent_core.sessions``."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import httpx
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import MCP_DEFAULT_SSE_READ_TIMEOUT, MCP_DEFAULT_TIMEOUT

from infra.tls import shared_ssl_context


@contextlib.asynccontextmanager
async def mcp_session(url: str, token: str | None) -> AsyncIterator[ClientSession]:
    """An initialised session to ``url``, with ``token`` as its bearer when given."""
    headers = {"Authorization": f"Bearer {token}"} if token else None
    async with (
        httpx.AsyncClient(
            headers=headers,
            # The SDK's own client (``create_mcp_http_client``) with the shared TLS context.
            timeout=httpx.Timeout(MCP_DEFAULT_TIMEOUT, read=MCP_DEFAULT_SSE_READ_TIMEOUT),
            verify=shared_ssl_context(),
        ) as http,
        streamable_http_client(url, http_client=http) as (read, write, _),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session
