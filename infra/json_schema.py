"""JSON Schema validators compiled once: the one rule for checking tool results.

``jsonschema.validate`` checks the schema against its metaschema and builds a new validator
on every call (~14 ms for the reference servers' output schemas, more than the call). Both
sides of an MCP call check results against a tool's output schema: the client
(``agent_core.validation``) and the reference servers (``mcp_servers.output_schema``). Both
take their validators from here: checked and built once per schema (keyed by a hash of its
canonical JSON, so a new tool version gets a new one), and never resolving ``$ref``s over
the network.

A local ``{"$ref": "#/$defs/X"}`` is replaced by ``X`` itself in the schema the validator
runs (never in the one checked against the metaschema): jsonschema resolves a ``$ref`` anew
for every instance it meets, which for a ticket with 40 comments was most of the ~8 ms its
check took (about half without). The rule is the same: only a node that is nothing but a
``$ref`` into the document's own ``$defs`` is inlined, never a recursive one, and a schema
with ``$id``, ``$anchor`` or dynamic references (whose meaning depends on where a subschema
sits) is left as it is.
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
        validator = cls(inline_local_refs(dict(schema)), registry=Registry())
        _COMPILED[key] = validator
    return validator


# Keywords whose meaning depends on the subschema's place in the document: inlining could
# change what they resolve to, so a schema that has any is validated as written.
_PLACE_DEPENDENT = frozenset(
    {"$id", "$anchor", "$dynamicRef", "$dynamicAnchor", "$recursiveRef", "$recursiveAnchor"}
)
_DEFS_PREFIX = "#/$defs/"
# Keywords whose values are data, not subschemas: an object in them is never a reference.
_DATA = frozenset({"const", "enum", "default", "examples"})


def inline_local_refs(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` with every node that is only ``{"$ref": "#/$defs/X"}`` replaced by ``X``.

    The root keeps its ``$defs`` (a ``$ref`` left in place still resolves). Not inlined: a
    reference back into a definition being inlined (recursion), a name with ``/`` or ``~``
    (JSON-pointer escapes) or one not in ``$defs``. A schema with a place-dependent keyword
    anywhere is returned unchanged."""
    defs = schema.get("$defs")
    if not isinstance(defs, dict) or _has_place_dependent(schema):
        return schema

    def walk(node: Any, within: frozenset[str]) -> Any:
        if isinstance(node, list):
            return [walk(item, within) for item in node]
        if not isinstance(node, dict):
            return node
        ref = node.get("$ref")
        if len(node) == 1 and isinstance(ref, str) and ref.startswith(_DEFS_PREFIX):
            name = ref[len(_DEFS_PREFIX) :]
            if name in defs and name not in within and not set(name) & {"/", "~"}:
                return walk(defs[name], within | {name})
            return node
        return {key: value if key in _DATA else walk(value, within) for key, value in node.items()}

    inlined: dict[str, Any] = walk(schema, frozenset())
    inlined["$defs"] = defs  # as written: what a remaining $ref points to
    return inlined


def _has_place_dependent(node: Any) -> bool:
    if isinstance(node, list):
        return any(_has_place_dependent(item) for item in node)
    if isinstance(node, dict):
        return bool(_PLACE_DEPENDENT & node.keys()) or any(
            _has_place_dependent(value) for value in node.values()
        )
    return False


def compiled_count() -> int:
    """How many validators were compiled so far (for tests and the bench)."""
    return len(_COMPILED)
