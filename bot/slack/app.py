"""Build the Bolt ``AsyncApp``: signature checks (Bolt), accepting messages before the ack,
event deduplication, listeners.

Example::

    async with open_app(config, assistant, engine) as app:
        # HTTP: bot.slack.server.serve_http(app, sock); Socket Mode: run_socket_mode(app, token)
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypedDict, Unpack

import aiohttp
from slack_bolt.async_app import AsyncAck, AsyncApp, AsyncBoltContext
from slack_bolt.response import BoltResponse
from slack_sdk.web.async_client import AsyncWebClient
from sqlalchemy.ext.asyncio import AsyncEngine

from bot.slack.adapter import SlackAdapter
from bot.slack.client import make_web_client
from bot.slack.config import SlackBotConfig
from bot.slack.core import AssistantPort
from bot.slack.incoming import ACCEPTED, TOO_LONG, user_message
from bot.slack.listeners import register
from bot.slack.store import ProcessedEvents, SqlApprovalMessages, SqlProcessedEvents
from infra.clock import Clock, utc_now
from infra.storage.faults import is_connection_error

log = logging.getLogger(__name__)


def _unavailable(step: str, body: dict[str, Any], exc: BaseException) -> BoltResponse:
    """A 503 and one warning line (no traceback) for a database that cannot be reached:
    nothing was stored or marked seen, and Slack delivers the request again."""
    log.warning(
        "database unavailable while %s %s, answered 503 so Slack redelivers: %s",
        step,
        body.get("event_id") or body.get("type") or "a request",
        type(exc).__name__,
    )
    return BoltResponse(status=503, body="")


# Bolt's global middleware: called with the request's parts it names, and ``next`` to go on.
Next = Callable[[], Awaitable[BoltResponse | None]]
Middleware = Callable[..., Awaitable[BoltResponse | None]]


async def _first_delivery(
    step: str, body: dict[str, Any], claim: Awaitable[bool]
) -> BoltResponse | None:
    """Await ``claim`` (stores the delivery; False: already held): ``None`` on a first
    delivery, else the answer to give Slack (an empty 200 for a redelivery, a 503 while the
    database is unreachable)."""
    try:
        first = await claim
    except Exception as exc:
        if not is_connection_error(exc):
            raise
        return _unavailable(step, body, exc)
    if first:
        return None
    log.info("redelivery of %s dropped", body.get("event_id"))
    return BoltResponse(status=200, body="")


def dedup_middleware(processed: ProcessedEvents) -> Middleware:
    """Drop a redelivered Events API envelope (same ``event_id``) on any instance.

    Bolt answers 404 when a middleware returns nothing without calling ``next``, and Slack
    would retry; a duplicate must get an empty 200.
    """

    async def deduplicate(body: dict[str, Any], next: Next) -> BoltResponse | None:
        event_id = body.get("event_id") if body.get("type") == "event_callback" else None
        if isinstance(event_id, str) and event_id:
            answered = await _first_delivery("recording", body, processed.claim(event_id))
            if answered is not None:
                return answered
        return await next()

    return deduplicate


def team_middleware(adapter: SlackAdapter) -> Middleware:
    """Ignore events from a workspace opsbot does not serve: the envelope's team and the
    acting user's must be the bot's own workspace (``auth.test``) or in ``ALLOWED_TEAM_IDS``.
    Commands and clicks are refused politely by their listeners instead."""

    async def only_served_teams(body: dict[str, Any], next: Next) -> BoltResponse | None:
        if body.get("type") != "event_callback":
            return await next()
        await adapter.learn_home_team()
        if not adapter.event_served(body):
            return BoltResponse(status=200, body="")
        return await next()

    return only_served_teams


def accept_middleware(adapter: SlackAdapter) -> Middleware:
    """Hand a user's message to ``adapter.accept`` before Bolt acknowledges the request.

    Global middleware runs before the listener, and Bolt acks an event only when its
    listener starts, so a durable adapter has stored the message by the time Slack hears
    "200"; if the database cannot be reached, Slack gets a 503 (one warning line) and
    delivers again; any other failure to store is Bolt's 500. A redelivery the adapter
    already holds gets an empty 200. The accepted message is left in the context under
    ``ACCEPTED`` for the listener.
    """

    async def accept(
        body: dict[str, Any],
        context: AsyncBoltContext,
        next: Next,
    ) -> BoltResponse | None:
        message = user_message(body)
        if message is None:
            return await next()
        if len(message.text) > adapter.config.max_message_chars:
            # Refused after the ack, by the listener; nothing is stored or run.
            context[TOO_LONG] = message
            return await next()
        accepting = adapter.accept(message, str(body.get("event_id") or ""))
        answered = await _first_delivery("accepting", body, accepting)
        if answered is not None:
            return answered
        # The listener answers exactly what was accepted here.
        context[ACCEPTED] = message
        return await next()

    return accept


AdapterFactory = Callable[[AsyncWebClient, SqlApprovalMessages], SlackAdapter]


@dataclass(frozen=True, slots=True)
class SlackBot:
    """The Bolt app and the adapter behind it (for notices not caused by a Slack request,
    such as the expiry sweeper's: ``await bot.adapter.announce(decided)``)."""

    app: AsyncApp
    adapter: SlackAdapter


class BotOptions(TypedDict, total=False):
    """How every way of opening the Slack bot runs it: ``clock`` (default: the wall clock)
    and ``socket_mode`` (Socket Mode instead of signed HTTP requests; default: off)."""

    clock: Clock
    socket_mode: bool


@contextlib.asynccontextmanager
async def open_bot(
    config: SlackBotConfig,
    assistant: AssistantPort,
    engine: AsyncEngine,
    *,
    make_adapter: AdapterFactory | None = None,
    **options: Unpack[BotOptions],
) -> AsyncIterator[SlackBot]:
    """The app and its adapter, with one pooled HTTP session for the Web API, closed on exit.

    ``make_adapter`` builds another kind of adapter from the Web API client and the approval
    messages (``bot.slack.durable`` adds its job queue); default: ``SlackAdapter``."""
    async with aiohttp.ClientSession() as session:
        client = make_web_client(config, session)
        messages = SqlApprovalMessages(engine, options.get("clock", utc_now))
        adapter = (
            make_adapter(client, messages)
            if make_adapter is not None
            else SlackAdapter(config, assistant, client, messages)
        )
        await adapter.learn_home_team()
        # Homes follow each approval's state as the core changes it (created, decided,
        # executing, finished), not only once a decision's run has resumed.
        stop_listening = assistant.on_approval_change(adapter.approval_changed)
        app = build_app(config, assistant, engine, client=client, adapter=adapter, **options)
        try:
            yield SlackBot(app, adapter)
        finally:
            stop_listening()
            await adapter.stop_following_approvals()


@contextlib.asynccontextmanager
async def open_app(
    config: SlackBotConfig,
    assistant: AssistantPort,
    engine: AsyncEngine,
    **options: Unpack[BotOptions],
) -> AsyncIterator[AsyncApp]:
    """``build_app`` with one pooled HTTP session for the Web API, closed on exit."""
    async with open_bot(config, assistant, engine, **options) as bot:
        yield bot.app


def build_app(
    config: SlackBotConfig,
    assistant: AssistantPort,
    engine: AsyncEngine,
    *,
    client: AsyncWebClient | None = None,
    clock: Clock = utc_now,
    socket_mode: bool = False,
    adapter: SlackAdapter | None = None,
) -> AsyncApp:
    client = client or make_web_client(config)
    app = AsyncApp(
        name="opsbot",
        client=client,
        # Socket Mode connections are authenticated by the app token, not signatures.
        signing_secret=None if socket_mode else config.signing_secret,
        request_verification_enabled=not socket_mode,
        logger=logging.getLogger("bot.slack.bolt"),
    )
    adapter = adapter or SlackAdapter(config, assistant, client, SqlApprovalMessages(engine, clock))
    app.error(_listener_failed)
    app.middleware(team_middleware(adapter))
    # Accept first: a message is stored before its event id is marked processed, so a
    # failed store is retried by Slack rather than dropped as a duplicate.
    app.middleware(accept_middleware(adapter))
    app.middleware(dedup_middleware(SqlProcessedEvents(engine, clock)))
    register(app, adapter)
    ignore_the_rest(app)  # keep last: listeners match in registration order
    return app


def ignore_the_rest(app: AsyncApp) -> None:
    """A click or modal no listener above claims (a stale button, an action id opsbot no
    longer uses) gets an empty ack and one log line, not Bolt's 404 and sample code."""

    @app.action(re.compile(".*"))
    async def unknown_action(ack: AsyncAck, action: dict[str, Any]) -> None:
        await ack()
        log.info("ignored a click on unknown action %.64s", action.get("action_id"))

    @app.view(re.compile(".*"))
    async def unknown_view(ack: AsyncAck, view: dict[str, Any]) -> None:
        await ack()
        log.info("ignored the submission of unknown view %.64s", view.get("callback_id"))


async def _listener_failed(error: Exception, body: dict[str, Any]) -> None:
    """A listener raised after Bolt took the request (Bolt's default logs a traceback for
    each): one warning line naming the request's kind and the error's type; the traceback
    only at DEBUG. Seen when the app shuts down under a Home refresh (its stores closed)."""
    kind = body.get("type", "?")
    if kind == "event_callback":
        kind = f"event {(body.get('event') or {}).get('type', '?')}"
    log.warning("a %s listener failed: %s", kind, type(error).__name__)
    log.debug("listener failure", exc_info=error)
