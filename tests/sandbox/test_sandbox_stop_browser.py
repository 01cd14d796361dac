"""A stopped run in a real browser against the real ``opsbot dev`` process: alice's answer
streams with its task entries; asking to close a ticket leaves the run waiting on an
approval (its task ``pending``, the card in #ops-approvals); Stop in the thread sends
``agent_session_stopped``, the card says the request was withdrawn by alice, and the
ticketing server never closed the ticket. Screenshots go to ``test-artifacts/sandbox/``."""

from __future__ import annotations

import pytest
from playwright.async_api import Browser, expect

from mcp_servers.ticketing import TicketStore
from tests.sandbox.sandbox_process import DevProcess
from tests.sandbox.test_sandbox_browser import (
    WAIT_MS,
    connect,
    open_channel,
    open_thread_of,
    say,
    shot,
    switch_user,
)

pytestmark = pytest.mark.browser


async def test_stop_withdraws_the_waiting_write(browser: Browser, dev: DevProcess) -> None:
    context = await browser.new_context(viewport={"width": 1440, "height": 900})
    page = await context.new_page()
    await page.goto(f"{dev.url}/?user=alice")
    await switch_user(page, "Alice Anders (alice)")
    await open_channel(page, "ops")
    await say(page, "@opsbot show ticket PAY-102")
    await connect(page, "Alice Anders", "alice@example.com")

    # a streamed answer: the tool call as a task entry, complete
    await say(page, "@opsbot show ticket PAY-102")
    await open_thread_of(page, "show ticket PAY-102", asked=2)
    thread = page.locator("#thread")
    done = thread.locator(".task[data-status=complete]", has_text="PAY-102")
    await expect(done.first).to_be_visible(timeout=WAIT_MS)
    await expect(thread.locator(".stream .bk-feedback")).to_have_count(2, timeout=WAIT_MS)
    await shot(page, "stop-1-streamed")

    # a write: the run waits on an approval; its task is pending
    await say(page, "@opsbot close ticket PAY-102 because merchants re-exported", in_thread=True)
    waiting = thread.locator(".task[data-status=pending]")
    await expect(waiting.first).to_be_visible(timeout=WAIT_MS)
    await expect(page.locator("#thread-status")).to_contain_text("suspended", timeout=WAIT_MS)
    await shot(page, "stop-2-waiting")

    # Stop: the pending write is withdrawn, the card says so
    await page.locator("#thread-status").get_by_role("button", name="Stop").click()
    await expect(thread).to_contain_text("withdrawn", timeout=WAIT_MS)
    await expect(page.locator("#thread-status").get_by_role("button", name="Stop")).to_have_count(
        0, timeout=WAIT_MS
    )
    await shot(page, "stop-3-stopped")
    await open_channel(page, "ops-approvals")
    card = page.locator("#messages .message", has_text="Requested by")
    await expect(card).to_contain_text("withdrawn", timeout=WAIT_MS)
    await expect(card.get_by_role("button", name="Approve")).to_have_count(0)

    store = await TicketStore.open(f"sqlite+aiosqlite:///{dev.ticket_db}", base_url="http://x")
    try:
        closes = [c for c in await store.all_changes() if c.ticket_key == "PAY-102"]
    finally:
        await store.close()
    assert closes == []
    await context.close()
