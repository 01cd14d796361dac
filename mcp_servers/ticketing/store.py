"""The ticketing server's own storage (SQLite by default, separate from opsbot's tables).

Every write runs in one transaction with its idempotency record and its change-log line, under
one lock: a repeated key either returns the stored first result or is refused, and a failed
write leaves nothing behind. The change log is append-only (no update/delete API; on SQLite,
triggers refuse UPDATE and DELETE on it).
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import sqlalchemy as sa
from pydantic import BaseModel
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from mcp_servers.auth import Caller, Clock, utc_now
from mcp_servers.errors import ForbiddenError, NotFoundError
from mcp_servers.store_engine import open_store_engine
from mcp_servers.ticketing import idempotency
from mcp_servers.ticketing.idempotency import Call
from mcp_servers.ticketing.models import (
    ChangeEntry,
    Comment,
    Priority,
    SearchResult,
    Status,
    Ticket,
    TicketSummary,
)
from mcp_servers.ticketing.schema import (
    APPEND_ONLY,
    APPEND_ONLY_POSTGRES,
    change_log,
    comments,
    metadata,
    projects,
    tickets,
)

M = TypeVar("M", bound=BaseModel)

# Built once: constructing a Core statement per call was a large part of the store's CPU on
# the approved-comment path (they are still compiled once each, by SQLAlchemy's cache).
_TICKET_COLUMNS = (
    tickets,
    projects.c.team,
    comments.c.id.label("comment_id"),
    comments.c.author.label("comment_author"),
    comments.c.body.label("comment_body"),
    comments.c.created_at.label("comment_created_at"),
)
# The ticket, its project's team and its comments (one row each, or one row of NULLs).
_TICKET_ROWS = tickets.join(projects, projects.c.key == tickets.c.project).outerjoin(
    comments, comments.c.ticket_key == tickets.c.key
)
_TICKET = (
    sa.select(*_TICKET_COLUMNS)
    .select_from(_TICKET_ROWS)
    .where(tickets.c.key == sa.bindparam("key"))
    .order_by(comments.c.id)
)
# The same, with the write's idempotency record if there is one: a repeat is answered by
# the read alone (its result is repeated on every comment row; repeats are rare).
_TICKET_AND_EARLIER = (
    sa.select(*_TICKET_COLUMNS, *idempotency.EARLIER_COLUMNS)
    .select_from(_TICKET_ROWS.outerjoin(*idempotency.EARLIER_JOIN))
    .where(tickets.c.key == sa.bindparam("key"))
    .order_by(comments.c.id)
)
_ADD_COMMENT = comments.insert()
_TOUCH = (
    tickets.update()
    .where(tickets.c.key == sa.bindparam("ticket"))
    .values(updated_at=sa.bindparam("now"))
)
_LOG = change_log.insert()


@dataclass(frozen=True, slots=True)
class _Change:
    ticket_key: str
    change: dict[str, Any]


class TicketStore:
    """Projects, tickets, comments, idempotency records and the change log."""

    def __init__(
        self, engine: AsyncEngine, *, clock: Clock = utc_now, base_url: str = "http://ticketing"
    ) -> None:
        self.engine = engine
        self.base_url = base_url.rstrip("/")
        self._clock = clock
        self._lock = asyncio.Lock()

    @classmethod
    async def open(
        cls,
        url: str = "sqlite+aiosqlite://",
        *,
        clock: Clock = utc_now,
        base_url: str = "http://ticketing",
    ) -> TicketStore:
        """Open (and create) the store; the default is a private in-memory SQLite database."""
        triggers = {"sqlite": APPEND_ONLY, "postgresql": APPEND_ONLY_POSTGRES}
        engine = await open_store_engine(url, metadata, then=triggers)
        return cls(engine, clock=clock, base_url=base_url)

    async def close(self) -> None:
        await self.engine.dispose()

    def _now(self) -> str:
        return self._clock().isoformat()

    # --- reads ---------------------------------------------------------------------------

    async def search(
        self,
        caller: Caller,
        *,
        query: str = "",
        project: str | None = None,
        status: Status | None = None,
        assignee: str | None = None,
        limit: int = 20,
    ) -> SearchResult:
        stmt = (
            sa.select(tickets)
            .join(projects, projects.c.key == tickets.c.project)
            .where(projects.c.team.in_(sorted(caller.teams)))
        )
        if project is not None:
            stmt = stmt.where(tickets.c.project == project.upper())
        if status is not None:
            stmt = stmt.where(tickets.c.status == status)
        if assignee is not None:
            stmt = stmt.where(tickets.c.assignee == assignee)
        async with self.engine.connect() as conn:
            rows = (await conn.execute(stmt)).mappings().all()
        terms = [t for t in re.findall(r"\w+", query.lower()) if t]
        scored = []
        for row in rows:
            text_title = str(row["title"]).lower()
            text_body = str(row["description"]).lower()
            score = sum(3 * text_title.count(t) + text_body.count(t) for t in terms)
            if terms and score == 0 and query.lower() not in str(row["key"]).lower():
                continue
            scored.append((score, str(row["updated_at"]), row))
        scored.sort(key=lambda item: (item[0], item[1]), reverse=True)
        return SearchResult(
            tickets=[self._summary(row) for _, _, row in scored[:limit]], total_matches=len(scored)
        )

    async def get(self, caller: Caller, key: str) -> Ticket:
        async with self.engine.connect() as conn:
            return await self._visible_ticket(conn, caller, key)

    async def changes(
        self,
        caller: Caller,
        *,
        idempotency_key: str | None = None,
        ticket_key: str | None = None,
        limit: int = 50,
    ) -> list[ChangeEntry]:
        """Change-log lines the caller may see: their own, and those on their teams' tickets."""
        visible = sa.select(tickets.c.key).join(projects, projects.c.key == tickets.c.project)
        visible = visible.where(projects.c.team.in_(sorted(caller.teams)))
        stmt = sa.select(change_log).where(
            sa.or_(change_log.c.subject == caller.subject, change_log.c.ticket_key.in_(visible))
        )
        if idempotency_key is not None:
            stmt = stmt.where(change_log.c.idempotency_key == idempotency_key)
        if ticket_key is not None:
            stmt = stmt.where(change_log.c.ticket_key == ticket_key.upper())
        stmt = stmt.order_by(change_log.c.id.desc()).limit(limit)
        async with self.engine.connect() as conn:
            rows = (await conn.execute(stmt)).mappings().all()
        return [_entry(row) for row in rows]

    # --- writes --------------------------------------------------------------------------

    async def create(
        self,
        caller: Caller,
        *,
        project: str,
        title: str,
        description: str,
        priority: Priority,
        assignee: str | None,
        idempotency_key: str,
    ) -> Ticket:
        args = {
            "project": project,
            "title": title,
            "description": description,
            "priority": priority,
            "assignee": assignee,
        }

        async def action(conn: AsyncConnection) -> tuple[Ticket, _Change]:
            project_key = project.upper()
            row = (
                (await conn.execute(sa.select(projects).where(projects.c.key == project_key)))
                .mappings()
                .first()
            )
            if row is None or row["team"] not in caller.teams:
                raise NotFoundError(f"no project {project!r} that you can create tickets in")
            number = (
                await conn.execute(
                    sa.select(sa.func.coalesce(sa.func.max(tickets.c.number), 0)).where(
                        tickets.c.project == project_key
                    )
                )
            ).scalar_one() + 1
            key = f"{project_key}-{number}"
            now = self._now()
            await conn.execute(
                tickets.insert().values(
                    key=key,
                    project=project_key,
                    number=number,
                    title=title,
                    description=description,
                    status="open",
                    priority=priority,
                    assignee=assignee,
                    created_by=caller.subject,
                    created_at=now,
                    updated_at=now,
                )
            )
            ticket = await self._visible_ticket(conn, caller, key)
            return ticket, _Change(key, {"created": args})

        return await self._write(caller, "create_ticket", args, idempotency_key, Ticket, action)

    async def update(
        self, caller: Caller, key: str, changes: dict[str, Any], idempotency_key: str
    ) -> Ticket:
        changes = {k: v for k, v in changes.items() if v is not None}
        args = {"key": key, **changes}

        async def action(conn: AsyncConnection) -> tuple[Ticket, _Change]:
            before = await self._visible_ticket(conn, caller, key)
            if not changes:
                raise ForbiddenError("nothing to change: give at least one field")
            if before.status == "closed":
                raise ForbiddenError(f"{before.key} is closed; it cannot be updated")
            await conn.execute(
                tickets.update()
                .where(tickets.c.key == before.key)
                .values(**changes, updated_at=self._now())
            )
            old = before.model_dump(include=set(changes))
            after = await self._visible_ticket(conn, caller, key)
            return after, _Change(before.key, {"from": old, "to": changes})

        return await self._write(caller, "update_ticket", args, idempotency_key, Ticket, action)

    async def add_comment(
        self, caller: Caller, key: str, body: str, idempotency_key: str
    ) -> Ticket:
        # Every approved comment lands here, under the store's one lock: the ticket and the
        # key's record are read in one statement (a repeat is answered there), a free key is
        # claimed with the answer, and the answer is the ticket as read plus this comment
        # (not read again): five statements, where there were seven.
        call = Call.of(caller, "add_comment", {"key": key, "body": body}, idempotency_key)

        async def attempt() -> Ticket:
            async with self._lock, self.engine.begin() as conn:
                rows = await self._ticket_rows(
                    conn, _TICKET_AND_EARLIER, key, subject=call.subject, idempotency_key=call.key
                )
                if rows and (earlier := idempotency.earlier(rows[0], call, Ticket)) is not None:
                    return earlier
                try:
                    ticket = self._ticket(rows, caller, key)
                except NotFoundError:
                    # The key's record answers before any refusal, as when it was read first
                    # (no ticket, no row to carry the record: look it up).
                    if rows or (earlier := await idempotency.stored(conn, call, Ticket)) is None:
                        raise
                    return earlier
                now = self._now()
                added = Comment(author=caller.subject, body=body, created_at=now)
                after = ticket.model_copy(
                    update={"updated_at": now, "comments": [*ticket.comments, added]}
                )
                if (earlier := await idempotency.claim(conn, call, after, now)) is not None:
                    return earlier
                await conn.execute(
                    _ADD_COMMENT,
                    {
                        "ticket_key": ticket.key,
                        "author": caller.subject,
                        "body": body,
                        "created_at": now,
                    },
                )
                await conn.execute(_TOUCH, {"ticket": ticket.key, "now": now})
                await self._log(conn, call, _Change(ticket.key, {"comment": body}), now)
                return after

        return await idempotency.retrying(attempt)

    async def close_ticket(
        self, caller: Caller, key: str, resolution: str, idempotency_key: str
    ) -> Ticket:
        args = {"key": key, "resolution": resolution}

        async def action(conn: AsyncConnection) -> tuple[Ticket, _Change]:
            ticket = await self._visible_ticket(conn, caller, key)
            if ticket.status == "closed":
                raise ForbiddenError(f"{ticket.key} is already closed")
            now = self._now()
            await conn.execute(
                tickets.update()
                .where(tickets.c.key == ticket.key)
                .values(status="closed", updated_at=now)
            )
            await conn.execute(
                comments.insert().values(
                    ticket_key=ticket.key,
                    author=caller.subject,
                    body=f"Closed: {resolution}",
                    created_at=now,
                )
            )
            after = await self._visible_ticket(conn, caller, key)
            change = {"from": {"status": ticket.status}, "to": {"status": "closed"}}
            return after, _Change(ticket.key, {**change, "resolution": resolution})

        return await self._write(caller, "close_ticket", args, idempotency_key, Ticket, action)

    async def _write(
        self,
        caller: Caller,
        tool: str,
        args: dict[str, Any],
        idempotency_key: str,
        model: type[M],
        action: Callable[[AsyncConnection], Awaitable[tuple[M, _Change]]],
    ) -> M:
        call = Call.of(caller, tool, args, idempotency_key)

        async def attempt() -> M:
            async with self._lock, self.engine.begin() as conn:
                if (earlier := await idempotency.stored(conn, call, model)) is not None:
                    return earlier
                result, change = await action(conn)
                now = self._now()
                await conn.execute(idempotency.REMEMBER, call.record(result, now))
                await self._log(conn, call, change, now)
                return result

        return await idempotency.retrying(attempt)

    async def _log(self, conn: AsyncConnection, call: Call, change: _Change, now: str) -> None:
        await conn.execute(
            _LOG,
            {
                "at": now,
                "subject": call.subject,
                "actor": call.actor,
                "tool": call.tool,
                "ticket_key": change.ticket_key,
                "idempotency_key": call.key,
                "change": json.dumps(change.change, sort_keys=True),
            },
        )

    def _summary(self, row: Any) -> TicketSummary:
        return TicketSummary(
            key=row["key"],
            project=row["project"],
            title=row["title"],
            status=row["status"],
            priority=row["priority"],
            assignee=row["assignee"],
            updated_at=row["updated_at"],
            url=f"{self.base_url}/tickets/{row['key']}",
        )

    async def _visible_ticket(self, conn: AsyncConnection, caller: Caller, key: str) -> Ticket:
        return self._ticket(await self._ticket_rows(conn, _TICKET, key), caller, key)

    async def _ticket_rows(
        self, conn: AsyncConnection, stmt: sa.Select[Any], key: str, **call: str
    ) -> list[sa.RowMapping]:
        """``stmt``'s rows for ticket ``key``; ``call``: the idempotency record's parameters
        (``subject``, ``idempotency_key``) for ``_TICKET_AND_EARLIER``."""
        params = {"key": key.strip().upper(), **call}
        return list((await conn.execute(stmt, params)).mappings().all())

    def _ticket(self, rows: list[sa.RowMapping], caller: Caller, key: str) -> Ticket:
        if not rows or rows[0]["team"] not in caller.teams:
            # Other teams' tickets look exactly like missing ones.
            raise NotFoundError(f"no ticket {key!r} that you can see")
        row = rows[0]
        return Ticket(
            **self._summary(row).model_dump(),
            description=row["description"],
            created_by=row["created_by"],
            created_at=row["created_at"],
            comments=[
                Comment(
                    author=c["comment_author"],
                    body=c["comment_body"],
                    created_at=c["comment_created_at"],
                )
                for c in rows
                if c["comment_id"] is not None
            ],
        )

    # --- seeding and inspection (not exposed as tools) -----------------------------------

    async def seed(self, rows: SeedData) -> None:
        """Load demo data into an empty store (a store that has projects is left as it is)."""
        async with self.engine.begin() as conn:
            if (await conn.execute(sa.select(sa.func.count()).select_from(projects))).scalar():
                return
            if rows.projects:
                await conn.execute(projects.insert(), rows.projects)
            if rows.tickets:
                await conn.execute(tickets.insert(), rows.tickets)
            if rows.comments:
                await conn.execute(comments.insert(), rows.comments)

    async def all_tickets(self) -> list[Ticket]:
        """Every ticket, unfiltered: for tests and operators, never for a tool."""
        async with self.engine.connect() as conn:
            teams = (await conn.execute(sa.select(projects.c.team).distinct())).scalars().all()
            keys = (await conn.execute(sa.select(tickets.c.key))).scalars().all()
            everyone = Caller(
                "admin", None, None, frozenset(), frozenset(f"team-{t}" for t in teams)
            )
            return [await self._visible_ticket(conn, everyone, key) for key in keys]

    async def all_changes(self) -> list[ChangeEntry]:
        async with self.engine.connect() as conn:
            rows = (await conn.execute(sa.select(change_log).order_by(change_log.c.id))).mappings()
            return [_entry(row) for row in rows]


@dataclass
class SeedData:
    projects: list[dict[str, Any]]
    tickets: list[dict[str, Any]]
    comments: list[dict[str, Any]]


def _entry(row: Any) -> ChangeEntry:
    return ChangeEntry(
        id=row["id"],
        at=row["at"],
        subject=row["subject"],
        actor=row["actor"],
        tool=row["tool"],
        ticket_key=row["ticket_key"],
        idempotency_key=row["idempotency_key"],
        change=json.loads(row["change"]),
    )
