"""``AgentConfig``: the limits and thresholds of agent runs (from ``Settings.agent``)."""

from __future__ import annotations

from dataclasses import dataclass

from agent_core.proxies import DIRECT, Proxies
from agent_core.sessions import ServerConfig

__all__ = ["AgentConfig"]


@dataclass(frozen=True, slots=True)
class AgentConfig:
    """Limits and thresholds for runs (from ``Settings.agent``)."""

    servers: tuple[ServerConfig, ...]
    run_model_call_limit: int = 12
    thread_model_call_limit: int = 200
    read_timeout: float = 20.0
    write_timeout: float = 30.0
    read_retries: int = 2
    retry_initial_delay: float = 0.5
    summarize_trigger_tokens: int = 4000
    summarize_keep_messages: int = 20
    tool_selector_threshold: int = 15
    tool_selector_max_tools: int = 8
    bulk_write_threshold: int = 3
    health_check_interval: float = 10.0
    tools_max_age: float = 600.0
    breaker_threshold: int = 3
    breaker_open_seconds: float = 30.0
    tool_calls_per_turn: int = 8
    pending_approvals_per_run: int = 5
    write_attempts: int = 3
    write_retry_initial_delay: float = 0.5
    write_retry_max_delay: float = 4.0
    proxies: Proxies = DIRECT  # the MCP servers' (from settings: HTTPS_PROXY, ...)
