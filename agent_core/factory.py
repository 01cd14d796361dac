"""Building the ``Agent`` from ``Settings`` (the only place agent settings are read)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from langchain.agents.middleware import AgentMiddleware
from langgraph.checkpoint.base import BaseCheckpointSaver

from agent_core.agent import Agent, RunCallbacks
from agent_core.binding import ToolObserver
from agent_core.config import AgentConfig
from agent_core.credentials import OAuthTokenSource, ServerConfig
from agent_core.errors import AgentError
from agent_core.models import build_model
from agent_core.policy import ToolPolicy
from agent_core.proxies import Proxies, parse_no_proxy
from agent_core.threads import ThreadStore
from broker import Broker
from infra.settings import McpServerSettings, Settings

log = logging.getLogger(__name__)


class ServerConfigError(AgentError):
    """An MCP server's configuration cannot work (named in the message)."""


def server_config(s: McpServerSettings) -> ServerConfig:
    """One server's settings as the MCP client uses them (the static secret resolved)."""
    return ServerConfig(
        name=s.name,
        url=s.url,
        audience=s.audience or "",
        auth=s.auth,
        timeout_s=s.timeout_s,
        breaker_threshold=s.breaker_threshold,
        breaker_open_seconds=s.breaker_open_seconds,
        header_name=s.header_name,
        header_value=s.header_value.get_secret_value() if s.header_value else None,
        trust_read_only_hint=s.trust_read_only_hint,
    )


def agent_config(settings: Settings) -> AgentConfig:
    a = settings.agent
    return AgentConfig(
        servers=tuple(server_config(s) for s in settings.mcp_servers),
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
        tools_max_age=a.tools_max_age_seconds,
        breaker_threshold=a.breaker_threshold,
        breaker_open_seconds=a.breaker_open_seconds,
        tool_calls_per_turn=a.tool_calls_per_turn,
        pending_approvals_per_run=a.pending_approvals_per_run,
        write_attempts=a.write_attempts,
        write_retry_initial_delay=a.write_retry_initial_delay_seconds,
        write_retry_max_delay=a.write_retry_max_delay_seconds,
        proxies=Proxies(
            http=settings.http_proxy,
            https=settings.https_proxy,
            no_proxy=parse_no_proxy(settings.no_proxy),
        ),
    )


def check_servers(servers: Sequence[ServerConfig], *, oauth_available: bool) -> None:
    """Refuse what cannot work, before anything is built."""
    for s in servers:
        if s.auth == "oauth" and not oauth_available:
            raise ServerConfigError(
                f"OPSBOT_MCP_SERVERS: server {s.name!r} has auth 'oauth', but per-user OAuth "
                "is not available in this deployment; use exchange, static or none"
            )


def log_servers(config: AgentConfig) -> None:
    """One line per server (its auth mode, its per-call timeout), once the agent was built: a
    configuration error found while building stays the only line the operator sees. The
    line with its tool counts follows when it is listed (``Agent.list_at_start``)."""
    for s in config.servers:
        timeout = (
            f"{s.timeout_s:g}s"
            if s.timeout_s is not None
            else f"{config.read_timeout:g}s reads, {config.write_timeout:g}s writes"
        )
        log.info(
            "mcp server %s: auth=%s url=%s timeout=%s acting as %s%s",
            s.name,
            s.auth,
            s.url,
            timeout,
            s.acting_as,
            # Listing its tools takes a user's token: counted in a line at the first run.
            "; tools listed at the first run" if s.acting_as == "user" else "",
        )
        if s.auth == "none":
            log.warning(
                "mcp server %s runs with auth none: it gets no credential, and anyone who "
                "can reach it can use it",
                s.name,
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
    oauth_token: OAuthTokenSource | None = None,
) -> Agent:
    """The agent as configured: model + fallbacks, tool policy, servers and limits."""
    config = agent_config(settings)
    check_servers(config.servers, oauth_available=oauth_token is not None)
    agent = Agent(
        config,
        model=build_model(settings.model),
        fallbacks=[build_model(m) for m in settings.model_fallbacks],
        broker=broker,
        threads=threads,
        checkpointer=checkpointer,
        policy=ToolPolicy.load(settings.tool_policy_path),
        observer=observer,
        run_callbacks=run_callbacks,
        extra_middleware=extra_middleware,
        oauth_token=oauth_token,
    )
    log_servers(config)
    return agent
