"""Build the Teams bot: the Agents SDK's ``CloudAdapter`` and ``AgentApplication``, opsbot's
outbound credentials, the message route and the approvals seam.

Example::

    async with open_teams_bot(config, assistant, engine) as bot:
        routes = teams_routes(bot)      # bot.teams.server: POST /api/messages
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from microsoft_agents.activity import Activity, ActivityTypes, InvokeResponse
from microsoft_agents.hosting.aiohttp import CloudAdapter
from microsoft_agents.hosting.core import (
    AgentApplication,
    ApplicationOptions,
    MemoryStorage,
    RouteRank,
    TurnContext,
    TurnState,
)
from microsoft_agents.hosting.core.authorization import Connections
from sqlalchemy.ext.asyncio import AsyncEngine

from bot.teams.adapter import TeamsAdapter
from bot.teams.approval_store import SqlTeamsCards
from bot.teams.approvals import TeamsApprovals
from bot.teams.auth import ConnectorAuth
from bot.teams.clients import PooledClientFactory
from bot.teams.config import TeamsBotConfig
from bot.teams.core import AssistantPort, ChatUser
from bot.teams.credentials import BotConnections, ClientCredentials
from bot.teams.incoming import PLATFORM, Conversation, TeamsMessage, thread_ref
from bot.teams.outbound import TeamsOutbound
from bot.teams.sso import register_sso_off
from bot.teams.store import SqlConversations, SqlProcessedActivities
from infra.clock import Clock, utc_now
from infra.logging import demote_to_debug
from infra.storage.faults import is_connection_error

log = logging.getLogger(__name__)
ACTIVITY_LOGGER = "microsoft_agents.activity.activity"
_MESSAGE_ID = ";messageid="


@dataclass
class Delivery:
    """What the message route learnt about the request being served (read by the HTTP
    handler after the SDK returns): the database was unreachable, so answer 503."""

    unavailable: bool = False


CURRENT_DELIVERY: ContextVar[Delivery | None] = ContextVar("teams_delivery", default=None)


@dataclass
class TeamsBot:
    config: TeamsBotConfig
    cloud: CloudAdapter
    app: AgentApplication[TurnState]
    adapter: TeamsAdapter
    auth: ConnectorAuth
    extras: dict[str, Any] = field(default_factory=dict)


def message_from(activity: Activity) -> TeamsMessage | None:
    """The message as opsbot keeps it, or ``None`` when it is not a person's message opsbot
    can answer (no Entra user, no tenant, no conversation)."""
    sender = activity.from_property
    conversation = activity.conversation
    if sender is None or not sender.aad_object_id or conversation is None or not conversation.id:
        return None
    tenant = conversation.tenant_id
    channel_data = activity.channel_data if isinstance(activity.channel_data, dict) else {}
    tenant_data = channel_data.get("tenant")
    if not tenant and isinstance(tenant_data, dict):
        tenant = tenant_data.get("id")
    if not tenant or not activity.id or not activity.service_url:
        return None
    kind = conversation.conversation_type or "personal"
    conversation_id = str(conversation.id)
    base, _, root = conversation_id.partition(_MESSAGE_ID)
    if kind == "channel" and not root:
        # A new post: it is the root of its own reply chain (an empty ``;messageid=`` names
        # no root either, and a reply to "" cannot be sent).
        root = str(activity.id)
        conversation_id = f"{base}{_MESSAGE_ID}{root}"
    reference = activity.get_conversation_reference()
    reference.activity_id = root if kind == "channel" else None
    if reference.conversation is not None:
        reference.conversation.id = conversation_id
    return TeamsMessage(
        chat_user=ChatUser(PLATFORM, str(tenant), str(sender.aad_object_id)),
        user_mri=str(sender.id or ""),
        user_name=str(sender.name or ""),
        text=(activity.text or "").strip(),
        activity_id=str(activity.id),
        conversation=Conversation(
            ref=thread_ref(str(tenant), conversation_id, kind),
            conversation_id=conversation_id,
            conversation_type=kind,
            service_url=str(activity.service_url),
            reference=reference.model_dump(by_alias=True, exclude_none=True, mode="json"),
        ),
    )


def build_agent_application(
    adapter: TeamsAdapter, connections: Connections
) -> AgentApplication[TurnState]:
    """The SDK application: messages go to ``adapter.accept``; the approvals seam adds its
    card actions. Turn state is unused (opsbot keeps its state in its own tables)."""
    application: AgentApplication[TurnState] = AgentApplication(
        ApplicationOptions(
            storage=MemoryStorage(),
            bot_app_id=adapter.config.app_id,
            start_typing_timer=False,  # opsbot answers after the 202 and types then
            remove_recipient_mention=True,
        ),
        connection_manager=connections,
    )

    async def on_message(context: TurnContext, _state: TurnState) -> None:
        message = message_from(context.activity)
        if message is None:
            log.info("ignored a Teams message with no Entra user or tenant")
            return
        try:
            first = await adapter.accept(message)
        except Exception as exc:
            if not is_connection_error(exc):
                raise
            log.warning(
                "database unavailable while accepting a Teams message, answered 503: %s",
                type(exc).__name__,
            )
            delivery = CURRENT_DELIVERY.get()
            if delivery is not None:
                delivery.unavailable = True
            return
        if not first:
            log.info("duplicate Teams delivery dropped")

    application.activity(ActivityTypes.message)(on_message)

    async def on_error(_context: TurnContext, error: Exception) -> None:
        # Logged only; the person never sees an exception's text (the SDK's default would
        # post it in the chat).
        log_turn_failure(error)

    application.error(on_error)
    adapter.approvals.register(application)
    if adapter.sso is not None:
        adapter.sso.register(application)
    else:
        register_sso_off(application)
    register_fallbacks(application)
    return application


def register_fallbacks(application: AgentApplication[TurnState]) -> None:
    """Routes for what no other route takes (registered last, ranked last).

    An invoke opsbot does not implement (its manifest declares no other) gets a clear 400
    and one line, not the SDK's 501. Any other activity (conversation updates when the app
    is installed or members join, reactions, edits) is ignored at DEBUG: the SDK would log
    a warning for each, with the activity's text in it."""

    async def on_other_invoke(context: TurnContext, _state: TurnState) -> None:
        name = str(context.activity.name or "")[:64]
        log.info("refused a Teams invoke opsbot does not handle: %r", name)
        await context.send_activity(
            Activity(
                type=ActivityTypes.invoke_response,
                value=InvokeResponse(
                    status=400, body={"error": f"opsbot does not handle {name!r} invokes"}
                ),
            )
        )

    async def on_other_activity(context: TurnContext, _state: TurnState) -> None:
        log.debug("ignored a Teams %s activity", str(context.activity.type)[:32])

    application.invoke()(on_other_invoke)
    application.add_route(
        lambda context: context.activity.type != ActivityTypes.invoke,
        on_other_activity,
        rank=RouteRank.LAST,
    )


def quiet_refused_activities() -> None:
    """The SDK's ``Activity`` model logs every activity it cannot read as an ERROR with a
    traceback (and the values it refused); the server answers those 400 with one line of
    its own (``bot.teams.server``), so the SDK's record goes to DEBUG."""
    demote_to_debug(
        ACTIVITY_LOGGER,
        "refused-activity",
        lambda r: r.getMessage().startswith("Validation error for Activity"),
    )


def make_cloud_adapter(factory: PooledClientFactory) -> CloudAdapter:
    quiet_refused_activities()
    cloud = CloudAdapter(channel_service_client_factory=factory)

    async def on_turn_error(_context: TurnContext, error: Exception) -> None:
        log_turn_failure(error)

    cloud.on_turn_error = on_turn_error
    return cloud


def log_turn_failure(error: Exception) -> None:
    """One line when the Bot Connector could not be reached, dropped the connection or
    refused a call (the cause is in the exception's text or status, a traceback adds
    nothing); a traceback for anything else, which is a bug to find."""
    if isinstance(error, aiohttp.ClientConnectionError | TimeoutError):
        text = str(error).splitlines()[0][:300] if str(error) else ""
        log.error(
            "a Teams turn failed: the Bot Connector did not answer (%s: %s)",
            type(error).__name__,
            text,
        )
        return
    if isinstance(error, aiohttp.ClientResponseError):
        log.error(
            "a Teams turn failed: the Bot Connector answered %s to %s",
            error.status,
            error.request_info.url.path[:200],
        )
        return
    log.error("a Teams turn failed: %s", type(error).__name__, exc_info=error)


@contextlib.asynccontextmanager
async def open_teams_bot(
    config: TeamsBotConfig,
    assistant: AssistantPort,
    engine: AsyncEngine,
    *,
    clock: Clock = utc_now,
    adapter_class: type[TeamsAdapter] = TeamsAdapter,
    **adapter_kwargs: Any,
) -> AsyncIterator[TeamsBot]:
    """The bot with one pooled HTTP session (keys, outbound tokens), closed on exit; runs
    still in flight are cancelled."""
    async with aiohttp.ClientSession() as session:
        credentials = ClientCredentials(
            config.resolved_token_url,
            config.app_id,
            config.app_password,
            config.token_scope,
            session,
            tenant_id=config.tenant_id,
        )
        connections = BotConnections(credentials)
        factory = PooledClientFactory(connections)
        cloud = make_cloud_adapter(factory)
        outbound = TeamsOutbound(cloud, config.app_id, SqlConversations(engine, clock))
        approvals = TeamsApprovals(
            outbound,
            config.approvals_conversation_id,
            assistant=assistant,
            cards=SqlTeamsCards(engine, clock),
            tenant_id=config.tenant_id,
            service_url=config.approvals_service_url,
        )
        adapter = adapter_class(
            config,
            assistant,
            outbound,
            SqlProcessedActivities(engine, clock),
            approvals,
            **adapter_kwargs,
        )
        application = build_agent_application(adapter, connections)
        auth = ConnectorAuth(config.auth_config(), session)
        try:
            yield TeamsBot(config, cloud, application, adapter, auth)
        finally:
            await adapter.close()
            await factory.close()
