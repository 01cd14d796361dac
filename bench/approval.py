"""Click-to-execution latency of an approval, and executions for N concurrent clicks.

The real stack: dev IdP, the reference ticketing server, a real broker, the agent with a
zero-latency scripted model, approvals and audit on a fresh PostgreSQL database (SQLite when
none is reachable). Each round, a requester's write (a ticket comment) waits for approval;
N approvers click Approve at once, split across two app instances (each with its own engine,
checkpointer pool and agent). Latency runs from the clicks to the write's completion at the
server; ``executions`` is the largest number of changes the server's log shows for one round
(it must be 1).

Then, over HTTP through the running Slack app, ``--cards`` (20) approvals clicked at once:
click → card updated and click → write done (p50/p99), and audit rows == executions
(``bench/_approval_cards.py``); with ``--paced-ms``, the same cards again clicked one after
another (under ``paced``).

The dev IdP and the reference MCP servers run in a process of their own, as deployed
(``bench/_servers_process.py``; ``"servers": "process"``). Until 2026-12-03 they ran on a
thread of the bench process, sharing its GIL with the app they answer (every token signed
and tool call served held the app's loop up); ``--servers-in-process`` still measures that
way (``"servers": "thread"``), to compare with older figures.

Slack's side of the cards (the fake Web API the app calls and the sender of the signed
clicks) runs in a process of its own too (``bench/_slack_side.py``; ``"slack_side":
"process"``): until 2026-12-04 it ran on a thread of the bench process, and the GIL it held
answering ``chat.update`` and signing and sending clicks was counted in the app's
latencies. ``--slack-in-process`` still measures that way (``"slack_side": "thread"``). Its
CPU per click (``slack_side_cpu_ms_per_click``) and the connections the timed clicks opened
(``click_connections_opened``, 0: the sender warms its connections up first) are reported
in both shapes.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import secrets
import statistics
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import psycopg
from sqlalchemy.engine import make_url

from bench._approval_cards import cards_bench
from bench._servers_process import servers_process
from bench._support import OtherLoop

ADMIN_URL = "postgresql://postgres@127.0.0.1:5432/postgres"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--clicks", type=int, default=50, help="concurrent Approve clicks")
    parser.add_argument("--rounds", type=int, default=20, help="approvals measured")
    parser.add_argument(
        "--cards", type=int, default=20, help="cards clicked at once over HTTP (0: skip)"
    )
    parser.add_argument(
        "--paced-ms",
        type=float,
        default=0.0,
        help="also click the cards one after another, this many ms apart (reported as 'paced')",
    )
    parser.add_argument(
        "--profile", default=None, help="cProfile the app loop during the clicks into this file"
    )
    parser.add_argument(
        "--profile-servers",
        default=None,
        help="cProfile the servers' process (its loop, CPU time) during the cards' clicks",
    )
    parser.add_argument(
        "--profile-until-written",
        action="store_true",
        help="with --profile: stop profiling once every card's write is done (not the resumes)",
    )
    parser.add_argument(
        "--only-cards", action="store_true", help="skip the direct clicks; only the cards part"
    )
    parser.add_argument(
        "--servers-in-process",
        action="store_true",
        help="run the IdP and MCP servers on a thread of this process (before 2026-12-03)",
    )
    parser.add_argument(
        "--slack-in-process",
        action="store_true",
        help="run the fake Slack and the click sender on a thread of this process "
        "(before 2026-12-04)",
    )


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


@contextlib.contextmanager
def _database(tmp: Path) -> Any:
    name = f"opsbot_bench_{secrets.token_hex(4)}"
    try:
        with psycopg.connect(ADMIN_URL, autocommit=True, connect_timeout=3) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
    except psycopg.OperationalError:
        yield f"sqlite:///{tmp / 'bench.db'}"
        return
    try:
        yield make_url(ADMIN_URL).set(database=name).render_as_string(hide_password=False)
    finally:
        with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


async def run(args: argparse.Namespace | None = None) -> dict[str, Any]:
    from mcp_servers import start_reference_servers
    from testing.agent import open_agent_env
    from testing.identity import start_dev_idp

    clicks = int(getattr(args, "clicks", 0) or 50)
    rounds = int(getattr(args, "rounds", 0) or 20)
    in_process = bool(getattr(args, "servers_in_process", False))
    with tempfile.TemporaryDirectory() as tmp, _database(Path(tmp)) as url:
        # As in production, the IdP and the MCP servers are not on the app's loop: each
        # runs elsewhere, so their work is not counted as the app's (nor delays it).
        elsewhere = OtherLoop()
        try:
            if in_process:
                idp = await elsewhere.enter(start_dev_idp())
                servers = await elsewhere.enter(
                    start_reference_servers(
                        issuer=idp.issuer, jwks_url=idp.jwks_url, data_dir=Path(tmp)
                    )
                )
            else:
                idp, servers = await elsewhere.enter(servers_process(Path(tmp)))
            async with open_agent_env(idp, servers) as env:
                result = await _measure(url, env, servers, elsewhere, clicks, rounds, args)
        finally:
            await elsewhere.aclose()
    return {
        **result,
        "servers": "thread" if in_process else "process",
        "slack_side": "thread" if getattr(args, "slack_in_process", False) else "process",
    }


async def _measure(
    url: str,
    env: Any,
    servers: Any,
    elsewhere: OtherLoop,
    clicks: int,
    rounds: int,
    args: argparse.Namespace | None,
) -> dict[str, Any]:
    from langchain_core.messages import BaseMessage

    from agent_core import Agent, AgentConfig, Interrupt, ToolPolicy
    from agent_core.binding import ToolCallEvent
    from agent_core.checkpointer import open_checkpointer
    from agent_core.threads import PlatformRef, SqlThreadStore
    from approvals import ActionDecision, AlreadyDecidedError, SqlApprovalStore
    from approvals.service import ApprovalService
    from audit import AuditLog, AuditObserver, SqlAuditSink
    from broker import Identity
    from infra.storage import create_engine, migrate
    from testing.agent import FunctionChatModel, call, final, tool_results

    written_at: dict[str, float] = {}

    class TimedObserver(AuditObserver):
        async def tool_call_finished(
            self, event: ToolCallEvent, outcome: str, latency_ms: float
        ) -> None:
            if event.kind == "write" and event.approval_id and outcome == "success":
                written_at.setdefault(event.approval_id, time.perf_counter())
            await super().tool_call_finished(event, outcome, latency_ms)

    def step(messages: list[BaseMessage]) -> Any:
        if tool_results(messages):
            return final("done", [("ticketing", "PAY-104")])
        first = next(m for m in messages if m.type == "human")
        return call("ticketing_add_comment", key="PAY-104", body=str(first.content))

    users = {n: await env.user(n) for n in ("alice", "bob", "carol")}

    async def lookup(subject: str) -> Identity:
        return users[subject]

    @contextlib.asynccontextmanager
    async def instance() -> AsyncIterator[tuple[Agent, ApprovalService, Callable[[], Any]]]:
        engine = create_engine(url, pool_size=20, max_overflow=20)
        await migrate(engine)
        try:
            async with open_checkpointer(url, pool_size=20) as saver:
                log = AuditLog(SqlAuditSink(engine))
                agent = Agent(
                    AgentConfig(servers=env.server_configs, retry_initial_delay=0.0),
                    model=FunctionChatModel(fn=step),
                    broker=env.harness.broker,
                    threads=SqlThreadStore(engine),
                    checkpointer=saver,
                    policy=ToolPolicy.load(),
                    observer=TimedObserver(log),
                )
                service = ApprovalService(
                    SqlApprovalStore(engine), log, agent, agent, lookup, env.harness.broker
                )
                try:
                    yield agent, service, engine.dispose
                finally:
                    await agent.settle()  # its sessions end before the servers stop
        finally:
            await engine.dispose()

    latencies: list[float] = []
    single: list[float] = []
    executions: list[int] = []
    only_cards = bool(getattr(args, "only_cards", False))
    async with instance() as (agent_a, first, _), instance() as (_, second, _):
        threads = SqlThreadStore(create_engine(url))
        for r in range(0 if only_cards else 2 * rounds):
            n = clicks if r < rounds else 1  # then the same with one click: baseline
            body = f"bench round {r} {secrets.token_hex(4)}"
            ref = PlatformRef("slack", "T-BENCH", "C-BENCH", f"{time.time_ns()}")
            thread = await threads.get_or_create(ref, "alice")
            result = await agent_a.run(users["alice"], thread.thread_id, body)
            assert isinstance(result, Interrupt), result
            approval = await first.open(result, users["alice"])
            started = time.perf_counter()
            outcomes = await asyncio.gather(
                *(
                    (first if i % 2 else second).decide(
                        users["bob" if i % 3 else "carol"],
                        approval.approval_id,
                        ActionDecision("approve"),
                    )
                    for i in range(n)
                ),
                return_exceptions=True,
            )
            odd = [
                o
                for o in outcomes
                if isinstance(o, BaseException) and not isinstance(o, AlreadyDecidedError)
            ]
            if odd:
                raise odd[0]
            changes = [
                c
                for c in await elsewhere.call(servers.tickets.all_changes())
                if c.tool == "add_comment" and body in str(c.change)
            ]
            executions.append(len(changes))
            elapsed = (written_at[approval.approval_id] - started) * 1000
            (latencies if n > 1 else single).append(elapsed)
    cards = int(getattr(args, "cards", 20) if args is not None else 20)
    slack_in_process = bool(getattr(args, "slack_in_process", False))
    profile = getattr(args, "profile", None)
    servers_profile = getattr(args, "profile_servers", None)
    slack = (
        await cards_bench(
            url,
            env,
            servers,
            elsewhere,
            cards,
            profile,
            servers_profile=servers_profile,
            profile_until_written=bool(getattr(args, "profile_until_written", False)),
            slack_in_process=slack_in_process,
        )
        if cards > 0
        else {}
    )
    paced_ms = float(getattr(args, "paced_ms", 0.0) or 0.0)
    if cards > 0 and paced_ms > 0:
        paced = await cards_bench(
            url,
            env,
            servers,
            elsewhere,
            cards,
            paced_ms=paced_ms,
            slack_in_process=slack_in_process,
        )
        slack["paced"] = {"paced_ms": paced_ms, **paced}
    direct = (
        {}
        if only_cards
        else {
            "concurrent_clicks": clicks,
            "instances": 2,
            "rounds": rounds,
            "click_to_execution_ms_p50": round(statistics.median(latencies), 2),
            "click_to_execution_ms_p99": round(_percentile(latencies, 0.99), 2),
            "single_click_ms_p50": round(statistics.median(single), 2),
            "executions": max(executions),
            "executions_per_round": sorted(set(executions)),
        }
    )
    return {"bench": "approval", "database": make_url(url).get_backend_name(), **direct, **slack}
