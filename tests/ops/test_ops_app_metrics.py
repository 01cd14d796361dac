"""Done-when: a run with an approval moves the counters on ``/metrics`` by the right amounts;
``/readyz`` names a stopped MCP server."""

from __future__ import annotations

from typing import Any

import httpx

from infra.tls import shared_ssl_context
from testing.slack import (
    APPROVALS_CHANNEL_ID,
    block_action,
    mention,
    text_value,
    view_submission,
)
from tests.bot.test_slack_events import _texts
from tests.ops.conftest import OpsApp, delta, value


async def _ready(app: OpsApp) -> tuple[int, dict[str, object]]:
    async with httpx.AsyncClient(verify=shared_ssl_context()) as http:
        response = await http.get(f"{app.url}/readyz")
    return response.status_code, response.json()


async def test_readyz_names_a_stopped_mcp_server(ops_app: OpsApp) -> None:
    status, body = await _ready(ops_app)
    assert status == 200, body
    assert body["status"] == "ready"
    assert body["degraded"] == []
    checks = body["checks"]
    assert isinstance(checks, dict)
    assert set(checks) == {
        "database",
        "idp",
        "mcp:ticketing",
        "mcp:docs",
        "mcp:database",
        "mcp:search",
    }
    assert all(c["ok"] for c in checks.values())

    await ops_app.stop_search()

    status, body = await _ready(ops_app)
    assert status == 200, body  # degraded, not unready: the others still serve
    assert body["status"] == "degraded"
    assert body["degraded"] == ["search"]
    checks = body["checks"]
    assert isinstance(checks, dict)
    assert checks["mcp:search"]["ok"] is False
    assert checks["mcp:ticketing"]["ok"] is True

    async with httpx.AsyncClient(verify=shared_ssl_context()) as http:
        alive = await http.get(f"{ops_app.url}/healthz")
    assert alive.status_code == 200


async def test_a_run_with_an_approval_moves_the_counters(ops_app: OpsApp) -> None:
    app, fake = ops_app, ops_app.fake_slack
    await app.stop_search()  # every run below is degraded: search is left out
    await app.link("U0ALICE", "alice")
    await app.link("U0BOB", "bob")
    before = await app.scrape()

    # A read: one model call for the tool, one for the answer; one ticketing read.
    await app.sender.post_event(mention("U0ALICE", "show ticket PAY-101", ts="7.1"))
    answer = (await fake.wait_for("chat.update", wait=60))[0]
    assert "PAY-101" in _texts(answer["blocks"])

    # A write: interrupted for approval; bob approves; the resume runs the write.
    await app.sender.post_event(
        mention("U0ALICE", "close ticket PAY-102 because merchants re-exported", ts="7.2")
    )
    await fake.wait_for(
        "chat.postMessage", where=lambda p: p["channel"] == "ops-approvals", wait=60
    )
    await fake.settle()
    (card_key,) = [k for k in fake.messages if k[0] == APPROVALS_CHANNEL_ID]
    card = fake.messages[card_key]
    approval_id = card["blocks"][-1]["elements"][0]["value"]
    await app.sender.post_interaction(
        block_action("U0BOB", "approval_approve", approval_id, message_ts=card["ts"])
    )
    await fake.wait_for(
        "chat.postMessage", where=lambda p: "approved" in p.get("text", ""), wait=60
    )
    await fake.settle()
    after = await app.scrape()

    def moved(name: str, **labels: str) -> float:
        return delta(before, after, name, **labels)

    # runs: two new messages and one resume
    assert moved("opsbot_runs_total", kind="run", outcome="completed") == 1
    assert moved("opsbot_runs_total", kind="run", outcome="interrupted") == 1
    assert moved("opsbot_runs_total", kind="resume", outcome="completed") == 1
    # the approved write ran at its decision, counted as its own kind
    assert moved("opsbot_runs_total", kind="execute", outcome="completed") == 1
    assert sum(v for (n, _), v in after.items() if n == "opsbot_run_errors_total") == sum(
        v for (n, _), v in before.items() if n == "opsbot_run_errors_total"
    )
    # tools: one read and one write on ticketing, no errors, no retries
    assert moved("opsbot_tool_calls_total", server="ticketing", kind="read", outcome="success") == 1
    assert (
        moved("opsbot_tool_calls_total", server="ticketing", kind="write", outcome="success") == 1
    )
    assert moved("opsbot_tool_call_seconds_count", server="ticketing") == 2
    assert moved("opsbot_tool_retries_total", server="ticketing") == 0
    # approvals: one proposal, one approve, one time-to-decision sample
    assert moved("opsbot_interrupts_total", tool="ticketing_close_ticket") == 1
    assert moved("opsbot_approval_decisions_total", decision="approve") == 1
    assert moved("opsbot_approval_decisions_total", decision="reject") == 0
    assert moved("opsbot_approval_decision_seconds_count") == 1
    # model: the demo model answers the read in two calls, proposes the write in one and
    # answers after the resume in one
    assert moved("opsbot_model_calls_total", model="demo") == 4
    assert moved("opsbot_model_call_limit_hits_total") == 0
    # degraded mode: the stopped server was left out of each of the three runs
    assert moved("opsbot_degraded_runs_total", server="search") == 3
    assert moved("opsbot_degraded_runs_total", server="ticketing") == 0
    assert value(after, "opsbot_circuit_breaker_open", server="ticketing") == 0
    assert ("opsbot_circuit_breaker_open", frozenset({("server", "search")})) in after
    # broker: alice's and bob's runs needed tokens; none failed
    assert moved("opsbot_broker_exchanges_total") >= 1
    assert not [k for k in after if k[0] == "opsbot_broker_failures_total"]
    # HTTP: the two mentions and the click, all answered 200
    assert moved("opsbot_http_requests_total", route="/slack/events", status="200") == 3


async def _propose(app: OpsApp, text: str, ts: str) -> dict[str, Any]:
    """Alice asks for a write; returns the new approval card."""
    fake = app.fake_slack
    cards = {k for k in fake.messages if k[0] == APPROVALS_CHANNEL_ID}
    await app.sender.post_event(mention("U0ALICE", text, ts=ts))
    await fake.wait_for(
        "chat.postMessage",
        count=len(cards) + 1,
        where=lambda p: p["channel"] == "ops-approvals",
        wait=60,
    )
    await fake.settle()
    (key,) = [k for k in fake.messages if k[0] == APPROVALS_CHANNEL_ID and k not in cards]
    return fake.messages[key]


async def _open_modal(app: OpsApp, action: str, card: dict[str, Any]) -> dict[str, Any]:
    fake = app.fake_slack
    seen = len(fake.calls_to("views.open"))
    approval_id = card["blocks"][-1]["elements"][0]["value"]
    await app.sender.post_interaction(
        block_action("U0BOB", action, approval_id, message_ts=card["ts"])
    )
    opened = await fake.wait_for("views.open", count=seen + 1, wait=60)
    view: dict[str, Any] = opened[-1]["view"]
    return view


async def test_edit_and_reject_move_their_own_counters(ops_app: OpsApp) -> None:
    app, fake = ops_app, ops_app.fake_slack
    await app.link("U0ALICE", "alice")
    await app.link("U0BOB", "bob")
    before = await app.scrape()

    card = await _propose(app, "close ticket PAY-102 because merchants re-exported", "9.1")
    modal = await _open_modal(app, "approval_edit", card)
    values = {"arg:key": text_value("PAY-102"), "arg:resolution": text_value("Rolled back")}
    status, _ = await app.sender.post_interaction(view_submission("U0BOB", modal, values))
    assert status == 200
    await fake.wait_for(
        "chat.postMessage", where=lambda p: "*edited*" in p.get("text", ""), wait=60
    )
    await fake.settle()

    card = await _propose(app, "close ticket PAY-104 as duplicate", "9.2")
    modal = await _open_modal(app, "approval_reject", card)
    status, _ = await app.sender.post_interaction(
        view_submission("U0BOB", modal, {"reason": text_value("not yet")})
    )
    assert status == 200
    await fake.wait_for(
        "chat.postMessage", where=lambda p: "*rejected*" in p.get("text", ""), wait=60
    )
    await fake.settle()
    after = await app.scrape()

    def moved(name: str, **labels: str) -> float:
        return delta(before, after, name, **labels)

    assert moved("opsbot_interrupts_total", tool="ticketing_close_ticket") == 2
    assert moved("opsbot_approval_decisions_total", decision="edit") == 1
    assert moved("opsbot_approval_decisions_total", decision="reject") == 1
    assert moved("opsbot_approval_decisions_total", decision="approve") == 0
    assert moved("opsbot_approval_decision_seconds_count") == 2
    assert moved("opsbot_runs_total", kind="run", outcome="interrupted") == 2
    assert moved("opsbot_runs_total", kind="resume", outcome="completed") == 2
    # only the edited write ran; the rejected one never left the process
    assert (
        moved("opsbot_tool_calls_total", server="ticketing", kind="write", outcome="success") == 1
    )
