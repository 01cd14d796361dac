"""Building the ``Agent`` from ``Settings`` (the only place agent settings are read)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langchain.agents.middleware import AgentMiddleware
from langgraph.checkpoint.base import BaseCheckpointSaver

from agent_core.agent import Agent, AgentConfig, RunCallbacks
from agent_core.binding import ToolObserver
from agent_core.models import build_model
from agent_core.policy import ToolPolicy
from agent_core.sessions import ServerConfig
from agent_core.threads import ThreadStore
from broker import Broker
from infra.settings import Settings


def agent_config(settings: Settings) -> AgentConfig:
    a = settings.agent
    return AgentConfig(
        servers=tuple(ServerConfig(s.name, s.url, s.audience) for s in settings.mcp_servers),
        run_model_call_limit=a.run_model_call_limit,
        thread_model_call_limit=a.thread_model_call_limit,
        read_timeout=a.read_timeout_seconds,
        write_timeout=a.write_timeout_seconds,
        read_retries=a.read_retries,
        summarize_trigger_tokens=a.summarize_trigger_tokens,
        summarize_keep_messages=a.summarize_keep_messages,
        tool_selector_threshold=a.tool_selector_threshold,
        tool_selector_max_tools=a.tool_selector_max_tools,
        bulk_write_threshold=a.bulk_write_threshold,
        health_check_interval=a.health_check_interval_seconds,
        breaker_threshold=a.breaker_threshold,
        breaker_open_seconds=a.breaker_open_seconds,
        tool_calls_per_turn=a.tool_calls_per_turn,
        pending_approvals_per_run=a.pending_approvals_per_run,
        write_attempts=a.write_attempts,
        write_retry_initial_delay=a.write_retry_initial_delay_seconds,
        write_retry_max_delay=a.write_retry_max_delay_seconds,
    )


def build_agent(
    settings: Settings,
    *,
    broker: Broker,
    threads: ThreadStore,
    checkpointer: BaseCheckpointSaver[str],
    observer: ToolObserver | None = None,
    run_callbacks: RunCallbacks | None = None,
    extra_middleware: Sequence[AgentMiddleware[Any, Any, Any]] = (),
) -> Agent:
    """The agent as configured: model + fallbacks, tool policy, servers and limits."""
    return Agent(
        agent_config(settings),
        model=build_model(settings.model),
        fallbacks=[build_model(m) for m in settings.model_fallbacks],
        broker=broker,
        threads=threads,
        checkpointer=checkpointer,
        policy=ToolPolicy.load(settings.tool_policy_path),
        observer=observer,
        run_callbacks=run_callbacks,
        extra_middleware=extra_middleware,
    )
