"""``opsbot dev --keep`` over HTTP against the real process: alice and bob connect (in the Teams
view, through the dev IdP's login page), alice asks for a write; the sandbox is stopped and
started again with ``--keep`` on the same data directory: both are still connected (alice's
question is answered with the ticket, so the IdP still honours her refresh token), the
approval is still pending with its card, and bob's approval closes the ticket. Without
``--keep`` the same data directory starts from the seed data: nobody is connected."""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from infra.tls import shared_ssl_context
from testing.identity import sign_in_at_login_page
from tests.sandbox.sandbox_process import DevProcess, spawn_opsbot_dev

pytestmark = pytest.mark.timeout(300)

WAIT_S = 60.0
Messages = list[dict[str, Any]]


async def teams_state(http: httpx.AsyncClient, dev: DevProcess, user: str) -> dict[str, Any]:
    reply = await http.get(f"{dev.url}/teams/state", params={"user": user})
    assert reply.status_code == 200, reply.text
    state: dict[str, Any] = reply.json()
    return state


async def wait_for(
    http: httpx.AsyncClient, dev: DevProcess, user: str, place: str, check: Callable[[str], bool]
) -> Messages:
    """Until ``check`` holds for the JSON of what ``user`` sees in ``place``; on a timeout the
    failure shows what every place holds and what the process logged."""
    seen: dict[str, Messages] = {}
    try:
        async with asyncio.timeout(WAIT_S):
            while True:
                seen = (await teams_state(http, dev, user))["messages"]
                if check(json.dumps(seen[place])):
                    return seen[place]
                await asyncio.sleep(0.3)
    except TimeoutError:
        raise AssertionError(
            f"{user} did not see it in {place} within {WAIT_S} s; {user} sees:\n"
            f"{json.dumps(seen, indent=1)[-6000:]}\nopsbot dev logged:\n{dev.stderr()[-6000:]}"
        ) from None


async def say(http: httpx.AsyncClient, dev: DevProcess, user: str, text: str) -> None:
    reply = await http.post(
        f"{dev.url}/teams/say", json={"user": user, "place": "chat", "text": text}
    )
    assert reply.status_code == 200, reply.text


async def connect(http: httpx.AsyncClient, dev: DevProcess, user: str) -> None:
    """The sign-in card of ``user``'s chat → the dev IdP's login page → the app's callback."""
    await say(http, dev, user, "hello")
    messages = await wait_for(http, dev, user, "chat", lambda seen: '"Sign in"' in seen)
    (login,) = [
        action["url"]
        for m in messages
        for card in m["cards"]
        for action in card.get("actions", [])
        if action.get("title") == "Sign in"
    ]
    callback = parse_qs(urlsplit(login).query)["redirect_uri"][0]
    reply = await http.get(callback, params=await sign_in_at_login_page(http, login, user))
    assert reply.status_code == 200, reply.text


@contextlib.asynccontextmanager
async def running(data_dir: Path, *args: str) -> AsyncIterator[DevProcess]:
    """``opsbot dev *args`` with the bot ready; stopped with Ctrl-C (it must exit 0)."""
    async with spawn_opsbot_dev(data_dir, *args) as dev:
        await dev.wait_ready()
        await dev.wait_bot_ready()
        yield dev
        assert await dev.stop(signal.SIGINT) == 0, dev.stderr()


async def test_keep_carries_links_and_a_pending_approval_over_a_restart(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    async with httpx.AsyncClient(verify=shared_ssl_context(), timeout=60) as http:
        async with running(data_dir, "--keep") as dev:
            assert "kept across restarts" in "".join(dev.output)
            await connect(http, dev, "alice")
            await connect(http, dev, "bob")
            await say(http, dev, "alice", "close ticket PAY-102 because merchants re-exported")
            await wait_for(http, dev, "bob", "approvals", lambda seen: '"Approve"' in seen)

        async with running(data_dir, "--keep") as dev:
            # still connected: a question is answered from the ticketing server
            await say(http, dev, "alice", "show ticket PAY-101")
            await wait_for(http, dev, "alice", "chat", lambda seen: "tickets/PAY-101" in seen)
            # the approval is still pending, its card still there with bob's buttons
            (card,) = await wait_for(
                http, dev, "bob", "approvals", lambda seen: '"Approve"' in seen
            )
            approve = next(
                action
                for element in card["cards"][0]["body"]
                if element.get("type") == "ActionSet"
                for action in element["actions"]
                if action.get("title") == "Approve"
            )
            reply = await http.post(
                f"{dev.url}/teams/click",
                json={
                    "user": "bob",
                    "key": card["key"],
                    "verb": "approve",
                    "data": approve["data"],
                },
            )
            assert reply.status_code == 200, reply.text
            assert "Approved" in json.dumps(reply.json())

    assert await dev.ticket_history("PAY-102") == ([("close_ticket", "alice")], "closed")


async def test_without_keep_the_same_data_directory_starts_from_the_seed_data(
    tmp_path: Path,
) -> None:
    data_dir = tmp_path / "data"
    async with httpx.AsyncClient(verify=shared_ssl_context(), timeout=60) as http:
        async with running(data_dir, "--keep") as dev:
            await connect(http, dev, "alice")
        async with running(data_dir) as dev:
            assert "reset on every start" in "".join(dev.output)
            assert (await teams_state(http, dev, "alice"))["messages"]["chat"] == []
            await say(http, dev, "alice", "show ticket PAY-101")
            await wait_for(http, dev, "alice", "chat", lambda seen: '"Sign in"' in seen)
