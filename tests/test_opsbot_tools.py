"""``opsbot tools`` as an operator runs it (a subprocess from tests/forkserver.py) against
real MCP servers: one line per tool with its server, read/write, allowlisted and why;
``static`` and ``none`` servers listed with opsbot's own credential, an ``exchange`` server
only with a linked user's token (``--as``); a server that cannot be listed is one line, and
the command still lists the rest (exit 0, no traceback)."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from broker import ChatUser, LocalIdentityService, open_identity_service
from broker.links import TokenCipher
from infra.serving import bind_socket
from infra.settings import Settings
from infra.storage import create_engine
from infra.tls import shared_ssl_context
from mcp_servers import ReferenceServers
from testing.agent import fake_mcp_server
from testing.identity import RunningIdp, sign_in_at_login_page
from tests import forkserver

POLICY = """
tools:
  clock_lookup: {kind: read}
  clock_change: {kind: write, approver_group: ticket-leads}
  ticketing_get_ticket: {kind: read}
  ticketing_update_ticket: {kind: write, approver_group: ticket-leads}
allowlist:
  [clock_lookup, clock_change, vendor_lookup, ticketing_get_ticket, ticketing_update_ticket]
"""


def nothing_listening() -> str:
    sock = bind_socket()
    port = int(sock.getsockname()[1])
    sock.close()
    return f"http://127.0.0.1:{port}/mcp"


@pytest.fixture
def mcp_trusted_issuer(dev_idp: RunningIdp) -> tuple[str, str | None]:
    return dev_idp.issuer, dev_idp.jwks_url


@pytest.fixture
async def env(
    dev_idp: RunningIdp, reference_servers: ReferenceServers, sqlite_url: str, tmp_path: Path
) -> AsyncIterator[dict[str, str]]:
    """The environment of an opsbot whose servers are ``clock`` (none) and ``vendor``
    (static), both the FastMCP test server, ``ticketing`` (exchange, the reference server)
    and ``down`` (none, nothing listening)."""
    tickets = reference_servers.ticketing
    dev_idp.provider.set_audience(tickets.name, tickets.audience)
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY)
    async with fake_mcp_server() as (url, _plan):
        servers = [
            {"name": "clock", "url": url, "auth": "none"},
            {
                "name": "vendor",
                "url": url,
                "auth": "static",
                "header_name": "X-Api-Key",
                "header_value_env": "VENDOR_KEY",
            },
            {"name": "ticketing", "url": tickets.url, "audience": tickets.audience},
            {"name": "down", "url": nothing_listening(), "auth": "none"},
        ]
        yield {
            "OPSBOT_DATA_DIR": str(tmp_path / "data"),
            "OPSBOT_DATABASE_URL": sqlite_url,
            "OPSBOT_MCP_SERVERS": json.dumps(servers),
            "OPSBOT_TOOL_POLICY_PATH": str(policy),
            "OPSBOT_IDP__ISSUER": dev_idp.issuer,
            "OPSBOT_IDP__CLIENT_ID": dev_idp.client_id,
            "OPSBOT_IDP__CLIENT_SECRET": dev_idp.client_secret,
            "OPSBOT_BROKER__LINK_ENCRYPTION_KEY": TokenCipher.generate_key(),
            "VENDOR_KEY": "vendor-secret",
        }


async def opsbot_tools(*args: str, env: dict[str, str]) -> tuple[int, list[str], str]:
    """``opsbot tools ARGS``: its exit code, its stdout's lines and its stderr."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("OPSBOT_", "SLACK_"))}
    proc = await asyncio.create_subprocess_exec(
        *forkserver.command("tools", *args),
        env={**clean, **env},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), timeout=60)
    assert proc.returncode is not None
    return proc.returncode, out.decode().splitlines(), err.decode()


def rows(lines: list[str]) -> dict[str, list[str]]:
    """Tool name → [server, kind, allowed, why], from the table's lines."""
    found: dict[str, list[str]] = {}
    for line in lines[1:]:
        if not line.startswith("! "):
            tool, server, kind, allowed, why = line.split(maxsplit=4)
            found[tool] = [server, kind, allowed, why]
    return found


async def test_tools_lists_every_tool_of_the_servers_it_can_reach(env: dict[str, str]) -> None:
    code, lines, err = await opsbot_tools(env=env)
    assert code == 0, err
    assert "Traceback" not in err
    assert lines[0].split() == ["TOOL", "SERVER", "KIND", "ALLOWED", "WHY"]
    listed = rows(lines)
    assert listed["clock_lookup"] == ["clock", "read", "yes", "classified read in the tool policy"]
    assert listed["clock_change"] == [
        "clock",
        "write",
        "yes",
        "classified write in the tool policy",
    ]
    assert listed["clock_note"] == [
        "clock",
        "write",
        "no",
        "unclassified: a write that needs approval; not on the allowlist: hidden from the model",
    ]
    assert listed["vendor_lookup"] == [
        "vendor",
        "write",
        "yes",
        "unclassified: a write that needs approval (runs as opsbot's service identity)",
    ]
    assert {t for t, (server, *_) in listed.items() if server == "clock"} == {
        "clock_lookup",
        "clock_slow_lookup",
        "clock_change",
        "clock_note",
        "clock_slow_change",
    }
    assert len(listed) == 10  # clock's five and vendor's five: no ticketing without a user
    notes = [line for line in lines if line.startswith("! ")]
    assert notes[0] == (
        "! ticketing (auth=exchange): tools unknown: needs a linked user (--as SUBJECT)"
    )
    assert notes[1] == "! down (auth=none): tools unknown: cannot reach down: ConnectError"
    assert len(notes) == 2


async def test_tools_as_a_linked_user_lists_the_exchange_server_with_their_token(
    env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    engine = create_engine(env["OPSBOT_DATABASE_URL"])
    try:
        async with open_identity_service(Settings(_env_file=None), engine) as service:  # type: ignore[call-arg]
            assert isinstance(service, LocalIdentityService)
            url = await service.link_url(ChatUser("slack", "T1", "U-carol"))
            async with httpx.AsyncClient(verify=shared_ssl_context()) as http:
                reply = await sign_in_at_login_page(http, url, "carol")
            await service.complete_link(reply["state"], reply["code"], iss=reply["iss"])
    finally:
        await engine.dispose()

    code, lines, err = await opsbot_tools("--as", "carol", env=env)
    assert code == 0, err
    listed = rows(lines)
    assert listed["ticketing_get_ticket"] == [
        "ticketing",
        "read",
        "yes",
        "classified read in the tool policy",
    ]
    assert listed["ticketing_update_ticket"][:3] == ["ticketing", "write", "yes"]
    assert listed["ticketing_close_ticket"] == [
        "ticketing",
        "write",
        "no",
        "unclassified: a write that needs approval; not on the allowlist: hidden from the model",
    ]
    assert "clock_lookup" in listed
    assert [line for line in lines if line.startswith("! ")] == [
        next(line for line in lines if line.startswith("! down "))
    ]

    code, lines, err = await opsbot_tools("--as", "nobody", env=env)
    assert code == 2
    assert "Traceback" not in err
    assert lines == ["--as nobody: 'nobody' has not connected their account"]
