"""Tool results checked against their output schema with validators compiled once.

``mcp.ClientSession`` checks every structured tool result against the tool's output schema
with ``jsonschema.validate``, which first checks the schema itself against its metaschema
and builds a new validator: ~14 ms per call for the reference servers' schemas, more than
the call. The check stays; the validator is compiled once per schema (``infra.json_schema``,
shared with the reference servers) and shared by every session of every run. A session
hashes a tool's schema once, on that tool's first result, and again only when a new listing
gives the tool another schema object (a new version's schema gets its own validator).

``agent_core.sessions`` (the one place a session is opened) opens a ``ValidatingSession``
where it opened mcp's ``ClientSession``; nothing else changes for the caller.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from jsonschema import SchemaError, ValidationError
from jsonschema.protocols import Validator
from mcp import ClientSession
from mcp.types import CallToolResult, TextContent
from referencing.exceptions import Unresolvable

from infra.json_schema import compiled, compiled_count, schema_hash

__all__ = [
    "MalformedResultError",
    "ValidatingSession",
    "compiled",
    "compiled_count",
    "schema_hash",
]

log = logging.getLogger(__name__)

# Above this many characters of a result's text (its JSON, which servers send beside the
# structured content), the check runs in a worker thread: it takes ~2.7 ms at 13 KB and
# ~28 ms at 130 KB of the reference servers' kind of result, which held the event loop.
VALIDATE_IN_THREAD_CHARS = 32_000


def _text_chars(result: CallToolResult) -> int:
    return sum(len(c.text) for c in result.content if isinstance(c, TextContent))


class MalformedResultError(RuntimeError):
    """A tool's result does not fit its output schema (a ``RuntimeError``, as mcp raises)."""


class ValidatingSession(ClientSession):
    """A ``ClientSession`` whose result check uses the compiled validators; same errors."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Per tool: the schema object last checked with and its validator. A new listing
        # records a new schema object (``RunSessions._prime``, the SDK's ``list_tools``):
        # its validator is looked up again (by the schema's hash, ``infra.json_schema``).
        self._validators: dict[str, tuple[dict[str, Any], Validator]] = {}

    async def _validate_tool_result(self, name: str, result: CallToolResult) -> None:
        if name not in self._tool_output_schemas:
            await self.list_tools()  # as mcp does: learn a schema it has not seen
        if name not in self._tool_output_schemas:
            log.warning("tool %s not listed by the server: its result is not checked", name)
            return
        schema = self._tool_output_schemas.get(name)
        if schema is None:
            return
        if result.structuredContent is None:
            raise MalformedResultError(
                f"Tool {name} has an output schema but did not return structured content"
            )
        try:
            kept = self._validators.get(name)
            if kept is None or kept[0] is not schema:
                kept = self._validators[name] = (schema, compiled(schema))
            if _text_chars(result) > VALIDATE_IN_THREAD_CHARS:
                # A large result: checked in a worker thread, the loop serves others.
                await asyncio.to_thread(kept[1].validate, result.structuredContent)
            else:
                kept[1].validate(result.structuredContent)
        except ValidationError as e:
            raise MalformedResultError(
                f"Invalid structured content returned by tool {name}: {e.message}"
            ) from e
        except (SchemaError, Unresolvable) as e:
            raise MalformedResultError(f"Invalid output schema for tool {name}: {e}") from e
