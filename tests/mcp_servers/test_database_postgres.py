"""Database server on PostgreSQL: mapped read-only roles, row-level security, ad-hoc SQL limits.

A fresh database and a fresh role prefix per module; roles are dropped at the end (they are
cluster-wide).
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator, Coroutine, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import psycopg
import pytest
import yaml
from psycopg import sql
from sqlalchemy.engine import make_url

from infra.settings import Settings
from mcp_servers import DatabaseConfig, ReferenceServers, start_reference_servers
from mcp_servers.database import deprovision, provision, role_for
from testing.identity import RunningIdp, open_broker
from testing.mcp import DIRECTORY, TestIssuer, directory_grants, http_refusal, mcp_session
from tests.mcp_servers.test_ticketing import data, text_of

pytestmark = pytest.mark.postgres

T = TypeVar("T")


def _run(coroutine: Coroutine[Any, Any, T]) -> T:
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coroutine).result()


def _directory_teams() -> dict[str, list[str]]:
    users = yaml.safe_load(DIRECTORY.read_text())["users"]
    return {
        name: [g.removeprefix("team-") for g in user["groups"] if g.startswith("team-")]
        for name, user in users.items()
    }


@dataclass(frozen=True)
class OpsDatabase:
    admin_url: str
    gateway_url: str
    prefix: str


@pytest.fixture(scope="module")
def ops_db(base_settings: Settings) -> Iterator[OpsDatabase]:
    admin_url = base_settings.test_database_url
    name = f"opsbot_mcpdb_{secrets.token_hex(5)}"
    prefix = f"ro{secrets.token_hex(4)}_"
    with psycopg.connect(admin_url, autocommit=True, connect_timeout=3) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    url = make_url(admin_url).set(database=name).render_as_string(hide_password=False)
    users = _directory_teams()
    try:
        gateway_url = _run(provision(url, role_prefix=prefix, users=users, now=datetime.now(UTC)))
        yield OpsDatabase(url, gateway_url, prefix)
    finally:
        with psycopg.connect(admin_url, autocommit=True) as admin:
            admin.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )
        _run(deprovision(admin_url, role_prefix=prefix, users=list(users)))


@pytest.fixture
async def pg_servers(
    ops_db: OpsDatabase, mcp_test_issuer: TestIssuer, tmp_path: Path
) -> AsyncIterator[ReferenceServers]:
    config = DatabaseConfig(
        backend="postgres",
        postgres_url=ops_db.gateway_url,
        role_prefix=ops_db.prefix,
        enable_query=True,
        statement_timeout_ms=200,
        max_rows=5,
    )
    async with start_reference_servers(
        issuer=mcp_test_issuer.issuer, jwks_url=mcp_test_issuer.jwks_url, database=config
    ) as servers:
        yield servers


def _token(issuer: TestIssuer, servers: ReferenceServers, user: str, **extra: Any) -> str:
    groups, scopes = directory_grants(user, "database")
    claims: dict[str, Any] = {
        "sub": user,
        "aud": servers.database.audience,
        "scope": scopes,
        "groups": groups,
    }
    claims.update(extra)
    return issuer.mint(**claims)


# --- the database itself, with raw SQL under the mapped role ---------------------------


def test_raw_sql_under_mapped_role_sees_only_own_teams_rows(ops_db: OpsDatabase) -> None:
    with psycopg.connect(ops_db.gateway_url, autocommit=True) as conn:
        conn.execute(
            sql.SQL("SET ROLE {}").format(sql.Identifier(role_for(ops_db.prefix, "alice")))
        )
        for table in ("ops.orders", "ops.jobs", "ops.deploys"):
            teams = {row[0] for row in conn.execute(f"SELECT DISTINCT team FROM {table}")}
            assert teams == {"payments"}, table
        assert conn.execute(
            "SELECT count(*) FROM ops.orders WHERE team = 'platform'"
        ).fetchone() == (0,)
        assert conn.execute("SELECT count(*) FROM ops.role_teams").fetchone() == (1,)
        conn.execute(
            sql.SQL("SET ROLE {}").format(sql.Identifier(role_for(ops_db.prefix, "carol")))
        )
        assert {r[0] for r in conn.execute("SELECT DISTINCT team FROM ops.orders")} == {"platform"}
    with psycopg.connect(ops_db.admin_url, autocommit=True) as admin:
        teams = {r[0] for r in admin.execute("SELECT DISTINCT team FROM ops.orders")}
        assert teams == {"payments", "platform", "search"}  # the rows exist; RLS hid them


@pytest.mark.parametrize(
    "statement",
    [
        "INSERT INTO ops.orders VALUES ('ORD-1', 'payments', 'x', 'paid', 1, 'EUR', now())",
        "UPDATE ops.orders SET status = 'refunded'",
        "DELETE FROM ops.jobs",
        "INSERT INTO ops.role_teams VALUES (current_user, 'platform')",
        "TRUNCATE ops.deploys",
    ],
)
def test_writes_fail_in_the_database(ops_db: OpsDatabase, statement: str) -> None:
    with psycopg.connect(ops_db.gateway_url, autocommit=True) as conn:
        conn.execute(sql.SQL("SET ROLE {}").format(sql.Identifier(role_for(ops_db.prefix, "bob"))))
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute(statement)


def test_gateway_has_no_rights_of_its_own_and_cannot_switch_roles_via_set_config(
    ops_db: OpsDatabase,
) -> None:
    with psycopg.connect(ops_db.gateway_url, autocommit=True) as conn:
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("SELECT * FROM ops.orders")
        conn.execute(
            sql.SQL("SET ROLE {}").format(sql.Identifier(role_for(ops_db.prefix, "alice")))
        )
        carol = role_for(ops_db.prefix, "carol")
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("SELECT set_config('role', %s, false)", (carol,))


# --- the server on PostgreSQL, over HTTP -------------------------------------------------


async def test_narrow_tools_run_under_the_mapped_role(
    pg_servers: ReferenceServers, mcp_test_issuer: TestIssuer
) -> None:
    async with mcp_session(pg_servers.database, _token(mcp_test_issuer, pg_servers, "alice")) as s:
        assert (
            data(await s.call_tool("get_order_status", {"order_id": "ORD-10041"}))["team"]
            == "payments"
        )
        assert (await s.call_tool("get_order_status", {"order_id": "ORD-20001"})).isError
        jobs = data(await s.call_tool("list_failed_jobs", {"since_hours": 24 * 7}))["jobs"]
        assert {j["id"] for j in jobs} == {"JOB-501", "JOB-503"}
        assert jobs[0]["started_at"] > jobs[1]["started_at"]
    # The token claims a team the database does not grant: RLS still hides those rows.
    forged_groups = _token(
        mcp_test_issuer, pg_servers, "alice", groups=["team-payments", "team-platform"]
    )
    async with mcp_session(pg_servers.database, forged_groups) as s:
        assert (await s.call_tool("get_order_status", {"order_id": "ORD-20001"})).isError
        teams = {
            d["team"] for d in data(await s.call_tool("recent_deploys", {"limit": 50}))["deploys"]
        }
        assert teams == {"payments"}


async def test_user_without_a_database_role_is_refused(
    pg_servers: ReferenceServers, mcp_test_issuer: TestIssuer
) -> None:
    stranger = _token(mcp_test_issuer, pg_servers, "alice", sub="zed", groups=["team-payments"])
    async with mcp_session(pg_servers.database, stranger) as s:
        result = await s.call_tool("recent_deploys", {})
        assert result.isError
        assert "no database access is set up for 'zed'" in text_of(result)


async def test_readonly_query_is_confined(
    pg_servers: ReferenceServers, mcp_test_issuer: TestIssuer
) -> None:
    carol = _token(mcp_test_issuer, pg_servers, "carol")  # sre: db:read + db:query, platform
    async with mcp_session(pg_servers.database, carol) as s:
        rows = data(
            await s.call_tool(
                "run_readonly_query",
                {"sql": "SELECT team, count(*) AS n FROM orders GROUP BY team"},
            )
        )
        assert rows["columns"] == ["team", "n"]
        assert rows["rows"] == [["platform", 1]]
        other = data(
            await s.call_tool(
                "run_readonly_query", {"sql": "SELECT * FROM jobs WHERE team = 'payments'"}
            )
        )
        assert other["rows"] == []
        capped = data(
            await s.call_tool(
                "run_readonly_query", {"sql": "SELECT g FROM generate_series(1, 100) g"}
            )
        )
        assert len(capped["rows"]) == 5
        assert capped["truncated"] is True
        refusals = {
            "DELETE FROM orders": "only a single SELECT",
            "  -- sneaky\n UPDATE jobs SET status = 'ok'": "only a single SELECT",
            "SELECT 1; DELETE FROM orders": "multiple commands",
            "WITH gone AS (DELETE FROM orders RETURNING *) SELECT * FROM gone": (
                "read-only transaction"
            ),
            "SELECT * FROM orders FOR UPDATE": "read-only transaction",
            "SELECT set_config('role', 'postgres', true)": "permission denied",
            "SELECT pg_sleep(5)": "cancelled",
            "SELECT * FROM no_such_table": "does not exist",
        }
        for statement, expected in refusals.items():
            result = await s.call_tool("run_readonly_query", {"sql": statement})
            assert result.isError, statement
            assert expected in text_of(result), (statement, text_of(result))
        # Still serving after all of that.
        assert data(await s.call_tool("run_readonly_query", {"sql": "SELECT 1 AS one"}))[
            "rows"
        ] == [[1]]


async def test_readonly_query_needs_db_query_scope(
    pg_servers: ReferenceServers, mcp_test_issuer: TestIssuer
) -> None:
    alice = _token(mcp_test_issuer, pg_servers, "alice")  # db:read only
    response = await http_refusal(
        pg_servers.database, alice, "run_readonly_query", {"sql": "SELECT 1"}
    )
    assert response.status_code == 403
    assert 'scope="db:query"' in response.headers["www-authenticate"]


async def test_exchanged_dev_idp_token_runs_under_the_mapped_role(
    ops_db: OpsDatabase, dev_idp: RunningIdp
) -> None:
    config = DatabaseConfig(
        backend="postgres",
        postgres_url=ops_db.gateway_url,
        role_prefix=ops_db.prefix,
        enable_query=True,
    )
    async with start_reference_servers(issuer=dev_idp.issuer, database=config) as servers:
        audiences = {server.name: server.audience for server in servers}
        for name, audience in audiences.items():
            dev_idp.provider.set_audience(name, audience)
        async with open_broker(dev_idp, servers=audiences) as harness:
            carol = await harness.token("carol", "database")  # sre: db:read db:query
            dave = await harness.token("dave", "database")  # platform: db:read only
        async with mcp_session(servers.database, carol) as s:
            rows = data(
                await s.call_tool(
                    "run_readonly_query", {"sql": "SELECT DISTINCT team FROM deploys"}
                )
            )
            assert rows["rows"] == [["platform"]]
        response = await http_refusal(
            servers.database, dave, "run_readonly_query", {"sql": "SELECT 1"}
        )
        assert response.status_code == 403


async def test_prepared_plans_never_leak_rows_between_users(ops_db: OpsDatabase) -> None:
    """The same prepared statements, alternating users on one pooled connection: RLS is
    re-applied for each role (PostgreSQL re-plans when the role changes)."""
    from mcp_servers.auth import Caller
    from mcp_servers.database import open_gateway

    config = DatabaseConfig(
        backend="postgres",
        postgres_url=ops_db.gateway_url,
        role_prefix=ops_db.prefix,
        enable_query=True,
    )

    def caller(name: str, team: str) -> Caller:
        return Caller(name, None, None, frozenset({"db:read"}), frozenset({f"team-{team}"}))

    users = [caller("alice", "payments"), caller("carol", "platform"), caller("mallory", "search")]
    async with open_gateway(config) as gateway:
        pool = gateway._pool  # type: ignore[attr-defined]
        await pool.resize(min_size=1, max_size=1)  # one connection: every call reuses it
        for _ in range(3):  # prepare=True: the same prepared statements serve every user
            for user in users:
                (team,) = user.teams
                _, rows, _ = await gateway.select(
                    user, "SELECT team FROM orders WHERE team IN ({teams})", {}, limit=50
                )
                assert {r[0] for r in rows} == {team}
                # Raw SQL asks for every team; RLS alone must confine it.
                result = await gateway.raw_query(user, "SELECT DISTINCT team FROM deploys")
                assert result.rows == [[team]]
