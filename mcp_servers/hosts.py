"""Which ``Host`` (and browser ``Origin``) a reference server answers: DNS-rebinding protection.

A server answers only the host names it is configured with. The default is loopback
(``127.0.0.1``, ``localhost``, ``[::1]``, any port); a deployment adds the name it is reached
by behind a proxy or as a Kubernetes service (``tickets.internal``, ``ticketing.ops.svc``).
An entry without a port allows any port (and none); ``name:port`` allows that port only.
Requests for any other host get 421, and a browser ``Origin`` not on those hosts gets 403.

Example::

    transport_security(["127.0.0.1", "tickets.internal:443"])
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from mcp.server.transport_security import TransportSecuritySettings

DEFAULT_ALLOWED_HOSTS = ("127.0.0.1", "localhost", "[::1]")

# A DNS name or IPv4 address, or a bracketed IPv6 address; optional :port.
_HOST = re.compile(
    r"^(?P<name>\[[0-9a-f:.]+\]|[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*)"
    r"(:(?P<port>\d{1,5}))?$"
)


def normalize_allowed_host(entry: str) -> str:
    """``entry`` lower-cased, or ``ValueError`` saying what is wrong (no scheme, no path)."""
    value = entry.strip().lower()
    match = _HOST.match(value)
    if match is None or (match["port"] is not None and not 0 < int(match["port"]) < 65536):
        raise ValueError(
            f"{entry!r} is not a host name: give a name or address with an optional port, "
            "without scheme or path, e.g. tickets.internal or tickets.internal:8101"
        )
    return value


def transport_security(allowed_hosts: Iterable[str]) -> TransportSecuritySettings:
    """The SDK's Host/Origin settings for these entries (always enabled, never "any host")."""
    hosts: list[str] = []
    origins: list[str] = []
    for entry in allowed_hosts:
        host = normalize_allowed_host(entry)
        with_port = _HOST.match(host)
        assert with_port is not None  # normalize_allowed_host checked it
        variants = [host] if with_port["port"] else [host, f"{host}:*"]
        hosts += variants
        origins += [f"{scheme}://{v}" for scheme in ("http", "https") for v in variants]
    if not hosts:
        raise ValueError("allowed_hosts is empty: the server would answer no request")
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True, allowed_hosts=hosts, allowed_origins=origins
    )
