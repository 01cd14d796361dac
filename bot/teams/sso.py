"""Teams SSO: an OAuthCard the Teams client can answer silently, and its
``signin/tokenExchange`` invoke (on when ``sso_connection_name`` is set: the company's IdP is
Entra).

An unlinked person gets an OAuthCard (``application/vnd.microsoft.card.oauth``) whose
``tokenExchangeResource`` names the bot's ``api://botid-<app id>``: the Teams client then gets
an Entra token for it without a prompt and sends it in a ``signin/tokenExchange`` invoke
(``value``: ``id``, ``connectionName``, ``token``). The core checks that token and links the
person through it (``AssistantPort.link_sso``). The invoke's HTTP answer:

- 200 ``{id, connectionName}``: linked; the question that brought the card is then answered;
- 412 ``{..., failureDetail}``: not linked (forged, expired, wrong audience or tenant, another
  person's token, the IdP refused): Teams shows the card's sign-in button instead, which opens
  the same IdP login as the plain sign-in card;
- 409: the same exchange ``id`` again (on any instance: the shared ``processed_events``);
- 400: no ``id`` or ``token``.

``signin/verifyState`` is not used: the sign-in button opens opsbot's own IdP login, which
completes at ``/oauth/callback`` (no Bot Framework magic code).
"""

from __future__ import annotations

import hashlib
import logging
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import KW_ONLY, dataclass, field
from typing import Any

from microsoft_agents.activity import Activity, ActivityTypes, InvokeResponse
from microsoft_agents.hosting.core import TurnContext

from bot.teams.core import AssistantPort, ChatUser, Linked
from bot.teams.incoming import PLATFORM, TeamsMessage
from bot.teams.store import SqlProcessedActivities

log = logging.getLogger(__name__)

OAUTH_CARD = "application/vnd.microsoft.card.oauth"
EXCHANGE_INVOKE = "signin/tokenExchange"
SIGN_IN_TEXT = "Connect your company account so opsbot can act as you."
# How long the question that brought a card waits for its silent sign-in.
PENDING_SECONDS = 600.0


@dataclass(frozen=True, slots=True)
class SsoLinked:
    """A Teams user just linked through SSO: who, where to reach them privately, and the
    question that brought the card (``None``: unknown here, e.g. the card came from another
    instance, or it was someone else's)."""

    chat_user: ChatUser
    who: str
    service_url: str
    user_mri: str
    question: TeamsMessage | None


@dataclass(frozen=True, slots=True)
class _Pending:
    message: TeamsMessage
    until: float


@dataclass(eq=False)
class TeamsSso:
    connection_name: str
    resource: str
    assistant: AssistantPort
    processed: SqlProcessedActivities
    linked: Callable[[SsoLinked], Awaitable[None]]
    _: KW_ONLY
    now: Callable[[], float] = time.monotonic
    # The question that brought each card, by the card's exchange id (this instance's
    # memory: an exchange reaching another instance links, then says "ask again").
    _pending: dict[str, _Pending] = field(default_factory=dict, init=False)

    def sign_in_card(self, message: TeamsMessage, login_url: str) -> dict[str, Any]:
        """The OAuthCard for ``message``'s sender: silent SSO, else the IdP login button."""
        now = self.now()
        self._pending = {k: p for k, p in self._pending.items() if p.until > now}
        exchange_id = secrets.token_urlsafe(18)
        self._pending[exchange_id] = _Pending(message, now + PENDING_SECONDS)
        content = {
            "text": SIGN_IN_TEXT,
            "connectionName": self.connection_name,
            "tokenExchangeResource": {"id": exchange_id, "uri": self.resource},
            "buttons": [{"type": "signin", "title": "Connect account", "value": login_url}],
        }
        return {
            "type": "message",
            "summary": SIGN_IN_TEXT,
            "attachments": [{"contentType": OAUTH_CARD, "content": content}],
        }

    def register(self, app: Any) -> None:
        _route_exchange(app, self.handle_exchange, self.connection_name)

    async def handle_exchange(self, activity: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """The HTTP status and body answering one ``signin/tokenExchange``."""
        value = activity.get("value")
        value = value if isinstance(value, dict) else {}
        exchange_id, token = value.get("id"), value.get("token")
        chat_user = _sender(activity)
        if not isinstance(exchange_id, str) or not exchange_id or len(exchange_id) > 200:
            return 400, self._body(activity, "the exchange names no id")
        if not isinstance(token, str) or not token or chat_user is None:
            return 400, self._body(activity, "the exchange carries no token or no Entra user")
        if not await self.processed.claim(_dedup_key(exchange_id)):
            log.info("duplicate Teams SSO token exchange refused")
            return 409, self._body(activity, "this token exchange was already processed")
        outcome = await self.assistant.link_sso(chat_user, token)
        if not isinstance(outcome, Linked):
            return 412, self._body(activity, outcome.reason)
        log.info("Teams user linked through SSO as %s", outcome.who)
        pending = self._pending.pop(exchange_id, None)
        question = pending.message if pending and pending.message.chat_user == chat_user else None
        sender = activity.get("from") or {}
        # Started, not awaited: the invoke is answered now.
        await self.linked(
            SsoLinked(
                chat_user,
                outcome.who,
                str(activity.get("serviceUrl") or ""),
                str(sender.get("id") or ""),
                question,
            )
        )
        return 200, {"id": exchange_id, "connectionName": self.connection_name}

    def _body(self, activity: dict[str, Any], detail: str) -> dict[str, Any]:
        return _failure(activity, self.connection_name, detail)


Exchange = Callable[[dict[str, Any]], Awaitable[tuple[int, dict[str, Any]]]]


def register_sso_off(app: Any) -> None:
    """With SSO off no OAuthCard is sent, so an exchange is stray or forged: 412 (Teams
    would fall back to a sign-in button), never the SDK's 501, and nobody is linked."""

    async def refuse(activity: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        return 412, _failure(activity, "", "single sign-on is not enabled here")

    _route_exchange(app, refuse, "")


def _route_exchange(app: Any, handle: Exchange, connection_name: str) -> None:
    async def on_exchange(context: TurnContext, _state: Any) -> None:
        activity = context.activity.model_dump(mode="json", by_alias=True, exclude_none=True)
        try:
            status, body = await handle(activity)
        except Exception:
            log.exception("a Teams SSO token exchange failed")
            status, body = 412, _failure(activity, connection_name, "opsbot could not complete it")
        await context.send_activity(
            Activity(
                type=ActivityTypes.invoke_response,
                value=InvokeResponse(status=status, body=body),
            )
        )

    app.invoke(EXCHANGE_INVOKE)(on_exchange)


def _failure(activity: dict[str, Any], connection_name: str, detail: str) -> dict[str, Any]:
    value = activity.get("value")
    exchange_id = value.get("id") if isinstance(value, dict) else None
    return {
        "id": exchange_id if isinstance(exchange_id, str) else "",
        "connectionName": connection_name,
        "failureDetail": detail,
    }


def _sender(activity: dict[str, Any]) -> ChatUser | None:
    """The Teams user who sent the invoke: (tenant, aadObjectId), as for messages."""
    sender = activity.get("from") or {}
    conversation = activity.get("conversation") or {}
    channel_data = activity.get("channelData") or {}
    tenant = conversation.get("tenantId") or (channel_data.get("tenant") or {}).get("id")
    user = sender.get("aadObjectId") if isinstance(sender, dict) else None
    if not isinstance(tenant, str) or not isinstance(user, str) or not tenant or not user:
        return None
    return ChatUser(PLATFORM, tenant, user)


def _dedup_key(exchange_id: str) -> str:
    return "teams-sso:" + hashlib.sha256(exchange_id.encode()).hexdigest()[:44]
