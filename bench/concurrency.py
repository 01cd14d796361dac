"""M concurrent conversations through the real agent, with a model that waits L ms per call.

Each conversation runs T turns; a turn is ``model → fake_lookup (MCP over HTTP) → model``,
with a scripted model that sleeps L ms per call (an LLM's latency, not CPU). Reports
throughput, p50/p95 of turn time minus the model's own waiting (what opsbot adds:
graph, middleware, tokens, MCP call, checkpoints) and the process's peak RSS.

    uv run python -m bench concurrency                       # M=200, L=500 ms, T=1, SQLite
    uv run python -m bench concurrency --m 50 --latency-ms 100 --checkpointer postgres
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from langchain_core.callbacks import AsyncCallbackManagerForLLMRun
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.outputs import ChatResult
from pydantic import Field

from bench._support import peak_rss_mb, percentile, postgres_reachable, throwaway_postgres
from testing.agent import FunctionChatModel, call, final, tool_results


class WaitingModel(FunctionChatModel):
    """A scripted model that awaits ``latency`` seconds per call without holding a thread."""

    latency: float = 0.5
    waited: dict[str, float] = Field(default_factory=dict)

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        first = next((m for m in messages if isinstance(m, HumanMessage)), None)
        key = str(first.content) if first is not None else ""
        started = time.perf_counter()
        await asyncio.sleep(self.latency)
        self.waited[key] = self.waited.get(key, 0.0) + time.perf_counter() - started
        return self._generate(messages, stop, None, **kwargs)


def _step(messages: list[BaseMessage]) -> AIMessage:
    if tool_results(messages):
        return final("looked it up", [("fake", "item-1")])
    return call("fake_lookup", item="item-1")


def _quiet() -> None:
    """Per-request INFO logs of the MCP server and client would dominate the measurement."""
    import logging

    for name in ("mcp", "httpx", "uvicorn", "langgraph", "agent_core", "FastMCP"):
        logging.getLogger(name).setLevel(logging.CRITICAL)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--m", type=int, default=200, help="concurrent conversations")
    parser.add_argument("--latency-ms", type=float, default=500.0, help="model wait per call")
    parser.add_argument("--turns", type=int, default=1, help="turns per conversation")
    parser.add_argument(
        "--checkpointer", choices=("memory", "sqlite", "postgres"), default="sqlite"
    )


@contextlib.asynccontextmanager
async def _saver(kind: str, tmp: Path) -> AsyncIterator[Any]:
    from agent_core.checkpointer import MEMORY_URL, open_checkpointer

    if kind == "postgres":
        if not postgres_reachable():
            raise SystemExit("PostgreSQL is not reachable at the test database URL")
        with throwaway_postgres("opsbot_bench_conc") as url:
            async with open_checkpointer(url, pool_size=20) as saver:
                yield saver
        return
    url = MEMORY_URL if kind == "memory" else f"sqlite:///{tmp / 'checkpoints.db'}"
    async with open_checkpointer(url) as saver:
        yield saver


async def run(args: argparse.Namespace | None = None) -> dict[str, Any]:
    from agent_core import Agent, AgentConfig, ServerConfig, ToolPolicy
    from agent_core.threads import MemoryThreadStore, PlatformRef
    from broker import Identity
    from broker.types import ChatUser
    from testing.agent import FAKE_POLICY, FakeBroker, fake_mcp_server

    _quiet()
    m = int(getattr(args, "m", 0) or 200)
    latency = float(getattr(args, "latency_ms", 0) or 500.0) / 1000
    turns = int(getattr(args, "turns", 0) or 1)
    kind = str(getattr(args, "checkpointer", None) or "sqlite")

    model = WaitingModel(fn=_step, latency=latency)
    with tempfile.TemporaryDirectory() as tmp:
        async with fake_mcp_server() as (url, _plan), _saver(kind, Path(tmp)) as saver:
            agent = Agent(
                AgentConfig(servers=(ServerConfig("fake", url, url),), retry_initial_delay=0.0),
                model=model,
                broker=FakeBroker(audiences={"fake": url}),
                threads=MemoryThreadStore(),
                checkpointer=saver,
                policy=ToolPolicy.from_yaml(FAKE_POLICY),
            )
            users = [
                Identity(f"user{i}", ChatUser("slack", "T-B", f"U{i}"), f"u{i}@x", ("team-b",))
                for i in range(m)
            ]
            overheads: list[float] = []
            failures = 0

            async def conversation(i: int) -> None:
                nonlocal failures
                ref = PlatformRef("slack", "T-B", "C-B", f"conc-{i}")
                thread = await agent.threads.get_or_create(ref, users[i].subject)
                for t in range(turns):
                    text = f"conversation {i} turn {t}"
                    started = time.perf_counter()
                    result = await agent.run(users[i], thread.thread_id, text)
                    elapsed = time.perf_counter() - started
                    if result.kind != "answer":
                        failures += 1
                    overheads.append((elapsed - model.waited.get(text, 0.0)) * 1000)

            await conversation(-1 % m)  # warm-up: tool discovery, first connections
            overheads.clear()
            wall = time.perf_counter()
            await asyncio.gather(*(conversation(i) for i in range(m)))
            wall_s = time.perf_counter() - wall
    done = m * turns
    return {
        "conversations": m,
        "turns_each": turns,
        "model_latency_ms": latency * 1000,
        "checkpointer": kind,
        "turns_total": done,
        "failed": failures,
        "wall_s": round(wall_s, 2),
        "throughput_turns_per_s": round(done / wall_s, 1),
        "overhead_ms_p50": round(statistics.median(overheads), 1),
        "overhead_ms_p95": round(percentile(overheads, 0.95), 1),
        "model_wait_per_turn_ms": round(2 * latency * 1000, 1),
        "peak_rss_mb": peak_rss_mb(),
    }
