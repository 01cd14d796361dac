"""The ``slow`` marker: the files that start ``opsbot`` processes, benches or outside servers
and are among the slowest carry it (tests/conftest.py, by tests/scheduling.py's rule), so
``-m "not slow"`` is a quick local loop; and nothing in CI's path selects by marker, so CI runs
every test, the slow ones too."""

from __future__ import annotations

import shlex
import tomllib
from pathlib import Path
from typing import cast

import pytest

from tests.scheduling import FILE_SECONDS, is_slow_file

ROOT = Path(__file__).resolve().parents[1]

# Files that start opsbot (or a bench, node, a browser) and wait on it, each among the slowest
PROCESS_FILES = [
    "test_config_errors.py",
    "sandbox/test_sandbox_cli.py",
    "test_opsbot_cli.py",
    "test_bench_slack_side.py",
    "test_bench_keys.py",
    "mcp_servers/test_cli.py",
    "sandbox/test_sandbox_keep.py",
    "mcp_servers/test_conformance.py",
    "bot/test_slack_e2e.py",
]


def _selects_by_marker(args: list[str]) -> list[str]:
    return [a for a in args if a == "-m" or a.startswith(("-m", "--markexpr"))]


def test_ci_selects_no_marker() -> None:
    """Neither the pytest options nor .ci/run's pytest command pass ``-m``: CI runs all."""
    options = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]
    addopts = options["ini_options"]["addopts"]
    args = shlex.split(addopts) if isinstance(addopts, str) else list(addopts)
    assert _selects_by_marker(args) == [], addopts
    script = (ROOT / ".ci" / "run").read_text()
    assert "PYTEST_ADDOPTS" not in script
    commands = [
        line
        for line in script.splitlines()
        if "pytest" in line and not line.lstrip().startswith("#")
    ]
    assert any(line.lstrip().startswith("uv run pytest") for line in commands), commands
    for line in commands:
        assert _selects_by_marker(shlex.split(line, comments=True)) == [], line


@pytest.mark.parametrize("relative", PROCESS_FILES)
def test_the_slowest_process_files_are_slow(relative: str) -> None:
    assert (ROOT / "tests" / relative).is_file(), relative
    assert relative in FILE_SECONDS, f"{relative}: no recorded seconds in tests/scheduling.py"
    assert is_slow_file(relative), f"{relative}: {FILE_SECONDS[relative]} s is not slow"


class _Item:
    """What the collection hook reads of a collected test: its path and its markers."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.marks: list[str] = []

    def get_closest_marker(self, name: str) -> str | None:
        return name if name in self.marks else None

    def add_marker(self, mark: pytest.MarkDecorator) -> None:
        self.marks.append(mark.name)


def test_the_collection_hook_marks_the_slow_files_and_only_those() -> None:
    """The rule as collection applies it (tests/conftest.py): a slow file's tests get
    ``slow``, a short file's do not."""
    from tests import conftest

    tests = ROOT / "tests"
    slow = [_Item(tests / relative) for relative in PROCESS_FILES]
    quick = [_Item(tests / "test_deploy.py"), _Item(tests / "test_settings.py")]
    conftest.pytest_collection_modifyitems(cast("list[pytest.Item]", slow + quick))
    assert [item.marks for item in slow] == [["slow"]] * len(slow)
    assert [item.marks for item in quick] == [[], []]
