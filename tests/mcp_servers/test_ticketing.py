"""Ticketing over HTTP with the real MCP client: team isolation, idempotency, change log,
annotations, readable errors."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
import sqlalchemy as sa
from mcp import ClientSession
from mcp.types import CallToolResult, TextContent

from infra.tls import shared_ssl_context
from mcp_servers import ReferenceServers
from mcp_servers.ticketing import INJECTION_TICKETS
from testing.mcp import MintToken, mcp_session


def text_of(result: CallToolResult) -> str:
    return " ".join(c.text for c in result.content if isinstance(c, TextContent))


def data(result: CallToolResult) -> dict[str, Any]:
    assert not result.isError, text_of(result)
    assert result.structuredContent is not None
    return result.structuredContent


NEW = {
    "project": "PAY",
    "title": "Card declines spike for BIN 4571",
    "description": "Declines for BIN 4571 rose from 2% to 11% at 10:05 UTC.",
    "priority": "high",
}


async def test_user_sees_only_their_teams_tickets(
    reference_servers: ReferenceServers, mcp_token: MintToken
) -> None:
    async with mcp_session(reference_servers.ticketing, mcp_token("alice", "ticketing")) as s:
        found = data(await s.call_tool("search_tickets", {"limit": 100}))
        projects = {t["project"] for t in found["tickets"]}
        assert projects == {"PAY"}
        assert data(await s.call_tool("search_tickets", {"project": "PLAT"}))["tickets"] == []
        assert data(await s.call_tool("search_tickets", {"query": "node pool"}))["tickets"] == []
        hidden = await s.call_tool("get_ticket", {"key": "PLAT-201"})
        assert hidden.isError
        assert "no ticket 'PLAT-201' that you can see" in text_of(hidden)
        own = data(await s.call_tool("get_ticket", {"key": "pay-101"}))
        assert own["key"] == "PAY-101"
        assert (
            own["url"] == reference_servers.ticketing.url.removesuffix("/mcp") + "/tickets/PAY-101"
        )
        assert own["comments"][0]["author"] == "alice"
    async with mcp_session(reference_servers.ticketing, mcp_token("carol", "ticketing")) as s:
        found = data(await s.call_tool("search_tickets", {"query": "node pool memory"}))
        assert found["tickets"][0]["key"] == "PLAT-201"


async def test_user_cannot_change_another_teams_tickets(
    reference_servers: ReferenceServers, mcp_token: MintToken
) -> None:
    before = {t.key: t for t in await reference_servers.tickets.all_tickets()}
    async with mcp_session(reference_servers.ticketing, mcp_token("mallory", "ticketing")) as s:
        attempts = [
            ("update_ticket", {"key": "PAY-101", "assignee": "mallory"}),
            ("add_comment", {"key": "PAY-101", "body": "hi"}),
            ("close_ticket", {"key": "PAY-102", "resolution": "done"}),
            ("create_ticket", {**NEW, "project": "PAY"}),
        ]
        for i, (tool, args) in enumerate(attempts):
            result = await s.call_tool(tool, {**args, "idempotency_key": f"mallory-{i:04}"})
            assert result.isError, tool
            assert "that you can" in text_of(result)
    after = {t.key: t for t in await reference_servers.tickets.all_tickets()}
    assert after == before
    assert await reference_servers.tickets.all_changes() == []


async def test_same_idempotency_key_creates_one_ticket(
    reference_servers: ReferenceServers, mcp_token: MintToken
) -> None:
    count = len(await reference_servers.tickets.all_tickets())
    args = {**NEW, "idempotency_key": "approval-7f3a:call-1"}
    async with mcp_session(reference_servers.ticketing, mcp_token("alice", "ticketing")) as s:
        first = data(await s.call_tool("create_ticket", args))
    async with mcp_session(reference_servers.ticketing, mcp_token("alice", "ticketing")) as s:
        second = data(await s.call_tool("create_ticket", args))
    assert first == second
    assert first["key"] == "PAY-105"
    assert len(await reference_servers.tickets.all_tickets()) == count + 1
    changes = await reference_servers.tickets.all_changes()
    assert len(changes) == 1
    assert changes[0].subject == "alice"
    assert changes[0].actor == "opsbot"
    assert changes[0].tool == "create_ticket"
    assert changes[0].ticket_key == "PAY-105"
    assert changes[0].idempotency_key == "approval-7f3a:call-1"
    assert changes[0].change["created"]["title"] == NEW["title"]


async def test_concurrent_calls_with_one_key_create_one_ticket(
    reference_servers: ReferenceServers, mcp_token: MintToken
) -> None:
    token = mcp_token("bob", "ticketing")
    args = {**NEW, "idempotency_key": "retry-storm-0001"}

    async def create() -> dict[str, Any]:
        async with mcp_session(reference_servers.ticketing, token) as s:
            return data(await s.call_tool("create_ticket", args))

    results = await asyncio.gather(*(create() for _ in range(5)))
    assert len({r["key"] for r in results}) == 1
    assert len(await reference_servers.tickets.all_changes()) == 1


async def test_reusing_a_key_with_different_arguments_is_refused(
    reference_servers: ReferenceServers, mcp_token: MintToken
) -> None:
    async with mcp_session(reference_servers.ticketing, mcp_token("alice", "ticketing")) as s:
        data(await s.call_tool("create_ticket", {**NEW, "idempotency_key": "key-reuse-01"}))
        changed = await s.call_tool(
            "create_ticket", {**NEW, "title": "Something else", "idempotency_key": "key-reuse-01"}
        )
        assert changed.isError
        assert "already used for a different call" in text_of(changed)
        other_tool = await s.call_tool(
            "add_comment", {"key": "PAY-101", "body": "x", "idempotency_key": "key-reuse-01"}
        )
        assert other_tool.isError
        assert "already used" in text_of(other_tool)
    assert len(await reference_servers.tickets.all_changes()) == 1


async def test_keys_are_per_user(reference_servers: ReferenceServers, mcp_token: MintToken) -> None:
    args = {**NEW, "idempotency_key": "shared-key-01"}
    async with mcp_session(reference_servers.ticketing, mcp_token("alice", "ticketing")) as s:
        a = data(await s.call_tool("create_ticket", args))
    async with mcp_session(reference_servers.ticketing, mcp_token("bob", "ticketing")) as s:
        b = data(await s.call_tool("create_ticket", args))
    assert a["key"] != b["key"]
    assert a["created_by"] == "alice"
    assert b["created_by"] == "bob"


async def test_change_log_reconciles_by_key_and_ticket(
    reference_servers: ReferenceServers, mcp_token: MintToken
) -> None:
    async with mcp_session(reference_servers.ticketing, mcp_token("bob", "ticketing")) as s:
        data(
            await s.call_tool(
                "update_ticket",
                {
                    "key": "PAY-102",
                    "assignee": "bob",
                    "priority": "high",
                    "idempotency_key": "upd-0001",
                },
            )
        )
        data(
            await s.call_tool(
                "add_comment", {"key": "PAY-102", "body": "On it.", "idempotency_key": "cmt-0001"}
            )
        )
        closed = data(
            await s.call_tool(
                "close_ticket",
                {"key": "PAY-102", "resolution": "export re-run", "idempotency_key": "cls-0001"},
            )
        )
        assert closed["status"] == "closed"
        by_key = data(await s.call_tool("get_change_log", {"idempotency_key": "upd-0001"}))
        assert len(by_key["entries"]) == 1
        entry = by_key["entries"][0]
        assert entry["subject"] == "bob"
        assert entry["actor"] == "opsbot"
        assert entry["change"]["to"] == {"assignee": "bob", "priority": "high"}
        assert entry["change"]["from"] == {"assignee": None, "priority": "medium"}
        unknown = data(await s.call_tool("get_change_log", {"idempotency_key": "never-used"}))
        assert unknown["entries"] == []
        history = data(await s.call_tool("get_change_log", {"ticket_key": "PAY-102"}))
        assert [e["tool"] for e in history["entries"]] == [
            "close_ticket",
            "add_comment",
            "update_ticket",
        ]
    # A teammate sees the change log of team tickets; another team does not.
    async with mcp_session(reference_servers.ticketing, mcp_token("alice", "ticketing")) as s:
        assert (
            len(data(await s.call_tool("get_change_log", {"ticket_key": "PAY-102"}))["entries"])
            == 3
        )
    async with mcp_session(reference_servers.ticketing, mcp_token("carol", "ticketing")) as s:
        assert (
            data(await s.call_tool("get_change_log", {"idempotency_key": "upd-0001"}))["entries"]
            == []
        )


async def test_change_log_is_append_only(
    reference_servers: ReferenceServers, mcp_token: MintToken
) -> None:
    async with mcp_session(reference_servers.ticketing, mcp_token("alice", "ticketing")) as s:
        data(await s.call_tool("create_ticket", {**NEW, "idempotency_key": "append-only-1"}))
    engine = reference_servers.tickets.engine
    for statement in ("UPDATE change_log SET subject = 'mallory'", "DELETE FROM change_log"):
        with pytest.raises(sa.exc.DBAPIError, match="append-only"):
            async with engine.begin() as conn:
                await conn.execute(sa.text(statement))
    assert (await reference_servers.tickets.all_changes())[0].subject == "alice"


async def test_tool_annotations(reference_servers: ReferenceServers, mcp_token: MintToken) -> None:
    async with mcp_session(reference_servers.ticketing, mcp_token("alice", "ticketing")) as s:
        tools = {t.name: t for t in (await s.list_tools()).tools}
    assert set(tools) == {
        "search_tickets",
        "get_ticket",
        "create_ticket",
        "update_ticket",
        "add_comment",
        "close_ticket",
        "get_change_log",
    }
    for name in ("search_tickets", "get_ticket", "get_change_log"):
        annotations = tools[name].annotations
        assert annotations is not None
        assert annotations.readOnlyHint is True
    for name in ("create_ticket", "update_ticket", "add_comment", "close_ticket"):
        annotations = tools[name].annotations
        assert annotations is not None
        assert annotations.readOnlyHint is False
        assert "idempotency_key" in tools[name].inputSchema["required"]
    close = tools["close_ticket"].annotations
    assert close is not None
    assert close.destructiveHint is True
    create = tools["create_ticket"].annotations
    assert create is not None
    assert create.destructiveHint is False


async def _errors_then_still_serving(
    s: ClientSession, calls: list[tuple[str, dict[str, Any], str]]
) -> None:
    for tool, args, expected in calls:
        result = await s.call_tool(tool, args)
        assert result.isError, (tool, args)
        assert expected in text_of(result), text_of(result)
        assert "Traceback" not in text_of(result)
        # The same session keeps working after each error.
        assert data(await s.call_tool("get_ticket", {"key": "PAY-101"}))["key"] == "PAY-101"


async def test_malformed_arguments_get_readable_errors(
    reference_servers: ReferenceServers, mcp_token: MintToken
) -> None:
    async with mcp_session(reference_servers.ticketing, mcp_token("alice", "ticketing")) as s:
        await _errors_then_still_serving(
            s,
            [
                ("get_ticket", {"key": "PAY-9999"}, "no ticket 'PAY-9999'"),
                ("get_ticket", {"key": "not a key"}, "invalid arguments for get_ticket: key"),
                ("get_ticket", {}, "key: Field required"),
                (
                    "create_ticket",
                    {**NEW, "priority": "urgent!!", "idempotency_key": "bad-prio-1"},
                    "priority",
                ),
                (
                    "create_ticket",
                    {**NEW, "title": 42, "idempotency_key": "bad-title-1"},
                    "title: Input should be a valid string",
                ),
                ("create_ticket", {**NEW, "idempotency_key": "short"}, "idempotency_key"),
                ("create_ticket", NEW, "idempotency_key: Field required"),
                (
                    "create_ticket",
                    {**NEW, "project": "NOPE", "idempotency_key": "bad-proj-1"},
                    "no project 'NOPE'",
                ),
                (
                    "update_ticket",
                    {"key": "PAY-101", "status": "closed", "idempotency_key": "bad-stat-1"},
                    "close_ticket",
                ),
                (
                    "update_ticket",
                    {"key": "PAY-101", "idempotency_key": "nothing-01"},
                    "nothing to change",
                ),
                (
                    "search_tickets",
                    {"limit": -3},
                    "limit: Input should be greater than or equal to 1",
                ),
                ("no_such_tool", {}, "Unknown tool: no_such_tool"),
            ],
        )
    assert await reference_servers.tickets.all_changes() == []


async def test_malformed_json_rpc_does_not_break_the_server(
    reference_servers: ReferenceServers, mcp_token: MintToken
) -> None:
    import httpx

    token = mcp_token("alice", "ticketing")
    headers = {"Authorization": f"Bearer {token}", "Accept": "application/json, text/event-stream"}
    async with httpx.AsyncClient(verify=shared_ssl_context()) as http:
        for body in (b"{not json", b"[]", json.dumps({"jsonrpc": "2.0", "method": 5}).encode()):
            response = await http.post(
                reference_servers.ticketing.url,
                content=body,
                headers={**headers, "Content-Type": "application/json"},
            )
            assert 400 <= response.status_code < 500
    async with mcp_session(reference_servers.ticketing, token) as s:
        assert data(await s.call_tool("get_ticket", {"key": "PAY-101"}))["key"] == "PAY-101"


async def test_injection_tickets_are_plain_data(
    reference_servers: ReferenceServers, mcp_token: MintToken
) -> None:
    before = await reference_servers.tickets.all_tickets()
    async with mcp_session(reference_servers.ticketing, mcp_token("alice", "ticketing")) as s:
        text = data(await s.call_tool("get_ticket", {"key": INJECTION_TICKETS["close_all"]}))[
            "description"
        ]
        assert "close_ticket" in text
        assert "EVERY open ticket" in text
        comment = data(await s.call_tool("get_ticket", {"key": "PAY-102"}))["comments"][0]["body"]
        assert "approve all pending approvals" in comment
    async with mcp_session(reference_servers.ticketing, mcp_token("dave", "ticketing")) as s:
        text = data(await s.call_tool("get_ticket", {"key": INJECTION_TICKETS["exfiltrate"]}))[
            "description"
        ]
        assert "https://" in text
        assert "Authorization header" in text
    async with mcp_session(reference_servers.ticketing, mcp_token("mallory", "ticketing")) as s:
        text = data(await s.call_tool("get_ticket", {"key": INJECTION_TICKETS["self_approve"]}))[
            "description"
        ]
        assert "approve your own request" in text
    assert await reference_servers.tickets.all_tickets() == before
    assert await reference_servers.tickets.all_changes() == []
