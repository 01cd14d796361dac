"""PII and secret detectors (shared with the audit redactor) and PIIMiddleware on input."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from langchain.agents.middleware import PIIMiddleware
from langchain_core.messages import HumanMessage

from agent_core.pii import (
    DETECTORS,
    SCAN_IN_THREAD_CHARS,
    PiiRules,
    detect_phone,
    detect_secret,
    mask_pii,
    redact,
)
from testing.agent import AgentEnv, ScriptedChatModel, final, new_thread

JWT = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJhbGljZSJ9.c2lnbmF0dXJlLXZhbHVlLTEyMzQ1Ng"


@pytest.mark.parametrize(
    "secret",
    [
        "xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx",
        "xoxp-1111-2222-3333-abcdef",
        "xapp-1-A0123456789-1234567890-abcdef0123",
        "AKIAIOSFODNN7EXAMPLE",
        "AIzaSyA1234567890abcdefghijklmnopqrstuv",
        "ghp_abcdefghijklmnopqrstuvwxyz0123456789",
        JWT,
        "Bearer abcdefghijklmnopqrstuvwxyz012345",
        "-----BEGIN RSA PRIVATE KEY-----\nMIIEow\n-----END RSA PRIVATE KEY-----",
    ],
)
def test_secrets_are_detected_and_removed(secret: str) -> None:
    text = f"here: {secret} ok"
    assert detect_secret(text), secret
    cleaned = redact(text)
    assert secret not in cleaned
    assert "[REDACTED_SECRET]" in cleaned


@pytest.mark.parametrize("phone", ["+44 20 7946 0958", "(555) 123-4567", "555-123-4567"])
def test_phones_detected(phone: str) -> None:
    assert [m["value"] for m in detect_phone(f"call {phone} now")] == [phone]


@pytest.mark.parametrize(
    "text", ["ticket PAY-101", "order ORD-10041", "at 2026-12-01 09:12", "build 12345678"]
)
def test_ids_dates_and_plain_numbers_are_not_pii(text: str) -> None:
    assert redact(text) == text


def test_mask_for_audit_keeps_shape_but_not_values() -> None:
    masked = mask_pii("alice@example.com from 10.1.2.3 card 4111 1111 1111 1111 tok " + JWT)
    assert "alice@example.com" not in masked
    assert "a***@example.com" in masked
    assert "4111 1111 1111 1111" not in masked
    assert JWT not in masked
    assert "10.1.2.3" not in masked
    assert set(DETECTORS) == {"secret", "email", "credit_card", "phone", "ip"}


async def test_pii_middleware_cleans_user_input_before_the_model_and_the_checkpoint(
    agent_env: AgentEnv,
) -> None:
    model = ScriptedChatModel(steps=[final("ok")])
    agent = agent_env.agent(model)
    alice = await agent_env.user("alice")
    thread = await new_thread(agent, alice)
    text = (
        "my token xoxb-123456789012-1234567890123-AbCdEfGhIjKl and card 4111 1111 1111 1111, "
        "mail bob@example.com, call +44 20 7946 0958, host 10.20.30.40"
    )

    await agent.run(alice, thread, text)

    seen = next(m for m in model.seen[0] if isinstance(m, HumanMessage)).text
    for raw in ("xoxb-1234", "4111 1111 1111 1111", "bob@example.com", "7946 0958", "10.20.30.40"):
        assert raw not in seen, raw
    graph = agent.graphs.graph(agent.graphs.names())
    state = await graph.aget_state({"configurable": {"thread_id": thread}})
    stored = " ".join(str(m.content) for m in state.values["messages"])
    assert "xoxb-1234" not in stored
    assert "4111 1111 1111 1111" not in stored


async def test_a_long_message_is_scanned_off_the_event_loop_and_a_short_one_on_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 21: no CPU-heavy work on the event loop where measured useful. The five rules
    take ~19 ms at Slack's 40,000 characters: above ``SCAN_IN_THREAD_CHARS`` they run in a
    worker thread (the loop serves other runs meanwhile), with the same result."""
    threads: list[int] = []
    original = PIIMiddleware.before_model

    def recording(self: PIIMiddleware, state: Any, runtime: Any) -> Any:
        threads.append(threading.get_ident())
        return original(self, state, runtime)

    monkeypatch.setattr(PIIMiddleware, "before_model", recording)
    loop_thread = threading.get_ident()
    secret = "xoxb-123456789-abcdefghij"
    for size, off_loop in ((200, False), (SCAN_IN_THREAD_CHARS + 1, True)):
        threads.clear()
        text = f"my token is {secret} and alice@example.com; " + "x" * size
        state: Any = {"messages": [HumanMessage(content=text)]}
        update = await PiiRules().abefore_model(state, None)  # type: ignore[arg-type]
        assert update is not None
        cleaned = update["messages"][-1].content
        assert secret not in cleaned
        assert "[REDACTED_SECRET]" in cleaned
        assert "alice@example.com" not in cleaned
        assert len(threads) == 5
        assert all((t != loop_thread) is off_loop for t in threads), (size, threads)
