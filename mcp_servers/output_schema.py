"""A tool result's check against its output schema, with each schema checked only once.

The MCP SDK checks every structured result with ``jsonschema.validate``, which re-checks the
schema against its metaschema on every call: for a ticket's schema that is most of the
server's CPU per write. Here the validator comes from ``infra.json_schema`` (the client's
rule too) the first time the tool answers and is kept per tool; each result is checked as
the SDK would (same draft, same best-match error, same message).
"""

from __future__ import annotations

from typing import Any

import jsonschema
from jsonschema.protocols import Validator
from mcp.server.fastmcp.exceptions import ToolError

from infra.json_schema import compiled


class OutputValidators:
    """One validator per tool, built (and its schema checked) at the tool's first result."""

    def __init__(self) -> None:
        self._by_tool: dict[str, tuple[dict[str, Any], Validator]] = {}

    def prepare(self, tool: str, schema: dict[str, Any]) -> Validator:
        """The validator of ``tool`` for ``schema``, built now if it was not (at start-up the
        server builds them all: the metaschema check, ~75 ms for a ticket's schema, is not
        paid by the first write after a restart, with every call behind it waiting)."""
        kept = self._by_tool.get(tool)
        if kept is None or kept[0] is not schema:
            kept = (schema, compiled(schema))  # hashed once per schema object, not per call
            self._by_tool[tool] = kept
        return kept[1]

    def check(self, tool: str, schema: dict[str, Any], result: object) -> None:
        """Raise ``ToolError`` (the SDK's own text) when ``result`` breaks ``schema``."""
        validator = self.prepare(tool, schema)
        error = jsonschema.exceptions.best_match(validator.iter_errors(result))
        if error is not None:
            raise ToolError(f"Output validation error: {error.message}")
