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

from collections.abc import Iterable

from mcp.server.transport_security import TransportSecuritySettings

from infra.settings import normalize_host_entry

DEFAULT_ALLOWED_HOSTS = ("127.0.0.1", "localhost", "[::1]")


def normalize_allowed_host(entry: str) -> str:
    """``entry`` lower-cased, or ``ValueError`` saying what is wrong (no scheme, no path)."""
    # One rule for the settings and here (the settings validate before any server is built).
    return normalize_host_entry(entry)


def transport_security(allowed_hosts: Iterable[str]) -> TransportSecuritySettings:
    """The SDK's Host/Origin settings for these entries (always enabled, never "any host")."""
    hosts: list[str] = []
    origins: list[str] = []
    for entry in allowed_hosts:
        host = normalize_allowed_host(entry)
        has_port = not host.endswith("]") and ":" in host
        variants = [host] if has_port else [host, f"{host}:*"]
        hosts += variants
        origins += [f"{scheme}://{v}" for scheme in ("http", "https") for v in variants]
    if not hosts:
        raise ValueError("allowed_hosts is empty: the server would answer no request")
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True, allowed_hosts=hosts, allowed_origins=origins
    )
