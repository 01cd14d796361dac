"""The web UI shows what the Web API state holds for Slack's agent features, in Debian's
Chromium: a streamed answer (chat.startStream / appendStream / stopStream) with its task
entries changing state, the thread's title and agent session status with a Stop button that
sends ``agent_session_stopped``, the ``alert`` and ``auth_provider`` blocks, unread badges on
other conversations, and the pane scrolled to a new message."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from playwright.async_api import Browser, expect
from slack_sdk.errors import SlackApiError

from tests.sandbox.harness import Harness

pytestmark = pytest.mark.browser


def stops(delivered: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in delivered if e.get("type") == "agent_session_stopped"]


WAIT_MS = 15_000


async def test_streams_tasks_sessions_stop_alerts_and_badges(
    browser: Browser, harness: Harness
) -> None:
    client = harness.client
    delivered: list[dict[str, Any]] = []
    deliver = harness.emulator.delivery.event

    async def recording(event: dict[str, Any], event_id: str, retry_num: int = 0) -> Any:
        delivered.append(event)
        return await deliver(event, event_id, retry_num)

    harness.emulator.delivery.event = recording  # type: ignore[method-assign]
    page = await browser.new_page(viewport={"width": 1280, "height": 700})
    await page.goto(f"{harness.ui_url}/?user=alice")
    await page.click('.sidebar a[data-name="dm"]')
    question = harness.emulator.say("UALICE", "DALICE", "close PAY-102 please")
    await client.assistant_threads_setTitle(
        channel_id="DALICE", thread_ts=question, title="Close PAY-102"
    )
    await client.agents_sessions_setStatus(
        channel_id="DALICE", thread_ts=question, status="processing"
    )
    started = await client.chat_startStream(
        channel="DALICE",
        thread_ts=question,
        chunks=[
            {
                "type": "task_update",
                "id": "t1",
                "title": "ticketing · get ticket PAY-102",
                "status": "in_progress",
            }
        ],
    )
    await page.locator("#messages .message", has_text="close PAY-102").locator(".replies").click()
    thread = page.locator("#thread")
    await expect(page.locator("#thread-title")).to_have_text("Close PAY-102", timeout=WAIT_MS)
    task = thread.locator(".task", has_text="ticketing · get ticket PAY-102")
    await expect(task).to_have_attribute("data-status", "in_progress", timeout=WAIT_MS)
    await expect(thread.locator(".stream.open .streaming")).to_be_visible()
    await expect(page.locator("#thread-status")).to_contain_text("session processing")

    # the run goes on: the task completes, a write waits (pending), text streams in
    await client.chat_appendStream(
        channel="DALICE",
        ts=started["ts"],
        chunks=[
            {
                "type": "task_update",
                "id": "t1",
                "title": "ticketing · get ticket PAY-102",
                "status": "complete",
            },
            {
                "type": "task_update",
                "id": "t2",
                "title": "ticketing · close ticket PAY-102",
                "status": "pending",
                "details": "awaiting approval in #ops-approvals",
            },
            {"type": "markdown_text", "text": "PAY-102 is **open**; closing it needs approval."},
        ],
    )
    await expect(task).to_have_attribute("data-status", "complete", timeout=WAIT_MS)
    pending = thread.locator(".task", has_text="close ticket PAY-102")
    await expect(pending).to_have_attribute("data-status", "pending")
    await expect(pending).to_contain_text("awaiting approval in #ops-approvals")
    await expect(thread.locator(".stream-text b")).to_have_text("open")
    # Slack refuses a chunk it does not know, and changes nothing
    with pytest.raises(SlackApiError) as refused:
        await client.chat_appendStream(
            channel="DALICE",
            ts=started["ts"],
            chunks=[{"type": "task_update", "id": "t3", "status": "done"}],
        )
    assert refused.value.response["error"] == "invalid_chunks"

    # Stop: the emulator sends agent_session_stopped for this thread (recorded as delivered:
    # what the app does with it is tested with the app)
    await page.locator("#thread-status").get_by_role("button", name="Stop").click()
    for _ in range(100):  # the click reaches the app through the emulator, asynchronously
        if stops(delivered):
            break
        await asyncio.sleep(0.1)
    stopped = stops(delivered)
    assert len(stopped) == 1
    assert stopped[0]["channel"] == "DALICE"
    assert stopped[0]["thread_ts"] == question
    assert stopped[0]["user"] == "UALICE"
    await client.agents_sessions_setStatus(channel_id="DALICE", thread_ts=question, status="closed")
    await expect(page.locator("#thread-status")).to_contain_text("session closed", timeout=WAIT_MS)
    await expect(page.locator("#thread-status").get_by_role("button", name="Stop")).to_have_count(0)
    await client.chat_stopStream(
        channel="DALICE",
        ts=started["ts"],
        markdown_text="\nStopped by alice.",
        blocks=[
            {
                "type": "context",
                "elements": [{"type": "mrkdwn", "text": "Sources: ticketing PAY-102"}],
            }
        ],
    )
    await expect(thread.locator(".stream.open")).to_have_count(0, timeout=WAIT_MS)
    await expect(thread.locator(".stream")).to_contain_text("Stopped by alice.")
    await expect(thread.locator(".stream .bk-context")).to_contain_text(
        "Sources: ticketing PAY-102"
    )
    with pytest.raises(SlackApiError):  # a stopped stream takes no more chunks
        await client.chat_appendStream(channel="DALICE", ts=started["ts"], markdown_text="more")

    # alert and auth_provider blocks
    await client.chat_postMessage(
        channel="DALICE",
        text="card",
        blocks=[
            {
                "type": "alert",
                "level": "warning",
                "text": {"type": "mrkdwn", "text": "Runs *as you*."},
            },
            {
                "type": "auth_provider",
                "value": "opsbot-company-account",
                "name": {"type": "plain_text", "text": "Company account"},
                "description": {"type": "plain_text", "text": "Answers as you."},
                "is_connected": False,
                "auth_url": "https://idp.example.com/login",
            },
        ],
    )
    alert = page.locator("#messages .bk-alert.warning")
    await expect(alert).to_contain_text("Runs as you.", timeout=WAIT_MS)
    connect = page.locator("#messages .bk-auth-provider").get_by_role("link", name="Connect")
    await expect(connect).to_have_attribute("href", "https://idp.example.com/login")

    # a message in another conversation: an unread badge there, gone once it is opened
    for i in range(25):  # enough to need scrolling
        await client.chat_postMessage(channel="ops", text=f"deploy note {i}")
    ops = page.locator('.sidebar a[data-name="ops"]')
    await expect(ops.locator(".badge")).to_have_text("25", timeout=WAIT_MS)
    await ops.click()
    await expect(ops.locator(".badge")).to_have_count(0)
    # the pane shows the newest message (scrolled to the end)
    await expect(page.locator("#messages .message", has_text="deploy note 24")).to_be_in_viewport(
        timeout=WAIT_MS
    )
    await client.chat_postMessage(channel="ops", text="one more note")
    await expect(page.locator("#messages .message", has_text="one more note")).to_be_in_viewport(
        timeout=WAIT_MS
    )
    await page.close()
