"""The code's structure holds: no import cycles, the layers contract catches an upward import.

The layers themselves are the import-linter contracts in ``pyproject.toml`` (run by
``test_quality_gates.test_import_contract_holds``); ``docs/architecture.md`` explains them.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
PACKAGES: list[str] = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"][
    "root_packages"
]


def import_cycles(graph: grimp.ImportGraph) -> list[frozenset[str]]:
    """Every group of modules that import each other, directly or through others (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for imported in sorted(graph.find_modules_directly_imported_by(module)):
            if imported not in index:
                visit(imported)
                low[module] = min(low[module], low[imported])
            elif imported in on_stack:
                low[module] = min(low[module], index[imported])
        if low[module] == index[module]:
            group = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.add(member)
                if member == module:
                    break
            if len(group) > 1:
                found.append(frozenset(group))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for module in sorted(graph.modules):
        if module not in index:
            visit(module)
    return found


def test_there_are_no_import_cycles() -> None:
    graph = grimp.build_graph(*PACKAGES, include_external_packages=False)
    assert [sorted(c) for c in import_cycles(graph)] == []


def test_the_cycle_finder_finds_a_cycle() -> None:
    graph = grimp.ImportGraph()
    for module in ("a", "a.x", "a.y", "a.z"):
        graph.add_module(module)
    graph.add_import(importer="a.x", imported="a.y")
    graph.add_import(importer="a.y", imported="a.z")
    graph.add_import(importer="a.z", imported="a.x")
    assert import_cycles(graph) == [frozenset({"a.x", "a.y", "a.z"})]


@pytest.mark.parametrize(
    ("package", "imports", "contract"),
    [
        ("infra", "opsbot.wiring", "Layers"),
        ("agent_core", "approvals.service", "Layers"),
        ("broker", "agent_core.policy", "Layers"),
        ("bot", "opsbot.wiring", "Layers"),
        ("bot", "memory.store", "sees only assistant.types"),
        ("bot", "broker.types", "sees only assistant.types"),
        ("bot", "assistant.approval_desk", "sees only assistant.types"),
        ("testing", "opsbot.wiring", "testing/ imports no command"),
        ("testing", "sandbox.stack", "testing/ imports no command"),
        ("audit", "memory.store", "Layers"),  # independent siblings
        ("mcp_servers", "broker.types", "reference MCP servers"),
        ("assistant", "testing.fake_assistant", "never imports the test fakes"),
        ("testing", "pytest", "No package imports tests"),
    ],
)
def test_the_contracts_catch_a_wrong_import(
    tmp_path: Path, package: str, imports: str, contract: str
) -> None:
    """Copy the tree, add one wrong import: lint-imports must fail and name the contract."""
    for item in ROOT.iterdir():
        if item.name == "pyproject.toml":
            shutil.copy(item, tmp_path / item.name)
        elif item.is_dir() and (item / "__init__.py").exists():
            shutil.copytree(
                item, tmp_path / item.name, ignore=shutil.ignore_patterns("__pycache__")
            )
    (tmp_path / package / "leak.py").write_text(f"import {imports}\n")
    result = subprocess.run(
        [str(BIN / "lint-imports"), "--no-cache"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode != 0
    broken = result.stdout.split("Broken contracts", 1)[-1]
    assert contract in broken
    assert f"{package}.leak -> {imports}" in broken
