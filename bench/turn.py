"""One agent turn against the reference servers vs. the same MCP calls made directly.

A zero-latency scripted model makes K ``ticketing_get_ticket`` calls (one per step) and then
answers; the turn runs through the whole agent (thread check, health, tokens, per-run session,
middleware, checkpointer, answer verification). The baseline makes the same K calls with the
MCP client on an already-open session (the honest "direct" figure). Also reports how many
``tools/list`` calls a cold and a warm run make (warm must be 0).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

KEYS = ["PAY-101", "PAY-102", "PAY-103", "PAY-104"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--calls", type=int, default=8, help="K tool calls per turn")
    parser.add_argument("--turns", type=int, default=15, help="measured turns (median)")


async def run(args: argparse.Namespace | None = None) -> dict[str, Any]:
    from langchain_core.messages import BaseMessage

    from agent_core.threads import PlatformRef
    from mcp_servers import start_reference_servers
    from testing.agent import FunctionChatModel, call, final, open_agent_env, tool_results
    from testing.identity import start_dev_idp
    from testing.mcp import mcp_session

    k = int(getattr(args, "calls", 0) or 8)
    turns = int(getattr(args, "turns", 0) or 15)

    def step(messages: list[BaseMessage]) -> Any:
        done = len(tool_results(messages))
        if done < k:
            return call("ticketing_get_ticket", key=KEYS[done % len(KEYS)])
        return final("done", [("ticketing", KEYS[0])])

    with tempfile.TemporaryDirectory() as tmp:
        async with (
            start_dev_idp() as idp,
            start_reference_servers(
                issuer=idp.issuer, jwks_url=idp.jwks_url, data_dir=Path(tmp)
            ) as servers,
            open_agent_env(idp, servers) as env,
        ):
            model = FunctionChatModel(fn=step)
            agent = env.agent(model)
            alice = await env.user("alice")

            async def turn(i: int) -> float:
                ref = PlatformRef("slack", "T-BENCH", "C-BENCH", f"{time.time_ns()}-{i}")
                thread = await agent.threads.get_or_create(ref, alice.subject)
                started = time.perf_counter()
                result = await agent.run(alice, thread.thread_id, f"show {k} tickets ({i})")
                elapsed = (time.perf_counter() - started) * 1000
                assert result.kind == "answer", result
                return elapsed

            before = agent.stats.list_tools_calls
            await turn(-1)
            cold = agent.stats.list_tools_calls - before
            before = agent.stats.list_tools_calls
            agent_ms = [await turn(i) for i in range(turns)]
            warm = (agent.stats.list_tools_calls - before) / turns

            token = (await env.harness.broker.get_token(alice, "ticketing")).value
            direct_ms: list[float] = []
            async with mcp_session(servers.ticketing, token) as session:
                await session.list_tools()  # as the agent's cache does: schemas known up front
                for _ in range(turns):
                    started = time.perf_counter()
                    for j in range(k):
                        result = await session.call_tool("get_ticket", {"key": KEYS[j % 4]})
                        assert not result.isError
                    direct_ms.append((time.perf_counter() - started) * 1000)

    agent_median = statistics.median(agent_ms)
    direct_median = statistics.median(direct_ms)
    return {
        "k_tool_calls": k,
        "turns": turns,
        "agent_turn_ms_p50": round(agent_median, 2),
        "agent_turn_ms_max": round(max(agent_ms), 2),
        "direct_k_calls_ms_p50": round(direct_median, 2),
        "agent_per_call_ms": round(agent_median / k, 2),
        "direct_per_call_ms": round(direct_median / k, 2),
        "overhead_ratio": round(agent_median / direct_median, 2),
        "list_tools_calls_per_run": {"cold": cold, "warm": warm},
        "model": "scripted, zero latency",
        "baseline": "same K calls with the MCP client on an already-open session",
    }
