"""A tool result's check against its output schema, with each schema checked only once.

The MCP SDK checks every structured result with ``jsonschema.validate``, which re-checks the
schema against its metaschema on every call: for a ticket's schema that is most of the
server's CPU per write. Here the schema is checked the first time the tool answers, its
validator is kept, and each result is checked as the SDK would (same draft, same best-match
error, same message).
"""

from __future__ import annotations

from typing import Any

import jsonschema
from mcp.server.fastmcp.exceptions import ToolError


class OutputValidators:
    """One validator per tool, built (and its schema checked) at the tool's first result."""

    def __init__(self) -> None:
        self._by_tool: dict[str, tuple[dict[str, Any], Any]] = {}

    def check(self, tool: str, schema: dict[str, Any], result: object) -> None:
        """Raise ``ToolError`` (the SDK's own text) when ``result`` breaks ``schema``."""
        kept = self._by_tool.get(tool)
        if kept is None or kept[0] is not schema:
            cls = jsonschema.validators.validator_for(schema)
            cls.check_schema(schema)
            kept = (schema, cls(schema))
            self._by_tool[tool] = kept
        error = jsonschema.exceptions.best_match(kept[1].iter_errors(result))
        if error is not None:
            raise ToolError(f"Output validation error: {error.message}")
