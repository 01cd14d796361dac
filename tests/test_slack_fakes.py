"""The fake Slack refuses what Slack refuses, with Slack's error, on both of its wires: the
tests' ``FakeSlack`` (open world, over HTTP) and the sandbox's ``WebApi`` over a closed
``Workspace``. The rules are ``testing.slack_api``, stated once."""

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


async def _conversation(call: Any) -> list[str]:
    """One conversation of Web API calls; what each answer was (``ok`` or its error)."""
    answers: list[str] = []

    async def said(method: str, **params: Any) -> dict[str, Any]:
        answer: dict[str, Any] = await call(method, params)
        answers.append("ok" if answer["ok"] else str(answer["error"]))
        return answer

    card = await said("chat.postMessage", channel="ops-approvals", text="card")
    await said("chat.update", channel=card["channel"], ts=card["ts"], text="decided")
    asked = await said("chat.postMessage", channel="D1", text="asked")
    stream = await said(
        "chat.startStream", channel="D1", thread_ts=asked["ts"], markdown_text="Looking"
    )
    await said("chat.appendStream", channel="D1", ts=stream["ts"], markdown_text=" it up")
    await said(
        "chat.stopStream",
        channel="D1",
        ts=stream["ts"],
        chunks=[{"type": "plan_update", "title": "Done"}],
    )
    await said("chat.appendStream", channel="D1", ts=stream["ts"], markdown_text="late")
    await said("assistant.threads.setTitle", channel_id="D1", thread_ts=asked["ts"], title="PAY")
    await said("assistant.threads.setStatus", channel_id="C0OPS", thread_ts="1.0", status="x")
    await said("chat.delete", channel=card["channel"], ts=card["ts"])
    await said("chat.update", channel=card["channel"], ts=card["ts"], text="again")
    await said("views.update", view_id="VNOPE", view={"type": "modal", "blocks": []})
    return answers


async def test_the_tests_fake_and_the_sandbox_are_one_slack(fake_slack: FakeSlack) -> None:
    """The same calls get the same answers from the tests' ``FakeSlack`` (over HTTP) and the
    sandbox's ``WebApi``: one state model, and the tests read it as the sandbox shows it."""
    fake_slack.agent_features = True
    client = AsyncWebClient(token=BOT_TOKEN, base_url=fake_slack.url)

    async def over_http(method: str, params: dict[str, Any]) -> dict[str, Any]:
        try:
            return dict((await client.api_call(method, json=params)).data)  # type: ignore[arg-type]
        except SlackApiError as refused:
            return dict(refused.response.data)  # type: ignore[arg-type]

    workspace = Workspace.demo([User("U1", "alice", "Alice", "alice@example.com", ())])
    api = WebApi(workspace, "xoxb-sandbox")

    async def in_the_sandbox(method: str, params: dict[str, Any]) -> dict[str, Any]:
        return api.call(method, params, "xoxb-sandbox")

    expected = ["ok"] * 6 + ["message_not_in_streaming_state", "ok", "channel_not_found"]
    expected += ["ok", "message_not_found", "not_found"]
    assert await _conversation(over_http) == expected
    assert await _conversation(in_the_sandbox) == expected
    # what the tests read is the workspace's state
    (streamed,) = [m for m in fake_slack.messages.values() if "streaming" in m]
    assert (streamed["text"], streamed["streaming"]) == ("Looking it up", False)
    key = (streamed["channel"], streamed["ts"])
    assert [c["type"] for c in fake_slack.streams[key]] == ["markdown_text"] * 2 + ["plan_update"]
    assert fake_slack.workspace.titles == workspace.titles != {}
