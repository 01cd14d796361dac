"""LangSmith tracing is LangChain's own: with its variables in the process environment, runs are
sent to the configured LangSmith endpoint (here an in-test one) next to opsbot's telemetry."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from aiohttp import web
from langchain_core.tracers.langchain import wait_for_all_tracers
from langsmith import run_trees
from langsmith import utils as ls_utils

from agent_core import Answer
from infra.serving import bind_socket, socket_url
from mcp_servers import ReferenceServers
from testing.agent import AgentEnv, ScriptedChatModel, final, new_thread, open_agent_env
from testing.identity import RunningIdp


@pytest.fixture
def mcp_trusted_issuer(dev_idp: RunningIdp) -> tuple[str, str | None]:
    return dev_idp.issuer, dev_idp.jwks_url


@pytest.fixture
async def agent_env(
    dev_idp: RunningIdp, reference_servers: ReferenceServers
) -> AsyncIterator[AgentEnv]:
    async with open_agent_env(dev_idp, reference_servers) as env:
        yield env


def _forget_langsmith_settings() -> None:
    ls_utils.get_env_var.cache_clear()
    ls_utils.get_tracer_project.cache_clear()


@pytest.fixture
async def langsmith(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[list[tuple[str, bytes]]]:
    received: list[tuple[str, bytes]] = []

    async def anything(request: web.Request) -> web.Response:
        received.append((request.path, await request.read()))
        if request.path.endswith("/info"):
            return web.json_response({"version": "0.0.0", "batch_ingest_config": {}})
        return web.json_response({})

    sock = bind_socket("127.0.0.1", 0)
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", anything)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.SockSite(runner, sock).start()
    # LangSmith caches its environment and client per process: start and end clean, so no
    # other test traces to this (soon gone) endpoint.
    _forget_langsmith_settings()
    monkeypatch.setattr(run_trees, "_CLIENT", None)
    monkeypatch.setenv("LANGSMITH_TRACING", "true")
    monkeypatch.setenv("LANGSMITH_API_KEY", "ls-test-key")
    monkeypatch.setenv("LANGSMITH_ENDPOINT", socket_url(sock))
    monkeypatch.setenv("LANGSMITH_PROJECT", "opsbot-test")
    try:
        yield received
    finally:
        await runner.cleanup()
        monkeypatch.undo()
        _forget_langsmith_settings()


async def test_langsmith_receives_runs_when_its_variables_are_set(
    agent_env: AgentEnv, langsmith: list[tuple[str, bytes]]
) -> None:
    agent = agent_env.agent(ScriptedChatModel(model_name="scripted", steps=[final("traced")]))
    alice = await agent_env.user("alice")
    result = await agent.run(alice, await new_thread(agent, alice), "trace me")
    assert isinstance(result, Answer)
    await asyncio.to_thread(wait_for_all_tracers)  # the fake endpoint runs on this loop
    posted = [(path, body) for path, body in langsmith if "runs" in path]
    assert posted, [p for p, _ in langsmith]
    assert any(b"trace me" in body for _, body in posted)
