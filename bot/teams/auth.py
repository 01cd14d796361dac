"""Inbound authentication of ``POST /api/messages``: is this really the Bot Connector, for us?

Microsoft's rules (Bot Framework "authentication" docs), all enforced here and none of them
switchable off: a ``Bearer`` JWT signed **RS256** by a key from the configured OpenID
metadata's JWKS (cached; fetched again when a token names an unknown ``kid``), ``iss`` in the
allowed list, ``aud`` exactly the bot's app id, ``exp``/``nbf`` with at most 5 minutes of
leeway, the ``serviceurl`` claim equal to the activity's ``serviceUrl``, and the key endorsed
for the activity's channel when the JWKS lists endorsements. opsbot adds the tenant
allowlist: the activity's tenant must be the bot's own or an allowed one.

The Agents SDK's own validator hard-codes the JWKS URL, checks issuers only on request and
compares ``serviceurl`` by host only when a host validator is on, so opsbot owns this step
and hands the SDK a ``ClaimsIdentity`` built from the verified claims.

Example::

    verifier = ConnectorAuth(AuthConfig(app_id, metadata_url, issuers, tenants), session)
    claims = await verifier.verify(request.headers.get("Authorization"), activity)
    # raises Rejected(reason) for anything else
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import jwt
from jwt import PyJWK, PyJWKSet

log = logging.getLogger(__name__)

ALGORITHM = "RS256"
MAX_LEEWAY_SECONDS = 300
# A token naming a kid we do not know makes us fetch the keys again, but not more often than
# this: forged tokens must not turn opsbot into a JWKS request amplifier.
MIN_REFETCH_SECONDS = 30.0
KEYS_MAX_AGE_SECONDS = 24 * 3600.0
# Carries the signing key's endorsements from verify_token to check_activity (removed there).
_ENDORSEMENTS = "_opsbot_key_endorsements"
# Verified tokens remembered (``_Verified``): the Connector sends one token with every
# activity for the token's lifetime, so a handful covers it; a bound keeps memory flat.
VERIFIED_TOKENS = 64


class Rejected(Exception):
    """The request is not authentic; ``reason`` is for the log (never for the caller)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class AuthConfig:
    app_id: str
    openid_metadata_url: str
    issuers: frozenset[str]
    tenant_ids: frozenset[str]
    leeway_seconds: int = MAX_LEEWAY_SECONDS
    service_url_prefixes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.app_id:
            raise ValueError("the bot's app id is required")
        if not self.issuers:
            raise ValueError("at least one issuer is required")
        if not 0 <= self.leeway_seconds <= MAX_LEEWAY_SECONDS:
            raise ValueError("clock leeway must be between 0 and 300 seconds")


@dataclass
class _Keys:
    by_kid: dict[str, PyJWK] = field(default_factory=dict)
    endorsements: dict[str, frozenset[str] | None] = field(default_factory=dict)
    fetched_at: float = 0.0


@dataclass(frozen=True, slots=True)
class _Verified:
    """A token that passed every check of ``verify_token``, by its exact string.

    Why: the Bot Connector reuses a token for its lifetime (about an hour), and verifying it
    again (RS256, and PyJWT's parsing of each segment, twice) was most of a Teams ack's CPU.
    The signature, issuer and audience are facts about the token's bytes and this verifier's
    fixed config; what can change is checked on every use: the lifetime (``exp``/``nbf``
    with the leeway, as PyJWT checks them), and that the signing key is still the one in
    the key set (a key dropped from the JWKS, or a set older than KEYS_MAX_AGE_SECONDS,
    sends the token through the full verification again)."""

    claims: Mapping[str, Any]
    key: PyJWK
    endorsements: frozenset[str] | None

    def usable(self, keys: _Keys, kid: str, now: float, monotonic: float, leeway: int) -> bool:
        exp, nbf = self.claims.get("exp"), self.claims.get("nbf")
        if not isinstance(exp, int | float) or not isinstance(nbf, int | float):
            return False
        return (
            exp > now - leeway
            and nbf <= now + leeway
            and keys.by_kid.get(kid) is self.key
            and monotonic - keys.fetched_at <= KEYS_MAX_AGE_SECONDS
        )


class ConnectorAuth:
    """Verifies the Bot Connector's tokens. One per process; keys are shared by requests."""

    def __init__(
        self,
        config: AuthConfig,
        session: aiohttp.ClientSession,
        *,
        monotonic: Any = time.monotonic,
    ) -> None:
        self.config = config
        self._session = session
        self._monotonic = monotonic
        self._keys = _Keys()
        self._lock = asyncio.Lock()
        self._verified: dict[str, tuple[str, _Verified]] = {}  # token -> (kid, verified)

    async def verify(
        self, authorization: str | None, activity: Mapping[str, Any]
    ) -> dict[str, Any]:
        """The verified claims, or ``Rejected``."""
        claims = await self.verify_token(authorization)
        self.check_activity(claims, activity)
        return claims

    async def verify_token(self, authorization: str | None) -> dict[str, Any]:
        """The token's claims once its signature, algorithm, issuer, audience and lifetime are
        verified; ``check_activity`` then binds them to the activity."""
        scheme, _, token = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise Rejected("no Bearer token")
        token = token.strip()
        if not token.isascii():  # a JWT is ASCII; PyJWT fails on a raw byte with a TypeError
            raise Rejected("malformed token: not ASCII")
        known = self._verified.get(token)
        if known is not None:
            known_kid, verified = known
            if verified.usable(
                # The wall clock, as PyJWT's own exp/nbf checks use it.
                self._keys,
                known_kid,
                time.time(),
                self._monotonic(),
                self.config.leeway_seconds,
            ):
                again = dict(verified.claims)
                again[_ENDORSEMENTS] = _listed(verified.endorsements)
                return again
            del self._verified[token]  # verified again below, and refused if it must be
        try:
            header = jwt.get_unverified_header(token)
        except jwt.InvalidTokenError as exc:
            raise Rejected(f"malformed token: {type(exc).__name__}") from None
        if header.get("alg") != ALGORITHM:
            raise Rejected(f"algorithm {str(header.get('alg'))[:16]!r} is not RS256")
        kid = header.get("kid")
        if not isinstance(kid, str) or not kid:
            raise Rejected("token names no key (kid)")
        key, endorsements = await self._key(kid)
        config = self.config
        try:
            claims: dict[str, Any] = jwt.decode(
                token,
                key,
                algorithms=[ALGORITHM],
                audience=config.app_id,
                issuer=sorted(config.issuers),
                leeway=config.leeway_seconds,
                options={"require": ["exp", "nbf", "iss", "aud"]},
            )
        except jwt.InvalidTokenError as exc:
            raise Rejected(f"token refused: {type(exc).__name__}: {exc}") from None
        if claims.get("aud") != config.app_id:  # pyjwt accepts a list containing it
            raise Rejected("audience is not exactly the bot's app id")
        self._remember(token, kid, claims, key, endorsements)
        claims[_ENDORSEMENTS] = _listed(endorsements)
        return claims

    def _remember(
        self,
        token: str,
        kid: str,
        claims: dict[str, Any],
        key: PyJWK,
        endorsements: frozenset[str] | None,
    ) -> None:
        if len(self._verified) >= VERIFIED_TOKENS:
            del self._verified[next(iter(self._verified))]  # the oldest
        self._verified[token] = (
            kid,
            _Verified(dict(claims), key, endorsements),
        )

    def check_activity(self, claims: dict[str, Any], activity: Mapping[str, Any]) -> None:
        """The activity is the one the token was issued for: same ``serviceUrl``, a channel the
        key is endorsed for, a served tenant."""
        listed = claims.pop(_ENDORSEMENTS, None)
        endorsements = frozenset(listed) if isinstance(listed, list) else None
        service_url = activity.get("serviceUrl")
        claimed = claims.get("serviceurl")
        if not isinstance(service_url, str) or not service_url:
            raise Rejected("activity has no serviceUrl")
        if not isinstance(claimed, str) or _normal(claimed) != _normal(service_url):
            raise Rejected("serviceurl claim does not match the activity's serviceUrl")
        prefixes = self.config.service_url_prefixes
        if prefixes and not service_url.startswith(prefixes):
            raise Rejected("serviceUrl is not an allowed Bot Connector endpoint")
        channel = activity.get("channelId")
        if not isinstance(channel, str) or not channel:
            raise Rejected("activity has no channelId")
        if endorsements is not None and channel not in endorsements:
            raise Rejected(f"key is not endorsed for channel {str(channel)[:32]!r}")
        tenant = activity_tenant(activity)
        if tenant is None:
            raise Rejected("activity names no tenant")
        if tenant not in self.config.tenant_ids:
            raise Rejected(f"tenant {tenant[:64]} is not served")

    async def _key(self, kid: str) -> tuple[PyJWK, frozenset[str] | None]:
        now = self._monotonic()
        keys = self._keys
        stale = now - keys.fetched_at > KEYS_MAX_AGE_SECONDS
        if kid not in keys.by_kid or stale:
            async with self._lock:
                keys = self._keys
                may_refetch = now - keys.fetched_at >= MIN_REFETCH_SECONDS
                if (kid not in keys.by_kid and may_refetch) or stale:
                    await self._refresh()
        keys = self._keys
        if kid not in keys.by_kid:
            raise Rejected("token signed by an unknown key")
        return keys.by_kid[kid], keys.endorsements[kid]

    async def _refresh(self) -> None:
        try:
            metadata = await self._get_json(self.config.openid_metadata_url)
            jwks_uri = metadata.get("jwks_uri")
            if not isinstance(jwks_uri, str):
                raise ValueError("OpenID metadata has no jwks_uri")
            data = await self._get_json(jwks_uri)
            key_set = PyJWKSet.from_dict(data)
        except (aiohttp.ClientError, TimeoutError, ValueError, jwt.PyJWKSetError) as exc:
            # Keep the keys we had: an outage of Microsoft's key endpoint must not lock out
            # tokens signed by keys already known.
            log.warning("could not fetch the Bot Connector's signing keys: %s", exc)
            self._keys.fetched_at = self._monotonic()
            return
        keys = _Keys(fetched_at=self._monotonic())
        raw = {str(k.get("kid")): k for k in data.get("keys", []) if isinstance(k, dict)}
        for key in key_set.keys:
            if key.key_id is None:
                continue
            keys.by_kid[key.key_id] = key
            listed = raw.get(key.key_id, {}).get("endorsements")
            keys.endorsements[key.key_id] = (
                frozenset(str(e) for e in listed) if isinstance(listed, list) else None
            )
        self._keys = keys

    async def _get_json(self, url: str) -> dict[str, Any]:
        async with self._session.get(url, timeout=aiohttp.ClientTimeout(total=10)) as response:
            if response.status != 200:
                raise ValueError(f"{url} answered {response.status}")
            data = await response.json(content_type=None)
        if not isinstance(data, dict):
            raise ValueError(f"{url} did not answer a JSON object")
        return data


def activity_tenant(activity: Mapping[str, Any]) -> str | None:
    """The activity's tenant: ``channelData.tenant.id`` and ``conversation.tenantId`` must agree
    when both are present; ``None`` if neither is, or they differ."""
    channel_data = activity.get("channelData")
    conversation = activity.get("conversation")
    from_data = None
    if isinstance(channel_data, Mapping) and isinstance(channel_data.get("tenant"), Mapping):
        from_data = channel_data["tenant"].get("id")
    from_conversation = conversation.get("tenantId") if isinstance(conversation, Mapping) else None
    named = {t for t in (from_data, from_conversation) if isinstance(t, str) and t}
    return named.pop() if len(named) == 1 else None


def _listed(endorsements: frozenset[str] | None) -> list[str] | None:
    return sorted(endorsements) if endorsements is not None else None


def _normal(url: str) -> str:
    return url.rstrip("/")


__all__ = ["AuthConfig", "ConnectorAuth", "Rejected", "activity_tenant"]
