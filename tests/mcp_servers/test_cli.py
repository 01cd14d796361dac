"""``opsbot mcp NAME`` as its own process: starts, verifies tokens, serves the real MCP client."""

from __future__ import annotations

import asyncio
import os
import re
import secrets
from pathlib import Path

import httpx
import psycopg
import pytest
from psycopg import sql
from sqlalchemy.engine import make_url

from infra.settings import Settings
from mcp_servers import AuthConfig
from mcp_servers.database import deprovision
from testing.mcp import TestIssuer, directory_grants, http_refusal, mcp_session
from tests import forkserver
from tests.mcp_servers.test_ticketing import data


async def _start(
    name: str, issuer: TestIssuer, data_dir: Path, *extra: str
) -> tuple[asyncio.subprocess.Process, str]:
    process = await asyncio.create_subprocess_exec(
        *forkserver.command("mcp", name),
        "--port",
        "0",
        "--issuer",
        issuer.issuer,
        "--jwks-url",
        issuer.jwks_url,
        *extra,
        env={**os.environ, "OPSBOT_DATA_DIR": str(data_dir)},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    assert process.stdout is not None
    line = (await asyncio.wait_for(process.stdout.readline(), timeout=60)).decode()
    match = re.search(r"serving (\S+) \(audience (\S+),", line)
    assert match, line
    return process, match.group(1)


async def test_each_server_runs_as_its_own_process(
    mcp_test_issuer: TestIssuer, tmp_path: Path
) -> None:
    calls = {
        "ticketing": ("get_ticket", {"key": "PAY-101"}),
        "docs": ("get_doc", {"doc_id": "payments-refund-stuck"}),
        "database": ("get_order_status", {"order_id": "ORD-10041"}),
    }
    # Started at once: each start imports the app on its own.
    started = await asyncio.gather(
        *(_start(name, mcp_test_issuer, tmp_path) for name in calls), return_exceptions=True
    )
    try:
        for (name, (tool, args)), outcome in zip(calls.items(), started, strict=True):
            if isinstance(outcome, BaseException):
                raise outcome
            _process, url = outcome
            groups, scopes = directory_grants("alice", name)
            token = mcp_test_issuer.mint(sub="alice", aud=url, scope=scopes, groups=groups)
            async with mcp_session(url, token) as session:
                assert data(await session.call_tool(tool, args))
            wrong = mcp_test_issuer.mint(sub="alice", aud="http://127.0.0.1:1/mcp", scope=scopes)
            assert (await http_refusal(url, wrong)).status_code == 401
    finally:
        for outcome in started:
            if not isinstance(outcome, BaseException):
                outcome[0].terminate()
                await outcome[0].wait()
    # File-backed stores are seeded once: a restart keeps (and does not duplicate) the data.
    process, url = await _start("ticketing", mcp_test_issuer, tmp_path)
    try:
        groups, scopes = directory_grants("alice", "ticketing")
        token = mcp_test_issuer.mint(sub="alice", aud=url, scope=scopes, groups=groups)
        async with mcp_session(url, token) as session:
            found = data(await session.call_tool("search_tickets", {"limit": 100}))
            assert found["total_matches"] == 4
    finally:
        process.terminate()
        await process.wait()


@pytest.mark.postgres
async def test_database_server_provisions_postgres_and_serves_as_mapped_roles(
    mcp_test_issuer: TestIssuer, tmp_path: Path, base_settings: Settings
) -> None:
    admin = base_settings.test_database_url
    name = f"opsbot_mcpcli_{secrets.token_hex(5)}"
    prefix = f"ro{secrets.token_hex(4)}_"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    url = make_url(admin).set(database=name).render_as_string(hide_password=False)
    extra = ["--provision-admin-url", url, "--role-prefix", prefix, "--enable-query"]
    try:
        for _ in range(2):  # the second start finds the database provisioned
            process, mcp_url = await _start("database", mcp_test_issuer, tmp_path, *extra)
            try:
                groups, scopes = directory_grants("carol", "database")
                token = mcp_test_issuer.mint(sub="carol", aud=mcp_url, scope=scopes, groups=groups)
                async with mcp_session(mcp_url, token) as session:
                    result = data(
                        await session.call_tool(
                            "run_readonly_query", {"sql": "SELECT DISTINCT team FROM orders"}
                        )
                    )
                    assert result["rows"] == [["platform"]]
            finally:
                process.terminate()
                await process.wait()
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )
        await deprovision(
            admin, role_prefix=prefix, users=["alice", "bob", "carol", "dave", "erin", "mallory"]
        )


async def test_an_audience_that_is_a_name_is_the_aud_its_tokens_carry(
    mcp_test_issuer: TestIssuer, tmp_path: Path
) -> None:
    """Some identity providers name audiences (``api://tickets``, a Keycloak client id): the
    server takes tokens for that name and stays at its own URL, whose RFC 9728 metadata
    names that URL as the resource (issue 19: audiences as any string)."""
    process, url = await _start("ticketing", mcp_test_issuer, tmp_path, "--audience", "tickets-mcp")
    try:
        groups, scopes = directory_grants("alice", "ticketing")
        token = mcp_test_issuer.mint(sub="alice", aud="tickets-mcp", scope=scopes, groups=groups)
        async with mcp_session(url, token) as session:
            assert data(await session.call_tool("get_ticket", {"key": "PAY-101"}))
        for_the_url = mcp_test_issuer.mint(sub="alice", aud=url, scope=scopes, groups=groups)
        refused = await http_refusal(url, for_the_url)
        assert refused.status_code == 401
        async with httpx.AsyncClient() as client:
            metadata = (
                await client.get(url.replace("/mcp", "/.well-known/oauth-protected-resource/mcp"))
            ).json()
        assert metadata["resource"] == url
    finally:
        process.terminate()
        await process.wait()


def test_a_server_url_that_is_no_url_is_refused_with_a_clear_reason() -> None:
    with pytest.raises(ValueError, match="http\\(s\\) URL"):
        AuthConfig(issuer="https://idp.example", audience="tickets-mcp")
    assert AuthConfig(
        issuer="https://idp.example",
        audience="tickets-mcp",
        resource_url="http://127.0.0.1:8101/mcp",
    ).resource == ("http://127.0.0.1:8101/mcp")
