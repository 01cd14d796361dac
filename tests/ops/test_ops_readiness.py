"""Readiness semantics: required checks (database, IdP/broker) make the app unready; MCP
servers only degrade it, by name; probe failures carry their class, never a crash."""

from __future__ import annotations

import asyncio

from sqlalchemy.ext.asyncio import AsyncEngine

from infra.settings import BrokerSettings, IdpSettings, McpServerSettings, Settings
from infra.storage import create_engine
from opsbot.observability import Readiness


async def _ok() -> None:
    return None


async def _refused() -> None:
    raise ConnectionRefusedError("down")


async def _hangs() -> None:
    await asyncio.Event().wait()


async def test_required_failures_make_it_unready_and_servers_only_degrade() -> None:
    report = await Readiness(
        {"database": _ok, "idp": _refused},
        {"ticketing": _ok, "docs": _hangs},
        timeout=0.05,
    ).check()
    assert not report.ready
    body = report.as_json()
    assert body["status"] == "unready"
    assert body["degraded"] == ["docs"]
    assert body["checks"]["idp"] == {"ok": False, "detail": "ConnectionRefusedError"}
    assert body["checks"]["mcp:docs"] == {"ok": False, "detail": "timed out"}
    assert body["checks"]["mcp:ticketing"] == {"ok": True}

    healthy = await Readiness({"database": _ok}, {"docs": _refused}).check()
    assert healthy.ready
    assert healthy.as_json()["status"] == "degraded"


async def test_from_settings_checks_the_real_database_and_names_unreachable_parts(
    engine: AsyncEngine,
) -> None:
    closed = "http://127.0.0.1:9/mcp"  # discard port: nothing listens
    settings = Settings(
        _env_file=None,  # type: ignore[call-arg]
        idp=IdpSettings(issuer="http://127.0.0.1:9"),
        mcp_servers=[McpServerSettings(name="ticketing", url=closed, audience=closed)],
    )
    report = await Readiness.from_settings(settings, engine).check()
    assert report.checks["database"].ok  # SQLite and PostgreSQL (the engine fixture)
    assert not report.checks["idp"].ok
    assert report.degraded == ["ticketing"]
    assert not report.ready

    remote = settings.model_copy(
        update={"broker": BrokerSettings(mode="remote", service_url="http://127.0.0.1:9")}
    )
    assert "broker" in (await Readiness.from_settings(remote, engine).check()).checks

    broken = create_engine("postgresql+psycopg://nobody@127.0.0.1:9/none")
    try:
        down = await Readiness.from_settings(settings, broken).check()
    finally:
        await broken.dispose()
    assert not down.checks["database"].ok
