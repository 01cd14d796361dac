"""Where the database tools' SQL runs: SQLite (read-only file) or PostgreSQL (mapped roles).

Both backends take the server's narrow queries written with ``:name`` parameters and a
``{teams}`` marker the gateway fills with the caller's teams, so team filtering is the same
everywhere. On PostgreSQL the database enforces it too (row-level security on the mapped role),
and only PostgreSQL runs ad-hoc SQL.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import sqlite3
import tempfile
from collections.abc import AsyncIterator, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

import aiosqlite
import psycopg
from psycopg import sql as pgsql
from psycopg_pool import AsyncConnectionPool

from infra.storage.postgres import open_pool
from mcp_servers.auth import Caller, Clock, utc_now
from mcp_servers.database.models import DatabaseConfig, QueryResult
from mcp_servers.database.seed import TABLES, seed_rows
from mcp_servers.errors import ForbiddenError, ToolRefusedError

SCHEMA = "ops"

DDL = {
    "orders": "id TEXT PRIMARY KEY, team TEXT NOT NULL, customer TEXT NOT NULL, "
    "status TEXT NOT NULL, amount_cents BIGINT NOT NULL, currency TEXT NOT NULL, "
    "updated_at {ts} NOT NULL",
    "jobs": "id TEXT PRIMARY KEY, team TEXT NOT NULL, name TEXT NOT NULL, status TEXT NOT NULL, "
    "error TEXT, started_at {ts} NOT NULL, finished_at {ts}",
    "deploys": "id TEXT PRIMARY KEY, team TEXT NOT NULL, service TEXT NOT NULL, "
    "version TEXT NOT NULL, status TEXT NOT NULL, deployed_by TEXT NOT NULL, "
    "deployed_at {ts} NOT NULL",
}

Rows = tuple[list[str], list[list[Any]], bool]


class DatabaseGateway(Protocol):
    backend: str
    max_rows: int

    async def select(
        self, caller: Caller, query: str, params: dict[str, Any], *, limit: int
    ) -> Rows: ...

    async def raw_query(self, caller: Caller, query: str) -> QueryResult: ...


def role_for(prefix: str, subject: str) -> str:
    """The read-only PostgreSQL role a token's subject maps to."""
    clean = re.sub(r"[^a-z0-9_]", "_", subject.lower())[: 62 - len(prefix)]
    return f"{prefix}u_{clean}"


def _expand_teams(query: str, params: dict[str, Any], teams: Sequence[str]) -> str:
    names = []
    for i, team in enumerate(sorted(teams)):
        params[f"team{i}"] = team
        names.append(f":team{i}")
    return query.replace("{teams}", ", ".join(names))


def _plain(value: Any) -> Any:
    return value.isoformat() if isinstance(value, datetime) else value


class SqliteGateway:
    """Embedded default: a read-only SQLite connection (``mode=ro`` and ``query_only``)."""

    backend = "sqlite"

    def __init__(self, conn: aiosqlite.Connection, config: DatabaseConfig) -> None:
        self._conn = conn
        self.max_rows = config.max_rows
        self._lock = asyncio.Lock()

    async def select(
        self, caller: Caller, query: str, params: dict[str, Any], *, limit: int
    ) -> Rows:
        if not caller.teams:
            return [], [], False
        params = {k: _plain(v) for k, v in params.items()}
        query = _expand_teams(query, params, list(caller.teams))
        async with self._lock, self._conn.execute(query, params) as cursor:
            rows = list(await cursor.fetchmany(limit + 1))
            columns = [d[0] for d in cursor.description]
        return columns, [list(r) for r in rows[:limit]], len(rows) > limit

    async def raw_query(self, caller: Caller, query: str) -> QueryResult:
        raise ToolRefusedError("ad-hoc queries are not available on this server")


def _create_sqlite(path: Path, now: datetime) -> None:
    with contextlib.closing(sqlite3.connect(path)) as conn, conn:
        for table in TABLES:
            conn.execute(f"CREATE TABLE {table} ({DDL[table].format(ts='TEXT')})")
        for table, rows in seed_rows(now).items():
            for row in rows:
                cols = ", ".join(row)
                marks = ", ".join(f":{c}" for c in row)
                values = {k: _plain(v) for k, v in row.items()}
                conn.execute(f"INSERT INTO {table} ({cols}) VALUES ({marks})", values)  # noqa: S608


class PostgresGateway:
    """Each call: read-only transaction, ``SET LOCAL ROLE`` to the caller's mapped role,
    ``statement_timeout``, fixed ``search_path``, then one statement, at most ``max_rows`` rows.
    """

    backend = "postgres"

    def __init__(self, pool: AsyncConnectionPool[Any], config: DatabaseConfig) -> None:
        self._pool = pool
        self._config = config
        self.max_rows = config.max_rows

    @contextlib.asynccontextmanager
    async def _as_caller(self, caller: Caller) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        role = role_for(self._config.role_prefix, caller.subject)
        async with self._pool.connection() as conn, conn.transaction():
            await conn.execute("SET TRANSACTION READ ONLY")
            try:
                await conn.execute(pgsql.SQL("SET LOCAL ROLE {}").format(pgsql.Identifier(role)))
            except (psycopg.errors.InvalidParameterValue, psycopg.errors.InsufficientPrivilege):
                raise ForbiddenError(
                    f"no database access is set up for {caller.subject!r}"
                ) from None
            timeout = int(self._config.statement_timeout_ms)
            await conn.execute(f"SET LOCAL statement_timeout = {timeout}")
            await conn.execute(f"SET LOCAL search_path = {SCHEMA}")
            yield conn

    async def select(
        self, caller: Caller, query: str, params: dict[str, Any], *, limit: int
    ) -> Rows:
        if not caller.teams:
            return [], [], False
        params = dict(params)
        query = _expand_teams(query, params, list(caller.teams))
        query = re.sub(r"(?<![:\w]):(\w+)", r"%(\1)s", query)
        try:
            async with self._as_caller(caller) as conn:
                cursor = await conn.execute(query, params, prepare=True)
                rows = await cursor.fetchmany(limit + 1)
                columns = [d.name for d in cursor.description or []]
        except psycopg.errors.QueryCanceled:
            raise ToolRefusedError(
                f"query cancelled: it ran longer than {self._config.statement_timeout_ms} ms"
            ) from None
        return columns, [[_plain(v) for v in r] for r in rows[:limit]], len(rows) > limit

    async def raw_query(self, caller: Caller, query: str) -> QueryResult:
        if not self._config.enable_query:
            raise ToolRefusedError("ad-hoc queries are disabled on this server")
        _check_select_only(query)
        try:
            async with self._as_caller(caller) as conn:
                # prepare=True: the server refuses more than one statement.
                cursor = await conn.execute(query, prepare=True)
                rows = await cursor.fetchmany(self.max_rows + 1)
                columns = [d.name for d in cursor.description or []]
        except psycopg.errors.QueryCanceled:
            raise ToolRefusedError(
                f"query cancelled: it ran longer than {self._config.statement_timeout_ms} ms"
            ) from None
        except psycopg.Error as exc:
            first_line = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise ToolRefusedError(f"query refused by the database: {first_line}") from None
        return QueryResult(
            columns=columns,
            rows=[[_plain(v) for v in r] for r in rows[: self.max_rows]],
            truncated=len(rows) > self.max_rows,
        )


_LEADING = re.compile(r"^\s*(?:(?:--[^\n]*\n)|(?:/\*.*?\*/)|\s)*", re.DOTALL)


def _check_select_only(query: str) -> None:
    body = _LEADING.sub("", query)
    first = re.match(r"[A-Za-z]+", body)
    if first is None or first.group(0).lower() not in ("select", "with", "table", "values"):
        raise ToolRefusedError("only a single SELECT statement is allowed")
    if len(query) > 10_000:
        raise ToolRefusedError("query too long (10,000 characters at most)")


@contextlib.asynccontextmanager
async def open_gateway(
    config: DatabaseConfig, *, data_dir: Path | None = None, clock: Clock = utc_now
) -> AsyncIterator[DatabaseGateway]:
    """Open the configured backend. SQLite: create and seed the file if missing, then open it
    read-only. PostgreSQL: the database must be provisioned (``database.postgres.provision``).
    """
    if config.backend == "postgres":
        assert config.postgres_url is not None  # checked by DatabaseConfig
        # The app's one pool helper: connections checked on checkout, reconnected after a
        # database restart.
        async with open_pool(
            config.postgres_url, max_size=5, name="database-mcp", wait=True
        ) as pool:
            yield PostgresGateway(pool, config)
        return
    with contextlib.ExitStack() as stack:
        path = config.sqlite_path
        if path is None:
            base = data_dir or Path(stack.enter_context(tempfile.TemporaryDirectory()))
            path = base / "ops-database.sqlite"
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            await asyncio.to_thread(_create_sqlite, path, clock())
        conn = await aiosqlite.connect(f"file:{path.as_posix()}?mode=ro", uri=True)
        try:
            await conn.execute("PRAGMA query_only = ON")
            yield SqliteGateway(conn, config)
        finally:
            await conn.close()
