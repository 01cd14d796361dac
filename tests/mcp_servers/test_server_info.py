"""What a reference server says about itself in ``initialize``.

It named the ``mcp`` package's version as its own, read from the installed metadata at every
``initialize`` (0.3 ms of CPU a session, in opsbot's own process under ``opsbot dev``).
"""

from __future__ import annotations

import importlib.metadata

import httpx
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from mcp_servers import ReferenceServers
from testing.mcp import MintToken


async def test_a_server_names_this_projects_version_without_reading_metadata_per_session(
    reference_servers: ReferenceServers, mcp_token: MintToken, monkeypatch: pytest.MonkeyPatch
) -> None:
    looked_up: list[str] = []
    version = importlib.metadata.version

    def counting(package: str) -> str:
        looked_up.append(package)
        return version(package)

    monkeypatch.setattr(importlib.metadata, "version", counting)
    headers = {"Authorization": f"Bearer {mcp_token('alice', 'ticketing')}"}
    for _ in range(3):
        async with (
            httpx.AsyncClient(headers=headers) as http,
            streamable_http_client(reference_servers.ticketing.url, http_client=http) as (r, w, _),
            ClientSession(r, w) as session,
        ):
            info = (await session.initialize()).serverInfo
            assert (info.name, info.version) == ("ticketing", version("opsbot"))
    assert "mcp" not in looked_up
