"""MCP tool definitions: prefixing, collision check, allowlist, the discovery cache.

Discovery is the expensive part of talking to an MCP server, and nothing in it is secret, so
it is cached per server and server version: names, descriptions, input and output schemas,
annotations — never a token or a session.

The agent graph is compiled once per tool set with the *template* tools built here: they give
the model its schemas and never run. Each run turns the same definitions into LangChain tools
bound to that run's own MCP sessions (``convert_mcp_tool_to_langchain_tool`` in
``agent_core.sessions``), and the run's middleware swaps them in per call, so one compiled
graph serves every user without sharing credentials.
"""

from __future__ import annotations

import copy
import hashlib
import re
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any

from jsonschema.exceptions import SchemaError
from jsonschema.validators import validator_for
from langchain_core.tools import BaseTool, InjectedToolArg, StructuredTool
from mcp.types import Tool as McpTool
from mcp.types import ToolAnnotations

from agent_core.errors import ToolCollisionError
from agent_core.policy import ToolPolicy

IDEMPOTENCY_ARG = "idempotency_key"


# What every model provider takes as a tool name (OpenAI's pattern, the strictest); MCP
# allows more (dots, slashes, 128 characters), and a name a provider refuses fails every turn.
MODEL_TOOL_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
_NOT_IN_A_NAME = re.compile(r"[^A-Za-z0-9_-]")


def input_schema_problem(schema: Mapping[str, Any]) -> str | None:
    """Why a model cannot be given ``schema`` as a tool's parameters (``None``: it can): it
    must be a valid JSON Schema for an object. Providers refuse a request with any other,
    so one such tool would fail every turn."""
    kind = schema.get("type", "object")
    if kind != "object":
        return f"its input schema is of type {kind!r}, not an object"
    return _schema_problem(schema, "input")


def output_schema_problem(schema: Mapping[str, Any]) -> str | None:
    """Why ``schema`` cannot check a tool's results (``None``: it can)."""
    return _schema_problem(schema, "output")


def _schema_problem(schema: Mapping[str, Any], which: str) -> str | None:
    try:
        validator_for(schema).check_schema(schema)
    except SchemaError as exc:
        return f"its {which} schema is not valid JSON Schema ({exc.message[:120]})"
    return None


def prefixed(server: str, tool: str) -> str:
    """The model-visible name of ``tool`` on ``server``: ``<server>_<tool>`` (the adapters'
    convention), any other character made ``_``. A name past 64 characters is cut, and one
    that had non-ASCII characters (``検索`` and ``取得`` would both be ``___``) ends in a
    hash of the whole, so that it stays one tool's."""
    name = f"{server}_{tool}"
    if MODEL_TOOL_NAME.fullmatch(name):
        return name
    safe = _NOT_IN_A_NAME.sub("_", name)
    if len(safe) <= 64 and name.isascii():
        return safe
    return f"{safe[:55]}_{hashlib.sha256(name.encode()).hexdigest()[:8]}"


@dataclass(frozen=True, slots=True)
class ToolDefinition:
    """One tool as a server described it (never credentials)."""

    server: str
    name: str
    description: str
    input_schema: Mapping[str, Any]
    output_schema: Mapping[str, Any] | None = None
    annotations: Mapping[str, Any] = field(default_factory=dict)

    @property
    def prefixed_name(self) -> str:
        return prefixed(self.server, self.name)

    @property
    def takes_idempotency_key(self) -> bool:
        return IDEMPOTENCY_ARG in (self.input_schema.get("properties") or {})

    def model_schema(self) -> dict[str, Any]:
        """The input schema the model (and an approver's edit) sees.

        ``idempotency_key`` is opsbot's to set, derived from the thread and tool call (or the
        approval): the model never chooses it.
        """
        schema = copy.deepcopy(dict(self.input_schema))
        props = dict(schema.get("properties") or {})
        props.pop(IDEMPOTENCY_ARG, None)
        schema["properties"] = props
        if "required" in schema:
            schema["required"] = [r for r in schema["required"] if r != IDEMPOTENCY_ARG]
        schema.setdefault("type", "object")
        return schema

    def as_mcp_tool(self) -> McpTool:
        """The cached definition as the MCP ``Tool`` the adapters convert (model schema)."""
        return McpTool(
            name=self.name,
            description=self.description or f"{self.name} on {self.server}",
            inputSchema=self.model_schema(),
            outputSchema=dict(self.output_schema) if self.output_schema else None,
            annotations=ToolAnnotations(**dict(self.annotations)) if self.annotations else None,
        )

    @property
    def read_only_hint(self) -> bool:
        return bool(self.annotations.get("readOnlyHint"))


@dataclass(frozen=True, slots=True)
class ServerTools:
    """The discovered tools of one server at one version."""

    server: str
    version: str
    tools: tuple[ToolDefinition, ...]
    # Listed but not usable by a model: (the server's tool name, why), for ``opsbot tools``.
    left_out: tuple[tuple[str, str], ...] = ()


class DiscoveryCache:
    """Tool definitions per server, valid while the server reports the same version and for
    ``max_age`` seconds at the most: a server redeployed with other tools but the same
    version (many never change theirs) is listed again by the first run after that."""

    def __init__(
        self, max_age: float = 600.0, monotonic: Callable[[], float] = time.monotonic
    ) -> None:
        self._by_server: dict[str, ServerTools] = {}
        self._listed_at: dict[str, float] = {}
        self._max_age = max_age
        self._now = monotonic

    def get(self, server: str) -> ServerTools | None:
        entry = self._by_server.get(server)
        if entry is not None and self._now() - self._listed_at[server] > self._max_age:
            return None
        return entry

    def last(self, server: str) -> ServerTools | None:
        """What the server listed last, however long ago: the definitions a run that listed
        them calls, and an approver's edit is checked against, until it lists again."""
        return self._by_server.get(server)

    def put(self, entry: ServerTools) -> None:
        self._by_server[entry.server] = entry
        self._listed_at[entry.server] = self._now()

    def observe_version(self, server: str, version: str) -> None:
        """Drop the entry when a session reports a different server version."""
        entry = self._by_server.get(server)
        if entry is not None and entry.version != version:
            del self._by_server[server]

    def clear(self) -> None:
        self._by_server.clear()
        self._listed_at.clear()


RESERVED_NAMES = frozenset({"FinalAnswer"})


def check_collisions(definitions: Iterable[ToolDefinition]) -> None:
    """Raise ``ToolCollisionError`` if two tools share a prefixed name."""
    seen: dict[str, ToolDefinition] = {}
    for d in definitions:
        name = d.prefixed_name
        if name in RESERVED_NAMES:
            raise ToolCollisionError(f"tool {d.name!r} on {d.server!r} uses a reserved name")
        other = seen.get(name)
        if other is not None:
            raise ToolCollisionError(
                f"tool name collision after prefixing: {name!r} is both "
                f"{other.server}:{other.name} and {d.server}:{d.name}"
            )
        seen[name] = d


def visible_definitions(
    definitions: Iterable[ToolDefinition], policy: ToolPolicy
) -> list[ToolDefinition]:
    """The definitions the model may see: collision-checked, then filtered by the allowlist."""
    defs = list(definitions)
    check_collisions(defs)
    return [d for d in defs if policy.is_allowed(d.prefixed_name)]


def tool_metadata(definition: ToolDefinition, policy: ToolPolicy) -> dict[str, Any]:
    cls = policy.classify(definition.prefixed_name)
    return {
        "server": definition.server,
        "mcp_name": definition.name,
        "kind": cls.kind,
        # Hints from the server, for display only: the policy decides.
        "annotations": dict(definition.annotations),
    }


def build_tool(definition: ToolDefinition, policy: ToolPolicy) -> BaseTool:
    """The template tool for ``definition``: schema and metadata for the compiled graph.

    It never calls a server: the run's middleware replaces it with the tool bound to the
    run's own session. Its ``runtime`` parameter makes the tool node inject the
    ``ToolRuntime`` that the run-bound tool (same signature) needs.
    """
    server, name = definition.server, definition.name

    async def _unbound(
        runtime: Annotated[object | None, InjectedToolArg()] = None, **kwargs: Any
    ) -> tuple[str, Any]:
        raise RuntimeError(f"{server}_{name} was called outside an agent run")

    return StructuredTool(
        name=definition.prefixed_name,
        description=definition.description or f"{name} on {server}",
        args_schema=definition.model_schema(),
        coroutine=_unbound,
        response_format="content_and_artifact",
        metadata=tool_metadata(definition, policy),
    )
