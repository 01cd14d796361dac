"""Run telemetry on the real agent loop (dev IdP, reference servers, scripted models): tokens
and cost from usage metadata × configured prices, fallback use, call-limit hits, PII
redactions, bulk-write flags, and the middleware-decision spans."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from langchain_core.messages import BaseMessage
from langchain_core.outputs import ChatResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import generate_latest

from agent_core import Agent, Answer, Interrupt
from infra.settings import ModelPrice, ObservabilitySettings
from mcp_servers import ReferenceServers
from opsbot.observability import REGISTRY, RunInstrumentation, Tracing, pseudonymous_id
from testing.agent import (
    AgentEnv,
    FailingChatModel,
    ScriptedChatModel,
    call,
    calls,
    final,
    new_thread,
    open_agent_env,
)
from testing.identity import RunningIdp
from tests.ops.conftest import Samples, delta, parse_metrics

PRICE = ModelPrice(input_per_million=3.0, output_per_million=15.0)


class MeteredModel(ScriptedChatModel):
    """A scripted model that reports usage like a provider: 100 tokens in, 20 out a call."""

    def _generate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> ChatResult:
        result = super()._generate(messages, *args, **kwargs)
        message: Any = result.generations[0].message
        message.usage_metadata = {"input_tokens": 100, "output_tokens": 20, "total_tokens": 120}
        return result


@pytest.fixture
def mcp_trusted_issuer(dev_idp: RunningIdp) -> tuple[str, str | None]:
    return dev_idp.issuer, dev_idp.jwks_url


@pytest.fixture
async def agent_env(
    dev_idp: RunningIdp, reference_servers: ReferenceServers
) -> AsyncIterator[AgentEnv]:
    async with open_agent_env(dev_idp, reference_servers) as env:
        yield env


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def tracing(exporter: InMemorySpanExporter) -> Tracing:
    return Tracing.from_settings(ObservabilitySettings(), exporter=exporter)


def _agent(
    env: AgentEnv, model: Any, tracing: Tracing, *, fallbacks: list[Any] | None = None, **cfg: Any
) -> Agent:
    base = env.agent(model, **cfg)
    return Agent(
        base.config,
        model=model,
        fallbacks=fallbacks or [],
        broker=env.harness.broker,
        threads=base.threads,
        checkpointer=base.checkpointer,
        policy=base.policy,
        run_callbacks=RunInstrumentation(tracing, {"metered": PRICE, "backup": PRICE}),
    )


def _scrape() -> Samples:
    return parse_metrics(generate_latest(REGISTRY).decode())


async def test_tokens_and_cost_per_request(agent_env: AgentEnv, tracing: Tracing) -> None:
    model = MeteredModel(
        model_name="metered",
        steps=[
            call("ticketing_get_ticket", key="PAY-101"),
            final("ok", [("ticketing", "PAY-101")]),
        ],
    )
    agent = _agent(agent_env, model, tracing)
    alice = await agent_env.user("alice")
    before = _scrape()
    result = await agent.run(alice, await new_thread(agent, alice), "show PAY-101")
    after = _scrape()
    assert isinstance(result, Answer)

    def moved(name: str, **labels: str) -> float:
        return delta(before, after, name, **labels)

    assert moved("opsbot_model_calls_total", model="metered") == 2
    assert moved("opsbot_model_tokens_total", model="metered", direction="input") == 200
    assert moved("opsbot_model_tokens_total", model="metered", direction="output") == 40
    cost = 2 * (100 * 3.0 + 20 * 15.0) / 1_000_000
    assert moved("opsbot_model_cost_usd_total", model="metered") == pytest.approx(cost)
    assert moved("opsbot_run_tokens_count") == 1
    assert moved("opsbot_run_tokens_sum") == 240
    assert moved("opsbot_run_cost_usd_sum") == pytest.approx(cost)
    assert moved("opsbot_model_fallbacks_total", model="metered") == 0


async def test_fallback_use_is_counted(
    agent_env: AgentEnv, tracing: Tracing, exporter: InMemorySpanExporter
) -> None:
    backup = MeteredModel(model_name="backup", steps=[final("from backup")])
    agent = _agent(agent_env, FailingChatModel(model_name="primary"), tracing, fallbacks=[backup])
    alice = await agent_env.user("alice")
    before = _scrape()
    result = await agent.run(alice, await new_thread(agent, alice), "hi")
    after = _scrape()
    assert isinstance(result, Answer)
    assert result.model_used == "backup"
    assert delta(before, after, "opsbot_model_fallbacks_total", model="backup") == 1
    assert (
        delta(before, after, "opsbot_model_errors_total", model="primary", error="ConnectionError")
        == 1
    )
    assert delta(before, after, "opsbot_model_cost_usd_total", model="backup") > 0
    tracing.flush()
    model_spans = [s for s in exporter.get_finished_spans() if s.name.startswith("model ")]
    assert [(s.name, (s.attributes or {}).get("opsbot.fallback")) for s in model_spans] == [
        ("model primary", False),
        ("model backup", True),
    ]


async def test_call_limit_hits_and_decision_spans(
    agent_env: AgentEnv, tracing: Tracing, exporter: InMemorySpanExporter
) -> None:
    looping = MeteredModel(
        model_name="metered", steps=[call("ticketing_get_ticket", key="PAY-101")]
    )
    agent = _agent(agent_env, looping, tracing, run_model_call_limit=2)
    alice = await agent_env.user("alice")
    thread_id = await new_thread(agent, alice)
    before = _scrape()
    result = await agent.run(alice, thread_id, "loop forever")
    after = _scrape()
    assert isinstance(result, Answer)
    assert "model call limit" in " ".join(result.caveats)
    assert delta(before, after, "opsbot_model_call_limit_hits_total") == 1
    assert delta(before, after, "opsbot_model_calls_total", model="metered") == 2
    tracing.flush()
    spans = exporter.get_finished_spans()
    limit = [
        s
        for s in spans
        if s.name == "middleware ModelCallLimitMiddleware.before_model"
        and (s.attributes or {}).get("opsbot.decision") == "call_limit_hit"
    ]
    assert len(limit) == 1
    user = pseudonymous_id(ObservabilitySettings().pseudonym_key.get_secret_value(), "alice")
    assert {(s.attributes or {}).get("opsbot.user") for s in spans} == {user}
    assert {(s.attributes or {}).get("thread_id") for s in spans} == {thread_id}


async def test_pii_redactions_and_bulk_writes_are_counted(
    agent_env: AgentEnv, tracing: Tracing
) -> None:
    alice = await agent_env.user("alice")
    agent = _agent(agent_env, MeteredModel(model_name="metered", steps=[final("noted")]), tracing)
    before = _scrape()
    await agent.run(alice, await new_thread(agent, alice), "mail carol@example.com about it")
    after = _scrape()
    assert delta(before, after, "opsbot_pii_redactions_total", pii_type="email") == 1
    assert delta(before, after, "opsbot_pii_redactions_total", pii_type="credit_card") == 0

    three = calls(
        *[
            ("ticketing_close_ticket", {"key": k, "resolution": "all"})
            for k in ("PAY-101", "PAY-102", "PAY-104")
        ]
    )
    agent = _agent(agent_env, MeteredModel(model_name="metered", steps=[three]), tracing)
    before = _scrape()
    result = await agent.run(alice, await new_thread(agent, alice), "close them all")
    after = _scrape()
    assert isinstance(result, Interrupt)
    assert delta(before, after, "opsbot_bulk_write_proposals_total") == 1
    assert delta(before, after, "opsbot_runs_total", kind="run", outcome="interrupted") == 1
