"""``opsbot slack``: run the Slack app — HTTP mode on ``$PORT`` (``POST /slack/events``) or
Socket Mode (``--socket-mode``, needs ``SLACK_APP_TOKEN``)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from opsbot.settings import Settings

if TYPE_CHECKING:
    from bot.slack import SlackBotConfig

log = logging.getLogger(__name__)
PRUNE_EVERY_SECONDS = 3600


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    parser = subparsers.add_parser(
        "slack", help="run the Slack app (HTTP mode on $PORT, or --socket-mode)"
    )
    parser.add_argument(
        "--socket-mode", action="store_true", help="connect over Socket Mode instead of HTTP"
    )
    parser.add_argument("--host", default="0.0.0.0", help="HTTP mode: interface to bind")  # noqa: S104
    parser.add_argument("--port", type=int, default=None, help="HTTP mode: port (default $PORT)")
    parser.set_defaults(handler=handle)


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
        rate_limit_retries=settings.slack.rate_limit_retries,
        server_error_retries=settings.slack.server_error_retries,
    )


async def handle(args: argparse.Namespace, settings: Settings) -> int:
    from bot.slack import SqlProcessedEvents, open_app, run_socket_mode, serve_http
    from opsbot import assistant as assistant_module
    from opsbot.serving import bind_socket
    from opsbot.storage import create_engine

    config = slack_config(settings)
    if args.socket_mode and not config.app_token:
        raise SystemExit("--socket-mode needs SLACK_APP_TOKEN")
    open_assistant = getattr(assistant_module, "open_assistant", None)
    if open_assistant is None:
        raise SystemExit("this build has no opsbot.assistant.open_assistant to serve Slack with")
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    engine = create_engine(settings.resolved_database_url)
    try:
        async with (
            open_assistant(settings) as assistant,
            open_app(config, assistant, engine, socket_mode=args.socket_mode) as app,
        ):
            pruner = asyncio.create_task(
                _prune_forever(
                    SqlProcessedEvents(engine),
                    timedelta(hours=settings.slack.event_retention_hours),
                )
            )
            try:
                if args.socket_mode:
                    assert config.app_token is not None
                    log.info("opsbot slack: Socket Mode")
                    await run_socket_mode(app, config.app_token, stop)
                else:
                    port = settings.port if args.port is None else args.port
                    link = getattr(assistant, "complete_link", None)
                    async with serve_http(app, bind_socket(args.host, port), link) as url:
                        log.info("opsbot slack: listening on %s/slack/events", url)
                        await stop.wait()
            finally:
                pruner.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await pruner
    finally:
        await engine.dispose()
    return 0


async def _prune_forever(store: Any, keep: timedelta) -> None:
    while True:
        try:
            removed = await store.prune(keep)
            log.info("pruned %d processed Slack event ids", removed)
        except Exception:
            log.warning("pruning processed event ids failed", exc_info=True)
        await asyncio.sleep(PRUNE_EVERY_SECONDS)
