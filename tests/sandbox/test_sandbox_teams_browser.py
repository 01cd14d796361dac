"""The Teams golden path in a real browser (Debian's Chromium via Playwright) against the real
``opsbot dev`` process, on the sandbox's Teams view (the production Teams app behind the fake
Bot Connector of ``testing/teams.py``).

bob connects once, in the Slack view: he is connected in Teams too (one identity). alice signs
in from the sign-in card of her Teams chat, asks about a ticket (an answer card whose source
link opens the ticket), @mentions opsbot in the team's channel (answered in the post's
replies), asks to close it: the approval card in the Teams approvals channel is
read-only for her and for carol (no approver), and has Approve / Edit / Reject for bob (his
user-specific view). bob approves: the ticketing server closes the ticket once, for alice;
the card shows the decision to everyone, alice's chat says so, and the Slack card of the same
approval shows it too. Screenshots go to ``test-artifacts/sandbox/``.
"""

from __future__ import annotations

import pytest
from playwright.async_api import Browser, Page, expect

from tests.sandbox.sandbox_process import DevProcess
from tests.sandbox.test_sandbox_browser import (
    connect,
    log_in_from,
    open_channel,
    say,
    shot,
    switch_user,
)

pytestmark = pytest.mark.browser

WAIT_MS = 30_000


async def open_place(page: Page, name: str) -> None:
    await page.click(f'#places a:text-is("{name}")')
    await expect(page.locator("#conversation-title")).to_contain_text(name)


async def teams_say(page: Page, text: str) -> None:
    await page.locator("#composer-text").fill(text)
    await page.locator("#composer-text").press("Enter")


async def test_teams_golden_path_in_the_browser(browser: Browser, dev: DevProcess) -> None:
    context = await browser.new_context(viewport={"width": 1440, "height": 900})
    page = await context.new_page()

    # bob connects once, on Slack
    await page.goto(f"{dev.url}/?user=bob")
    await switch_user(page, "Bob Brandt (bob)")
    await open_channel(page, "ops-approvals")
    await say(page, "/ops link")
    await connect(page, "Bob Brandt", "bob@example.com")

    # alice, in Teams: the sign-in card of her chat with opsbot
    await page.get_by_role("link", name="Teams").click()
    await page.select_option("#user-switcher", value="alice")
    await open_place(page, "Chat with opsbot")
    await teams_say(page, "show ticket PAY-102")
    sign_in = page.locator(".ac-card").get_by_role("link", name="Sign in")
    await log_in_from(page, sign_in, "Alice Anders", "alice@example.com")
    await shot(page, "teams-1-signed-in")

    # an answer card with a working source link
    await teams_say(page, "show ticket PAY-102")
    messages = page.locator("#messages")
    source = messages.locator('.ac-card a[href*="/sources/ticketing/tickets/PAY-102"]')
    await expect(source.first).to_be_visible(timeout=WAIT_MS)
    await expect(messages.locator(".ac-card", has_text="Sources").first).to_be_visible()
    await shot(page, "teams-2-answer")
    async with context.expect_page() as ticket_info:
        await source.first.click()
    ticket_page = await ticket_info.value
    await expect(ticket_page.locator("h1")).to_contain_text("PAY-102")
    await ticket_page.close()

    # in the team's channel: a post with @opsbot gets its answer in the post's replies
    await open_place(page, "General")
    await teams_say(page, "@opsbot show ticket PAY-101")
    post = page.locator(".post", has_text="show ticket PAY-101")
    await expect(post.locator(".replies-list .ac-card", has_text="Sources")).to_be_visible(
        timeout=WAIT_MS
    )
    await open_place(page, "Chat with opsbot")

    # a write: the approval card in the approvals channel, read-only for the requester
    await teams_say(page, "close ticket PAY-102 because merchants re-exported")
    await open_place(page, "ops-approvals")
    card = page.locator(".ac-card", has_text="Requester").first
    await expect(card).to_contain_text("PAY-102", timeout=WAIT_MS)
    await expect(card.get_by_role("button", name="Approve")).to_have_count(0)

    # ... and for carol, who may not approve
    await page.select_option("#user-switcher", value="carol")
    await open_place(page, "ops-approvals")
    await expect(card).to_contain_text("PAY-102", timeout=WAIT_MS)
    await expect(card.get_by_role("button", name="Approve")).to_have_count(0)

    # bob's own view has the buttons; Edit shows the arguments, Back returns
    await page.select_option("#user-switcher", value="bob")
    await open_place(page, "ops-approvals")
    await expect(card.get_by_role("button", name="Approve")).to_be_visible(timeout=WAIT_MS)
    await expect(card.get_by_role("button", name="Edit")).to_be_visible()
    await expect(card.get_by_role("button", name="Reject…")).to_be_visible()
    await shot(page, "teams-3-approver-view")
    await card.get_by_role("button", name="Edit").click()
    await expect(card.get_by_label("resolution", exact=False)).to_have_value(
        "merchants re-exported", timeout=WAIT_MS
    )
    await shot(page, "teams-4-edit-view")
    await card.get_by_role("button", name="Back").click()
    await expect(card.get_by_role("button", name="Approve")).to_be_visible(timeout=WAIT_MS)

    # bob approves
    await card.get_by_role("button", name="Approve").click()
    await expect(card).to_contain_text("Approved", timeout=WAIT_MS)
    await shot(page, "teams-5-approved")

    # the ticketing server closed it, for alice (the requester), once
    assert await dev.ticket_history("PAY-102") == ([("close_ticket", "alice")], "closed")

    # everyone sees the decision: carol, and alice, who is told in her chat
    await page.select_option("#user-switcher", value="carol")
    await open_place(page, "ops-approvals")
    await expect(card).to_contain_text("Approved", timeout=WAIT_MS)
    await expect(card.get_by_role("button", name="Approve")).to_have_count(0)
    await page.select_option("#user-switcher", value="alice")
    await open_place(page, "Chat with opsbot")
    await expect(messages.get_by_text("Your request was approved by").first).to_be_visible(
        timeout=WAIT_MS
    )
    await shot(page, "teams-6-requester-told")

    # the Slack card of the same approval shows the decision
    await page.get_by_role("link", name="Slack").click()
    await switch_user(page, "Alice Anders (alice)")
    await open_channel(page, "ops-approvals")
    slack_card = page.locator("#messages .message", has_text="Requested by")
    await expect(slack_card).to_contain_text("Approved", timeout=WAIT_MS)
    await shot(page, "teams-7-slack-card")
    await context.close()
