"""``bench approval``, the Slack part: N cards clicked at once over HTTP (part of approval.py).

The running Slack app (Bolt over HTTP, the real ``Assistant`` and agent with a zero-latency
scripted model, approvals and audit in SQL) with the fake Slack (Web API and the sender of
the mentions and clicks, ``bench._slack_side``) in a process of its own, or with
``slack_in_process`` on a thread of the bench's (before 2026-12-04). The
requester asks for N writes (each its own thread, card and approval); once every card is up,
an approver clicks Approve on all N at once (or, with ``paced_ms``, one every
``paced_ms`` ms). Per card:

- click → card updated: from sending the signed click to the first ``chat.update`` of that
  card reaching Slack ("Approving… (bob)", buttons gone);
- click → write done: to the write's success at the ticketing server (the audit observer);

and ``audit_rows == executions``: write-outcome audit rows for these approvals against the
changes in the ticketing server's own log. ``stages``: per stage of a click (``bench._stages``),
p50 / p99 ms since the click was sent. ``app_sql_transactions_per_click``: transactions the
app's engine began from the first click until every write was done, and until the end (the
checkpointer's and the account links' own connections are not counted): a count, not a time,
so it holds on a loaded machine. ``slack_side_cpu_ms_per_click``: the Slack side's CPU time
(its process's, or its thread's) from the first click until every card showed its decision;
``click_connections_opened``: TCP connections the clicks opened (the sender opened its
connections before them, as Slack keeps its own open: 0 expected).
"""

from __future__ import annotations

import contextlib
import cProfile
import time
from collections.abc import AsyncIterator
from typing import Any

from sqlalchemy import event as sa_event

from bench._slack_side import (
    ALICE_ID,
    BOB_ID,
    SlackSideHandle,
    slack_side_process,
    slack_side_thread,
)
from bench._stages import Stages
from bench._support import OtherLoop, percentile


async def cards_bench(
    url: str,
    env: Any,
    servers: Any,
    elsewhere: OtherLoop,
    n: int = 20,
    profile: str | None = None,
    paced_ms: float = 0.0,
    servers_profile: str | None = None,
    profile_until_written: bool = False,
    slack_in_process: bool = False,
) -> dict[str, Any]:
    from langchain_core.messages import BaseMessage

    from agent_core import Agent, AgentConfig, ToolPolicy
    from agent_core.binding import ToolCallEvent
    from agent_core.checkpointer import open_checkpointer
    from agent_core.threads import SqlThreadStore
    from approvals import SqlApprovalStore
    from approvals.service import ApprovalService
    from assistant.service import Assistant
    from audit import AuditLog, AuditObserver, AuditQuery, EventKind, SqlAuditSink
    from bot.slack import SlackBotConfig, serve_http
    from bot.slack.durable import open_durable_bot
    from bot.slack.front import AckFront
    from broker import ChatUser, LocalIdentityService
    from infra.serving import bind_socket
    from infra.storage import create_engine, migrate, warm_pool
    from testing.agent import FunctionChatModel, call, final, tool_results
    from testing.slack import BOT_TOKEN, SIGNING_SECRET, TEAM_ID

    written_at: dict[str, float] = {}
    stages = Stages()
    # The app engine's transactions: in all, at the first click, once every write was done
    tx = {"count": 0, "clicked": 0, "written": 0}
    # The IdP's token endpoint: exchanges (a fresh token per decision) and sign-in refreshes,
    # at the first click and once every write was done
    minted = {"clicked": (0, 0), "written": (0, 0)}
    broker_metrics = env.harness.broker.metrics

    def token_posts() -> tuple[int, int]:
        return broker_metrics.exchanges, broker_metrics.refreshes

    class TimedObserver(AuditObserver):
        async def tool_call_started(self, event: ToolCallEvent) -> None:
            await super().tool_call_started(event)
            stages.mark(event.approval_id, "MCP call sent")

        async def tool_call_finished(
            self, event: ToolCallEvent, outcome: str, latency_ms: float
        ) -> None:
            if event.kind == "write" and event.approval_id and outcome == "success":
                written_at.setdefault(event.approval_id, time.perf_counter())
                stages.mark(event.approval_id, "server applied")
                if len(written_at) == n:
                    tx["written"] = tx["count"]
                    minted["written"] = token_posts()
                    if profiler is not None and profile_until_written:
                        profiler.disable()  # only the clicks' way to their writes
            await super().tool_call_finished(event, outcome, latency_ms)
            stages.mark(event.approval_id, "audit written")

    def step(messages: list[BaseMessage]) -> Any:
        if tool_results(messages):
            return final("done", [("ticketing", "PAY-104")])
        first = next(m for m in messages if m.type == "human")
        return call("ticketing_add_comment", key="PAY-104", body=str(first.content))

    alice, bob = ChatUser("slack", TEAM_ID, ALICE_ID), ChatUser("slack", TEAM_ID, BOB_ID)
    await env.harness.link("alice", alice)
    await env.harness.link("bob", bob)

    @contextlib.asynccontextmanager
    async def app(slack_url: str) -> AsyncIterator[tuple[str, AuditLog]]:
        engine = create_engine(url, pool_size=20, max_overflow=20)
        await migrate(engine)
        await warm_pool(engine, 20)  # as opsbot.wiring.open_assistant does at start

        @sa_event.listens_for(engine.sync_engine, "begin")
        def counted(_conn: Any) -> None:
            tx["count"] += 1

        identities = LocalIdentityService(env.harness.broker, env.harness.linking)
        try:
            async with open_checkpointer(url, pool_size=20) as saver:
                log = AuditLog(SqlAuditSink(engine))
                threads = SqlThreadStore(engine)
                agent = Agent(
                    AgentConfig(servers=env.server_configs, retry_initial_delay=0.0),
                    model=FunctionChatModel(fn=step),
                    broker=identities,
                    threads=threads,
                    checkpointer=saver,
                    policy=ToolPolicy.load(),
                    observer=TimedObserver(log),
                )
                store = SqlApprovalStore(engine)
                service = ApprovalService(
                    store, log, agent, agent, identities.resolve_subject, identities
                )
                stages.wrap(store, "claim_checked", "claim start", lambda a, *_, **__: a)
                stages.wrap(
                    store, "claim_checked", "CAS decided", lambda a, *_, **__: a, after=True
                )
                stages.wrap(store, "finish", "approval finished", lambda a, *_, **__: a, after=True)
                stages.wrap(
                    agent,
                    "execute",
                    "execute start",
                    lambda _identity, call, **__: call.approval_id,
                    binds=True,
                )
                stages.wrap(
                    agent,
                    "resume",
                    "run resumed",
                    lambda *_, approval_id, **__: approval_id,
                    after=True,
                )
                stages.wrap(identities, "get_token", "token", after=True)

                async def people() -> list[ChatUser]:
                    return [alice, bob]

                assistant = Assistant(identities, threads, agent, service, people=people)
                # The click's own task from here on: the approver's check is timed in it
                stages.wrap(
                    assistant, "decide", "decide start", lambda _u, a, *_, **__: a, binds=True
                )
                stages.wrap(identities, "resolve", "approver checked", after=True)
                config = SlackBotConfig(
                    bot_token=BOT_TOKEN,
                    signing_secret=SIGNING_SECRET,
                    api_url=slack_url,
                    approvals_channel="ops-approvals",
                )
                async with open_durable_bot(config, assistant, engine) as bot:
                    stages.wrap(
                        bot.adapter, "show_deciding", "click received", lambda a, *_, **__: a
                    )

                    def first_click() -> None:
                        tx["clicked"] = tx["count"]
                        minted["clicked"] = token_posts()
                        if profiler is not None:  # the app loop's thread, from the first click
                            profiler.enable()

                    stages.on_first("click received", first_click)
                    async with serve_http(
                        bot.app,
                        bind_socket("127.0.0.1", 0),
                        front=AckFront(bot.adapter, url),  # type: ignore[arg-type]
                    ) as app_url:
                        try:
                            yield app_url, log
                        finally:
                            await agent.settle()  # its sessions end before the servers stop
        finally:
            await engine.dispose()

    # CPU time of the app loop's thread, not wall time (the machine is shared)
    profiler = cProfile.Profile(time.thread_time) if profile else None
    tag = f"cards {time.time_ns()}"
    # Each run its own threads (a second run in the same database must not continue the first's)
    first_ts = int(time.time())

    # The servers' process's CPU time (IdP + MCP servers) at the clicks and once every card
    # is final: what the clicks cost the servers, whatever else the machine runs
    servers_cpu = [0.0, 0.0]
    measurable = hasattr(servers, "cpu_seconds")  # only in a process of their own

    async def servers_cpu_now() -> float:
        return await elsewhere.call(servers.cpu_seconds()) if measurable else 0.0

    # Slack's side (bench._slack_side): in a process of its own, or on a thread of this one;
    # reached from a loop of its own either way (neither is the app's loop nor the servers')
    side_loop = OtherLoop()
    try:
        side: SlackSideHandle = await side_loop.enter(
            slack_side_thread() if slack_in_process else slack_side_process()
        )
        async with app(side.url) as (app_url, log):
            await side_loop.call(side.ask(app_url, n, tag, first_ts))
            servers_cpu[0] = await servers_cpu_now()
            if servers_profile:
                await elsewhere.call(servers.profile("start"))
            await side_loop.call(side.click(app_url, paced_ms))  # until every card is decided
            servers_cpu[1] = await servers_cpu_now()
            if servers_profile:
                await elsewhere.call(servers.profile("stop", servers_profile))
            clicked = await side_loop.call(side.clicked())
            if profiler is not None:
                profiler.disable()
                profiler.dump_stats(str(profile))
            audited = await log.query(AuditQuery(kinds=(EventKind.WRITE_OUTCOME,), limit=10 * n))
    finally:
        await side_loop.aclose()

    card_ms: list[float] = []
    write_ms: list[float] = []
    ids = set()
    for card in clicked["cards"]:
        approval_id, started = card["approval_id"], card["clicked"]
        ids.add(approval_id)
        assert card["deciding"] is not None, f"card {card['card_ts']} was never updated"
        card_ms.append((card["deciding"] - started) * 1000)
        write_ms.append((written_at[approval_id] - started) * 1000)
        stages.mark(approval_id, "card deciding sent", card["deciding"])
        if card["final"] is not None:
            stages.mark(approval_id, "card final", card["final"])
    changes = [
        c
        for c in await elsewhere.call(servers.tickets.all_changes())
        if c.tool == "add_comment" and tag in str(c.change)
    ]
    audit_rows = [e for e in audited if e.approval_id in ids and e.outcome == "success"]
    return {
        "cards": n,
        "click_to_card_updated_ms_p50": round(percentile(card_ms, 0.5), 2),
        "click_to_card_updated_ms_p99": round(percentile(card_ms, 0.99), 2),
        "click_to_write_done_ms_p50": round(percentile(write_ms, 0.5), 2),
        "click_to_write_done_ms_p99": round(percentile(write_ms, 0.99), 2),
        "cards_executions": len(changes),
        "cards_audit_rows": len(audit_rows),
        "audit_rows_equal_executions": len(audit_rows) == len(changes) == n,
        "stages": stages.report({c["approval_id"]: c["clicked"] for c in clicked["cards"]}),
        "app_loop_cpu_ms_per_click": stages.cpu_per_click(n),
        "servers_cpu_ms_per_click": round((servers_cpu[1] - servers_cpu[0]) * 1000 / n, 1),
        "slack_side_cpu_ms_per_click": round(clicked["cpu_s"] * 1000 / n, 1),
        "click_connections_opened": clicked["click_connections_opened"],
        "token_endpoint_per_click_until_writes_done": {
            "exchanges": round((minted["written"][0] - minted["clicked"][0]) / n, 2),
            "refreshes": round((minted["written"][1] - minted["clicked"][1]) / n, 2),
        },
        "app_sql_transactions_per_click": {
            "until_writes_done": round((tx["written"] - tx["clicked"]) / n, 1),
            "until_cards_final": round((tx["count"] - tx["clicked"]) / n, 1),
        },
    }
