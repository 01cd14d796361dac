"""``opsbot slack``: run the Slack app — HTTP mode on ``$PORT`` (``POST /slack/events``) or
Socket Mode (``--socket-mode``, needs ``SLACK_APP_TOKEN``)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import socket
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from datetime import timedelta
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from assistant.types import ChatUser, ConnectRefused, ServerConnected
    from bot.slack import SlackBotConfig
    from bot.slack.core import AssistantPort
    from infra.settings import Settings

    AssistantFactory = Callable[[Settings], AbstractAsyncContextManager[AssistantPort]]

log = logging.getLogger(__name__)


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    parser = subparsers.add_parser(
        "slack", help="run the Slack app (HTTP mode on $PORT, or --socket-mode)"
    )
    parser.add_argument(
        "--socket-mode", action="store_true", help="connect over Socket Mode instead of HTTP"
    )
    parser.add_argument("--host", default="0.0.0.0", help="HTTP mode: interface to bind")  # noqa: S104
    parser.add_argument("--port", type=int, default=None, help="HTTP mode: port (default $PORT)")
    parser.set_defaults(handler=handle, check=check)


def check(args: argparse.Namespace, settings: Settings) -> None:
    """Before anything is imported: the Slack secrets, and the link key in-process."""
    from opsbot.config_check import require_link_key, require_slack

    require_slack(settings, socket_mode=args.socket_mode)
    if settings.broker.mode == "inprocess":
        require_link_key(settings)


def slack_config(settings: Settings) -> SlackBotConfig:
    """The adapter's config from the settings; refuses to start without the secrets."""
    from bot.slack import SlackBotConfig

    if settings.slack_bot_token is None or settings.slack_signing_secret is None:
        raise SystemExit("SLACK_BOT_TOKEN and SLACK_SIGNING_SECRET must be set")
    return SlackBotConfig(
        bot_token=settings.slack_bot_token.get_secret_value(),
        signing_secret=settings.slack_signing_secret.get_secret_value(),
        api_url=settings.slack_api_url,
        approvals_channel=settings.slack.approvals_channel,
        allowed_team_ids=frozenset(settings.slack.allowed_team_ids),
        app_token=(
            settings.slack_app_token.get_secret_value() if settings.slack_app_token else None
        ),
        submission_wait_seconds=settings.slack.submission_wait_seconds,
        max_message_chars=settings.slack.max_message_chars,
        rate_limit_retries=settings.slack.rate_limit_retries,
        server_error_retries=settings.slack.server_error_retries,
        user_connections=settings.slack.user_connections,
        streaming=settings.slack.streaming,
    )


async def handle(args: argparse.Namespace, settings: Settings) -> int:
    from infra.faults import arm
    from infra.serving import shutdown_event

    arm(settings.test_crash_at)  # test only: unset in any deployment
    stop = shutdown_event()
    port = settings.port if args.port is None else args.port
    await serve_slack(settings, socket_mode=args.socket_mode, host=args.host, port=port, stop=stop)
    return 0


def open_configured_bot(
    settings: Settings, config: Any, assistant: Any, engine: Any, socket_mode: bool
) -> Any:
    """The bot with durable runs (``infra.jobs``) unless ``OPSBOT_RUNS__DURABLE=false``."""
    from bot.slack import open_bot
    from bot.slack.durable import open_durable_bot
    from opsbot.commands.chat_app import durable_run_options

    if not settings.runs.durable:
        return open_bot(config, assistant, engine, socket_mode=socket_mode)
    options = durable_run_options(settings)
    return open_durable_bot(config, assistant, engine, socket_mode=socket_mode, **options)


async def serve_slack(
    settings: Settings,
    *,
    socket_mode: bool,
    host: str,
    port: int,
    stop: asyncio.Event,
    on_ready: Callable[[str], None] | None = None,
    assistant_factory: AssistantFactory | None = None,
    sock: socket.socket | None = None,
    with_teams: bool = False,
) -> None:
    """Run the Slack app until ``stop`` is set: HTTP (``on_ready`` gets the base URL) or
    Socket Mode; plus the in-process expiry sweeper and pruning of processed event ids.

    HTTP mode listens on ``sock`` when given (bound by the caller, e.g. the sandbox, which
    binds every port first), else on ``host:port``. ``with_teams`` (``opsbot serve``) adds
    the Teams app's ``/api/messages`` to the same aiohttp server, one process for both."""
    from bot.slack import SqlProcessedEvents, run_socket_mode, serve_http
    from infra.observability.loop import LoopLagMonitor
    from infra.serving import bind_socket
    from opsbot.commands.chat_app import link_callback, open_jobs_engine, prune_forever, running
    from opsbot.observability import (
        Readiness,
        ops_routes,
        refresh_runtime_gauges,
        request_metrics,
    )
    from opsbot.wiring import open_assistant

    config = slack_config(settings)
    if socket_mode and not config.app_token:
        raise SystemExit("--socket-mode needs SLACK_APP_TOKEN")
    factory = assistant_factory or open_assistant
    engine, schema = await open_jobs_engine(settings)
    try:
        async with (
            factory(settings) as assistant,
            open_configured_bot(settings, config, assistant, engine, socket_mode) as bot,
            contextlib.AsyncExitStack() as platforms,
        ):
            announce: Callable[[Any], Awaitable[None]] = bot.adapter.announce
            linked: Callable[[ChatUser, str], Awaitable[None]] = bot.adapter.linked
            teams_routes: list[Any] = []
            teams_front: Any = None
            if with_teams:
                from opsbot.commands.teams import with_teams_app

                announce, linked, teams_routes, teams_front = await platforms.enter_async_context(
                    with_teams_app(settings, assistant, engine, announce, linked)
                )
            await platforms.enter_async_context(
                running(
                    LoopLagMonitor("main").run_forever(),
                    prune_forever(
                        SqlProcessedEvents(engine),
                        timedelta(hours=settings.slack.event_retention_hours),
                        "processed Slack event ids",
                    ),
                    assistant.sweep_forever(
                        settings.approvals.sweep_interval_seconds, announce, platform="slack"
                    ),
                    # Approvals requested or decided on another platform (Teams): Slack's
                    # copy. With Teams in this process (`opsbot serve`) it has its own loop.
                    assistant.notices_forever(
                        "slack", settings.approvals.notice_poll_seconds, bot.adapter.on_notice
                    ),
                )
            )
            if socket_mode:
                assert config.app_token is not None
                log.info("opsbot slack: Socket Mode")
                if on_ready is not None:
                    on_ready("socket-mode")
                await run_socket_mode(bot.app, config.app_token, stop)
            else:
                # in-process, this process finishes account links; a remote broker
                # service serves /oauth/callback itself
                callback = (
                    link_callback(assistant, linked, "Slack")
                    if settings.broker.mode == "inprocess"
                    else None
                )
                front = _ack_front(settings, bot.adapter)
                # Teams on the same ack loop when both have one, else on this loop.
                fronts = [teams_front] if front is not None and teams_front else []
                routes = [
                    *ops_routes(
                        Readiness.from_settings(settings, engine, schema),
                        refresh_runtime_gauges,
                    ),
                    *([] if fronts else teams_routes),
                ]
                # MCP servers in ``auth: oauth`` mode send the browser back here when
                # OPSBOT_BROKER__MCP_OAUTH_CALLBACK_URL names this app (in both modes).
                connect = (
                    _server_connect(assistant, bot.adapter.server_connected)
                    if any(s.auth == "oauth" for s in settings.mcp_servers)
                    else None
                )
                async with serve_http(
                    bot.app,
                    sock or bind_socket(host, port),
                    callback,
                    routes=routes,
                    middlewares=[request_metrics],
                    max_body_bytes=settings.slack.max_body_bytes,
                    front=front,
                    server_connect=connect,
                    fronts=fronts,
                ) as url:
                    log.info("opsbot slack: listening on %s/slack/events", url)
                    if on_ready is not None:
                        on_ready(url)
                    await stop.wait()
    finally:
        await engine.dispose()


def _ack_front(settings: Settings, adapter: Any) -> Any:
    """With durable runs, Slack is acked on a thread, loop and pool of its own
    (``bot.slack.front``); without them the answer runs in process and there is nothing to
    store first."""
    from bot.slack.durable import DurableSlackAdapter
    from bot.slack.front import AckFront

    if not isinstance(adapter, DurableSlackAdapter) or not settings.slack.ack_on_own_loop:
        return None
    return AckFront(adapter, settings.resolved_database_url, pool_size=settings.pools.ack)


def _server_connect(
    assistant: AssistantPort, connected: Callable[[ChatUser, str], Awaitable[None]]
) -> Callable[[str, str, str | None], Awaitable[ServerConnected | ConnectRefused]]:
    """Finish connecting an MCP server (``/oauth/mcp/callback``) and replace the user's
    *Connect <server>* prompt, as ``link_callback`` does for account links."""
    from assistant.types import ServerConnected

    async def complete(state: str, code: str, iss: str | None) -> ServerConnected | ConnectRefused:
        result = await assistant.complete_server_connect(state, code, iss=iss)
        if isinstance(result, ServerConnected):
            try:
                await connected(result.chat_user, result.server)
            except Exception:  # connected all the same; a stale prompt is only cosmetic
                log.warning("could not update Slack after connecting %s", result.server)
        return result

    return complete
