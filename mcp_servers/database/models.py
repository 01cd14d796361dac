"""Database server configuration and payloads."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, model_validator


class DatabaseConfig(BaseModel):
    """How the database server reaches its data.

    ``sqlite`` (embedded default): a read-only SQLite connection; team filtering is done by
    the server's own queries — weaker than PostgreSQL, where the database itself enforces it.
    ``postgres``: ``postgres_url`` logs in as the gateway role, and every call runs in a
    read-only transaction under ``SET LOCAL ROLE <role_prefix>u_<subject>`` with row-level
    security by team, ``statement_timeout`` and a row cap (see ``database.postgres``).
    """

    backend: Literal["sqlite", "postgres"] = "sqlite"
    sqlite_path: Path | None = None
    postgres_url: str | None = None
    role_prefix: str = Field(default="opsbot_ro_", pattern=r"^[a-z][a-z0-9_]{0,30}$")
    statement_timeout_ms: int = Field(default=2000, ge=10, le=60_000)
    max_rows: int = Field(default=200, ge=1, le=10_000)
    enable_query: bool = False  # the ad-hoc run_readonly_query tool (PostgreSQL only)

    @model_validator(mode="after")
    def _consistent(self) -> DatabaseConfig:
        if self.backend == "postgres" and not self.postgres_url:
            raise ValueError("backend 'postgres' needs postgres_url")
        if self.enable_query and self.backend != "postgres":
            raise ValueError(
                "run_readonly_query needs the postgres backend: SQLite cannot enforce team "
                "row filtering on arbitrary SQL"
            )
        return self


class Order(BaseModel):
    id: str
    team: str
    customer: str
    status: str
    amount_cents: int
    currency: str
    updated_at: str


class Job(BaseModel):
    id: str
    team: str
    name: str
    status: str
    error: str | None
    started_at: str
    finished_at: str | None


class Deploy(BaseModel):
    id: str
    team: str
    service: str
    version: str
    status: str
    deployed_by: str
    deployed_at: str


class Jobs(BaseModel):
    jobs: list[Job]
    truncated: bool


class Deploys(BaseModel):
    deploys: list[Deploy]
    truncated: bool


class QueryResult(BaseModel):
    columns: list[str]
    rows: list[list[Any]]
    truncated: bool = Field(description="true when more rows existed than the row cap")
