"""The quality gates CI runs: ruff (lint + format), mypy --strict, and the import contract.

They run inside the test suite so that the README's one test command checks everything.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


def _run(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=600, check=False)


def test_ruff_lint() -> None:
    result = _run(str(BIN / "ruff"), "check", ".")
    assert result.returncode == 0, result.stdout + result.stderr


def test_ruff_format() -> None:
    result = _run(str(BIN / "ruff"), "format", "--check", ".")
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_strict() -> None:
    result = _run(str(BIN / "mypy"))
    assert result.returncode == 0, result.stdout + result.stderr


def test_import_contract_holds() -> None:
    result = _run(str(BIN / "lint-imports"), "--no-cache")
    assert result.returncode == 0, result.stdout + result.stderr


def _core_packages() -> list[str]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    contracts = config["tool"]["importlinter"]["contracts"]
    [chat_sdk] = [c for c in contracts if "chat SDK" in c["name"]]
    sources: list[str] = chat_sdk["source_modules"]
    return sources


@pytest.mark.parametrize("package", _core_packages())
def test_import_contract_catches_a_chat_sdk_import(tmp_path: Path, package: str) -> None:
    """Copy the tree, make one core module import slack_sdk: the contract must fail."""
    for item in ROOT.iterdir():
        if item.name in {"pyproject.toml"} or (item / "__init__.py").exists():
            if item.is_dir():
                shutil.copytree(
                    item, tmp_path / item.name, ignore=shutil.ignore_patterns("__pycache__")
                )
            else:
                shutil.copy(item, tmp_path / item.name)
    (tmp_path / package / "leak.py").write_text("import slack_sdk\n")
    result = _run(str(BIN / "lint-imports"), "--no-cache", cwd=tmp_path)
    assert result.returncode != 0
    assert f"{package}.leak -> slack_sdk" in result.stdout


def _project_sources() -> list[Path]:
    """Every ``.py`` file of the checkout outside ``.venv`` and ``tests``. Those two are
    pruned from the walk, not filtered after it: ``rglob`` walked the virtualenv's ~30,000
    files (~1-3 s of CPU) only to skip them."""
    sources = []
    for directory, subdirectories, files in os.walk(ROOT):
        if Path(directory) == ROOT:
            subdirectories[:] = [d for d in subdirectories if d not in {".venv", "tests"}]
        sources += [Path(directory, name) for name in files if name.endswith(".py")]
    return sources


def test_only_settings_reads_the_environment() -> None:
    sources = _project_sources()
    assert ROOT / "infra" / "settings.py" in sources  # the walk reaches the packages
    offenders = []
    for path in sources:
        relative = path.relative_to(ROOT)
        if relative == Path("infra/settings.py"):
            continue
        text = path.read_text()
        if "os.environ" in text or "getenv(" in text:
            offenders.append(str(relative))
    assert offenders == []
