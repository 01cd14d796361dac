"""``opsbot teams``: run the Teams app alone (``POST /api/messages`` on ``$PORT``), or
``opsbot teams package``: write the Teams app package (manifest v1.30 and icons) as a zip.
``opsbot serve`` (``opsbot.commands.serve``) runs Slack and Teams in one process."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from aiohttp import web

    from bot.teams import TeamsBot, TeamsBotConfig
    from bot.teams.core import AssistantPort, ChatUser
    from infra.settings import Settings

    AssistantFactory = Callable[[Settings], AbstractAsyncContextManager[AssistantPort]]

log = logging.getLogger(__name__)


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    parser = subparsers.add_parser(
        "teams",
        help="run the Teams app (POST /api/messages on $PORT), or `package` its app manifest",
    )
    parser.add_argument(
        "action",
        nargs="?",
        choices=["serve", "package"],
        default="serve",
        help="serve (default), or package: write the Teams app package zip",
    )
    parser.add_argument("--host", default="0.0.0.0", help="interface to bind")  # noqa: S104
    parser.add_argument("--port", type=int, default=None, help="port (default $PORT)")
    parser.add_argument(
        "--out", type=Path, default=Path("opsbot-teams.zip"), help="package: the zip to write"
    )
    parser.add_argument("--version-string", default="1.0.0", help="package: the app's version")
    parser.set_defaults(handler=handle, check=check)


def check(args: argparse.Namespace, settings: Settings) -> None:
    from opsbot.config_check import ConfigError, require_link_key

    if args.action == "package":
        if not settings.teams.app_id:
            raise ConfigError("OPSBOT_TEAMS__APP_ID", "not set: the app package names the bot")
        return
    require_teams(settings)
    if settings.broker.mode == "inprocess":
        require_link_key(settings)


def require_teams(settings: Settings) -> None:
    """The Azure Bot's app id, client secret and tenant."""
    from opsbot.config_check import ConfigError

    teams = settings.teams
    secret = teams.app_password.get_secret_value() if teams.app_password else ""
    for name, value in (
        ("OPSBOT_TEAMS__APP_ID", teams.app_id),
        ("OPSBOT_TEAMS__APP_PASSWORD", secret),
        ("OPSBOT_TEAMS__TENANT_ID", teams.tenant_id),
    ):
        if not value or not value.strip():
            raise ConfigError(name, "not set: the Teams app (an Azure Bot) needs it")


def teams_config(settings: Settings) -> TeamsBotConfig:
    from bot.teams import TeamsBotConfig

    teams = settings.teams
    if not teams.app_id or not teams.app_password or not teams.tenant_id:
        raise SystemExit("OPSBOT_TEAMS__APP_ID, __APP_PASSWORD and __TENANT_ID must be set")
    return TeamsBotConfig(
        app_id=teams.app_id,
        app_password=teams.app_password.get_secret_value(),
        tenant_id=teams.tenant_id,
        allowed_tenant_ids=frozenset(teams.allowed_tenant_ids),
        openid_metadata_url=teams.openid_metadata_url,
        issuers=frozenset(teams.issuers),
        clock_leeway_seconds=teams.clock_leeway_seconds,
        token_url=teams.token_url,
        token_scope=teams.token_scope,
        approvals_conversation_id=teams.approvals_conversation_id,
        approvals_service_url=teams.approvals_service_url,
        service_url_prefixes=tuple(teams.service_url_prefixes),
        max_body_bytes=teams.max_body_bytes,
        max_message_chars=teams.max_message_chars,
        streaming=teams.streaming,
        sso_connection_name=teams.sso_connection_name,
        sso_resource=teams.sso_resource,
    )


async def handle(args: argparse.Namespace, settings: Settings) -> int:
    if args.action == "package":
        from bot.teams.manifest import write_package

        assert settings.teams.app_id is not None
        path = write_package(
            args.out,
            settings.teams.app_id,
            domain=settings.teams.app_domain,
            version=args.version_string,
        )
        print(f"wrote {path}")
        return 0
    from infra.serving import shutdown_event

    port = settings.port if args.port is None else args.port
    await serve_teams(settings, host=args.host, port=port, stop=shutdown_event())
    return 0


def open_configured_teams_bot(
    settings: Settings, config: TeamsBotConfig, assistant: Any, engine: Any
) -> AbstractAsyncContextManager[TeamsBot]:
    """The bot with durable runs (``infra.jobs``) unless ``OPSBOT_RUNS__DURABLE=false``."""
    from bot.teams import open_teams_bot
    from bot.teams.durable import open_durable_teams_bot
    from opsbot.commands.chat_app import durable_run_options

    if not settings.runs.durable:
        return open_teams_bot(config, assistant, engine)
    return open_durable_teams_bot(config, assistant, engine, **durable_run_options(settings))


def teams_background(
    settings: Settings, bot: TeamsBot, engine: Any
) -> AbstractAsyncContextManager[None]:
    """Pruning of processed Teams deliveries, and Teams' copy of approvals requested or
    decided on another platform (Slack, or the sweeper of another process), while the block
    runs."""
    from bot.teams.store import SqlProcessedActivities
    from opsbot.commands.chat_app import prune_forever, running

    keep = timedelta(hours=settings.slack.event_retention_hours)
    return running(
        prune_forever(SqlProcessedActivities(engine), keep, "processed Teams deliveries"),
        bot.adapter.assistant.notices_forever(
            "teams", settings.approvals.notice_poll_seconds, bot.adapter.approvals.on_notice
        ),
    )


async def serve_teams(
    settings: Settings,
    *,
    host: str,
    port: int,
    stop: asyncio.Event,
    on_ready: Callable[[str], None] | None = None,
    assistant_factory: AssistantFactory | None = None,
    sock: socket.socket | None = None,
) -> None:
    """Run the Teams app alone until ``stop`` is set: ``/api/messages``, the account-link
    callback (in-process broker), ``/healthz``, ``/readyz``, ``/metrics``, the expiry sweeper."""
    from aiohttp import web

    from bot.teams import teams_routes
    from bot.teams.front import TEAMS_ACK_LOOP
    from bot.teams.server import link_callback_route
    from infra.ack import serve_fronts, serve_here
    from infra.observability.loop import LoopLagMonitor
    from infra.serving import bind_socket
    from opsbot.commands.chat_app import link_callback, open_jobs_engine, running
    from opsbot.observability import Readiness, ops_routes, refresh_runtime_gauges, request_metrics
    from opsbot.wiring import open_assistant

    config = teams_config(settings)
    factory = assistant_factory or open_assistant
    # Sized and named as `opsbot slack`'s: it was SQLAlchemy's default pool (up to 15
    # connections, named "app"), outside the connection budget the settings state.
    engine, schema = await open_jobs_engine(settings)
    try:
        async with (
            factory(settings) as assistant,
            open_configured_teams_bot(settings, config, assistant, engine) as bot,
            teams_background(settings, bot, engine),
            LoopLagMonitor("main"),
            running(
                assistant.sweep_forever(
                    settings.approvals.sweep_interval_seconds,
                    bot.adapter.announce,
                    platform="teams",
                )
            ),
        ):
            front = teams_front(settings, bot, lag_loop=TEAMS_ACK_LOOP)
            routes: list[web.RouteDef] = [
                *ops_routes(
                    Readiness.from_settings(settings, engine, schema), refresh_runtime_gauges
                ),
                web.get("/healthz", _health),
            ]
            if front is None:
                routes.extend(teams_routes(bot))
            if settings.broker.mode == "inprocess":
                complete = link_callback(assistant, bot.adapter.linked, "Teams")
                routes.append(link_callback_route(complete))
            listening = sock or bind_socket(host, port)
            # Durable runs: /api/messages is acked on a thread and loop of its own
            # (bot.teams.front); the other routes are forwarded to this loop.
            serving = (
                serve_fronts(
                    listening,
                    [front],
                    routes=routes,
                    middlewares=[request_metrics],
                    thread_name="teams-ack",
                )
                if front is not None
                else serve_here(listening, routes, [request_metrics])
            )
            async with serving as url:
                log.info("opsbot teams: listening on %s/api/messages", url)
                if on_ready is not None:
                    on_ready(url)
                await stop.wait()
    finally:
        await engine.dispose()


def teams_front(settings: Settings, bot: TeamsBot, *, lag_loop: str | None) -> Any:
    """With durable runs, Teams is acked on the ack thread (``bot.teams.front``); without
    them the answer runs in process and there is nothing to store first."""
    from bot.teams.durable import DurableTeamsAdapter
    from bot.teams.front import TeamsAckFront

    if not isinstance(bot.adapter, DurableTeamsAdapter):
        return None
    return TeamsAckFront(
        bot, settings.resolved_database_url, pool_size=settings.pools.ack, lag_loop=lag_loop
    )


async def _health(_request: web.Request) -> web.Response:
    from aiohttp import web

    return web.json_response({"ok": True})


@contextlib.asynccontextmanager
async def with_teams_app(
    settings: Settings,
    assistant: Any,
    engine: Any,
    announce: Callable[[Any], Awaitable[None]],
    linked: Callable[[ChatUser, str], Awaitable[None]],
) -> AsyncIterator[
    tuple[
        Callable[[Any], Awaitable[None]],
        Callable[[ChatUser, str], Awaitable[None]],
        list[web.RouteDef],
        Any,
    ]
]:
    """The Teams bot beside another platform's (``opsbot serve``): that platform's sweeper
    notice unchanged (the core sends Teams its copy of each decision as a notice, delivered
    by ``teams_background``), the combined link notice (the platform of the linked chat
    user), Teams' routes for the shared server, and with durable runs its ack front (served
    instead of those routes when the server runs an ack loop; it shares Slack's loop and
    its lag monitor)."""
    from bot.teams import teams_routes

    config = teams_config(settings)
    async with (
        open_configured_teams_bot(settings, config, assistant, engine) as bot,
        teams_background(settings, bot, engine),
    ):

        async def linked_on_its_platform(chat_user: ChatUser, who: str) -> None:
            target = bot.adapter.linked if chat_user.platform == "teams" else linked
            await target(chat_user, who)

        front = teams_front(settings, bot, lag_loop=None)
        yield announce, linked_on_its_platform, teams_routes(bot), front
