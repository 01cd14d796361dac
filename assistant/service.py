"""The platform-neutral façade the chat adapters call (``bot/slack`` today, Teams later).

An adapter only translates platform events into these calls and renders what comes back;
identity, threads, the agent, approvals and audit all live behind this class. Nothing here
imports a chat SDK.

Example::

    reply = await assistant.handle_message(ChatUser("slack", "T1", "U1"), ref, "close PAY-7")
    match reply:
        case ApprovalRequested(approval=summary): ...   # post a card for summary.approval_id
    outcome = await assistant.decide(ChatUser("slack", "T1", "U2"), summary.approval_id, Approve())
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import KW_ONLY, dataclass, field
from datetime import timedelta
from typing import Any, Protocol

from agent_core import answer as core
from agent_core.errors import AgentError
from agent_core.runs import ALREADY_STOPPED, RunRegistry, StopSignal
from agent_core.threads import NotThreadOwnerError, PlatformRef, ThreadError, ThreadStore
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
from assistant.fanout import ApprovalFanout
from assistant.outcomes import reason_of, state_of
from assistant.progress import ProgressRelay, call_title
from assistant.types import (
    AlreadyDecided,
    Answer,
    Answered,
    ApprovalNotice,
    ApprovalRequested,
    ApprovalSummary,
    ApprovalView,
    Approve,
    ConnectRefused,
    Decided,
    Decision,
    DecisionOutcome,
    Edit,
    Expired,
    InvalidEdit,
    Linked,
    LinkRequired,
    NotAuthorised,
    Refused,
    Reject,
    Remembered,
    Reply,
    RunEvents,
    ServerConnected,
    ServerConnection,
    ServerConnectRequired,
    Source,
    Stopped,
    StopResult,
    ToolCallAwaitingApproval,
    UserStatus,
)
from audit.log import EventKind
from audit.reconcile import Reconciler, ReconcileReport
from broker.errors import (
    AccessRevokedError,
    BrokerError,
    ConnectRequired,
    InvalidStateError,
    LinkBrokenError,
    LinkingError,
)
from broker.types import (
    ChatUser,
    Identity,
    IdentityService,
    LinkCompleter,
    ServerConnector,
    SsoCompleter,
)
from infra.clock import Clock, utc_now
from infra.observability.metrics import FEEDBACK, STOPS
from memory.chat import MemoryCommands, describe

log = logging.getLogger(__name__)

MAX_MESSAGE_CHARS = 4000
MEMORY_DISABLED = "Memory is not enabled."
ACCESS_REVOKED_TEXT = (
    "Your company account no longer lets opsbot act for you (access revoked or sign-in "
    "expired). Connect again with `/ops link`, or ask your administrator."
)
LINK_BROKEN_TEXT = (
    "Your link to your company account is broken: your company sign-in was refused, so "
    "your company account no longer lets opsbot act for you. Please reconnect with "
    "`/ops link`."
)
UNCHECKED_TEXT = "Your company account could not be checked right now; please try again soon."
STALE_CONNECT_TEXT = (
    "This connect link has expired or was already used. Ask opsbot again for a new one."
)
_FAR = timedelta(days=3650)

__all__ = ["AgentPort", "Assistant", "Recovered", "Recovery", "notify_each"]


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


# App Home lists the latest requests of the ones this scan finds (oldest first, by the store).
MY_REQUESTS_SCANNED = 500
# Thread refs kept in memory (ids → their place on the platform; a ref never changes).
THREAD_REFS_KEPT = 2000


class AgentPort(Protocol):
    """What the façade needs from ``agent_core.Agent``."""

    async def run(
        self,
        identity: Identity,
        thread_id: str,
        message: str,
        *,
        progress: ProgressRelay | None = None,
        stop: StopSignal | None = None,
        answer: Callable[[str], Awaitable[None]] | None = None,
    ) -> core.RunResult: ...

    async def resume(
        self,
        identity: Identity,
        thread_id: str,
        decisions: list[dict[str, Any]],
        *,
        stop: StopSignal | None = None,
    ) -> core.RunResult: ...

    def tool_schema(self, name: str) -> dict[str, Any] | None: ...


@dataclass(eq=False, repr=False)
class Assistant:
    """The one object a chat adapter talks to. Implements ``AssistantPort``.

    Everything is checked here or below: the chat user's link (→ identity with current
    groups), thread ownership, the approver's rights; nothing is taken from the platform on
    trust but the (verified) chat user id.
    """

    identities: IdentityService
    threads: ThreadStore
    agent: AgentPort
    # The approval service (for operations too: ``opsbot sweep``, ``opsbot reconcile``).
    approvals: ApprovalService
    _: KW_ONLY
    clock: Clock = utc_now
    memory: MemoryCommands | None = None  # user memory (``/ops memory``, App Home); None: off
    recovery: Recovery | None = None
    links: LinkCompleter | None = None  # finishes account links (/oauth/callback); None: elsewhere
    # Every linked chat user (to find an approval's eligible approvers for App Home).
    people: Callable[[], Awaitable[list[ChatUser]]] | None = None
    # Cross-platform approvals: cards mirrored on other platforms, decisions shown on
    # every platform's copy. None: each approval lives on its requester's platform only.
    fanout: ApprovalFanout | None = None
    # Finishes connections to ``auth: oauth`` MCP servers; None: no such server here.
    servers: ServerConnector | None = None
    # The MCP servers reached with the user's exchanged token (App Home's connections).
    exchange_servers: Sequence[str] = ()
    # The MCP servers each user connects with their own sign-in (``auth: oauth``).
    oauth_servers: Sequence[str] = ()
    # Where Stop finds a working run (any instance); None: Stop only withdraws approvals.
    runs: RunRegistry | None = None
    # Links Teams users from their client's SSO token (the IdP is Entra); None: off.
    sso: SsoCompleter | None = None
    # Where each thread lives (its ref never changes): every card update and App Home
    # item shows it, and a burst of decisions asked the database for it hundreds of times.
    _thread_refs: dict[str, PlatformRef] = field(default_factory=dict, init=False)

    def __post_init__(self) -> None:
        self.exchange_servers = tuple(self.exchange_servers)
        self.oauth_servers = tuple(self.oauth_servers)

    # --- messages -------------------------------------------------------------------

    async def handle_message(
        self,
        chat_user: ChatUser,
        ref: PlatformRef,
        text: str,
        *,
        events: RunEvents | None = None,
    ) -> Reply:
        text = text.strip()
        if not text:
            return Refused("Send a question or a request, e.g. 'show ticket PAY-101'.")
        if len(text) > MAX_MESSAGE_CHARS:
            return Refused(f"That message is too long (over {MAX_MESSAGE_CHARS} characters).")
        identity = await self._identity(chat_user)
        if not isinstance(identity, Identity):
            return identity
        relay = ProgressRelay(events)
        stop = None
        try:
            thread = await self.threads.get_or_create(ref, identity.subject)
            if thread.owner_subject != identity.subject:
                raise NotThreadOwnerError("this conversation belongs to another user")
            stop = await self.runs.start(thread.thread_id) if self.runs is not None else None
            try:
                # The answer's text is streamed only to an adapter that listens: the plain
                # run stays the cheaper ``ainvoke``.
                result = await self.agent.run(
                    identity,
                    thread.thread_id,
                    text,
                    progress=relay,
                    stop=stop,
                    answer=relay.answer_text if relay.listening else None,
                )
            finally:
                if stop is not None and self.runs is not None:
                    await self.runs.finish(stop.run_id)
        except NotThreadOwnerError:
            return Refused("This conversation belongs to another user: start your own thread.")
        except (AgentError, ThreadError, BrokerError) as exc:
            log.warning("run failed for %s: %s", identity.subject, type(exc).__name__)
            return Refused(f"I could not complete that: {exc}")
        if stop is not None and await stop.requested():
            return await self._stopped(result, identity, thread.thread_id, relay)
        reply = await self._reply(result, identity)
        if isinstance(reply, ApprovalRequested) and isinstance(result, core.Interrupt):
            await self._tell_waiting(result, reply, relay)
        return reply

    async def _tell_waiting(
        self, interrupt: core.Interrupt, reply: ApprovalRequested, relay: ProgressRelay
    ) -> None:
        for request, summary in zip(interrupt.action_requests, reply.all, strict=False):
            server = request.server or summary.server
            await relay.emit(
                ToolCallAwaitingApproval(
                    call_id=request.tool_call_id,
                    server=server,
                    tool=request.name,
                    title=call_title(server, request.name, request.args),
                    approval_id=summary.approval_id,
                )
            )

    async def _stopped(
        self, result: Any, identity: Identity, thread_id: str, relay: ProgressRelay
    ) -> Stopped:
        """The reply of a run its requester stopped: what ran, what never started."""
        if isinstance(result, core.Interrupt):
            # Stopped just as writes were proposed: none is sent for approval; the paused
            # run is closed without another model step.
            rejects = [
                {"type": "reject", "message": "Not run: the request was stopped."}
                for _ in result.action_requests
            ]
            relay.not_started.extend(
                call_title(r.server or "", r.name, r.args) for r in result.action_requests
            )
            try:
                await self.agent.resume(identity, thread_id, rejects, stop=ALREADY_STOPPED)
            except (AgentError, ThreadError, BrokerError) as exc:
                log.warning("closing a stopped run failed: %s", type(exc).__name__)
        done, skipped = tuple(relay.started), tuple(dict.fromkeys(relay.not_started))
        parts = [":black_square_for_stop: Stopped at your request."]
        parts.append(
            f"Done before the stop: {', '.join(done)}." if done else "No tool call had run."
        )
        if skipped:
            parts.append(f"Not started: {', '.join(skipped)}.")
        return Stopped(" ".join(parts), done, skipped)

    async def stop(self, chat_user: ChatUser, ref: PlatformRef) -> StopResult:
        identity = await self._identity(chat_user)
        if isinstance(identity, LinkRequired):
            return StopResult(refused="Connect your account first (`/ops link`).")
        if isinstance(identity, Refused):
            return StopResult(refused=identity.reason)
        thread = await self.threads.find(ref)
        if thread is None:
            return StopResult()
        if thread.owner_subject != identity.subject:
            return StopResult(refused="Only the person who asked can stop this request.")
        runs = await self.runs.stop(thread.thread_id, identity.subject) if self.runs else 0
        reports = await self.approvals.withdraw(identity, thread.thread_id)
        withdrawn = tuple([await self._decided(r) for r in reports])
        # The stopper's adapter updates its own cards; every other platform's copy is told.
        await self._publish_decided(list(withdrawn), origin=chat_user.platform)
        await self.approvals.audit.record(
            EventKind.RUN_STOPPED,
            requester=identity.subject,
            thread_id=thread.thread_id,
            outcome="stopped" if runs else "idle",
            detail={"runs": runs, "withdrawn": [d.approval_id for d in withdrawn]},
        )
        STOPS.labels("run" if runs else "idle").inc()
        if withdrawn:
            STOPS.labels("withdrawn").inc(len(withdrawn))
        log.info("stop by %s: %d run(s), %d approval(s)", identity.subject, runs, len(withdrawn))
        return StopResult(run_stopped=runs > 0, withdrawn=withdrawn)

    async def record_feedback(self, chat_user: ChatUser, ref: PlatformRef, positive: bool) -> None:
        identity = await self.identities.resolve(chat_user)
        thread = await self.threads.find(ref)
        rating = "positive" if positive else "negative"
        who = identity.subject if identity is not None else f"{chat_user.platform}:unlinked"
        await self.approvals.audit.record(
            EventKind.FEEDBACK,
            requester=who,
            thread_id=None if thread is None else thread.thread_id,
            outcome=rating,
        )
        FEEDBACK.labels(rating).inc()

    # --- approvals ------------------------------------------------------------------

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
        self,
        interval: float,
        notify: Callable[[Decided], Awaitable[None]],
        *,
        platform: str | None = None,
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
        notify: Callable[[Decided], Awaitable[None]] | None,
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

    async def deliver_notices(
        self, platform: str, handle: Callable[[ApprovalNotice], Awaitable[None]]
    ) -> int:
        if self.fanout is None:
            return 0
        return await self.fanout.deliver(platform, handle)

    async def notices_forever(
        self,
        platform: str,
        interval: float,
        handle: Callable[[ApprovalNotice], Awaitable[None]],
    ) -> None:
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

    async def connections(self, chat_user: ChatUser) -> list[ServerConnection]:
        identity = await self.identities.resolve(chat_user)
        if identity is None:
            return []
        shown = [
            await _connection(
                server,
                self.identities.get_token(identity, server),
                AccessRevokedError,
                "access revoked: connect again",
            )
            for server in self.exchange_servers
        ]
        connector = self.servers
        if connector is not None:
            shown += [
                await _connection(
                    server,
                    connector.oauth_token(identity, server),
                    ConnectRequired,
                    "not connected: ask opsbot to use it",
                )
                for server in self.oauth_servers
            ]
        return shown

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

    # --- account --------------------------------------------------------------------

    async def link_url(self, chat_user: ChatUser) -> str:
        return await self.identities.link_url(chat_user)

    async def unlink(self, chat_user: ChatUser) -> bool:
        return await self.identities.unlink(chat_user)

    async def complete_link(self, state: str, code: str, *, iss: str | None = None) -> Linked:
        if self.links is None:
            raise LinkingError("account links are not completed by this process")
        identity = await self.links.complete_link(state, code, iss=iss)
        if identity.chat_user is None:  # a link always names its chat account
            raise LinkingError("the completed link names no chat account")
        return Linked(identity.chat_user, identity.email or identity.subject)

    async def link_sso(self, chat_user: ChatUser, token: str) -> Linked | Refused:
        if self.sso is None:
            return Refused("Single sign-on is not enabled here; sign in with the link instead.")
        try:
            identity = await self.sso.complete_sso(chat_user, token)
        except BrokerError as exc:  # a refused token or exchange: one line, never the token
            log.warning("SSO link refused for a %s user: %s", chat_user.platform, exc)
            return Refused("Single sign-on did not work; sign in with the link instead.")
        return Linked(chat_user, identity.email or identity.subject)

    async def complete_server_connect(
        self, state: str, code: str, *, iss: str | None = None
    ) -> ServerConnected | ConnectRefused:
        if self.servers is None:
            return ConnectRefused("No MCP server here uses per-user sign-in.", stale=False)
        try:
            done = await self.servers.complete_server_connect(state, code, iss=iss)
        except InvalidStateError:
            return ConnectRefused(STALE_CONNECT_TEXT, stale=True)
        except BrokerError as exc:
            return ConnectRefused(f"The connection was not completed: {exc}", stale=False)
        return ServerConnected(done.chat_user, done.server)

    async def status(self, chat_user: ChatUser, *, fresh: bool = False) -> UserStatus:
        """What opsbot knows of ``chat_user``; a link the IdP no longer honours (revoked)
        or cannot be checked is a status with a ``problem``, not an error."""
        try:
            identity = await self.identities.resolve(chat_user, fresh=fresh)
        except LinkBrokenError:
            # Recorded when a refresh was refused (a click, a write): reconnect.
            return UserStatus(
                linked=False, login_url=await self.link_url(chat_user), problem=LINK_BROKEN_TEXT
            )
        except AccessRevokedError:
            log.info("status: the IdP no longer honours the link of %s", chat_user.user_id)
            return UserStatus(
                linked=False, login_url=await self.link_url(chat_user), problem=ACCESS_REVOKED_TEXT
            )
        except BrokerError as exc:
            log.warning("status: the link of %s could not be checked: %s", chat_user.user_id, exc)
            return UserStatus(linked=False, problem=UNCHECKED_TEXT)
        if identity is None:
            return UserStatus(linked=False, login_url=await self.link_url(chat_user))
        return UserStatus(True, identity.subject, identity.email or None, identity.groups)

    # --- user memory ------------------------------------------------------------------

    async def memory_command(self, chat_user: ChatUser, text: str) -> str:
        if self.memory is None:
            return MEMORY_DISABLED
        return await self.memory.handle(chat_user, text)

    async def remembered(self, chat_user: ChatUser) -> Remembered | None:
        if self.memory is None:
            return None
        prefs = await self.memory.preferences(chat_user)
        return None if prefs is None else Remembered(describe(prefs), prefs.is_empty())

    async def forget_memory(self, chat_user: ChatUser) -> bool:
        return self.memory is not None and await self.memory.forget_all(chat_user)

    # --- helpers --------------------------------------------------------------------

    async def _identity(
        self, chat_user: ChatUser, *, fresh: bool = False
    ) -> Identity | LinkRequired | Refused:
        try:
            identity = await self.identities.resolve(chat_user, fresh=fresh)
            if identity is None:
                return LinkRequired(await self.identities.link_url(chat_user))
        except AccessRevokedError:
            # The IdP no longer honours this sign-in: nothing is decided; reconnect.
            log.info("sign-in refused by the IdP for a %s user", chat_user.platform)
            try:
                return LinkRequired(await self.identities.link_url(chat_user))
            except BrokerError:
                return Refused("Your company sign-in is no longer valid: connect again.")
        except BrokerError as exc:
            return Refused(f"Your company account could not be checked: {exc}")
        return identity

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


async def notify_each(
    decided: list[Decided], notify: Callable[[Decided], Awaitable[None]] | None
) -> None:
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


async def _connection(
    server: str, token: Awaitable[object], missing: type[BrokerError], problem: str
) -> ServerConnection:
    """Whether ``token`` (the user's token for ``server``) could be had: ``missing`` is the
    user's own gap (said as ``problem``), any other broker error a failure right now."""
    try:
        await token
    except missing:
        return ServerConnection(server, False, problem)
    except BrokerError as exc:
        log.info("connections: no token for %s: %s", server, type(exc).__name__)
        return ServerConnection(server, False, "not reachable as you right now")
    return ServerConnection(server, True)


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
