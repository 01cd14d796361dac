"""The golden path in a real browser (Debian's Chromium via Playwright) against the real
``opsbot dev`` process: connect as alice through the dev IdP's login page, ask about a ticket
(the answer's source link opens the ticket), ask to close it (a card in #ops-approvals), then
as bob (ticket-leads, same team): Edit shows the arguments, Approve closes the ticket on the
ticketing server and alice's thread says so. Screenshots go to ``test-artifacts/sandbox/``.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from playwright.async_api import Browser, Locator, Page, expect

from tests.sandbox.sandbox_process import DevProcess

pytestmark = pytest.mark.browser

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "sandbox"
WAIT_MS = 30_000


async def shot(page: Page, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    await page.screenshot(path=str(ARTIFACTS / f"{name}.png"))


async def switch_user(page: Page, name: str) -> None:
    await page.select_option("#user-switcher", label=name)
    await expect(page.locator("#me-groups")).to_contain_text(name.split(" (")[0])


async def open_channel(page: Page, name: str) -> None:
    await page.click(f'.sidebar a[data-name="{name}"]')
    await expect(page.locator("#conversation-title")).to_have_text(f"# {name}")


async def say(page: Page, text: str, *, in_thread: bool = False) -> None:
    box = page.locator("#thread-text" if in_thread else "#composer-text")
    await box.fill(text)
    await box.press("Enter")


async def open_thread_of(page: Page, text: str, *, asked: int) -> None:
    """Open the thread of the latest of ``asked`` messages saying ``text``. It waits for that
    message first: ``.last`` on a list still missing the newest message would open an older
    thread (the one with the connect prompt), which is what made the Stop test flaky."""
    questions = page.locator("#messages .message", has_text=text)
    await expect(questions).to_have_count(asked, timeout=WAIT_MS)
    await questions.nth(asked - 1).locator(".replies").click(timeout=WAIT_MS)


async def connect(page: Page, display_name: str, email: str) -> None:
    """The ephemeral Connect button → the dev IdP's login page → the app's callback."""
    button = page.locator(".message.ephemeral").get_by_role("link", name="Connect your account")
    await log_in_from(page, button, display_name, email)


async def log_in_from(page: Page, button: Locator, display_name: str, email: str) -> None:
    """Click the last of ``button`` (a link to the dev IdP's login page, opened in a new
    page), sign in as ``display_name``, until the app's callback says who is connected."""
    await expect(button.last).to_be_visible(timeout=WAIT_MS)
    async with page.context.expect_page() as popup_info:
        await button.last.click()
    login = await popup_info.value
    await expect(login.get_by_text("Sign in as a demo user")).to_be_visible()
    await shot(login, f"idp-login-{email.split('@')[0]}")
    await login.get_by_role("button", name=display_name).click()
    await expect(login.get_by_text(f"Connected as {email}")).to_be_visible(timeout=WAIT_MS)
    await login.close()


async def test_golden_path_in_the_browser(browser: Browser, dev: DevProcess) -> None:
    context = await browser.new_context(viewport={"width": 1440, "height": 900})
    page = await context.new_page()
    await page.goto(f"{dev.url}/?user=alice")
    await switch_user(page, "Alice Anders (alice)")
    await open_channel(page, "ops")

    # alice connects her account through the IdP's login page
    await say(page, "@opsbot show ticket PAY-102")
    await connect(page, "Alice Anders", "alice@example.com")

    # an answer with a working source link
    await say(page, "@opsbot show ticket PAY-102")
    await open_thread_of(page, "show ticket PAY-102", asked=2)
    thread = page.locator("#thread")
    source = thread.locator('a[href*="/sources/ticketing/tickets/PAY-102"]')
    await expect(source.first).to_be_visible(timeout=WAIT_MS)
    await shot(page, "1-answer")
    async with context.expect_page() as ticket_info:
        await source.first.click()
    ticket_page = await ticket_info.value
    await expect(ticket_page.locator("h1")).to_contain_text("PAY-102")
    await ticket_page.close()

    # asking to close it puts a card in #ops-approvals
    await say(page, "@opsbot close ticket PAY-102 because merchants re-exported", in_thread=True)
    await expect(thread.get_by_text("needs approval in #ops-approvals")).to_be_visible(
        timeout=WAIT_MS
    )
    await open_channel(page, "ops-approvals")
    card = page.locator("#messages .message", has_text="Requested by")
    await expect(card).to_be_visible(timeout=WAIT_MS)
    await shot(page, "2-approval-card")

    # bob (ticket-leads, team-payments) connects with /ops link
    await switch_user(page, "Bob Brandt (bob)")
    await open_channel(page, "ops-approvals")
    await say(page, "/ops link")
    await connect(page, "Bob Brandt", "bob@example.com")

    # Edit shows the arguments; cancel
    await card.get_by_role("button", name="Edit").click()
    modal = page.locator("#modal")
    await expect(modal.get_by_text("Edit and approve")).to_be_visible(timeout=WAIT_MS)
    await expect(modal.get_by_label("Key", exact=True)).to_have_value("PAY-102")
    await expect(modal.get_by_label("Resolution")).to_have_value("merchants re-exported")
    await shot(page, "3-edit-modal")
    # a required argument left empty comes back as a field error from the app
    await modal.get_by_label("Resolution").fill("")
    await modal.get_by_role("button", name="Approve").click()
    await expect(modal.get_by_role("alert").filter(has_text="Required.")).to_be_visible(
        timeout=WAIT_MS
    )
    await shot(page, "3b-edit-field-error")
    await modal.get_by_role("button", name="Cancel").click()
    await expect(page.locator("#modal-backdrop")).to_be_hidden()

    # Approve (through the confirm dialog)
    await card.get_by_role("button", name="Approve").click()
    dialog = page.locator("#confirm")
    await expect(dialog.get_by_text("Approve this change?")).to_be_visible()
    await dialog.get_by_role("button", name="Approve").click()
    await expect(card).to_contain_text("Approved", timeout=WAIT_MS)
    await shot(page, "4-approved")

    # the ticketing server closed it, for alice (the requester), once
    assert await dev.ticket_history("PAY-102") == ([("close_ticket", "alice")], "closed")

    # alice's thread says so
    await switch_user(page, "Alice Anders (alice)")
    await open_channel(page, "ops")
    await open_thread_of(page, "show ticket PAY-102", asked=2)
    await expect(thread.get_by_text("Your request was approved").first).to_be_visible(
        timeout=WAIT_MS
    )
    await shot(page, "5-requester-told")

    # the app's Home tab (views.publish) and the DM's suggested prompts
    await page.click('.sidebar a[data-name="home"]')
    await expect(page.locator("#messages")).to_contain_text("Connected as alice@example.com")
    await expect(page.locator("#messages")).to_contain_text("Your requests")
    await page.click('.sidebar a[data-name="dm"]')
    await expect(page.locator("#prompts").get_by_role("button").first).to_be_visible()
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(ARTIFACTS / "5-requester-told.png", ARTIFACTS / "golden-path.png")
    await context.close()
