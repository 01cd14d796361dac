"""Approvals tell the truth (issue 18): rights checked at the click against the IdP's current
view, and outcomes from what the server really did — dev IdP, a real broker, the real agent
(scripted model), the reference ticketing server (in process, or as a process to kill),
approvals and audit in SQL, ground truth from the ticketing server's own change log."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from test_approvals_assistant import REF, Clock, chat
from test_approvals_end_to_end import close_model

from agent_core import Agent, AgentConfig, ServerConfig, ToolPolicy
from agent_core.checkpointer import open_checkpointer
from agent_core.threads import SqlThreadStore
from approvals import SqlApprovalStore
from approvals.service import ApprovalService
from assistant.service import Assistant, Recovery
from assistant.types import (
    Answered,
    ApprovalRequested,
    Approve,
    Decided,
    LinkRequired,
    NotAuthorised,
    Reject,
)
from audit import AuditLog, AuditObserver, AuditQuery, EventKind, SqlAuditSink
from audit.reconcile import McpChangeLog, Reconciler
from broker import LocalIdentityService
from infra.serving import bind_socket
from infra.storage import create_engine
from mcp_servers import ReferenceServers
from testing.agent import ScriptedChatModel, call, calls, final, tool_results
from testing.identity import BrokerHarness, RunningIdp, open_broker

CLOSE = "Close PAY-104, the alert is fixed"
_FIVE_MINUTES = timedelta(minutes=5)


@contextlib.asynccontextmanager
async def app(
    harness: BrokerHarness,
    servers: tuple[ServerConfig, ...],
    url: str,
    clock: Clock,
    model: Any,
) -> AsyncIterator[tuple[Assistant, AuditLog]]:
    """The façade as ``opsbot slack`` wires it: SQL stores, the audit observer, recovery."""
    engine = create_engine(url)
    identities = LocalIdentityService(harness.broker, harness.linking)
    try:
        async with open_checkpointer(url) as saver:
            log = AuditLog(SqlAuditSink(engine))
            threads = SqlThreadStore(engine)
            agent = Agent(
                AgentConfig(
                    servers=servers,
                    retry_initial_delay=0.0,
                    write_retry_initial_delay=0.05,
                    write_retry_max_delay=0.1,
                ),
                model=model,
                broker=identities,
                threads=threads,
                checkpointer=saver,
                policy=ToolPolicy.load(),
                observer=AuditObserver(log),
            )
            service = ApprovalService(
                SqlApprovalStore(engine),
                log,
                agent,
                agent,
                identities.resolve_subject,
                identities,
                clock=clock,
            )

            async def token_for(subject: str, server: str) -> str:
                who = await identities.resolve_subject(subject)
                return (await identities.get_token(who, server)).value

            # Pending writes younger than the grace are left alone; the clock says "later".
            reconciler = Reconciler(
                log,
                McpChangeLog({s.name: s.url for s in servers}, token_for),
                clock=lambda: clock() + _FIVE_MINUTES,
            )
            yield (
                Assistant(
                    identities,
                    threads,
                    agent,
                    service,
                    clock=clock,
                    recovery=Recovery(reconciler, _FIVE_MINUTES),
                ),
                log,
            )
    finally:
        await engine.dispose()


def configs(servers: ReferenceServers) -> tuple[ServerConfig, ...]:
    return tuple(ServerConfig(s.name, s.url, s.audience) for s in servers)


@contextlib.asynccontextmanager
async def broker_for(
    idp: RunningIdp, servers: dict[str, str], clock: Clock
) -> AsyncIterator[BrokerHarness]:
    for name, audience in servers.items():
        idp.provider.set_audience(name, audience)
    async with open_broker(idp, servers=servers, clock=clock) as harness:
        for name in ("alice", "bob", "carol"):
            await harness.link(name, chat(name))
        yield harness


async def closes(servers: ReferenceServers, key: str = "PAY-104") -> list[Any]:
    return [
        c
        for c in await servers.tickets.all_changes()
        if c.ticket_key == key and c.tool == "close_ticket"
    ]


# --- approver rights at the click ---------------------------------------------------------


@pytest.mark.parametrize("db", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def test_an_approver_removed_from_the_group_at_the_idp_is_refused_within_60_seconds(
    db: str,
    dev_idp: RunningIdp,
    reference_servers: ReferenceServers,
    request: pytest.FixtureRequest,
) -> None:
    url = request.getfixturevalue(f"{db}_url")
    clock = Clock()
    audiences = {s.name: s.audience for s in reference_servers}
    async with (
        broker_for(dev_idp, audiences, clock) as harness,
        app(harness, configs(reference_servers), url, clock, close_model()) as (bot, _),
    ):
        reply = await bot.handle_message(chat("alice"), REF, CLOSE)
        assert isinstance(reply, ApprovalRequested)
        approval_id = reply.approval.approval_id
        assert [v.approval_id for v in await bot.awaiting_approver(chat("bob"))] == [approval_id]

        await dev_idp.remove_from_group("bob", "ticket-leads")  # the IdP's admin API
        clock.offset += timedelta(seconds=61)  # no sleeping: the broker's cache runs on it
        # Listings (App Home) see groups at most 60 s old ...
        assert await bot.awaiting_approver(chat("bob")) == []
        # ... and the click itself asks the IdP now.
        refused = await bot.decide(chat("bob"), approval_id, Approve())
        assert isinstance(refused, NotAuthorised)
        assert "ticket-leads" in refused.reason
        assert await closes(reference_servers) == []

        done = await bot.decide(chat("carol"), approval_id, Approve())
        assert isinstance(done, Decided)
        assert (done.decided_by, done.state, done.outcome_reason) == ("carol", "succeeded", None)
        assert len(await closes(reference_servers)) == 1


async def test_a_group_removal_refuses_the_very_next_click(
    dev_idp: RunningIdp, reference_servers: ReferenceServers, sqlite_url: str
) -> None:
    clock = Clock()
    audiences = {s.name: s.audience for s in reference_servers}
    async with (
        broker_for(dev_idp, audiences, clock) as harness,
        app(harness, configs(reference_servers), sqlite_url, clock, close_model()) as (bot, _),
    ):
        reply = await bot.handle_message(chat("alice"), REF, CLOSE)
        assert isinstance(reply, ApprovalRequested)
        assert await bot.awaiting_approver(chat("bob"))  # bob's sign-in is cached now
        await dev_idp.remove_from_group("bob", "ticket-leads")
        refused = await bot.decide(chat("bob"), reply.approval.approval_id, Approve())
        assert isinstance(refused, NotAuthorised)
        assert await closes(reference_servers) == []


async def test_an_approver_whose_link_was_revoked_is_refused_at_the_next_click(
    dev_idp: RunningIdp, reference_servers: ReferenceServers, sqlite_url: str
) -> None:
    clock = Clock()
    audiences = {s.name: s.audience for s in reference_servers}
    async with (
        broker_for(dev_idp, audiences, clock) as harness,
        app(harness, configs(reference_servers), sqlite_url, clock, close_model()) as (bot, _),
    ):
        reply = await bot.handle_message(chat("alice"), REF, CLOSE)
        assert isinstance(reply, ApprovalRequested)
        approval_id = reply.approval.approval_id
        assert await bot.awaiting_approver(chat("bob"))  # a live, cached sign-in
        await dev_idp.revoke("bob")
        refused = await bot.decide(chat("bob"), approval_id, Approve())
        # Told to connect again; nothing decided, nothing written.
        assert isinstance(refused, LinkRequired)
        assert refused.login_url.startswith(dev_idp.issuer)
        view = await bot.approval_view(approval_id)
        assert view is not None
        assert view.state == "pending"
        assert await closes(reference_servers) == []
        # The link is marked broken: /ops status (and App Home, from the same status) say
        # "reconnect", without asking the IdP again.
        link = await harness.links.get(chat("bob"))
        assert link is not None
        assert link.broken_at is not None
        status = await bot.status(chat("bob"))
        assert not status.linked
        assert status.problem is not None
        assert "reconnect" in status.problem
        assert status.login_url is not None
        assert isinstance(await bot.decide(chat("bob"), approval_id, Approve()), LinkRequired)

        # Linking again clears it: bob can decide again.
        await dev_idp.restore("bob")
        await harness.link("bob", chat("bob"))
        relinked = await harness.links.get(chat("bob"))
        assert relinked is not None
        assert relinked.broken_at is None
        assert (await bot.status(chat("bob"))).linked
        done = await bot.decide(chat("bob"), approval_id, Approve())
        assert isinstance(done, Decided)
        assert done.state == "succeeded"
        assert len(await closes(reference_servers)) == 1


async def test_a_requester_whose_refresh_fails_at_the_click_is_marked_broken(
    dev_idp: RunningIdp, reference_servers: ReferenceServers, sqlite_url: str
) -> None:
    clock = Clock()
    audiences = {s.name: s.audience for s in reference_servers}
    async with (
        broker_for(dev_idp, audiences, clock) as harness,
        app(harness, configs(reference_servers), sqlite_url, clock, close_model()) as (bot, _),
    ):
        reply = await bot.handle_message(chat("alice"), REF, CLOSE)
        assert isinstance(reply, ApprovalRequested)
        await dev_idp.revoke("alice")
        clock.offset += timedelta(seconds=61)  # her cached sign-in is past its group max age
        done = await bot.decide(chat("bob"), reply.approval.approval_id, Approve())
        # Nothing written; the approval says why; alice's link says "reconnect".
        assert isinstance(done, Decided)
        assert done.state == "failed"
        assert await closes(reference_servers) == []
        link = await harness.links.get(chat("alice"))
        assert link is not None
        assert link.broken_at is not None
        status = await bot.status(chat("alice"))
        assert status.problem is not None
        assert "reconnect" in status.problem


# --- truthful outcomes --------------------------------------------------------------------


def refused_close_model() -> ScriptedChatModel:
    """alice (payments) asks to close a platform ticket she cannot see: the server refuses."""

    def answer(messages: list[Any]) -> Any:
        results = tool_results(messages)
        return final("Done! The ticket is closed." if results else "nothing ran")

    return ScriptedChatModel(
        steps=[
            call("ticketing_close_ticket", key="PLAT-201", resolution="Alert fixed"),
            answer,  # the model claims success whatever happened
        ]
    )


@pytest.mark.parametrize("db", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def test_a_write_the_server_refuses_is_failed_with_its_reason_everywhere(
    db: str,
    dev_idp: RunningIdp,
    reference_servers: ReferenceServers,
    request: pytest.FixtureRequest,
) -> None:
    url = request.getfixturevalue(f"{db}_url")
    clock = Clock()
    audiences = {s.name: s.audience for s in reference_servers}
    async with (
        broker_for(dev_idp, audiences, clock) as harness,
        app(harness, configs(reference_servers), url, clock, refused_close_model()) as (bot, log),
    ):
        reply = await bot.handle_message(chat("alice"), REF, "close PLAT-201")
        assert isinstance(reply, ApprovalRequested)
        approval_id = reply.approval.approval_id
        done = await bot.decide(chat("bob"), approval_id, Approve())
        assert isinstance(done, Decided)
        assert done.decision == "approved"
        assert done.state == "failed"
        assert done.outcome_reason is not None
        assert done.outcome_reason.startswith("the ticketing server refused — ")
        assert "PLAT-201" in done.outcome_reason
        assert done.outcome == f"failed: {done.outcome_reason}"
        # The approval record (card, App Home, ``opsbot approvals``) says the same.
        view = await bot.approval_view(approval_id)
        assert view is not None
        assert (view.state, view.outcome_reason) == ("failed", done.outcome_reason)
        # And the audit: the write's own outcome and the approval's end.
        [outcome] = await log.query(
            AuditQuery(approval_id=approval_id, kinds=(EventKind.WRITE_OUTCOME,))
        )
        assert outcome.outcome == "error:ToolResultError"
        assert "PLAT-201" in outcome.detail["reason"]
        [finished] = await log.query(
            AuditQuery(approval_id=approval_id, kinds=(EventKind.APPROVAL_FINISHED,))
        )
        assert finished.outcome == "failed"
        assert finished.detail["reason"] == done.outcome_reason
        # Ground truth: nothing changed at the server.
        assert await closes(reference_servers, "PLAT-201") == []


# --- the ticketing server killed before the click -----------------------------------------


@contextlib.asynccontextmanager
async def ticketing_process(
    port: int, store: Path, idp: RunningIdp
) -> AsyncIterator[asyncio.subprocess.Process]:
    """``opsbot mcp ticketing`` as a real process on ``port``, its data in ``store``."""
    env = {**os.environ, "OPSBOT_DATA_DIR": str(store.parent)}
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "opsbot.cli",
        "mcp",
        "ticketing",
        "--port",
        str(port),
        "--store-url",
        f"sqlite+aiosqlite:///{store.as_posix()}",
        "--issuer",
        idp.issuer,
        "--jwks-url",
        idp.jwks_url,
        stdout=asyncio.subprocess.PIPE,
        env=env,
    )
    try:
        assert proc.stdout is not None
        line = await asyncio.wait_for(proc.stdout.readline(), 30)
        assert b"serving" in line, line
        yield proc
    finally:
        if proc.returncode is None:
            proc.kill()
        await proc.wait()


async def server_closes(store: Path, key: str = "PAY-104") -> list[Any]:
    from mcp_servers.ticketing.store import TicketStore

    tickets = await TicketStore.open(f"sqlite+aiosqlite:///{store.as_posix()}", base_url="x")
    try:
        return [
            c
            for c in await tickets.all_changes()
            if c.ticket_key == key and c.tool == "close_ticket"
        ]
    finally:
        await tickets.close()


async def test_killed_server_then_approve_is_unknown_then_reconciled_and_run_once(
    dev_idp: RunningIdp, sqlite_url: str, tmp_path: Path
) -> None:
    sock = bind_socket()
    port = sock.getsockname()[1]
    sock.close()
    url = f"http://127.0.0.1:{port}/mcp"
    store = tmp_path / "ticketing.db"
    servers = (ServerConfig("ticketing", url, url),)
    clock = Clock()
    async with broker_for(dev_idp, {"ticketing": url}, clock) as harness:
        async with (
            ticketing_process(port, store, dev_idp) as proc,
            app(harness, servers, sqlite_url, clock, close_model()) as (bot, log),
        ):
            reply = await bot.handle_message(chat("alice"), REF, CLOSE)
            assert isinstance(reply, ApprovalRequested)
            approval_id = reply.approval.approval_id
            proc.kill()
            await proc.wait()

            done = await bot.decide(chat("bob"), approval_id, Approve())
            assert isinstance(done, Decided)
            # Not done, not dropped: unknown, with a pending write for the reconciler.
            assert done.state == "unknown"
            assert done.outcome_reason is not None
            assert "being reconciled" in done.outcome_reason
            view = await bot.approval_view(approval_id)
            assert view is not None
            assert view.state == "unknown"
            [pending] = await log.unresolved_writes()
            assert pending.approval_id == approval_id
            assert pending.tool == "ticketing_close_ticket"

            # While the server is still down, reconciling settles nothing.
            still = await bot.recover()
            assert len(still.reconciled.ambiguous) == 1
            assert still.finished == []

        async with (
            ticketing_process(port, store, dev_idp),
            app(harness, servers, sqlite_url, clock, close_model()) as (bot, log),
        ):
            recovered = await bot.recover()
            assert recovered.reconciled.ambiguous == []
            [(event, outcome)] = recovered.reconciled.resolved
            assert event.approval_id == approval_id
            [settled] = recovered.finished
            assert settled.approval_id == approval_id
            applied = await server_closes(store)
            # Either it had reached the server (found in its change log), or it never had
            # and, its idempotency key making that safe, it was run again once: the write
            # happened exactly once either way.
            assert outcome in ("success", "not_applied")
            assert settled.state == "succeeded"
            assert len(applied) == 1
            if outcome == "not_applied":
                outcomes = await log.query(
                    AuditQuery(approval_id=approval_id, kinds=(EventKind.WRITE_OUTCOME,))
                )
                assert [e.outcome for e in outcomes] == ["not_applied", "success"]
            view = await bot.approval_view(approval_id)
            assert view is not None
            assert view.state == settled.state
            assert await log.unresolved_writes() == []
            # Settled once: a second pass changes nothing.
            assert (await bot.recover()).finished == []


# --- one approval per write call ----------------------------------------------------------


def three_writes_model() -> ScriptedChatModel:
    def answer(messages: list[Any]) -> Any:
        return final(f"{len(tool_results(messages))} answers")

    return ScriptedChatModel(
        steps=[
            calls(
                ("ticketing_add_comment", {"key": "PAY-101", "body": "one"}),
                ("ticketing_add_comment", {"key": "PAY-102", "body": "two"}),
                ("ticketing_add_comment", {"key": "PAY-103", "body": "three"}),
            ),
            answer,
        ]
    )


async def comment_changes(servers: ReferenceServers) -> list[Any]:
    return [c for c in await servers.tickets.all_changes() if c.tool == "add_comment"]


@pytest.mark.parametrize("db", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def test_three_writes_three_approvals_exactly_the_approved_one_runs(
    db: str,
    dev_idp: RunningIdp,
    reference_servers: ReferenceServers,
    request: pytest.FixtureRequest,
) -> None:
    url = request.getfixturevalue(f"{db}_url")
    clock = Clock()
    audiences = {s.name: s.audience for s in reference_servers}
    async with (
        broker_for(dev_idp, audiences, clock) as harness,
        app(harness, configs(reference_servers), url, clock, three_writes_model()) as (bot, log),
    ):
        reply = await bot.handle_message(chat("alice"), REF, "comment on three tickets")
        assert isinstance(reply, ApprovalRequested)
        one, two, three = reply.all  # three approvals, three cards
        views = [await bot.approval_view(a.approval_id) for a in (one, two, three)]
        assert [v.args["key"] for v in views if v is not None] == ["PAY-101", "PAY-102", "PAY-103"]
        assert [v.approval_id for v in await bot.awaiting_approver(chat("bob"))] == [
            one.approval_id,
            two.approval_id,
            three.approval_id,
        ]

        approved = await bot.decide(chat("bob"), one.approval_id, Approve())
        assert isinstance(approved, Decided)
        # The approved call ran on its own decision: the server's change log shows it now.
        assert approved.state == "succeeded"
        [ran] = await comment_changes(reference_servers)
        assert (ran.ticket_key, ran.change) == ("PAY-101", {"comment": "one"})
        rejected = await bot.decide(chat("carol"), two.approval_id, Reject("not that one"))
        assert isinstance(rejected, Decided)
        assert rejected.state == "rejected"
        # The third waits (and so does the run): still exactly the one write.
        assert len(await comment_changes(reference_servers)) == 1
        waiting = await bot.approval_view(three.approval_id)
        assert waiting is not None
        assert waiting.state == "pending"

        last = await bot.decide(chat("bob"), three.approval_id, Reject("no"))
        assert isinstance(last, Decided)
        assert last.state == "rejected"
        # The run resumed once; the model got an answer for each of its three calls.
        assert isinstance(last.requester_result, Answered)
        assert last.requester_result.answer.answer == "3 answers"
        # Ground truth: still exactly the one write; the resume fed its stored result.
        assert await comment_changes(reference_servers) == [ran]
        outcomes = await log.query(AuditQuery(kinds=(EventKind.WRITE_OUTCOME,)))
        assert [(e.outcome, e.idempotency_key) for e in outcomes] == [
            ("success", ran.idempotency_key)
        ]
        final_view = await bot.approval_view(one.approval_id)
        assert final_view is not None
        assert final_view.state == "succeeded"
