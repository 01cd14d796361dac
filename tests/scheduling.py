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
# 2026-12-03: ``uv run pytest --durations=150`` (load ~8, no Chromium) divided by 8, the median
# ratio to the figures above for the files in both; each file keeps the larger figure, which
# put test_config_errors, test_sandbox_keep (missing before) and test_postgres_policy earlier.
# 2026-12-03 (later): each file keeps the larger of that figure and its CPU seconds (the test
# process's own plus its reaped subprocesses', per test, summed; + the fixed waits of
# pg_restart, startup and hung_server), measured over a whole ``CI=true uv run pytest``: on
# 2 cores the suite is CPU-bound, so a file that costs much CPU goes early too.
# test_quality_gates: 30, its cold mypy (a clean clone has no .mypy_cache) is ~25 s of CPU.
# 2026-12-03 (night): the app-crash tests and the nested pytest runs fork from the fork server
# now; their files re-measured over a whole run (load 2.4-6.5; per file the larger of CPU and
# wall seconds, wall/old figure ~1.0 for the files in both): 6, 7 and 3. The other files'
# figures would hardly move the order: the four workers' busy spans ended within 3 s of each
# other in that run.
# 2026-12-04: test_bench_slack_side (two short runs of bench approval): 22 s wall, 15 s CPU
# alone with -n0 (load 2).
FILE_SECONDS: dict[str, int] = {
    "sandbox/test_sandbox_home_browser.py": 116,
    "reliability/test_reliability_kill_points.py": 60,
    "sandbox/test_sandbox_stop_browser.py": 49,
    "reliability/test_reliability_startup.py": 43,
    "test_config_errors.py": 38,
    "sandbox/test_sandbox_cli.py": 36,
    "reliability/test_reliability_pg_restart.py": 30,
    "test_quality_gates.py": 30,
    "test_opsbot_cli.py": 24,
    "test_bench_slack_side.py": 22,
    "test_bench_keys.py": 22,  # 2026-12-05: -n0 alone, 19 s wall, 17 s CPU (three small benches)
    "mcp_servers/test_cli.py": 22,
    "sandbox/test_sandbox_keep.py": 22,
    "bot/test_slack_truth.py": 19,
    "sandbox/test_sandbox_browser.py": 17,
    "bot/test_slack_stop.py": 15,
    "mcp_servers/test_conformance.py": 15,
    "agent_core/test_third_party_mcp.py": 14,
    "reliability/test_reliability_hung_server.py": 14,
    "approvals/test_approvals_truth.py": 13,
    "mcp_servers/test_hosts_and_health.py": 12,
    "ops/test_ops_tracing.py": 12,
    "bot/test_slack_batch.py": 10,
    "bot/test_slack_fuzz.py": 10,
    "sandbox/test_sandbox_teams_browser.py": 10,
    "bot/test_slack_e2e.py": 9,
    "ops/test_ops_prune.py": 9,
    "bot/test_slack_streaming.py": 8,
    "test_postgres_policy.py": 7,
    "agent_core/test_hitl_e2e.py": 7,
    "agent_core/test_users_e2e.py": 7,
    "bot/test_teams_cli.py": 7,
    "broker/test_commands.py": 7,
    "sandbox/test_sandbox_stack.py": 7,
    "reliability/test_reliability_agent_faults.py": 6,
    "reliability/test_reliability_app_crash.py": 6,
    "agent_core/test_failures_e2e.py": 5,
    "agent_core/test_model_extras.py": 5,
    "approvals/test_approvals_end_to_end.py": 5,
    "broker/test_mcp_oauth.py": 5,
    "broker/test_third_party_exchange.py": 5,  # 2026-12-05: -n0 alone, 2.6 s of it sleeps
    "ops/test_ops_app_metrics.py": 5,
    "parity/test_parity_approvals.py": 5,
    "reliability/test_reliability_jobs.py": 5,
    "test_structure.py": 5,
    "approvals/test_approvals_caps.py": 4,
    "broker/test_dev_idp.py": 4,
    "mcp_servers/test_auth_http.py": 4,
    "mcp_servers/test_ticketing.py": 4,
    "sandbox/test_sandbox_blockkit_browser.py": 4,
    "sandbox/test_sandbox_stream_browser.py": 4,
    "agent_core/test_middleware.py": 3,
    "agent_core/test_turn_cost.py": 3,
    "approvals/test_approvals_assistant.py": 3,
    "bot/test_teams_auth.py": 3,
    "bot/test_teams_sso.py": 3,
    "bot/test_teams_stop.py": 3,
    "broker/test_inprocess_broker.py": 3,
    "broker/test_linking.py": 3,
    "mcp_servers/test_hostile_tokens.py": 3,
    "reliability/test_reliability_instances.py": 3,
    "test_fresh_machine.py": 3,
    "agent_core/test_tool_errors.py": 2,
    "approvals/test_approvals_cross_platform.py": 2,
    "approvals/test_approvals_store_contract.py": 2,
    "bot/test_cross_platform_approvals.py": 2,
    "bot/test_slack_approvals.py": 2,
    "bot/test_slack_events.py": 2,
    "bot/test_slack_full_stack.py": 2,
    "bot/test_teams_adapter.py": 2,
    "bot/test_teams_approvals.py": 2,
    "broker/test_dev_idp_scoping_property.py": 2,
    "broker/test_remote_broker.py": 2,
    "broker/test_third_party_idp.py": 2,
    "mcp_servers/test_database_postgres.py": 2,
    "ops/test_ops_run_telemetry.py": 2,
    "parity/test_parity.py": 2,
    "test_deploy.py": 2,
}

# Files recorded at this many seconds or more are ``slow`` (tests/conftest.py): the ones that
# start ``opsbot`` processes, benches or outside servers (node, Chromium, PostgreSQL clusters)
# and wait on them. ``-m "not slow"`` leaves them out of a quick local loop; CI runs them all.
SLOW_FILE_SECONDS = 9

# Workers per core for ``-n auto``: the workers mostly wait on subprocesses and servers.
# Measured on 2 cores (load ~7-9 from other work): eight tests/bot files, 108 tests, took
# 207 s with -n 2 and 93 s with -n 4, none failing.
WORKERS_PER_CORE = 2


def relative_file(item: pytest.Item, tests_dir: str) -> str:
    """``item``'s file relative to tests/, with ``/``: its key in ``FILE_SECONDS``."""
    return os.path.relpath(item.path, tests_dir).replace(os.sep, "/")


def is_slow_file(relative: str) -> bool:
    """Whether the file at ``relative`` (to tests/, with ``/``) is among the slowest."""
    return FILE_SECONDS.get(relative, 0) >= SLOW_FILE_SECONDS


def slowest_files_first(items: list[pytest.Item], tests_dir: str) -> None:
    """Reorder ``items`` in place: the heaviest files first. The sort is stable, so a file's
    tests stay together and in their own order (module fixtures are built once)."""
    items.sort(key=lambda item: FILE_SECONDS.get(relative_file(item, tests_dir), 0), reverse=True)


def auto_workers() -> int:
    return WORKERS_PER_CORE * (os.cpu_count() or 1)
