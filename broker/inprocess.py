"""The in-process broker: account link → refreshed subject token → RFC 8693 per server.

Example::

    broker = InProcessBroker(links=store, client=token_client, servers=[
        ServerTarget("ticketing", "http://127.0.0.1:8101/mcp"),
    ])
    token = await broker.get_token(identity, "ticketing")

Both the subject token (per user) and each exchanged token (per user and audience) are cached
until ``exp`` minus a margin, with single-flight loading. An exchanged token is never used
past its subject token's expiry, whatever the IdP put in its ``exp`` (RFC 8693 leaves the
lifetime to the provider; Keycloak, for one, gives each exchanged token a fresh lifetime).
Groups come from the refreshed ID token's configured claim, else from the userinfo endpoint.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import jwt

from broker.cache import SingleFlightCache
from broker.claims import ClaimNames, read_profile
from broker.errors import (
    AccessRevokedError,
    BrokerError,
    BrokerUnavailableError,
    ExchangeFailedError,
    LinkBrokenError,
    NotLinkedError,
    TokenVerificationError,
)
from broker.exchange import TokenEndpointClient, TokenEndpointError
from broker.links import AccountLink, LinkStore
from broker.metrics import BrokerMetrics
from broker.types import AccessToken, ChatUser, Identity
from infra.clock import Clock, utc_now

log = logging.getLogger(__name__)

# Errors a token endpoint gives when the grant (refresh token, subject token) is no longer
# honoured: the user must sign in again or has lost access.
_REVOKED_ERRORS = {"invalid_grant", "access_denied"}
# Errors an exchange gives when its subject token may just be stale (expired, revoked):
# RFC 8693 §2.2.2 answers an invalid subject token with invalid_request; some providers
# (the dev IdP among them) with invalid_grant. The broker refreshes the sign-in once and asks
# again before it decides.
_STALE_SUBJECT_ERRORS = _REVOKED_ERRORS | {"invalid_request"}


@dataclass(frozen=True, slots=True)
class ServerTarget:
    """An MCP server the broker mints tokens for: its name, audience, and scopes to ask for."""

    name: str
    audience: str
    scopes: frozenset[str] = field(default_factory=frozenset)  # empty: all the user holds


@dataclass(frozen=True, slots=True)
class _SubjectToken:
    value: str = field(repr=False)
    expires_at: datetime
    groups: frozenset[str] = frozenset()


class InProcessBroker:
    """The ``Broker`` protocol, in this process. Holds refresh tokens via the ``LinkStore``."""

    def __init__(
        self,
        *,
        links: LinkStore,
        client: TokenEndpointClient,
        servers: Iterable[ServerTarget],
        clock: Clock = utc_now,
        cache_margin: timedelta = timedelta(seconds=30),
        metrics: BrokerMetrics | None = None,
        groups_max_age: timedelta = timedelta(seconds=60),
        claims: ClaimNames = ClaimNames(),  # noqa: B008 (frozen)
        userinfo_fallback: bool = True,
    ) -> None:
        self._links = links
        self._claims = claims
        self._userinfo_fallback = userinfo_fallback
        self._client = client
        self._servers = {s.name: s for s in servers}
        self._clock = clock
        self._margin = cache_margin
        # A sign-in (and the groups it carries) is re-read from the IdP at least this often:
        # approver rights are checked against the IdP's current view, not a cached login.
        self._groups_max_age = groups_max_age
        self.metrics = metrics or BrokerMetrics()
        self._tokens: SingleFlightCache[tuple[str, str], AccessToken] = SingleFlightCache(clock)
        self._subjects: SingleFlightCache[str, _SubjectToken] = SingleFlightCache(clock)

    @property
    def servers(self) -> dict[str, ServerTarget]:
        return dict(self._servers)

    def _target(self, server: str) -> ServerTarget:
        target = self._servers.get(server)
        if target is None:
            raise ExchangeFailedError(server, "no such MCP server is configured")
        return target

    async def get_token(self, identity: Identity, server: str) -> AccessToken:
        target = self._target(server)
        key = (identity.subject, target.audience)
        try:
            token, hit = await self._tokens.get_or_load(key, lambda: self._mint(identity, target))
        except BrokerError as exc:
            self.metrics.cache_misses += 1
            self.metrics.record_failure(exc)
            log.warning(
                "token for %s on %s refused: %s", identity.subject, server, type(exc).__name__
            )
            raise
        if hit:
            self.metrics.cache_hits += 1
        else:
            self.metrics.cache_misses += 1
        return token

    async def invalidate(self, identity: Identity, server: str) -> None:
        """Forget the cached token for this user and server (e.g. after a 401)."""
        self._tokens.invalidate((identity.subject, self._target(server).audience))

    async def invalidate_user(self, subject: str) -> None:
        """Forget everything cached for a user (unlink, revocation)."""
        self._subjects.invalidate(subject)
        self._tokens.invalidate_where(lambda key: key[0] == subject)

    async def _mint(
        self, identity: Identity, target: ServerTarget
    ) -> tuple[AccessToken, datetime | None]:
        for attempt in (1, 2):
            subject = await self._subject_token(identity)
            started = time.perf_counter()
            try:
                response = await self._client.exchange(
                    subject.value, target.audience, target.scopes
                )
            except TokenEndpointError as exc:
                if exc.error in _STALE_SUBJECT_ERRORS and attempt == 1:
                    # The cached subject token may be stale: refresh once, then decide.
                    self._subjects.invalidate(identity.subject)
                    continue
                if exc.error in _REVOKED_ERRORS:
                    raise AccessRevokedError(
                        f"the identity provider refused access for {identity.subject!r} "
                        f"to {target.name!r}: access was revoked"
                    ) from None
                raise ExchangeFailedError(target.name, str(exc)) from None
            self.metrics.record_exchange(time.perf_counter() - started)
            token = await self._validated(response.access_token, identity, target)
            if token.expires_at > subject.expires_at:
                # Never outlive the sign-in it was derived from (revocation takes effect then).
                token = replace(token, expires_at=subject.expires_at)
            return token, token.expires_at - self._margin
        raise AssertionError("unreachable")  # pragma: no cover

    async def _validated(self, value: str, identity: Identity, target: ServerTarget) -> AccessToken:
        try:
            claims = await self._client.provider.verify(value, audience=target.audience)
        except TokenVerificationError as exc:
            raise ExchangeFailedError(target.name, f"received token is invalid: {exc}") from None
        if claims.get("sub") != identity.subject:
            raise ExchangeFailedError(target.name, "received token names another subject")
        self._check_issued_to_us(claims, target)
        scope = claims.get("scope", "")
        return AccessToken(
            value=value,
            audience=target.audience,
            expires_at=datetime.fromtimestamp(int(claims["exp"]), UTC),
            scopes=frozenset(scope.split()) if isinstance(scope, str) else frozenset(),
        )

    def _check_issued_to_us(self, claims: dict[str, Any], target: ServerTarget) -> None:
        """The exchanged token names opsbot's client: as the actor (``act.sub``, RFC 8693
        §4.1 delegation) or, with no ``act`` (RFC 8693 leaves it optional: impersonation, as
        idpyoidc issues them), as its client (``client_id``, RFC 9068, or ``azp``)."""
        ours = self._client.client_id
        act = claims.get("act")
        if act is not None:
            if not isinstance(act, dict) or act.get("sub") != ours:
                raise ExchangeFailedError(target.name, "received token names another actor")
            return
        if claims.get("client_id", claims.get("azp")) != ours:
            raise ExchangeFailedError(
                target.name, "received token names our client neither as act.sub nor client_id"
            )

    async def _subject_token(
        self, identity: Identity, link: AccountLink | None = None
    ) -> _SubjectToken:
        token, _ = await self._subjects.get_or_load(
            identity.subject, lambda: self._refresh(identity, link)
        )
        return token

    async def _refresh(
        self, identity: Identity, link: AccountLink | None = None
    ) -> tuple[_SubjectToken, datetime | None]:
        """``link``: the chat user's link when the caller has just read it (a click's
        ``resolve``): not read again before the refresh."""
        chat_user = identity.chat_user
        if chat_user is None:
            found = await self._links.links_for_subject(identity.subject)
            if not found:
                raise NotLinkedError(f"{identity.subject!r} has not connected their account")
            chat_user = found[0].chat_user
        if link is None or link.chat_user != chat_user:
            link = await self._links.get(chat_user)
        refresh_token = await self._links.refresh_token(chat_user)
        if link is None or refresh_token is None:
            raise NotLinkedError("this chat user has not connected their company account")
        if link.subject != identity.subject:
            raise NotLinkedError("this chat user is linked to a different company account")
        if link.broken_at is not None:
            raise LinkBrokenError(
                f"{identity.subject!r}'s sign-in was refused before: connect the account again"
            )
        try:
            response = await self._client.refresh(refresh_token)
        except TokenEndpointError as exc:
            if exc.error in _REVOKED_ERRORS:
                # Kept on the link, so every instance (and /ops status, App Home) says
                # "reconnect" until the person links again, without asking the IdP each time.
                await self._links.mark_broken(chat_user, self._clock())
                raise AccessRevokedError(
                    f"the identity provider refused to refresh {identity.subject!r}'s sign-in: "
                    "access was revoked or the sign-in expired; connect the account again"
                ) from None
            raise BrokerUnavailableError(f"refreshing the sign-in failed: {exc}") from None
        self.metrics.refreshes += 1
        if response.refresh_token and response.refresh_token != refresh_token:
            await self._links.set_refresh_token(chat_user, response.refresh_token)
        expires_at = _subject_expiry(response.access_token, response.expires_in, self._clock())
        groups = await self._groups(response.id_token, response.access_token, identity.subject)
        subject = _SubjectToken(response.access_token, expires_at, groups)
        fresh_until = self._clock() + self._groups_max_age
        return subject, min(expires_at - self._margin, fresh_until)

    async def _groups(
        self, id_token: str | None, access_token: str, subject: str
    ) -> frozenset[str]:
        """The user's current groups: from the refreshed ID token, else from userinfo; none if
        neither can be trusted."""
        provider = self._client.provider
        if id_token is not None:
            try:
                claims = await provider.verify(id_token, audience=self._client.client_id)
            except TokenVerificationError:
                log.warning("ID token from refresh failed validation; no groups for %s", subject)
                return frozenset()
            if claims.get("sub") != subject:
                return frozenset()
            groups = read_profile(claims, self._claims).groups
            if groups is not None:
                return groups
        if not self._userinfo_fallback:
            return frozenset()
        try:
            info = await provider.userinfo(access_token)
        except TokenVerificationError as exc:
            log.warning("no groups for %s: userinfo unusable (%s)", subject, exc)
            return frozenset()
        if info.get("sub") != subject:  # OIDC Core 5.3.2
            return frozenset()
        return read_profile(info, self._claims).groups or frozenset()

    async def resolve(self, chat_user: ChatUser, *, fresh: bool = False) -> Identity | None:
        """The chat user's identity with current groups (from the IdP), or ``None`` if unlinked.

        Groups are at most ``groups_max_age`` old; ``fresh`` refreshes the sign-in now.
        Raises ``AccessRevokedError`` when the IdP no longer honours the sign-in.
        """
        link = await self._links.get(chat_user)
        if link is None:
            return None
        if link.broken_at is not None:
            raise LinkBrokenError("this sign-in was refused before: connect the account again")
        identity = Identity(link.subject, chat_user, link.email)
        if fresh:
            self._subjects.invalidate(link.subject)
        subject = await self._subject_token(identity, link)
        return Identity(link.subject, chat_user, link.email, subject.groups)

    async def resolve_subject(self, subject: str) -> Identity:
        """The identity of a linked subject (e.g. an approval's requester), current groups."""
        found = await self._links.links_for_subject(subject)
        if not found:
            raise NotLinkedError(f"{subject!r} has not connected their account")
        identity = await self.resolve(found[0].chat_user)
        if identity is None:  # unlinked in between
            raise NotLinkedError(f"{subject!r} has not connected their account")
        return identity


def _subject_expiry(access_token: str, expires_in: int | None, now: datetime) -> datetime:
    """When the subject token expires: the earlier of ``expires_in`` and, for a JWT access
    token, its ``exp`` (read unverified: it came straight from the token endpoint)."""
    expiry = now + timedelta(seconds=expires_in or 60)
    try:
        claims = jwt.decode(access_token, options={"verify_signature": False})
    except jwt.InvalidTokenError:
        return expiry  # an opaque access token
    exp = claims.get("exp")
    if isinstance(exp, int | float) and not isinstance(exp, bool):
        jwt_expiry = datetime.fromtimestamp(exp, UTC)
        return jwt_expiry if expires_in is None else min(expiry, jwt_expiry)
    return expiry
