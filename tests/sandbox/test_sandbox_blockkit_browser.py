"""The web UI renders Block Kit faithfully enough to use, in Debian's Chromium: header, section
mrkdwn (bold, code, links, mentions) and fields, context, divider, buttons with a confirm
dialog; modals with plain text, number and static select inputs and the app's field errors;
ephemeral messages only their user sees; live updates when the app edits a message."""

from __future__ import annotations

import pytest
from playwright.async_api import Browser, expect

from tests.sandbox.harness import Harness

pytestmark = pytest.mark.browser
WAIT_MS = 15_000

BLOCKS = [
    {"type": "header", "text": {"type": "plain_text", "text": "Deploy report"}},
    {
        "type": "section",
        "text": {
            "type": "mrkdwn",
            "text": "*Ready* for <@UALICE>: `svc-pay` see <https://example.com/r/1|the runbook>",
        },
        "fields": [
            {"type": "mrkdwn", "text": "*Owner*\nteam payments"},
            {"type": "mrkdwn", "text": "*State*\n_green_"},
        ],
    },
    {"type": "divider"},
    {"type": "context", "elements": [{"type": "mrkdwn", "text": ":warning: demo data"}]},
    {
        "type": "actions",
        "elements": [
            {
                "type": "button",
                "action_id": "go",
                "value": "v-go",
                "style": "primary",
                "text": {"type": "plain_text", "text": "Go"},
                "confirm": {
                    "title": {"type": "plain_text", "text": "Really go?"},
                    "text": {"type": "mrkdwn", "text": "It *runs* now."},
                    "confirm": {"type": "plain_text", "text": "Yes, go"},
                    "deny": {"type": "plain_text", "text": "Not now"},
                },
            },
            {
                "type": "button",
                "action_id": "open",
                "value": "v-open",
                "text": {"type": "plain_text", "text": "Open form"},
            },
        ],
    },
]


async def test_block_kit_modals_ephemeral_and_live_updates(
    browser: Browser, harness: Harness
) -> None:
    posted = await harness.client.chat_postMessage(channel="ops", text="report", blocks=BLOCKS)
    page = await browser.new_page(viewport={"width": 1280, "height": 860})
    await page.goto(f"{harness.ui_url}/?user=alice")
    message = page.locator("#messages .message").first
    await expect(message.locator(".bk-header")).to_have_text("Deploy report", timeout=WAIT_MS)
    await expect(message.locator("b").first).to_have_text("Ready")
    await expect(message.locator(".mention")).to_have_text("@alice")
    await expect(message.locator("code")).to_have_text("svc-pay")
    link = message.get_by_role("link", name="the runbook")
    await expect(link).to_have_attribute("href", "https://example.com/r/1")
    await expect(message.locator(".bk-fields")).to_contain_text("team payments")
    await expect(message.locator(".bk-fields i")).to_have_text("green")
    await expect(message.locator("hr.bk-divider")).to_have_count(1)
    await expect(message.locator(".bk-context")).to_contain_text("⚠ demo data")

    # a confirm dialog: "Not now" sends nothing; "Yes, go" sends the click
    await message.get_by_role("button", name="Go").click()
    dialog = page.locator("#confirm")
    await expect(dialog.get_by_text("Really go?")).to_be_visible()
    await expect(dialog.locator("b")).to_have_text("runs")
    await dialog.get_by_role("button", name="Not now").click()
    await message.get_by_role("button", name="Go").click()
    await dialog.get_by_role("button", name="Yes, go").click()
    await harness.emulator.idle()
    clicks = [r for r in harness.received if r.get("type") == "block_actions"]
    assert [c["actions"][0]["value"] for c in clicks] == ["v-go"]
    assert clicks[0]["user"]["id"] == "UALICE"

    # a modal: plain text, number, static select; the app's field error; then success
    await message.get_by_role("button", name="Open form").click()
    modal = page.locator("#modal")
    await expect(modal.get_by_label("Title")).to_have_value("hello", timeout=WAIT_MS)
    await modal.get_by_label("Count").fill("0")
    await modal.get_by_label("Priority").select_option(label="High")
    await modal.get_by_role("button", name="Save").click()
    await expect(modal.get_by_role("alert").filter(has_text="At least 1.")).to_be_visible(
        timeout=WAIT_MS
    )
    await modal.get_by_label("Count").fill("3")
    await modal.get_by_role("button", name="Save").click()
    await expect(page.locator("#modal-backdrop")).to_be_hidden(timeout=WAIT_MS)
    values = harness.received[-1]
    assert values["title"]["t"] == {"type": "plain_text_input", "value": "hello"}
    assert values["count"]["n"] == {"type": "number_input", "value": "3"}
    assert values["prio"]["p"]["selected_option"]["value"] == "high"

    # an ephemeral message: alice sees it, marked; bob does not
    await harness.client.chat_postEphemeral(channel="C0OPS", user="UALICE", text="just you")
    only = page.locator("#messages .message.ephemeral", has_text="just you")
    await expect(only.get_by_text("Only visible to you")).to_be_visible(timeout=WAIT_MS)

    # live update: the app edits its message; the page follows without a reload
    await harness.client.chat_update(channel="C0OPS", ts=posted["ts"], text="done", blocks=[])
    await expect(message).to_contain_text("done", timeout=WAIT_MS)
    await expect(message).to_contain_text("(edited)")

    await page.select_option("#user-switcher", label="Bob Brandt (bob)")
    await expect(page.locator("#me-groups")).to_contain_text("Bob Brandt")
    await expect(page.locator("#messages .message")).to_have_count(1)
    await expect(page.get_by_text("just you")).to_have_count(0)
    await page.close()
