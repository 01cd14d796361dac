"""Where approvals live: the ``ApprovalStore`` rules, in memory and in SQL.

The one operation that matters is :meth:`ApprovalStore.claim`: ``pending → deciding`` as a
single conditional write, so exactly one of any number of concurrent decisions wins — across
clicks, app instances sharing the database, and retries. Losers learn who won.

Example::

    store = SqlApprovalStore(engine)
    await store.create(approval)
    claimed = await store.claim(approval.approval_id, "bob", decisions, now)  # or raises
    await store.finish(approval.approval_id, ApprovalStatus.SUCCEEDED, {"result": "ok"})
"""

from __future__ import annotations

import asyncio
import dataclasses
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NotRequired, TypedDict

from sqlalchemy import RowMapping, Select, Update, or_, select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from approvals.errors import AlreadyDecidedError, ApprovalExpiredError, ApprovalNotFoundError
from approvals.records import (
    EXPIRY_DECIDER,
    OPEN_STATUSES,
    ActionDecision,
    ActionRequest,
    Approval,
    ApprovalStatus,
    ReadRef,
)
from broker.types import ChatUser
from infra.storage.schema import approvals as approvals_table

Decisions = tuple[ActionDecision, ...]
# A click's check of the approval it read: its decisions, or an exception (nothing claimed).
DecisionCheck = Callable[[Approval], Sequence[ActionDecision]]


class Move(TypedDict):
    """What a conditional move writes: the new status and, when finishing, the outcome."""

    status: ApprovalStatus
    outcome: NotRequired[dict[str, Any]]
    outcome_reason: NotRequired[str | None]


@dataclass(frozen=True, slots=True)
class ApprovalFilter:
    """What ``find`` selects; ``matches`` is its meaning, which the SQL query mirrors."""

    statuses: tuple[ApprovalStatus, ...] = ()
    requester_subject: str | None = None
    expired_at: datetime | None = None
    batch: str | None = None

    def matches(self, a: Approval) -> bool:
        return (
            (not self.statuses or a.status in self.statuses)
            and (self.requester_subject is None or a.requester_subject == self.requester_subject)
            and (self.expired_at is None or a.expires_at <= self.expired_at)
            and (self.batch is None or a.batch == self.batch)
        )


class ApprovalStore(ABC):
    """Where approvals live. The lifecycle's rules are written once, here: which moves are
    allowed and why one is refused. A backend supplies the storage and its conditional
    writes (the ``_``-prefixed hooks), so the memory and SQL stores cannot drift apart."""

    @abstractmethod
    async def create(self, approval: Approval) -> None:
        """Store a new pending approval (its id must be new)."""

    @abstractmethod
    async def get(self, approval_id: str) -> Approval | None: ...

    async def claim(
        self,
        approval_id: str,
        decided_by: str,
        decisions: Sequence[ActionDecision],
        now: datetime,
    ) -> Approval:
        """Atomically move a live approval ``pending → deciding`` for ``decided_by``.

        Raises ``ApprovalNotFoundError``, ``AlreadyDecidedError`` (naming the winner) or
        ``ApprovalExpiredError`` (pending but past ``expires_at`` at ``now``).
        The approval with ``decided_by == EXPIRY_DECIDER`` claims an expired one instead.
        """
        claimed = await self._claim(approval_id, decided_by, tuple(decisions), now)
        if claimed is None:
            raise _claim_refusal(await self.get(approval_id), approval_id, now)
        return claimed

    async def claim_checked(
        self, approval_id: str, decided_by: str, check: DecisionCheck, now: datetime
    ) -> Approval:
        """A click: read the approval, let ``check`` refuse it (raise) or give its
        decisions, then ``claim`` them (the same conditional write: of concurrent deciders,
        one wins, the others learn who). Nothing is claimed when ``check`` raises;
        ``ApprovalNotFoundError`` when there is no such approval."""
        approval = await self.get(approval_id)
        if approval is None:
            raise ApprovalNotFoundError(f"no approval {approval_id!r}")
        return await self.claim(approval_id, decided_by, check(approval), now)

    @abstractmethod
    async def reclaim(
        self, approval_id: str, stale_before: datetime, now: datetime
    ) -> Approval | None:
        """Take over an approval left in ``deciding`` since before ``stale_before`` (its
        decider crashed): one conditional write moves ``decided_at`` to ``now``, so of any
        number of concurrent recoverers exactly one gets the approval; the rest get ``None``,
        as does an approval that is not, or no longer, stale."""

    async def advance(
        self, approval_id: str, expected: ApprovalStatus, status: ApprovalStatus
    ) -> Approval:
        """Move ``expected → status`` as one conditional write (``deciding → approved``,
        ``approved → executing``); ``AlreadyDecidedError`` if it is not in ``expected``."""
        return await self._move(approval_id, (expected,), Move(status=status))

    async def finish(
        self,
        approval_id: str,
        status: ApprovalStatus,
        outcome: dict[str, Any],
        *,
        reason: str | None = None,
    ) -> Approval:
        """Move a decided approval (``deciding``, ``approved``, ``executing``, or ``unknown``
        for the reconciler) to the final ``status`` with a reason for people; raises
        ``AlreadyDecidedError`` if it is in none of these."""
        if not status.is_final:
            raise ValueError(f"{status} is not a final status")
        move = Move(status=status, outcome=dict(outcome), outcome_reason=reason)
        return await self._move(approval_id, FINISHABLE, move)

    async def find(
        self,
        *,
        statuses: Sequence[ApprovalStatus] = (),
        requester_subject: str | None = None,
        expired_at: datetime | None = None,
        batch: str | None = None,
        limit: int = 100,
    ) -> list[Approval]:
        """Approvals oldest first, by status, requester, ``expires_at <= expired_at`` and
        batch (in batch order)."""
        where = ApprovalFilter(tuple(statuses), requester_subject, expired_at, batch)
        return await self._find(where, limit)

    @abstractmethod
    async def claim_resume(self, batch: str, now: datetime, stale_before: datetime) -> bool:
        """Claim the resume of ``batch``'s paused run (on its first approval) in one
        conditional write: ``True`` for the one caller that may resume it. A claim older than
        ``stale_before`` whose resume never finished (a crash) may be claimed again."""

    @abstractmethod
    async def finish_resume(self, batch: str, now: datetime) -> None:
        """Record that ``batch``'s run was resumed (or needs no resume any more)."""

    @abstractmethod
    async def unresumed(self, claimed_before: datetime, limit: int = 100) -> list[Approval]:
        """First approvals of batches that are decided to the end (no open state) and whose
        run was not resumed: never claimed, or claimed before ``claimed_before``."""

    async def _move(
        self, approval_id: str, expected: Sequence[ApprovalStatus], move: Move
    ) -> Approval:
        """Apply ``move`` if the approval is in one of ``expected``, else say why not."""
        moved = await self._conditional_move(approval_id, expected, move)
        if moved is None:
            raise _refusal(await self.get(approval_id), approval_id)
        return moved

    @abstractmethod
    async def _claim(
        self, approval_id: str, decided_by: str, decisions: Decisions, now: datetime
    ) -> Approval | None:
        """``pending → deciding`` as one conditional write if ``_claimable``, else ``None``."""

    @abstractmethod
    async def _conditional_move(
        self, approval_id: str, expected: Sequence[ApprovalStatus], move: Move
    ) -> Approval | None:
        """Apply ``move`` as one conditional write if the status is one of ``expected``:
        the approval as it was left, or ``None`` when it did not match."""

    @abstractmethod
    async def _find(self, where: ApprovalFilter, limit: int) -> list[Approval]:
        """``find``: the approvals ``where`` matches, oldest first, at most ``limit``."""


def _claim_refusal(current: Approval | None, approval_id: str, now: datetime) -> Exception:
    if current is None:
        return ApprovalNotFoundError(f"no approval {approval_id!r}")
    if current.status is ApprovalStatus.PENDING:
        # Pending yet not claimable: an ordinary decider found it expired, or the sweeper
        # found it still live.
        if current.is_expired(now):
            return ApprovalExpiredError("this approval has expired")
        return AlreadyDecidedError(None, current.status.value)
    return AlreadyDecidedError(current.decided_by, current.status.value)


def _refusal(current: Approval | None, approval_id: str) -> Exception:
    """Why a conditional move of ``approval_id`` did not happen (advance, finish)."""
    if current is None:
        return ApprovalNotFoundError(f"no approval {approval_id!r}")
    return AlreadyDecidedError(current.decided_by, current.status.value)


# Where a decided approval may be finished from.
FINISHABLE = (
    ApprovalStatus.DECIDING,
    ApprovalStatus.APPROVED,
    ApprovalStatus.EXECUTING,
    ApprovalStatus.UNKNOWN,
)


def _stale(approval: Approval, stale_before: datetime) -> bool:
    return (
        approval.status.is_in_flight
        and approval.decided_at is not None
        and approval.decided_at < stale_before
    )


def _resumable(leader: Approval, stale_before: datetime) -> bool:
    if leader.resumed_at is not None:
        return False
    return leader.resume_claimed_at is None or leader.resume_claimed_at < stale_before


def _claimable(approval: Approval, decided_by: str, now: datetime) -> bool:
    if approval.status is not ApprovalStatus.PENDING:
        return False
    return (
        approval.is_expired(now) if decided_by == EXPIRY_DECIDER else not approval.is_expired(now)
    )


class MemoryApprovalStore(ApprovalStore):
    """In-process store for unit tests and single-process development."""

    def __init__(self) -> None:
        self._by_id: dict[str, Approval] = {}
        self._lock = asyncio.Lock()

    async def create(self, approval: Approval) -> None:
        async with self._lock:
            if approval.approval_id in self._by_id:
                raise ValueError("approval id already exists")
            self._by_id[approval.approval_id] = approval

    async def get(self, approval_id: str) -> Approval | None:
        return self._by_id.get(approval_id)

    async def _claim(
        self, approval_id: str, decided_by: str, decisions: Decisions, now: datetime
    ) -> Approval | None:
        async with self._lock:
            current = self._by_id.get(approval_id)
            if current is None or not _claimable(current, decided_by, now):
                return None
            claimed = dataclasses.replace(
                current,
                status=ApprovalStatus.DECIDING,
                decided_by=decided_by,
                decided_at=now,
                decisions=decisions,
            )
            self._by_id[approval_id] = claimed
            return claimed

    async def reclaim(
        self, approval_id: str, stale_before: datetime, now: datetime
    ) -> Approval | None:
        async with self._lock:
            current = self._by_id.get(approval_id)
            if current is None or not _stale(current, stale_before):
                return None
            taken = dataclasses.replace(current, decided_at=now)
            self._by_id[approval_id] = taken
            return taken

    async def _conditional_move(
        self, approval_id: str, expected: Sequence[ApprovalStatus], move: Move
    ) -> Approval | None:
        async with self._lock:
            current = self._by_id.get(approval_id)
            if current is None or current.status not in expected:
                return None
            moved = dataclasses.replace(current, **move)
            self._by_id[approval_id] = moved
            return moved

    async def _find(self, where: ApprovalFilter, limit: int) -> list[Approval]:
        found = [a for a in self._by_id.values() if where.matches(a)]
        found.sort(key=lambda a: (a.created_at, a.batch_index, a.approval_id))
        return found[:limit]

    async def claim_resume(self, batch: str, now: datetime, stale_before: datetime) -> bool:
        async with self._lock:
            leader = self._by_id.get(batch)
            if leader is None or not _resumable(leader, stale_before):
                return False
            self._by_id[batch] = dataclasses.replace(leader, resume_claimed_at=now)
            return True

    async def finish_resume(self, batch: str, now: datetime) -> None:
        async with self._lock:
            leader = self._by_id.get(batch)
            if leader is not None:
                self._by_id[batch] = dataclasses.replace(leader, resumed_at=now)

    async def unresumed(self, claimed_before: datetime, limit: int = 100) -> list[Approval]:
        leaders = [
            a
            for a in self._by_id.values()
            if a.approval_id == a.batch and a.status.is_final and _resumable(a, claimed_before)
        ]
        found = [
            a
            for a in sorted(leaders, key=lambda a: (a.created_at, a.approval_id))
            if not any(o.batch == a.batch and not o.status.is_final for o in self._by_id.values())
        ]
        return found[:limit]


class SqlApprovalStore(ApprovalStore):
    """Approvals in the project's database (SQLite or PostgreSQL); safe across instances."""

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine

    async def create(self, approval: Approval) -> None:
        async with self._engine.begin() as conn:
            await conn.execute(approvals_table.insert().values(**_to_row(approval)))

    async def get(self, approval_id: str) -> Approval | None:
        async with self._engine.connect() as conn:
            row = (await conn.execute(_one(approval_id))).first()
        return None if row is None else _from_row(row._mapping)

    async def _claim(
        self, approval_id: str, decided_by: str, decisions: Decisions, now: datetime
    ) -> Approval | None:
        return await self._update(
            approval_id, _claim_statement(approval_id, decided_by, decisions, now)
        )

    async def claim_checked(
        self, approval_id: str, decided_by: str, check: DecisionCheck, now: datetime
    ) -> Approval:
        # PostgreSQL: the read and the claim in one transaction, one connection: a click
        # pays one checkout, one round trip to end it and one commit, not two of each.
        # The claim is the same conditional UPDATE (re-checked on the row as committed), so
        # concurrent clicks still have one winner. SQLite keeps them apart: a read then a
        # write in one deferred transaction can fail to take the write lock
        # (SQLITE_BUSY) when another connection did the same.
        if self._engine.dialect.name != "postgresql":
            return await super().claim_checked(approval_id, decided_by, check, now)
        async with self._engine.begin() as conn:
            row = (await conn.execute(_one(approval_id))).first()
            if row is None:
                raise ApprovalNotFoundError(f"no approval {approval_id!r}")
            decisions = tuple(check(_from_row(row._mapping)))  # raises: nothing claimed
            claim = _claim_statement(approval_id, decided_by, decisions, now)
            claimed = (await conn.execute(claim.returning(*approvals_table.c))).first()
            if claimed is None:
                current = (await conn.execute(_one(approval_id))).first()
                found = None if current is None else _from_row(current._mapping)
                raise _claim_refusal(found, approval_id, now)
        return _from_row(claimed._mapping)

    async def reclaim(
        self, approval_id: str, stale_before: datetime, now: datetime
    ) -> Approval | None:
        c = approvals_table.c
        statement = (
            update(approvals_table)
            .where(c.approval_id == approval_id)
            .where(c.status.in_([s.value for s in ApprovalStatus if s.is_in_flight]))
            .where(c.decided_at < stale_before)
            .values(decided_at=now)
        )
        return await self._update(approval_id, statement)

    async def _conditional_move(
        self, approval_id: str, expected: Sequence[ApprovalStatus], move: Move
    ) -> Approval | None:
        c = approvals_table.c
        statement = (
            update(approvals_table)
            .where(c.approval_id == approval_id)
            .where(c.status.in_([s.value for s in expected]))
            .values({**move, "status": move["status"].value})
        )
        return await self._update(approval_id, statement)

    async def _update(self, approval_id: str, statement: Update) -> Approval | None:
        """Run one conditional UPDATE of ``approval_id``: the row as it was left, or ``None``
        when it did not match. With RETURNING (PostgreSQL, SQLite ≥ 3.35) the row comes back
        in the same round trip: a click's claim and state changes are one statement each,
        not an UPDATE and then a SELECT on another connection."""
        if self._engine.dialect.update_returning:
            async with self._engine.begin() as conn:
                result = await conn.execute(statement.returning(*approvals_table.c))
                row = result.first()
            return None if row is None else _from_row(row._mapping)
        async with self._engine.begin() as conn:
            moved = (await conn.execute(statement)).rowcount == 1
        return await self.get(approval_id) if moved else None

    async def _find(self, where: ApprovalFilter, limit: int) -> list[Approval]:
        c = approvals_table.c
        query = select(approvals_table)
        if where.batch is not None:
            query = query.where(or_(c.batch_id == where.batch, c.approval_id == where.batch))
        if where.statuses:
            query = query.where(c.status.in_([s.value for s in where.statuses]))
        if where.requester_subject is not None:
            query = query.where(c.requester_subject == where.requester_subject)
        if where.expired_at is not None:
            query = query.where(c.expires_at <= where.expired_at)
        query = query.order_by(c.created_at, c.batch_index, c.approval_id).limit(limit)
        async with self._engine.connect() as conn:
            rows = (await conn.execute(query)).all()
        found = [_from_row(r._mapping) for r in rows]
        return [a for a in found if where.batch is None or a.batch == where.batch]

    async def claim_resume(self, batch: str, now: datetime, stale_before: datetime) -> bool:
        c = approvals_table.c
        statement = (
            update(approvals_table)
            .where(c.approval_id == batch, c.resumed_at.is_(None))
            .where(or_(c.resume_claimed_at.is_(None), c.resume_claimed_at < stale_before))
            .values(resume_claimed_at=now)
        )
        async with self._engine.begin() as conn:
            return (await conn.execute(statement)).rowcount == 1

    async def finish_resume(self, batch: str, now: datetime) -> None:
        c = approvals_table.c
        statement = update(approvals_table).where(c.approval_id == batch).values(resumed_at=now)
        async with self._engine.begin() as conn:
            await conn.execute(statement)

    async def unresumed(self, claimed_before: datetime, limit: int = 100) -> list[Approval]:
        c = approvals_table.c
        open_values = [s.value for s in OPEN_STATUSES]
        siblings = approvals_table.alias("siblings")
        still_open = (
            select(siblings.c.approval_id)
            .where(siblings.c.batch_id == c.approval_id)
            .where(siblings.c.status.in_(open_values))
            .exists()
        )
        query = (
            select(approvals_table)
            .where(or_(c.batch_id.is_(None), c.batch_id == c.approval_id))
            .where(c.status.not_in(open_values), c.resumed_at.is_(None))
            .where(or_(c.resume_claimed_at.is_(None), c.resume_claimed_at < claimed_before))
            .where(~still_open)
            .order_by(c.created_at, c.approval_id)
            .limit(limit)
        )
        async with self._engine.connect() as conn:
            rows = (await conn.execute(query)).all()
        return [_from_row(r._mapping) for r in rows]


def _one(approval_id: str) -> Select[Any]:
    return select(approvals_table).where(approvals_table.c.approval_id == approval_id)


def _claim_statement(
    approval_id: str, decided_by: str, decisions: Decisions, now: datetime
) -> Update:
    """``pending → deciding`` if still pending and live (expired: the sweeper's only)."""
    c = approvals_table.c
    age = c.expires_at <= now if decided_by == EXPIRY_DECIDER else c.expires_at > now
    return (
        update(approvals_table)
        .where(c.approval_id == approval_id, c.status == ApprovalStatus.PENDING.value, age)
        .values(
            status=ApprovalStatus.DECIDING.value,
            decided_by=decided_by,
            decided_at=now,
            decisions=[_decision_to_json(d) for d in decisions],
        )
    )


def _decision_to_json(d: ActionDecision) -> dict[str, Any]:
    return {"type": d.type, "args": d.args, "message": d.message}


def _to_row(a: Approval) -> dict[str, Any]:
    cu = a.requester_chat_user
    return {
        "approval_id": a.approval_id,
        "thread_id": a.thread_id,
        "requester_subject": a.requester_subject,
        "requester_chat_user": None
        if cu is None
        else {"platform": cu.platform, "team_id": cu.team_id, "user_id": cu.user_id},
        "actions": [dataclasses.asdict(x) for x in a.actions],
        "reads": [dataclasses.asdict(r) for r in a.reads],
        "created_at": a.created_at,
        "expires_at": a.expires_at,
        "status": a.status.value,
        "decided_by": a.decided_by,
        "decided_at": a.decided_at,
        "decisions": [_decision_to_json(d) for d in a.decisions],
        "outcome": dict(a.outcome),
        "outcome_reason": a.outcome_reason,
        "batch_id": a.batch_id or None,
        "batch_index": a.batch_index,
        "batch_size": a.batch_size,
        "resume_claimed_at": a.resume_claimed_at,
        "resumed_at": a.resumed_at,
    }


def _from_row(m: RowMapping) -> Approval:
    cu = m["requester_chat_user"]
    return Approval(
        approval_id=m["approval_id"],
        thread_id=m["thread_id"],
        requester_subject=m["requester_subject"],
        requester_chat_user=None if cu is None else ChatUser(**cu),
        actions=tuple(ActionRequest(**x) for x in m["actions"]),
        reads=tuple(ReadRef(**r) for r in m["reads"] or ()),
        created_at=m["created_at"],
        expires_at=m["expires_at"],
        status=ApprovalStatus(m["status"]),
        decided_by=m["decided_by"],
        decided_at=m["decided_at"],
        decisions=tuple(ActionDecision(**d) for d in m["decisions"] or ()),
        outcome=dict(m["outcome"] or {}),
        outcome_reason=m["outcome_reason"],
        batch_id=m["batch_id"] or "",
        batch_index=m["batch_index"] or 0,
        batch_size=m["batch_size"] or 1,
        resume_claimed_at=m["resume_claimed_at"],
        resumed_at=m["resumed_at"],
    )
