"""Bolt listeners: events, the ``/ops`` command, approval buttons and modals.

Each listener acks first (Slack's 3-second rule), then calls the adapter; a user's message
is handed to ``adapter.accept`` before the ack (by the accept middleware for events).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from slack_bolt.async_app import AsyncAck, AsyncApp, AsyncBoltContext
from slack_sdk.web.async_client import AsyncWebClient

from bot.slack.adapter import SlackAdapter
from bot.slack.cards import APPROVE_ACTION_ID, EDIT_ACTION_ID, REJECT_ACTION_ID
from bot.slack.connections import EVENTS as USER_CONNECTION_EVENTS
from bot.slack.connections import register_user_connections, report_connection
from bot.slack.core import (
    Approve,
    ChatUser,
    DecisionOutcome,
    Edit,
    InvalidEdit,
    NotAuthorised,
    Reject,
)
from bot.slack.home import FORGET_ACTION_ID, REFRESH_ACTION_ID
from bot.slack.incoming import ACCEPTED, TOO_LONG, UserMessage, clicked_by
from bot.slack.modals import (
    EDIT_CALLBACK_ID,
    REJECT_CALLBACK_ID,
    ModalContext,
    edit_modal,
    field_errors_to_blocks,
    parse_edit,
    parse_reason,
    reject_modal,
)
from bot.slack.render import (
    CONNECT_ACTION_ID,
    CONNECT_SERVER_ACTION_ID,
    Message,
    approval_line,
    escape,
    section,
    status_text,
    text_message,
)
from bot.slack.streaming import FEEDBACK_ACTION_ID, POSITIVE

log = logging.getLogger(__name__)

UNAVAILABLE_TEXT = (
    ":warning: opsbot can't take requests right now (its database is unreachable). "
    "Nothing was recorded; please try again in a minute."
)
# /ops subcommands: (usage, what it does, an example). Text that is not one of these and
# has more than one word is a question; a single unknown word gets this help.
SUBCOMMANDS: tuple[tuple[str, str, str], ...] = (
    ("ask <question>", "ask opsbot; the answer comes in a thread", "ask is PAY-102 still open?"),
    ("link", "connect your company account", "link"),
    ("unlink", "disconnect it", "unlink"),
    ("whoami", "who opsbot knows you as", "whoami"),
    ("status", "your connection and groups", "status"),
    ("pending", "your requests waiting for an approver", "pending"),
    ("memory", "your saved preferences", "memory help"),
    ("help", "this list", "help"),
)
_NOT_QUESTIONS = frozenset(usage.split()[0] for usage, _, _ in SUBCOMMANDS) - {"ask"}
HELP_TEXT = "*opsbot* answers from ticketing, docs and the database, as you.\n" + "\n".join(
    f"• `/ops {usage}` — {what}. Example: `/ops {example}`" for usage, what, example in SUBCOMMANDS
)
_SUBCOMMAND_FAILED = (
    ":warning: opsbot could not do that right now. Nothing was changed; please try again."
)


# What the app manifest must declare (tests/bot/test_slack_manifest.py checks manifest.yml).
SUBSCRIBED_EVENTS = (
    "agent_session_stopped",
    "app_home_opened",
    "app_mention",
    "message.im",
    *USER_CONNECTION_EVENTS,
)
SLASH_COMMAND = "/ops"
# Bot scope each Web API method needs; views.* need none.
METHOD_SCOPES: dict[str, str | None] = {
    "auth.test": None,
    "chat.postMessage": "chat:write",
    "chat.update": "chat:write",
    "chat.delete": "chat:write",
    "chat.postEphemeral": "chat:write",
    "views.open": None,
    "views.publish": None,
    "assistant.threads.setStatus": "assistant:write",
    "assistant.threads.setSuggestedPrompts": "assistant:write",
    "assistant.threads.setTitle": "assistant:write",
    # Standardized app authentication: Slack documents no scope for these.
    "apps.user.connection.update": None,
    "apps.user.connection.requestAuth": None,
    "chat.startStream": "chat:write",
    "chat.appendStream": "chat:write",
    "chat.stopStream": "chat:write",
    "agents.sessions.setStatus": "chat:write",
}
EVENT_SCOPES = {
    "app_mention": "app_mentions:read",
    "message.im": "im:history",
    "app_home_opened": None,
    "user_connection": None,
    "user_connection_status_requested": None,
    "agent_session_stopped": None,
}


def register(app: AsyncApp, adapter: SlackAdapter) -> None:
    _register_events(app, adapter)
    _register_command(app, adapter)
    _register_approvals(app, adapter)
    _register_home_actions(app, adapter)
    register_user_connections(app, adapter)
    _register_agent_session(app, adapter)


# -- events -------------------------------------------------------------------------------


def _register_events(app: AsyncApp, adapter: SlackAdapter) -> None:
    # The accept middleware accepted (and, for durable runs, stored) the message before the
    # ack; this answers it in process, or wakes the worker that will.
    async def on_user_message(context: AsyncBoltContext) -> None:
        message = context.get(ACCEPTED)
        if isinstance(message, UserMessage):
            await adapter.converse(message)
        refused = context.get(TOO_LONG)
        if isinstance(refused, UserMessage):
            log.info(
                "message of %d characters from %s refused",
                len(refused.text),
                refused.chat_user.user_id,
            )
            limit = adapter.config.max_message_chars
            await adapter.ephemeral(
                refused.channel,
                refused.chat_user.user_id,
                text_message(too_long_text(len(refused.text), limit)),
            )

    @app.event("app_mention")
    async def app_mention(context: AsyncBoltContext) -> None:
        await on_user_message(context)

    @app.event("message")
    async def message(context: AsyncBoltContext, event: dict[str, Any]) -> None:
        accepted = context.get(ACCEPTED)
        if isinstance(accepted, UserMessage) and accepted.is_dm and not event.get("thread_ts"):
            # A new conversation in the Messages tab: name it after the question, first
            # (the answer may take a while).
            await title_thread(adapter, accepted)
        await on_user_message(context)

    @app.event("app_home_opened")
    async def app_home_opened(event: dict[str, Any], body: dict[str, Any]) -> None:
        user = str(event["user"])
        chat_user = ChatUser("slack", str(body.get("team_id")), user)
        if event.get("tab") == "messages":
            await adapter.client.assistant_threads_setSuggestedPrompts(
                channel_id=str(event["channel"]),
                title="Ask opsbot about tickets, runbooks or jobs",
                prompts=[{"title": t, "message": m} for t, m in adapter.config.suggested_prompts],
            )
            return
        if event.get("tab") != "home":
            return
        await adapter.publish_home(chat_user, fresh=True)


TITLE_LIMIT = 60


def thread_title(text: str) -> str:
    """A short title from the question: its first line, cut at a word near the limit."""
    line = " ".join(text.split())
    if len(line) <= TITLE_LIMIT:
        return line or "Question for opsbot"
    cut = line[:TITLE_LIMIT].rsplit(" ", 1)[0] or line[:TITLE_LIMIT]
    return cut + "…"


async def title_thread(adapter: SlackAdapter, message: UserMessage) -> None:
    """Best effort: a thread without a title is still answered."""
    try:
        await adapter.client.assistant_threads_setTitle(
            channel_id=message.channel,
            thread_ts=str(message.thread_ts),
            title=thread_title(message.text),
        )
    except Exception as exc:
        log.info("thread title not set: %s", type(exc).__name__)


def _register_agent_session(app: AsyncApp, adapter: SlackAdapter) -> None:
    @app.event("agent_session_stopped")
    async def session_stopped(event: dict[str, Any], body: dict[str, Any]) -> None:
        # Stop pressed while opsbot worked: only the thread's owner may stop it (the core
        # checks); events from other workspaces never get here (team middleware).
        team = str(body.get("team_id"))
        user_team = str(event.get("user_team") or event.get("team") or team)
        chat_user = ChatUser("slack", user_team, str(event["user"]))
        await adapter.stop_session(chat_user, team, str(event["channel"]), str(event["thread_ts"]))

    @app.action(FEEDBACK_ACTION_ID)
    async def feedback(ack: AsyncAck, body: dict[str, Any], action: dict[str, Any]) -> None:
        await ack()
        clicker, (channel, _ts) = clicked_by(body), _card_location(body)
        await adapter.learn_home_team()
        if not adapter.team_allowed(clicker.team_id) or not channel:
            return
        message = body.get("message") or {}
        thread_ts = str(message.get("thread_ts") or message.get("ts") or _ts or "")
        team = str((body.get("team") or {}).get("id") or clicker.team_id)
        positive = action.get("value") == POSITIVE
        await adapter.record_feedback(clicker, team, channel, thread_ts, positive)


def _register_home_actions(app: AsyncApp, adapter: SlackAdapter) -> None:
    @app.action(FORGET_ACTION_ID)
    async def forget_all(ack: AsyncAck, body: dict[str, Any]) -> None:
        await ack()
        chat_user = clicked_by(body)
        await adapter.assistant.forget_memory(chat_user)
        await adapter.publish_home(chat_user)

    @app.action(REFRESH_ACTION_ID)
    async def refresh(ack: AsyncAck, body: dict[str, Any]) -> None:
        await ack()
        await adapter.publish_home(clicked_by(body), fresh=True)


# -- /ops ---------------------------------------------------------------------------------


def _register_command(app: AsyncApp, adapter: SlackAdapter) -> None:
    @app.command(SLASH_COMMAND)
    async def ops(
        ack: AsyncAck,
        command: dict[str, Any],
    ) -> None:
        team = str(command.get("team_id"))
        chat_user = ChatUser("slack", team, str(command["user_id"]))
        await adapter.learn_home_team()
        if not adapter.team_allowed(team):
            await ack(text="opsbot is not available to your workspace.", response_type="ephemeral")
            return
        text = str(command.get("text", "")).strip()
        verb, _, rest = text.partition(" ")
        verb = verb.lower()
        if verb in _NOT_QUESTIONS or not rest.strip():
            # Not a question: answered privately, never posted in the channel.
            try:
                reply = await _subcommand(adapter, chat_user, verb, rest)
            except Exception:
                log.exception("/ops %s failed for %s", verb[:32], chat_user.user_id)
                reply = text_message(_SUBCOMMAND_FAILED)
            await ack(text=reply.text, blocks=reply.blocks, response_type="ephemeral")
            return
        question = rest.strip() if verb == "ask" else text
        limit = adapter.config.max_message_chars
        if len(question) > limit:
            log.info("/ops ask of %d characters from %s refused", len(question), chat_user.user_id)
            await ack(text=too_long_text(len(question), limit), response_type="ephemeral")
            return
        message = UserMessage(
            chat_user,
            team,
            str(command["channel_id"]),
            None,
            question,
            is_dm=str(command.get("channel_name")) == "directmessage",
            response_url=command.get("response_url"),
        )
        # Stored before the ack, like an event; Slack does not redeliver commands, so a
        # failure to store is said in the ack instead.
        try:
            first = await adapter.accept(message, str(command.get("trigger_id") or ""))
        except Exception:
            log.exception("could not accept /ops from %s", chat_user.user_id)
            await ack(text=UNAVAILABLE_TEXT, response_type="ephemeral")
            return
        if not first:
            await ack()
            return
        await ack(text="On it — I'll answer in a thread.", response_type="ephemeral")
        await adapter.converse(message)

    @app.action(CONNECT_ACTION_ID)
    async def connect_clicked(ack: AsyncAck, body: dict[str, Any]) -> None:
        await ack()  # a URL button: Slack opens the link; we keep where to say "connected"
        adapter.remember_connect_prompt(clicked_by(body), body.get("response_url"))

    @app.action(CONNECT_SERVER_ACTION_ID)
    async def connect_server_clicked(ack: AsyncAck, body: dict[str, Any]) -> None:
        await ack()  # the same for *Connect <server>*; the button's value names the server
        actions = body.get("actions") or [{}]
        server = str(actions[0].get("value") or "")
        if server:
            adapter.remember_server_prompt(clicked_by(body), server, body.get("response_url"))


async def _subcommand(adapter: SlackAdapter, chat_user: ChatUser, verb: str, rest: str) -> Message:
    """The private answer to an /ops subcommand that is not a question."""
    assistant = adapter.assistant
    if verb == "link":
        return adapter.link_prompt(await assistant.link_url(chat_user))
    if verb == "unlink":
        removed = await assistant.unlink(chat_user)
        await report_connection(adapter, chat_user, connected=False)
        return text_message(
            "Your account was disconnected." if removed else "Your account was not connected."
        )
    if verb == "status":
        return text_message(status_text(await assistant.status(chat_user, fresh=True)))
    if verb == "whoami":
        status = await assistant.status(chat_user, fresh=True)
        who = f"You are <@{chat_user.user_id}> in workspace `{escape(chat_user.team_id)}`."
        return text_message(f"{who}\n{status_text(status)}")
    if verb == "pending":
        status = await assistant.status(chat_user, fresh=True)
        if not status.linked:
            hint = "" if status.problem else " Connect it with `/ops link`."
            return text_message(status_text(status) + hint)
        pending = await assistant.pending_for(chat_user)
        if not pending:
            return text_message("You have no requests waiting for an approver.")
        lines = "\n".join(f"• {approval_line(view)}" for view in pending)
        return text_message(f"*Your requests waiting for an approver:*\n{lines}")
    if verb == "memory":
        return text_message(await assistant.memory_command(chat_user, rest))
    unknown = (
        "" if verb in ("", "help", "ask") else f"`{escape(verb[:40])}` is not an /ops command.\n"
    )
    return Message(f"{unknown}opsbot help", [section(unknown + HELP_TEXT)])


def too_long_text(length: int, limit: int) -> str:
    return (
        f":scissors: That message is {length:,} characters long; opsbot reads up to "
        f"{limit:,}. Please shorten it (a link to the details works well) and ask again."
    )


# -- approvals ----------------------------------------------------------------------------


def _card_location(body: dict[str, Any]) -> tuple[str | None, str | None]:
    container = body.get("container") or {}
    named = body.get("channel")  # an object; the screen lets a plain id through too
    channel = container.get("channel_id") or (named.get("id") if isinstance(named, dict) else named)
    return channel, container.get("message_ts")


def _register_approvals(app: AsyncApp, adapter: SlackAdapter) -> None:
    async def refuse_team(
        context: AsyncBoltContext, body: dict[str, Any], clicker: ChatUser, channel: str | None
    ) -> bool:
        await adapter.learn_home_team()
        if adapter.team_allowed(clicker.team_id):
            return False
        await adapter.ephemeral(
            channel, clicker.user_id, text_message("opsbot is not available to your workspace.")
        )
        return True

    @app.action(APPROVE_ACTION_ID)
    async def approve(
        ack: AsyncAck, body: dict[str, Any], action: dict[str, Any], context: AsyncBoltContext
    ) -> None:
        await ack()
        clicker, (channel, ts) = clicked_by(body), _card_location(body)
        if await refuse_team(context, body, clicker, channel):
            return
        approval_id = str(action["value"])
        blocks = (body.get("message") or {}).get("blocks")
        # "Approving… (bob)" is sent first; the decision does not wait for Slack's answer
        # to it (a round trip per click), only the outcome's update of the card does.
        deciding = asyncio.ensure_future(
            adapter.show_deciding(
                approval_id,
                channel,
                ts,
                clicker,
                clicked_blocks=blocks if isinstance(blocks, list) else None,
            )
        )
        await asyncio.sleep(0)  # let it send before the decision's first await
        try:
            outcome = await _decide(adapter, clicker, approval_id, Approve())
        finally:
            # The outcome's card comes after "Approving…", never before it (a failed
            # "Approving…" update is only logged: the decision stands).
            [shown] = await asyncio.gather(deciding, return_exceptions=True)
            if isinstance(shown, Exception):
                log.warning("card not marked as deciding: %s", type(shown).__name__)
        await adapter.apply_outcome(outcome, approval_id, clicker, channel, ts)

    def modal_opener(kind: str) -> Callable[..., Awaitable[None]]:
        """The Edit or Reject click: a modal of that kind (Bolt injects by parameter name)."""

        async def clicked(
            ack: AsyncAck,
            body: dict[str, Any],
            action: dict[str, Any],
            client: AsyncWebClient,
            context: AsyncBoltContext,
        ) -> None:
            await ack()  # then views.open at once: the trigger id lives 3 seconds
            clicker, (channel, ts) = clicked_by(body), _card_location(body)
            if await refuse_team(context, body, clicker, channel):
                return
            approval_id = str(action["value"])
            view = await adapter.assistant.approval_view(approval_id)
            if view is None or view.status != "pending":
                await adapter.ephemeral(
                    channel,
                    clicker.user_id,
                    text_message(":information_source: This request is no longer pending."),
                )
                return
            ctx = ModalContext(approval_id, channel, ts)
            modal = edit_modal(view, ctx) if kind == "edit" else reject_modal(view, ctx)
            opened = await client.views_open(trigger_id=str(body["trigger_id"]), view=modal)
            # The modal opens first (the trigger id dies in 3 s); then, if the core says this
            # clicker cannot decide it, the modal turns into the refusal. decide() checks again.
            refusal = await _refusal(adapter, clicker, approval_id)
            if refusal is not None:
                view_id = str((opened.get("view") or {}).get("id", ""))
                await client.views_update(view_id=view_id, view=_notice_view(refusal.text))
                await adapter.ephemeral(channel, clicker.user_id, refusal)

        return clicked

    app.action(EDIT_ACTION_ID)(modal_opener("edit"))
    app.action(REJECT_ACTION_ID)(modal_opener("reject"))

    @app.view(EDIT_CALLBACK_ID)
    async def edit_submitted(
        ack: AsyncAck, body: dict[str, Any], view: dict[str, Any], context: AsyncBoltContext
    ) -> None:
        clicker = clicked_by(body)
        try:
            ctx = ModalContext.load(str(view.get("private_metadata", "")))
        except ValueError:  # the screen refuses these; Bolt refuses an empty "errors"
            await ack()
            return
        if await refuse_team(context, body, clicker, ctx.channel_id):
            await ack()
            return
        approval = await adapter.assistant.approval_view(ctx.approval_id)
        if approval is None:
            await ack()
            await adapter.ephemeral(
                ctx.channel_id, clicker.user_id, text_message("This request no longer exists.")
            )
            return
        values = (view.get("state") or {}).get("values") or {}
        args, errors = parse_edit(approval.input_schema, values)
        if errors:
            await ack(response_action="errors", errors=errors)
            return
        await adapter.show_deciding(ctx.approval_id, ctx.channel_id, ctx.message_ts, clicker)
        task = asyncio.create_task(_decide(adapter, clicker, ctx.approval_id, Edit(args)))
        done, _ = await asyncio.wait({task}, timeout=adapter.config.submission_wait_seconds)
        if done:
            outcome = task.result()
            if isinstance(outcome, InvalidEdit):
                await ack(
                    response_action="errors",
                    errors=field_errors_to_blocks(outcome.field_errors, approval.input_schema),
                )
                return
            if isinstance(outcome, NotAuthorised):
                await ack(
                    response_action="update",
                    view=_notice_view(f"You can't decide this request: {escape(outcome.reason)}"),
                )
                await adapter.apply_outcome(
                    outcome, ctx.approval_id, clicker, ctx.channel_id, ctx.message_ts
                )
                return
            await ack()
        else:
            await ack()  # the core is still running the call; report when it finishes
            outcome = await task
        await adapter.apply_outcome(
            outcome, ctx.approval_id, clicker, ctx.channel_id, ctx.message_ts
        )

    @app.view(REJECT_CALLBACK_ID)
    async def reject_submitted(
        ack: AsyncAck, body: dict[str, Any], view: dict[str, Any], context: AsyncBoltContext
    ) -> None:
        await ack()
        clicker = clicked_by(body)
        try:
            ctx = ModalContext.load(str(view.get("private_metadata", "")))
        except ValueError:
            return
        if await refuse_team(context, body, clicker, ctx.channel_id):
            return
        reason = parse_reason((view.get("state") or {}).get("values") or {})
        await adapter.show_deciding(
            ctx.approval_id, ctx.channel_id, ctx.message_ts, clicker, "Rejecting"
        )
        outcome = await _decide(adapter, clicker, ctx.approval_id, Reject(reason))
        await adapter.apply_outcome(
            outcome, ctx.approval_id, clicker, ctx.channel_id, ctx.message_ts
        )


async def _refusal(adapter: SlackAdapter, clicker: ChatUser, approval_id: str) -> Message | None:
    """Why ``clicker`` may not decide ``approval_id`` (per the core), or ``None``."""
    status = await adapter.assistant.status(clicker)
    if not status.linked:
        return adapter.link_prompt(status.login_url or await adapter.assistant.link_url(clicker))
    waiting = await adapter.assistant.awaiting_approver(clicker)
    if any(v.approval_id == approval_id for v in waiting):
        return None
    return text_message(
        ":no_entry_sign: You can't decide this request: it is not waiting for your approval."
    )


async def _decide(
    adapter: SlackAdapter, clicker: ChatUser, approval_id: str, decision: Approve | Edit | Reject
) -> DecisionOutcome | None:
    """The core's outcome, or ``None`` when it failed (the clicker is told; nothing else)."""
    try:
        return await adapter.assistant.decide(clicker, approval_id, decision)
    except Exception:
        log.exception("assistant failed on a decision")
        return None


def _notice_view(text: str) -> dict[str, Any]:
    return {
        "type": "modal",
        "title": {"type": "plain_text", "text": "opsbot"},
        "close": {"type": "plain_text", "text": "Close"},
        "blocks": [section(text)],
    }


__all__ = [
    "EVENT_SCOPES",
    "METHOD_SCOPES",
    "SLASH_COMMAND",
    "SUBSCRIBED_EVENTS",
    "register",
]
