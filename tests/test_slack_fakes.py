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
    # agent features: each refusal below was once checked by one fake only, or differently
    ("chat.startStream", {"channel": "C1", "markdown_text": "hi"}, BAD_ARGS),  # no thread_ts
    (
        "chat.startStream",
        {
            "channel": "C1",
            "thread_ts": "1.0",
            "recipient_user_id": "U1",
            "recipient_team_id": "T1",
            "chunks": [{"type": "task_update", "id": "t1", "status": "in_progress"}],  # no title
        },
        "invalid_chunks",
    ),
    (
        "chat.appendStream",
        {"channel": "C1", "ts": "1.0", "markdown_text": "x" * 12_001},
        "msg_too_long",
    ),
    (
        "assistant.threads.setTitle",
        {"channel_id": "D1", "thread_ts": "1.0", "title": " "},
        BAD_ARGS,
    ),
    (
        "assistant.threads.setSuggestedPrompts",
        {"channel_id": "D1", "thread_ts": "1.0", "prompts": [{"title": "Status"}]},  # no message
        BAD_ARGS,
    ),
    (
        "agents.sessions.setStatus",
        {"channel_id": "D1", "thread_ts": "1.0", "status": "asleep"},
        "invalid_status",
    ),
]


@pytest.mark.parametrize(("method", "params", "error"), CASES)
async def test_the_tests_fake_refuses_what_slack_refuses(
    fake_slack: FakeSlack, method: str, params: dict[str, Any], error: str
) -> None:
    fake_slack.agent_features = True  # streams and sessions, as the sandbox has them
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
