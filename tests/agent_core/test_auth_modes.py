"""Per-server auth modes and visibility (issue 19): settings, credentials, start-up lines."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage
from langgraph.checkpoint.memory import InMemorySaver
from pydantic import ValidationError

from agent_core import Agent, AgentConfig, Answer, ServerConfig, ToolPolicy
from agent_core.catalog import describe_tools
from agent_core.credentials import Credentials
from agent_core.errors import ConnectRequiredError, CredentialError
from agent_core.factory import ServerConfigError, check_servers, log_servers, server_config
from agent_core.threads import MemoryThreadStore, PlatformRef
from broker import Identity
from infra.settings import McpServerSettings, Settings
from testing.agent import (
    FAKE_POLICY,
    FakeBroker,
    FunctionChatModel,
    ScriptedChatModel,
    fake_mcp_server,
    final,
)

ALICE = Identity("alice")


def servers(raw: str) -> list[McpServerSettings]:
    return Settings.model_validate({"mcp_servers": json.loads(raw)}).mcp_servers


def test_unknown_server_keys_are_an_error_naming_the_key(monkeypatch: pytest.MonkeyPatch) -> None:
    raw = '[{"name": "g", "url": "http://g/mcp", "audience": "g", "headers": {}}]'
    monkeypatch.setenv("OPSBOT_MCP_SERVERS", raw)
    with pytest.raises(ValidationError) as caught:
        Settings()
    assert "mcp_servers.0.headers" in str(caught.value)
    assert "Extra inputs are not permitted" in str(caught.value)


def test_exchange_is_the_default_and_needs_an_audience() -> None:
    (s,) = servers('[{"name": "g", "url": "http://g/mcp", "audience": "https://g"}]')
    assert s.auth == "exchange"
    assert s.timeout_s is None  # the agent's read and write timeouts
    assert s.trust_read_only_hint is False
    with pytest.raises(ValidationError, match="needs an 'audience'"):
        servers('[{"name": "g", "url": "http://g/mcp"}]')


def test_static_reads_its_secret_from_an_env_var_or_a_file(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("GRAFANA_MCP_KEY", "from-env-123")
    (s,) = servers(
        '[{"name": "g", "url": "http://g/mcp", "auth": "static", "header_name": "X-Api-Key",'
        ' "header_value_env": "GRAFANA_MCP_KEY"}]'
    )
    assert s.header_value is not None
    assert s.header_value.get_secret_value() == "from-env-123"
    assert "from-env-123" not in repr(s)
    config = server_config(s)
    assert (config.header_name, config.header_value, config.acting_as) == (
        "X-Api-Key",
        "from-env-123",
        "service",
    )
    assert "from-env-123" not in repr(config)

    secret = tmp_path / "key"
    secret.write_text("from-file-456\n")
    (f,) = servers(
        f'[{{"name": "g", "url": "http://g/mcp", "auth": "static", '
        f'"header_value_file": "{secret}"}}]'
    )
    assert f.header_value is not None
    assert f.header_value.get_secret_value() == "from-file-456"


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ('{"auth": "static"}', "exactly one of header_value_env or header_value_file"),
        ('{"auth": "static", "header_value_env": "NOPE_UNSET_VAR"}', "NOPE_UNSET_VAR is not set"),
        (
            '{"auth": "static", "header_value_file": "/nonexistent/key"}',
            "cannot read header_value_file",
        ),
        (
            '{"auth": "static", "header_value_env": "X", "trust_read_only_hint": true}',
            "trust_read_only_hint is not allowed",
        ),
        ('{"auth": "none", "header_value_env": "X"}', "need auth 'static'"),
        ('{"auth": "basic"}', "auth"),
    ],
)
def test_incomplete_auth_settings_name_what_is_wrong(raw: str, message: str) -> None:
    base = '{"name": "g", "url": "http://g/mcp", '
    with pytest.raises(ValidationError, match=message):
        servers(f"[{base}{raw[1:]}]")


def test_only_exchange_servers_get_a_broker_audience() -> None:
    settings = Settings.model_validate(
        {
            "mcp_servers": [
                {"name": "a", "url": "http://a/mcp", "audience": "aud-a"},
                {"name": "b", "url": "http://b/mcp", "auth": "none"},
            ]
        }
    )
    assert settings.exchange_audiences == {"a": "aud-a"}


def test_start_up_refuses_oauth_without_the_broker_and_warns_for_none(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with pytest.raises(ServerConfigError, match="'j' has auth 'oauth'"):
        check_servers([ServerConfig("j", "http://j/mcp", auth="oauth")], oauth_available=False)
    check_servers([ServerConfig("j", "http://j/mcp", auth="oauth")], oauth_available=True)
    none = ServerConfig("t", "http://t/mcp", auth="none")
    timed = ServerConfig("u", "http://u/mcp", timeout_s=2.5)
    with caplog.at_level(logging.INFO, logger="agent_core.factory"):
        check_servers([none], oauth_available=False)
        log_servers(AgentConfig(servers=(none, timed), read_timeout=20, write_timeout=30))
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "auth none" in warnings[0].getMessage()
    # Each server's per-call timeout as it applies (it read "timeout=Nones" without one).
    lines = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    assert lines == [
        "mcp server t: auth=none url=http://t/mcp timeout=20s reads, 30s writes "
        "acting as anonymous",
        "mcp server u: auth=exchange url=http://u/mcp timeout=2.5s acting as user; "
        "tools listed at the first run",
    ]


async def test_credentials_per_mode_and_never_a_token_for_another_audience() -> None:
    broker = FakeBroker(audiences={"x": "aud-x", "y": "aud-other"})
    creds = Credentials(broker, ALICE)
    assert await creds.headers(ServerConfig("x", "http://x/mcp", "aud-x")) == {
        "Authorization": "Bearer tok-alice-x"
    }
    with pytest.raises(CredentialError, match="another audience"):
        await creds.headers(ServerConfig("y", "http://y/mcp", "aud-y"))
    static = ServerConfig("s", "http://s/mcp", auth="static", header_value="k", header_name="K")
    assert await creds.headers(static) == {"K": "k"}
    assert await creds.headers(ServerConfig("n", "http://n/mcp", auth="none")) == {}
    assert broker.minted == [("alice", "x"), ("alice", "y")]  # static/none mint nothing


async def test_oauth_servers_use_the_injected_source_and_ask_to_connect() -> None:
    from broker import ConnectRequired

    asked: list[tuple[str, str]] = []

    async def oauth_token(identity: Identity, server: str) -> str:
        asked.append((identity.subject, server))
        if server == "linear":
            raise ConnectRequired(server, "https://opsbot/connect/linear")
        return "user-oauth-token"

    creds = Credentials(FakeBroker(), ALICE, oauth_token)
    config = ServerConfig("jira", "http://j/mcp", auth="oauth")
    assert await creds.headers(config) == {"Authorization": "Bearer user-oauth-token"}
    with pytest.raises(ConnectRequiredError) as caught:
        await creds.headers(ServerConfig("linear", "http://l/mcp", auth="oauth"))
    assert caught.value.authorize_url == "https://opsbot/connect/linear"
    assert asked == [("alice", "jira"), ("alice", "linear")]


async def test_discovery_logs_one_line_per_server_with_what_is_left_out(
    caplog: pytest.LogCaptureFixture,
) -> None:
    policy = ToolPolicy.from_yaml(FAKE_POLICY + "allowlist: [fake_lookup, fake_change]\n")
    async with fake_mcp_server() as (url, _plan):
        agent = Agent(
            AgentConfig(servers=(ServerConfig("fake", url, url),)),
            model=ScriptedChatModel(steps=[final("ok")]),
            broker=FakeBroker(audiences={"fake": url}),
            threads=MemoryThreadStore(),
            checkpointer=InMemorySaver(),
            policy=policy,
        )
        thread = await agent.threads.get_or_create(PlatformRef("t", "T", "C", "1"), "alice")
        with caplog.at_level(logging.INFO, logger="agent_core.agent"):
            assert isinstance(await agent.run(ALICE, thread.thread_id, "hi"), Answer)
        lines = [r.getMessage() for r in caplog.records if "mcp server fake" in r.getMessage()]
        assert lines == [
            "mcp server fake: auth=exchange tools=5 allowlisted=2 "
            "left out: fake_note, fake_slow_change, fake_slow_lookup"
        ]
        found = await agent.discover_all(ALICE)
    rows, notes = describe_tools(agent.servers, found, policy)
    by_tool = {r.tool: r for r in rows}
    assert notes == []
    assert by_tool["fake_lookup"].kind == "read"
    assert by_tool["fake_lookup"].allowlisted
    assert "classified read" in by_tool["fake_lookup"].why
    assert not by_tool["fake_slow_lookup"].allowlisted
    assert "hidden from the model" in by_tool["fake_slow_lookup"].why


async def test_servers_that_need_no_user_are_listed_at_start_and_a_down_one_says_so(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Issue 19: at start, one line per server with its tool counts. A ``none`` (or
    ``static``) server is listed before any run, and the first run finds it cached; an
    ``exchange`` server waits for a user's token; one that is down is one warning."""
    policy = ToolPolicy.from_yaml(FAKE_POLICY + "allowlist: [fake_lookup, fake_change]\n")
    async with fake_mcp_server() as (url, _plan):
        servers = (
            ServerConfig("fake", url, auth="none"),
            ServerConfig("gone", "http://127.0.0.1:9/mcp", auth="none", timeout_s=2),
            ServerConfig("users", "http://127.0.0.1:9/mcp", "aud-users"),
        )
        agent = Agent(
            AgentConfig(servers=servers),
            model=ScriptedChatModel(steps=[final("ok")]),
            broker=FakeBroker(audiences={"users": "aud-users"}),
            threads=MemoryThreadStore(),
            checkpointer=InMemorySaver(),
            policy=policy,
        )
        with caplog.at_level(logging.INFO, logger="agent_core.agent"):
            await agent.list_at_start()
        said = [r.getMessage() for r in caplog.records if r.getMessage().startswith("mcp server")]
        assert said[0] == (
            "mcp server fake: auth=none tools=5 allowlisted=2 "
            "left out: fake_note, fake_slow_change, fake_slow_lookup"
        )
        assert len(said) == 2
        assert said[1].startswith("mcp server gone: tools not listed at start")
        assert [r.levelname for r in caplog.records if "gone" in r.getMessage()] == ["WARNING"]
        listed = agent.stats.list_tools_calls
        thread = await agent.threads.get_or_create(PlatformRef("t", "T", "C", "1"), "alice")
        assert isinstance(await agent.run(ALICE, thread.thread_id, "hi"), Answer)
        assert agent.stats.list_tools_calls == listed == 1  # the run found it cached
        await agent.settle()


def test_an_unclassified_tool_is_a_write_until_its_hint_is_trusted() -> None:
    policy = ToolPolicy.from_yaml("tools: {}")
    assert policy.classify("t_now").kind == "write"
    policy.trust_read_only("t", ["t_now"])
    cls = policy.classify("t_now")
    assert (cls.kind, cls.source, cls.sensitive) == ("read", "read_only_hint", False)
    strict = ToolPolicy.from_yaml("tools: {t_now: {kind: write}}")
    strict.trust_read_only("t", ["t_now"])  # the policy file wins over a server's hint
    assert strict.classify("t_now").kind == "write"


def test_a_tool_whose_server_no_longer_hints_it_read_only_is_a_write_again() -> None:
    """The server's latest list is what is trusted: a hint it dropped (the tool now writes)
    no longer makes the tool a read, while another server's hints stay."""
    policy = ToolPolicy.from_yaml("tools: {}")
    policy.trust_read_only("t", ["t_now", "t_zone"])
    policy.trust_read_only("u", ["u_peek"])
    policy.trust_read_only("t", ["t_zone"])
    assert policy.classify("t_now").kind == "write"
    assert policy.classify("t_zone").kind == "read"
    assert policy.classify("u_peek").kind == "read"


async def test_an_unconnected_oauth_servers_connect_url_reaches_no_model_text() -> None:
    """The URL connecting alice is bound to her: it is in ``answer.connect`` (her private
    *Connect* button), never in what the model reads nor in the answer people see."""
    from broker import ConnectRequired

    connect_url = "https://opsbot.test/connect/fake?state=alice-only"

    async def oauth_token(identity: Identity, server: str) -> str:
        raise ConnectRequired(server, connect_url)

    seen: list[str] = []

    def model(messages: list[Any]) -> AIMessage:
        seen.extend(str(m.content) for m in messages)
        return final("PAY-1 is open.")

    async with fake_mcp_server() as (url, _plan):
        agent = Agent(
            AgentConfig(servers=(ServerConfig("fake", url, auth="oauth"),)),
            model=FunctionChatModel(fn=model),
            broker=FakeBroker(),
            threads=MemoryThreadStore(),
            checkpointer=InMemorySaver(),
            policy=ToolPolicy.from_yaml(FAKE_POLICY),
            oauth_token=oauth_token,
        )
        thread = await agent.threads.get_or_create(PlatformRef("t", "T", "C", "2"), "alice")
        answer = await agent.run(ALICE, thread.thread_id, "show PAY-1")
        await agent.settle()
    assert isinstance(answer, Answer)
    assert answer.connect == {"fake": connect_url}
    assert seen, "the model was never asked"
    assert connect_url not in "\n".join(seen)
    shown = "\n".join([answer.answer, *answer.caveats, *answer.actions_taken])
    assert connect_url not in shown
    assert "You have not connected opsbot to fake yet" in shown
