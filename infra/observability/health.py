"""Readiness: the database, the broker's identity provider (or the broker service) and each
MCP server, checked concurrently with a short timeout.

The database check includes its schema: a database ``opsbot migrate`` has not brought to
this code's revision makes the instance unready, with "database schema is at revision X,
expected Y: run `opsbot migrate`" as the check's detail, logged once (``SchemaWatch``).

An MCP server that is down does not make the instance unready — every instance would fail
the same way, and opsbot runs in degraded mode without it — but it is named in
``degraded``. The database or the IdP/broker being down does: nothing can be served.

Example::

    report = await Readiness.from_settings(settings, engine).check()
    report.ready, report.degraded      # True, ["ticketing"]
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from infra.settings import Settings
from infra.storage.migrate import SchemaOutOfDateError, check_schema, report_schema
from infra.tls import shared_ssl_context

Probe = Callable[[], Awaitable[None]]


class SchemaWatch:
    """Whether the database is at this code's schema revision; a problem is logged once per
    process (an unready instance is probed every few seconds: one line, not thousands)."""

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine

    async def check(self) -> None:
        """Raise ``SchemaOutOfDateError`` while the database is behind."""
        try:
            await check_schema(self._engine)
        except SchemaOutOfDateError as exc:
            report_schema(exc)
            raise
        report_schema(None)


@dataclass(frozen=True, slots=True)
class Check:
    ok: bool
    detail: str = ""


@dataclass(frozen=True, slots=True)
class ReadinessReport:
    checks: Mapping[str, Check]
    required: frozenset[str]
    degraded: list[str] = field(default_factory=list)

    @property
    def ready(self) -> bool:
        return all(self.checks[name].ok for name in self.required)

    def as_json(self) -> dict[str, Any]:
        return {
            "status": "unready" if not self.ready else "degraded" if self.degraded else "ready",
            "degraded": self.degraded,
            "checks": {
                name: {"ok": c.ok, **({"detail": c.detail} if c.detail else {})}
                for name, c in self.checks.items()
            },
        }


class Readiness:
    """Named probes; ``mcp:<name>`` probes are optional (degraded), the others required."""

    def __init__(
        self,
        required: Mapping[str, Probe],
        servers: Mapping[str, Probe],
        *,
        timeout: float = 2.0,
    ) -> None:
        self._required = dict(required)
        self._servers = dict(servers)
        self._timeout = timeout

    @classmethod
    def from_settings(
        cls, settings: Settings, engine: AsyncEngine, schema: SchemaWatch | None = None
    ) -> Readiness:
        timeout = settings.observability.readiness_timeout_seconds
        watch = schema or SchemaWatch(engine)

        async def database() -> None:
            async with engine.connect() as conn:
                await conn.execute(text("SELECT 1"))
            await watch.check()

        if settings.broker.mode == "remote":
            identity_url = settings.broker.service_url.rstrip("/") + "/healthz"
            identity_name = "broker"
        else:
            identity_url = settings.idp.issuer.rstrip("/") + "/.well-known/openid-configuration"
            identity_name = "idp"
        servers = {s.name: _http_probe(s.url, timeout) for s in settings.mcp_servers}
        return cls(
            {"database": database, identity_name: _http_probe(identity_url, timeout)},
            servers,
            timeout=timeout,
        )

    async def check(self) -> ReadinessReport:
        probes = {**self._required, **{f"mcp:{n}": p for n, p in self._servers.items()}}
        names = list(probes)
        results = await asyncio.gather(*(self._run(probes[n]) for n in names))
        checks = dict(zip(names, results, strict=True))
        degraded = sorted(n for n in self._servers if not checks[f"mcp:{n}"].ok)
        return ReadinessReport(checks, frozenset(self._required), degraded)

    async def _run(self, probe: Probe) -> Check:
        try:
            await asyncio.wait_for(probe(), self._timeout)
        except TimeoutError:
            return Check(False, "timed out")
        except SchemaOutOfDateError as exc:  # what the operator has to do, said in full
            return Check(False, str(exc))
        except Exception as exc:  # any failure means "not ready"; the class is enough
            return Check(False, type(exc).__name__)
        return Check(True)


def _http_probe(url: str, timeout: float) -> Probe:
    """Up when the server answers below 500 (401 from an MCP server without a token is up)."""

    async def probe() -> None:
        async with httpx.AsyncClient(timeout=timeout, verify=shared_ssl_context()) as client:
            response = await client.get(url)
        if response.status_code >= 500:
            raise RuntimeError(f"HTTP {response.status_code}")

    return probe
