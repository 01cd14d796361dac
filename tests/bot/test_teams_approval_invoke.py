"""Reading a Teams card click (``adaptiveCard/action``): the decision it carries, edited values
coerced to the tool's schema types, and forged or malformed clicks refused with a clear 400."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from assistant.types import Approve, ChatUser, Reject
from bot.teams.approval_invoke import (
    BadAction,
    CardAction,
    card_response,
    coerce_edit,
    error_response,
    read_card_action,
)
from testing.fake_assistant import UPDATE_TICKET_SCHEMA

TENANT = "tenant-1"


def click(verb: str, **data: Any) -> dict[str, Any]:
    return {
        "type": "invoke",
        "name": "adaptiveCard/action",
        "id": "act-1",
        "channelId": "msteams",
        "serviceUrl": "http://127.0.0.1:1/",
        "from": {"id": "29:bob", "name": "Bob", "aadObjectId": "aad-bob"},
        "recipient": {"id": "28:bot"},
        "conversation": {"id": "19:c@thread.tacv2;messageid=5", "tenantId": TENANT},
        "channelData": {"tenant": {"id": TENANT}},
        "replyToId": "5",
        "value": {
            "action": {
                "type": "Action.Execute",
                "verb": verb,
                "data": {"approval_id": "ap-1", "v": "abc", **data},
            },
            "trigger": "manual",
        },
    }


def read(activity: dict[str, Any]) -> CardAction:
    action = read_card_action(activity)
    assert isinstance(action, CardAction), action
    return action


def test_approve_names_the_clicker_by_tenant_and_aad_object_id() -> None:
    action = read(click("approve"))
    assert action.clicker == ChatUser("teams", TENANT, "aad-bob")
    assert (action.approval_id, action.version, action.decision) == ("ap-1", "abc", Approve())
    assert (action.clicker_mri, action.reply_to_id, action.automatic) == ("29:bob", "5", False)


def test_reject_carries_the_reason_trimmed_or_none() -> None:
    assert read(click("reject", reject_reason="  not now ")).decision == Reject("not now")
    assert read(click("reject", reject_reason="   ")).decision == Reject(None)
    assert read(click("reject")).decision == Reject(None)


def test_views_decide_nothing_and_automatic_refresh_is_marked() -> None:
    activity = click("approval.view")
    activity["value"]["trigger"] = "automatic"
    action = read(activity)
    assert action.decision is None
    assert action.automatic


def test_edit_collects_only_argument_inputs() -> None:
    action = read(click("edit", **{"arg.status": "open", "arg.priority": "3", "other": "x"}))
    assert action.decision is None
    assert action.inputs == {"status": "open", "priority": "3"}


def test_tenant_falls_back_to_the_conversation() -> None:
    activity = click("approve")
    del activity["channelData"]
    assert read(activity).clicker.team_id == TENANT


def _without(path: list[str]) -> dict[str, Any]:
    activity = click("approve")
    node = activity
    for key in path[:-1]:
        node = node[key]
    del node[path[-1]]
    return activity


def _with(path: list[str], value: Any) -> dict[str, Any]:
    activity = copy.deepcopy(click("approve"))
    node = activity
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return activity


def _no_tenant() -> dict[str, Any]:
    activity = _without(["channelData"])
    del activity["conversation"]["tenantId"]
    return activity


@pytest.mark.parametrize(
    ("activity", "status"),
    [
        (_with(["value", "action", "verb"], "approve_all"), 400),
        (_with(["value", "action", "verb"], ""), 400),
        (_with(["value", "action", "type"], "Action.Submit"), 400),
        (_with(["value", "action", "data"], "ap-1"), 400),
        (_with(["value", "action", "data"], {"v": "abc"}), 400),
        (_with(["value", "action", "data"], {"approval_id": 7, "v": "abc"}), 400),
        (_with(["value", "action", "data"], {"approval_id": "x" * 500, "v": "abc"}), 400),
        (_with(["value", "action", "data"], {"approval_id": "ap-1\n", "v": "abc"}), 400),
        (_with(["value", "action", "data"], {"approval_id": "ap-1"}), 400),
        (_with(["value"], None), 400),
        (_with(["value"], "approve"), 400),
        (_without(["value"]), 400),
        (_with(["name"], "task/fetch"), 400),
        (_with(["type"], "message"), 400),
        (_with(["channelId"], "slack"), 400),
        (_with(["from"], "29:bob"), 400),
        (_without(["from", "aadObjectId"]), 401),
        (_with(["from", "aadObjectId"], ""), 401),
        (_no_tenant(), 401),
        ({}, 400),
    ],
)
def test_malformed_or_forged_clicks_are_refused(activity: dict[str, Any], status: int) -> None:
    action = read_card_action(activity)
    assert isinstance(action, BadAction)
    assert action.status == status
    assert action.message
    assert "Traceback" not in action.message
    body = error_response(action.status, action.message)
    assert body["statusCode"] == status
    assert body["value"]["message"] == action.message


def test_reject_reason_must_be_text() -> None:
    assert isinstance(read_card_action(click("reject", reject_reason=["x"])), BadAction)


CURRENT = {"ticket_id": "PAY-1", "status": "closed", "priority": 2}


def test_coerce_edit_types_values_from_the_schema() -> None:
    parsed = coerce_edit(
        UPDATE_TICKET_SCHEMA,
        CURRENT,
        {"ticket_id": "PAY-1", "status": "in_progress", "priority": "4", "comment": "later"},
    )
    assert parsed.field_errors == {}
    assert parsed.args == {
        "ticket_id": "PAY-1",
        "status": "in_progress",
        "priority": 4,
        "comment": "later",
    }


def test_coerce_edit_empty_optional_drops_and_missing_keeps() -> None:
    parsed = coerce_edit(UPDATE_TICKET_SCHEMA, CURRENT, {"priority": "", "comment": ""})
    assert parsed.field_errors == {}
    assert parsed.args == {"ticket_id": "PAY-1", "status": "closed"}


@pytest.mark.parametrize(
    ("inputs", "errors"),
    [
        ({"priority": "1.5"}, {"priority": "must be a whole number"}),
        ({"priority": "many"}, {"priority": "must be a number"}),
        ({"priority": "nan"}, {"priority": "must be a finite number"}),
        ({"priority": True}, {"priority": "must be a number"}),
        ({"status": "deleted"}, {"status": "must be one of: open, in_progress, closed"}),
        ({"status": ""}, {"status": "is required"}),
        ({"ticket_id": 5}, {"ticket_id": "must be text"}),
        ({"owner": "mallory"}, {"owner": "is not an argument of this tool"}),
        ({"comment": "x" * 20_001}, {"comment": "is too long (over 20000 characters)"}),
    ],
)
def test_coerce_edit_reports_each_bad_field(inputs: dict[str, Any], errors: dict[str, str]) -> None:
    assert coerce_edit(UPDATE_TICKET_SCHEMA, CURRENT, inputs).field_errors == errors


def test_coerce_edit_booleans_and_json_arguments() -> None:
    schema = {
        "type": "object",
        "properties": {"notify": {"type": "boolean"}, "labels": {"type": "array"}},
    }
    parsed = coerce_edit(schema, {}, {"notify": "true", "labels": '["a", "b"]'})
    assert parsed.args == {"notify": True, "labels": ["a", "b"]}
    assert not parsed.field_errors
    bad = coerce_edit(schema, {}, {"notify": "yes", "labels": "[a"})
    assert bad.field_errors == {"notify": "must be true or false", "labels": "must be valid JSON"}
    deep = coerce_edit(schema, {}, {"labels": "[" * 5_000})  # was a RecursionError
    assert deep.field_errors == {"labels": "must be valid JSON"}


def test_card_response_is_the_adaptive_card_invoke_body() -> None:
    body = card_response({"type": "AdaptiveCard"})
    assert body == {
        "statusCode": 200,
        "type": "application/vnd.microsoft.card.adaptive",
        "value": {"type": "AdaptiveCard"},
    }
