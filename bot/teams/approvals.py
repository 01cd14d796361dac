"""Approvals in Teams: the card posted as a new thread in the approvals channel, the clicks
(``adaptiveCard/action`` invokes) decided through ``AssistantPort.decide``, everyone's copy
updated, the requester told.

- ``post_cards`` (after an ``ApprovalRequested`` in Teams) and ``on_notice`` kind ``post``
  (requested on another platform) post the read-only base card whose ``refresh.userIds`` are
  the eligible approvers' MRIs, and remember where (``SqlTeamsCards``);
- ``handle_invoke``: a view verb (Teams' automatic refresh, Edit, Back) answers with the card
  this person may see — buttons only for an eligible approver; a decision verb calls
  ``decide`` (the core's compare-and-set: the first decision on any platform wins) and answers
  with the terminal card; then the card is PUT for everyone and the requester is told in their
  thread. A decision slower than ``decide_wait`` is answered "Approving…" and finished in the
  background (Teams gives an invoke a few seconds);
- ``announce`` / ``on_notice`` kind ``decided``: a decision taken elsewhere (Slack, the sweeper)
  is shown on the Teams card, and the requester is told if their thread is in Teams.

Invoke bodies are built in ``approval_invoke`` and cards in ``approval_cards``; this module is
the glue to the core and to ``TeamsOutbound``. Bad or forged clicks get a 400 invoke body and
one log line; nothing here raises to the SDK for a person's input.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable
from dataclasses import KW_ONLY, dataclass, field, replace
from typing import TYPE_CHECKING, Any

from microsoft_agents.activity import (
    Activity,
    ActivityTypes,
    ConversationReference,
    InvokeResponse,
)
from microsoft_agents.hosting.core import TurnContext
from microsoft_agents.hosting.core.connector import ConnectorClientBase

from bot.teams import core
from bot.teams.approval_cards import (
    EDIT_VERB,
    EDIT_VIEW_VERB,
    REJECT_VERB,
    Card,
    approver_card,
    base_card,
    card_digest,
    decided_card,
    deciding_card,
    edit_card,
    notice_card,
    state_line,
)
from bot.teams.approval_invoke import (
    BadAction,
    CardAction,
    card_response,
    coerce_edit,
    error_response,
    read_card_action,
)
from bot.teams.approval_store import SqlTeamsCards, TeamsCard
from bot.teams.core import (
    Answered,
    ApprovalNotice,
    ApprovalRequested,
    ApprovalView,
    AssistantPort,
    Decided,
    DecisionOutcome,
    Edit,
    Refused,
    normalise_state,
)
from bot.teams.render import answer_activities, card_activity, note_activity

if TYPE_CHECKING:
    from bot.teams.incoming import TeamsMessage
    from bot.teams.outbound import TeamsOutbound

log = logging.getLogger(__name__)

DECIDE_WAIT_SECONDS = 4.0
ROSTER_TTL_SECONDS = 300.0
# How long a click on a card whose post is still in flight (Teams shows the card, and asks
# for the approver's view, before the Connector's answer has reached opsbot) waits for it.
POSTING_WAIT_SECONDS = 5.0


@dataclass(eq=False)
class TeamsApprovals:
    outbound: TeamsOutbound
    approvals_conversation_id: str | None
    _: KW_ONLY
    assistant: AssistantPort | None = None
    cards: SqlTeamsCards | None = None
    tenant_id: str = ""
    # Where the approvals channel is served from: the latest serviceUrl a Teams activity
    # showed (every conversation of a tenant shares it), else the configured one. Latest
    # wins: Teams may serve a tenant from another serviceUrl later, and a card stored with
    # the old one could then be neither updated nor its roster read.
    service_url: str | None = None
    decide_wait: float = DECIDE_WAIT_SECONDS
    _roster: tuple[float, dict[str, str]] | None = field(default=None, init=False)
    _tasks: set[asyncio.Task[None]] = field(default_factory=set, init=False)
    _posting: dict[str, asyncio.Event] = field(default_factory=dict, init=False)

    # --- wiring -----------------------------------------------------------------------

    def register(self, app: Any) -> None:
        """Every ``adaptiveCard/action`` invoke comes here, whatever its verb, so a forged or
        unknown one still gets a clear 400 body instead of the SDK's default."""

        async def on_card_action(context: TurnContext, _state: Any) -> None:
            activity = context.activity.model_dump(mode="json", by_alias=True, exclude_none=True)
            try:
                body = await self.handle_invoke(activity)
            except Exception:
                log.exception("a Teams card action failed")
                body = error_response(500, "Something went wrong on opsbot's side; try again.")
            await context.send_activity(
                Activity(
                    type=ActivityTypes.invoke_response,
                    value=InvokeResponse(status=200, body=body),
                )
            )

        app.invoke("adaptiveCard/action")(on_card_action)

    def _core(self) -> tuple[AssistantPort, SqlTeamsCards]:
        if self.assistant is None or self.cards is None:
            raise RuntimeError("TeamsApprovals needs the assistant and the card store")
        return self.assistant, self.cards

    async def idle(self) -> None:
        """Wait for the updates still running after answered clicks (tests, shutdown)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    def _later(self, work: Awaitable[None]) -> None:
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # --- posting ----------------------------------------------------------------------

    async def post_cards(self, reply: ApprovalRequested, message: TeamsMessage) -> None:
        """One card per approval of a request made in Teams, each a new thread in the
        approvals channel."""
        self.service_url = message.conversation.service_url
        for summary in reply.all:
            try:
                await self.post_card(
                    summary.approval_id,
                    message.conversation.service_url,
                    message.chat_user.team_id,
                    requester=(message.ref.channel_id, message.ref.thread_ts),
                )
            except Exception:
                log.exception("approval card %s not posted in Teams", summary.approval_id)

    async def post_card(
        self,
        approval_id: str,
        service_url: str,
        tenant_id: str,
        *,
        requester: tuple[str, str] = ("", ""),
    ) -> TeamsCard | None:
        """Post the card (its current state: a mirrored approval may be decided already) and
        remember it; a second post of one approval does nothing."""
        assistant, cards = self._core()
        if not self.approvals_conversation_id:
            log.warning("no Teams approvals channel configured: approval %s not shown", approval_id)
            return None
        known = await cards.get(approval_id)
        if known is not None:
            return known
        view = await assistant.approval_view(approval_id)
        if view is None:
            log.warning("approval %s vanished before its Teams card was posted", approval_id)
            return None
        card = self._card_for_all(view, await self.approver_mris(view, service_url))
        posting = self._posting.setdefault(approval_id, asyncio.Event())
        try:
            conversation_id, root = await self.outbound.create_thread(
                service_url,
                tenant_id,
                self.approvals_conversation_id,
                card_activity(card, f"Approval needed: {view.server} · {view.tool}"),
            )
            posted = TeamsCard(
                approval_id, tenant_id, conversation_id, root, service_url, *requester
            )
            await cards.save(posted)
        finally:
            if self._posting.get(approval_id) is posting:
                del self._posting[approval_id]
            posting.set()
        return posted

    async def _card(self, approval_id: str) -> TeamsCard | None:
        """The approval's card, addressed through the serviceUrl Teams uses now; a card
        being posted is waited for (``POSTING_WAIT_SECONDS``)."""
        _, cards = self._core()
        card = await cards.get(approval_id)
        posting = self._posting.get(approval_id)
        if card is None and posting is not None:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(POSTING_WAIT_SECONDS):
                    await posting.wait()
            card = await cards.get(approval_id)
        if card is None or not self.service_url or card.service_url == self.service_url:
            return card
        return replace(card, service_url=self.service_url)

    def _card_for_all(self, view: ApprovalView, mris: list[str]) -> Card:
        if _pending(view):
            return base_card(view, mris)
        return decided_card(view, view.approval_id)

    async def approver_mris(self, view: ApprovalView, service_url: str) -> list[str]:
        """The Teams MRIs of the eligible approvers (never the requester): those whose view
        Teams refreshes with buttons. From the core's audience and the channel's roster."""
        assistant, _ = self._core()
        try:
            audience = await assistant.home_audience(view.approval_id)
        except Exception as exc:
            log.warning("approvers of %s unknown: %s", view.approval_id, type(exc).__name__)
            return []
        wanted = [
            u.user_id for u in audience if u.platform == "teams" and u != view.requester_chat_user
        ]
        if not wanted:
            return []
        roster = await self._members(service_url)
        return [roster[aad] for aad in wanted if aad in roster]

    async def _members(self, service_url: str) -> dict[str, str]:
        """aadObjectId → MRI for the approvals channel's team, cached a few minutes."""
        now = time.monotonic()
        if self._roster is not None and now - self._roster[0] < ROSTER_TTL_SECONDS:
            return self._roster[1]
        channel = self.approvals_conversation_id or ""
        reference = ConversationReference.model_validate(
            {
                "bot": {"id": f"28:{self.outbound.app_id}"},
                "channelId": "msteams",
                "conversation": {"id": channel, "isGroup": True, "tenantId": self.tenant_id},
                "serviceUrl": service_url,
            }
        )
        found: dict[str, str] = {}

        async def callback(context: TurnContext) -> None:
            client = context.services.get(ConnectorClientBase)  # type: ignore[type-abstract]
            if client is None:
                return
            for member in await client.conversations.get_conversation_members(channel):
                if member.aad_object_id and member.id:
                    found[str(member.aad_object_id)] = str(member.id)

        try:
            await self.outbound.cloud.continue_conversation(
                self.outbound.app_id, reference.get_continuation_activity(), callback
            )
        except Exception as exc:  # no buttons by refresh; a manual refresh still works
            log.warning("Teams roster of the approvals channel unavailable: %s", type(exc).__name__)
            return {}
        self._roster = (now, found)
        return found

    # --- clicks -----------------------------------------------------------------------

    async def handle_invoke(self, activity: dict[str, Any]) -> dict[str, Any]:
        """The invoke response body for one click (see the module docstring)."""
        assistant, _ = self._core()
        action = read_card_action(activity)
        if isinstance(action, BadAction):
            return error_response(action.status, action.message)
        if isinstance(activity.get("serviceUrl"), str):
            self.service_url = activity["serviceUrl"]
        view = await assistant.approval_view(action.approval_id)
        card = await self._card(action.approval_id)
        if view is None or card is None or not _from_card(action, card):
            log.info("teams card action refused: not a card opsbot posted for this approval")
            return error_response(400, "This card is not an approval opsbot can find.")
        mris = await self.approver_mris(view, card.service_url)
        if action.decision is None and action.verb != EDIT_VERB:
            return card_response(await self._view_for(action, view, mris))
        if not _pending(view):
            return card_response(decided_card(view, view.approval_id))
        if action.version != card_digest(view):
            log.info("teams card action refused: the card no longer shows what would run")
            return card_response(
                notice_card("This card changed since you opened it: check it again.", view)
            )
        decision = action.decision
        if action.verb == EDIT_VERB:
            parsed = coerce_edit(view.input_schema, view.args, action.inputs or {})
            if parsed.field_errors:
                values = {**view.args, **(action.inputs or {})}
                return card_response(
                    edit_card(view, mris, values=values, field_errors=parsed.field_errors)
                )
            decision = Edit(parsed.args)
        assert decision is not None
        return card_response(await self._decide(action, decision, view, card, mris))

    async def _view_for(self, action: CardAction, view: ApprovalView, mris: list[str]) -> Card:
        """What this person sees on refresh, Edit or Back: buttons only for an eligible
        approver while the approval is pending; the outcome once decided."""
        if not _pending(view):
            return decided_card(view, view.approval_id)
        if not await self._may_decide(action, view):
            return base_card(view, mris)
        if action.verb == EDIT_VIEW_VERB:
            return edit_card(view, mris)
        return approver_card(view, mris)

    async def _may_decide(self, action: CardAction, view: ApprovalView) -> bool:
        assistant, _ = self._core()
        if action.clicker == view.requester_chat_user:
            return False
        try:
            mine = await assistant.awaiting_approver(action.clicker)
        except Exception as exc:
            log.warning("approver check failed: %s", type(exc).__name__)
            return False
        return any(v.approval_id == view.approval_id for v in mine)

    async def _decide(
        self,
        action: CardAction,
        decision: Any,
        view: ApprovalView,
        card: TeamsCard,
        mris: list[str],
    ) -> Card:
        assistant, _ = self._core()
        deciding = asyncio.ensure_future(
            assistant.decide(action.clicker, view.approval_id, decision)
        )
        try:
            outcome = await asyncio.wait_for(asyncio.shield(deciding), self.decide_wait)
        except TimeoutError:
            # Teams gives the click a few seconds: say it is under way, finish in the background.
            self._later(self._finish(deciding, view.approval_id))
            who = action.clicker_name or "you"
            verb = "Rejecting" if action.verb == REJECT_VERB else "Approving"
            return deciding_card(view, who, verb)
        return await self._answer(outcome, action, view, card, mris)

    async def _finish(self, deciding: asyncio.Future[DecisionOutcome], approval_id: str) -> None:
        try:
            outcome = await deciding
        except Exception:
            log.exception("a Teams decision failed after its click was answered")
            outcome = None
        if isinstance(outcome, Decided):
            await self._show_everywhere(outcome)
            return
        await self._restore(approval_id)

    async def _answer(
        self,
        outcome: DecisionOutcome,
        action: CardAction,
        view: ApprovalView,
        card: TeamsCard,
        mris: list[str],
    ) -> Card:
        assistant, _ = self._core()
        if isinstance(outcome, Decided):
            self._later(self._show_everywhere(outcome))
            fresh = await assistant.approval_view(view.approval_id) or view
            return decided_card(fresh, view.approval_id, decided=outcome)
        if isinstance(outcome, core.InvalidEdit):
            values = {**view.args, **(action.inputs or {})}
            return edit_card(view, mris, values=values, field_errors=outcome.field_errors)
        current = await assistant.approval_view(view.approval_id) or view
        if isinstance(outcome, core.AlreadyDecided):
            if _pending(current):  # another click is running it right now
                return notice_card(f"This request is being decided by {outcome.by}.", current)
            return decided_card(current, view.approval_id)
        if isinstance(outcome, core.Expired):
            self._later(self._restore(view.approval_id))
            return decided_card(current, view.approval_id)
        if isinstance(outcome, core.NotAuthorised):
            return notice_card(f"⛔ You can't decide this request: {outcome.reason}", current)
        if isinstance(outcome, core.LinkRequired):
            connect = notice_card(
                "Connect your company account first, then open this card again.", current
            )
            connect["actions"] = [
                {
                    "type": "Action.OpenUrl",
                    "title": "Connect your account",
                    "url": outcome.login_url,
                }
            ]
            return connect
        return notice_card("Something went wrong on opsbot's side; try again.", current)

    # --- everyone's copy and the requester ------------------------------------------

    async def _show_everywhere(self, outcome: Decided) -> None:
        for one in (outcome, *outcome.siblings):
            try:
                await self.announce(one)
            except Exception:
                log.exception("decision %s not shown in Teams", one.approval_id)

    async def announce(self, decided: Decided) -> None:
        """A decision (from a click here, another platform, or the sweeper): the card is
        updated for everyone, and a requester whose thread is in Teams is told."""
        assistant, _ = self._core()
        card = await self._card(decided.approval_id)
        if card is not None:
            view = await assistant.approval_view(decided.approval_id)
            await self._put(card, decided_card(view, decided.approval_id, decided=decided))
        ref = decided.requester_ref
        if ref is not None and ref.platform == "teams":
            await self.outbound.post_in_thread(ref, requester_activities(decided))

    async def _restore(self, approval_id: str) -> None:
        """After a click that decided nothing: everyone's copy shows the approval as it is."""
        assistant, _ = self._core()
        card = await self._card(approval_id)
        view = await assistant.approval_view(approval_id)
        if card is None or view is None:
            return
        mris = await self.approver_mris(view, card.service_url)
        with contextlib.suppress(Exception):
            await self._put(card, self._card_for_all(view, mris))

    async def _put(self, card: TeamsCard, content: Card) -> None:
        await self.outbound.update(
            card.reference(self.outbound.app_id),
            card.activity_id,
            card_activity(content, str(content.get("fallbackText", ""))),
        )

    async def on_notice(self, notice: ApprovalNotice) -> None:
        """An approval handled on another platform: post Teams' copy (``post``) or show the
        decision taken there (``decided``). Raising makes the core deliver it again later."""
        if notice.kind == "post":
            if not self.service_url:
                raise RuntimeError("no Teams serviceUrl known yet for the approvals channel")
            await self.post_card(notice.approval_id, self.service_url, self.tenant_id)
        elif notice.kind == "decided" and notice.decided is not None:
            await self.announce(notice.decided)
        else:
            log.warning("unknown approval notice %s ignored", notice.kind)


def requester_activities(decided: Decided) -> list[dict[str, Any]]:
    """What the requester reads in their thread: who decided what and what came of it (the
    card's words), then the resumed run's answer."""
    if decided.decision == "expired":
        header = "Your request expired before an approver decided it; nothing was run."
    else:
        header = f"Your request was {decided.decision} by {decided.decided_by}"
        state = normalise_state(decided.state) if decided.state else ""
        header += f" — {state_line(state, decided.outcome_reason)}." if state else "."
    activities = [note_activity(header)]
    result = decided.requester_result
    if isinstance(result, Answered):
        activities += answer_activities(result.answer)
    elif isinstance(result, Refused):
        activities.append(note_activity(result.reason))
    return activities


def _pending(view: ApprovalView) -> bool:
    return normalise_state(view.status or view.state) == "pending"


def _from_card(action: CardAction, card: TeamsCard) -> bool:
    """The click came from the card opsbot posted for this approval (its thread and message)."""
    channel = action.conversation_id.partition(";messageid=")[0]
    if channel != card.channel_id:
        return False
    return action.reply_to_id in (None, card.activity_id)
