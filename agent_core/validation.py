"""Tool results checked against their output schema with validators compiled once.

``mcp.ClientSession`` checks every structured tool result against the tool's output schema
with ``jsonschema.validate``, which first checks the schema itself against its metaschema
and builds a new validator: ~14 ms per call for the reference servers' schemas, more than
the call. The check stays; the validator is compiled once per schema (keyed by a hash of
its canonical JSON, so a new tool version gets a new one) and shared by every session of
every run. A session hashes a tool's schema once, on that tool's first result.

``agent_core.sessions`` (the one place a session is opened) opens a ``ValidatingSession``
where it opened mcp's ``ClientSession``; nothing else changes for the caller.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Mapping
from typing import Any

from jsonschema import SchemaError, ValidationError
from jsonschema.protocols import Validator
from jsonschema.validators import validator_for
from mcp import ClientSession
from mcp.types import CallToolResult
from referencing import Registry
from referencing.exceptions import Unresolvable

log = logging.getLogger(__name__)

# Compiled validators by schema hash. Bounded by the number of distinct output schemas of
# the configured servers (a handful per tool version), so it is never evicted.
_COMPILED: dict[str, Validator] = {}


def schema_hash(schema: Mapping[str, Any]) -> str:
    """A stable hash of ``schema`` (its canonical JSON)."""
    canonical = json.dumps(schema, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()


def compiled(schema: Mapping[str, Any], key: str | None = None) -> Validator:
    """The validator for ``schema``, checked against its metaschema and built once.

    Raises ``SchemaError`` for an invalid schema (not cached: it is raised again)."""
    key = key or schema_hash(schema)
    validator = _COMPILED.get(key)
    if validator is None:
        cls = validator_for(schema)
        cls.check_schema(schema)
        # An explicit empty registry, as mcp does: ``$ref``s resolve within the schema
        # document and the bundled metaschemas, never over the network.
        validator = cls(dict(schema), registry=Registry())
        _COMPILED[key] = validator
    return validator


def compiled_count() -> int:
    """How many validators were compiled so far (for tests and the bench)."""
    return len(_COMPILED)


class ValidatingSession(ClientSession):
    """A ``ClientSession`` whose result check uses the compiled validators; same errors."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._validators: dict[str, Validator] = {}

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
            raise RuntimeError(
                f"Tool {name} has an output schema but did not return structured content"
            )
        try:
            validator = self._validators.get(name)
            if validator is None:
                validator = self._validators[name] = compiled(schema)
            validator.validate(result.structuredContent)
        except ValidationError as e:
            raise RuntimeError(f"Invalid structured content returned by tool {name}: {e}") from e
        except SchemaError as e:
            raise RuntimeError(f"Invalid schema for tool {name}: {e}") from e
        except Unresolvable as e:
            raise RuntimeError(f"Invalid schema for tool {name}: {e}") from e
