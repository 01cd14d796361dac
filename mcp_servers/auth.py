"""Bearer-token verification for the reference MCP servers.

The MCP SDK does not check a token's audience, so this verifier does all of it: signature
against the IdP's JWKS (fetched over HTTP and cached, refetched once on an unknown ``kid``),
``iss``, **exact** ``aud`` (this server's canonical URI, and nothing else), ``exp``/``nbf``
against an injected clock, and a ``sub``. Scopes come from ``scope`` (RFC 9068, space-separated)
or ``scp``; teams from the ``groups`` claim (groups named ``team-<x>``); the acting client from
``act.sub`` (RFC 8693 delegation).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import httpx
import jwt
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.lowlevel.server import request_ctx
from starlette.requests import Request

from infra.json_input import parse_json
from infra.tls import shared_ssl_context
from mcp_servers.errors import JwksUnavailableError, TokenRejectedError, ToolRefusedError

logger = logging.getLogger(__name__)

Clock = Callable[[], datetime]

# The algorithms each asymmetric key type can verify. A key is used only with the algorithms
# of its own type (and only its JWK ``alg`` when the IdP names one): an ES256 header must never
# reach an RSA key, and symmetric ("oct") keys and ``none`` are never accepted.
_RSA_ALGORITHMS = frozenset({"RS256", "RS384", "RS512", "PS256", "PS384", "PS512"})
_EC_ALGORITHMS = {"P-256": "ES256", "P-384": "ES384", "P-521": "ES512"}
_OKP_CURVES = frozenset({"Ed25519", "Ed448"})
ASYMMETRIC_ALGORITHMS = _RSA_ALGORITHMS | frozenset(_EC_ALGORITHMS.values()) | {"EdDSA"}


def key_algorithms(jwk: Mapping[str, Any]) -> frozenset[str]:
    """The signature algorithms a JWK may verify; empty for keys this server never uses."""
    kty = jwk.get("kty")
    if kty == "RSA":
        family = _RSA_ALGORITHMS
    elif kty == "EC" and jwk.get("crv") in _EC_ALGORITHMS:
        family = frozenset({_EC_ALGORITHMS[str(jwk["crv"])]})
    elif kty == "OKP" and jwk.get("crv") in _OKP_CURVES:
        family = frozenset({"EdDSA"})
    else:
        return frozenset()  # symmetric, unknown or malformed: never a verification key here
    alg = jwk.get("alg")
    if alg is None:
        return family
    return family & {alg} if isinstance(alg, str) else frozenset()


@dataclass(frozen=True, slots=True)
class SigningKey:
    """One usable key of the IdP's JWKS and the algorithms it may verify."""

    key: jwt.PyJWK
    algorithms: frozenset[str]


def utc_now() -> datetime:
    return datetime.now(UTC)


class JwksClient:
    """Fetches and caches an IdP's signing keys; ``jwks_url`` or OIDC discovery from ``issuer``."""

    def __init__(
        self,
        *,
        issuer: str,
        jwks_url: str | None = None,
        cache_seconds: float = 300.0,
        min_refetch_seconds: float = 5.0,
        clock: Clock = utc_now,
        http: httpx.AsyncClient | None = None,
    ) -> None:
        self._issuer = issuer.rstrip("/")
        self._jwks_url = jwks_url
        self._cache_seconds = cache_seconds
        self._min_refetch_seconds = min_refetch_seconds
        self._clock = clock
        self._http = http
        self._keys: dict[str, SigningKey] = {}
        self._fetched_at: datetime | None = None
        self._lock = asyncio.Lock()

    async def get_key(self, kid: str | None) -> SigningKey:
        """The signing key for ``kid`` (the only key when ``kid`` is absent and there is one)."""
        if self._stale():
            await self._refresh(self._fetched_at)
        key = self._pick(kid)
        if key is None and self._may_refetch():
            await self._refresh(self._fetched_at)  # the IdP may have rotated its keys
            key = self._pick(kid)
        if key is None:
            raise TokenRejectedError("token signed with an unknown key")
        return key

    def _pick(self, kid: str | None) -> SigningKey | None:
        if kid is None:
            return next(iter(self._keys.values())) if len(self._keys) == 1 else None
        return self._keys.get(kid)

    def _age(self) -> float | None:
        if self._fetched_at is None:
            return None
        return (self._clock() - self._fetched_at).total_seconds()

    def _stale(self) -> bool:
        age = self._age()
        return age is None or age >= self._cache_seconds

    def _may_refetch(self) -> bool:
        age = self._age()
        return age is None or age >= self._min_refetch_seconds

    async def _refresh(self, seen: datetime | None) -> None:
        async with self._lock:
            if self._fetched_at != seen:
                return  # another request refreshed while this one waited
            try:
                async with self._client() as http:
                    url = self._jwks_url or await self._discover(http)
                    response = await http.get(url)
                    response.raise_for_status()
                    document = parse_json(response.content)
            except (httpx.HTTPError, ValueError) as exc:
                raise JwksUnavailableError(
                    f"could not fetch the signing keys of {self._issuer}: {type(exc).__name__}"
                ) from exc
            self._keys = _usable_keys(document)
            self._fetched_at = self._clock()

    async def _discover(self, http: httpx.AsyncClient) -> str:
        response = await http.get(f"{self._issuer}/.well-known/openid-configuration")
        response.raise_for_status()
        document = parse_json(response.content)
        url = document.get("jwks_uri") if isinstance(document, dict) else None
        if not isinstance(url, str):
            raise ValueError("OIDC discovery document has no jwks_uri")
        self._jwks_url = url
        return url

    @contextlib.asynccontextmanager
    async def _client(self) -> AsyncIterator[httpx.AsyncClient]:
        if self._http is not None:
            yield self._http
            return
        async with httpx.AsyncClient(timeout=5.0, verify=shared_ssl_context()) as http:
            yield http


def _usable_keys(document: object) -> dict[str, SigningKey]:
    """The JWKS's asymmetric signing keys by ``kid``; a key we cannot use never hides others."""
    raw_keys = document.get("keys") if isinstance(document, dict) else None
    keys: dict[str, SigningKey] = {}
    for raw in raw_keys if isinstance(raw_keys, list) else []:
        if not isinstance(raw, dict) or raw.get("use", "sig") != "sig":
            continue
        algorithms = key_algorithms(raw)
        if not algorithms:
            continue
        try:
            key = jwt.PyJWK(raw, algorithm=min(algorithms))
        except (jwt.PyJWTError, ValueError, TypeError, KeyError):
            continue  # a malformed key (bad modulus, missing coordinate)
        keys[str(raw.get("kid", ""))] = SigningKey(key, algorithms)
    return keys


@dataclass(frozen=True, slots=True)
class Caller:
    """Who is calling, from a verified token: the user (``sub``) and, if delegated, the actor."""

    subject: str
    actor: str | None
    client_id: str | None
    scopes: frozenset[str]
    groups: frozenset[str]

    @property
    def teams(self) -> frozenset[str]:
        return frozenset(g.removeprefix("team-") for g in self.groups if g.startswith("team-"))

    @classmethod
    def from_claims(cls, claims: Mapping[str, Any]) -> Caller:
        act = claims.get("act")
        actor = str(act["sub"]) if isinstance(act, dict) and "sub" in act else None
        groups = claims.get("groups") or []
        client_id = claims.get("client_id") or claims.get("azp")
        return cls(
            subject=str(claims["sub"]),
            actor=actor,
            client_id=str(client_id) if client_id else None,
            scopes=frozenset(scopes_of(claims)),
            groups=frozenset(str(g) for g in groups if isinstance(g, str)),
        )


def scopes_of(claims: Mapping[str, Any]) -> list[str]:
    raw = claims.get("scope", claims.get("scp", ""))
    if isinstance(raw, str):
        return raw.split()
    if isinstance(raw, list):
        return [str(s) for s in raw]
    return []


class JwtVerifier:
    """Verifies bearer JWTs for one resource server; implements the SDK's ``TokenVerifier``."""

    # The token the auth gate verified for the HTTP request being served, with its claims: the
    # SDK's bearer middleware asks ``verify_token`` about the same token right after, and a
    # second full check (base64 scan, signature) costs ~4 ms of CPU per request.
    _gate_verified: ContextVar[tuple[JwtVerifier, str, dict[str, Any]] | None] = ContextVar(
        "gate_verified", default=None
    )

    def __init__(
        self,
        *,
        issuer: str,
        audience: str,
        jwks: JwksClient,
        clock: Clock = utc_now,
        leeway_seconds: int = 0,
    ) -> None:
        self.issuer = issuer
        self.audience = audience
        self._jwks = jwks
        self._clock = clock
        self._leeway = leeway_seconds

    async def verify(self, token: str) -> dict[str, Any]:
        """The token's claims, or ``TokenRejectedError`` saying why it is not acceptable.

        Raises only ``TokenRejectedError`` or ``JwksUnavailableError``: anything unexpected
        while checking a token rejects it (fail closed) with one log line, never a 500.
        """
        try:
            return await self._verify(token)
        except (TokenRejectedError, JwksUnavailableError):
            raise
        except Exception as exc:
            logger.warning("token rejected: verification failed with %s", type(exc).__name__)
            raise TokenRejectedError("token is invalid") from exc

    async def _verify(self, token: str) -> dict[str, Any]:
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError as exc:
            raise TokenRejectedError("malformed token") from exc
        alg = header.get("alg")
        kid = header.get("kid")
        if not isinstance(alg, str) or alg not in ASYMMETRIC_ALGORITHMS:
            raise TokenRejectedError("token algorithm not accepted")  # none, HS*: no fetch
        if kid is not None and not isinstance(kid, str):
            raise TokenRejectedError("malformed token")
        # Refetches the JWKS once on an unknown kid, so a rotation to a new key (even of a new
        # type) is picked up; then only the algorithms of that key's type are accepted.
        signing = await self._jwks.get_key(kid)
        if alg not in signing.algorithms:
            raise TokenRejectedError("token algorithm not accepted for its key")
        try:
            claims: dict[str, Any] = jwt.decode(
                token,
                signing.key.key,
                algorithms=[alg],
                issuer=self.issuer,
                options={
                    "require": ["iss", "sub", "aud", "exp"],
                    "verify_aud": False,  # checked below: exactly one audience, ours
                    "verify_exp": False,  # checked below against the injected clock
                    "verify_nbf": False,
                    "verify_iat": False,
                    "verify_sub": False,  # checked below: a non-blank string
                },
            )
        except jwt.InvalidSignatureError as exc:
            raise TokenRejectedError("token signature is invalid") from exc
        except jwt.InvalidIssuerError as exc:
            raise TokenRejectedError("token was not issued by the trusted issuer") from exc
        except jwt.MissingRequiredClaimError as exc:
            raise TokenRejectedError(f"token lacks the {exc.claim!r} claim") from exc
        except jwt.PyJWTError as exc:
            raise TokenRejectedError("token is invalid") from exc
        self._check_subject(claims.get("sub"))
        self._check_audience(claims.get("aud"))
        self._check_times(claims)
        return claims

    @staticmethod
    def _check_subject(sub: object) -> None:
        # An empty or blank subject would make every such caller the same nobody.
        if not isinstance(sub, str) or not sub.strip() or sub != sub.strip():
            raise TokenRejectedError("token has no valid subject ('sub')")

    def _check_audience(self, aud: object) -> None:
        if isinstance(aud, list) and len(aud) == 1:
            aud = aud[0]
        if aud != self.audience:
            raise TokenRejectedError("token was not issued for this server (audience)")

    def _check_times(self, claims: Mapping[str, Any]) -> None:
        now = self._clock().timestamp()
        exp = claims.get("exp")
        if not isinstance(exp, int | float) or now >= exp + self._leeway:
            raise TokenRejectedError("token has expired")
        nbf = claims.get("nbf")
        if isinstance(nbf, int | float) and now < nbf - self._leeway:
            raise TokenRejectedError("token is not valid yet")

    @contextlib.contextmanager
    def verified(self, token: str, claims: dict[str, Any]) -> Iterator[None]:
        """While the gate serves a request whose ``token`` it verified into ``claims``."""
        reset = JwtVerifier._gate_verified.set((self, token, claims))
        try:
            yield
        finally:
            JwtVerifier._gate_verified.reset(reset)

    async def verify_token(self, token: str) -> AccessToken | None:
        """The SDK hook: ``None`` for any unacceptable token (the auth gate explains why)."""
        known = JwtVerifier._gate_verified.get()
        try:
            if known is not None and known[0] is self and known[1] == token:
                # The very token this verifier's gate just checked, in the same request: its
                # claims stand; only the clock may have moved.
                claims = known[2]
                self._check_times(claims)
            else:
                claims = await self.verify(token)
        except (TokenRejectedError, JwksUnavailableError):
            return None
        client_id = claims.get("client_id") or claims.get("azp") or claims["sub"]
        return AccessToken(
            token=token,
            client_id=str(client_id),
            scopes=scopes_of(claims),
            expires_at=int(claims["exp"]),
            resource=self.audience,
            subject=str(claims["sub"]),
            claims=claims,
        )


def _request_token() -> AccessToken | None:
    """The token of the HTTP request that carried the current MCP message.

    Why not only ``get_access_token()``: in a stateful session the SDK runs handlers in the
    session's task, whose context holds the token of the request that *opened* the session;
    a later request's (refreshed, possibly narrower) token would be ignored.
    """
    try:
        context = request_ctx.get()
    except LookupError:
        return get_access_token()
    request = context.request
    user = request.scope.get("user") if isinstance(request, Request) else None
    if isinstance(user, AuthenticatedUser):
        return user.access_token
    return None


def current_caller(required_scope: str) -> Caller:
    """The verified caller of the current tool call; refuses it without ``required_scope``.

    The HTTP gate already answered 403 for a missing tool scope; this is the second check.
    """
    token = _request_token()
    if token is None or token.claims is None:
        raise ToolRefusedError("not authenticated")
    caller = Caller.from_claims(token.claims)
    if required_scope not in caller.scopes:
        raise ToolRefusedError(f"insufficient_scope: this tool needs {required_scope!r}")
    return caller
