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

    def check(self, tool: str, schema: dict[str, Any], result: object) -> None:
        """Raise ``ToolError`` (the SDK's own text) when ``result`` breaks ``schema``."""
        kept = self._by_tool.get(tool)
        if kept is None or kept[0] is not schema:
            kept = (schema, compiled(schema))  # hashed once per schema object, not per call
            self._by_tool[tool] = kept
        error = jsonschema.exceptions.best_match(kept[1].iter_errors(result))
        if error is not None:
            raise ToolError(f"Output validation error: {error.message}")
