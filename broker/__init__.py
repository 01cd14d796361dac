"""Identity and credentials: account links, IdP token validation, RFC 8693 token exchange.

Public API::

    from broker import Identity, ChatUser, AccessToken, Broker
    from broker import BrokerError, NotLinkedError, AccessRevokedError
"""

from broker.errors import (
    AccessRevokedError,
    BrokerError,
    BrokerUnavailableError,
    ExchangeFailedError,
    NotLinkedError,
)
from broker.types import AccessToken, Broker, ChatUser, Identity

__all__ = [
    "AccessRevokedError",
    "AccessToken",
    "Broker",
    "BrokerError",
    "BrokerUnavailableError",
    "ChatUser",
    "ExchangeFailedError",
    "Identity",
    "NotLinkedError",
]
