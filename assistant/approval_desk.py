"""The approvals side of the façade: decisions on approval cards, the sweeps that expire
and recover approvals, cross-platform notices, and what App Home lists.

``Assistant`` (``assistant.service``) inherits these; a run's reply is also built here
(``_reply``), since a resumed run's reply is part of each decision.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Awaitable, Callable
from dataclasses import KW_ONLY, dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from agent_core import answer as core
from agent_core.threads import PlatformRef, ThreadStore
from approvals.errors import (
    AlreadyDecidedError,
    ApprovalExpiredError,
    ApprovalNotFoundError,
    InvalidEditError,
    NotAuthorisedError,
)
from approvals.records import EXPIRY_DECIDER, ActionDecision, Approval, ApprovalStatus
from approvals.rules import check_decider
from approvals.service import ApprovalService, DecisionReport
from assistant.accounts import Accounts
from assistant.fanout import ApprovalFanout
from assistant.outcomes import reason_of, state_of
from assistant.types import (
    AlreadyDecided,
    Answer,
    Answered,
    ApprovalRequested,
    ApprovalSummary,
    ApprovalView,
    Approve,
    Decided,
    Decision,
    DecisionNotifier,
    DecisionOutcome,
    Edit,
    Expired,
    InvalidEdit,
    LinkRequired,
    NotAuthorised,
    NoticeHandler,
    Refused,
    Reject,
    Reply,
    ServerConnectRequired,
    Source,
)
from audit.reconcile import Reconciler, ReconcileReport
from broker.errors import BrokerError
from broker.types import ChatUser, Identity
from infra.clock import Clock, utc_now

if TYPE_CHECKING:
    # For the type only: the façade is handed its Agent, it never builds one, so importing
    # it does not load the agent module (its graph and model code).
    from agent_core.agent import Agent

log = logging.getLogger(__name__)

_FAR = timedelta(days=3650)
# App Home lists the latest requests of the ones this scan finds (oldest first, by the store).
MY_REQUESTS_SCANNED = 500
# Thread refs kept in memory (ids → their place on the platform; a ref never changes).
THREAD_REFS_KEPT = 2000


@dataclass(frozen=True, slots=True)
class Recovery:
    """How sweeps finish what a crash interrupted: ``reconciler`` settles writes whose outcome
    was never recorded (from the servers' change logs), then approvals left deciding for
    longer than ``grace`` are finished."""

    reconciler: Reconciler
    grace: timedelta


@dataclass(frozen=True, slots=True)
class Recovered:
    reconciled: ReconcileReport
    finished: list[Decided]


@dataclass(eq=False, repr=False)
class ApprovalDesk(Accounts):
    """Decisions, sweeps, notices and App Home's approval lists, on top of ``Accounts``
    (``Assistant``'s next fields are these)."""

    threads: ThreadStore
    # Typed as the Agent itself (no port restating its signatures): every caller passes one.
    agent: Agent
    # The approval service (for operations too: ``opsbot sweep``, ``opsbot reconcile``).
    approvals: ApprovalService
    _: KW_ONLY
    clock: Clock = utc_now
    recovery: Recovery | None = None
    # Every linked chat user (to find an approval's eligible approvers for App Home).
    people: Callable[[], Awaitable[list[ChatUser]]] | None = None
    # Cross-platform approvals: cards mirrored on other platforms, decisions shown on
    # every platform's copy. None: each approval lives on its requester's platform only.
    fanout: ApprovalFanout | None = None
    # Where each thread lives (its ref never changes): every card update and App Home
    # item shows it, and a burst of decisions asked the database for it hundreds of times.
    _thread_refs: dict[str, PlatformRef] = field(default_factory=dict, init=False)

    async def decide(
        self, approver: ChatUser, approval_id: str, decision: Decision
    ) -> DecisionOutcome:
        # Checked against the IdP now: a revoked sign-in or a lost group refuses this click.
        identity = await self._identity(approver, fresh=True)
        if isinstance(identity, Refused):
            return NotAuthorised(identity.reason)
        if isinstance(identity, LinkRequired):
            return identity
        match decision:
            case Approve():
                action = ActionDecision("approve")
            case Edit(args=args):
                action = ActionDecision("edit", args=dict(args))
            case Reject(reason=reason):
                action = ActionDecision("reject", message=reason or "Rejected by the approver.")
        try:
            report = await self.approvals.decide(identity, approval_id, action)
        except AlreadyDecidedError as exc:
            return AlreadyDecided(_who(exc.decided_by))
        except ApprovalExpiredError:
            return Expired()
        except InvalidEditError as exc:
            return InvalidEdit(dict(exc.field_errors))
        except NotAuthorisedError as exc:
            return NotAuthorised(exc.reason)
        except ApprovalNotFoundError:
            return NotAuthorised("There is no such approval.")
        decided = await self._decided(report)
        # The clicker's adapter shows it on its own card; every other platform is told.
        await self._publish_decided([decided], origin=approver.platform)
        return decided

    async def sweep(self) -> list[Decided]:
        """Expire overdue approvals, then finish those a crash interrupted (see ``recover``);
        each result is to be posted in the requester's thread."""
        decided = [await self._decided(report) for report in await self.approvals.sweep()]
        try:
            decided += (await self.recover()).finished
        except Exception as exc:  # the expiries above must still be announced
            log.warning("recovering interrupted approvals failed: %s", type(exc).__name__)
        return decided

    async def recover(self) -> Recovered:
        """Settle unrecorded writes, then finish approvals a crash left deciding (each once,
        whichever instance's sweeper gets it). Nothing to do without a ``Recovery``."""
        if self.recovery is None:
            return Recovered(ReconcileReport(), [])
        reconciled = await self.recovery.reconciler.run()
        # Approvals whose outcome was unknown, now that the reconciler found their writes.
        reports = await self.approvals.settle_unknown()
        reports += await self.approvals.finish_interrupted(self.recovery.grace)
        return Recovered(reconciled, [await self._decided(r) for r in reports])

    async def sweep_forever(
        self, interval: float, notify: DecisionNotifier, *, platform: str | None = None
    ) -> None:
        """The in-process sweeper: every ``interval`` seconds, expire and tell each requester.
        ``platform``: the platform ``notify`` shows decisions on (others get notices).

        Runs until cancelled; a failing pass is logged and retried on the next tick.
        """
        while True:
            try:
                await self.sweep_and_notify(notify, platform=platform)
            except Exception as exc:  # the next tick retries
                log.warning("sweep failed: %s", type(exc).__name__)
            await asyncio.sleep(interval)

    async def sweep_and_notify(
        self,
        notify: DecisionNotifier | None,
        *,
        platform: str | None = None,
    ) -> list[Decided]:
        """One sweep; each result is passed to ``notify`` (see ``notify_each``), the adapter
        of ``platform``; every other platform showing the approval gets a notice."""
        decided = await self.sweep()
        await self._publish_decided(decided, origin=platform if notify is not None else None)
        await notify_each(decided, notify)
        return decided

    # --- cross-platform approvals -----------------------------------------------------

    async def deliver_notices(self, platform: str, handle: NoticeHandler) -> int:
        if self.fanout is None:
            return 0
        return await self.fanout.deliver(platform, handle)

    async def notices_forever(self, platform: str, interval: float, handle: NoticeHandler) -> None:
        if self.fanout is None:
            await asyncio.Event().wait()  # nothing will ever come: wait to be cancelled
            return
        await self.fanout.forever(platform, interval, handle)

    async def _publish_decided(self, decided: list[Decided], origin: str | None) -> None:
        if self.fanout is None or not decided:
            return
        try:
            await self.fanout.decided(decided, origin)
        except Exception as exc:  # the decision stands; its other cards stay stale (logged)
            log.error("decision not announced to other platforms: %s", type(exc).__name__)

    async def _publish_requested(self, approval_ids: list[str], requester: Identity) -> None:
        if self.fanout is None:
            return
        origin = requester.chat_user.platform if requester.chat_user is not None else ""
        try:
            await self.fanout.requested(approval_ids, origin)
        except Exception as exc:  # the requester's own card is still posted
            log.error("approval not mirrored to other platforms: %s", type(exc).__name__)

    # --- App Home ---------------------------------------------------------------------

    async def approval_view(self, approval_id: str) -> ApprovalView | None:
        approval = await self.approvals.store.get(approval_id)
        return None if approval is None else await self._view(approval)

    async def pending_for(self, chat_user: ChatUser) -> list[ApprovalView]:
        identity = await self.identities.resolve(chat_user)
        if identity is None:
            return []
        found = await self.approvals.store.find(
            statuses=[ApprovalStatus.PENDING], requester_subject=identity.subject
        )
        return [await self._view(a) for a in found]

    async def awaiting_approver(self, chat_user: ChatUser) -> list[ApprovalView]:
        identity = await self.identities.resolve(chat_user)
        if identity is None:
            return []
        now = self.clock()
        mine = []
        for approval in await self.approvals.store.find(
            statuses=[ApprovalStatus.PENDING], limit=500
        ):
            try:
                check_decider(approval, identity, now)
            except (NotAuthorisedError, ApprovalExpiredError, AlreadyDecidedError):
                continue
            mine.append(await self._view(approval))
        return mine

    async def my_requests(self, chat_user: ChatUser, limit: int = 10) -> list[ApprovalView]:
        identity = await self.identities.resolve(chat_user)
        if identity is None:
            return []
        found = await self.approvals.store.find(
            requester_subject=identity.subject, limit=MY_REQUESTS_SCANNED
        )
        return [await self._view(a) for a in reversed(found[-limit:])]

    def on_approval_change(self, listener: Callable[[str], Awaitable[None]]) -> Callable[[], None]:
        return self.approvals.changes.listen(listener)

    async def home_audience(self, approval_id: str) -> list[ChatUser]:
        """The requester and every linked person who may decide ``approval_id`` now (or, once
        decided, could have): whose App Home lists it."""
        approval = await self.approvals.store.get(approval_id)
        if approval is None:
            return []
        audience = [approval.requester_chat_user] if approval.requester_chat_user else []
        pending = dataclasses.replace(
            approval, status=ApprovalStatus.PENDING, expires_at=approval.created_at + _FAR
        )
        for chat_user in await self.people() if self.people is not None else []:
            if chat_user in audience:
                continue
            try:
                identity = await self.identities.resolve(chat_user)
            except BrokerError:
                continue  # a broken link: not an approver now
            if identity is None:
                continue
            try:
                check_decider(pending, identity, approval.created_at)
            except (NotAuthorisedError, ApprovalExpiredError, AlreadyDecidedError):
                continue
            audience.append(chat_user)
        return audience

    # --- helpers --------------------------------------------------------------------

    async def _reply(self, result: Any, requester: Identity) -> Reply:
        if isinstance(result, core.Interrupt):
            opened = await self.approvals.open_all(result, requester)
            await self._publish_requested([a.approval_id for a in opened], requester)
            summaries = tuple(
                ApprovalSummary(a.approval_id, a.actions[0].tool, a.actions[0].server, a.expires_at)
                for a in opened
            )
            return ApprovalRequested(
                Answer(result.answer_so_far) if result.answer_so_far else None,
                summaries[0],
                summaries,
            )
        if isinstance(result, core.Answer):
            if result.connect:
                # One Connect button at a time (the first server by name); any other server
                # asks on the next question.
                server = min(result.connect)
                return ServerConnectRequired(server, result.connect[server], _answer(result))
            return Answered(_answer(result))
        return Refused("The assistant returned nothing usable.")

    async def _decided(self, report: DecisionReport) -> Decided:
        siblings = tuple([await self._decided(DecisionReport(a)) for a in report.siblings])
        approval = report.approval
        thread_ref = await self._thread_ref(approval.thread_id)
        if report.result is not None and approval.state is not ApprovalStatus.WITHDRAWN:
            requester_result: Reply | None = await self._reply(
                report.result, await self._requester(approval)
            )
        elif approval.state in (ApprovalStatus.APPROVED, ApprovalStatus.WITHDRAWN):
            # Decided, the step's other calls still waiting; or withdrawn: nothing to show.
            requester_result = None
        else:
            requester_result = _outcome_reply(approval)
        label = {"approve": "approved", "edit": "edited", "reject": "rejected"}
        types = {d.type for d in approval.decisions}
        decision = (
            "withdrawn"
            if approval.state is ApprovalStatus.WITHDRAWN
            else "expired"
            if approval.decided_by == EXPIRY_DECIDER
            else label["edit" if "edit" in types else "approve" if "approve" in types else "reject"]
        )
        state, reason = state_of(approval), reason_of(approval)
        return Decided(
            approval_id=approval.approval_id,
            decision=decision,
            decided_by=_who(approval.decided_by),
            outcome=f"{approval.status.value}: {reason}" if reason else approval.status.value,
            requester_ref=thread_ref,
            requester_result=requester_result,
            state=state,
            outcome_reason=reason,
            siblings=siblings,
        )

    async def _requester(self, approval: Approval) -> Identity:
        try:
            return await self.identities.resolve_subject(approval.requester_subject)
        except BrokerError:
            return Identity(approval.requester_subject, approval.requester_chat_user)

    async def _thread_ref(self, thread_id: str) -> PlatformRef | None:
        """The thread's place on its platform; only found ones are kept (a bounded few)."""
        ref = self._thread_refs.get(thread_id)
        if ref is None:
            thread = await self.threads.get(thread_id)
            if thread is None:
                return None
            if len(self._thread_refs) >= THREAD_REFS_KEPT:
                self._thread_refs.pop(next(iter(self._thread_refs)))  # the oldest
            ref = self._thread_refs[thread_id] = thread.ref
        return ref

    async def _view(self, approval: Approval) -> ApprovalView:
        first = approval.actions[0]
        thread_ref = await self._thread_ref(approval.thread_id)
        edit = next(
            (d for d in approval.decisions[:1] if d.type == "edit" and d.args is not None), None
        )
        return ApprovalView(
            approval_id=approval.approval_id,
            tool=first.tool,
            server=first.server,
            # What runs: the approver's edited arguments when there are any.
            args=dict(edit.args if edit is not None and edit.args is not None else first.args),
            original_args=dict(first.args) if edit is not None else None,
            edited_by=_who(approval.decided_by) if edit is not None else None,
            outcome_reason=reason_of(approval),
            requester=approval.requester_subject,
            requester_chat_user=approval.requester_chat_user,
            requester_ref=thread_ref,
            reads=[f"{r.tool} {r.ref_id}" for r in approval.reads],
            expires_at=approval.expires_at,
            input_schema=self.agent.tool_schema(first.tool) or dict(first.input_schema),
            status=state_of(approval),
            description=first.description,
            decided_by=approval.decided_by,
            approver_group=first.approver_group or None,
            state=state_of(approval),
        )


async def notify_each(decided: list[Decided], notify: DecisionNotifier | None) -> None:
    """Tell each decision's card and requester through ``notify`` (the chat adapter's
    ``announce``); one undeliverable notice does not stop the rest."""
    if notify is None:
        return
    for one in [d for top in decided for d in (top, *top.siblings)]:
        try:
            await notify(one)
        except Exception as exc:  # logged; the decision itself stands
            log.warning("decision notice not delivered: %s", type(exc).__name__)


def _outcome_reply(approval: Approval) -> Reply:
    """The requester's notice when there is no resumed run to show (settled later, refused)."""
    reason = approval.outcome_reason or "the request could not be completed"
    tool = approval.actions[0].tool
    if approval.state is ApprovalStatus.SUCCEEDED:
        return Answered(Answer(f"Your approved request ({tool}) was carried out."))
    if approval.state is ApprovalStatus.UNKNOWN:
        return Refused(f"The outcome of your approved request ({tool}) is not known yet: {reason}")
    return Refused(f"Your request was not carried out: {reason}")


def _who(subject: str | None) -> str:
    if subject == EXPIRY_DECIDER:
        return "expiry (no decision in time)"
    return subject or "someone else"


def _answer(result: core.Answer) -> Answer:
    return Answer(
        answer=result.answer,
        sources=[Source(s.system, s.id, s.link) for s in result.sources],
        actions_taken=list(result.actions_taken),
        pending_approvals=list(result.pending_approvals),
        caveats=list(result.caveats),
        confidence=result.confidence,
        model_used=result.model_used or None,
    )
