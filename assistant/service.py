"""The platform-neutral façade the chat adapters call (``bot/slack`` today, Teams later).

An adapter only translates platform events into these calls and renders what comes back;
identity, threads, the agent, approvals and audit all live behind this class. Nothing here
imports a chat SDK. This module has the messages (a run, Stop, feedback); the class inherits
its approvals side from ``assistant.approval_desk`` and its account side (links,
connections, status, memory) from ``assistant.accounts``.

Example::

    reply = await assistant.handle_message(ChatUser("slack", "T1", "U1"), ref, "close PAY-7")
    match reply:
        case ApprovalRequested(approval=summary): ...   # post a card for summary.approval_id
    outcome = await assistant.decide(ChatUser("slack", "T1", "U2"), summary.approval_id, Approve())
"""

from __future__ import annotations

import logging
from dataclasses import KW_ONLY, dataclass
from typing import Any

from agent_core import answer as core
from agent_core.errors import AgentError
from agent_core.runs import ALREADY_STOPPED, RunRegistry
from agent_core.threads import NotThreadOwnerError, PlatformRef, ThreadError
from assistant.approval_desk import ApprovalDesk, Recovered, Recovery, notify_each
from assistant.progress import ProgressRelay, call_title
from assistant.types import (
    ApprovalRequested,
    LinkRequired,
    Refused,
    Reply,
    RunEvents,
    Stopped,
    StopResult,
    ToolCallAwaitingApproval,
)
from audit.log import EventKind
from broker.errors import BrokerError
from broker.types import ChatUser, Identity
from infra.observability.metrics import FEEDBACK, STOPS

log = logging.getLogger(__name__)

MAX_MESSAGE_CHARS = 4000

__all__ = ["Assistant", "Recovered", "Recovery", "notify_each"]


@dataclass(eq=False, repr=False)
class Assistant(ApprovalDesk):
    """The one object a chat adapter talks to. Implements ``AssistantPort``. Its fields are
    ``Accounts``' and ``ApprovalDesk``'s (each documented there), then ``runs``.

    Everything is checked here or below: the chat user's link (→ identity with current
    groups), thread ownership, the approver's rights; nothing is taken from the platform on
    trust but the (verified) chat user id.
    """

    _: KW_ONLY
    # Where Stop finds a working run (any instance); None: Stop only withdraws approvals.
    runs: RunRegistry | None = None

    # --- messages -------------------------------------------------------------------

    async def handle_message(
        self, chat_user: ChatUser, ref: PlatformRef, text: str, *, events: RunEvents | None = None
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
