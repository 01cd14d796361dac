"""Slack's side of the Events API and interactivity: signed requests to the app.

Bodies are signed exactly as Slack signs them, by the signer every fake Slack shares
(``testing.slack.signature``); ``X-Slack-Request-Timestamp`` is the Unix time. Events are
JSON ``event_callback`` envelopes with a fresh ``event_id``; slash commands are forms;
interactions are forms with one ``payload`` field (JSON).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

import httpx

from testing.slack import signature
from testing.slack_workspace import APP_ID, BOT_USER_ID, TEAM_ID


def new_event_id() -> str:
    return f"Ev{uuid.uuid4().hex[:12].upper()}"


@dataclass(frozen=True, slots=True)
class AppResponse:
    status: int
    body: str

    def json(self) -> dict[str, Any] | None:
        """The app's JSON answer (a command's or a view submission's ack), if any."""
        if not self.body.strip():
            return None
        try:
            data = json.loads(self.body)
        except ValueError:
            return None
        return data if isinstance(data, dict) else None


@dataclass
class AppDelivery:
    """Posts signed requests to the app's request URL (``…/slack/events``)."""

    request_url: str
    signing_secret: str = field(repr=False)
    http: httpx.AsyncClient
    clock: Callable[[], float] = time.time

    async def _post(
        self, body: bytes, content_type: str, extra: dict[str, str] | None = None
    ) -> AppResponse:
        timestamp = str(int(self.clock()))
        headers = {
            **(extra or {}),
            "Content-Type": content_type,
            "X-Slack-Request-Timestamp": timestamp,
            "X-Slack-Signature": signature(self.signing_secret, timestamp, body),
            "User-Agent": "Slackbot 1.0 (+https://api.slack.com/robots) opsbot-sandbox",
        }
        response = await self.http.post(self.request_url, content=body, headers=headers)
        return AppResponse(response.status_code, response.text)

    async def event(self, event: dict[str, Any], event_id: str, retry_num: int = 0) -> AppResponse:
        """One delivery of an event; a retry repeats ``event_id`` with Slack's retry headers."""
        envelope = {
            "token": "sandbox",
            "team_id": TEAM_ID,
            "api_app_id": APP_ID,
            "event": event,
            "type": "event_callback",
            "event_id": event_id,
            "event_time": int(self.clock()),
            "event_context": uuid.uuid4().hex,
            "authorizations": [
                {
                    "enterprise_id": None,
                    "team_id": TEAM_ID,
                    "user_id": BOT_USER_ID,
                    "is_bot": True,
                    "is_enterprise_install": False,
                }
            ],
            "is_ext_shared_channel": False,
        }
        extra = (
            {"X-Slack-Retry-Num": str(retry_num), "X-Slack-Retry-Reason": "http_error"}
            if retry_num
            else None
        )
        return await self._post(json.dumps(envelope).encode(), "application/json", extra)

    async def interaction(self, payload: dict[str, Any]) -> AppResponse:
        body = urlencode({"payload": json.dumps(payload)}).encode()
        return await self._post(body, "application/x-www-form-urlencoded")

    async def command(self, form: dict[str, str]) -> AppResponse:
        return await self._post(urlencode(form).encode(), "application/x-www-form-urlencoded")
