"""Per-turn checkpoint write cost: SQLite vs PostgreSQL, across LangGraph durability modes.

A turn is the shape of a one-tool agent turn: ``model → tools → model`` (three supersteps,
each appending messages), run on a graph compiled with each checkpointer. The cost is the
turn time with a checkpointer minus the same turn with none (``InMemorySaver`` is shown too).
Durability modes: ``exit`` (write once when the run ends), ``async`` (write each step in the
background), ``sync`` (write each step before the next starts: the crash-safe one).

    uv run python -m bench checkpointer                 # 40 turns per cell, 5 threads
    uv run python -m bench checkpointer --turns 200 --no-postgres
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.graph import END, START, MessagesState, StateGraph

from bench._support import percentile, postgres_reachable, throwaway_postgres

MODES = ("exit", "async", "sync")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--turns", type=int, default=40, help="measured turns per cell")
    parser.add_argument("--threads", type=int, default=5, help="threads the turns rotate over")
    parser.add_argument("--no-postgres", action="store_true", help="SQLite and memory only")


def _graph(saver: Any) -> Any:
    def model(state: MessagesState) -> dict[str, Any]:
        if isinstance(state["messages"][-1], ToolMessage):
            return {"messages": [AIMessage(content="done: " + "x" * 400)]}
        call = {"name": "lookup", "args": {"key": "PAY-101"}, "id": f"c{len(state['messages'])}"}
        return {"messages": [AIMessage(content="", tool_calls=[call])]}

    def tools(state: MessagesState) -> dict[str, Any]:
        last = state["messages"][-1]
        call_id = last.tool_calls[0]["id"]  # type: ignore[attr-defined]
        return {"messages": [ToolMessage(content='{"status": "open"}' * 20, tool_call_id=call_id)]}

    def route(state: MessagesState) -> str:
        last = state["messages"][-1]
        return "tools" if getattr(last, "tool_calls", None) else END

    builder = StateGraph(MessagesState)
    builder.add_node("model", model)
    builder.add_node("tools", tools)
    builder.add_edge(START, "model")
    builder.add_conditional_edges("model", route, ["tools", END])
    builder.add_edge("tools", "model")
    return builder.compile(checkpointer=saver)


@contextlib.asynccontextmanager
async def _savers(tmp: Path, with_postgres: bool) -> AsyncIterator[dict[str, Any]]:
    from langgraph.checkpoint.memory import InMemorySaver

    from agent_core.checkpointer import open_checkpointer

    async with contextlib.AsyncExitStack() as stack:
        savers: dict[str, Any] = {"none": None, "memory": InMemorySaver()}
        sqlite_url = f"sqlite:///{tmp / 'checkpoints.db'}"
        savers["sqlite"] = await stack.enter_async_context(open_checkpointer(sqlite_url))
        if with_postgres:
            url = stack.enter_context(throwaway_postgres("opsbot_bench_ckpt"))
            savers["postgres"] = await stack.enter_async_context(open_checkpointer(url))
        yield savers


async def _measure(saver: Any, mode: str, turns: int, threads: int, tag: str) -> list[float]:
    graph = _graph(saver)
    times: list[float] = []
    for i in range(turns + 2):  # two warm-up turns
        config = {"configurable": {"thread_id": f"{tag}-{mode}-{i % threads}"}}
        started = time.perf_counter()
        await graph.ainvoke(
            {"messages": [HumanMessage(content=f"question {i}")]},
            config,
            durability=mode if saver is not None else None,
        )
        if i >= 2:
            times.append((time.perf_counter() - started) * 1000)
    return times


async def run(args: argparse.Namespace | None = None) -> dict[str, Any]:
    turns = int(getattr(args, "turns", 0) or 40)
    threads = int(getattr(args, "threads", 0) or 5)
    with_postgres = not getattr(args, "no_postgres", False) and postgres_reachable()
    cells: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        async with _savers(Path(tmp), with_postgres) as savers:
            baseline = statistics.median(await _measure(None, "exit", turns, threads, "none"))
            for name, saver in savers.items():
                if saver is None:
                    continue
                for mode in MODES:
                    times = await _measure(saver, mode, turns, threads, name)
                    p50 = statistics.median(times)
                    cells[f"{name}/{mode}"] = {
                        "turn_ms_p50": round(p50, 2),
                        "turn_ms_p95": round(percentile(times, 0.95), 2),
                        "write_cost_ms_p50": round(max(0.0, p50 - baseline), 2),
                    }
    result: dict[str, Any] = {
        "turns_per_cell": turns,
        "supersteps_per_turn": 3,
        "no_checkpointer_turn_ms_p50": round(baseline, 2),
    }
    for key in ("sqlite/sync", "sqlite/exit", "postgres/sync", "postgres/exit"):
        if key in cells:
            result[f"{key.replace('/', '_')}_write_ms"] = cells[key]["write_cost_ms_p50"]
    result["postgres"] = with_postgres
    result["cells"] = cells
    return result
