"""Teams approval cards: Adaptive Card 1.5 structure, the refresh audience, inputs generated
from the tool's schema, field errors beside their inputs, and the terminal card per state.

No Adaptive Card 1.5 JSON schema is available offline, so ``check_card`` asserts the parts of
the 1.5 schema these cards use: known element and action types, required properties, unique
input ids, ``Action.Execute`` only with a verb and our ``data``, and the size limit.
"""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest

from assistant.types import ApprovalView, ChatUser, Decided, PlatformRef
from bot.teams.approval_cards import (
    APPROVE_VERB,
    EDIT_VERB,
    EDIT_VIEW_VERB,
    MAX_CARD_BYTES,
    REJECT_VERB,
    VIEW_VERB,
    approver_card,
    base_card,
    card_digest,
    decided_card,
    edit_card,
    edit_fields,
)
from testing.fake_assistant import UPDATE_TICKET_SCHEMA

ELEMENTS = {
    "TextBlock": {"text"},
    "RichTextBlock": {"inlines"},
    "FactSet": {"facts"},
    "ActionSet": {"actions"},
    "Container": {"items"},
    "Input.Text": {"id"},
    "Input.Number": {"id"},
    "Input.Toggle": {"id", "title"},
    "Input.ChoiceSet": {"id", "choices"},
}
ACTIONS = {"Action.Execute", "Action.ShowCard", "Action.OpenUrl"}
COLORS = {"Default", "Dark", "Light", "Accent", "Good", "Warning", "Attention"}


def check_card(card: dict[str, Any], *, top: bool = True) -> list[dict[str, Any]]:
    """Assert the Adaptive Card 1.5 rules these cards rely on; return every action found."""
    assert card["type"] == "AdaptiveCard"
    if top:
        assert card["version"] == "1.5"
        assert isinstance(card["fallbackText"], str)
        assert card["fallbackText"]
        assert len(json.dumps(card, ensure_ascii=False).encode()) <= MAX_CARD_BYTES
    actions: list[dict[str, Any]] = []
    ids: list[str] = []

    def action(a: dict[str, Any]) -> None:
        assert a["type"] in ACTIONS, a
        assert isinstance(a.get("title"), str)
        actions.append(a)
        if a["type"] == "Action.Execute":
            assert a["verb"]
            assert set(a["data"]) == {"approval_id", "v"}
        if a["type"] == "Action.ShowCard":
            assert "version" not in a["card"]  # a ShowCard's card inherits the version
            actions.extend(check_card(a["card"], top=False))

    def element(e: dict[str, Any]) -> None:
        kind = e["type"]
        assert kind in ELEMENTS, kind
        assert ELEMENTS[kind] <= set(e), e
        if kind.startswith("Input."):
            ids.append(e["id"])
            assert isinstance(e.get("label", ""), str)
        if kind == "RichTextBlock":
            for run in e["inlines"]:
                assert run["type"] == "TextRun"
                assert isinstance(run["text"], str)
                assert run.get("color", "Default") in COLORS
        if kind == "FactSet":
            assert all(set(f) == {"title", "value"} for f in e["facts"])
        if kind == "ActionSet":
            for a in e["actions"]:
                action(a)
        if kind == "Input.ChoiceSet":
            assert all(isinstance(c["value"], str) for c in e["choices"])

    for e in card["body"]:
        element(e)
    for a in card.get("actions", []):
        action(a)
    assert len(ids) == len(set(ids)), ids
    if "refresh" in card:
        refresh = card["refresh"]
        assert refresh["action"]["type"] == "Action.Execute"
        assert refresh["action"]["verb"] == VIEW_VERB
        assert len(refresh["userIds"]) <= 60
    return actions


def view(**changes: Any) -> ApprovalView:
    base = ApprovalView(
        approval_id="ap-1",
        tool="ticketing__update_ticket",
        server="ticketing",
        args={"ticket_id": "PAY-1", "status": "closed", "priority": 2},
        requester="alice",
        requester_chat_user=ChatUser("teams", "tenant-1", "aad-alice"),
        requester_ref=PlatformRef("teams", "tenant-1", "19:c@thread.tacv2", "1"),
        reads=["ticketing__get_ticket PAY-1"],
        expires_at=datetime(2026, 12, 2, 13, 0, tzinfo=UTC),
        input_schema=UPDATE_TICKET_SCHEMA,
        description="Close the ticket",
    )
    return replace(base, **changes)


def texts(card: dict[str, Any]) -> str:
    """Every piece of text the card shows, in order (for wording asserts)."""
    found: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for key in ("text", "title", "value", "label", "fallbackText"):
                if isinstance(node.get(key), str):
                    found.append(node[key])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(card)
    return "\n".join(found)


def verbs(actions: list[dict[str, Any]]) -> list[str]:
    return [a["verb"] for a in actions if a["type"] == "Action.Execute"]


def test_base_card_is_read_only_and_refreshes_only_for_approvers() -> None:
    card = base_card(view(), ["29:bob", "29:carol", "29:bob", ""])
    assert verbs(check_card(card)) == []
    assert card["refresh"]["userIds"] == ["29:bob", "29:carol"]
    assert card["refresh"]["action"]["data"] == {"approval_id": "ap-1", "v": card_digest(view())}
    shown = texts(card)
    for fact in ("Approval: ticketing · ticketing\\_\\_update\\_ticket", "alice", "PAY-1"):
        assert fact in shown
    assert "{{DATE(2026-12-02T13:00:00Z, SHORT)}}" in shown
    assert "ticketing__get_ticket PAY-1" in shown  # the chain of reads


def test_refresh_lists_at_most_sixty_approvers() -> None:
    card = base_card(view(), [f"29:u{i}" for i in range(75)])
    assert len(card["refresh"]["userIds"]) == 60


def test_approver_card_has_approve_edit_and_reject_with_reason() -> None:
    card = approver_card(view(), ["29:bob"])
    actions = check_card(card)
    assert verbs(actions) == [APPROVE_VERB, EDIT_VIEW_VERB, REJECT_VERB]
    action_set = next(e for e in card["body"] if e["type"] == "ActionSet")
    assert action_set["fallback"] == "drop"  # old clients show no button that cannot work
    show = next(a for a in actions if a["type"] == "Action.ShowCard")
    assert show["card"]["body"][0]["id"] == "reject_reason"


def test_outside_text_is_never_markdown() -> None:
    evil = "[click me](https://evil.example) **urgent**"
    card = approver_card(view(args={"ticket_id": evil, "status": "open"}, description=evil), [])
    check_card(card)
    for element in card["body"]:
        if element["type"] == "TextBlock":  # markdown is read only in our own labels
            assert "evil.example" not in element["text"]
    runs = [r["text"] for e in card["body"] if e["type"] == "RichTextBlock" for r in e["inlines"]]
    assert evil in runs
    assert any(evil in r for r in runs)


def test_card_digest_changes_with_what_would_run() -> None:
    assert card_digest(view()) == card_digest(view())
    assert card_digest(view()) != card_digest(view(args={"ticket_id": "PAY-2", "status": "closed"}))


def test_edited_arguments_are_marked_with_the_original_shown() -> None:
    edited = view(
        args={"ticket_id": "PAY-1", "status": "in_progress"},
        original_args={"ticket_id": "PAY-1", "status": "closed"},
        edited_by="bob",
        state="succeeded",
        status="succeeded",
        decided_by="bob",
    )
    card = decided_card(edited, "ap-1")
    check_card(card)
    shown = texts(card)
    assert "Approved with edits" in shown
    runs = shown[shown.index("edited by bob") : shown.index("Originally proposed")]
    proposed = shown[shown.index("Originally proposed") :]
    # Under the edited mark: what runs (the edit), never the model's proposal (invariant 11).
    assert "in_progress" in runs
    assert "closed" not in runs
    assert "closed" in proposed


def test_edit_inputs_follow_the_input_schema() -> None:
    card = edit_card(view(args={"ticket_id": "PAY-1", "status": "closed", "flag": [1]}), ["29:b"])
    actions = check_card(card)
    assert verbs(actions) == [EDIT_VERB, VIEW_VERB]
    inputs = {e["id"]: e for e in card["body"] if e["type"].startswith("Input.")}
    assert inputs["arg.ticket_id"]["type"] == "Input.Text"
    assert inputs["arg.ticket_id"]["value"] == "PAY-1"
    assert inputs["arg.ticket_id"]["isRequired"] is True
    assert inputs["arg.status"]["type"] == "Input.ChoiceSet"
    assert [c["value"] for c in inputs["arg.status"]["choices"]] == [
        "open",
        "in_progress",
        "closed",
    ]
    assert inputs["arg.status"]["value"] == "closed"
    assert inputs["arg.priority"] == {
        "type": "Input.Number",
        "min": 1,
        "max": 5,
        "id": "arg.priority",
        "label": "priority",
    }  # no value: the argument is not set
    assert "isRequired" not in inputs["arg.comment"]
    # an argument the schema does not name is still shown (as JSON), never dropped
    assert inputs["arg.flag"]["value"] == "[1]"
    back = next(a for a in actions if a.get("verb") == VIEW_VERB)
    assert back["associatedInputs"] == "none"


def test_edit_card_booleans_are_toggles() -> None:
    schema = {"type": "object", "properties": {"notify": {"type": ["boolean", "null"]}}}
    fields = edit_fields(schema, {"notify": True})
    assert [(f.name, f.kind) for f in fields] == [("notify", "boolean")]
    card = edit_card(view(input_schema=schema, args={"notify": True}), [])
    check_card(card)
    toggle = next(e for e in card["body"] if e["type"] == "Input.Toggle")
    assert (toggle["value"], toggle["valueOn"], toggle["valueOff"]) == ("true", "true", "false")


def test_field_errors_appear_under_their_inputs() -> None:
    card = edit_card(
        view(),
        [],
        values={"ticket_id": "PAY-1", "status": "closed", "priority": 9},
        field_errors={"priority": "must be at most 5", "": "too many changes"},
    )
    check_card(card)
    body = card["body"]
    at = next(i for i, e in enumerate(body) if e.get("id") == "arg.priority")
    assert body[at]["value"] == 9  # what the approver typed stays in the input
    after = body[at + 1]
    assert after["type"] == "RichTextBlock"
    assert after["inlines"][0]["text"] == "⚠ must be at most 5"
    assert after["inlines"][0]["color"] == "Attention"
    assert "⚠ too many changes" in texts(card)


@pytest.mark.parametrize(
    ("state", "decision", "reason", "words"),
    [
        ("succeeded", "approved", None, ["✅ Approved by bob", "✅ done"]),
        ("failed", "approved", "the server refused", ["❌ failed: the server refused"]),
        ("unknown", "approved", None, ["outcome unknown — being reconciled"]),
        ("rejected", "rejected", "not now", ["⛔ Rejected by bob", "rejected, nothing was run"]),
        ("expired", "expired", None, ["⌛ Expired", "expired before anyone decided"]),
        ("withdrawn", "withdrawn", None, ["↩️ Withdrawn by bob"]),
    ],
)
def test_terminal_card_per_state(
    state: str, decision: str, reason: str | None, words: list[str]
) -> None:
    decided = Decided(
        approval_id="ap-1",
        decision=decision,
        decided_by="bob",
        outcome=state,
        requester_ref=None,
        requester_result=None,
        state=state,
        outcome_reason=reason,
    )
    card = decided_card(view(state=state, status=state), "ap-1", decided=decided)
    assert verbs(check_card(card)) == []
    assert "refresh" not in card  # nobody gets buttons again
    shown = texts(card)
    for word in words:
        assert word in shown, (word, shown)
    if decision == "expired":
        assert "by bob" not in shown


def test_terminal_card_from_the_view_alone_and_without_a_view() -> None:
    done = view(state="rejected", status="rejected", decided_by="carol", outcome_reason="no")
    assert "Rejected by carol" in texts(decided_card(done, "ap-1"))
    bare = Decided("ap-9", "approved", "bob", "succeeded", None, None, state="succeeded")
    card = decided_card(None, "ap-9", decided=bare)
    check_card(card)
    assert "Approval ap-9" in texts(card)


def test_huge_arguments_keep_the_card_under_the_limit() -> None:
    args = {f"k{i}": "x" * 400 for i in range(400)}
    for card in (base_card(view(args=args), []), approver_card(view(args=args), [])):
        check_card(card)
