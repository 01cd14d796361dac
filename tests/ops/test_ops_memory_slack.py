"""Done-when: memory set, show and delete work from Slack (signed requests to the running
app); a second user cannot see the first's memory."""

from __future__ import annotations

import json
from typing import Any

from testing.slack import FakeSlack, block_action
from tests.bot.test_slack_events import _texts
from tests.ops.conftest import OpsApp


async def _home(app: OpsApp, user: str) -> str:
    """Open the App Home as ``user``; the text of the view the app published for them."""
    fake: FakeSlack = app.fake_slack
    seen = len(fake.calls_to("views.publish"))
    status, _ = await app.sender.post_event(
        {"type": "app_home_opened", "user": user, "channel": "D0HOME", "tab": "home"}
    )
    assert status == 200
    calls = await fake.wait_for("views.publish", count=seen + 1, where=lambda p: True, wait=30)
    return _published_text(calls[-1], user)


def _published_text(params: dict[str, Any], user: str) -> str:
    assert params["user_id"] == user
    view = params["view"]
    view = json.loads(view) if isinstance(view, str) else view
    return _texts(view["blocks"])


async def test_memory_set_show_delete_from_slack_and_users_are_apart(ops_app: OpsApp) -> None:
    app = ops_app
    # Not linked: no memory at all.
    reply = await app.command("memory", user="U0ALICE")
    assert "Connect your account first" in reply

    await app.link("U0ALICE", "alice")
    await app.link("U0BOB", "bob")
    assert "remembers nothing" in await app.command("memory show", user="U0ALICE")

    # Set: only what the schema allows.
    reply = await app.command("memory set team fraud-squad", user="U0ALICE")
    assert "Saved" in reply
    assert "`fraud-squad`" in reply
    reply = await app.command("memory set project FRAUD", user="U0ALICE")
    assert "`FRAUD`" in reply
    reply = await app.command("memory set style concise", user="U0ALICE")
    assert "`concise`" in reply
    refused = await app.command("memory set style shouting", user="U0ALICE")
    assert refused.startswith("Not saved")
    assert "style" in refused
    refused = await app.command(
        "memory set team ghp_0123456789abcdefghijklmnopqrstuvwxyz", user="U0ALICE"
    )
    assert refused.startswith("Not saved")

    shown = await app.command("memory", user="U0ALICE")
    assert "Default team: `fraud-squad`" in shown
    assert "Default ticket project: `FRAUD`" in shown
    assert "Answer style: `concise`" in shown
    assert "ghp_" not in shown
    assert "shouting" not in shown

    # Bob sees only his own (empty) memory — in the command and in his App Home.
    bob_sees = await app.command("memory show", user="U0BOB")
    assert "remembers nothing" in bob_sees
    assert "fraud-squad" not in bob_sees
    bob_home = await _home(app, "U0BOB")
    assert "Your preferences" in bob_home
    assert "fraud-squad" not in bob_home
    assert "FRAUD" not in bob_home
    await app.command("memory set team platform", user="U0BOB")
    assert "`fraud-squad`" in await app.command("memory", user="U0ALICE")
    assert "platform" not in await app.command("memory", user="U0ALICE")

    # Alice's App Home shows hers.
    alice_home = await _home(app, "U0ALICE")
    assert "Default team: `fraud-squad`" in alice_home
    assert "platform" not in alice_home

    # Delete one field, then everything from the App Home button.
    reply = await app.command("memory delete style", user="U0ALICE")
    assert "Deleted" in reply
    assert "concise" not in reply
    assert "`fraud-squad`" in reply
    fake = app.fake_slack
    seen = len(fake.calls_to("views.publish"))
    status, _ = await app.sender.post_interaction(
        block_action("U0ALICE", "memory_forget_all", "all")
    )
    assert status == 200
    calls = await fake.wait_for("views.publish", count=seen + 1, where=lambda p: True, wait=30)
    assert "remembers nothing" in _published_text(calls[-1], "U0ALICE")
    assert "remembers nothing" in await app.command("memory", user="U0ALICE")
    assert "nothing to delete" in await app.command("memory delete", user="U0ALICE")
    # Bob's memory was not touched by Alice's deletion.
    assert "`platform`" in await app.command("memory", user="U0BOB")
