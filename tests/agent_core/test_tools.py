"""Tool naming, collisions, allowlist, model-visible schemas and the discovery cache."""

from __future__ import annotations

import asyncio

import pytest

from agent_core import ToolCollisionError, ToolPolicy
from agent_core.tools import (
    DiscoveryCache,
    ServerTools,
    ToolDefinition,
    check_collisions,
    prefixed,
    visible_definitions,
)
from testing.agent import AgentEnv, ScriptedChatModel, final, new_thread

SCHEMA = {
    "type": "object",
    "properties": {"key": {"type": "string"}, "idempotency_key": {"type": "string"}},
    "required": ["key", "idempotency_key"],
}


def d(server: str, name: str) -> ToolDefinition:
    return ToolDefinition(server, name, "desc", SCHEMA)


def test_prefix_and_collision_after_prefixing_stops_startup() -> None:
    assert prefixed("ticketing", "get_ticket") == "ticketing_get_ticket"
    check_collisions([d("ticketing", "get"), d("docs", "get")])
    with pytest.raises(ToolCollisionError, match="a_b_c"):
        check_collisions([d("a", "b_c"), d("a_b", "c")])


def test_allowlist_filters_in_prefixed_names() -> None:
    policy = ToolPolicy.from_yaml("allowlist: [t_keep]\ntools: {}")
    visible = visible_definitions([d("t", "keep"), d("t", "drop")], policy)
    assert [v.prefixed_name for v in visible] == ["t_keep"]


def test_model_never_sees_or_sets_the_idempotency_key() -> None:
    schema = d("t", "x").model_schema()
    assert "idempotency_key" not in schema["properties"]
    assert schema["required"] == ["key"]
    assert "idempotency_key" in SCHEMA["properties"]  # the cached original is untouched


def test_cache_drops_an_entry_when_the_server_version_changes() -> None:
    cache = DiscoveryCache()
    cache.put(ServerTools("t", "t/1.0", (d("t", "x"),)))
    cache.observe_version("t", "t/1.0")
    assert cache.get("t") is not None
    cache.observe_version("t", "t/2.0")
    assert cache.get("t") is None


async def test_discovery_is_cached_warm_runs_list_nothing(agent_env: AgentEnv) -> None:
    model = ScriptedChatModel(steps=[final("ok")])
    agent = agent_env.agent(model)
    alice = await agent_env.user("alice")
    await agent.run(alice, await new_thread(agent, alice), "cold")
    assert agent.stats.list_tools_calls == 3  # one per server
    for entry in (agent.cache.get(s) for s in ("ticketing", "docs", "database")):
        assert entry is not None
        for tool in entry.tools:  # definitions only: no credentials anywhere
            assert "Bearer" not in repr(tool)
            assert "eyJ" not in repr(tool)

    await agent.run(alice, await new_thread(agent, alice), "warm")
    await agent.run(alice, await new_thread(agent, alice), "warm again")
    assert agent.stats.list_tools_calls == 3


async def test_concurrent_cold_runs_discover_once(agent_env: AgentEnv) -> None:
    model = ScriptedChatModel(steps=[final("ok")])
    agent = agent_env.agent(model)
    alice = await agent_env.user("alice")
    threads = [await new_thread(agent, alice) for _ in range(5)]
    await asyncio.gather(*(agent.run(alice, t, f"cold {i}") for i, t in enumerate(threads)))
    assert agent.stats.list_tools_calls == 3
