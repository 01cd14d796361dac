"""``allowed_hosts`` (DNS-rebinding protection, 421) and ``/healthz`` apart from MCP auth.

Issue 19. Over real HTTP against the in-process servers, and against ``opsbot mcp`` as its own
process configured through the settings (``OPSBOT_REFERENCE_SERVERS__<NAME>__ALLOWED_HOSTS``).
"""

from __future__ import annotations

import asyncio
import os
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import httpx
import pytest
from pydantic import ValidationError

from infra.settings import Settings
from infra.tls import shared_ssl_context
from mcp_servers import ReferenceServers, start_reference_servers
from mcp_servers.hosts import normalize_allowed_host, transport_security
from testing.mcp import MintToken, TestIssuer, directory_grants
from tests import forkserver

INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "t", "version": "0"},
    },
}


async def _initialize(url: str, token: str | None, **headers: str) -> httpx.Response:
    sent = {"Accept": "application/json, text/event-stream", **headers}
    if token:
        sent["Authorization"] = f"Bearer {token}"
    async with httpx.AsyncClient(verify=shared_ssl_context()) as http:
        return await http.post(url, json=INITIALIZE, headers=sent)


async def test_healthz_needs_no_token_no_session_and_any_host(
    reference_servers: ReferenceServers,
) -> None:
    async with httpx.AsyncClient(verify=shared_ssl_context()) as http:
        for server in reference_servers:
            base = server.url.removesuffix("/mcp")
            for host in (None, "10.1.2.3:8080", "evil.example.com"):
                headers = {"Host": host} if host else {}
                response = await http.get(f"{base}/healthz", headers=headers)
                assert response.status_code == 200, (server.name, host)
                assert response.json() == {"status": "ok", "server": server.name}
                assert "mcp-session-id" not in response.headers
                assert "www-authenticate" not in response.headers
            assert (await http.head(f"{base}/healthz")).status_code == 200
    # The MCP endpoint itself still needs a token.
    assert (await _initialize(reference_servers.ticketing.url, None)).status_code == 401


async def test_loopback_hosts_are_answered_with_any_port_or_none(
    reference_servers: ReferenceServers, mcp_token: MintToken
) -> None:
    server = reference_servers.ticketing
    port = urlparse(server.url).port
    token = mcp_token("alice", "ticketing")
    for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}", "localhost"):
        response = await _initialize(server.url, token, Host=host)
        assert response.status_code == 200, (host, response.status_code)


async def test_other_hosts_get_421_before_any_token_is_looked_at(
    reference_servers: ReferenceServers, mcp_token: MintToken
) -> None:
    server = reference_servers.ticketing
    token = mcp_token("alice", "ticketing")
    base = server.url.removesuffix("/mcp")
    for host in ("evil.example.com", "localhost.evil.example.com:80", "127.0.0.2:8101"):
        for sent_token in (None, token, "not-a-jwt"):
            response = await _initialize(server.url, sent_token, Host=host)
            assert response.status_code == 421, (host, sent_token is not None)
            assert "www-authenticate" not in response.headers
    async with httpx.AsyncClient(verify=shared_ssl_context()) as http:
        metadata = await http.get(
            f"{base}/.well-known/oauth-protected-resource/mcp",
            headers={"Host": "evil.example.com"},
        )
    assert metadata.status_code == 421


async def test_a_foreign_browser_origin_gets_403(
    reference_servers: ReferenceServers, mcp_token: MintToken
) -> None:
    server = reference_servers.docs
    token = mcp_token("alice", "docs")
    refused = await _initialize(server.url, token, Origin="http://evil.example.com")
    assert refused.status_code == 403
    port = urlparse(server.url).port
    allowed = await _initialize(server.url, token, Origin=f"http://localhost:{port}")
    assert allowed.status_code == 200


@pytest.fixture
async def deployed(mcp_test_issuer: TestIssuer, tmp_path: Path) -> AsyncIterator[ReferenceServers]:
    async with start_reference_servers(
        issuer=mcp_test_issuer.issuer,
        jwks_url=mcp_test_issuer.jwks_url,
        data_dir=tmp_path / "db",
        allowed_hosts=["localhost", "tickets.internal", "ops.example.com:8443"],
    ) as servers:
        yield servers


async def test_a_deployments_host_names_can_be_allowed(
    deployed: ReferenceServers, mcp_test_issuer: TestIssuer
) -> None:
    server = deployed.ticketing
    groups, scopes = directory_grants("alice", "ticketing")
    token = mcp_test_issuer.mint(sub="alice", aud=server.audience, scope=scopes, groups=groups)
    port = urlparse(server.url).port
    expected = {
        "tickets.internal": 200,
        "tickets.internal:8101": 200,
        "TICKETS.internal": 421,  # exact names only (browsers send lower case)
        "ops.example.com:8443": 200,
        "ops.example.com": 421,  # a port given in the setting is the only port
        "ops.example.com:443": 421,
        f"localhost:{port}": 200,
        f"127.0.0.1:{port}": 421,  # not in this server's list any more
        "tickets.internal.evil.com": 421,
        "evil.example.com": 421,
    }
    for host, status in expected.items():
        response = await _initialize(server.url, token, Host=host)
        assert response.status_code == status, (host, response.status_code)


def test_allowed_host_entries_are_checked() -> None:
    assert normalize_allowed_host(" Tickets.Internal:8101 ") == "tickets.internal:8101"
    assert normalize_allowed_host("[::1]") == "[::1]"
    for bad in ("", "http://x", "x/y", "a_b", "x:99999", "x:", "*", "x y"):
        with pytest.raises(ValueError, match="not a host name"):
            normalize_allowed_host(bad)
    with pytest.raises(ValueError, match="empty"):
        transport_security([])
    settings = transport_security(["tickets.internal"])
    assert settings.enable_dns_rebinding_protection
    assert settings.allowed_hosts == ["tickets.internal", "tickets.internal:*"]


def test_settings_default_to_loopback_and_read_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(
        "OPSBOT_REFERENCE_SERVERS__TICKETING__ALLOWED_HOSTS", '["localhost","Tickets.Internal"]'
    )
    settings = Settings(_env_file=None)  # type: ignore[call-arg]
    assert settings.reference_servers.ticketing.allowed_hosts == ["localhost", "tickets.internal"]
    assert settings.reference_servers.docs.allowed_hosts == ["127.0.0.1", "localhost", "[::1]"]


# --- `opsbot mcp` as its own process, configured through the settings ---------------------------


async def _spawn(
    issuer: TestIssuer, data_dir: Path, env: dict[str, str], *extra: str
) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        *forkserver.command("mcp", "ticketing"),
        "--port",
        "0",
        "--issuer",
        issuer.issuer,
        "--jwks-url",
        issuer.jwks_url,
        *extra,
        env={**os.environ, "OPSBOT_DATA_DIR": str(data_dir), **env},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )


async def _serving(process: asyncio.subprocess.Process) -> tuple[str, str]:
    assert process.stdout is not None
    line = (await asyncio.wait_for(process.stdout.readline(), timeout=60)).decode()
    match = re.search(r"serving (\S+) \(audience (\S+),", line)
    assert match, line
    return match.group(1), match.group(2)


async def _stop(process: asyncio.subprocess.Process) -> None:
    if process.returncode is None:
        process.terminate()
        await asyncio.wait_for(process.wait(), timeout=30)


@pytest.mark.parametrize(
    ("env", "extra"),
    [
        ({"OPSBOT_REFERENCE_SERVERS__TICKETING__ALLOWED_HOSTS": '["tickets.internal"]'}, ()),
        ({}, ("--allowed-host", "tickets.internal", "--allowed-host", "localhost")),
    ],
    ids=["setting", "flag"],
)
async def test_opsbot_mcp_answers_the_configured_host_only(
    mcp_test_issuer: TestIssuer, tmp_path: Path, env: dict[str, str], extra: tuple[str, ...]
) -> None:
    process = await _spawn(mcp_test_issuer, tmp_path, env, *extra)
    try:
        url, audience = await _serving(process)
        groups, scopes = directory_grants("alice", "ticketing")
        token = mcp_test_issuer.mint(sub="alice", aud=audience, scope=scopes, groups=groups)
        statuses: dict[str, Any] = {}
        for host in ("tickets.internal", "evil.example.com"):
            statuses[host] = (await _initialize(url, token, Host=host)).status_code
        assert statuses == {"tickets.internal": 200, "evil.example.com": 421}
        async with httpx.AsyncClient(verify=shared_ssl_context()) as http:
            health = await http.get(url.removesuffix("/mcp") + "/healthz")
        assert health.status_code == 200
    finally:
        await _stop(process)


async def test_default_opsbot_mcp_refuses_a_deployment_name(
    mcp_test_issuer: TestIssuer, tmp_path: Path
) -> None:
    process = await _spawn(mcp_test_issuer, tmp_path, {})
    try:
        url, audience = await _serving(process)
        groups, scopes = directory_grants("alice", "ticketing")
        token = mcp_test_issuer.mint(sub="alice", aud=audience, scope=scopes, groups=groups)
        assert (await _initialize(url, token, Host="tickets.internal")).status_code == 421
        assert (await _initialize(url, token)).status_code == 200
    finally:
        await _stop(process)


async def test_a_bad_allowed_host_flag_exits_2_naming_the_problem(
    mcp_test_issuer: TestIssuer, tmp_path: Path
) -> None:
    process = await _spawn(mcp_test_issuer, tmp_path, {}, "--allowed-host", "http://tickets/")
    _, stderr = await asyncio.wait_for(process.communicate(), timeout=60)
    assert process.returncode == 2
    assert "argument --allowed-host: 'http://tickets/' is not a host name" in stderr.decode()
    assert "Traceback" not in stderr.decode()


def test_a_bad_allowed_hosts_setting_is_refused_with_the_reason(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The settings object refuses it at start-up, before any server is built (how a settings
    # error is reported to the operator is the CLI's concern).
    monkeypatch.setenv("OPSBOT_REFERENCE_SERVERS__DOCS__ALLOWED_HOSTS", '["tickets_internal"]')
    with pytest.raises(ValidationError) as refused:
        Settings(_env_file=None)  # type: ignore[call-arg]
    error = refused.value.errors()[0]
    assert error["loc"] == ("reference_servers", "docs", "allowed_hosts")
    assert "'tickets_internal' is not a host name" in error["msg"]
    assert "e.g. tickets.internal" in error["msg"]


@pytest.mark.parametrize(
    "body",
    [b"\x80", b'{"jsonrpc":"2.0","id":1,"method":"\xff"}', b"[" * 100_000, b'{"id":' + b"9" * 5000],
    ids=["not UTF-8", "a raw byte in a string", "nested 100,000 deep", "5,000 digits"],
)
async def test_a_body_that_is_not_json_gets_a_parse_error(
    reference_servers: ReferenceServers,
    mcp_token: MintToken,
    caplog: pytest.LogCaptureFixture,
    body: bytes,
) -> None:
    """Bodies the SDK's parser did not expect (it catches only JSONDecodeError) were its 500
    with a traceback: the auth gate answers JSON-RPC's parse error itself."""
    server = reference_servers.ticketing
    headers = {
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
        "Authorization": f"Bearer {mcp_token('alice', 'ticketing')}",
    }
    async with httpx.AsyncClient(verify=shared_ssl_context()) as http:
        response = await http.post(server.url, content=body, headers=headers)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == -32700
    assert [r.getMessage() for r in caplog.records if r.exc_info or r.levelno >= 40] == []
