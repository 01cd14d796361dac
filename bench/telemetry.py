"""Cost of operations telemetry per agent turn: the same turn (K ticketing reads, zero-latency
scripted model) with and without run telemetry (spans to an in-memory exporter through the
batch processor, Prometheus counters) and the tool-metrics observer. Turns alternate between
the two agents so drift hits both equally."""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

KEYS = ["PAY-101", "PAY-102", "PAY-103", "PAY-104"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--calls", type=int, default=4, help="K tool calls per turn")
    parser.add_argument("--turns", type=int, default=20, help="measured turns per variant")
    parser.add_argument(
        "--no-export", action="store_true", help="tracing off (the default without OTLP)"
    )


async def run(args: argparse.Namespace | None = None) -> dict[str, Any]:
    from langchain_core.messages import BaseMessage
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from agent_core import Agent
    from agent_core.threads import PlatformRef
    from infra.settings import ObservabilitySettings
    from mcp_servers import start_reference_servers
    from opsbot.observability import RunInstrumentation, ToolMetrics, Tracing
    from testing.agent import FunctionChatModel, call, final, open_agent_env, tool_results
    from testing.identity import start_dev_idp

    k = int(getattr(args, "calls", 0) or 4)
    turns = int(getattr(args, "turns", 0) or 20)

    def step(messages: list[BaseMessage]) -> Any:
        done = len(tool_results(messages))
        if done < k:
            return call("ticketing_get_ticket", key=KEYS[done % len(KEYS)])
        return final("done", [("ticketing", KEYS[0])])

    exporter = InMemorySpanExporter()
    no_export = bool(getattr(args, "no_export", False))
    tracing = Tracing.from_settings(
        ObservabilitySettings(), exporter=None if no_export else exporter
    )
    with tempfile.TemporaryDirectory() as tmp:
        async with (
            start_dev_idp() as idp,
            start_reference_servers(
                issuer=idp.issuer, jwks_url=idp.jwks_url, data_dir=Path(tmp)
            ) as servers,
            open_agent_env(idp, servers) as env,
        ):
            plain = env.agent(FunctionChatModel(fn=step))
            instrumented = Agent(
                plain.config,
                model=FunctionChatModel(fn=step),
                broker=env.harness.broker,
                threads=plain.threads,
                checkpointer=plain.checkpointer,
                policy=plain.policy,
                observer=ToolMetrics(),
                run_callbacks=RunInstrumentation(tracing),
            )
            alice = await env.user("alice")

            async def turn(agent: Agent, i: int) -> float:
                ref = PlatformRef("slack", "T-BENCH", "C-BENCH", f"{time.time_ns()}-{i}")
                thread = await agent.threads.get_or_create(ref, alice.subject)
                started = time.perf_counter()
                result = await agent.run(alice, thread.thread_id, f"show {k} tickets ({i})")
                elapsed = (time.perf_counter() - started) * 1000
                assert result.kind == "answer", result
                return elapsed

            await turn(plain, -1)  # warm both: discovery, tokens
            await turn(instrumented, -2)
            plain_ms: list[float] = []
            instrumented_ms: list[float] = []
            for i in range(turns):
                plain_ms.append(await turn(plain, i))
                instrumented_ms.append(await turn(instrumented, i))
            tracing.flush()
            spans = len(exporter.get_finished_spans())
    tracing.shutdown()
    p50_plain = statistics.median(plain_ms)
    p50_inst = statistics.median(instrumented_ms)
    return {
        "k_tool_calls": k,
        "turns_per_variant": turns,
        "plain_turn_ms_p50": round(p50_plain, 2),
        "instrumented_turn_ms_p50": round(p50_inst, 2),
        "telemetry_overhead_ms_p50": round(p50_inst - p50_plain, 2),
        "telemetry_overhead_pct": round(100 * (p50_inst - p50_plain) / p50_plain, 1),
        "spans_per_turn": round(spans / (turns + 1), 1),
        "tracing": "off (no-op tracer)" if no_export else "in-memory exporter",
        "model": "scripted, zero latency",
    }
