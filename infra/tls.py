"""One TLS context for every HTTP client opsbot creates.

``httpx.AsyncClient()`` builds a new ``ssl.SSLContext`` each time, loading the whole CA
bundle: ~50 ms of CPU, on the event loop. Clients made per probe, per JWKS fetch or per
linking step paid it every time (a ``/readyz`` probe once per HTTP dependency). Every client
passes ``verify=shared_ssl_context()`` instead; the context is built once, on first use, the
same way httpx builds its default (certifi's bundle, or ``SSL_CERT_FILE``/``SSL_CERT_DIR``).
An ``SSLContext`` may be shared by connections on any thread or loop.

Example::

    async with httpx.AsyncClient(verify=shared_ssl_context()) as http:
        ...
"""

from __future__ import annotations

import functools
import ssl

import httpx

__all__ = ["shared_ssl_context"]


@functools.cache
def shared_ssl_context() -> ssl.SSLContext:
    """The process's one client TLS context (built on the first call)."""
    return httpx.create_ssl_context()
