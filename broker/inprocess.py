"""The in-process broker: account link → refreshed subject token → RFC 8693 per server.

Example::

    broker = InProcessBroker(links=store, client=token_client, servers=[
        ServerTarget("ticketing", "http://127.0.0.1:8101/mcp"),
    ])
    token = await broker.get_token(identity, "ticketing")

Both the subject token (per user) and each exchanged token (per user and audience) are cached
until ``exp`` minus a margin, with single-flight loading.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from broker.cache import SingleFlightCache
from broker.errors import (
    AccessRevokedError,
    BrokerError,
    BrokerUnavailableError,
    ExchangeFailedError,
    NotLinkedError,
    TokenVerificationError,
)
from broker.exchange import TokenEndpointClient, TokenEndpointError
from broker.links import LinkStore
from broker.metrics import BrokerMetrics
from broker.types import AccessToken, ChatUser, Identity
from infra.clock import Clock, utc_now

log = logging.getLogger(__name__)

# Errors a token endpoint gives when the grant (refresh token, subject token) is no longer
# honoured: the user must sign in again or has lost access.
_REVOKED_ERRORS = {"invalid_grant", "access_denied"}


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
    ) -> None:
        self._links = links
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
                if exc.error in _REVOKED_ERRORS and attempt == 1:
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
            return token, token.expires_at - self._margin
        raise AssertionError("unreachable")  # pragma: no cover

    async def _validated(self, value: str, identity: Identity, target: ServerTarget) -> AccessToken:
        try:
            claims = await self._client.provider.verify(value, audience=target.audience)
        except TokenVerificationError as exc:
            raise ExchangeFailedError(target.name, f"received token is invalid: {exc}") from None
        if claims.get("sub") != identity.subject:
            raise ExchangeFailedError(target.name, "received token names another subject")
        act = claims.get("act")
        if not isinstance(act, dict) or act.get("sub") != self._client.client_id:
            raise ExchangeFailedError(target.name, "received token lacks act.sub = our client")
        scope = claims.get("scope", "")
        return AccessToken(
            value=value,
            audience=target.audience,
            expires_at=datetime.fromtimestamp(int(claims["exp"]), UTC),
            scopes=frozenset(scope.split()) if isinstance(scope, str) else frozenset(),
        )

    async def _subject_token(self, identity: Identity) -> _SubjectToken:
        token, _ = await self._subjects.get_or_load(
            identity.subject, lambda: self._refresh(identity)
        )
        return token

    async def _refresh(self, identity: Identity) -> tuple[_SubjectToken, datetime | None]:
        chat_user = identity.chat_user
        if chat_user is None:
            found = await self._links.links_for_subject(identity.subject)
            if not found:
                raise NotLinkedError(f"{identity.subject!r} has not connected their account")
            chat_user = found[0].chat_user
        link = await self._links.get(chat_user)
        refresh_token = await self._links.refresh_token(chat_user)
        if link is None or refresh_token is None:
            raise NotLinkedError("this chat user has not connected their company account")
        if link.subject != identity.subject:
            raise NotLinkedError("this chat user is linked to a different company account")
        try:
            response = await self._client.refresh(refresh_token)
        except TokenEndpointError as exc:
            if exc.error in _REVOKED_ERRORS:
                raise AccessRevokedError(
                    f"the identity provider refused to refresh {identity.subject!r}'s sign-in: "
                    "access was revoked or the sign-in expired; connect the account again"
                ) from None
            raise BrokerUnavailableError(f"refreshing the sign-in failed: {exc}") from None
        self.metrics.refreshes += 1
        if response.refresh_token and response.refresh_token != refresh_token:
            await self._links.set_refresh_token(chat_user, response.refresh_token)
        lifetime = timedelta(seconds=response.expires_in or 60)
        expires_at = self._clock() + lifetime
        groups = await self._groups(response.id_token, identity.subject)
        subject = _SubjectToken(response.access_token, expires_at, groups)
        fresh_until = self._clock() + self._groups_max_age
        return subject, min(expires_at - self._margin, fresh_until)

    async def _groups(self, id_token: str | None, subject: str) -> frozenset[str]:
        """The user's current groups from the refreshed ID token; none if it cannot be trusted."""
        if id_token is None:
            return frozenset()
        try:
            claims = await self._client.provider.verify(id_token, audience=self._client.client_id)
        except TokenVerificationError:
            log.warning("ID token from refresh failed validation; no groups for %s", subject)
            return frozenset()
        groups = claims.get("groups")
        if claims.get("sub") != subject or not isinstance(groups, list):
            return frozenset()
        return frozenset(str(g) for g in groups)

    async def resolve(self, chat_user: ChatUser, *, fresh: bool = False) -> Identity | None:
        """The chat user's identity with current groups (from the IdP), or ``None`` if unlinked.

        Groups are at most ``groups_max_age`` old; ``fresh`` refreshes the sign-in now.
        Raises ``AccessRevokedError`` when the IdP no longer honours the sign-in.
        """
        link = await self._links.get(chat_user)
        if link is None:
            return None
        identity = Identity(link.subject, chat_user, link.email)
        if fresh:
            self._subjects.invalidate(link.subject)
        subject = await self._subject_token(identity)
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
