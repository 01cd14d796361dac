"""The database MCP server: narrow, parameterised reads of operational state.

Scopes: ``db:read`` for the narrow tools; ``db:query`` for ``run_readonly_query``, which is
registered only when the configuration enables it (PostgreSQL only).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Annotated, Any

from pydantic import Field

from mcp_servers.app import AuthConfig, ScopedServer
from mcp_servers.auth import Clock, JwksClient, current_caller, utc_now
from mcp_servers.database.gateway import DatabaseGateway
from mcp_servers.database.models import Deploy, Deploys, Job, Jobs, Order, QueryResult
from mcp_servers.errors import NotFoundError
from mcp_servers.hosts import DEFAULT_ALLOWED_HOSTS

READ = "db:read"
QUERY = "db:query"

INSTRUCTIONS = (
    "Database: operational state (orders, jobs, deploys) of the caller's teams, read-only."
)


def _records(columns: list[str], rows: list[list[Any]]) -> list[dict[str, Any]]:
    return [dict(zip(columns, row, strict=True)) for row in rows]


def build_database(
    gateway: DatabaseGateway,
    auth: AuthConfig,
    *,
    jwks: JwksClient | None = None,
    enable_query: bool = False,
    clock: Clock = utc_now,
    host: str = "127.0.0.1",
    allowed_hosts: Sequence[str] = DEFAULT_ALLOWED_HOSTS,
) -> ScopedServer:
    server = ScopedServer(
        "database", auth, READ, INSTRUCTIONS, jwks=jwks, host=host, allowed_hosts=allowed_hosts
    )

    @server.tool(scope=READ, read_only=True, title="Order status")
    async def get_order_status(
        order_id: Annotated[str, Field(pattern=r"^ORD-\d{1,12}$", description="e.g. ORD-10041")],
    ) -> Order:
        """The status of one of your teams' orders."""
        caller = current_caller(READ)
        columns, rows, _ = await gateway.select(
            caller,
            "SELECT id, team, customer, status, amount_cents, currency, updated_at FROM orders "
            "WHERE id = :order_id AND team IN ({teams})",
            {"order_id": order_id},
            limit=1,
        )
        if not rows:
            raise NotFoundError(f"no order {order_id!r} that you can see")
        return Order.model_validate(_records(columns, rows)[0])

    @server.tool(scope=READ, read_only=True, title="Failed jobs")
    async def list_failed_jobs(
        since_hours: Annotated[
            int, Field(ge=1, le=24 * 90, description="how far back to look, in hours")
        ] = 24,
        name: Annotated[
            str | None, Field(max_length=100, description="only jobs with this exact name")
        ] = None,
        limit: Annotated[int, Field(ge=1, le=200, description="most jobs to return")] = 50,
    ) -> Jobs:
        """Your teams' jobs that failed in the last ``since_hours`` hours, newest first."""
        caller = current_caller(READ)
        params: dict[str, Any] = {"since": clock() - timedelta(hours=since_hours)}
        name_filter = ""
        if name is not None:
            params["name"] = name
            name_filter = "AND name = :name "
        columns, rows, truncated = await gateway.select(
            caller,
            "SELECT id, team, name, status, error, started_at, finished_at FROM jobs "  # noqa: S608
            "WHERE status = 'failed' AND started_at >= :since AND team IN ({teams}) "
            f"{name_filter}ORDER BY started_at DESC",
            params,
            limit=min(limit, gateway.max_rows),
        )
        return Jobs(
            jobs=[Job.model_validate(r) for r in _records(columns, rows)], truncated=truncated
        )

    @server.tool(scope=READ, read_only=True, title="Recent deploys")
    async def recent_deploys(
        service: Annotated[
            str | None, Field(max_length=100, description="only deploys of this service")
        ] = None,
        limit: Annotated[int, Field(ge=1, le=200, description="most deploys to return")] = 20,
    ) -> Deploys:
        """Your teams' most recent deploys, optionally of one service."""
        caller = current_caller(READ)
        params: dict[str, Any] = {}
        service_filter = ""
        if service is not None:
            params["service"] = service
            service_filter = "AND service = :service "
        columns, rows, truncated = await gateway.select(
            caller,
            "SELECT id, team, service, version, status, deployed_by, deployed_at "  # noqa: S608
            "FROM deploys "
            f"WHERE team IN ({{teams}}) {service_filter}ORDER BY deployed_at DESC",
            params,
            limit=min(limit, gateway.max_rows),
        )
        return Deploys(
            deploys=[Deploy.model_validate(r) for r in _records(columns, rows)],
            truncated=truncated,
        )

    if enable_query:

        @server.tool(scope=QUERY, read_only=True, title="Read-only SQL query")
        async def run_readonly_query(
            sql: Annotated[
                str,
                Field(
                    min_length=1,
                    max_length=10_000,
                    description="one SELECT statement over orders, jobs and deploys",
                ),
            ],
        ) -> QueryResult:
            """Run one SELECT over orders, jobs and deploys as you, read-only.

            The database enforces your teams' rows, a statement timeout and a row cap.
            """
            return await gateway.raw_query(current_caller(QUERY), sql)

    return server
