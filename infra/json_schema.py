"""JSON Schema validators compiled once: the one rule for checking tool results.

``jsonschema.validate`` checks the schema against its metaschema and builds a new validator
on every call (~14 ms for the reference servers' output schemas, more than the call). Both
sides of an MCP call check results against a tool's output schema: the client
(``agent_core.validation``) and the reference servers (``mcp_servers.output_schema``). Both
take their validators from here: checked and built once per schema (keyed by a hash of its
canonical JSON, so a new tool version gets a new one), and never resolving ``$ref``s over
the network.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from jsonschema.protocols import Validator
from jsonschema.validators import validator_for
from referencing import Registry

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
