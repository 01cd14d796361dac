"""Third-party MCP servers nobody here wrote, through opsbot (issue 19).

npm ``@modelcontextprotocol/server-everything`` runs in ``static`` mode (a service API key)
and PyPI ``mcp-server-time`` (behind ``mcp-proxy``'s streamable HTTP) in ``none`` mode, each
behind a capturing reverse proxy on loopback, beside the reference servers in ``exchange``
mode. A scripted model calls their tools; unclassified, they need approval. The capture
shows that no exchanged user token reached either server. Needs ``npx`` and ``uvx`` (CI has
both; the packages are pinned and fetched from the registries on first use).
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from langchain_core.messages import BaseMessage
from langgraph.checkpoint.memory import InMemorySaver

from agent_core import Agent, AgentConfig, Answer, Interrupt, ServerConfig, ToolPolicy
from agent_core.binding import ToolCallEvent
from agent_core.threads import MemoryThreadStore
from testing.agent import AgentEnv, ScriptedChatModel, call, calls, final, new_thread, tool_results
from testing.third_party_mcp import (
    Capture,
    capture_proxy,
    everything_server,
    sse_bridge,
    time_server,
    tool_missing,
)

SERVICE_KEY = "svc-key-0123456789"

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(autouse=True)
def _launchers() -> None:
    missing = tool_missing("npx", "uvx")
    if missing and not os.environ.get("CI"):
        pytest.skip(f"{missing} is not installed")


@dataclass
class Events:
    seen: list[ToolCallEvent] = field(default_factory=list)

    async def tool_call_started(self, event: ToolCallEvent) -> None:
        self.seen.append(event)

    async def tool_call_finished(
        self, event: ToolCallEvent, outcome: str, latency_ms: float
    ) -> None:
        return None


@dataclass
class ThirdParty:
    everything: Capture
    clock: Capture
    servers: tuple[ServerConfig, ...]


@pytest.fixture
async def third_party(agent_env: AgentEnv) -> AsyncIterator[ThirdParty]:
    async with (
        everything_server() as everything_url,
        time_server() as time_url,
        capture_proxy(everything_url) as (everything_proxy, everything_capture),
        capture_proxy(time_url) as (time_proxy, time_capture),
    ):
        servers = (
            *agent_env.server_configs,
            ServerConfig(
                "everything",
                everything_proxy,
                auth="static",
                header_name="X-Api-Key",
                header_value=SERVICE_KEY,
                timeout_s=20,
            ),
            ServerConfig("clock", time_proxy, auth="none", timeout_s=20),
        )
        yield ThirdParty(everything_capture, time_capture, servers)


def policy_allowing(*names: str) -> ToolPolicy:
    """The default policy with ``names`` allowlisted and left unclassified."""
    spec = ToolPolicy.load().spec
    return ToolPolicy(spec.model_copy(update={"allowlist": [*(spec.allowlist or []), *names]}))


THIRD_PARTY_TOOLS = ("everything_echo", "clock_get_current_time")


def make_agent(env: AgentEnv, servers: tuple[ServerConfig, ...], model: Any, events: Any) -> Agent:
    return Agent(
        AgentConfig(servers=servers, retry_initial_delay=0.0),
        model=model,
        broker=env.harness.broker,
        threads=MemoryThreadStore(),
        checkpointer=InMemorySaver(),
        policy=policy_allowing(*THIRD_PARTY_TOOLS),
        observer=events,
    )


def echo_all(messages: list[BaseMessage]) -> Any:
    return final(" | ".join(str(m.content) for m in tool_results(messages)))


async def test_static_and_none_servers_work_need_approval_and_never_see_a_user_token(
    agent_env: AgentEnv, third_party: ThirdParty
) -> None:
    model = ScriptedChatModel(
        steps=[
            call("ticketing_get_ticket", key="PAY-101"),  # exchange: alice's own token
            calls(
                ("everything_echo", {"message": "hello from opsbot"}),
                ("clock_get_current_time", {"timezone": "Europe/Paris"}),
            ),
            echo_all,
            final("warm"),
        ]
    )
    events = Events()
    agent = make_agent(agent_env, third_party.servers, model, events)
    alice = await agent_env.user("alice")
    thread = await new_thread(agent, alice)

    pending = await agent.run(alice, thread, "echo and tell me the time in Paris")

    # Unclassified third-party tools are writes: both wait for an approver.
    assert isinstance(pending, Interrupt)
    assert sorted(a.name for a in pending.action_requests) == [
        "clock_get_current_time",
        "everything_echo",
    ]
    result = await agent.resume(alice, thread, [{"type": "approve"}] * 2)
    assert isinstance(result, Answer)
    assert "hello from opsbot" in result.answer
    assert "Europe/Paris" in result.answer

    # Whose credential each call carried, as the audit sees it.
    acting = {e.server: e.acting_as for e in events.seen}
    assert acting == {"ticketing": "user", "everything": "service", "clock": "anonymous"}

    # What the servers received: the service key, or nothing; never a user token.
    exchanged = (await agent_env.harness.broker.get_token(alice, "ticketing")).value
    for capture in (third_party.everything, third_party.clock):
        assert capture.headers, "the proxy saw no traffic"
        values = capture.values()
        assert exchanged not in values
        assert not any(exchanged in v or v.lower().startswith("bearer") for v in values)
        assert not any("authorization" in {k.lower() for k in h} for h in capture.headers)
    seen = third_party.everything
    posts = [h for h, verb in zip(seen.headers, seen.verbs, strict=True) if verb == "POST"]
    assert posts
    assert all(h.get("x-api-key") == SERVICE_KEY for h in posts)  # (health probes carry none)
    assert not any("x-api-key" in h for h in third_party.clock.headers)

    # Warm runs list no tools: counted on the server side of the proxy.
    listed = third_party.everything.methods.count("tools/list")
    assert listed == 1
    await agent.run(alice, await new_thread(agent, alice), "warm")
    assert third_party.everything.methods.count("tools/list") == listed
    assert third_party.clock.methods.count("tools/list") == 1


async def test_trust_read_only_hint_makes_hinted_tools_reads(
    agent_env: AgentEnv, third_party: ThirdParty
) -> None:
    from dataclasses import replace

    servers = tuple(
        replace(s, trust_read_only_hint=True) if s.name == "clock" else s
        for s in third_party.servers
    )
    model = ScriptedChatModel(
        steps=[call("clock_get_current_time", timezone="Asia/Tokyo"), echo_all]
    )
    agent = make_agent(agent_env, servers, model, Events())
    alice = await agent_env.user("alice")

    result = await agent.run(alice, await new_thread(agent, alice), "time in Tokyo")

    # mcp-server-time marks get_current_time readOnlyHint: trusted here, it runs at once.
    assert isinstance(result, Answer)
    assert "Asia/Tokyo" in result.answer
    assert agent.policy.classify("clock_get_current_time").source == "read_only_hint"


async def test_a_server_on_the_older_sse_transport_works_behind_the_mcp_proxy_bridge(
    agent_env: AgentEnv,
) -> None:
    """opsbot speaks streamable HTTP; a team's server that still speaks only HTTP+SSE (MCP
    2024-11-05) is reached through the bridge docs/mcp-servers.md gives: here mcp-server-time
    behind mcp-proxy's ``/sse``, bridged by two more mcp-proxy processes."""
    async with time_server() as time_url, sse_bridge(time_url.removesuffix("/mcp") + "/sse") as url:
        legacy = ServerConfig("legacy", url, auth="none", timeout_s=20, trust_read_only_hint=True)
        model = ScriptedChatModel(
            steps=[call("legacy_get_current_time", timezone="Asia/Tokyo"), echo_all]
        )
        agent = Agent(
            AgentConfig(servers=(legacy,), retry_initial_delay=0.0),
            model=model,
            broker=agent_env.harness.broker,
            threads=MemoryThreadStore(),
            checkpointer=InMemorySaver(),
            policy=policy_allowing("legacy_get_current_time", "legacy_convert_time"),
        )
        alice = await agent_env.user("alice")
        try:
            result = await agent.run(alice, await new_thread(agent, alice), "time in Tokyo")
        finally:
            await agent.settle()

    assert isinstance(result, Answer)
    assert "Asia/Tokyo" in result.answer
    assert model.bound_tools[-1] == [
        "legacy_convert_time",
        "legacy_get_current_time",
        "FinalAnswer",
    ]


async def test_resource_links_and_images_from_server_everything_reach_the_model_as_text(
    agent_env: AgentEnv, third_party: ThirdParty
) -> None:
    """server-everything's ``get-resource-links`` answers with resource links and
    ``get-tiny-image`` with an image: as blocks in a tool message, OpenAI's client refused the
    link and its API the image, in every later turn of the thread too."""
    read: list[Any] = []

    def keep(messages: list[BaseMessage]) -> Any:
        read.extend(m.content for m in tool_results(messages))
        return final("done")

    model = ScriptedChatModel(
        steps=[
            calls(("everything_get-resource-links", {}), ("everything_get-tiny-image", {})),
            keep,
        ]
    )
    names = ("everything_get-resource-links", "everything_get-tiny-image")
    spec = policy_allowing(*names).spec
    rules = {**spec.tools, **{n: spec.tools["ticketing_get_ticket"] for n in names}}  # reads
    agent = Agent(
        AgentConfig(servers=third_party.servers, retry_initial_delay=0.0),
        model=model,
        broker=agent_env.harness.broker,
        threads=MemoryThreadStore(),
        checkpointer=InMemorySaver(),
        policy=ToolPolicy(spec.model_copy(update={"tools": rules})),
    )
    alice = await agent_env.user("alice")

    result = await agent.run(alice, await new_thread(agent, alice), "links and an image")

    assert isinstance(result, Answer)
    links, image = read
    assert isinstance(links, str)
    assert isinstance(image, str)
    assert "[resource link: " in links
    assert "demo://resource/" in links
    assert "[image/png image omitted]" in image
