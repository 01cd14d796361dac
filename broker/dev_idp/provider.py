"""The dev IdP's state and grants (DEVELOPMENT AND TESTS ONLY; no persistence, one process).

Keys are RSA pairs generated at start; tokens are signed with pyjwt. Codes and refresh tokens
live in memory, and with ``state_file`` the key and refresh tokens also on disk
(``broker.dev_idp.state``: ``opsbot dev --keep``). Refresh tokens are not rotated unless
``TokenRules(rotate_refresh_tokens=True)``.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import hmac
import re
import secrets
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import jwt
from cryptography.hazmat.primitives.asymmetric import rsa

from broker.dev_idp.directory import Directory, DirectoryUser
from broker.dev_idp.state import SavedRefresh, SavedState, load_state, save_state
from infra.clock import Clock, utc_now

TOKEN_EXCHANGE_GRANT = "urn:ietf:params:oauth:grant-type:token-exchange"  # noqa: S105
ACCESS_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:access_token"  # noqa: S105
JWT_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:jwt"  # noqa: S105
REFRESH_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:refresh_token"  # noqa: S105
LOGIN_SCOPES = "openid profile email offline_access"
# RFC 7636 4.1 and 4.2: a verifier is 43-128 unreserved characters; its S256 challenge is 43
# base64url ones.
_PKCE_VERIFIER = re.compile(r"[A-Za-z0-9._~-]{43,128}")
_PKCE_CHALLENGE = re.compile(r"[A-Za-z0-9_-]{43}")


class OAuthError(Exception):
    """An OAuth error response: ``error`` code, description and HTTP status."""

    def __init__(self, error: str, description: str, status: int = 400) -> None:
        super().__init__(f"{error}: {description}")
        self.error = error
        self.description = description
        self.status = status


@dataclass(frozen=True, slots=True)
class DevClient:
    """A registered OAuth client. Empty ``redirect_uris`` allows any loopback http URL."""

    client_id: str
    client_secret: str = field(repr=False)
    redirect_uris: tuple[str, ...] = ()
    # Further audiences of subject tokens this client may exchange: the client's own API, as
    # Entra's ``api://botid-<app id>`` of a Teams SSO token (Entra plays this IdP's part).
    subject_audiences: tuple[str, ...] = ()

    def allows_redirect(self, uri: str) -> bool:
        if self.redirect_uris:
            return uri in self.redirect_uris
        parts = urlsplit(uri)
        return parts.scheme in ("http", "https") and parts.hostname in (
            "127.0.0.1",
            "localhost",
            "::1",
        )


@dataclass(slots=True)
class _Code:
    client_id: str
    redirect_uri: str
    code_challenge: str
    subject: str
    scope: str
    nonce: str | None
    expires_at: datetime


@dataclass(slots=True)
class _Refresh:
    client_id: str
    subject: str
    scope: str
    expires_at: datetime


@dataclass(frozen=True, slots=True)
class TokenRules:
    """How the dev IdP issues tokens: how long each kind lives, and behaviours real
    providers differ on (tests pick the one they mimic)."""

    access_token_ttl: timedelta = timedelta(hours=1)
    exchange_ttl: timedelta = timedelta(minutes=5)
    refresh_token_ttl: timedelta = timedelta(days=30)
    code_ttl: timedelta = timedelta(minutes=2)
    # Okta and Entra rotate refresh tokens; off by default so broker replicas can share one.
    rotate_refresh_tokens: bool = False
    # False mimics providers that give each exchanged token a fresh lifetime (tests of the
    # broker's own bound).
    clamp_exchange_exp: bool = True
    # Where the ID token and userinfo put email, name and groups (a dotted name nests them:
    # Keycloak's "realm_access.roles"), for tests of opsbot's claim-name settings.
    email_claim: str = "email"
    name_claim: str = "name"
    groups_claim: str = "groups"
    # False mimics providers whose exchanged tokens name no actor (RFC 8693 makes ``act``
    # optional; idpyoidc issues none): ``client_id`` alone names the client.
    actor_claim: bool = True
    # The error for a subject token that is invalid or expired: RFC 8693 §2.2.2 says
    # invalid_request (idpyoidc); this IdP, like some others, says invalid_grant by default.
    subject_token_error: str = "invalid_grant"  # noqa: S105 (an error code)

    def profile(self, user: DirectoryUser) -> dict[str, Any]:
        """``user``'s email, name and groups under this provider's claim names."""
        claims: dict[str, Any] = {}
        for path, value in (
            (self.email_claim, user.email),
            (self.name_claim, user.name),
            (self.groups_claim, sorted(user.groups)),
        ):
            *parents, leaf = path.split(".")
            target = claims
            for part in parents:
                target = target.setdefault(part, {})
            target[leaf] = value
        return claims


@dataclass(slots=True)
class DevIdpStats:
    """What the IdP served, for tests that count exchanges at the IdP."""

    logins: int = 0
    refreshes: int = 0
    exchanges: int = 0
    exchanges_by: Counter[tuple[str, str]] = field(default_factory=Counter)  # (sub, aud)
    sign_ins_by_exchange: int = 0  # subject token → refresh token (Teams SSO links)
    refused: Counter[str] = field(default_factory=Counter)  # by OAuth error code


def _b64url_sha256(value: str) -> str:
    digest = hashlib.sha256(value.encode("ascii")).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


class DevIdentityProvider:
    """An OIDC/OAuth 2.0 provider for development and tests. Never use it in production.

    ``audiences`` maps resource names from the directory (``ticketing``...) to the audience
    URI the exchanged tokens carry; it can change while serving (``set_audience``).
    """

    def __init__(
        self,
        issuer: str,
        directory: Directory,
        *,
        clients: Sequence[DevClient],
        audiences: Mapping[str, str],
        clock: Clock = utc_now,
        rules: TokenRules = TokenRules(),
        admin_token: str | None = None,
        state_file: Path | None = None,
        signing_key: rsa.RSAPrivateKey | None = None,
    ) -> None:
        """``signing_key``: the RSA key tokens are signed with (default: a new 2048-bit
        key; a saved ``state_file`` wins over both)."""
        self.issuer = issuer.rstrip("/")
        self.directory = directory
        self.clients = {c.client_id: c for c in clients}
        self._audiences = dict(audiences)
        self.clock = clock
        self.rules = rules
        self.admin_token = admin_token
        self.stats = DevIdpStats()
        self._revoked = {u.subject for u in directory.users.values() if u.revoked}
        self._codes: dict[str, _Code] = {}
        self._refresh: dict[str, _Refresh] = {}
        self._key = signing_key or rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self._kid = secrets.token_hex(8)
        self._state_file = state_file
        saved = load_state(state_file) if state_file is not None else None
        if saved is not None:
            self._key, self._kid = saved.key, saved.kid
            self._refresh = {
                token: _Refresh(r.client_id, r.subject, r.scope, r.expires_at)
                for token, r in saved.refresh.items()
            }
        self._save()

    def _save(self) -> None:
        """Write the key and refresh tokens to ``state_file`` (if any) after each change."""
        if self._state_file is None:
            return
        refresh = {
            token: SavedRefresh(r.client_id, r.subject, r.scope, r.expires_at)
            for token, r in self._refresh.items()
        }
        save_state(self._state_file, SavedState(self._key, self._kid, refresh))

    # -- configuration -----------------------------------------------------------------

    @property
    def audiences(self) -> Mapping[str, str]:
        return dict(self._audiences)

    def set_audience(self, resource: str, audience: str) -> None:
        if resource not in self.directory.resources:
            raise ValueError(f"unknown resource {resource!r}: not in the directory")
        self._audiences[resource] = audience

    def revoke_user(self, subject: str) -> None:
        """Stop every new token for ``subject`` (logins, refreshes, exchanges)."""
        self._user(subject)
        self._revoked.add(subject)

    def restore_user(self, subject: str) -> None:
        self._user(subject)
        self._revoked.discard(subject)

    def set_membership(self, subject: str, group: str, member: bool) -> frozenset[str]:
        """Add ``subject`` to, or remove them from, ``group``; their groups now."""
        user = self._user(subject)
        groups = user.groups | {group} if member else user.groups - {group}
        # The directory is immutable: swap in a copy (tokens issued from now on see it).
        users = {**self.directory.users, subject: dataclasses.replace(user, groups=groups)}
        self.directory = dataclasses.replace(self.directory, users=users)
        return frozenset(groups)

    def accept_subject_audience(self, client_id: str, audience: str) -> None:
        """Let ``client_id`` exchange subject tokens minted for ``audience`` (its own API)."""
        client = self.clients[client_id]
        audiences = (*client.subject_audiences, audience)
        self.clients[client_id] = dataclasses.replace(client, subject_audiences=audiences)

    def mint_sso_token(
        self,
        subject: str,
        audience: str,
        *,
        tenant_id: str,
        object_id: str,
        scope: str = "access_as_user",
        ttl: timedelta = timedelta(hours=1),
        issued_at: datetime | None = None,
    ) -> str:
        """The access token a Teams client gets silently for ``audience`` (Entra's v2 claims:
        ``tid``, ``oid``, ``scp``), signed with this IdP's key, for the fake Teams channel's
        ``signin/tokenExchange``."""
        self._user(subject)
        now = issued_at or self.clock()
        return self._sign(
            {
                "iss": self.issuer,
                "sub": subject,
                "aud": audience,
                "tid": tenant_id,
                "oid": object_id,
                "scp": scope,
                "ver": "2.0",
                "azp": "5e3ce6c0-2b1f-4285-8d4b-75ee78787346",  # Teams web client
                "iat": int(now.timestamp()),
                "nbf": int(now.timestamp()),
                "exp": int((now + ttl).timestamp()),
            }
        )

    def is_revoked(self, subject: str) -> bool:
        return subject in self._revoked

    def _user(self, subject: str) -> DirectoryUser:
        user = self.directory.users.get(subject)
        if user is None:
            raise KeyError(f"unknown user {subject!r}")
        return user

    # -- metadata --------------------------------------------------------------------

    def discovery(self) -> dict[str, Any]:
        i = self.issuer
        return {
            "issuer": i,
            "authorization_endpoint": f"{i}/authorize",
            "token_endpoint": f"{i}/token",
            "userinfo_endpoint": f"{i}/userinfo",
            "jwks_uri": f"{i}/jwks",
            "revocation_endpoint": f"{i}/revoke",
            "response_types_supported": ["code"],
            "grant_types_supported": ["authorization_code", "refresh_token", TOKEN_EXCHANGE_GRANT],
            "subject_types_supported": ["public"],
            "id_token_signing_alg_values_supported": ["RS256"],
            "token_endpoint_auth_methods_supported": ["client_secret_basic", "client_secret_post"],
            "code_challenge_methods_supported": ["S256"],
            "scopes_supported": sorted(
                {"openid", "profile", "email", "offline_access"}
                | {
                    s
                    for r in self.directory.resources.values()
                    for g in r.scopes_by_group.values()
                    for s in g
                }
            ),
            "claims_supported": ["sub", "email", "name", "groups", "act", "client_id", "scope"],
            "authorization_response_iss_parameter_supported": True,
        }

    def jwks(self) -> dict[str, Any]:
        jwk = jwt.algorithms.RSAAlgorithm.to_jwk(self._key.public_key(), as_dict=True)
        jwk.update({"kid": self._kid, "use": "sig", "alg": "RS256"})
        return {"keys": [jwk]}

    def _sign(self, claims: dict[str, Any], typ: str = "JWT") -> str:
        return jwt.encode(
            claims, self._key, algorithm="RS256", headers={"kid": self._kid, "typ": typ}
        )

    # -- client authentication ---------------------------------------------------------

    def authenticate_client(self, client_id: str | None, client_secret: str | None) -> DevClient:
        client = self.clients.get(client_id or "")
        if client is None or client_secret is None:
            raise OAuthError("invalid_client", "client authentication failed", 401)
        if not hmac.compare_digest(client.client_secret.encode(), client_secret.encode()):
            raise OAuthError("invalid_client", "client authentication failed", 401)
        return client

    def check_authorize_request(self, params: Mapping[str, str]) -> DevClient:
        """Validate an authorization request; errors here are shown, never redirected."""
        client = self.clients.get(params.get("client_id", ""))
        if client is None:
            raise OAuthError("invalid_client", "unknown client_id")
        if not client.allows_redirect(params.get("redirect_uri", "")):
            raise OAuthError("invalid_request", "redirect_uri is not registered for this client")
        if params.get("response_type") != "code":
            raise OAuthError("unsupported_response_type", "only response_type=code is supported")
        if not params.get("code_challenge") or params.get("code_challenge_method") != "S256":
            raise OAuthError("invalid_request", "PKCE with code_challenge_method=S256 is required")
        if not _PKCE_CHALLENGE.fullmatch(params["code_challenge"]):
            # RFC 7636 4.2: a S256 challenge is 43 base64url characters (a non-ASCII one
            # made the token endpoint's comparison a TypeError: a 500)
            raise OAuthError("invalid_request", "code_challenge is not a S256 challenge")
        return client

    # -- authorization code ------------------------------------------------------------

    def issue_code(self, params: Mapping[str, str], subject: str) -> str:
        client = self.check_authorize_request(params)
        self._user(subject)
        if self.is_revoked(subject):
            raise OAuthError("access_denied", "this user's access has been revoked")
        now = self.clock()
        self._codes = {k: v for k, v in self._codes.items() if v.expires_at > now}
        code = secrets.token_urlsafe(32)
        self._codes[code] = _Code(
            client_id=client.client_id,
            redirect_uri=params["redirect_uri"],
            code_challenge=params["code_challenge"],
            subject=subject,
            scope=params.get("scope") or LOGIN_SCOPES,
            nonce=params.get("nonce"),
            expires_at=now + self.rules.code_ttl,
        )
        self.stats.logins += 1
        return code

    def grant_authorization_code(
        self, client: DevClient, form: Mapping[str, str]
    ) -> dict[str, Any]:
        code = self._codes.pop(form.get("code", ""), None)  # single use, even when it fails
        if code is None or code.expires_at <= self.clock() or code.client_id != client.client_id:
            raise OAuthError("invalid_grant", "authorization code is invalid, used or expired")
        if form.get("redirect_uri") != code.redirect_uri:
            raise OAuthError(
                "invalid_grant", "redirect_uri does not match the authorization request"
            )
        verifier = form.get("code_verifier", "")
        if not _PKCE_VERIFIER.fullmatch(verifier) or not hmac.compare_digest(
            _b64url_sha256(verifier), code.code_challenge
        ):
            raise OAuthError("invalid_grant", "PKCE verification failed")
        if self.is_revoked(code.subject):
            raise OAuthError("invalid_grant", "this user's access has been revoked")
        response = self._login_tokens(client, code.subject, code.scope, code.nonce)
        if "offline_access" in code.scope.split():
            refresh = secrets.token_urlsafe(48)
            self._refresh[refresh] = _Refresh(
                client.client_id,
                code.subject,
                code.scope,
                self.clock() + self.rules.refresh_token_ttl,
            )
            self._save()
            response["refresh_token"] = refresh
        return response

    def grant_refresh_token(self, client: DevClient, form: Mapping[str, str]) -> dict[str, Any]:
        stored = self._refresh.get(form.get("refresh_token", ""))
        if stored is None or stored.client_id != client.client_id:
            raise OAuthError("invalid_grant", "refresh token is invalid or was revoked")
        if stored.expires_at <= self.clock():
            raise OAuthError("invalid_grant", "refresh token has expired")
        if self.is_revoked(stored.subject):
            raise OAuthError("invalid_grant", "this user's access has been revoked")
        self.stats.refreshes += 1
        response = self._login_tokens(client, stored.subject, stored.scope, None)
        if self.rules.rotate_refresh_tokens:
            del self._refresh[form["refresh_token"]]
            rotated = secrets.token_urlsafe(48)
            self._refresh[rotated] = stored
            self._save()
            response["refresh_token"] = rotated
        return response

    def revoke_token(self, client: DevClient, token: str) -> None:
        """RFC 7009: forget a refresh token of this client (unknown tokens are ignored)."""
        stored = self._refresh.get(token)
        if stored is not None and stored.client_id == client.client_id:
            del self._refresh[token]
            self._save()

    def _login_tokens(
        self, client: DevClient, subject: str, scope: str, nonce: str | None
    ) -> dict[str, Any]:
        user = self._user(subject)
        now = self.clock()
        exp = now + self.rules.access_token_ttl
        base = {
            "iss": self.issuer,
            "sub": subject,
            "iat": int(now.timestamp()),
            "exp": int(exp.timestamp()),
        }
        access = self._sign(
            {
                **base,
                "aud": client.client_id,
                "client_id": client.client_id,
                "scope": scope,
                "jti": secrets.token_urlsafe(16),
                "groups": sorted(user.groups),
            },
            typ="at+jwt",
        )
        id_claims: dict[str, Any] = {
            **base,
            "aud": client.client_id,
            "azp": client.client_id,
            **self.rules.profile(user),
        }
        if nonce:
            id_claims["nonce"] = nonce
        return {
            "access_token": access,
            "token_type": "Bearer",
            "expires_in": int(self.rules.access_token_ttl.total_seconds()),
            "scope": scope,
            "id_token": self._sign(id_claims),
        }

    # -- token exchange (RFC 8693) -------------------------------------------------------

    def verify_own_token(self, token: str, audience: str | list[str]) -> dict[str, Any]:
        """Claims of a token this IdP signed for ``audience``, checked against the clock."""
        try:
            claims: dict[str, Any] = jwt.decode(
                token,
                self._key.public_key(),
                algorithms=["RS256"],
                audience=audience,
                issuer=self.issuer,
                # Time is checked below against the injected clock, not the wall clock.
                options={
                    "verify_exp": False,
                    "verify_iat": False,
                    "verify_nbf": False,
                    "require": ["exp", "sub"],
                },
            )
        except jwt.InvalidTokenError as exc:
            raise OAuthError(
                "invalid_grant", f"subject token is invalid: {type(exc).__name__}"
            ) from exc
        if claims["exp"] <= self.clock().timestamp():
            raise OAuthError("invalid_grant", "subject token has expired")
        return claims

    def grant_token_exchange(self, client: DevClient, form: Mapping[str, str]) -> dict[str, Any]:
        if form.get("subject_token_type") not in (ACCESS_TOKEN_TYPE, JWT_TOKEN_TYPE):
            raise OAuthError("invalid_request", "subject_token_type must be an access token or jwt")
        token_type = form.get("requested_token_type")
        if token_type not in (None, "", ACCESS_TOKEN_TYPE, JWT_TOKEN_TYPE, REFRESH_TOKEN_TYPE):
            raise OAuthError("invalid_request", "unsupported requested_token_type")
        # The subject token must have been issued to the client asking (or to its own API):
        # no exchanging of tokens minted for a resource server, nor of another client's.
        try:
            claims = self.verify_own_token(
                form.get("subject_token", ""), [client.client_id, *client.subject_audiences]
            )
        except OAuthError as exc:
            raise OAuthError(self.rules.subject_token_error, exc.description) from exc
        subject = str(claims["sub"])
        user = self.directory.users.get(subject)
        if user is None:
            raise OAuthError("invalid_grant", "unknown subject")
        if self.is_revoked(subject):
            raise OAuthError("invalid_grant", "this user's access has been revoked")
        if token_type == REFRESH_TOKEN_TYPE:
            return self._sign_in_by_exchange(client, subject, form)
        resource_name, audience = self._target(form)
        granted = self.directory.resources[resource_name].granted(user.groups)
        requested = set((form.get("scope") or "").split())
        scopes = granted & requested if requested else granted
        if not scopes:
            raise OAuthError(
                "invalid_scope", f"user holds none of the requested scopes on {resource_name}"
            )
        now = self.clock()
        exp = int((now + self.rules.exchange_ttl).timestamp())
        if self.rules.clamp_exchange_exp:  # RFC 8693 leaves it open; never outlive the subject
            exp = min(exp, int(claims["exp"]))
        exchanged: dict[str, Any] = {
            "iss": self.issuer,
            "sub": subject,
            "aud": audience,
            "scope": " ".join(sorted(scopes)),
            "exp": exp,
            "iat": int(now.timestamp()),
            "jti": secrets.token_urlsafe(16),
            "client_id": client.client_id,
            "groups": sorted(user.groups),
        }
        if self.rules.actor_claim:
            exchanged["act"] = {"sub": client.client_id}
        token = self._sign(exchanged, typ="at+jwt")
        self.stats.exchanges += 1
        self.stats.exchanges_by[(subject, audience)] += 1
        return {
            "access_token": token,
            "issued_token_type": ACCESS_TOKEN_TYPE,
            "token_type": "Bearer",
            "expires_in": max(0, exp - int(now.timestamp())),
            "scope": " ".join(sorted(scopes)),
        }

    def _sign_in_by_exchange(
        self, client: DevClient, subject: str, form: Mapping[str, str]
    ) -> dict[str, Any]:
        """A sign-in for the client itself (a refresh token, as a login would give): how a
        Teams SSO token becomes an account link. RFC 8693 puts the issued token in
        ``access_token`` whatever its type."""
        target = form.get("audience") or form.get("resource")
        if target not in (None, "", client.client_id):
            raise OAuthError("invalid_target", "a refresh token is issued for the client only")
        refresh = secrets.token_urlsafe(48)
        scope = form.get("scope") or LOGIN_SCOPES
        self._refresh[refresh] = _Refresh(
            client.client_id, subject, scope, self.clock() + self.rules.refresh_token_ttl
        )
        self.stats.sign_ins_by_exchange += 1
        return {
            "access_token": refresh,
            "issued_token_type": REFRESH_TOKEN_TYPE,
            "token_type": "N_A",
            "scope": scope,
        }

    def _target(self, form: Mapping[str, str]) -> tuple[str, str]:
        """The one resource named by ``audience`` or ``resource`` (URI or resource name)."""
        targets = {v for v in (form.get("audience"), form.get("resource")) if v}
        if len(targets) != 1:
            raise OAuthError("invalid_target", "name exactly one target with audience or resource")
        (target,) = targets
        for name, uri in self._audiences.items():
            if target in (name, uri) and name in self.directory.resources:
                return name, uri
        raise OAuthError("invalid_target", f"unknown audience {target!r}")
