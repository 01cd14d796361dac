"""Teams SSO: the Entra token a Teams client sends (``signin/tokenExchange``) links the Teams
user to the same company identity as an IdP login would, when the company's IdP is Entra.

The token is checked here (signature from the IdP's JWKS, ``iss`` = the IdP, ``aud`` exactly
the bot's ``api://botid-<app id>``, not expired, ``tid`` a served tenant, ``scp`` holding
``access_as_user``, and ``tid``/``oid`` the very Teams user who sent it), then used as the
RFC 8693 ``subject_token``: the IdP signs opsbot's client in for that user and the link is
stored as a login's (``LinkingService.link_by_exchange``). The company subject is the IdP's,
so a person linked on Slack and on Teams is one identity.

Example::

    sso = SsoLinker(linking, SsoPolicy("api://botid-<app id>", frozenset({tenant})))
    result = await sso.link(ChatUser("teams", tenant, aad_object_id), token)
"""

from __future__ import annotations

from dataclasses import dataclass

import jwt

from broker.errors import LinkingError, TokenVerificationError
from broker.linking import LinkingService, LinkResult
from broker.types import ChatUser

SSO_SCOPE = "access_as_user"
TEAMS = "teams"


@dataclass(frozen=True, slots=True)
class SsoPolicy:
    """What a Teams SSO token must say: its audience (the manifest's
    ``webApplicationInfo.resource``), the tenants served, and the delegated scope.
    ``app_id``: Entra's v2 access tokens (``accessTokenAcceptedVersion: 2``) name the app's
    client id as ``aud`` instead of its URI; either is accepted, exactly."""

    audience: str
    tenants: frozenset[str]
    scope: str = SSO_SCOPE
    app_id: str | None = None

    def audience_of(self, token: str) -> str:
        """The accepted audience ``token`` names (``audience`` when it names none of them:
        verification then refuses it)."""
        try:
            aud = jwt.decode(token, options={"verify_signature": False}).get("aud")
        except jwt.InvalidTokenError:
            return self.audience
        return (
            aud if isinstance(aud, str) and aud in (self.audience, self.app_id) else self.audience
        )


class SsoLinker:
    """Links a Teams user from their client's SSO token."""

    def __init__(self, linking: LinkingService, policy: SsoPolicy) -> None:
        self.linking = linking
        self.policy = policy

    async def check(self, chat_user: ChatUser, token: str) -> None:
        """``TokenVerificationError`` unless ``token`` is a valid SSO token of ``chat_user``."""
        if chat_user.platform != TEAMS:
            raise TokenVerificationError("SSO tokens link Teams users only")
        provider = self.linking.client.provider
        claims = await provider.verify(
            token, audience=self.policy.audience_of(token), required=("tid", "oid")
        )
        tenant, object_id = claims.get("tid"), claims.get("oid")
        if tenant not in self.policy.tenants:
            raise TokenVerificationError("the token's tenant is not served")
        # The token is authoritative for who signed in: it must be the Teams user who sent it
        # (a token passed on by someone else links nobody).
        if (tenant, object_id) != (chat_user.team_id, chat_user.user_id):
            raise TokenVerificationError("the token belongs to another Teams user")
        scopes = claims.get("scp")
        if not isinstance(scopes, str) or self.policy.scope not in scopes.split():
            raise TokenVerificationError(f"the token lacks the {self.policy.scope} scope")

    async def link(self, chat_user: ChatUser, token: str) -> LinkResult:
        """Check ``token`` and link ``chat_user`` through it. ``TokenVerificationError``: the
        token is refused; ``LinkingError``: the IdP refused the exchange."""
        await self.check(chat_user, token)
        try:
            return await self.linking.link_by_exchange(chat_user, token)
        except TokenVerificationError as exc:  # the IdP's answer did not verify
            raise LinkingError(str(exc)) from None
