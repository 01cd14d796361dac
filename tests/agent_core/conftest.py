"""Agent-core tests run end to end: dev IdP, reference servers trusting it, a real broker."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from mcp_servers import ReferenceServers
from testing.agent import AgentEnv, open_agent_env
from testing.identity import RunningIdp


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
