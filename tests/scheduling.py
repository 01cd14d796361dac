"""The order and the number of pytest-xdist workers.

With ``--dist loadfile`` xdist hands out whole files in collection order. Collected
alphabetically, the slowest files (browser, crash and process tests) came last and left one
worker busy for minutes while the other idled. Here the slowest files go first, so the many
short files fill in behind them.

The suite mostly waits (subprocesses, servers, polling), it is not CPU-bound: ``-n auto``
starts more workers than cores. Every test already uses free ports and its own databases.
"""

from __future__ import annotations

import os

import pytest

# Seconds per file (sum of its slow tests' setup + call) measured with
# ``CI=true uv run pytest --durations=120`` on 2 cores. Only the order matters; files not
# listed are short and keep their place after these. Re-measure when a file turns slow.
FILE_SECONDS: dict[str, int] = {
    "sandbox/test_sandbox_home_browser.py": 116,
    "reliability/test_reliability_kill_points.py": 60,
    "sandbox/test_sandbox_stop_browser.py": 49,
    "reliability/test_reliability_startup.py": 43,
    "reliability/test_reliability_app_crash.py": 31,
    "reliability/test_reliability_pg_restart.py": 27,
    "sandbox/test_sandbox_cli.py": 24,
    "test_config_errors.py": 21,
    "test_quality_gates.py": 20,
    "mcp_servers/test_cli.py": 20,
    "test_opsbot_cli.py": 19,
    "bot/test_slack_truth.py": 19,
    "test_fresh_machine.py": 17,
    "sandbox/test_sandbox_browser.py": 17,
    "bot/test_slack_stop.py": 15,
    "reliability/test_reliability_hung_server.py": 14,
    "agent_core/test_third_party_mcp.py": 14,
    "test_postgres_policy.py": 12,
    "ops/test_ops_tracing.py": 12,
    "mcp_servers/test_hosts_and_health.py": 12,
    "mcp_servers/test_conformance.py": 10,
    "bot/test_slack_fuzz.py": 10,
    "bot/test_slack_batch.py": 10,
    "ops/test_ops_prune.py": 9,
    "sandbox/test_sandbox_stack.py": 6,
    "reliability/test_reliability_agent_faults.py": 6,
    "bot/test_teams_cli.py": 6,
    "approvals/test_approvals_truth.py": 6,
    "parity/test_parity_approvals.py": 5,
    "ops/test_ops_app_metrics.py": 5,
    "broker/test_commands.py": 5,
    "bot/test_slack_e2e.py": 5,
    "agent_core/test_users_e2e.py": 5,
    "sandbox/test_sandbox_stream_browser.py": 4,
    "sandbox/test_sandbox_blockkit_browser.py": 4,
    "broker/test_mcp_oauth.py": 4,
    "bot/test_slack_streaming.py": 3,
}

# Workers per core for ``-n auto``: the workers mostly wait on subprocesses and servers.
# Measured on 2 cores (load ~7-9 from other work): eight tests/bot files, 108 tests, took
# 207 s with -n 2 and 93 s with -n 4, none failing.
WORKERS_PER_CORE = 2


def slowest_files_first(items: list[pytest.Item], tests_dir: str) -> None:
    """Reorder ``items`` in place: the heaviest files first. The sort is stable, so a file's
    tests stay together and in their own order (module fixtures are built once)."""

    def weight(item: pytest.Item) -> int:
        relative = os.path.relpath(item.path, tests_dir).replace(os.sep, "/")
        return FILE_SECONDS.get(relative, 0)

    items.sort(key=weight, reverse=True)


def auto_workers() -> int:
    return WORKERS_PER_CORE * (os.cpu_count() or 1)
