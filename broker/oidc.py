"""OIDC discovery, JWKS and JWT validation against any compliant issuer.

Example::

    provider = OidcProvider("http://127.0.0.1:8100", http)
    claims = await provider.verify(token, audience="http://127.0.0.1:8101/mcp")

``verify`` checks the signature (keys from the issuer's JWKS, refetched once for an unknown
``kid``), ``iss``, an ``aud`` naming exactly the expected audience, and ``exp``/``nbf`` against
the injected clock. Failures raise ``TokenVerificationError``; an unreachable issuer raises
``BrokerUnavailableError``.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import httpx
import jwt

from broker.errors import BrokerUnavailableError, TokenVerificationError
from broker.http import request
from infra.clock import Clock, utc_now
from infra.json_input import parse_json

_ALGORITHMS = ["RS256", "RS384", "RS512", "PS256", "ES256", "ES384", "EdDSA"]


@dataclass(frozen=True, slots=True)
class ProviderMetadata:
    issuer: str
    token_endpoint: str
    jwks_uri: str
    authorization_endpoint: str | None = None
    revocation_endpoint: str | None = None
    userinfo_endpoint: str | None = None
    # RFC 9207: the provider names itself (`iss`) in every authorization response.
    iss_parameter_supported: bool = False


class OidcProvider:
    """One issuer's metadata and signing keys, fetched lazily over HTTP and cached."""

    def __init__(
        self,
        issuer: str,
        http: httpx.AsyncClient,
        *,
        token_url: str | None = None,
        jwks_url: str | None = None,
        clock: Clock = utc_now,
        leeway: timedelta = timedelta(seconds=0),
    ) -> None:
        self.issuer = issuer.rstrip("/")
        self._http = http
        self._token_url = token_url
        self._jwks_url = jwks_url
        self._clock = clock
        self._leeway = leeway
        self._metadata: ProviderMetadata | None = None
        self._keys: dict[str, jwt.PyJWK] = {}
        self._metadata_lock = asyncio.Lock()
        self._keys_lock = asyncio.Lock()

    async def _get_json(self, url: str, what: str) -> dict[str, Any]:
        response = await request(self._http, "GET", url, "identity provider", what)
        if response.status_code != 200:
            raise BrokerUnavailableError(
                f"identity provider answered {response.status_code} for {what}"
            )
        try:
            data = parse_json(response.content)
        except ValueError as exc:
            raise BrokerUnavailableError(f"identity provider sent invalid JSON for {what}") from exc
        if not isinstance(data, dict):
            raise BrokerUnavailableError(f"identity provider sent invalid {what}")
        return data

    async def metadata(self) -> ProviderMetadata:
        """The issuer's OIDC discovery document (configured URLs take precedence)."""
        if self._metadata is not None:
            return self._metadata
        async with self._metadata_lock:
            if self._metadata is None:
                doc = await self._get_json(
                    f"{self.issuer}/.well-known/openid-configuration", "discovery"
                )
                if str(doc.get("issuer", "")).rstrip("/") != self.issuer:
                    raise BrokerUnavailableError("discovery document names a different issuer")
                token = self._token_url or doc.get("token_endpoint")
                jwks = self._jwks_url or doc.get("jwks_uri")
                if not isinstance(token, str) or not isinstance(jwks, str):
                    raise BrokerUnavailableError("discovery lacks token_endpoint or jwks_uri")
                self._metadata = ProviderMetadata(
                    issuer=self.issuer,
                    token_endpoint=token,
                    jwks_uri=jwks,
                    authorization_endpoint=_url(doc, "authorization_endpoint"),
                    revocation_endpoint=_url(doc, "revocation_endpoint"),
                    userinfo_endpoint=_url(doc, "userinfo_endpoint"),
                    iss_parameter_supported=(
                        doc.get("authorization_response_iss_parameter_supported") is True
                    ),
                )
        return self._metadata

    async def userinfo(self, access_token: str) -> dict[str, Any]:
        """The userinfo endpoint's claims for ``access_token`` (JSON responses only).

        Raises ``TokenVerificationError`` when the provider has no userinfo endpoint or
        refuses the token, ``BrokerUnavailableError`` when it cannot be reached.
        """
        meta = await self.metadata()
        if meta.userinfo_endpoint is None:
            raise TokenVerificationError("the identity provider has no userinfo endpoint")
        response = await request(
            self._http,
            "GET",
            meta.userinfo_endpoint,
            "identity provider",
            "userinfo",
            headers={"Authorization": f"Bearer {access_token}", "Accept": "application/json"},
        )
        if response.status_code >= 500:
            raise BrokerUnavailableError(f"userinfo endpoint answered {response.status_code}")
        if response.status_code != 200:
            raise TokenVerificationError(f"userinfo endpoint answered {response.status_code}")
        try:
            data = parse_json(response.content)
        except ValueError as exc:  # a signed (JWT) userinfo response is not supported
            raise TokenVerificationError("userinfo endpoint sent no JSON object") from exc
        if not isinstance(data, dict) or not isinstance(data.get("sub"), str):
            raise TokenVerificationError("userinfo response names no subject")
        return data

    async def _load_keys(self) -> None:
        meta = await self.metadata()
        doc = await self._get_json(meta.jwks_uri, "JWKS")
        try:
            keyset = jwt.PyJWKSet.from_dict(doc)
        except jwt.PyJWKSetError as exc:
            raise BrokerUnavailableError("identity provider sent an unusable JWKS") from exc
        self._keys = {k.key_id: k for k in keyset.keys if k.key_id}

    async def _key(self, kid: str) -> jwt.PyJWK:
        if kid not in self._keys:
            async with self._keys_lock:
                if kid not in self._keys:
                    await self._load_keys()  # keys may have rotated
        key = self._keys.get(kid)
        if key is None:
            raise TokenVerificationError("token signed with an unknown key")
        return key

    async def verify(
        self, token: str, *, audience: str, required: tuple[str, ...] = ()
    ) -> dict[str, Any]:
        """The token's claims, if it is valid for exactly ``audience`` right now."""
        try:
            header = jwt.get_unverified_header(token)
        except jwt.InvalidTokenError as exc:
            raise TokenVerificationError("token is not a well-formed JWT") from exc
        kid = header.get("kid")
        if not isinstance(kid, str) or header.get("alg") not in _ALGORITHMS:
            raise TokenVerificationError("token header lacks a kid or uses a refused algorithm")
        key = await self._key(kid)
        try:
            claims: dict[str, Any] = jwt.decode(
                token,
                key,
                algorithms=[str(header["alg"])],
                issuer=self.issuer,
                # Audience and time are checked below: exact audience, injected clock.
                options={
                    "verify_aud": False,
                    "verify_exp": False,
                    "verify_nbf": False,
                    "verify_iat": False,
                    "require": ["iss", "sub", "aud", "exp", *required],
                },
            )
        except jwt.InvalidTokenError as exc:
            raise TokenVerificationError(f"token rejected: {type(exc).__name__}") from exc
        aud = claims["aud"]
        auds = [aud] if isinstance(aud, str) else aud
        if auds != [audience]:
            raise TokenVerificationError(f"token audience is not exactly {audience!r}")
        now = self._clock().timestamp()
        leeway = self._leeway.total_seconds()
        if not isinstance(claims["exp"], int | float) or claims["exp"] <= now - leeway:
            raise TokenVerificationError("token has expired")
        nbf = claims.get("nbf")
        if isinstance(nbf, int | float) and nbf > now + leeway:
            raise TokenVerificationError("token is not valid yet")
        return claims


def _url(doc: dict[str, Any], name: str) -> str | None:
    value = doc.get(name)
    return value if isinstance(value, str) and value else None
