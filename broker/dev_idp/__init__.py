"""A development OIDC / OAuth 2.0 identity provider. DEVELOPMENT AND TESTS ONLY.

It stands in for Keycloak, Okta or Entra on one machine: discovery, JWKS (RSA keys generated
at start), authorization code + PKCE with a login page listing the demo users, refresh tokens,
RFC 8693 token exchange (client authentication required) and user revocation. State lives in
memory and is lost on restart.

Example::

    idp = DevIdentityProvider(
        "http://127.0.0.1:8100", load_directory(),
        clients=[DevClient("opsbot", "secret")],
        audiences={"ticketing": "http://127.0.0.1:8101/mcp"},
    )
    async with serve_asgi(build_app(idp), bind_socket("127.0.0.1", 8100)) as url: ...

Errors: ``DirectoryError`` (bad directory file); ``OAuthError`` is internal to the HTTP layer.
"""

from broker.dev_idp.app import build_app
from broker.dev_idp.directory import (
    DEFAULT_DIRECTORY_PATH,
    Directory,
    DirectoryError,
    DirectoryUser,
    Resource,
    load_directory,
    parse_directory,
)
from broker.dev_idp.provider import (
    ACCESS_TOKEN_TYPE,
    TOKEN_EXCHANGE_GRANT,
    DevClient,
    DevIdentityProvider,
    DevIdpStats,
    OAuthError,
    TokenRules,
)

__all__ = [
    "ACCESS_TOKEN_TYPE",
    "DEFAULT_DIRECTORY_PATH",
    "TOKEN_EXCHANGE_GRANT",
    "DevClient",
    "DevIdentityProvider",
    "DevIdpStats",
    "Directory",
    "DirectoryError",
    "DirectoryUser",
    "OAuthError",
    "Resource",
    "TokenRules",
    "build_app",
    "load_directory",
    "parse_directory",
]
