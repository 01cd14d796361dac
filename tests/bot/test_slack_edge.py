"""``POST /slack/events`` under hostile input, over HTTP against the running app: the size
limit, the signature before any parsing, malformed payloads (400 and one warning line, never a
500 or a traceback), kinds opsbot does not handle (200, ignored), other workspaces, message
length limits and private ``/ops`` subcommands."""

from __future__ import annotations

import asyncio
import json
import logging
import urllib.parse
from typing import Any

import pytest

from bot.slack.listeners import SUBCOMMANDS
from testing.fake_assistant import FakeAssistant
from testing.slack import (
    APP_ID,
    TEAM_ID,
    SlackSender,
    block_action,
    direct_message,
    mention,
    view_submission,
)
from tests.bot.conftest import ALICE, RunApp, SlackEnv
from tests.bot.test_slack_events import _texts

in_process_only = pytest.mark.parametrize("run_app", ["in_process"], indirect=True)
UNSIGNED = "v0=" + "0" * 64


def _records(caplog: pytest.LogCaptureFixture, level: int) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.levelno >= level and r.name.startswith("bot.")]


def _assert_no_traceback(caplog: pytest.LogCaptureFixture) -> None:
    tracebacks = [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]
    assert tracebacks == [], [r.getMessage() for r in tracebacks]


def _command_form(**overrides: Any) -> str:
    form = {
        "token": "unused",
        "team_id": TEAM_ID,
        "channel_id": "C0GENERAL",
        "channel_name": "general",
        "user_id": ALICE.user_id,
        "command": "/ops",
        "text": "status",
        "api_app_id": APP_ID,
        "response_url": "https://hooks.slack.invalid/commands/1",
        "trigger_id": "1.2.abc",
    }
    form.update(overrides)
    return urllib.parse.urlencode({k: v for k, v in form.items() if v is not None})


def _interaction(payload: dict[str, Any]) -> str:
    return urllib.parse.urlencode({"payload": json.dumps(payload)})


def _smuggled(payload: dict[str, Any]) -> str:
    hidden = "&payload=" + urllib.parse.quote(json.dumps(payload)) + "&"
    return " " + json.dumps({"type": "url_verification", "challenge": "c", "z": hidden})


def _edit_view() -> dict[str, Any]:
    return {
        "type": "modal",
        "callback_id": "approval_edit_submit",
        "private_metadata": json.dumps({"a": "apr-1"}),
        "blocks": [],
    }


@in_process_only
@pytest.mark.parametrize(
    ("body", "content_type"),
    [
        ("{", "application/json"),
        ("null", "application/json"),
        ("[]", "application/json"),
        ('{"type": "event_callback", "event": 5}', "application/json"),
        ("payload=%7B", "application/x-www-form-urlencoded"),
        (b"\xff\xfe\x00{", "application/json"),
    ],
)
async def test_unsigned_garbage_is_refused_before_it_is_parsed(
    env: SlackEnv,
    fake_assistant: FakeAssistant,
    caplog: pytest.LogCaptureFixture,
    body: str | bytes,
    content_type: str,
) -> None:
    caplog.set_level(logging.INFO)
    for override in (UNSIGNED, "garbage", "v0=ü"):
        status, text = await env.sender.post_raw(body, content_type, signature_override=override)
        assert status == 401, text
    status, _ = await env.sender.post_raw(body, content_type, timestamp=10**15)
    assert status == 401
    _assert_no_traceback(caplog)
    assert len(_records(caplog, logging.WARNING)) == 4  # one line per request
    assert fake_assistant.messages == []


@in_process_only
async def test_a_body_over_the_size_limit_gets_413(
    env: SlackEnv, fake_assistant: FakeAssistant, caplog: pytest.LogCaptureFixture
) -> None:
    event = mention(ALICE.user_id, "x" * (600 * 1024))
    status, _ = await env.sender.post_event(event)
    assert status == 413
    status, _ = await env.sender.post_raw("{" * (600 * 1024), signature_override=UNSIGNED)
    assert status == 413
    _assert_no_traceback(caplog)
    assert fake_assistant.messages == []


def _malformed_cases() -> dict[str, tuple[str, str]]:
    sender = SlackSender("unused")
    json_type = "application/json"
    form = "application/x-www-form-urlencoded"

    def event(**changes: Any) -> str:
        ev = mention(ALICE.user_id, "hi", ts="9.1")
        ev.update(changes)
        return json.dumps(sender.envelope({k: v for k, v in ev.items() if v is not None}))

    def envelope(**changes: Any) -> str:
        body = sender.envelope(mention(ALICE.user_id, "hi", ts="9.2"))
        body.update(changes)
        return json.dumps(body)

    action = block_action(ALICE.user_id, "approval_approve", "apr-1")
    action_edit = block_action(ALICE.user_id, "approval_edit", "apr-1")
    submitted = view_submission(ALICE.user_id, _edit_view(), {})
    no_metadata = view_submission(ALICE.user_id, {**_edit_view(), "private_metadata": ""}, {})
    no_state = {**submitted, "view": {k: v for k, v in submitted["view"].items() if k != "state"}}
    return {
        "signed but not JSON": ("{", json_type),
        "a JSON array": ("[1, 2]", json_type),
        "JSON null": ("null", json_type),
        "mention without user": (event(user=None), json_type),
        "user of the wrong type": (event(user=42), json_type),
        "channel of the wrong type": (event(channel=["C1"]), json_type),
        "text of the wrong type": (event(text={"a": 1}), json_type),
        "10 KB event_id": (envelope(event_id="E" * 10_000), json_type),
        # Ids with a control character: a NUL in the event id failed its dedup insert on
        # PostgreSQL (a 500); in a channel or ts it would fail the run's thread row.
        "a NUL in event_id": (envelope(event_id="Ev\x00X"), json_type),
        "a NUL in team_id": (envelope(team_id="T\x00"), json_type),
        "a NUL in channel": (event(channel="C0GENERAL\x00"), json_type),
        "an escape in user": (event(user="U0ALICE\x1b"), json_type),
        "a NUL in ts": (event(ts="9.3\x00"), json_type),
        "event not an object": (envelope(event="app_mention"), json_type),
        "team_id of the wrong type": (envelope(team_id=7), json_type),
        "authorizations not a list": (envelope(authorizations=3), json_type),
        "app_home_opened without user": (
            json.dumps(sender.envelope({"type": "app_home_opened", "tab": "home"})),
            json_type,
        ),
        "block_actions without actions": (_interaction({**action, "actions": []}), form),
        "block_actions with a string user": (_interaction({**action, "user": "U0ALICE"}), form),
        # An interaction names its team as an object; a string one (found by the fuzz test)
        # reached the listener, which failed with a 500.
        "block_actions with a string team": (_interaction({**action, "team": "T0SANDBOX"}), form),
        "view_submission with a string team": (_interaction({**submitted, "team": "0"}), form),
        "action value of 10 KB": (
            _interaction({**action, "actions": [{"action_id": "x", "value": "v" * 10_000}]}),
            form,
        ),
        "approve button without value": (
            _interaction({**action, "actions": [{"action_id": "approval_approve"}]}),
            form,
        ),
        "view_submission without private_metadata": (_interaction(no_metadata), form),
        # each was a 500 (Bolt refused the empty errors the listener answered) or, in the
        # reject modal, a decision dropped after the ack
        "view_submission whose private_metadata is not opsbot's": (
            _interaction(
                view_submission(ALICE.user_id, {**_edit_view(), "private_metadata": "nope"}, {})
            ),
            form,
        ),
        "view_submission whose private_metadata names no approval": (
            _interaction(
                view_submission(ALICE.user_id, {**_edit_view(), "private_metadata": '{"a": 5}'}, {})
            ),
            form,
        ),
        "view_submission with a selected_option that is not an object": (
            _interaction(
                view_submission(
                    ALICE.user_id,
                    _edit_view(),
                    {"arg:status": {"value": {"type": "static_select", "selected_option": "x"}}},
                )
            ),
            form,
        ),
        "an Edit click without a trigger_id": (
            _interaction({k: v for k, v in action_edit.items() if k != "trigger_id"}),
            form,
        ),
        "view_submission without state": (_interaction(no_state), form),
        "view_submission with values of the wrong type": (
            _interaction({**submitted, "view": {**submitted["view"], "state": {"values": [1]}}}),
            form,
        ),
        "interaction payload not JSON": ("payload=%7Bnope", form),
        # A body the screen read as JSON and Bolt as a form (it compares the content type
        # verbatim and needs a leading "{"): a hidden payload ran past every check.
        "a payload hidden in JSON sent as Application/JSON": (
            _smuggled({**action, "user": "U0ALICE"}),
            "Application/JSON",
        ),
        "a payload hidden in JSON sent with a spaced content type": (
            _smuggled({**action, "user": "U0ALICE"}),
            "application/json ; charset=utf-8",
        ),
        # JSON nested deeper than Python's stack: a RecursionError, not a ValueError (500)
        "JSON nested 100,000 deep": ("[" * 100_000, json_type),
        "an object nested 60,000 deep": ('{"a":' * 60_000, json_type),
        "a payload nested 60,000 deep": ("payload=" + "%5B" * 60_000, form),
        "an integer of 5,000 digits": (
            '{"type": "event_callback", "x": ' + "9" * 5000 + "}",
            json_type,
        ),
        "command without user_id": (_command_form(user_id=None), form),
        "command with a 10 KB trigger_id": (_command_form(trigger_id="t" * 10_000), form),
        "command with a NUL in channel_id": (_command_form(channel_id="C\x00"), form),
    }


MALFORMED = _malformed_cases()


@in_process_only
@pytest.mark.parametrize("case", list(MALFORMED))
async def test_malformed_signed_payloads_get_400_and_one_warning(
    env: SlackEnv, fake_assistant: FakeAssistant, caplog: pytest.LogCaptureFixture, case: str
) -> None:
    caplog.set_level(logging.INFO)
    body, content_type = MALFORMED[case]
    status, text = await env.sender.post_raw(body, content_type)
    assert status == 400, (status, text)
    assert "malformed" in text
    warnings = _records(caplog, logging.WARNING)
    assert len(warnings) == 1, [r.getMessage() for r in warnings]
    assert len(warnings[0].getMessage()) < 600  # a 10 KB field is not copied into the log
    _assert_no_traceback(caplog)
    await env.fake.settle(quiet=0.1)
    assert fake_assistant.messages == []
    assert [c.method for c in env.fake.calls if c.method != "auth.test"] == []


@in_process_only
async def test_kinds_opsbot_does_not_handle_get_an_empty_200(
    env: SlackEnv, fake_assistant: FakeAssistant, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    reaction = {"type": "reaction_added", "user": 5, "item": {"channel": 7}}
    for body, content_type in [
        (json.dumps(env.sender.envelope(reaction)), "application/json"),
        (json.dumps({"type": "app_rate_limited", "team_id": TEAM_ID}), "application/json"),
        (_interaction({"type": "shortcut", "callback_id": "x", "user": 3}), "x-www-form"),
        (_interaction({"type": "view_closed", "view": "?"}), "application/x-www-form-urlencoded"),
        (_command_form(command="/other", user_id=None), "application/x-www-form-urlencoded"),
        ("ssl_check=1&token=x", "application/x-www-form-urlencoded"),
        ('{"no": "type"}', "application/json"),
    ]:
        assert await env.sender.post_raw(body, content_type) == (200, ""), body
    _assert_no_traceback(caplog)
    assert _records(caplog, logging.WARNING) == []
    assert fake_assistant.messages == []


@in_process_only
async def test_url_verification_and_a_valid_message_still_work(env: SlackEnv) -> None:
    body = json.dumps({"type": "url_verification", "challenge": "c-123", "token": "x"})
    status, text = await env.sender.post_raw(body)
    assert status == 200
    assert "c-123" in text
    status, _ = await env.sender.post_event(mention(ALICE.user_id, "is PAY-1 open?", ts="3.3"))
    assert status == 200
    update = (await env.fake.wait_for("chat.update"))[0]
    assert "PAY-1 is open" in _texts(update["blocks"])


# -- workspaces ----------------------------------------------------------------------------


async def test_events_from_another_workspace_are_ignored(
    env: SlackEnv, fake_assistant: FakeAssistant, caplog: pytest.LogCaptureFixture
) -> None:
    """``ALLOWED_TEAM_IDS`` is empty: only the token's own workspace (``auth.test``) is served,
    whatever team the envelope claims."""
    caplog.set_level(logging.INFO)
    other = SlackSender(env.url, team_id="T0OTHER", session=env.sender.session)
    status, body = await other.post_event(
        mention("U0MALLORY", "close PAY-1", team="T0OTHER", ts="4.1")
    )
    assert (status, body) == (200, "")
    status, _ = await other.post_event(
        direct_message("U0MALLORY", "hi", team="T0OTHER", channel="D0MAL", ts="4.2")
    )
    assert status == 200
    # A guest from another team in a shared channel of ours is not served either.
    status, _ = await env.sender.post_event(
        mention("U0GUEST", "close PAY-1", team="T0GUEST", ts="4.3")
    )
    assert status == 200
    await env.fake.settle(quiet=0.2)
    assert fake_assistant.messages == []
    assert [c.method for c in env.fake.calls if c.method != "auth.test"] == []
    ignored = [r for r in caplog.records if "not served" in r.getMessage()]
    assert len(ignored) == 3
    status, _ = await env.sender.post_event(mention(ALICE.user_id, "is PAY-1 open?", ts="4.4"))
    await env.fake.wait_for("chat.update")
    assert [m[0] for m in fake_assistant.messages] == [ALICE]


@in_process_only
async def test_configured_teams_are_served_besides_the_home_team(
    run_app: RunApp, fake_assistant: FakeAssistant
) -> None:
    guest = "T0PARTNER"
    fake_assistant.link(type(ALICE)("slack", guest, "U0PARTNER"), "partner", set())
    async with run_app(fake_assistant, allowed_team_ids=frozenset({guest})) as env:
        partner = SlackSender(env.url, team_id=guest, session=env.sender.session)
        await partner.post_event(mention("U0PARTNER", "is PAY-1 open?", team=guest, ts="5.5"))
        await env.fake.wait_for("chat.update")
        stranger = SlackSender(env.url, team_id="T0OTHER", session=env.sender.session)
        await stranger.post_event(mention("U0X", "hi", team="T0OTHER", ts="5.6"))
        await env.fake.settle(quiet=0.2)
    assert [m[0].user_id for m in fake_assistant.messages] == ["U0PARTNER"]


# -- input limits --------------------------------------------------------------------------


async def test_an_overlong_message_gets_a_private_polite_refusal(
    env: SlackEnv, fake_assistant: FakeAssistant
) -> None:
    long_text = "please look at this " + "x" * 4_000
    status, _ = await env.sender.post_event(direct_message(ALICE.user_id, long_text, ts="6.1"))
    assert status == 200
    status, _ = await env.sender.post_event(mention(ALICE.user_id, long_text, ts="6.2"))
    assert status == 200
    refusals = await env.fake.wait_for("chat.postEphemeral", 2)
    await env.fake.settle(quiet=0.2)
    assert {r["channel"] for r in refusals} == {"D0ALICE", "C0GENERAL"}
    assert all(r["user"] == ALICE.user_id for r in refusals)
    assert all("opsbot reads up to 4,000" in r["text"] for r in refusals)
    assert all("xxxx" not in r["text"] for r in refusals)
    assert fake_assistant.messages == []
    assert env.fake.calls_to("chat.postMessage") == []
    # At the limit, a message is answered.
    await env.sender.post_event(direct_message(ALICE.user_id, "y" * 4_000, ts="6.3"))
    await env.fake.wait_for("chat.postMessage")
    assert [len(m[2]) for m in fake_assistant.messages] == [4_000]


async def test_an_overlong_ops_ask_is_refused_privately_and_never_echoed(
    env: SlackEnv, fake_assistant: FakeAssistant
) -> None:
    status, body = await env.sender.post_command("ask " + "z" * 100_000, user=ALICE.user_id)
    assert status == 200
    ack = json.loads(body)
    assert ack["response_type"] == "ephemeral"
    assert "100,000 characters" in ack["text"]
    assert "zzzz" not in body
    await env.fake.settle(quiet=0.2)
    assert env.fake.calls_to("chat.postMessage") == []
    assert fake_assistant.messages == []


@in_process_only
async def test_the_message_limit_is_configurable(
    run_app: RunApp, fake_assistant: FakeAssistant
) -> None:
    async with run_app(fake_assistant, max_message_chars=10) as env:
        status, body = await env.sender.post_command("ask is PAY-1 open?", user=ALICE.user_id)
        assert status == 200
        assert "opsbot reads up to 10" in json.loads(body)["text"]
        status, body = await env.sender.post_command("ask PAY-1?", user=ALICE.user_id)
        assert status == 200
        assert "On it" in body
        await env.fake.wait_for("chat.update")


# -- /ops subcommands ------------------------------------------------------------------------


@in_process_only
@pytest.mark.parametrize("text", ["help", "", "whoami", "pending", "status", "memory", "frob"])
async def test_ops_subcommands_answer_privately_and_never_post(
    env: SlackEnv, fake_assistant: FakeAssistant, text: str
) -> None:
    status, body = await env.sender.post_command(text, user=ALICE.user_id)
    assert status == 200
    ack = json.loads(body)
    assert ack["response_type"] == "ephemeral"
    await env.fake.settle(quiet=0.2)
    assert env.fake.calls_to("chat.postMessage") == []
    assert fake_assistant.messages == []


@in_process_only
async def test_ops_help_lists_every_subcommand_with_an_example(env: SlackEnv) -> None:
    _, body = await env.sender.post_command("help", user=ALICE.user_id)
    text = _texts(json.loads(body)["blocks"])
    lines = [line for line in text.splitlines() if line.startswith("• ")]
    assert len(lines) == len(SUBCOMMANDS)
    for (usage, _what, example), line in zip(SUBCOMMANDS, lines, strict=True):
        assert line.startswith(f"• `/ops {usage}`")
        assert f"Example: `/ops {example}`" in line
    _, body = await env.sender.post_command("frobnicate", user=ALICE.user_id)
    unknown = _texts(json.loads(body)["blocks"])
    assert "`frobnicate` is not an /ops command" in unknown
    assert "Example: `/ops ask" in unknown


@in_process_only
async def test_ops_whoami_and_pending_say_who_and_what_is_waiting(
    env: SlackEnv, fake_assistant: FakeAssistant
) -> None:
    _, body = await env.sender.post_command("whoami", user=ALICE.user_id)
    whoami = json.loads(body)["text"]
    assert "<@U0ALICE>" in whoami
    assert "alice@example.com" in whoami
    _, body = await env.sender.post_command("pending", user=ALICE.user_id)
    assert "no requests waiting" in json.loads(body)["text"]
    await env.sender.post_event(mention(ALICE.user_id, "update PAY-1 status=closed", ts="8.1"))
    await env.fake.wait_for("chat.postMessage", where=lambda p: p["channel"] == "ops-approvals")
    _, body = await env.sender.post_command("pending", user=ALICE.user_id)
    assert "ticketing_update_ticket" in json.loads(body)["text"]
    _, body = await env.sender.post_command("pending", user="U0ERIN")
    assert "not connected" in json.loads(body)["text"]


@in_process_only
async def test_a_failing_subcommand_is_a_private_message_not_a_500(
    env: SlackEnv, fake_assistant: FakeAssistant, caplog: pytest.LogCaptureFixture
) -> None:
    async def broken(_user: object) -> None:
        raise RuntimeError("link store down")

    fake_assistant.status = broken  # type: ignore[method-assign,assignment]
    status, body = await env.sender.post_command("whoami", user=ALICE.user_id)
    assert status == 200
    ack = json.loads(body)
    assert ack["response_type"] == "ephemeral"
    assert "could not do that right now" in ack["text"]
    assert "link store down" not in body
    await asyncio.sleep(0)


@in_process_only
async def test_clicks_and_modals_no_listener_claims_get_an_empty_200(
    env: SlackEnv, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    click = block_action(ALICE.user_id, "retired_button", "x")
    status, body = await env.sender.post_interaction(click)
    assert (status, body) == (200, "")
    stale = view_submission(ALICE.user_id, {"type": "modal", "callback_id": "old_modal"}, {})
    status, body = await env.sender.post_interaction(stale)
    assert (status, body) == (200, "")
    assert _records(caplog, logging.WARNING) == []
    assert len([r for r in caplog.records if "ignored" in r.getMessage()]) == 2
