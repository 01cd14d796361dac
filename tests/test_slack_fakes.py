"""Both fakes of Slack's Web API (the tests' ``FakeSlack`` and the sandbox's emulator) refuse
what Slack refuses, with Slack's error: the rules are ``testing.slack_api``, stated once."""

from __future__ import annotations

from typing import Any

import pytest
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from testing.slack import BOT_TOKEN, FakeSlack
from testing.slack_webapi import WebApi
from testing.slack_workspace import User, Workspace

TOO_MANY = [{"type": "divider"}] * 101
LONG_BUTTON = {
    "type": "actions",
    "elements": [{"type": "button", "text": {"type": "plain_text", "text": "x" * 76}}],
}
BAD_ARGS = "invalid_arguments"
CASES: list[tuple[str, dict[str, Any], str]] = [
    ("chat.postMessage", {"channel": "C1"}, "no_text"),
    ("chat.postMessage", {"channel": "C1", "blocks": TOO_MANY[:51]}, "invalid_blocks"),
    ("chat.postMessage", {"channel": "C1", "text": "x", "blocks": [LONG_BUTTON]}, "invalid_blocks"),
    (
        "views.publish",
        {"user_id": "U1", "view": {"type": "home", "blocks": TOO_MANY}},
        "invalid_arguments",
    ),
    (
        "views.publish",
        {"user_id": "U1", "view": {"type": "modal", "blocks": []}},
        "invalid_arguments",
    ),
]


@pytest.mark.parametrize(("method", "params", "error"), CASES)
async def test_the_tests_fake_refuses_what_slack_refuses(
    fake_slack: FakeSlack, method: str, params: dict[str, Any], error: str
) -> None:
    client = AsyncWebClient(token=BOT_TOKEN, base_url=fake_slack.url)
    with pytest.raises(SlackApiError) as refused:
        await client.api_call(method, json=params)
    assert refused.value.response["error"] == error


@pytest.mark.parametrize(("method", "params", "error"), CASES)
def test_the_sandbox_refuses_the_same(method: str, params: dict[str, Any], error: str) -> None:
    workspace = Workspace.demo([User("U1", "alice", "Alice", "alice@example.com", ())])
    api = WebApi(workspace, "xoxb-sandbox")
    channel = workspace.resolve_channel("ops-approvals").id
    call = {**params, "channel": channel} if "channel" in params else params
    assert api.call(method, call, "xoxb-sandbox") == {"ok": False, "error": error}
