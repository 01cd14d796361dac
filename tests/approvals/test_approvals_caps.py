"""Caps on one model turn (issue 18): at most ``tool_calls_per_turn`` calls run and at most
``pending_approvals_per_run`` writes reach an approver; every executed call has exactly one
audit record, on SQLite and PostgreSQL — ground truth from the ticketing server itself."""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.messages import ToolMessage
from test_approvals_assistant import REF, Clock, chat
from test_approvals_truth import app, broker_for, configs

from assistant.types import Answered, ApprovalRequested, Approve, Decided
from audit import AuditQuery, EventKind
from mcp_servers import ReferenceServers
from testing.agent import FunctionChatModel, calls, final
from testing.identity import RunningIdp

BACKENDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


def once_then_answer(step: Any) -> FunctionChatModel:
    """``step`` first; once any tool answered, a final answer counting the refusals (keyed
    on the conversation itself, so a summary of it does not restart the script)."""

    def respond(messages: list[Any]) -> Any:
        results = [m for m in messages if isinstance(m, ToolMessage)]
        if not results:
            return step
        refused = sum("Refused: at most" in str(m.content) for m in results)
        return final(f"{refused} refused")

    return FunctionChatModel(fn=respond)


async def comments(servers: ReferenceServers, key: str) -> list[Any]:
    return [
        c
        for c in await servers.tickets.all_changes()
        if c.ticket_key == key and c.tool == "add_comment"
    ]


@pytest.mark.parametrize("db", BACKENDS)
async def test_fifty_parallel_writes_in_one_turn_reach_at_most_the_caps(
    db: str,
    dev_idp: RunningIdp,
    reference_servers: ReferenceServers,
    request: pytest.FixtureRequest,
) -> None:
    url = request.getfixturevalue(f"{db}_url")
    clock = Clock()
    model = once_then_answer(
        calls(*(("ticketing_add_comment", {"key": "PAY-101", "body": f"n{i}"}) for i in range(50)))
    )
    audiences = {s.name: s.audience for s in reference_servers}
    async with (
        broker_for(dev_idp, audiences, clock) as harness,
        app(harness, configs(reference_servers), url, clock, model) as (bot, log),
    ):
        reply = await bot.handle_message(chat("alice"), REF, "comment fifty times on PAY-101")
        assert isinstance(reply, ApprovalRequested)
        view = await bot.approval_view(reply.approval.approval_id)
        assert view is not None
        requested = await log.query(AuditQuery(kinds=(EventKind.APPROVAL_REQUESTED,)))
        assert len(requested) == 5  # pending_approvals_per_run: the other 45 got no card

        assert await comments(reference_servers, "PAY-101") == []
        assert len(reply.all) == 5  # one card per write call
        for n, waiting in enumerate(reply.all[:-1], start=1):
            decided = await bot.decide(chat("bob"), waiting.approval_id, Approve())
            assert isinstance(decided, Decided)
            assert decided.state == "succeeded"  # runs on its own decision ...
            assert len(await comments(reference_servers, "PAY-101")) == n
            # ... the requester hears of it; the run waits for the step's other calls.
            assert isinstance(decided.requester_result, Answered)
            assert "was carried out" in decided.requester_result.answer.answer
        done = await bot.decide(chat("bob"), reply.all[-1].approval_id, Approve())
        assert isinstance(done, Decided)
        assert done.state == "succeeded"
        executed = await comments(reference_servers, "PAY-101")
        assert len(executed) == 5
        outcomes = await log.query(AuditQuery(kinds=(EventKind.WRITE_OUTCOME,), limit=1000))
        pendings = await log.query(AuditQuery(kinds=(EventKind.WRITE_PENDING,), limit=1000))
        # Exactly one audit record (pending + outcome) per server-side execution.
        assert len(pendings) == len(outcomes) == len(executed)
        assert {e.idempotency_key for e in outcomes} == {c.idempotency_key for c in executed}
        assert all(e.outcome == "success" for e in outcomes)
        assert isinstance(done.requester_result, Answered)


@pytest.mark.parametrize("db", BACKENDS)
async def test_fifty_parallel_reads_in_one_turn_run_at_most_the_cap(
    db: str,
    dev_idp: RunningIdp,
    reference_servers: ReferenceServers,
    request: pytest.FixtureRequest,
) -> None:
    url = request.getfixturevalue(f"{db}_url")
    clock = Clock()
    reads = calls(*(("ticketing_get_ticket", {"key": f"PAY-{101 + i % 4}"}) for i in range(50)))
    model = once_then_answer(reads)
    audiences = {s.name: s.audience for s in reference_servers}
    async with (
        broker_for(dev_idp, audiences, clock) as harness,
        app(harness, configs(reference_servers), url, clock, model) as (bot, log),
    ):
        reply = await bot.handle_message(chat("alice"), REF, "show me fifty tickets")
        assert isinstance(reply, Answered)
        assert reply.answer.answer.endswith("refused")
        recorded = await log.query(AuditQuery(kinds=(EventKind.TOOL_CALL,), limit=1000))
        assert len(recorded) == 8  # tool_calls_per_turn; one record per executed call
        assert all(e.outcome == "success" for e in recorded)
