"""One rule for edited arguments: the agent's resume checks what approvals checks."""

from __future__ import annotations

from typing import Any

import pytest

from agent_core.decisions import validate_edit
from agent_core.errors import InvalidDecisionError
from approvals.errors import InvalidEditError
from approvals.records import ActionRequest
from approvals.rules import validate_edit as approvals_validate_edit

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"key": {"type": "string"}, "idempotency_key": {"type": "string"}},
    "required": ["key", "idempotency_key"],
}


class Tools:
    def tool_schema(self, name: str) -> dict[str, Any] | None:
        return SCHEMA if name == "ticketing_close" else None

    def is_allowed(self, name: str) -> bool:
        return name == "ticketing_close"


@pytest.mark.parametrize(
    ("edited", "field"),
    [
        ({"name": "ticketing_close", "args": {"key": "A", "extra": 1}}, "extra"),
        ({"name": "ticketing_close", "args": {"key": 7}}, "key"),
        ({"name": "ticketing_delete", "args": {"key": "A"}}, "name"),
        ({"name": "ticketing_close", "args": "A"}, "args"),
    ],
)
def test_the_resume_path_refuses_what_approvals_refuses(edited: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidDecisionError) as refused:
        validate_edit("ticketing_close", edited, Tools())
    assert field in refused.value.field_errors
    if field not in ("name", "args"):
        action = ActionRequest(tool="ticketing_close", server="ticketing", args={"key": "A"})
        with pytest.raises(InvalidEditError) as same:
            approvals_validate_edit(action, edited["args"], Tools())
        assert same.value.field_errors == refused.value.field_errors


def test_opsbots_own_idempotency_key_is_dropped_on_resume_but_refused_from_an_approver() -> None:
    edited = {"name": "ticketing_close", "args": {"key": "A", "idempotency_key": "k1"}}
    assert validate_edit("ticketing_close", edited, Tools())["args"] == {"key": "A"}
    action = ActionRequest(tool="ticketing_close", server="ticketing", args={"key": "A"})
    with pytest.raises(InvalidEditError) as refused:
        approvals_validate_edit(action, edited["args"], Tools())
    assert "idempotency_key" in refused.value.field_errors
