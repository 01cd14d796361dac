"""``POST /api/messages``: size cap, opsbot's own authentication, then the Agents SDK.

The order matters: the body is read with a cap (413), the token verified (401), the body
parsed (400) and bound to the token (``serviceurl``, channel, tenant: 401), its envelope
checked (ids of the activity, sender, recipient and conversation: 400); any failure is one
log line and nothing else runs. Only then is the activity handed to
``CloudAdapter.process`` with the verified claims as its ``ClaimsIdentity``.

Example::

    app = web.Application()
    app.add_routes(teams_routes(bot))
"""

from __future__ import annotations

import json
import logging
import re
import warnings
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web
from microsoft_agents.hosting.core.authorization import ClaimsIdentity

from bot.teams.app import CURRENT_DELIVERY, Delivery, TeamsBot
from bot.teams.auth import ConnectorAuth, Rejected
from infra.characters import CONTROL, LONE_SURROGATE, holds_surrogate_escape, replace_in_strings
from infra.chat_http import (
    OAUTH_CALLBACK_PATH,
    LinkCallback,
    link_callback_handler,
    read_capped,
    refuse,
)
from infra.json_input import parse_json

MESSAGES_PATH = "/api/messages"
# Path, query and fragment characters, control characters and dot segments.
UNSAFE_ID = re.compile(r"[/\\?#%\x00-\x1f\x7f]|\.\.")
log = logging.getLogger(__name__)


def teams_routes(bot: TeamsBot) -> list[web.RouteDef]:
    return [web.post(MESSAGES_PATH, messages_handler(bot))]


def messages_handler(bot: TeamsBot) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    async def messages(request: web.Request) -> web.StreamResponse:
        checked = await authenticate(request, bot.auth, bot.config.max_body_bytes)
        if isinstance(checked, web.Response):
            return checked
        claims, _activity = checked
        return await process_with_sdk(bot, request, claims)

    return messages


async def authenticate(
    request: web.Request, auth: ConnectorAuth, limit: int
) -> tuple[dict[str, Any], dict[str, Any]] | web.Response:
    """The verified claims and the activity, or the refusal to answer (413, 401, 400)."""
    raw = await read_capped(log, request, limit)
    if isinstance(raw, web.Response):
        return raw
    # The SDK reads the body again through request.json(): hand it the bytes already read.
    request._read_bytes = raw
    try:
        # The token first: a caller without one learns nothing, not even about the body.
        claims = await auth.verify_token(request.headers.get("Authorization"))
    except Rejected as exc:
        return refuse(log, request, 401, f"unauthenticated: {exc.reason}", len(raw))
    try:
        activity = parse_json(raw)
    except ValueError:
        activity = None
    if not isinstance(activity, dict):
        return refuse(log, request, 400, "malformed activity: not a JSON object", len(raw))
    try:
        auth.check_activity(claims, activity)
    except Rejected as exc:
        return refuse(log, request, 401, f"unauthenticated: {exc.reason}", len(raw))
    missing = envelope_problem(activity)
    if missing is not None:
        return refuse(log, request, 400, f"malformed activity: {missing}", len(raw))
    if holds_surrogate_escape(raw):
        # Text with a lone surrogate (JSON can carry one, UTF-8 cannot) goes on with U+FFFD,
        # as opsbot's replies do: an approver's edit with one ran the tool, then failed to
        # show the decision (a 500 to the approver, who could retry a change already made).
        cleaned = replace_in_strings(activity, LONE_SURROGATE)
        if cleaned != activity:
            activity = cleaned
            request._read_bytes = json.dumps(activity).encode()
    return claims, activity


def envelope_problem(activity: dict[str, Any]) -> str | None:
    """What the activity's envelope lacks, if anything: every activity the Bot Connector
    sends has a type and an id, a sender, a recipient and a conversation, each with an id.
    Without them the SDK finds no route (an invoke got its 501) or the reply fails."""
    for key in ("type", "id"):  # its id is what a reply answers
        value = activity.get(key)
        if not isinstance(value, str) or not value.strip():
            return f"no {key}"
    for part in ("from", "recipient", "conversation"):
        value = activity.get(part)
        ident = value.get("id") if isinstance(value, dict) else None
        if not isinstance(ident, str) or not ident.strip():
            return f"no {part}.id"
    # The conversation id goes into the Connector's URL paths (v3/conversations/{id}/...),
    # unescaped by the SDK: one with a path or query in it would send the bot's replies,
    # with its token, to another path of the Connector.
    if UNSAFE_ID.search(activity["conversation"]["id"]):
        return "conversation.id is not a Teams conversation id"
    # The ids opsbot stores or looks up hold no control character (``infra.characters``).
    for path in _STORED_IDS:
        found: Any = activity
        for key in path:
            found = found.get(key) if isinstance(found, dict) else None
        if isinstance(found, str) and CONTROL.search(found):
            return f"{'.'.join(path)} holds a control character"
    return None


_STORED_IDS = (
    ("id",),
    ("replyToId",),
    ("from", "id"),
    ("from", "aadObjectId"),
    ("recipient", "id"),
    ("conversation", "tenantId"),
    ("channelData", "tenant", "id"),
)


async def process_with_sdk(
    bot: TeamsBot, request: web.Request, claims: dict[str, Any]
) -> web.StreamResponse:
    """Hand an authenticated activity to the Agents SDK (its routes: messages, invokes)."""
    with warnings.catch_warnings():
        # The SDK reads this plain string key (aiohttp prefers typed keys).
        warnings.simplefilter("ignore", web.NotAppKeyWarning)
        request["claims_identity"] = ClaimsIdentity(claims, authentication_type="Bearer")
    delivery = Delivery()
    token = CURRENT_DELIVERY.set(delivery)
    try:
        response = await bot.cloud.process(request, bot.app)
    except (TypeError, ValueError, KeyError, AttributeError) as exc:
        # A shape the SDK's models refuse (pydantic's ValidationError is a ValueError).
        size = len(request._read_bytes or b"")
        return refuse(log, request, 400, f"malformed activity: {type(exc).__name__}", size)
    finally:
        CURRENT_DELIVERY.reset(token)
    if delivery.unavailable:
        return web.Response(status=503, text="unavailable")
    return response or web.Response(status=202)


def link_callback_route(link_callback: LinkCallback) -> web.RouteDef:
    """``GET /oauth/callback`` when Teams runs alone (with Slack, Slack's server has it)."""
    callback = link_callback_handler(
        link_callback, platform="Teams", again="Ask opsbot again in Teams for a new one."
    )
    return web.get(OAUTH_CALLBACK_PATH, callback)
