"""Provision the database server's PostgreSQL side: schema, seed, roles, row-level security.

Layout (all names start with the configured ``role_prefix``; roles are cluster-wide):

- ``<prefix>reader`` (NOLOGIN): ``USAGE`` on schema ``ops`` and ``SELECT`` on its tables —
  nothing else, so INSERT/UPDATE/DELETE fail in the database whatever SQL is sent.
- ``<prefix>u_<subject>`` (NOLOGIN), one per user, member of the reader role; its teams are
  rows of ``ops.role_teams``. Row-level security on every table shows a row only when its
  ``team`` is one of ``current_user``'s teams.
- ``<prefix>gateway`` (LOGIN, NOINHERIT, not superuser): what the server connects as. It may
  ``SET ROLE`` to the user roles but has no table rights of its own.
- ``EXECUTE`` on ``set_config`` is revoked from PUBLIC in this database: ad-hoc SQL cannot
  switch roles with ``set_config('role', ...)`` (the ``SET`` statement itself is already
  impossible: one prepared SELECT per call).

Run with a superuser (or the database owner with CREATEROLE) connection string.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from datetime import datetime
from typing import Any

import psycopg
from psycopg import sql
from sqlalchemy.engine import make_url

from mcp_servers.database.gateway import DDL, SCHEMA, role_for
from mcp_servers.database.seed import TABLES, seed_rows


def _roles(prefix: str, users: Collection[str]) -> tuple[str, str, list[str]]:
    return f"{prefix}reader", f"{prefix}gateway", [role_for(prefix, u) for u in users]


async def provision(
    admin_url: str,
    *,
    role_prefix: str,
    users: Mapping[str, Collection[str]],
    now: datetime,
) -> str:
    """Create schema, seed, roles and policies; returns the gateway's connection URL.

    ``users`` maps a token subject to its teams (e.g. ``{"alice": ["payments"]}``).
    """
    reader, gateway, _ = _roles(role_prefix, users)
    ident = sql.Identifier
    async with await psycopg.AsyncConnection.connect(admin_url, autocommit=True) as conn:  # noqa: SIM117
        async with conn.transaction():
            await conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(ident(SCHEMA)))
            for table in TABLES:
                await conn.execute(
                    sql.SQL(
                        "CREATE TABLE {}.{} (" + DDL[table].format(ts="timestamptz") + ")"
                    ).format(ident(SCHEMA), ident(table))
                )
            await conn.execute(
                sql.SQL(
                    "CREATE TABLE {}.role_teams (role_name text, team text, "
                    "PRIMARY KEY (role_name, team))"
                ).format(ident(SCHEMA))
            )
            for table, rows in seed_rows(now).items():
                for row in rows:
                    await conn.execute(
                        sql.SQL("INSERT INTO {}.{} ({}) VALUES ({})").format(
                            ident(SCHEMA),
                            ident(table),
                            sql.SQL(", ").join(ident(c) for c in row),
                            sql.SQL(", ").join(sql.Placeholder(c) for c in row),
                        ),
                        row,
                    )
            await conn.execute(sql.SQL("CREATE ROLE {} NOLOGIN").format(ident(reader)))
            await conn.execute(
                sql.SQL(
                    "CREATE ROLE {} LOGIN NOINHERIT NOSUPERUSER NOCREATEDB NOCREATEROLE"
                ).format(ident(gateway))
            )
            await conn.execute(
                sql.SQL("GRANT USAGE ON SCHEMA {} TO {}").format(ident(SCHEMA), ident(reader))
            )
            for table in (*TABLES, "role_teams"):
                await conn.execute(
                    sql.SQL("GRANT SELECT ON {}.{} TO {}").format(
                        ident(SCHEMA), ident(table), ident(reader)
                    )
                )
                await conn.execute(
                    sql.SQL("ALTER TABLE {}.{} ENABLE ROW LEVEL SECURITY").format(
                        ident(SCHEMA), ident(table)
                    )
                )
            for table in TABLES:
                await conn.execute(
                    sql.SQL(
                        "CREATE POLICY team_rows ON {schema}.{table} FOR SELECT USING "
                        "(team IN (SELECT team FROM {schema}.role_teams "
                        "WHERE role_name = current_user))"
                    ).format(schema=ident(SCHEMA), table=ident(table))
                )
            await conn.execute(
                sql.SQL(
                    "CREATE POLICY own_rows ON {}.role_teams FOR SELECT "
                    "USING (role_name = current_user)"
                ).format(ident(SCHEMA))
            )
            for subject, teams in users.items():
                await add_user(conn, role_prefix=role_prefix, subject=subject, teams=teams)
            await conn.execute(
                "REVOKE EXECUTE ON FUNCTION pg_catalog.set_config(text, text, boolean) FROM PUBLIC"
            )
    return gateway_url(admin_url, role_prefix)


def gateway_url(admin_url: str, role_prefix: str) -> str:
    """The connection URL of the gateway login role, on the admin URL's server and database."""
    _, gateway, _ = _roles(role_prefix, ())
    url = make_url(admin_url).set(username=gateway, password=None)
    return url.render_as_string(hide_password=False)


async def is_provisioned(admin_url: str, *, role_prefix: str) -> bool:
    """Whether ``provision`` already ran for this database and prefix."""
    _, gateway, _ = _roles(role_prefix, ())
    async with await psycopg.AsyncConnection.connect(admin_url, autocommit=True) as conn:
        row = await (
            await conn.execute(
                "SELECT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = %s) "
                "AND EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = %s)",
                (gateway, SCHEMA),
            )
        ).fetchone()
    return bool(row and row[0])


async def add_user(
    conn: psycopg.AsyncConnection[Any],
    *,
    role_prefix: str,
    subject: str,
    teams: Collection[str],
) -> str:
    """Create one user's read-only role with its teams; the gateway may switch to it."""
    reader, gateway, _ = _roles(role_prefix, ())
    role = role_for(role_prefix, subject)
    ident = sql.Identifier
    await conn.execute(sql.SQL("CREATE ROLE {} NOLOGIN INHERIT").format(ident(role)))
    await conn.execute(sql.SQL("GRANT {} TO {}").format(ident(reader), ident(role)))
    await conn.execute(sql.SQL("GRANT {} TO {}").format(ident(role), ident(gateway)))
    for team in teams:
        await conn.execute(
            sql.SQL("INSERT INTO {}.role_teams (role_name, team) VALUES (%s, %s)").format(
                ident(SCHEMA)
            ),
            (role, team),
        )
    return role


async def deprovision(admin_url: str, *, role_prefix: str, users: Collection[str]) -> None:
    """Drop the roles ``provision`` created (they are cluster-wide; the schema is not)."""
    reader, gateway, user_roles = _roles(role_prefix, users)
    async with await psycopg.AsyncConnection.connect(admin_url, autocommit=True) as conn:
        for role in (*user_roles, gateway, reader):
            exists = await (
                await conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (role,))
            ).fetchone()
            if exists:
                await conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))
                await conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))
