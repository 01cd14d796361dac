"""App Home in a real browser against the real ``opsbot dev`` process: alice's Home lists her
request (its state and arguments) and her servers; bob's Home lists it under "Waiting for
your decision", and Approve there (through the confirm dialog) takes the card's decision
path: the ticket is closed, the card in #ops-approvals says approved, and alice's Home shows
the request as done after Refresh. Screenshots go to ``test-artifacts/sandbox/``."""

from __future__ import annotations

import pytest
from playwright.async_api import Browser, Page, expect

from mcp_servers.ticketing import TicketStore
from tests.sandbox.sandbox_process import DevProcess
from tests.sandbox.test_sandbox_browser import (
    WAIT_MS,
    connect,
    open_channel,
    say,
    shot,
    switch_user,
)

pytestmark = pytest.mark.browser


async def open_home(page: Page) -> None:
    await page.click('.sidebar a[data-name="home"]')
    await expect(page.locator("#conversation-title")).to_contain_text("Home")


async def test_app_home_requests_servers_and_approve_from_home(
    browser: Browser, dev: DevProcess
) -> None:
    context = await browser.new_context(viewport={"width": 1440, "height": 900})
    page = await context.new_page()
    await page.goto(f"{dev.url}/?user=alice")
    await switch_user(page, "Alice Anders (alice)")
    await open_channel(page, "ops")
    await say(page, "@opsbot close ticket PAY-101 because duplicate")
    await connect(page, "Alice Anders", "alice@example.com")
    await say(page, "@opsbot close ticket PAY-101 because duplicate")
    await open_channel(page, "ops-approvals")
    card = page.locator(".message", has_text="ticketing · ")
    await expect(card).to_be_visible(timeout=WAIT_MS)

    # alice's Home: her servers, connected, and her request waiting, with its arguments
    await open_home(page)
    home = page.locator("#messages")
    await expect(home).to_contain_text("Your servers", timeout=WAIT_MS)
    await expect(home).to_contain_text("ticketing — connected")
    await expect(home).to_contain_text("waiting for an approver", timeout=WAIT_MS)
    await expect(home).to_contain_text("key=PAY-101")
    await expect(home.get_by_role("button", name="Approve")).to_have_count(0)  # not hers
    await shot(page, "home-1-requester")

    # bob connects, then decides from his Home
    await switch_user(page, "Bob Brandt (bob)")
    await open_channel(page, "ops-approvals")
    await say(page, "/ops link")
    await connect(page, "Bob Brandt", "bob@example.com")
    await open_home(page)
    await expect(home).to_contain_text("Waiting for your decision", timeout=WAIT_MS)
    await expect(home).to_contain_text("close_ticket")
    # the tab's own publish (his servers, asked now) has landed: the Home is not re-rendered
    # under the click that follows (the publish after linking can come first)
    await expect(home).to_contain_text("Your servers", timeout=WAIT_MS)
    await shot(page, "home-2-approver")
    await home.get_by_role("button", name="Approve").first.click()
    dialog = page.locator("#confirm")
    await expect(dialog.get_by_text("Approve this change?")).to_be_visible()
    await dialog.get_by_role("button", name="Approve").click()
    # his Home no longer lists it (republished as soon as the approval was decided, not after
    # the run resumed); the card in the channel says it was approved
    await expect(home).not_to_contain_text("Waiting for your decision", timeout=WAIT_MS)
    await open_channel(page, "ops-approvals")
    await expect(card).to_contain_text("Approved", timeout=WAIT_MS)
    await shot(page, "home-3-card-approved")

    store = await TicketStore.open(f"sqlite+aiosqlite:///{dev.ticket_db}", base_url="http://x")
    try:
        closes = [c for c in await store.all_changes() if c.ticket_key == "PAY-101"]
    finally:
        await store.close()
    assert [(c.tool, c.subject) for c in closes] == [("close_ticket", "alice")]

    # alice's Home, refreshed: the request is done
    await switch_user(page, "Alice Anders (alice)")
    await open_home(page)
    await home.get_by_role("button", name="Refresh").click()
    await expect(home).to_contain_text("✔ done", timeout=WAIT_MS)
    await expect(home).not_to_contain_text("waiting for an approver")
    await shot(page, "home-4-requester-done")
    await context.close()
