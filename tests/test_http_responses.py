"""``infra.http_responses``: httpx responses freed as they close, with no garbage collector.

httpx's client wraps each body in a stream that points back at the response, so each
response, its request, headers and pool objects stayed in a reference cycle until a full
collection (which stalls the ack thread). The broker's client to the IdP is one such client.
"""

from __future__ import annotations

import weakref
from collections.abc import AsyncIterator

import httpx
import pytest
from aiohttp import web

from broker.factory import http_client
from infra.http_responses import ReleasingTransport
from infra.serving import bind_socket, serve_aiohttp

BODY = b"x" * 200_000  # several reads


@pytest.fixture
async def server() -> AsyncIterator[str]:
    async def answer(_: web.Request) -> web.Response:
        return web.Response(body=BODY)

    application = web.Application()
    application.router.add_get("/", answer)
    async with serve_aiohttp(application, bind_socket()) as url:
        yield url


async def test_a_read_response_is_freed_when_dropped(no_collector: None, server: str) -> None:
    transport = ReleasingTransport(httpx.AsyncHTTPTransport())
    async with httpx.AsyncClient(transport=transport) as http:
        response = await http.get(server)
        assert response.content == BODY
        freed = weakref.ref(response)
        del response
        assert freed() is None, "the response waits for the garbage collector"


async def test_a_stream_closed_unread_is_freed_and_the_client_goes_on(
    no_collector: None, server: str
) -> None:
    transport = ReleasingTransport(httpx.AsyncHTTPTransport())
    async with httpx.AsyncClient(transport=transport) as http:
        async with http.stream("GET", server) as response:
            assert response.status_code == 200
        # Closed: reading it is httpx's own error, not an empty body.
        with pytest.raises(httpx.StreamClosed):
            await response.aread()
        freed = weakref.ref(response)
        del response
        assert freed() is None
        assert (await http.get(server)).content == BODY


async def test_the_brokers_client_frees_its_responses(no_collector: None, server: str) -> None:
    async with http_client() as http:
        response = await http.get(server)
        assert response.status_code == 200
        freed = weakref.ref(response)
        del response
        assert freed() is None
