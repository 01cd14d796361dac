"""Database server on the embedded SQLite backend, over HTTP with the real MCP client."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pydantic
import pytest

from mcp_servers import DatabaseConfig, ReferenceServers
from mcp_servers.database import open_gateway
from testing.mcp import MintToken, mcp_session
from tests.mcp_servers.test_ticketing import data, text_of


async def test_narrow_tools_show_only_the_callers_teams(
    reference_servers: ReferenceServers, mcp_token: MintToken
) -> None:
    async with mcp_session(reference_servers.database, mcp_token("alice", "database")) as s:
        order = data(await s.call_tool("get_order_status", {"order_id": "ORD-10041"}))
        assert order["status"] == "refund_pending"
        assert order["team"] == "payments"
        hidden = await s.call_tool("get_order_status", {"order_id": "ORD-20001"})
        assert hidden.isError
        assert "no order 'ORD-20001' that you can see" in text_of(hidden)
        jobs = data(await s.call_tool("list_failed_jobs", {"since_hours": 24 * 7}))["jobs"]
        assert {j["id"] for j in jobs} == {"JOB-501", "JOB-503"}
        recent = data(await s.call_tool("list_failed_jobs", {"since_hours": 3}))["jobs"]
        assert [j["id"] for j in recent] == ["JOB-503"]
        deploys = data(await s.call_tool("recent_deploys", {"service": "refund-worker"}))
        assert [d["id"] for d in deploys["deploys"]] == ["DEP-9002", "DEP-9001"]
        capped = data(await s.call_tool("recent_deploys", {"limit": 1}))
        assert len(capped["deploys"]) == 1
        assert capped["truncated"] is True
    async with mcp_session(reference_servers.database, mcp_token("carol", "database")) as s:
        jobs = data(await s.call_tool("list_failed_jobs", {"since_hours": 24 * 7}))["jobs"]
        assert {j["team"] for j in jobs} == {"platform"}


async def test_user_without_a_team_sees_nothing(
    reference_servers: ReferenceServers, mcp_token: MintToken
) -> None:
    token = mcp_token("erin", "database", scope="db:read")  # contractors: no team-<x> group
    async with mcp_session(reference_servers.database, token) as s:
        assert data(await s.call_tool("recent_deploys", {}))["deploys"] == []
        assert (await s.call_tool("get_order_status", {"order_id": "ORD-10041"})).isError


async def test_adhoc_query_tool_is_absent_unless_enabled(
    reference_servers: ReferenceServers, mcp_token: MintToken
) -> None:
    async with mcp_session(reference_servers.database, mcp_token("carol", "database")) as s:
        names = {t.name for t in (await s.list_tools()).tools}
        assert names == {"get_order_status", "list_failed_jobs", "recent_deploys"}
        result = await s.call_tool("run_readonly_query", {"sql": "SELECT 1"})
        assert result.isError
    with pytest.raises(pydantic.ValidationError, match="postgres backend"):
        DatabaseConfig(backend="sqlite", enable_query=True)


async def test_bad_arguments_are_readable(
    reference_servers: ReferenceServers, mcp_token: MintToken
) -> None:
    async with mcp_session(reference_servers.database, mcp_token("alice", "database")) as s:
        for tool, args, expected in (
            ("get_order_status", {"order_id": "1; DROP TABLE orders"}, "order_id"),
            ("list_failed_jobs", {"since_hours": 0}, "since_hours"),
            ("list_failed_jobs", {"since_hours": "yesterday"}, "since_hours"),
            ("recent_deploys", {"limit": 10_000}, "limit"),
        ):
            result = await s.call_tool(tool, args)
            assert result.isError
            assert f"invalid arguments for {tool}: {expected}" in text_of(result)
        assert (
            data(await s.call_tool("get_order_status", {"order_id": "ORD-10042"}))["status"]
            == "paid"
        )


async def test_sqlite_connection_is_read_only(tmp_path: Path) -> None:
    async with open_gateway(DatabaseConfig(sqlite_path=tmp_path / "ops.sqlite")) as gateway:
        conn = gateway._conn  # type: ignore[attr-defined]
        for statement in (
            "DELETE FROM orders",
            "INSERT INTO jobs (id) VALUES ('x')",
            "DROP TABLE deploys",
        ):
            with pytest.raises(sqlite3.OperationalError, match=r"readonly|read-only|query_only"):
                await conn.execute(statement)
