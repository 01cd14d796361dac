"""Every runtime dependency is used (issue 19: "Remove unused dependencies"; procrastinate was
one that nothing imported).

A dependency in ``[project].dependencies`` must provide a module that the shipped packages
import (not only the tests: those go in the ``dev`` group). Modules are matched by what each
installed distribution's files provide, so the packages that share a namespace
(``langgraph.checkpoint.postgres``, ``opentelemetry.exporter``) count separately.
"""

from __future__ import annotations

import ast
import tomllib
from functools import cache
from importlib.metadata import PackageNotFoundError, files
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parent.parent
# What ships: every package but the tests and the benches.
SHIPPED = (
    "agent_core",
    "approvals",
    "assistant",
    "audit",
    "bot",
    "broker",
    "infra",
    "mcp_servers",
    "memory",
    "opsbot",
    "sandbox",
    "testing",
)


@cache
def _imported() -> frozenset[str]:
    """Every dotted module name the shipped packages import (absolute imports)."""
    names: set[str] = set()
    for package in SHIPPED:
        for path in (ROOT / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Import):
                    names.update(alias.name for alias in node.names)
                elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                    names.add(node.module)
                    names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return frozenset(names)


def _modules(distribution: str) -> set[str]:
    """The dotted names of the modules and packages ``distribution`` installs."""
    provided: set[str] = set()
    for file in files(distribution) or ():
        parts = file.parts
        if file.suffix not in (".py", ".so") or not parts or ".." in parts:
            continue
        if parts[0].endswith((".dist-info", ".data")):
            continue
        stem = parts[-1].split(".")[0]
        dotted = [*parts[:-1], stem] if stem != "__init__" else list(parts[:-1])
        if dotted:
            provided.add(".".join(dotted))
    return provided


def unused(requirements: list[str]) -> list[str]:
    """The requirements (by name) none of whose modules the shipped packages import."""
    imported = _imported()
    found: list[str] = []
    for requirement in requirements:
        name = Requirement(requirement).name
        try:
            provided = _modules(name)
        except PackageNotFoundError:
            found.append(name)  # declared but not even installed
            continue
        if not any(
            ".".join(used.split(".")[:depth]) in provided
            for used in imported
            for depth in range(1, used.count(".") + 2)
        ):
            found.append(name)
    return found


def test_every_runtime_dependency_is_imported_by_what_ships() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert unused(project["dependencies"]) == []


def test_the_check_finds_a_dependency_nothing_ships_imports() -> None:
    # Installed for the tests only, never imported by what ships; one that is not installed.
    assert unused(["hypothesis>=6", "xdist-never-installed-here"]) == [
        "hypothesis",
        "xdist-never-installed-here",
    ]
