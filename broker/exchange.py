"""A client for an OAuth 2.0 token endpoint: refresh, authorization code, RFC 8693 exchange.

Works against any compliant IdP: the token URL comes from discovery or configuration, client
authentication is ``client_secret_basic`` or ``client_secret_post``, and the exchange names its
target with ``audience`` (Keycloak) or ``resource`` (RFC 8707).
"""

from __future__ import annotations

import base64
from collections.abc import Iterable
from dataclasses import KW_ONLY, dataclass, field
from typing import Any, Literal
from urllib.parse import quote

import httpx

from broker.errors import BrokerUnavailableError
from broker.http import request
from broker.oidc import OidcProvider
from infra.json_input import parse_json

TOKEN_EXCHANGE_GRANT = "urn:ietf:params:oauth:grant-type:token-exchange"  # noqa: S105
ACCESS_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:access_token"  # noqa: S105
REFRESH_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:refresh_token"  # noqa: S105

ClientAuthMethod = Literal["client_secret_basic", "client_secret_post"]
TargetParam = Literal["audience", "resource"]


class TokenEndpointError(Exception):
    """The token endpoint answered with an OAuth error (never carries a token)."""

    def __init__(self, error: str, description: str, status: int) -> None:
        super().__init__(f"{error}: {description}" if description else error)
        self.error = error
        self.description = description
        self.status = status


@dataclass(frozen=True, slots=True)
class TokenResponse:
    access_token: str = field(repr=False)
    expires_in: int | None
    scope: str | None = None
    refresh_token: str | None = field(default=None, repr=False)
    id_token: str | None = field(default=None, repr=False)


@dataclass(frozen=True, slots=True)
class ClientCredentials:
    client_id: str
    client_secret: str = field(repr=False)
    method: ClientAuthMethod = "client_secret_basic"


@dataclass(eq=False, repr=False)
class TokenEndpointClient:
    """Calls the token endpoint of ``provider`` as the confidential client ``credentials``."""

    provider: OidcProvider
    http: httpx.AsyncClient
    credentials: ClientCredentials
    _: KW_ONLY
    target_param: TargetParam = "audience"

    @property
    def client_id(self) -> str:
        return self.credentials.client_id

    async def refresh(self, refresh_token: str) -> TokenResponse:
        return await self._post({"grant_type": "refresh_token", "refresh_token": refresh_token})

    async def authorization_code(
        self, code: str, redirect_uri: str, code_verifier: str
    ) -> TokenResponse:
        return await self._post(
            {
                "grant_type": "authorization_code",
                "code": code,
                "redirect_uri": redirect_uri,
                "code_verifier": code_verifier,
            }
        )

    async def exchange(
        self,
        subject_token: str,
        audience: str,
        scopes: Iterable[str] = (),
        *,
        requested_token_type: str = ACCESS_TOKEN_TYPE,
    ) -> TokenResponse:
        """RFC 8693: a token for ``audience`` on behalf of the subject token's user (its
        ``access_token`` holds the issued token, whatever ``requested_token_type`` was)."""
        form = {
            "grant_type": TOKEN_EXCHANGE_GRANT,
            "subject_token": subject_token,
            "subject_token_type": ACCESS_TOKEN_TYPE,
            "requested_token_type": requested_token_type,
            self.target_param: audience,
        }
        scope = " ".join(sorted(scopes))
        if scope:
            form["scope"] = scope
        return await self._post(form)

    async def revoke(self, token: str) -> None:
        """RFC 7009 revocation, if the provider has an endpoint (best effort)."""
        meta = await self.provider.metadata()
        if meta.revocation_endpoint is None:
            return
        form, headers = self._authenticate({"token": token, "token_type_hint": "refresh_token"})
        await request(
            self.http,
            "POST",
            meta.revocation_endpoint,
            "identity provider",
            "revocation",
            data=form,
            headers=headers,
        )

    def _authenticate(self, form: dict[str, str]) -> tuple[dict[str, str], dict[str, str]]:
        """The form and headers carrying the client authentication."""
        creds = self.credentials
        if creds.method == "client_secret_post":
            form = {**form, "client_id": creds.client_id, "client_secret": creds.client_secret}
            return form, {}
        # RFC 6749 §2.3.1: id and secret are form-urlencoded before base64.
        pair = f"{quote(creds.client_id, safe='')}:{quote(creds.client_secret, safe='')}"
        return form, {"Authorization": "Basic " + base64.b64encode(pair.encode()).decode()}

    async def _post(self, form: dict[str, str]) -> TokenResponse:
        meta = await self.provider.metadata()
        data, headers = self._authenticate(form)
        status, body = await post_token_form(
            self.http, meta.token_endpoint, data, headers, "identity provider"
        )
        if not isinstance(body, dict):
            raise TokenEndpointError(
                "invalid_response", "token endpoint sent no JSON object", status
            )
        if status != 200 or "error" in body:
            raise TokenEndpointError(
                str(body.get("error", "invalid_response")),
                str(body.get("error_description", ""))[:300],
                status,
            )
        token = body.get("access_token")
        if not isinstance(token, str) or not token:
            raise TokenEndpointError("invalid_response", "no access_token in the response", 200)
        return TokenResponse(
            access_token=token,
            expires_in=_seconds(body.get("expires_in")),
            scope=_str(body.get("scope")),
            refresh_token=_str(body.get("refresh_token")),
            id_token=_str(body.get("id_token")),
        )


async def post_token_form(
    http: httpx.AsyncClient, url: str, data: dict[str, str], headers: dict[str, str], who: str
) -> tuple[int, Any]:
    """POST a token request; its status and JSON body (``None`` when not JSON). Unreachable
    or a 5xx is ``BrokerUnavailableError`` (``who``: the server's role, for the message)."""
    response = await request(
        http,
        "POST",
        url,
        who,
        "token endpoint",
        data=data,
        headers={**headers, "Accept": "application/json"},
    )
    if response.status_code >= 500:
        raise BrokerUnavailableError(f"token endpoint answered {response.status_code}")
    try:
        body: Any = parse_json(response.content)
    except ValueError:
        body = None
    return response.status_code, body


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _seconds(value: Any) -> int | None:
    """``expires_in`` as an int; some providers send it as a string."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return int(value)
    if isinstance(value, str) and value.isdigit():
        return int(value)
    return None
