"""``opsbot dev`` takes your servers (issue 19): the servers in ``OPSBOT_MCP_SERVERS`` run
beside the sandbox's reference servers instead of replacing them."""

from __future__ import annotations

import logging
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import ValidationError

from infra.settings import McpServerSettings, SandboxSettings, Settings
from sandbox import bind_ports, open_sandbox
from sandbox.stack import sandbox_settings

ALL_ZERO = SandboxSettings(
    port=0, app_port=0, idp_port=0, ticketing_port=0, docs_port=0, database_port=0
)
MINE = McpServerSettings(name="grafana", url="http://127.0.0.1:9/mcp", audience="grafana-api")


@pytest.fixture
def socks() -> Iterator[dict[str, socket.socket]]:
    bound = bind_ports(ALL_ZERO)
    yield bound
    for sock in bound.values():
        sock.close()


def settings_with(tmp_path: Path, servers: list[McpServerSettings]) -> Settings:
    return Settings(  # type: ignore[call-arg]
        _env_file=None, data_dir=tmp_path, sandbox=ALL_ZERO, mcp_servers=servers
    )


def test_configured_servers_join_the_reference_servers(
    tmp_path: Path, socks: dict[str, socket.socket]
) -> None:
    derived = sandbox_settings(settings_with(tmp_path, [MINE]), socks, tmp_path)
    names = [s.name for s in derived.mcp_servers]
    assert names == ["ticketing", "docs", "database", "grafana"]
    assert derived.mcp_servers[-1] == MINE
    port = socks["ticketing_port"].getsockname()[1]
    assert derived.mcp_servers[0].url == f"http://127.0.0.1:{port}/mcp"


def test_the_default_configuration_gives_just_the_reference_servers(
    tmp_path: Path, socks: dict[str, socket.socket], caplog: pytest.LogCaptureFixture
) -> None:
    settings = Settings(_env_file=None, data_dir=tmp_path, sandbox=ALL_ZERO)  # type: ignore[call-arg]
    with caplog.at_level(logging.WARNING, logger="sandbox.stack"):
        derived = sandbox_settings(settings, socks, tmp_path)
    assert [s.name for s in derived.mcp_servers] == ["ticketing", "docs", "database"]
    assert not caplog.records


def test_a_configured_server_with_a_reference_name_is_replaced_with_a_warning(
    tmp_path: Path, socks: dict[str, socket.socket], caplog: pytest.LogCaptureFixture
) -> None:
    theirs = McpServerSettings(name="ticketing", url="https://tickets.corp/mcp", audience="t")
    with caplog.at_level(logging.WARNING, logger="sandbox.stack"):
        derived = sandbox_settings(settings_with(tmp_path, [theirs, MINE]), socks, tmp_path)
    assert [s.name for s in derived.mcp_servers] == ["ticketing", "docs", "database", "grafana"]
    assert derived.mcp_servers[0].url != theirs.url
    assert [r.getMessage() for r in caplog.records] == [
        "the sandbox runs its own 'ticketing' server: the configured one "
        "(https://tickets.corp/mcp) is not used"
    ]


def test_a_server_whose_tools_could_collide_with_a_reference_server_is_refused() -> None:
    # "docs_search" + "x" and "docs" + "search_x" would be one tool name: no server name has
    # a "_" (one named as a reference server is replaced by the sandbox's, with a warning).
    with pytest.raises(ValidationError, match="must be ASCII letters and digits"):
        McpServerSettings(name="docs_search", url="http://127.0.0.1:9/mcp", audience="d")


async def test_the_running_sandbox_lists_your_server(tmp_path: Path) -> None:
    async with open_sandbox(settings_with(tmp_path, [MINE])) as running:
        assert running.urls.mcp["grafana"] == MINE.url
        assert set(running.urls.mcp) == {"ticketing", "docs", "database", "grafana"}
        assert [s.name for s in running.settings.mcp_servers][-1] == "grafana"
