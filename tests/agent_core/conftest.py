"""Agent-core tests run end to end: dev IdP, reference servers trusting it, a real broker."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from agent_core.netio import AsyncioBackend
from mcp_servers import ReferenceServers
from testing.agent import AgentEnv, FaultPlan, fake_mcp_server, open_agent_env
from testing.identity import RunningIdp


@pytest.fixture
async def fake() -> AsyncIterator[tuple[str, FaultPlan]]:
    """The fault-injecting FastMCP server ``fake`` (``testing.agent``): its URL and plan."""
    async with fake_mcp_server() as server:
        yield server


@pytest.fixture
def pool_connects(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The ports the MCP connection pools connect to from now on (their backend is
    ``agent_core.netio``'s, not anyio's)."""
    connects: list[int] = []
    connect_tcp = AsyncioBackend.connect_tcp

    async def counting_connect(self: AsyncioBackend, host: str, port: int, **kw: Any) -> Any:
        connects.append(port)
        return await connect_tcp(self, host, port, **kw)

    monkeypatch.setattr(AsyncioBackend, "connect_tcp", counting_connect)
    return connects


@pytest.fixture
def mcp_trusted_issuer(dev_idp: RunningIdp) -> tuple[str, str | None]:
    """The reference servers trust the dev IdP here (overrides testing.mcp)."""
    return dev_idp.issuer, dev_idp.jwks_url


@pytest.fixture
async def agent_env(
    dev_idp: RunningIdp, reference_servers: ReferenceServers
) -> AsyncIterator[AgentEnv]:
    async with open_agent_env(dev_idp, reference_servers) as env:
        yield env
