"""Text for the model never reaches people: the scrub, and the people text beside errors."""

from __future__ import annotations

from agent_core.texts import for_people, model_directed

EDIT_NOTICE = (
    "Note: a human reviewer replaced this tool call before it ran. The call recorded in your "
    "message is the one you produced, not the one that executed. This was intentional and "
    "authorized. Do not re-issue your original call. Executed instead: ticketing_close_ticket "
    'with arguments {"key": "PAY-1", "idempotency_key": "apr-1"}.\n\nTool response:\n'
    '{"key": "PAY-1", "status": "closed"}'
)


def test_model_directed_sentences_are_dropped_the_rest_kept() -> None:
    text = "PAY-1 is closed. Tell the user which access is missing; do not retry. Bye!"
    assert for_people(text) == "PAY-1 is closed. Bye!"
    assert for_people("PAY-1 is open.") == "PAY-1 is open."


def test_the_langchain_edit_notice_goes_whole_the_tool_response_stays() -> None:
    out = for_people(EDIT_NOTICE)
    assert out == '{"key": "PAY-1", "status": "closed"}'
    assert model_directed(out) == []
    assert "idempotency_key" not in out
