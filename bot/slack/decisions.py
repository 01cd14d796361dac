"""Approval cards and decisions on Slack: the card posted, "Approving… (bob)" the moment
someone clicks, the outcome on the card, the requester's note and thread, and the Homes."""

from __future__ import annotations

import logging
from typing import Any

from bot.slack.cards import (
    approval_card,
    decided_card,
    deciding_card,
    deciding_from_blocks,
    state_line,
)
from bot.slack.core import (
    AlreadyDecided,
    Answered,
    ApprovalNotice,
    ApprovalView,
    ChatUser,
    Decided,
    DecisionOutcome,
    Expired,
    InvalidEdit,
    LinkRequired,
    NotAuthorised,
    Refused,
    ServerConnectRequired,
    is_settled,
    normalise_state,
)
from bot.slack.homes import HomeViews
from bot.slack.output import FAILURE_TEXT
from bot.slack.render import (
    answer_messages,
    escape,
    text_message,
)
from bot.slack.store import ApprovalMessages

log = logging.getLogger(__name__)


class DecisionViews(HomeViews):
    async def post_card(
        self,
        approval_id: str,
        team_id: str,
        requester_channel: str = "",
        requester_thread_ts: str = "",
        note_ts: str | None = None,
    ) -> None:
        """The approval's one card on Slack, in its current state (a mirrored approval may be
        decided already); no requester thread for a copy of another platform's approval.

        A run retried after its card was posted (a job taken over, a connection lost after
        the post) or a notice delivered twice finds the card saved and posts nothing; two
        attempts at once both post, the first save wins and the other deletes its copy."""
        if await self.approval_messages.get(approval_id) is not None:
            return
        view = await self.assistant.approval_view(approval_id)
        if view is None:
            log.error("approval %s vanished before its card was posted", approval_id)
            return
        if view.status == "pending":
            card = approval_card(view)
        else:
            card = decided_card(
                view,
                approval_id,
                _decision_of(view.status, view.edited_by),
                view.decided_by or "",
                view.status,
                state=view.status,
                reason=view.outcome_reason,
            )
        response = await self.client.chat_postMessage(
            channel=self.config.approvals_channel, text=card.text, blocks=card.blocks
        )
        posted = (str(response["channel"]), str(response["ts"]))
        if not await self.approval_messages.save(
            approval_id, team_id, posted, (requester_channel, requester_thread_ts), note_ts
        ):
            log.info("approval %s had its card already: this copy is deleted", approval_id)
            await self.client.chat_delete(channel=posted[0], ts=posted[1])

    async def on_notice(self, notice: ApprovalNotice) -> None:
        """An approval handled on another platform (Teams): post Slack's copy of its card, or
        show the decision taken there on it. Raising makes the core deliver it again later."""
        if notice.kind == "post":
            await self.post_card(notice.approval_id, self.home_team or "")
        elif notice.kind == "decided" and notice.decided is not None:
            await self.announce(notice.decided)
        else:
            log.warning("unknown approval notice %s ignored", notice.kind)

    async def show_deciding(
        self,
        approval_id: str,
        channel: str | None,
        card_ts: str | None,
        clicker: ChatUser,
        verb: str = "Approving",
        clicked_blocks: list[dict[str, Any]] | None = None,
    ) -> None:
        """At once after a click, before any slow work: the card says "Approving… (bob)" and
        loses its buttons, so nobody clicks a card that is already being decided. From the
        clicked card's own blocks when Slack sent them (no database read: this must come
        first), else from the approval. Best effort: the decision goes on if Slack refuses."""
        who = f"<@{clicker.user_id}>"
        card = (
            deciding_from_blocks(clicked_blocks, who, verb)
            if clicked_blocks and channel and card_ts
            else None
        )
        if card is None:
            stored = await self.approval_messages.get(approval_id)
            if stored is not None:
                channel, card_ts = stored.card_channel_id, stored.card_ts
            view = await self.assistant.approval_view(approval_id)
            if not channel or not card_ts or view is None or view.status != "pending":
                return
            card = deciding_card(view, who, verb)
        if not channel or not card_ts:
            return
        await self.update_or_log(channel, card_ts, card, "mark card as deciding")

    async def restore_card(
        self, approval_id: str, channel: str | None, card_ts: str | None
    ) -> None:
        """After a click that decided nothing (refused, invalid, failed, or another decision
        won): the card shows the approval as it now is — buttons again while it is still
        pending, the outcome once settled; one still running is left to its decider."""
        stored = await self.approval_messages.get(approval_id)
        if stored is not None:
            channel, card_ts = stored.card_channel_id, stored.card_ts
        view = await self.assistant.approval_view(approval_id)
        if not channel or not card_ts or view is None:
            return
        if view.status == "pending":
            card = approval_card(view)
        elif is_settled(view.status):
            status = normalise_state(view.status)
            decision = _decision_of(status, view.edited_by)
            card = decided_card(
                view,
                approval_id,
                decision,
                view.decided_by or "",
                status,
                state=status,
                reason=view.outcome_reason,
            )
        else:
            return
        await self.update_or_log(channel, card_ts, card, "restore card")

    async def apply_outcome(
        self,
        outcome: DecisionOutcome | None,
        approval_id: str,
        clicker: ChatUser,
        channel: str | None,
        card_ts: str | None,
    ) -> None:
        """Show a decision: card updated in place and the requester told, or a refusal only
        the clicker sees."""
        if isinstance(outcome, Decided):
            await self._show_decision(outcome, clicker, channel, card_ts)
            return
        if not isinstance(outcome, Expired):
            # Nothing was decided by this click: the "Approving…" card shows the approval as
            # it now is (an expired one is shown as such below).
            await self.restore_card(approval_id, channel, card_ts)
        if isinstance(outcome, LinkRequired):
            await self.ephemeral(channel, clicker.user_id, self.link_prompt(outcome.login_url))
            return
        if isinstance(outcome, AlreadyDecided):
            text = f":information_source: This request was already decided by {escape(outcome.by)}."
        elif isinstance(outcome, NotAuthorised):
            text = f":no_entry_sign: You can't decide this request: {escape(outcome.reason)}"
        elif isinstance(outcome, Expired):
            text = ":hourglass: This request has expired; nothing was run."
            await self._update_card(approval_id, channel, card_ts, "expired", "", "not run")
        elif isinstance(outcome, InvalidEdit):
            problems = "; ".join(f"{k}: {v}" for k, v in outcome.field_errors.items())
            text = f":warning: The edited arguments were not accepted: {escape(problems)}"
        else:
            text = FAILURE_TEXT
        await self.ephemeral(channel, clicker.user_id, text_message(text))

    async def _show_decision(
        self, outcome: Decided, clicker: ChatUser, channel: str | None, card_ts: str | None
    ) -> None:
        await self.announce(outcome, channel, card_ts, by=f"<@{clicker.user_id}>")
        for sibling in outcome.siblings:  # the step's other calls, run by this decision
            await self.announce(sibling)

    async def announce(
        self,
        outcome: Decided,
        channel: str | None = None,
        card_ts: str | None = None,
        *,
        by: str = "",
    ) -> None:
        """Show a decision taken anywhere (a click, or the expiry sweeper): the card is
        updated in place and the requester's thread is told."""
        by = outcome.decided_by or by
        # Read once for the card and the note (each read them again before)
        stored = await self.approval_messages.get(outcome.approval_id)
        view = await self.assistant.approval_view(outcome.approval_id)
        await self._update_card(
            outcome.approval_id,
            channel,
            card_ts,
            outcome.decision,
            by,
            outcome.outcome,
            state=outcome.state or None,
            reason=outcome.outcome_reason,
            known=(stored, view),
        )
        if stored is not None and stored.requester_note_ts:
            await self._update_note(
                outcome, stored.requester_channel_id, stored.requester_note_ts, view
            )
        try:
            await self._tell_requester(outcome, stored, by)
        finally:  # Homes last: the card and the requester's thread come first
            await self.refresh_homes(outcome.approval_id)

    async def _tell_requester(
        self, outcome: Decided, stored: ApprovalMessages | None, by: str
    ) -> None:
        ref = outcome.requester_ref
        if ref is not None and ref.platform != "slack":
            return  # the requester is on another platform: its adapter tells them
        if stored is not None and stored.requester_channel_id:
            target: tuple[str, str] | None = (
                stored.requester_channel_id,
                stored.requester_thread_ts,
            )
        elif ref is not None:
            target = (ref.channel_id, ref.thread_ts)
        else:
            target = None
        if target is None:
            log.warning("no requester thread known for approval %s", outcome.approval_id)
            return
        header = _decision_header(outcome, by)
        result = outcome.requester_result
        if isinstance(result, ServerConnectRequired):
            # Posted in the thread, so without the link (it is bound to the requester):
            # their next question there brings them a Connect button of their own.
            note = (
                f"Connect *{escape(result.server)}* to include its data: ask again here and "
                "use the Connect button opsbot shows you."
            )
            messages = (
                answer_messages(result.answer, header=f"{header}\n{note}")
                if result.answer is not None
                else [text_message(f"{header}\n{note}")]
            )
        elif isinstance(result, Answered):
            messages = answer_messages(result.answer, header=header)
        elif isinstance(result, Refused):
            messages = [text_message(f"{header}\n{escape(result.reason)}")]
        elif outcome.decision == "withdrawn":
            messages = [text_message(header)]
        else:
            messages = [text_message(f"{header}\n*Outcome:* {_outcome_text(outcome)}")]
        await self.post(target[0], target[1], messages)
        if outcome.requester_result is not None:  # the run answered: the session is idle again
            await self.sessions.set_status(target[0], target[1], "active")

    async def _update_note(
        self, outcome: Decided, channel: str, note_ts: str, view: ApprovalView | None
    ) -> None:
        """The requester's "needs approval" note no longer says it waits."""
        what = f"`{escape(view.server)}` · `{escape(view.tool)}`" if view else "Your request"
        message = text_message(f"{what}: {_decision_header(outcome, outcome.decided_by)}")
        await self.update_or_log(channel, note_ts, message, "update the requester's note")

    async def _update_card(
        self,
        approval_id: str,
        channel: str | None,
        card_ts: str | None,
        decision: str,
        by: str,
        outcome: str,
        *,
        state: str | None = None,
        reason: str | None = None,
        known: tuple[ApprovalMessages | None, ApprovalView | None] | None = None,
    ) -> None:
        """``known``: the card's stored place and the approval's view, when just read."""
        stored, view = known or (await self.approval_messages.get(approval_id), None)
        if stored is not None:
            channel, card_ts = stored.card_channel_id, stored.card_ts
        if not channel or not card_ts:
            log.warning("no card known for approval %s", approval_id)
            return
        if known is None:
            view = await self.assistant.approval_view(approval_id)
        card = decided_card(view, approval_id, decision, by, outcome, state=state, reason=reason)
        await self.client.chat_update(
            channel=channel, ts=card_ts, text=card.text, blocks=card.blocks
        )


def _decision_of(status: str, edited_by: str | None) -> str:
    status = normalise_state(status)
    if status in ("expired", "rejected", "withdrawn"):
        return status
    return "edited" if edited_by else "approved"


def _outcome_text(outcome: Decided) -> str:
    if outcome.state:
        return state_line(outcome.state, outcome.outcome_reason)
    return escape(outcome.outcome)


def _decision_header(outcome: Decided, by: str) -> str:
    """One line for the requester: who decided what, and what came of it (same words as the
    card)."""
    if outcome.decision == "expired":
        return "Your request *expired* before an approver decided it; nothing was run."
    if outcome.decision == "withdrawn":
        return f"Stopped: your request was *withdrawn* by {escape(by)}; nothing was run."
    header = f"Your request was *{escape(outcome.decision)}* by {escape(by)}"
    if outcome.state and normalise_state(outcome.state) not in ("approved", "rejected"):
        return f"{header} — {_outcome_text(outcome)}."
    return f"{header}."
