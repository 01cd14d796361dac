"""Hostile and malformed bearer tokens, over real HTTP with the real MCP client (issue 20).

Each must get 401 ``invalid_token`` with the RFC 6750 ``WWW-Authenticate`` header, never a 500,
and the server keeps serving. Two issuers: the RSA-only test issuer (an RSA JWKS admits only the
RS/PS family), and a mixed issuer whose JWKS also holds an EC key, a symmetric key and a
malformed key (a key is used only with the algorithms of its own type).
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import ec
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from infra.serving import bind_socket, serve_asgi
from infra.tls import shared_ssl_context
from mcp_servers import ReferenceServers, start_reference_servers
from testing.mcp import MintToken, TestIssuer, _rsa_key, http_refusal, mcp_session

HMAC_SECRET = b"a-shared-secret-that-must-never-verify-a-token"


def _assert_invalid_token(response: httpx.Response) -> None:
    assert response.status_code == 401, (response.status_code, response.text)
    www = response.headers.get("www-authenticate", "")
    assert www.startswith('Bearer error="invalid_token", error_description="'), www
    assert "resource_metadata=" in www


def _no_tracebacks(caplog: pytest.LogCaptureFixture) -> None:
    # Ours and the ASGI server's (where a 500 is logged). The SDK logs a ClosedResourceError
    # traceback of its own when a valid client closes its session; that is not about tokens.
    tracebacks = [
        r
        for r in caplog.records
        if r.exc_info is not None and r.name.startswith(("mcp_servers", "uvicorn"))
    ]
    assert tracebacks == [], [r.getMessage() for r in tracebacks]


def _claims(issuer: str, aud: str, **overrides: Any) -> dict[str, Any]:
    now = int(time.time())
    claims: dict[str, Any] = {
        "iss": issuer,
        "sub": "alice",
        "aud": aud,
        "iat": now,
        "exp": now + 300,
        "scope": "tickets:read",
        "groups": ["team-payments"],
    }
    claims.update(overrides)
    return claims


# --- the RSA-only issuer (the shared fixtures) -------------------------------------------------


async def test_es256_token_naming_the_real_rsa_key_is_401(
    reference_servers: ReferenceServers,
    mcp_test_issuer: TestIssuer,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The case: an RSA-only JWKS, an ES256 header and the real key's kid gave a 500.
    aud = reference_servers.ticketing.audience
    ec_key = ec.generate_private_key(ec.SECP256R1())
    token = jwt.encode(
        _claims(mcp_test_issuer.issuer, aud),
        ec_key,
        algorithm="ES256",
        headers={"kid": mcp_test_issuer.kid},
    )
    caplog.set_level(logging.INFO, logger="mcp_servers")
    _assert_invalid_token(await http_refusal(reference_servers.ticketing, token))
    _no_tracebacks(caplog)
    ours = [r.getMessage() for r in caplog.records if r.name.startswith("mcp_servers")]
    assert ours == ["auth gate: refused a token: token algorithm not accepted for its key"]


@pytest.mark.parametrize("sub", ["", "   ", "\t", " alice", None, 42, ["alice"]])
async def test_empty_blank_missing_or_non_string_subject_is_401(
    reference_servers: ReferenceServers, mcp_token: MintToken, sub: object
) -> None:
    if sub is None:  # the same claims, re-signed without a subject
        token = _resign_without(mcp_token("alice", "ticketing"), "sub")
    else:
        token = mcp_token("alice", "ticketing", extra={"sub": sub})
    _assert_invalid_token(await http_refusal(reference_servers.ticketing, token))


def _resign_without(token: str, claim: str) -> str:
    claims = jwt.decode(token, options={"verify_signature": False})
    header = jwt.get_unverified_header(token)
    claims.pop(claim)
    return jwt.encode(claims, _rsa_key("issuer"), algorithm="RS256", headers={"kid": header["kid"]})


async def test_alg_none_and_hs256_with_the_public_key_are_401(
    reference_servers: ReferenceServers, mcp_test_issuer: TestIssuer
) -> None:
    aud = reference_servers.ticketing.audience
    claims = _claims(mcp_test_issuer.issuer, aud)
    unsigned = jwt.encode(claims, None, algorithm="none", headers={"kid": mcp_test_issuer.kid})
    # Key confusion: HMAC "signed" with the public key, as a verifier using the key for any alg
    # would accept. Built by hand: PyJWT refuses a PEM as an HMAC secret.
    pem = jwt.algorithms.RSAAlgorithm.to_jwk(mcp_test_issuer.key.public_key()).encode()
    confused = _hmac_token(claims, pem, mcp_test_issuer.kid)
    for token in (unsigned, confused):
        _assert_invalid_token(await http_refusal(reference_servers.ticketing, token))


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _hmac_token(claims: dict[str, Any], secret: bytes, kid: str) -> str:
    import hashlib
    import hmac

    header = _b64(json.dumps({"alg": "HS256", "typ": "JWT", "kid": kid}).encode())
    payload = _b64(json.dumps(claims).encode())
    signature = hmac.new(secret, f"{header}.{payload}".encode(), hashlib.sha256).digest()
    return f"{header}.{payload}.{_b64(signature)}"


@pytest.mark.parametrize(
    "header",
    [
        {"alg": "RS256", "kid": ["not", "a", "string"]},
        {"alg": "RS256", "kid": {"nested": 1}},
        {"alg": ["RS256"]},
        {"alg": "RS256", "kid": "no-such-key"},
    ],
)
async def test_malformed_or_unknown_kid_and_alg_headers_are_401(
    reference_servers: ReferenceServers, mcp_test_issuer: TestIssuer, header: dict[str, Any]
) -> None:
    claims = _claims(mcp_test_issuer.issuer, reference_servers.ticketing.audience)
    signing_input = f"{_b64(json.dumps(header).encode())}.{_b64(json.dumps(claims).encode())}"
    token = f"{signing_input}.{_b64(b'not-a-signature')}"
    _assert_invalid_token(await http_refusal(reference_servers.ticketing, token))


# --- a mixed JWKS: RSA, EC, symmetric and malformed keys ---------------------------------------


@dataclass
class MixedIssuer:
    issuer: str
    jwks_url: str
    rsa: Any
    ec: ec.EllipticCurvePrivateKey


@contextlib.asynccontextmanager
async def _mixed_issuer() -> AsyncIterator[MixedIssuer]:
    rsa_key = _rsa_key("mixed")
    ec_key = ec.generate_private_key(ec.SECP256R1())
    rsa_jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(rsa_key.public_key()))
    ec_jwk = json.loads(jwt.algorithms.ECAlgorithm.to_jwk(ec_key.public_key()))
    keys = [
        {**rsa_jwk, "kid": "rsa-1", "use": "sig"},
        {**ec_jwk, "kid": "ec-1", "use": "sig"},
        {"kty": "oct", "k": _b64(HMAC_SECRET), "kid": "hmac-1", "use": "sig"},
        {"kty": "RSA", "n": "AA", "e": "AQAB", "kid": "bad-1", "use": "sig"},  # malformed
        {**ec_jwk, "kid": "ec-as-rsa", "alg": "RS256"},  # alg contradicts the key type
    ]
    sock = bind_socket("127.0.0.1", 0)
    host, port = sock.getsockname()[:2]
    issuer = f"http://{host}:{port}"

    async def jwks(request: Request) -> JSONResponse:
        return JSONResponse({"keys": keys})

    async with serve_asgi(Starlette(routes=[Route("/jwks", jwks)]), sock):
        yield MixedIssuer(issuer, f"{issuer}/jwks", rsa_key, ec_key)


@pytest.fixture
async def mixed() -> AsyncIterator[tuple[MixedIssuer, ReferenceServers]]:
    async with (
        _mixed_issuer() as issuer,
        start_reference_servers(issuer=issuer.issuer, jwks_url=issuer.jwks_url) as servers,
    ):
        yield issuer, servers


async def test_mixed_jwks_each_key_verifies_only_its_own_algorithms(
    mixed: tuple[MixedIssuer, ReferenceServers], caplog: pytest.LogCaptureFixture
) -> None:
    issuer, servers = mixed
    server = servers.ticketing
    claims = _claims(issuer.issuer, server.audience)
    # Both real keys work with their own algorithm (so the refusals below are about the alg).
    for key, alg, kid in ((issuer.rsa, "RS256", "rsa-1"), (issuer.ec, "ES256", "ec-1")):
        good = jwt.encode(claims, key, algorithm=alg, headers={"kid": kid})
        async with mcp_session(server, good) as session:
            assert not (await session.call_tool("get_ticket", {"key": "PAY-101"})).isError
    refused = {
        "ES256 naming the RSA key": jwt.encode(
            claims, issuer.ec, algorithm="ES256", headers={"kid": "rsa-1"}
        ),
        "RS256 naming the EC key": jwt.encode(
            claims, issuer.rsa, algorithm="RS256", headers={"kid": "ec-1"}
        ),
        "PS256 naming the EC key": jwt.encode(
            claims, issuer.rsa, algorithm="PS256", headers={"kid": "ec-1"}
        ),
        "HS256 with the symmetric key": _hmac_token(claims, HMAC_SECRET, "hmac-1"),
        "RS256 naming the malformed key": jwt.encode(
            claims, issuer.rsa, algorithm="RS256", headers={"kid": "bad-1"}
        ),
        "ES256 naming a key whose alg says RS256": jwt.encode(
            claims, issuer.ec, algorithm="ES256", headers={"kid": "ec-as-rsa"}
        ),
        "ES384 (no P-384 key)": jwt.encode(
            claims,
            ec.generate_private_key(ec.SECP384R1()),
            algorithm="ES384",
            headers={"kid": "ec-1"},
        ),
        "no kid with several keys": jwt.encode(claims, issuer.rsa, algorithm="RS256"),
    }
    for case, token in refused.items():
        response = await http_refusal(server, token)
        assert response.status_code == 401, case
        _assert_invalid_token(response)
    _no_tracebacks(caplog)
    # Still serving after all of that.
    good = jwt.encode(claims, issuer.rsa, algorithm="RS256", headers={"kid": "rsa-1"})
    async with mcp_session(server, good) as session:
        assert not (await session.call_tool("get_ticket", {"key": "PAY-101"})).isError


async def test_hostile_tokens_never_get_5xx_over_raw_http(
    mixed: tuple[MixedIssuer, ReferenceServers],
) -> None:
    issuer, servers = mixed
    claims = _claims(issuer.issuer, servers.ticketing.audience)
    body = _b64(json.dumps(claims).encode())
    headers_to_try: list[object] = [
        {"alg": "ES256", "kid": "rsa-1"},
        {"alg": "RS256", "kid": "ec-1"},
        {"alg": "EdDSA", "kid": "ec-1"},
        {"alg": "none"},
        {"alg": None},
        {"alg": "RS256", "kid": None},
        {"alg": "RS256", "kid": 7},
        {"alg": "RS256", "crit": ["x"], "kid": "rsa-1"},
        [],
        "header",
    ]
    tokens = [f"{_b64(json.dumps(h).encode())}.{body}.{_b64(b'sig')}" for h in headers_to_try] + [
        "a.b.c",
        "....",
        "x" * 5000,
        f"{_b64(b'{')}.{body}.x",
    ]
    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "t", "version": "0"},
        },
    }
    async with httpx.AsyncClient(verify=shared_ssl_context()) as http:
        for token in tokens:
            response = await http.post(
                servers.ticketing.url,
                json=initialize,
                headers={
                    "Authorization": f"Bearer {token}",
                    "Accept": "application/json, text/event-stream",
                },
            )
            assert response.status_code == 401, (token[:80], response.status_code)
            assert 'error="invalid_token"' in response.headers["www-authenticate"]


def test_logging_of_rejections_is_one_line(caplog: pytest.LogCaptureFixture) -> None:
    """The verifier's last-resort branch logs a warning without a traceback."""
    import asyncio

    from mcp_servers import JwtVerifier, TokenRejectedError
    from mcp_servers.auth import JwksClient, SigningKey

    class Broken(JwksClient):
        async def get_key(self, kid: str | None) -> SigningKey:
            raise RuntimeError("boom")

    verifier = JwtVerifier(
        issuer="http://x", audience="http://x/mcp", jwks=Broken(issuer="http://x")
    )
    token = jwt.encode({"sub": "a"}, _rsa_key("issuer"), algorithm="RS256")
    caplog.set_level(logging.WARNING)
    with pytest.raises(TokenRejectedError):
        asyncio.run(verifier.verify(token))
    assert [r.levelno for r in caplog.records] == [logging.WARNING]
    assert caplog.records[0].exc_info is None


async def test_rotation_to_a_key_of_a_new_type_is_picked_up() -> None:
    """An RSA-only JWKS refuses ES256; once the IdP publishes an EC key, its tokens verify."""
    from mcp_servers import JwtVerifier, TokenRejectedError
    from mcp_servers.auth import JwksClient

    rsa_key = _rsa_key("mixed")
    ec_key = ec.generate_private_key(ec.SECP256R1())
    keys = [{**json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(rsa_key.public_key())), "kid": "r"}]
    sock = bind_socket("127.0.0.1", 0)
    host, port = sock.getsockname()[:2]
    issuer = f"http://{host}:{port}"

    async def jwks(request: Request) -> JSONResponse:
        return JSONResponse({"keys": keys})

    async with serve_asgi(Starlette(routes=[Route("/jwks", jwks)]), sock):
        client = JwksClient(issuer=issuer, jwks_url=f"{issuer}/jwks", min_refetch_seconds=0)
        verifier = JwtVerifier(issuer=issuer, audience="http://a/mcp", jwks=client)
        claims = _claims(issuer, "http://a/mcp")
        es256 = jwt.encode(claims, ec_key, algorithm="ES256", headers={"kid": "e"})
        with pytest.raises(TokenRejectedError, match="unknown key"):
            await verifier.verify(es256)
        keys.append(
            {**json.loads(jwt.algorithms.ECAlgorithm.to_jwk(ec_key.public_key())), "kid": "e"}
        )
        assert (await verifier.verify(es256))["sub"] == "alice"
        wrong = jwt.encode(claims, ec_key, algorithm="ES256", headers={"kid": "r"})
        with pytest.raises(TokenRejectedError, match="not accepted for its key"):
            await verifier.verify(wrong)
