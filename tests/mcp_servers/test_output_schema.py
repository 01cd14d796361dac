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


def _refs(node: object) -> list[str]:
    if isinstance(node, list):
        return [r for item in node for r in _refs(item)]
    if isinstance(node, dict):
        own = [node["$ref"]] if isinstance(node.get("$ref"), str) else []
        return own + [r for k, v in node.items() if k != "$defs" for r in _refs(v)]
    return []


def test_a_tickets_result_is_checked_without_resolving_a_reference_per_comment() -> None:
    # jsonschema resolves a $ref anew for every instance: per comment of a ticket, most of
    # the check's CPU. The validator runs the schema with its local references inlined.
    from infra.json_schema import compiled
    from mcp_servers.ticketing.models import Ticket

    schema = Ticket.model_json_schema(mode="serialization")
    assert _refs(schema)  # the comments' items refer to $defs/Comment
    validator = compiled(schema)
    assert _refs(validator.schema) == []
    good = {
        "key": "PAY-1",
        "project": "PAY",
        "title": "t",
        "status": "open",
        "priority": "low",
        "assignee": None,
        "updated_at": "now",
        "url": "u",
        "description": "d",
        "created_by": "alice",
        "created_at": "now",
        "comments": [{"author": "bob", "body": "hi", "created_at": "now"}],
    }
    OutputValidators().check("ticket", schema, good)
    bad = {**good, "comments": [{"author": "bob", "body": 3, "created_at": "now"}]}
    with pytest.raises(ToolError) as caught:
        OutputValidators().check("ticket", schema, bad)
    with pytest.raises(jsonschema.ValidationError) as sdk:
        jsonschema.validate(instance=bad, schema=schema)
    assert str(caught.value) == f"Output validation error: {sdk.value.message}"


RECURSIVE: dict[str, Any] = {
    "$defs": {
        "Node": {
            "type": "object",
            "properties": {"name": {"type": "string"}, "kids": {"items": {"$ref": "#/$defs/Node"}}},
            "required": ["name"],
        }
    },
    "properties": {
        "root": {"$ref": "#/$defs/Node"},
        "fixed": {"const": {"$ref": "#/$defs/Node"}},  # data, not a reference
    },
}


@pytest.mark.parametrize(
    "instance",
    [
        {"root": {"name": "a", "kids": [{"name": "b", "kids": [{"name": 1}]}]}},
        {"root": {"name": "a", "kids": [{"kids": []}]}},
        {"root": {"name": "a"}, "fixed": {"$ref": "#/$defs/Node"}},
        {"root": {"name": "a"}, "fixed": {"name": "a"}},
    ],
)
def test_inlining_keeps_recursive_references_and_data_as_the_sdk_reads_them(
    instance: object,
) -> None:
    from infra.json_schema import inline_local_refs

    inlined = inline_local_refs(RECURSIVE)
    assert inlined["properties"]["fixed"] == RECURSIVE["properties"]["fixed"]
    sdk = list(jsonschema.Draft202012Validator(RECURSIVE).iter_errors(instance))
    ours = list(jsonschema.Draft202012Validator(inlined).iter_errors(instance))
    assert [e.message for e in ours] == [e.message for e in sdk]


def test_a_schema_with_ids_or_anchors_is_validated_as_written() -> None:
    from infra.json_schema import inline_local_refs

    schema = {
        "$defs": {"A": {"$id": "https://example.test/a", "type": "string"}},
        "properties": {"a": {"$ref": "#/$defs/A"}},
    }
    assert inline_local_refs(schema) is schema


async def test_a_server_builds_its_output_validators_before_its_first_result(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The metaschema check (~75 ms for a ticket's schema) is paid when the app is built,
    # not by the first write after a restart with every other call queued behind it.
    import mcp_servers.output_schema as output_schema
    from mcp_servers.app import AuthConfig
    from mcp_servers.ticketing import TicketStore
    from mcp_servers.ticketing.server import build_ticketing

    built: list[object] = []
    original = output_schema.compiled
    monkeypatch.setattr(output_schema, "compiled", lambda s: (built.append(s), original(s))[1])
    store = await TicketStore.open()
    try:
        auth = AuthConfig(issuer="http://idp.test", audience="http://127.0.0.1:1/mcp")
        server = build_ticketing(store, auth)
        server.asgi_app()
        tool = server.mcp._tool_manager.get_tool("add_comment")
        assert tool is not None
        assert tool.output_schema is not None
        assert any(schema is tool.output_schema for schema in built)
        count = len(built)
        with pytest.raises(ToolError):  # checked with the validator built at start-up
            server.mcp._output_validators.check("add_comment", tool.output_schema, {})
        assert len(built) == count
    finally:
        await store.close()
