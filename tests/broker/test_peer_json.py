"""What opsbot's HTTP peers answer is untrusted JSON too: an IdP, a broker service, an MCP
server's authorization server or a JWKS endpoint that sends JSON nested past Python's stack
(a RecursionError, past every ``except ValueError``) or a document of the wrong type is the
peer's failure, reported as such; it escaped as an unexpected exception."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import pytest

from broker.errors import BrokerError
from broker.exchange import ClientCredentials, TokenEndpointClient, TokenEndpointError
from broker.mcp_oauth import discover
from broker.oidc import OidcProvider
from broker.remote import RemoteBroker
from broker.types import Identity
from mcp_servers.auth import JwksClient
from mcp_servers.errors import JwksUnavailableError

ISSUER = "https://idp.example"
ANSWERS = {"nested 100,000 deep": b"[" * 100_000, "a list": b"[1, 2]", "not JSON": b"<html>"}


def _peer(answer: bytes, *, discovery: bool = False) -> httpx.AsyncClient:
    """Answers ``answer`` to everything (but OIDC discovery, when ``discovery``)."""

    def respond(request: httpx.Request) -> httpx.Response:
        if discovery and request.url.path.endswith("openid-configuration"):
            return httpx.Response(200, json=_metadata())
        return httpx.Response(200, content=answer, headers={"Content-Type": "application/json"})

    return httpx.AsyncClient(transport=httpx.MockTransport(respond))


def _metadata() -> dict[str, Any]:
    return {
        "issuer": ISSUER,
        "token_endpoint": f"{ISSUER}/token",
        "jwks_uri": f"{ISSUER}/jwks",
        "authorization_endpoint": f"{ISSUER}/authorize",
    }


async def _idp_metadata(answer: bytes) -> object:
    async with _peer(answer) as http:
        return await OidcProvider(ISSUER, http).metadata()


async def _token_endpoint(answer: bytes) -> object:
    async with _peer(answer, discovery=True) as http:
        client = TokenEndpointClient(
            OidcProvider(ISSUER, http), http, ClientCredentials("opsbot", "secret")
        )
        return await client.refresh("a-refresh-token")


async def _broker_service(answer: bytes) -> object:
    async with _peer(answer) as http:
        broker = RemoteBroker("https://broker.example", "secret", http)
        return await broker.get_token(Identity("alice", None, "alice@example.com"), "docs")


async def _mcp_authorization_server(answer: bytes) -> object:
    async with _peer(answer) as http:
        return await discover("https://mcp.example/mcp", http)


async def _jwks(answer: bytes) -> object:
    async with _peer(answer) as http:
        return await JwksClient(issuer=ISSUER, http=http).get_key("k1")


Peer = Callable[[bytes], Awaitable[object]]
PEERS: dict[str, tuple[Peer, tuple[type[Exception], ...]]] = {
    "the IdP's metadata": (_idp_metadata, (BrokerError,)),
    "the IdP's token endpoint": (_token_endpoint, (TokenEndpointError,)),
    "the broker service": (_broker_service, (BrokerError,)),
    "an MCP server's authorization server": (_mcp_authorization_server, (BrokerError,)),
    "a JWKS endpoint": (_jwks, (JwksUnavailableError,)),
}


@pytest.mark.parametrize("answer", list(ANSWERS))
@pytest.mark.parametrize("peer", list(PEERS))
async def test_a_peer_answering_bad_json_is_the_peers_failure(peer: str, answer: str) -> None:
    call, failure = PEERS[peer]
    with pytest.raises(failure):
        await call(ANSWERS[answer])
