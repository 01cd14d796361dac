"""The keys of the benches' JSON that other tools and the README read: ``bench turn``,
``bench startup`` and ``bench slack_ack``, each run once, small, as a user runs it (``python -m
bench NAME``). A key renamed, dropped or turned into another type fails here, not in whatever
reads the figures. (``bench approval``'s keys: tests/test_bench_slack_side.py.)"""

from __future__ import annotations

import pytest

from tests.bench_run import run_bench

# Each starts real processes (opsbot, the reference MCP servers, the dev IdP): ~6-15 s apiece.
pytestmark = pytest.mark.slow


def _number(value: object) -> float:
    """A JSON number that is a figure (not a boolean, not missing), returned as is."""
    assert isinstance(value, int | float), value
    assert not isinstance(value, bool), value
    return float(value)


def test_bench_turn_keys() -> None:
    result = run_bench("turn", "--turns", "1")
    assert isinstance(result["overhead_ratio"], float)
    assert result["overhead_ratio"] > 0
    cpu = result["cpu_ms_per_turn"]
    assert isinstance(cpu, dict)
    assert sorted(cpu) == ["1", "4", "8"]  # MCP calls per turn, as strings (JSON keys)
    assert all(isinstance(v, float) and v > 0 for v in cpu.values()), cpu
    assert isinstance(result["peer_cpu_ratio"], float)
    assert result["peer_cpu_ratio"] > 0
    statements = result["sql_statements_per_turn"]
    assert isinstance(statements, int)
    assert not isinstance(statements, bool)
    assert statements > 0


def test_bench_startup_keys() -> None:
    result = run_bench("startup", "--runs", "1")
    for key in ("help_s", "dev_ready_s"):
        assert isinstance(result[key], float), (key, result[key])
        assert result[key] > 0, (key, result[key])
    assert result["dev_ready_s"] <= result["dev_bot_ready_s"]


def test_bench_slack_ack_keys() -> None:
    result = run_bench("slack_ack", "--n", "4", "--burst", "2", "--with-agent", "--db", "sqlite")
    assert result["name"] == "slack_ack"
    assert result["database"] == "sqlite"
    p50, p99 = _number(result["p50_ack_ms"]), _number(result["p99_ack_ms"])
    assert isinstance(result["p50_ack_ms"], float)
    assert isinstance(result["p99_ack_ms"], float)
    assert 0 < p50 <= p99
    # None only when the ack loop's lag histogram saw no sample during the phase
    lag = result["loop_lag_p99_ms"]
    assert lag is None or isinstance(lag, float), lag
    # the headline figures are those of the last phase run (--with-agent: the agent phase)
    assert result["p99_ack_ms"] == result["agent_p99_ack_ms"]
    assert lag == result["agent_loop_lag_p99_ms"]
    lost = result["lost"]
    assert isinstance(lost, int)
    assert not isinstance(lost, bool)
    assert lost == 0
