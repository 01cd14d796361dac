"""The agent core has no import cycles (issue 15): run state is passed, never reached for."""

from __future__ import annotations

import re

import grimp


def test_agent_core_modules_import_each_other_in_one_direction_only() -> None:
    graph = grimp.build_graph("agent_core")
    modules = sorted(m for m in graph.modules if m.startswith("agent_core."))
    cycles = [
        (a, b)
        for i, a in enumerate(modules)
        for b in modules[i + 1 :]
        if graph.chain_exists(importer=a, imported=b) and graph.chain_exists(importer=b, imported=a)
    ]
    assert cycles == []


def test_one_integration_point_opens_mcp_sessions() -> None:
    from pathlib import Path

    import agent_core

    root = Path(agent_core.__file__).parent
    # A session is opened by calling mcp's ClientSession or a subclass of it:
    # agent_core.validation's (which only changes how results are checked) and
    # agent_core.sessions' (which only changes how it ends).
    opening = re.compile(
        r"^(?!\s*class ).*\b(ClientSession|ValidatingSession|_RunSession)\(", re.MULTILINE
    )
    openers = sorted(
        p.name for p in root.rglob("*.py") if opening.search(p.read_text(encoding="utf-8"))
    )
    assert openers == ["sessions.py"]
