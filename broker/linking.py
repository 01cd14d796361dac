"""Linking a chat user to their company account through an OIDC login started from chat.

``start(chat_user)`` returns the IdP's authorization URL (code flow + PKCE + nonce). Its
``state`` (``broker.login_state``) is a Fernet token (encrypted and signed) naming a
single-use pending login stored server-side with the PKCE verifier; it expires after
``flow.ttl``. ``complete(state, code)`` checks the state, redeems the code, validates the ID
token, and stores the link with the refresh token encrypted. Refused states raise
``InvalidStateError``.

Provider differences are configuration: the scopes and ``prompt`` of the login, where the
email, name and groups are (``ClaimNames``; the userinfo endpoint fills what the ID token
lacks), and RFC 9207: an ``iss`` in the authorization response must name our issuer, and is
required when the provider's metadata says it sends one (mix-up defence).

Example::

    url = await linking.start(ChatUser("slack", "T1", "U1"))   # send as a button
    link = await linking.complete(state, code)                 # from /oauth/callback
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field, replace
from urllib.parse import urlencode

from broker.claims import ClaimNames, read_profile
from broker.errors import BrokerError, InvalidStateError, LinkingError, TokenVerificationError
from broker.exchange import (
    REFRESH_TOKEN_TYPE,
    TokenEndpointClient,
    TokenEndpointError,
    TokenResponse,
)
from broker.links import AccountLink, LinkStore
from broker.login_state import NONCE, LoginFlow, LoginStates
from broker.types import ChatUser

LOGIN_SCOPE = "openid profile email offline_access"


@dataclass(frozen=True, slots=True)
class LinkResult:
    link: AccountLink
    name: str
    groups: frozenset[str]


@dataclass(eq=False, repr=False, kw_only=True)
class LinkingService:
    """Starts and completes account-linking logins; unlinks."""

    # The link store, cipher, clock and how long a login link works (``flow.ttl``).
    flow: LoginFlow
    client: TokenEndpointClient
    redirect_uri: str
    scope: str = LOGIN_SCOPE
    prompt: str | None = None
    claims: ClaimNames = ClaimNames()  # noqa: RUF009 (frozen)
    userinfo_fallback: bool = True
    _states: LoginStates = field(init=False)

    def __post_init__(self) -> None:
        self._states = self.flow.states(b"opsbot link state v1", "login link")

    @property
    def links(self) -> LinkStore:
        return self.flow.links

    async def start(self, chat_user: ChatUser) -> str:
        """The URL that signs the chat user in at the IdP and comes back to our callback."""
        meta = await self.client.provider.metadata()
        if meta.authorization_endpoint is None:
            raise LinkingError("the identity provider has no authorization endpoint")
        asker = {"p": chat_user.platform, "t": chat_user.team_id, "u": chat_user.user_id}
        started = await self._states.start(chat_user, asker)
        query = {
            "response_type": "code",
            "client_id": self.client.client_id,
            "redirect_uri": self.redirect_uri,
            "scope": self.scope,
            "state": started.state,
            "nonce": started.nonce,
            "code_challenge": started.code_challenge,
            "code_challenge_method": "S256",
        }
        if self.prompt:
            query["prompt"] = self.prompt
        return f"{meta.authorization_endpoint}?{urlencode(query)}"

    async def _check_iss(self, iss: str | None) -> None:
        """RFC 9207: the response must come from our issuer (checked before the code is used)."""
        provider = self.client.provider
        if iss is None:
            if (await provider.metadata()).iss_parameter_supported:
                raise LinkingError(
                    "the sign-in response does not name its issuer although the identity "
                    "provider promises to; start again from chat"
                )
            return
        if iss.rstrip("/") != provider.issuer:
            raise LinkingError("the sign-in response came from another identity provider")

    async def complete(
        self,
        state: str,
        code: str,
        *,
        iss: str | None = None,
        expected_chat_user: ChatUser | None = None,
    ) -> LinkResult:
        """Finish a login: store the link for the chat user who started it.

        ``iss``: the authorization response's ``iss`` parameter, if it had one.
        """
        data = self._states.read(state)
        nonce, chat_user = data[NONCE], ChatUser(data["p"], data["t"], data["u"])
        if expected_chat_user is not None and expected_chat_user != chat_user:
            raise InvalidStateError("login state belongs to another chat user")
        pending = await self._states.take(nonce)
        if pending.chat_user != chat_user:
            raise InvalidStateError("login state belongs to another chat user")
        await self._check_iss(iss)  # after the login is spent: a refused response burns it
        try:
            tokens = await self.client.authorization_code(
                code, self.redirect_uri, pending.code_verifier
            )
        except TokenEndpointError as exc:
            raise LinkingError(f"the identity provider refused the login: {exc.error}") from None
        return await self._store(chat_user, tokens, nonce)

    async def link_by_exchange(self, chat_user: ChatUser, subject_token: str) -> LinkResult:
        """Link ``chat_user`` without a login page: the IdP signs opsbot's client in for the
        user behind ``subject_token`` (RFC 8693, a refresh token requested), so the link is
        the same as a login's (same subject, same refresh, same groups). The caller checks
        the subject token first (``broker.sso``)."""
        try:
            issued = await self.client.exchange(
                subject_token,
                self.client.client_id,
                self.scope.split(),
                requested_token_type=REFRESH_TOKEN_TYPE,
            )
            # RFC 8693 puts the issued token in ``access_token``; some IdPs also name it.
            tokens = await self.client.refresh(issued.refresh_token or issued.access_token)
        except TokenEndpointError as exc:
            raise LinkingError(f"the identity provider refused the sign-in: {exc.error}") from None
        if tokens.refresh_token is None:
            tokens = replace(tokens, refresh_token=issued.refresh_token or issued.access_token)
        return await self._store(chat_user, tokens, None)

    async def _store(
        self, chat_user: ChatUser, tokens: TokenResponse, nonce: str | None
    ) -> LinkResult:
        """Check the sign-in's ID token (its ``nonce`` for a login) and save the link."""
        if tokens.id_token is None or tokens.refresh_token is None:
            raise LinkingError("the identity provider returned no ID token or refresh token")
        try:
            claims = await self.client.provider.verify(
                tokens.id_token,
                audience=self.client.client_id,
                required=("nonce",) if nonce is not None else (),
            )
        except TokenVerificationError as exc:
            raise LinkingError(f"the ID token is invalid: {exc}") from None
        if nonce is not None and claims.get("nonce") != nonce:
            raise LinkingError("the ID token does not belong to this login")
        subject = str(claims["sub"])
        profile = read_profile(claims, self.claims)
        if profile.missing and self.userinfo_fallback:
            try:
                info = await self.client.provider.userinfo(tokens.access_token)
            except TokenVerificationError:
                info = {}  # no userinfo endpoint, or it refused: keep what the ID token had
            # OIDC Core 5.3.2: userinfo about another subject must not be used.
            if info.get("sub") == subject:
                profile = profile.merged(read_profile(info, self.claims))
        link = AccountLink(chat_user, subject, profile.email or "", self.flow.clock())
        await self.links.save(link, tokens.refresh_token)
        return LinkResult(
            link=link, name=profile.name or subject, groups=profile.groups or frozenset()
        )

    async def unlink(self, chat_user: ChatUser) -> bool:
        """Delete the link and its refresh token (also revoked at the IdP, best effort)."""
        refresh_token = await self.links.refresh_token(chat_user)
        removed = await self.links.delete(chat_user)
        if refresh_token is not None:
            # Best effort: the local copy is gone either way.
            with contextlib.suppress(BrokerError):
                await self.client.revoke(refresh_token)
        return removed
