"""A server's tool list, as a model may be given it.

``list_all`` reads every page of ``tools/list`` (a list that never ends is cut);
``definitions`` turns what was listed into ``ToolDefinition``s, leaving out (one line each)
what a model cannot take and cutting what would make every model request too large.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from mcp import ClientSession
from mcp.types import Tool as McpTool

from agent_core.tools import ToolDefinition, input_schema_problem, output_schema_problem

__all__ = [
    "MAX_DESCRIPTION_CHARS",
    "MAX_SCHEMA_CHARS",
    "MAX_TOOL_PAGES",
    "Usable",
    "definitions",
    "list_all",
]

log = logging.getLogger(__name__)
# Pages of a tool list read at the most (a server's cursor may never end).
MAX_TOOL_PAGES = 100
# Every model request of every user carries each tool's description and input schema: past
# these a server's tool would make each turn costly, or too large for a model's context
# (real servers' descriptions run to a few hundred characters, their schemas a few KB).
MAX_DESCRIPTION_CHARS = 4_000
MAX_SCHEMA_CHARS = 32_000


def definitions(server: str, listed: Sequence[McpTool]) -> Usable:
    """``server``'s listed tools as the model may be given them (``usable``). A tool that
    runs only as an MCP task (``execution.taskSupport: required``) is left out: opsbot calls
    tools directly, and each call of it would fail."""
    callable_: list[ToolDefinition] = []
    task_only: list[tuple[str, str]] = []
    for t in listed:
        if t.execution is not None and t.execution.taskSupport == "required":
            why = "it runs only as an MCP task, which opsbot does not use"
            log.warning("mcp server %s: tool %r left out: %s", server, t.name, why)
            task_only.append((t.name, why))
            continue
        callable_.append(
            ToolDefinition(
                server=server,
                name=t.name,
                description=t.description or "",
                input_schema=t.inputSchema,
                output_schema=t.outputSchema,
                annotations=t.annotations.model_dump(exclude_none=True) if t.annotations else {},
            )
        )
    found = usable(server, callable_)
    return Usable(found.tools, (*task_only, *found.left_out))


@dataclass(frozen=True, slots=True)
class Usable:
    """The tools a model can be given, and those left out (the server's name, why)."""

    tools: tuple[ToolDefinition, ...]
    left_out: tuple[tuple[str, str], ...] = ()


def usable(server: str, tools: list[ToolDefinition]) -> Usable:
    """The tools a model can be given, one line for each left out: one whose input schema a
    model cannot take or is past ``MAX_SCHEMA_CHARS``, and all but the first under one
    model-visible name (two names alike but for characters a model's tool name cannot have,
    or one listed twice, differently). A description past ``MAX_DESCRIPTION_CHARS`` is cut."""
    kept: dict[str, ToolDefinition] = {}
    left_out: dict[str, str] = {}
    for d in tools:
        problem = input_schema_problem(d.input_schema) or _schema_too_large(d.input_schema)
        if problem is not None:
            log.warning("mcp server %s: tool %r left out: %s", server, d.name, problem)
            left_out.setdefault(d.name, problem)
            continue
        if len(d.description) > MAX_DESCRIPTION_CHARS:
            log.warning(
                "mcp server %s: tool %r: its description of %s characters is cut to %s",
                server,
                d.name,
                f"{len(d.description):,}",
                f"{MAX_DESCRIPTION_CHARS:,}",
            )
            d = dataclasses.replace(d, description=d.description[:MAX_DESCRIPTION_CHARS] + "…")
        problem = output_schema_problem(d.output_schema) if d.output_schema else None
        if problem is not None:
            # Every result would fail its check: the tool is kept, its results unchecked.
            log.warning(
                "mcp server %s: tool %r: %s; its results are not checked", server, d.name, problem
            )
            d = dataclasses.replace(d, output_schema=None)
        first = kept.setdefault(d.prefixed_name, d)
        if first != d:  # one listed again as it was (or itself): nothing to say
            why = f"{first.name!r} has its name for the model ({d.prefixed_name})"
            log.warning("mcp server %s: tool %r left out: %s", server, d.name, why)
            if d.name != first.name:
                left_out.setdefault(d.name, why)
    return Usable(tuple(kept.values()), tuple(left_out.items()))


def _schema_too_large(schema: Mapping[str, Any]) -> str | None:
    size = len(json.dumps(schema, separators=(",", ":")))
    if size <= MAX_SCHEMA_CHARS:
        return None
    return f"its input schema is {size:,} characters, more than {MAX_SCHEMA_CHARS:,}"


async def list_all(session: ClientSession, server: str) -> list[McpTool]:
    """Every page of the server's tool list; a list that does not end (a cursor it gave
    before, or past ``MAX_TOOL_PAGES`` pages) is taken as far as it came, with one line."""
    tools: list[McpTool] = []
    cursor: str | None = None
    seen: set[str] = set()
    pages = 0
    while pages < MAX_TOOL_PAGES:
        page = await session.list_tools(cursor) if cursor else await session.list_tools()
        pages += 1
        tools.extend(page.tools)
        cursor = page.nextCursor
        if not cursor:
            return tools
        if cursor in seen:
            break
        seen.add(cursor)
    log.warning(
        "mcp server %s: its tool list does not end (%d pages); the %d tools listed are used",
        server,
        pages,
        len(tools),
    )
    return tools
