"""The JWT verifier and JWKS cache on their own: injected clock, key caching and rotation."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import httpx
import pytest

from mcp_servers import Caller, JwksClient, JwtVerifier, TokenRejectedError
from mcp_servers.errors import JwksUnavailableError
from testing.mcp import TestIssuer

AUD = "http://127.0.0.1:8101/mcp"


class Counting(httpx.AsyncClient):
    """An httpx client that counts the requests it sends."""

    def __init__(self) -> None:
        super().__init__()
        self.requests = 0

    async def send(self, request: httpx.Request, **kwargs: object) -> httpx.Response:  # type: ignore[override]
        self.requests += 1
        return await super().send(request, **kwargs)  # type: ignore[arg-type]


class ManualClock:
    def __init__(self) -> None:
        self.now = datetime.now(UTC)

    def __call__(self) -> datetime:
        return self.now


async def test_expiry_follows_the_injected_clock(mcp_test_issuer: TestIssuer) -> None:
    clock = ManualClock()
    jwks = JwksClient(issuer=mcp_test_issuer.issuer, jwks_url=mcp_test_issuer.jwks_url)
    verifier = JwtVerifier(issuer=mcp_test_issuer.issuer, audience=AUD, jwks=jwks, clock=clock)
    token = mcp_test_issuer.mint(sub="alice", aud=AUD, scope="tickets:read", expires_in=60)
    claims = await verifier.verify(token)
    assert claims["sub"] == "alice"
    clock.now += timedelta(seconds=61)
    with pytest.raises(TokenRejectedError, match="expired"):
        await verifier.verify(token)


async def test_jwks_is_cached_and_refetched_for_an_unknown_kid(mcp_test_issuer: TestIssuer) -> None:
    clock = ManualClock()
    http = Counting()
    jwks = JwksClient(
        issuer=mcp_test_issuer.issuer,
        jwks_url=mcp_test_issuer.jwks_url,
        clock=clock,
        http=http,
        min_refetch_seconds=5,
    )
    verifier = JwtVerifier(issuer=mcp_test_issuer.issuer, audience=AUD, jwks=jwks, clock=clock)
    token = mcp_test_issuer.mint(sub="alice", aud=AUD)
    for _ in range(5):
        await verifier.verify(token)
    assert http.requests == 1
    rotated = mcp_test_issuer.mint(sub="alice", aud=AUD)
    mcp_test_issuer.kid = "rotated"  # a kid the cache has not seen
    unknown = mcp_test_issuer.mint(sub="alice", aud=AUD)
    clock.now += timedelta(seconds=10)
    with pytest.raises(TokenRejectedError, match="unknown key"):
        await verifier.verify(unknown)
    assert http.requests == 2  # one refetch, then refused
    with pytest.raises(TokenRejectedError, match="unknown key"):
        await verifier.verify(unknown)
    assert http.requests == 2  # no refetch storm within min_refetch_seconds
    await verifier.verify(rotated)
    await http.aclose()


async def test_discovery_finds_the_jwks(mcp_test_issuer: TestIssuer) -> None:
    jwks = JwksClient(issuer=mcp_test_issuer.issuer)  # no jwks_url: OIDC discovery
    verifier = JwtVerifier(issuer=mcp_test_issuer.issuer, audience=AUD, jwks=jwks)
    claims = await verifier.verify(mcp_test_issuer.mint(sub="bob", aud=AUD))
    assert claims["sub"] == "bob"


async def test_unreachable_idp_is_reported_not_treated_as_valid() -> None:
    jwks = JwksClient(issuer="http://127.0.0.1:9", jwks_url="http://127.0.0.1:9/jwks")
    verifier = JwtVerifier(issuer="http://127.0.0.1:9", audience=AUD, jwks=jwks)
    import jwt as pyjwt
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    token = pyjwt.encode(
        {"sub": "x", "aud": AUD, "iss": "http://127.0.0.1:9", "exp": 2**40}, key, "RS256"
    )
    with pytest.raises(JwksUnavailableError):
        await verifier.verify(token)
    assert await verifier.verify_token(token) is None


async def test_hs256_and_none_algorithms_are_refused(mcp_test_issuer: TestIssuer) -> None:
    import jwt as pyjwt

    jwks = JwksClient(issuer=mcp_test_issuer.issuer, jwks_url=mcp_test_issuer.jwks_url)
    verifier = JwtVerifier(issuer=mcp_test_issuer.issuer, audience=AUD, jwks=jwks)
    claims = {"sub": "x", "aud": AUD, "iss": mcp_test_issuer.issuer, "exp": 2**40}
    for token in (
        pyjwt.encode(claims, "secret-secret-secret-secret-secret", "HS256"),
        pyjwt.encode(claims, None, "none"),
    ):
        with pytest.raises(TokenRejectedError, match="algorithm"):
            await verifier.verify(token)


def test_caller_reads_teams_actor_and_scopes() -> None:
    caller = Caller.from_claims(
        {
            "sub": "carol",
            "act": {"sub": "opsbot"},
            "scope": "tickets:read tickets:write",
            "groups": ["team-platform", "ticket-leads", "sre"],
        }
    )
    assert caller.subject == "carol"
    assert caller.actor == "opsbot"
    assert caller.teams == {"platform"}
    assert caller.scopes == {"tickets:read", "tickets:write"}


async def test_concurrent_first_requests_fetch_the_jwks_once(mcp_test_issuer: TestIssuer) -> None:
    import asyncio

    http = Counting()
    jwks = JwksClient(issuer=mcp_test_issuer.issuer, jwks_url=mcp_test_issuer.jwks_url, http=http)
    verifier = JwtVerifier(issuer=mcp_test_issuer.issuer, audience=AUD, jwks=jwks)
    token = mcp_test_issuer.mint(sub="alice", aud=AUD)
    await asyncio.gather(*(verifier.verify(token) for _ in range(20)))
    assert http.requests == 1
    await http.aclose()


async def test_the_sdk_check_reuses_the_gates_verification_of_the_same_token_only(
    mcp_test_issuer: TestIssuer, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = ManualClock()
    jwks = JwksClient(issuer=mcp_test_issuer.issuer, jwks_url=mcp_test_issuer.jwks_url)
    verifier = JwtVerifier(issuer=mcp_test_issuer.issuer, audience=AUD, jwks=jwks, clock=clock)
    other = JwtVerifier(issuer=mcp_test_issuer.issuer, audience=AUD, jwks=jwks, clock=clock)
    token = mcp_test_issuer.mint(sub="alice", aud=AUD, scope="tickets:read", expires_in=60)
    forged = token[:-4] + ("AAAA" if not token.endswith("AAAA") else "BBBB")
    claims = await verifier.verify(token)
    full: list[str] = []
    for checker in (verifier, other):
        real = checker.verify

        async def counted(t: str, real: object = real) -> dict[str, object]:
            full.append(t)
            return await real(t)  # type: ignore[operator,no-any-return]

        monkeypatch.setattr(checker, "verify", counted)
    with verifier.verified(token, claims):
        seen = await verifier.verify_token(token)
        assert seen is not None
        assert seen.subject == "alice"
        assert full == []  # the gate's check of this very token stands
        assert await verifier.verify_token(forged) is None  # any other token: checked in full
        assert await other.verify_token(token) is not None  # another server's verifier too
        assert full == [forged, token]
        clock.now += timedelta(seconds=61)
        assert await verifier.verify_token(token) is None  # still expires on time
    clock.now -= timedelta(seconds=61)
    assert await verifier.verify_token(token) is not None  # outside the request: in full
    assert full == [forged, token, token]
