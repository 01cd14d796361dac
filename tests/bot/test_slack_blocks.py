"""Block Kit rendering and modal parsing, without a server."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bot.slack.cards import approval_card, decided_card
from bot.slack.core import Answer, ApprovalView, ChatUser, Source
from bot.slack.modals import ModalContext, edit_modal, field_errors_to_blocks, parse_edit
from bot.slack.render import answer_messages, split_text, to_mrkdwn
from testing.fake_assistant import UPDATE_TICKET_SCHEMA
from testing.slack import number_value, select_value, text_value


@given(st.text(alphabet=st.sampled_from("ab \n"), max_size=9000), st.integers(20, 3000))
def test_split_text_keeps_every_chunk_within_the_limit(text: str, limit: int) -> None:
    chunks = split_text(text, limit)
    assert all(0 < len(c) <= limit for c in chunks)
    assert "".join(chunks).replace(" ", "").replace("\n", "") == text.replace(" ", "").replace(
        "\n", ""
    )


def test_markdown_becomes_mrkdwn_and_control_characters_are_escaped() -> None:
    text = "**Done**: see [PAY-1](https://t.test/PAY-1) <!channel> & <@U1>"
    out = to_mrkdwn(text, frozenset({"https://t.test/PAY-1"}))
    assert out == "*Done*: see <https://t.test/PAY-1|PAY-1> &lt;!channel&gt; &amp; &lt;@U1&gt;"


def test_a_link_no_tool_result_carried_keeps_only_its_label() -> None:
    text = "see [PAY-1](https://evil.test/login) and [PAY-2](https://t.test/PAY-2)"
    assert to_mrkdwn(text, frozenset({"https://t.test/PAY-2"})) == (
        "see PAY-1 and <https://t.test/PAY-2|PAY-2>"
    )
    answer = Answer(text, sources=[Source("ticketing", "PAY-2", "https://t.test/PAY-2")])
    rendered = str(answer_messages(answer)[0].blocks)
    assert "evil.test" not in rendered
    assert "<https://t.test/PAY-2|ticketing PAY-2>" in rendered


def test_huge_answer_is_paginated_within_block_and_text_limits() -> None:
    answer = Answer(
        "x " * 200_000, sources=[Source("docs", str(i), f"https://d.test/{i}") for i in range(300)]
    )
    messages = answer_messages(answer)
    assert len(messages) > 1
    for message in messages:
        assert 0 < len(message.blocks) <= 50
        assert len(message.text) <= 3000
        for block in message.blocks:
            assert len(block["text"]["text"]) <= 3000


def test_source_without_a_web_link_is_plain_text() -> None:
    blocks = answer_messages(Answer("a", sources=[Source("db", "job-7", "javascript:x")]))
    assert "• db job-7" in blocks[0].blocks[1]["text"]["text"]


def _view(args: dict[str, Any], schema: dict[str, Any] = UPDATE_TICKET_SCHEMA) -> ApprovalView:
    return ApprovalView(
        approval_id="ap9",
        tool="ticketing_update_ticket",
        server="ticketing",
        args=args,
        requester="alice@example.com",
        requester_chat_user=ChatUser("slack", "T", "U1"),
        requester_ref=None,
        reads=[],
        expires_at=datetime(2026, 12, 2, 13, tzinfo=UTC),
        input_schema=schema,
    )


def test_card_lists_arguments_and_decided_card_has_no_buttons() -> None:
    view = _view({"ticket_id": "PAY-1", "tags": ["a", "b"], "note": "x" * 900})
    card = approval_card(view)
    assert card.blocks[-1]["type"] == "actions"
    text = "\n".join(b.get("text", {}).get("text", "") for b in card.blocks)
    assert '• *tags*: `["a", "b"]`' in text
    assert "…" in text  # long values are cut in the card, not in the call
    assert "_no reads before this proposal_" in _context_text(card.blocks)
    done = decided_card(view, "ap9", "rejected", "bob", "rejected")
    assert all(b["type"] != "actions" for b in done.blocks)


def _context_text(blocks: list[dict[str, Any]]) -> str:
    return "\n".join(
        e.get("text", "") for b in blocks if b["type"] == "context" for e in b["elements"]
    )


def _words(text: str) -> set[str]:
    return {w.strip("*`_:·()").lower() for w in text.split()} - {""}


def test_card_says_each_fact_once_with_an_alert_for_risk_and_expiry() -> None:
    view = replace(
        _view({"ticket_id": "PAY-1"}),
        reads=["ticketing_get_ticket PAY-1", "docs_search refunds"],
        approver_group="ticket-leads",
    )
    card = approval_card(view)
    kinds = [b["type"] for b in card.blocks]
    assert kinds[0] == "header"
    assert kinds[-1] == "actions"
    header = card.blocks[0]["text"]["text"]
    assert header == "ticketing · ticketing_update_ticket"
    fields = " ".join(
        f["text"] for b in card.blocks if b["type"] == "section" for f in b.get("fields", [])
    )
    buttons = " ".join(e["text"]["text"] for e in card.blocks[-1]["elements"])
    # header, fields and buttons share no word
    assert not _words(header) & _words(fields)
    assert not _words(header) & _words(buttons)
    assert not _words(fields) & _words(buttons)
    assert "<@U1>" in fields
    assert "ticket-leads" in fields
    # risk and expiry: one alert, with the expiry as a date every reader sees in their zone
    alerts = [b for b in card.blocks if b["type"] == "alert"]
    assert len(alerts) == 1
    assert alerts[0]["level"] == "warning"
    assert "*ticketing*" in alerts[0]["text"]["text"]
    assert "<!date^1796216400^" in alerts[0]["text"]["text"]
    assert "Expires" not in fields
    # the chain of reads: one context line, in order
    reads = _context_text(card.blocks)
    assert reads.count("\n") == 0
    assert reads.index("ticketing_get_ticket PAY-1") < reads.index("docs_search refunds")
    # decided: the same facts without the buttons or the "expires" alert
    done = decided_card(view, "ap9", "approved", "bob", "done")
    assert [b["type"] for b in done.blocks].count("alert") == 0
    assert all(b["type"] != "actions" for b in done.blocks)
    assert "docs_search refunds" in _context_text(done.blocks)


def test_modal_types_cover_arrays_numbers_booleans_and_optional_fields() -> None:
    schema = {
        "type": "object",
        "properties": {
            "tags": {"type": "array", "items": {"type": "string"}},
            "ratio": {"type": "number"},
            "urgent": {"type": "boolean"},
            "note": {"type": ["string", "null"], "maxLength": 5},
        },
        "required": ["tags"],
    }
    modal = edit_modal(_view({"tags": ["a"], "urgent": True}, schema), ModalContext("ap9"))
    elements = {b["block_id"]: b["element"] for b in modal["blocks"] if b["type"] == "input"}
    assert elements["arg:tags"]["initial_value"] == '["a"]'
    assert elements["arg:ratio"]["is_decimal_allowed"] is True
    assert [o["value"] for o in elements["arg:urgent"]["options"]] == ["true", "false"]
    assert elements["arg:urgent"]["initial_option"]["value"] == "true"
    args, errors = parse_edit(
        schema,
        {
            "arg:tags": text_value('["x", "y"]'),
            "arg:ratio": number_value("0.5"),
            "arg:urgent": select_value("false"),
            "arg:note": text_value("too long"),
        },
    )
    assert args == {"tags": ["x", "y"], "ratio": 0.5, "urgent": False}
    assert errors == {"arg:note": "At most 5 characters."}
    _, errors = parse_edit(schema, {"arg:tags": text_value('{"not": "a list"}')})
    assert errors == {"arg:tags": "Enter a JSON array."}
    # nested deeper than Python's stack (a RecursionError escaped the modal's checks)
    for typed in ("[" * 100_000, "[" + "9" * 5000 + "]"):
        _, errors = parse_edit(schema, {"arg:tags": text_value(typed)})
        assert errors == {"arg:tags": "Enter a JSON array."}


def test_tampered_select_value_is_rejected() -> None:
    _, errors = parse_edit(
        UPDATE_TICKET_SCHEMA,
        {"arg:ticket_id": text_value("PAY-1"), "arg:status": select_value('"deleted"')},
    )
    assert errors == {"arg:status": "Choose one of the listed values."}
    # an option whose value is not JSON: the parser's words were shown to the approver
    _, errors = parse_edit(
        UPDATE_TICKET_SCHEMA,
        {"arg:ticket_id": text_value("PAY-1"), "arg:status": select_value("closed")},
    )
    assert errors == {"arg:status": "Choose one of the listed values."}


def test_a_card_location_from_a_channel_object_or_id() -> None:
    """A click names its channel as an object; one naming it by id (the screen lets it
    through) failed the listener: the click was dropped with no answer."""
    from bot.slack.listeners import _card_location

    assert _card_location({"channel": {"id": "C1"}, "container": {"message_ts": "1.0"}}) == (
        "C1",
        "1.0",
    )
    assert _card_location({"channel": "C1"}) == ("C1", None)


def test_core_errors_on_unknown_fields_land_on_the_first_input() -> None:
    errors = field_errors_to_blocks(
        {"tool": "cannot change", "status": "bad"}, UPDATE_TICKET_SCHEMA
    )
    assert errors == {"arg:ticket_id": "cannot change", "arg:status": "bad"}


def test_modal_from_a_pydantic_schema_with_optional_literals_and_enum_refs() -> None:
    import enum
    from typing import Literal

    from pydantic import BaseModel, Field

    class Colour(enum.Enum):
        RED = "red"
        BLUE = "blue"

    class Args(BaseModel):
        key: str = Field(pattern=r"^[A-Z]+-\d+$")
        status: Literal["open", "closed"] | None = None
        colour: Colour = Colour.RED
        limit: int | None = Field(default=None, ge=1)

    schema = Args.model_json_schema()
    modal = edit_modal(_view({"key": "PAY-1", "status": "open"}, schema), ModalContext("ap9"))
    inputs = {b["block_id"]: b for b in modal["blocks"] if b["type"] == "input"}
    assert inputs["arg:key"]["optional"] is False
    assert [o["value"] for o in inputs["arg:status"]["element"]["options"]] == [
        '"open"',
        '"closed"',
    ]
    assert inputs["arg:status"]["element"]["initial_option"]["value"] == '"open"'
    assert [o["value"] for o in inputs["arg:colour"]["element"]["options"]] == [
        '"red"',
        '"blue"',
    ]
    assert inputs["arg:limit"]["element"]["type"] == "number_input"
    args, errors = parse_edit(
        schema,
        {
            "arg:key": text_value("PAY-2"),
            "arg:status": select_value('"closed"'),
            "arg:colour": select_value('"blue"'),
            "arg:limit": number_value("3"),
        },
    )
    assert errors == {}
    assert args == {"key": "PAY-2", "status": "closed", "colour": "blue", "limit": 3}


@pytest.mark.parametrize(
    ("state", "reason", "expected"),
    [
        (
            "failed",
            "the ticketing server refused — PAY-1 is already closed",
            "failed: the ticketing server refused — PAY-1 is already closed",
        ),
        (
            "unknown",
            "the ticketing server did not confirm the write",
            "outcome unknown — being reconciled: the ticketing server did not confirm the write",
        ),
    ],
)
def test_a_decided_card_states_the_outcome_and_its_reason_as_recorded(
    state: str, reason: str, expected: str
) -> None:
    """Invariant 13: the decided card says what the record says (a failed or unknown write,
    with its reason), in the same words as the thread, App Home and the audit."""
    view = replace(_view({"ticket_id": "PAY-1"}), state=state, status=state, outcome_reason=reason)
    card = decided_card(
        view, "ap9", "approved", "<@U0BOB>", f"{state}: {reason}", state=state, reason=reason
    )
    shown = "\n".join(
        b.get("text", {}).get("text", "") for b in card.blocks if b["type"] == "section"
    )
    assert expected in shown
    assert expected in card.text  # and the notification text
    assert "done" not in shown.split("*Outcome:*")[-1]
