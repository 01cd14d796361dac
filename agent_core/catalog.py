"""What the model can see, tool by tool, and why (``opsbot tools`` and the start-up lines)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from agent_core.credentials import ServerConfig
from agent_core.errors import ToolCallError
from agent_core.policy import ToolPolicy
from agent_core.tools import ServerTools


@dataclass(frozen=True, slots=True)
class ToolRow:
    """One tool: where it lives, how it is classified, whether the model sees it, and why."""

    server: str
    tool: str
    kind: str
    allowlisted: bool
    why: str


def describe_tools(
    servers: Mapping[str, ServerConfig],
    found: Mapping[str, ServerTools | ToolCallError],
    policy: ToolPolicy,
) -> tuple[list[ToolRow], list[str]]:
    """Rows for every discovered tool (a tool the server listed but a model cannot be given
    is a row too, under the server's own name), and one note per server that could not be
    listed."""
    rows: list[ToolRow] = []
    notes: list[str] = []
    for name, config in servers.items():
        entry = found.get(name)
        if not isinstance(entry, ServerTools):
            reason = str(entry) if entry is not None else "not discovered"
            notes.append(f"{name} (auth={config.auth}): tools unknown: {reason}")
            continue
        for d in entry.tools:
            cls = policy.classify(d.prefixed_name)
            allowed = policy.is_allowed(d.prefixed_name)
            if cls.source == "policy":
                why = f"classified {cls.kind} in the tool policy"
            elif cls.source == "read_only_hint":
                why = "unclassified; readOnlyHint trusted for this server: a read"
            else:
                why = "unclassified: a write that needs approval"
                if config.auth == "static":
                    why += " (runs as opsbot's service identity)"
            if not allowed:
                why += "; not on the allowlist: hidden from the model"
            rows.append(ToolRow(name, d.prefixed_name, cls.kind, allowed, why))
        for tool, why in entry.left_out:
            rows.append(ToolRow(name, tool, "-", False, f"left out: {why}"))
    return rows, notes
