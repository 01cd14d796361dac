"""Fixtures for the approvals tests (fakes live in ``approval_fakes``)."""

from __future__ import annotations

import pytest
from approval_fakes import Harness, build_harness


@pytest.fixture
def harness() -> Harness:
    return build_harness()


# --- end to end: dev IdP, reference servers trusting it, a real broker, the real agent ----

from collections.abc import AsyncIterator  # noqa: E402

from mcp_servers import ReferenceServers  # noqa: E402
from testing.agent import AgentEnv, open_agent_env  # noqa: E402
from testing.identity import RunningIdp  # noqa: E402


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
