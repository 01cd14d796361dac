"""Identity and credentials: account links, IdP token validation, RFC 8693 token exchange.

Public API::

    from broker import Identity, ChatUser, AccessToken, Broker, IdentityService
    from broker import BrokerError, NotLinkedError, AccessRevokedError
    from broker import InProcessBroker, ServerTarget, RemoteBroker, LocalIdentityService
    from broker import LinkStore, MemoryLinkStore, SqlLinkStore, TokenCipher, LinkingService
    from broker import OidcProvider, open_identity_service

``open_identity_service(settings, engine)`` gives the configured service (in-process or the
remote broker service). The development IdP lives in ``broker.dev_idp`` (dev/test only).
"""

from broker.errors import (
    AccessRevokedError,
    BrokerError,
    BrokerUnavailableError,
    ConnectRequired,
    ExchangeFailedError,
    InvalidStateError,
    LinkBrokenError,
    LinkingError,
    NotLinkedError,
    TokenVerificationError,
)
from broker.factory import (
    load_link_cipher,
    open_identity_service,
    open_inprocess_broker,
    open_token_client,
)
from broker.inprocess import InProcessBroker, ServerTarget
from broker.linking import LinkingService, LinkResult
from broker.links import (
    AccountLink,
    LinkStore,
    MemoryLinkStore,
    PendingLogin,
    SqlLinkStore,
    TokenCipher,
)
from broker.local import LocalIdentityService
from broker.metrics import BrokerMetrics
from broker.oidc import OidcProvider
from broker.remote import RemoteBroker
from broker.types import (
    AccessToken,
    Broker,
    ChatUser,
    Identity,
    IdentityService,
    LinkCompleter,
    ServerConnection,
    ServerConnector,
    TokensByServer,
)

__all__ = [
    "AccessRevokedError",
    "AccessToken",
    "AccountLink",
    "Broker",
    "BrokerError",
    "BrokerMetrics",
    "BrokerUnavailableError",
    "ChatUser",
    "ConnectRequired",
    "ExchangeFailedError",
    "Identity",
    "IdentityService",
    "InProcessBroker",
    "InvalidStateError",
    "LinkBrokenError",
    "LinkCompleter",
    "LinkResult",
    "LinkStore",
    "LinkingError",
    "LinkingService",
    "LocalIdentityService",
    "MemoryLinkStore",
    "NotLinkedError",
    "OidcProvider",
    "PendingLogin",
    "RemoteBroker",
    "ServerConnection",
    "ServerConnector",
    "ServerTarget",
    "SqlLinkStore",
    "TokenCipher",
    "TokenVerificationError",
    "TokensByServer",
    "load_link_cipher",
    "open_identity_service",
    "open_inprocess_broker",
    "open_token_client",
]
