"""Cross-platform approvals: a card on every platform, one decision, every copy told.

An approval may have a card on Slack and on Teams. Whichever adapter's click wins the
approvals service's compare-and-set shows the decision on its own card at once (as before);
every *other* platform learns of it through a durable notice in ``approval_notices``, which
that platform's adapter (any of its instances) claims, shows and marks done:

- ``post``: an approval was requested on another platform; show its card here too (a mirror,
  with no requester thread on this platform). Published for each configured card platform
  other than the requester's.
- ``decided``: a decision was taken elsewhere (a click, the expiry sweeper, recovery); update
  this platform's card, and tell the requester if they are on this platform. Published for
  every platform that has (or was asked to post) a card, and the requester's, but not the
  platform whose adapter is already showing it.

Notice ids are deterministic (``kind:platform:approval:state``), so publishing twice is one
notice, while an ``unknown`` outcome later settled gets a second ``decided`` notice.
Claims are compare-and-set updates with a lease (a crashed deliverer's notice is delivered
again after the lease), so two instances never both deliver one notice. Within one process
a publish wakes the local deliverer at once; other processes find it at their next poll.

Example::

    fanout = ApprovalFanout(SqlApprovalNotices(engine), card_platforms=frozenset({"teams"}))
    await fanout.deliver("teams", teams_adapter.on_notice)   # one pass; tests call this
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from collections.abc import Iterable
from dataclasses import KW_ONLY, dataclass, field, replace
from datetime import timedelta
from typing import Any

from pydantic import TypeAdapter
from sqlalchemy import and_, delete, or_, select, update
from sqlalchemy.exc import IntegrityError

from assistant.types import ApprovalNotice, Decided, NoticeHandler
from infra.clock import Clock, utc_now
from infra.storage.lease import take_lease
from infra.storage.schema import approval_notices, chat_approval_messages
from infra.storage.store import SqlStore

log = logging.getLogger(__name__)

__all__ = ["ApprovalFanout", "NoticeRow", "SqlApprovalNotices"]

POST = "post"
DECIDED = "decided"
QUEUED, CLAIMED, DONE, FAILED = "queued", "claimed", "done", "failed"
MAX_ATTEMPTS = 8
LEASE = timedelta(seconds=60)
# Delivered notices are kept a week (to see what was told where), then pruned by the loop.
KEEP_DELIVERED = timedelta(days=7)
PRUNE_EVERY_SECONDS = 3600.0

_DECIDED = TypeAdapter(Decided)


@dataclass(frozen=True, slots=True)
class NoticeRow:
    notice_id: str
    approval_id: str
    platform: str
    kind: str
    payload: dict[str, Any] | None
    attempts: int


class SqlApprovalNotices(SqlStore):
    """The ``approval_notices`` table, plus which platforms hold a card for an approval."""

    async def publish(self, rows: Iterable[NoticeRow]) -> int:
        """Insert each notice unless its id exists (idempotent); returns how many are new."""
        added = 0
        for row in rows:
            try:
                async with self._engine.begin() as conn:
                    await conn.execute(
                        approval_notices.insert().values(
                            notice_id=row.notice_id,
                            approval_id=row.approval_id,
                            platform=row.platform,
                            kind=row.kind,
                            payload=row.payload,
                            status=QUEUED,
                            attempts=0,
                            created_at=self._clock(),
                        )
                    )
                added += 1
            except IntegrityError:
                continue
        return added

    async def card_platforms(self, approval_id: str) -> set[str]:
        c = chat_approval_messages.c
        async with self._engine.connect() as conn:
            rows = await conn.execute(select(c.platform).where(c.approval_id == approval_id))
            return {str(p) for (p,) in rows.all()}

    async def claim(self, platform: str, worker: str, *, limit: int) -> list[NoticeRow]:
        """Up to ``limit`` of ``platform``'s notices, oldest first (a card is posted before
        its decision is shown), each claimed by one compare-and-set."""
        now = self._clock()
        c = approval_notices.c
        runnable = or_(
            and_(c.status == QUEUED, or_(c.lease_until.is_(None), c.lease_until <= now)),
            and_(c.status == CLAIMED, c.lease_until < now),
        )
        async with self._engine.connect() as conn:
            found = (
                await conn.execute(
                    select(approval_notices)
                    .where(c.platform == platform, runnable)
                    .order_by(c.created_at, c.notice_id)
                    .limit(limit)
                )
            ).all()
        claimed = []
        for found_row in found:
            m = found_row._mapping
            same = [c.notice_id == m["notice_id"], c.status == m["status"]]
            same.append(c.attempts == m["attempts"])
            taken = await take_lease(
                self._engine,
                approval_notices,
                same,
                status=CLAIMED,
                owner=worker,
                lease_until=now + LEASE,
                attempts=m["attempts"] + 1,
            )
            if taken:
                claimed.append(
                    NoticeRow(
                        m["notice_id"],
                        m["approval_id"],
                        m["platform"],
                        m["kind"],
                        m["payload"],
                        m["attempts"] + 1,
                    )
                )
        return claimed

    async def finish(self, notice_id: str, worker: str, *, failed: bool = False) -> None:
        c = approval_notices.c
        async with self._engine.begin() as conn:
            await conn.execute(
                update(approval_notices)
                .where(c.notice_id == notice_id, c.owner == worker, c.status == CLAIMED)
                .values(status=FAILED if failed else DONE, done_at=self._clock(), lease_until=None)
            )

    async def retry(self, notice_id: str, worker: str, after: timedelta) -> None:
        c = approval_notices.c
        async with self._engine.begin() as conn:
            await conn.execute(
                update(approval_notices)
                .where(c.notice_id == notice_id, c.owner == worker, c.status == CLAIMED)
                .values(status=QUEUED, owner=None, lease_until=self._clock() + after)
            )

    async def prune(self, older_than: timedelta) -> int:
        """Forget delivered (or abandoned) notices older than ``older_than``."""
        c = approval_notices.c
        cutoff = self._clock() - older_than
        async with self._engine.begin() as conn:
            result = await conn.execute(
                delete(approval_notices).where(c.status.in_([DONE, FAILED]), c.created_at < cutoff)
            )
        return int(result.rowcount or 0)


@dataclass(eq=False)
class ApprovalFanout:
    """Publishes notices for the other platforms and delivers a platform's own.

    ``card_platforms``: the platforms on which every approval's card is shown (a deployment
    serving Slack and Teams lists both); the requester's platform always shows it.
    """

    store: SqlApprovalNotices
    _: KW_ONLY
    card_platforms: frozenset[str] = frozenset()
    clock: Clock = utc_now
    # Who claims notices: each instance its own name.
    worker: str = field(default_factory=lambda: f"notices-{secrets.token_hex(6)}")
    _wake: dict[str, asyncio.Event] = field(default_factory=dict, init=False)

    # --- publishing -------------------------------------------------------------------

    async def requested(self, approval_ids: Iterable[str], origin: str) -> None:
        """Approvals requested on ``origin``: every other card platform posts its card."""
        rows = [
            NoticeRow(f"{POST}:{platform}:{approval_id}", approval_id, platform, POST, None, 0)
            for approval_id in approval_ids
            for platform in sorted(self.card_platforms - {origin})
        ]
        await self._publish(rows)

    async def decided(self, decided: Iterable[Decided], origin: str | None) -> None:
        """Decisions (with their siblings) that ``origin``'s adapter shows itself; every other
        platform with a card, and the requester's, gets a notice. ``origin`` None (a sweep
        nobody shows): every such platform does."""
        rows = []
        for one in [d for top in decided for d in (top, *top.siblings)]:
            targets = set(self.card_platforms) | await self.store.card_platforms(one.approval_id)
            if one.requester_ref is not None:
                targets.add(one.requester_ref.platform)
            targets.discard(origin or "")
            payload = _DECIDED.dump_python(replace(one, siblings=()), mode="json")
            state = one.state or one.decision
            for platform in sorted(targets):
                notice_id = f"{DECIDED}:{platform}:{one.approval_id}:{state}"
                rows.append(NoticeRow(notice_id, one.approval_id, platform, DECIDED, payload, 0))
        await self._publish(rows)

    async def _publish(self, rows: list[NoticeRow]) -> None:
        if not rows:
            return
        await self.store.publish(rows)
        for platform in {r.platform for r in rows}:
            self._event(platform).set()

    def _event(self, platform: str) -> asyncio.Event:
        return self._wake.setdefault(platform, asyncio.Event())

    # --- delivering -------------------------------------------------------------------

    async def deliver(self, platform: str, handle: NoticeHandler, *, limit: int = 20) -> int:
        """Claim and hand ``platform``'s notices to ``handle``, oldest first; returns how many
        were delivered. A failing notice is retried with back-off, then given up (logged)."""
        delivered = 0
        for row in await self.store.claim(platform, self.worker, limit=limit):
            try:
                notice = _notice(row)
            except ValueError:
                log.error("approval notice %s is unreadable: dropped", row.notice_id)
                await self.store.finish(row.notice_id, self.worker, failed=True)
                continue
            try:
                await handle(notice)
            except Exception as exc:  # the adapter's platform refused or was down
                if row.attempts >= MAX_ATTEMPTS:
                    log.error(
                        "approval notice %s not delivered after %d attempts: %s",
                        row.notice_id,
                        row.attempts,
                        type(exc).__name__,
                    )
                    await self.store.finish(row.notice_id, self.worker, failed=True)
                else:
                    log.warning(
                        "approval notice %s not delivered (%s): retrying",
                        row.notice_id,
                        type(exc).__name__,
                    )
                    delay = timedelta(seconds=min(2.0 ** (row.attempts - 1), 60.0))
                    await self.store.retry(row.notice_id, self.worker, delay)
                continue
            await self.store.finish(row.notice_id, self.worker)
            delivered += 1
        return delivered

    async def forever(self, platform: str, interval: float, handle: NoticeHandler) -> None:
        """Deliver ``platform``'s notices until cancelled: at once when this process published
        one, else every ``interval`` seconds (notices from other instances)."""
        wake = self._event(platform)
        pruned_at = float("-inf")
        loop = asyncio.get_running_loop()
        while True:
            wake.clear()
            try:
                while await self.deliver(platform, handle) > 0:
                    pass
                if loop.time() - pruned_at >= PRUNE_EVERY_SECONDS:
                    pruned_at = loop.time()
                    await self.store.prune(KEEP_DELIVERED)
            except Exception as exc:  # the database is away: try again next tick
                log.warning("delivering approval notices failed: %s", type(exc).__name__)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(wake.wait(), timeout=interval)


def _notice(row: NoticeRow) -> ApprovalNotice:
    if row.kind == POST:
        return ApprovalNotice(row.notice_id, POST, row.approval_id)
    if row.kind == DECIDED and row.payload is not None:
        try:
            decided = _DECIDED.validate_python(row.payload)
        except Exception as exc:
            raise ValueError("unreadable decision") from exc
        return ApprovalNotice(row.notice_id, DECIDED, row.approval_id, decided)
    raise ValueError(f"unknown notice kind {row.kind!r}")
