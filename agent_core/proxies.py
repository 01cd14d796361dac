"""Which proxy, if any, opsbot's MCP traffic to one server goes through.

The proxy variables (``HTTPS_PROXY``, ``HTTP_PROXY``, ``NO_PROXY``) are read once, by the
settings object (``infra.settings``); the MCP clients and the health probe are built with
``trust_env=False`` and get their proxy from here, decided once per server (its URL). Before,
httpx read them from the environment itself, and only where a client built its own transport:
the health probe went through the proxy while the sessions' shared pools did not.

``NO_PROXY`` is the usual comma-separated list: ``*`` (every host), a host name (that host and
its subdomains; a leading dot is the same), an IP address or network (``10.0.0.0/8``), each
optionally with ``:port``.

Example::

    proxies = Proxies(https="http://proxy.internal:3128", no_proxy=parse_no_proxy("localhost"))
    proxies.for_url("https://tickets.example.com/mcp")   # "http://proxy.internal:3128"
    proxies.for_url("http://localhost:8101/mcp")         # None: a direct connection
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from urllib.parse import urlsplit


@dataclass(frozen=True, slots=True)
class Proxies:
    """The proxy for ``http://`` and for ``https://`` URLs, and the hosts that bypass them."""

    http: str | None = None
    https: str | None = None
    no_proxy: tuple[str, ...] = ()

    def for_url(self, url: str) -> str | None:
        """The proxy URL to reach ``url`` through, or ``None`` for a direct connection."""
        parts = urlsplit(url)
        proxy = self.https if parts.scheme == "https" else self.http
        if not proxy or _bypassed(parts.hostname or "", parts.port, self.no_proxy):
            return None
        return proxy


DIRECT = Proxies()  # no proxy: every connection direct


def parse_no_proxy(value: str) -> tuple[str, ...]:
    """``NO_PROXY``'s entries, lower-cased, blanks dropped."""
    return tuple(e.strip().lower() for e in value.split(",") if e.strip())


def _bypassed(host: str, port: int | None, entries: tuple[str, ...]) -> bool:
    host = host.lower().strip("[]")
    for entry in entries:
        if entry == "*":
            return True
        name, entry_port = _split_port(entry)
        if entry_port is not None and entry_port != port:
            continue
        if _matches(host, name):
            return True
    return False


def _split_port(entry: str) -> tuple[str, int | None]:
    if entry.startswith("["):  # [::1]:8080
        name, _, rest = entry[1:].partition("]")
        return name, int(rest[1:]) if rest.startswith(":") and rest[1:].isdigit() else None
    if entry.count(":") == 1:
        name, _, port = entry.partition(":")
        if port.isdigit():
            return name, int(port)
    return entry, None


def _matches(host: str, entry: str) -> bool:
    try:
        network = ipaddress.ip_network(entry, strict=False)
    except ValueError:
        network = None
    if network is not None:
        try:
            return ipaddress.ip_address(host) in network
        except ValueError:
            return False
    name = entry.lstrip(".")
    return host == name or host.endswith("." + name)
