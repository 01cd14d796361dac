"""httpx responses freed as they close, not at the next full garbage collection.

httpx's client wraps each response body in a stream that points back at the response (to set
``elapsed`` at close), and the response holds that stream: every request's response, request,
headers and connection-pool objects (~60 objects) stayed in a reference cycle until a full
collection, which holds the GIL and so stalls the ack thread too (``infra.gc_pacing``).
``release_body`` takes a closed response's body off it, which breaks the cycle; a
``ReleasingTransport`` does that for every response of the client it serves.

Example::

    transport = ReleasingTransport(httpx.AsyncHTTPTransport(verify=shared_ssl_context()))
    async with httpx.AsyncClient(transport=transport) as http:
        ...
"""

from __future__ import annotations

import weakref
from collections.abc import AsyncIterator

import httpx

__all__ = ["ReleasingTransport", "release_body"]

# What a closed response's ``stream`` becomes: an empty, stateless body. A closed response
# never reads its stream again (httpx raises ``StreamClosed`` first).
_CLOSED_BODY = httpx.ByteStream(b"")


def release_body(response: httpx.Response | None) -> None:
    """Take the (closed) ``response``'s body stream off it."""
    if response is not None:
        response.stream = _CLOSED_BODY


class _Released(httpx.AsyncByteStream):
    """A response body that releases itself from its response once closed."""

    def __init__(self, inner: httpx.AsyncByteStream, response: httpx.Response) -> None:
        self._inner = inner
        self._response = weakref.ref(response)

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self._inner:
            yield chunk

    async def aclose(self) -> None:
        try:
            await self._inner.aclose()
        finally:
            release_body(self._response())


class ReleasingTransport(httpx.AsyncBaseTransport):
    """``inner``, whose responses release their bodies when closed (see the module)."""

    def __init__(self, inner: httpx.AsyncBaseTransport) -> None:
        self._inner = inner

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self._inner.handle_async_request(request)
        assert isinstance(response.stream, httpx.AsyncByteStream)  # an async transport's
        response.stream = _Released(response.stream, response)
        return response

    async def aclose(self) -> None:
        await self._inner.aclose()
