"""Wiring of operations into the assembled app: telemetry hooks, runtime gauges and user
memory, built from ``Settings`` once per process (``open_assistant`` uses it).

Example::

    async with open_operations(settings, identities) as ops:
        audit = AuditLog(ops.audit_sink(SqlAuditSink(engine)))
        agent = build_agent(settings, ..., observer=ops.observer(AuditObserver(audit)),
                            run_callbacks=ops.run_callbacks)
        with ops.watch(agent):
            ...
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any

from agent_core.agent import Agent
from agent_core.binding import ToolObserver
from audit.log import AuditSink
from broker.metrics import BrokerMetrics
from broker.types import IdentityService
from infra.settings import Settings
from memory.chat import MemoryCommands
from memory.prompt import PreferencesMiddleware
from memory.store import UserMemory, open_memory_store
from opsbot.observability import (
    ApprovalMetricsSink,
    ObserverChain,
    RunInstrumentation,
    ToolMetrics,
    Tracing,
    watching,
)


@dataclass
class Operations:
    settings: Settings
    tracing: Tracing
    run_callbacks: RunInstrumentation
    memory: MemoryCommands | None

    def middleware(self) -> list[Any]:
        """Agent middleware: the user's saved preferences in the system prompt."""
        if self.memory is None:
            return []
        return [PreferencesMiddleware(self.memory.memory)]

    @staticmethod
    def audit_sink(inner: AuditSink) -> AuditSink:
        return ApprovalMetricsSink(inner)

    @staticmethod
    def observer(audit_observer: ToolObserver) -> ToolObserver:
        return ObserverChain(audit_observer, ToolMetrics())

    @contextlib.contextmanager
    def watch(self, agent: Agent, broker_metrics: BrokerMetrics | None = None) -> Iterator[None]:
        """Publish the agent's circuit breakers and the in-process broker's counters."""
        with watching(agent.health, [s.name for s in self.settings.mcp_servers], broker_metrics):
            yield


@contextlib.asynccontextmanager
async def open_operations(
    settings: Settings, identities: IdentityService, *, tracing: Tracing | None = None
) -> AsyncIterator[Operations]:
    tracing = tracing or Tracing.from_settings(settings.observability)
    instrumentation = RunInstrumentation(tracing, dict(settings.observability.model_prices))
    try:
        if not settings.memory.enabled:
            yield Operations(settings, tracing, instrumentation, None)
            return
        async with open_memory_store(
            settings.resolved_database_url, pool_size=settings.pools.memory
        ) as store:
            memory = MemoryCommands(UserMemory(store), identities)
            yield Operations(settings, tracing, instrumentation, memory)
    finally:
        tracing.shutdown()
