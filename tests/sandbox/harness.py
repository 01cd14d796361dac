"""An in-process emulator (web UI + Web API) wired to a small Bolt app over real signed HTTP.

The Bolt app records what it receives (``received``) and answers like an app would: ``/ops``
acks with text, the ``go`` button is acked, ``open`` opens the ``form`` modal (plain text,
number, static select) whose submission is validated (``count`` ≥ 1) and recorded.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
from slack_bolt.async_app import AsyncAck, AsyncApp
from slack_sdk.web.async_client import AsyncWebClient

from bot.slack import serve_http
from infra.serving import bind_socket, serve_asgi, socket_url
from infra.tls import shared_ssl_context
from sandbox import AppDelivery, SlackEmulator
from sandbox.web import build_app
from testing.slack_webapi import WebApi
from testing.slack_workspace import User, Workspace

BOT_TOKEN = "xoxb-sandbox-test"
SECRET = "sandbox-signing-secret"
PEOPLE = [
    User("UALICE", "alice", "Alice Anders", "alice@example.com", ("team-payments",)),
    User("UBOB", "bob", "Bob Brandt", "bob@example.com", ("team-payments", "ticket-leads")),
]

FORM: dict[str, Any] = {
    "type": "modal",
    "callback_id": "form",
    "title": {"type": "plain_text", "text": "A form"},
    "submit": {"type": "plain_text", "text": "Save"},
    "close": {"type": "plain_text", "text": "Cancel"},
    "blocks": [
        {
            "type": "input",
            "block_id": "title",
            "label": {"type": "plain_text", "text": "Title"},
            "element": {"type": "plain_text_input", "action_id": "t", "initial_value": "hello"},
        },
        {
            "type": "input",
            "block_id": "count",
            "label": {"type": "plain_text", "text": "Count"},
            "element": {"type": "number_input", "action_id": "n", "is_decimal_allowed": False},
        },
        {
            "type": "input",
            "block_id": "prio",
            "label": {"type": "plain_text", "text": "Priority"},
            "element": {
                "type": "static_select",
                "action_id": "p",
                "options": [
                    {"text": {"type": "plain_text", "text": "Low"}, "value": "low"},
                    {"text": {"type": "plain_text", "text": "High"}, "value": "high"},
                ],
            },
        },
    ],
}


@dataclass
class Harness:
    emulator: SlackEmulator
    api: WebApi
    client: AsyncWebClient
    app_url: str
    received: list[dict[str, Any]]
    http: httpx.AsyncClient
    ui_url: str

    def delivery(self, secret: str = SECRET) -> AppDelivery:
        return AppDelivery(f"{self.app_url}/slack/events", secret, self.http)


def bolt_app(client: AsyncWebClient, received: list[dict[str, Any]]) -> AsyncApp:
    app = AsyncApp(signing_secret=SECRET, client=client)

    @app.event("app_mention")
    async def mention(body: dict[str, Any]) -> None:
        received.append(body)

    @app.command("/ops")
    async def ops(ack: AsyncAck, command: dict[str, Any]) -> None:
        received.append(command)
        await ack(text=f"you said {command['text']}")

    @app.action("go")
    async def go(ack: AsyncAck, body: dict[str, Any]) -> None:
        await ack()
        received.append(body)

    @app.action("open")
    async def open_form(ack: AsyncAck, body: dict[str, Any], client: AsyncWebClient) -> None:
        await ack()
        await client.views_open(trigger_id=body["trigger_id"], view=FORM)

    @app.view("form")
    async def submitted(ack: AsyncAck, view: dict[str, Any]) -> None:
        values = view["state"]["values"]
        count = values["count"]["n"]["value"]
        if count is None or int(count) < 1:
            await ack(response_action="errors", errors={"count": "At least 1."})
            return
        await ack()
        received.append(values)

    return app


@contextlib.asynccontextmanager
async def open_harness() -> AsyncIterator[Harness]:
    workspace = Workspace.demo(PEOPLE)
    api = WebApi(workspace, BOT_TOKEN)
    ui_sock, app_sock = bind_socket(), bind_socket()
    ui_url = socket_url(ui_sock)
    async with httpx.AsyncClient(verify=shared_ssl_context()) as http:
        delivery = AppDelivery(f"{socket_url(app_sock)}/slack/events", SECRET, http)
        emulator = SlackEmulator(workspace, delivery, ui_url)
        client = AsyncWebClient(token=BOT_TOKEN, base_url=f"{ui_url}/api/")
        received: list[dict[str, Any]] = []
        async with (
            serve_asgi(build_app(emulator, api), ui_sock),  # type: ignore[arg-type]
            serve_http(bolt_app(client, received), app_sock) as app_url,
        ):
            yield Harness(emulator, api, client, app_url, received, http, ui_url)
            await emulator.aclose()
