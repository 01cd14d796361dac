"""A fresh clone without Chromium: ``uv run pytest`` passes with the browser tests skipped
and their one-line reason (naming the install command) printed; under ``CI=true`` the same
tests fail instead, so CI cannot pass without running them."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tests import forkserver

ROOT = Path(__file__).resolve().parents[1]
BROWSER_TESTS = "tests/sandbox/test_sandbox_blockkit_browser.py"


def _pytest_without_chromium(tmp_path: Path, *, ci: bool) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPSBOT_", "SLACK_"))}
    env.pop("CI", None)
    env["OPSBOT_TEST_CHROMIUM"] = str(tmp_path / "no-chromium-here")
    if ci:
        env["CI"] = "true"
    # A pytest of its own, forked from this test process's fork server (tests/forkserver.py):
    # the skip or failure comes from the browser fixture's check, not from how pytest starts,
    # and a fresh one spent ~3.5 s of CPU importing the product for its fixtures.
    return subprocess.run(
        forkserver.module_command("pytest", BROWSER_TESTS, "-n", "0", "-p", "no:cacheprovider"),
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_browser_tests_skip_with_the_install_command_when_chromium_is_missing(
    tmp_path: Path,
) -> None:
    run = _pytest_without_chromium(tmp_path, ci=False)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    skipped = [line for line in run.stdout.splitlines() if line.startswith("SKIPPED")]
    assert skipped, run.stdout[-3000:]
    for line in skipped:
        assert "no-chromium-here" in line, line
        assert "`apt-get install chromium`" in line, line
    assert " passed" not in run.stdout.splitlines()[-1]
    assert "skipped" in run.stdout.splitlines()[-1]


def test_under_ci_a_missing_chromium_fails_the_browser_tests(tmp_path: Path) -> None:
    run = _pytest_without_chromium(tmp_path, ci=True)
    assert run.returncode == 1, run.stdout[-3000:] + run.stderr[-3000:]
    summary = run.stdout.splitlines()[-1]
    # pytest.fail in setup counts as an error: either way nothing passed or skipped
    assert "error" in summary or "failed" in summary, summary
    assert "skipped" not in summary, summary
    assert " passed" not in summary, summary
    assert "CI=true: browser tests must run" in run.stdout
