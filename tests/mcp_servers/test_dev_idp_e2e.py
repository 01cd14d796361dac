"""End to end: a user logs in at the dev IdP, the real broker exchanges (RFC 8693) their token
for each server, and the servers — trusting the dev IdP's JWKS — accept it and authorise."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from mcp_servers import ReferenceServers
from testing.identity import BrokerHarness, RunningIdp, open_broker
from testing.mcp import http_refusal, mcp_session
from tests.mcp_servers.test_ticketing import NEW, data


@pytest.fixture
def mcp_trusted_issuer(dev_idp: RunningIdp) -> tuple[str, str | None]:
    return dev_idp.issuer, None  # keys found by OIDC discovery, as in production


@pytest.fixture
async def broker_for_servers(
    dev_idp: RunningIdp, reference_servers: ReferenceServers
) -> AsyncIterator[BrokerHarness]:
    audiences = {server.name: server.audience for server in reference_servers}
    for name, audience in audiences.items():
        dev_idp.provider.set_audience(name, audience)
    async with open_broker(dev_idp, servers=audiences) as harness:
        yield harness


async def test_exchanged_tokens_are_accepted_and_authorised(
    reference_servers: ReferenceServers, broker_for_servers: BrokerHarness
) -> None:
    bob_ticketing = await broker_for_servers.token("bob", "ticketing")
    async with mcp_session(reference_servers.ticketing, bob_ticketing) as s:
        found = data(await s.call_tool("search_tickets", {"limit": 100}))
        assert {t["project"] for t in found["tickets"]} == {"PAY"}
        created = data(
            await s.call_tool("create_ticket", {**NEW, "idempotency_key": "e2e-dev-idp-1"})
        )
    change = (await reference_servers.tickets.all_changes())[0]
    assert (change.subject, change.actor, change.ticket_key) == ("bob", "opsbot", created["key"])

    docs_token = await broker_for_servers.token("bob", "docs")
    async with mcp_session(reference_servers.docs, docs_token) as s:
        assert data(await s.call_tool("get_doc", {"doc_id": "payments-refund-stuck"}))
    db_token = await broker_for_servers.token("carol", "database")
    async with mcp_session(reference_servers.database, db_token) as s:
        jobs = data(await s.call_tool("list_failed_jobs", {"since_hours": 24 * 7}))["jobs"]
        assert {j["team"] for j in jobs} == {"platform"}

    # An exchanged ticketing token is refused by the other servers (audience).
    for server in (reference_servers.docs, reference_servers.database):
        assert (await http_refusal(server, bob_ticketing)).status_code == 401


async def test_exchanged_read_only_token_cannot_write(
    reference_servers: ReferenceServers, broker_for_servers: BrokerHarness
) -> None:
    erin = await broker_for_servers.token("erin", "ticketing")  # contractors: tickets:read
    response = await http_refusal(
        reference_servers.ticketing,
        erin,
        "close_ticket",
        {"key": "PAY-101", "resolution": "nope", "idempotency_key": "erin-close-1"},
    )
    assert response.status_code == 403
    assert 'scope="tickets:write"' in response.headers["www-authenticate"]
