"""Teams alone serves ``/oauth/callback`` with the shared handler, naming Teams on its pages."""

from __future__ import annotations

import aiohttp
from aiohttp import web

from bot.teams.server import link_callback_route
from infra.serving import bind_socket, socket_url


async def test_teams_link_callback_pages() -> None:
    async def complete(state: str, code: str, iss: str | None) -> str:
        if state == "used":
            raise ValueError("state already used")
        return f"bob ({iss})"

    application = web.Application()
    application.add_routes([link_callback_route(complete)])
    runner = web.AppRunner(application)
    await runner.setup()
    sock = bind_socket("127.0.0.1", 0)
    await web.SockSite(runner, sock).start()
    url = socket_url(sock)
    try:
        async with aiohttp.ClientSession() as http:
            async with http.get(f"{url}/oauth/callback?state=s&code=c&iss=idp") as ok:
                assert ok.status == 200
                assert "Connected as bob (idp). You can go back to Teams." in await ok.text()
            async with http.get(f"{url}/oauth/callback?state=used&code=c") as used:
                assert used.status == 400
                assert "already used. Ask opsbot again in Teams" in await used.text()
            async with http.get(f"{url}/oauth/callback?state=s") as incomplete:
                assert incomplete.status == 400
                assert "incomplete" in await incomplete.text()
    finally:
        await runner.cleanup()
