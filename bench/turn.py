"""What one agent turn costs next to the MCP calls it makes (issue 21), in one run.

For K = 1, 4 and 8 ``ticketing_get_ticket`` calls per turn (a zero-latency scripted model
makes one call per step, then answers), interleaved round by round so that a noisy machine
affects all of them alike:

- **floor**: the same K calls made directly on one open MCP session;
- **session floor**: the same K calls on a session opened for them (``initialize``), closed
  after the answer (its close counted in CPU, not wall time), as each opsbot run opens its own;
- **peer**: a plain ``create_agent`` with ``MultiServerMCPClient``'s tools on one open
  session, no middleware, no checkpointer;
- **default peer**: the same agent with the tools as the adapters' README has them
  (``client.get_tools()``): each call opens a session of its own, so for K = 1 it pays for a
  session as an opsbot run does (and for the SDK's ``tools/list`` before its first call);
- **opsbot**: ``Agent.run`` as production wires it: thread check, health, tokens, a session
  per server per run, the middleware, the SQLite checkpointer, the SQL thread store and the
  audit log.

Also a turn the model answers without a tool call, for opsbot and the peer, and what one
read adds to it (``one_read_adds_wall_ms``, ``one_read_adds_cpu_ms``): opsbot's includes
opening and closing the run's session, the peer's session stays open.

``mcp_call_ratio``: each call after the first in a turn (K = 8 against K = 1) against one more
call on the open session, i.e. what the MCP client layer and the agent loop add to a call once
the run's session is open (``peer_mcp_call_ratio``: the same for the peer).

Wall time (until the answer is returned) and client CPU (this thread's CPU time, including
the sessions a run ends after answering: the IdP and the MCP servers run on a thread of
their own, so their work is not counted) are medians over the rounds. Also: SQL
statements and commits per one-read opsbot turn on SQLite and, when the test PostgreSQL
server answers, on PostgreSQL (an agent of its own), counted in one more turn per database
and round that is not timed (counting wraps every driver call), and
``tools/list`` calls per cold and warm run.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import logging
import statistics
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from bench._support import OtherLoop

KS = (1, 4, 8)
# A turn the model answers without a tool: what a turn costs besides its tool calls.
ANSWER_ONLY = 0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--turns", type=int, default=15, help="measured rounds (median)")


async def _timed(
    work: Callable[[], Awaitable[None]], after: Callable[[], Awaitable[None]] | None = None
) -> tuple[float, float]:
    """Wall time of ``work``; CPU time of ``work`` and of ``after`` (work it left running in
    the background, such as ending sessions after the answer, which is still the turn's)."""
    cpu, wall = time.thread_time(), time.perf_counter()
    await work()
    elapsed = time.perf_counter() - wall
    if after is not None:
        await after()
    return elapsed * 1000, (time.thread_time() - cpu) * 1000


@contextlib.asynccontextmanager
async def _servers(tmp: Path) -> AsyncIterator[tuple[Any, Any, OtherLoop]]:
    from bench._support import OtherLoop
    from mcp_servers import start_reference_servers
    from testing.identity import start_dev_idp

    elsewhere = OtherLoop()
    try:
        idp = await elsewhere.enter(start_dev_idp())
        servers = await elsewhere.enter(
            start_reference_servers(issuer=idp.issuer, jwks_url=idp.jwks_url, data_dir=tmp)
        )
        yield idp, servers, elsewhere
    finally:
        await elsewhere.aclose()


async def run(args: argparse.Namespace | None = None) -> dict[str, Any]:
    from langchain.agents import create_agent
    from langchain.agents.structured_output import ToolStrategy
    from langchain_mcp_adapters.client import MultiServerMCPClient
    from langchain_mcp_adapters.tools import load_mcp_tools

    from agent_core.answer import FinalAnswer
    from agent_core.threads import PlatformRef
    from bench._support import postgres_reachable, throwaway_postgres
    from testing.agent import FunctionChatModel, open_agent_env
    from testing.mcp import mcp_session
    from testing.sql import count_statements
    from testing.turns import READ_KEYS, open_sql_agent, reads_then_answer

    turns = int(getattr(args, "turns", 0) or 15)
    # Log lines are the servers' and the clients' alike; rendering them is not the turn.
    logging.disable(logging.CRITICAL)
    with tempfile.TemporaryDirectory() as tmp:
        async with (
            _servers(Path(tmp)) as (idp, servers, _),
            open_agent_env(idp, servers) as env,
        ):
            alice = await env.user("alice")
            token = (await env.harness.broker.get_token(alice, "ticketing")).value
            agents = {}
            url = f"sqlite:///{tmp}/opsbot.db"
            async with contextlib.AsyncExitStack() as stack:
                for k in (*KS, ANSWER_ONLY):
                    model = FunctionChatModel(fn=reads_then_answer(k))
                    agents[k] = await stack.enter_async_context(
                        open_sql_agent(env, model, url, migrated=k != KS[0])
                    )
                databases = {"sqlite": agents[1]}
                if postgres_reachable():
                    pg_url = stack.enter_context(throwaway_postgres("opsbot_turn"))
                    model = FunctionChatModel(fn=reads_then_answer(1))
                    databases["postgresql"] = await stack.enter_async_context(
                        open_sql_agent(env, model, pg_url)
                    )
                client = MultiServerMCPClient(
                    {
                        "ticketing": {
                            "transport": "streamable_http",
                            "url": servers.ticketing.url,
                            "headers": {"Authorization": f"Bearer {token}"},
                        }
                    },
                    tool_name_prefix=True,
                )
                peer_session = await stack.enter_async_context(client.session("ticketing"))
                peer_tools = await load_mcp_tools(
                    peer_session, server_name="ticketing", tool_name_prefix=True
                )
                peers = {
                    k: create_agent(
                        FunctionChatModel(fn=reads_then_answer(k)),
                        tools=peer_tools,
                        response_format=ToolStrategy(FinalAnswer),
                    )
                    for k in (*KS, ANSWER_ONLY)
                }
                default_tools = await client.get_tools(server_name="ticketing")
                default_peers = {
                    k: create_agent(
                        FunctionChatModel(fn=reads_then_answer(k)),
                        tools=default_tools,
                        response_format=ToolStrategy(FinalAnswer),
                    )
                    for k in KS
                }
                floor_session = await stack.enter_async_context(
                    mcp_session(servers.ticketing, token)
                )
                await floor_session.list_tools()  # schemas known up front, as opsbot's cache

                async def floor(k: int) -> None:
                    for j in range(k):
                        result = await floor_session.call_tool(
                            "get_ticket", {"key": READ_KEYS[j % len(READ_KEYS)]}
                        )
                        assert not result.isError

                held: list[contextlib.AsyncExitStack] = []

                async def session_floor(k: int) -> None:
                    """The K calls on a session opened for them, as a run opens its own."""
                    stack = contextlib.AsyncExitStack()
                    held.append(stack)
                    session = await stack.enter_async_context(mcp_session(servers.ticketing, token))
                    for j in range(k):
                        result = await session.call_tool(
                            "get_ticket", {"key": READ_KEYS[j % len(READ_KEYS)]}
                        )
                        assert not result.isError

                async def close_session() -> None:
                    await held.pop().aclose()

                async def peer(k: int, i: int) -> None:
                    await peers[k].ainvoke({"messages": [("user", f"show {k} tickets ({i})")]})

                async def default_peer(k: int, i: int) -> None:
                    text = f"show {k} tickets ({i})"
                    await default_peers[k].ainvoke({"messages": [("user", text)]})

                sql_counts: dict[str, list[int]] = {db: [] for db in databases}

                runs = {"warm": 0}

                async def opsbot(k: int, i: int, db: str = "sqlite", counted: bool = False) -> None:
                    agent = agents[k] if db == "sqlite" else databases[db]
                    ref = PlatformRef("slack", "T-BENCH", db, f"{time.time_ns()}-{k}-{i}")
                    # Counting wraps every driver call: only in the untimed turns.
                    with count_statements() if counted else contextlib.nullcontext() as sql:
                        thread = await agent.threads.get_or_create(ref, alice.subject)
                        result = await agent.run(alice, thread.thread_id, f"show {k} tickets ({i})")
                    assert result.kind == "answer", result
                    if sql is not None:
                        sql_counts[db].append(sql.total)
                    if db == "sqlite" and i >= 0:
                        runs["warm"] += 1

                async def count_sql(i: int) -> None:
                    """One untimed one-read turn per database, its SQL counted."""
                    for db in databases:
                        await opsbot(1, i, db, counted=True)
                        await databases[db].settle()

                cold: dict[int, int] = {}
                for k in KS:  # warm-up: discovery, imports, first connections
                    before = agents[k].stats.list_tools_calls
                    await opsbot(k, -1)
                    await agents[k].settle()
                    cold[k] = agents[k].stats.list_tools_calls - before
                    await peer(k, -1)
                    await default_peer(k, -1)
                    await floor(k)
                    await session_floor(k)
                    await close_session()
                await opsbot(ANSWER_ONLY, -1)
                await peer(ANSWER_ONLY, -1)
                await count_sql(-1)
                for counts in sql_counts.values():
                    counts.clear()
                lists_before = sum(a.stats.list_tools_calls for a in agents.values())
                samples: dict[str, dict[int, list[tuple[float, float]]]] = {
                    name: {k: [] for k in KS}
                    for name in ("floor", "session_floor", "peer", "default_peer", "opsbot")
                }
                answer_only: dict[str, list[tuple[float, float]]] = {"opsbot": [], "peer": []}
                for i in range(turns):
                    for k in KS:
                        samples["floor"][k].append(await _timed(functools.partial(floor, k)))
                        samples["session_floor"][k].append(
                            await _timed(functools.partial(session_floor, k), close_session)
                        )
                        samples["peer"][k].append(await _timed(functools.partial(peer, k, i)))
                        samples["default_peer"][k].append(
                            await _timed(functools.partial(default_peer, k, i))
                        )
                        samples["opsbot"][k].append(
                            await _timed(functools.partial(opsbot, k, i), agents[k].settle)
                        )
                    answer_only["opsbot"].append(
                        await _timed(
                            functools.partial(opsbot, ANSWER_ONLY, i), agents[ANSWER_ONLY].settle
                        )
                    )
                    answer_only["peer"].append(
                        await _timed(functools.partial(peer, ANSWER_ONLY, i))
                    )
                    await count_sql(i)
                lists = sum(a.stats.list_tools_calls for a in agents.values()) - lists_before
                warm = lists / runs["warm"]

    def median(name: str, k: int, index: int) -> float:
        return round(statistics.median(s[index] for s in samples[name][k]), 2)

    wall = {n: {str(k): median(n, k, 0) for k in KS} for n in samples}
    cpu = {n: {str(k): median(n, k, 1) for k in KS} for n in samples}
    ops_cpu = cpu["opsbot"]

    def answer_median(name: str, index: int) -> float:
        return round(statistics.median(s[index] for s in answer_only[name]), 2)

    answer_cpu = {n: answer_median(n, 1) for n in answer_only}
    sql_by_database = {db: statistics.median(counts) for db, counts in sql_counts.items()}
    return {
        "turns": turns,
        "overhead_ratio": round(wall["opsbot"]["1"] / wall["floor"]["1"], 2),
        # The peer (the adapters' agent, no middleware, one open session) against the same
        # floor: what the agent loop alone adds to a one-read turn.
        "peer_overhead_ratio": round(wall["peer"]["1"] / wall["floor"]["1"], 2),
        "overhead_ratio_by_k": {
            str(k): round(wall["opsbot"][str(k)] / wall["floor"][str(k)], 2) for k in KS
        },
        # Against the same calls on a session opened for them (and closed after), as each
        # run opens its own (issue 19): what the run adds besides its session.
        "overhead_ratio_vs_session_floor": {
            str(k): round(wall["opsbot"][str(k)] / wall["session_floor"][str(k)], 2) for k in KS
        },
        # Against the adapters' default use (a session per call): at K = 1 both pay for one
        # session, as the design asks of a run.
        "overhead_ratio_vs_default_peer": {
            str(k): round(wall["opsbot"][str(k)] / wall["default_peer"][str(k)], 2) for k in KS
        },
        # Each call after the first in a turn (K = 8 against K = 1) against one more call on
        # the open session: what the MCP client layer (issue 19) and the agent loop add to
        # a call once the run's session is open, as the adapters' peer has it.
        "mcp_call_ratio": round(
            (wall["opsbot"]["8"] - wall["opsbot"]["1"]) / (wall["floor"]["8"] - wall["floor"]["1"]),
            2,
        ),
        "peer_mcp_call_ratio": round(
            (wall["peer"]["8"] - wall["peer"]["1"]) / (wall["floor"]["8"] - wall["floor"]["1"]), 2
        ),
        "cpu_ms_per_turn": ops_cpu,
        "peer_cpu_ratio": round(ops_cpu["1"] / cpu["peer"]["1"], 2),
        "default_peer_cpu_ratio": {
            str(k): round(ops_cpu[str(k)] / cpu["default_peer"][str(k)], 2) for k in KS
        },
        # Without a tool call (the model answers at once), and what one read adds to that: the
        # run's session (opened, closed) is in opsbot's, the peer's session stays open.
        "answer_only": {
            "wall_ms": {n: answer_median(n, 0) for n in answer_only},
            "cpu_ms": answer_cpu,
        },
        "one_read_adds_wall_ms": {
            "opsbot": round(wall["opsbot"]["1"] - answer_median("opsbot", 0), 2),
            "peer": round(wall["peer"]["1"] - answer_median("peer", 0), 2),
            "floor": wall["floor"]["1"],
        },
        "one_read_adds_cpu_ms": {
            "opsbot": round(ops_cpu["1"] - answer_cpu["opsbot"], 2),
            "peer": round(cpu["peer"]["1"] - answer_cpu["peer"], 2),
        },
        "cpu_ms_per_extra_call": round((ops_cpu["8"] - ops_cpu["1"]) / 7, 2),
        "peer_cpu_ms_per_extra_call": round((cpu["peer"]["8"] - cpu["peer"]["1"]) / 7, 2),
        # The goal holds on every database: the larger of their medians.
        "sql_statements_per_turn": max(sql_by_database.values()),
        "sql_statements_by_database": sql_by_database,
        "wall_ms": wall,
        "cpu_ms": cpu,
        "list_tools_calls_per_run": {"cold": cold[KS[0]], "warm": warm},
        "model": "scripted, zero latency",
        "database": "SQLite (checkpointer, threads, audit log); SQL also on "
        + (", ".join(db for db in sql_by_database if db != "sqlite") or "no PostgreSQL"),
    }
