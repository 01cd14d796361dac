"""Tool results are still checked against their output schema, the schema itself only once."""

from __future__ import annotations

import uuid
from typing import Any

import jsonschema
import pytest
from mcp.server.fastmcp.exceptions import ToolError

from mcp_servers.output_schema import OutputValidators

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"key": {"type": "string"}, "n": {"type": "integer"}},
    "required": ["key"],
    "additionalProperties": False,
}


def _sdk_message(result: object) -> str:
    # What the MCP SDK's low-level server reports for the same result
    with pytest.raises(jsonschema.ValidationError) as caught:
        jsonschema.validate(instance=result, schema=SCHEMA)
    return f"Output validation error: {caught.value.message}"


@pytest.mark.parametrize("bad", [{"n": 1}, {"key": 3}, {"key": "A-1", "extra": True}, [1]])
def test_a_result_that_breaks_the_schema_is_refused_with_the_sdks_message(bad: object) -> None:
    with pytest.raises(ToolError) as caught:
        OutputValidators().check("t", SCHEMA, bad)
    assert str(caught.value) == _sdk_message(bad)


def test_the_schema_is_checked_once_per_tool_and_good_results_pass(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A schema of this test's own: validators are compiled once per process
    # (infra.json_schema), so one another test compiled would not be checked here at all.
    schema = {**SCHEMA, "title": f"once-{uuid.uuid4()}"}
    checked: list[object] = []
    cls = jsonschema.validators.validator_for(schema)
    original = cls.check_schema
    monkeypatch.setattr(cls, "check_schema", lambda s: (checked.append(s), original(s))[1])
    validators = OutputValidators()
    for n in range(5):
        validators.check("t", schema, {"key": "PAY-1", "n": n})
    assert checked == [schema]
    with pytest.raises(ToolError):
        validators.check("t", schema, {"key": "PAY-1", "n": "x"})


def test_a_broken_schema_is_still_refused() -> None:
    with pytest.raises(jsonschema.SchemaError):
        OutputValidators().check("t", {"type": "no-such-type"}, {})
