"""manifest.yml and the Procfile match what the app handles and calls."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

import yaml

from bot.slack.listeners import EVENT_SCOPES, METHOD_SCOPES, SLASH_COMMAND, SUBSCRIBED_EVENTS
from bot.slack.server import EVENTS_PATH
from opsbot.cli import build_parser
from testing.slack import block_action, card_decided, direct_message, mention
from tests.bot.conftest import ALICE, BOB, SlackEnv
from tests.bot.test_slack_approvals import _buttons, _request_write

ROOT = Path(__file__).resolve().parents[2]


def _manifest() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((ROOT / "manifest.yml").read_text())
    return data


def test_manifest_declares_the_handled_events_command_and_interactivity() -> None:
    manifest = _manifest()
    settings = manifest["settings"]
    assert sorted(settings["event_subscriptions"]["bot_events"]) == sorted(SUBSCRIBED_EVENTS)
    assert settings["event_subscriptions"]["request_url"].endswith(EVENTS_PATH)
    assert settings["interactivity"]["is_enabled"] is True
    assert settings["interactivity"]["request_url"].endswith(EVENTS_PATH)
    assert isinstance(settings["socket_mode_enabled"], bool)
    commands = manifest["features"]["slash_commands"]
    assert [c["command"] for c in commands] == [SLASH_COMMAND]
    assert commands[0]["url"].endswith(EVENTS_PATH)
    home = manifest["features"]["app_home"]
    assert home["home_tab_enabled"] is True
    assert home["messages_tab_enabled"] is True
    scopes = set(manifest["oauth_config"]["scopes"]["bot"])
    needed = {s for s in EVENT_SCOPES.values() if s} | {"commands"}
    assert needed <= scopes
    # the agent messaging experience, not the legacy assistant view
    assert "assistant_view" not in manifest["features"]
    assert manifest["features"]["agent_view"]["agent_description"]
    # standardized app authentication: Slack refuses the manifest without both events
    connections = manifest["features"]["user_connections"]
    assert isinstance(connections["is_enabled"], bool)
    assert connections["auth_hosts"]
    assert {"user_connection", "user_connection_status_requested"} <= set(SUBSCRIBED_EVENTS)


async def test_every_web_api_method_the_bot_calls_is_covered_by_a_scope(env: SlackEnv) -> None:
    """Drive the main flows, then check each recorded method against the manifest's scopes."""
    await env.sender.post_event(mention(ALICE.user_id, "hello", ts="1700000300.0001"))
    await env.sender.post_event(direct_message(ALICE.user_id, "hi"))
    card = await _request_write(env)
    await env.sender.post_interaction(
        block_action(
            BOB.user_id,
            "approval_edit",
            _buttons(card)["approval_edit"]["value"],
            message_ts=card["ts"],
        )
    )
    await env.sender.post_interaction(
        block_action(BOB.user_id, "approval_approve", "ap1", message_ts=card["ts"])
    )
    await env.fake.wait_for("chat.update", where=card_decided)
    home = {"type": "app_home_opened", "tab": "home", "user": BOB.user_id, "channel": "D0BOB"}
    await env.sender.post_event(home)
    await env.sender.post_event({**home, "tab": "messages"})
    await env.fake.wait_for("assistant.threads.setSuggestedPrompts")
    await env.fake.settle()
    scopes = set(_manifest()["oauth_config"]["scopes"]["bot"])
    called = {c.method for c in env.fake.calls}
    assert {
        "chat.postMessage",
        "chat.update",
        "views.open",
        "views.publish",
        "assistant.threads.setStatus",
    } <= called
    for method in called:
        assert method in METHOD_SCOPES, f"{method} has no declared scope"
        scope = METHOD_SCOPES[method]
        assert scope is None or scope in scopes, f"{method} needs {scope}"


def test_procfile_processes_are_valid_commands() -> None:
    processes = dict(
        line.split(":", 1) for line in (ROOT / "Procfile").read_text().splitlines() if line
    )
    assert set(processes) == {"release", "web", "worker", "sweeper"}
    assert processes["release"].strip() == "opsbot migrate"
    web = shlex.split(processes["web"].replace("$PORT", "3000"))
    worker = shlex.split(processes["worker"])
    assert web[0] == worker[0] == "opsbot"
    web_args = build_parser().parse_args(web[1:])
    assert (web_args.command, web_args.port, web_args.socket_mode) == ("slack", 3000, False)
    worker_args = build_parser().parse_args(worker[1:])
    assert (worker_args.command, worker_args.socket_mode) == ("slack", True)
    sweeper = shlex.split(processes["sweeper"])
    assert sweeper[0] == "opsbot"
    sweeper_args = build_parser().parse_args(sweeper[1:])
    assert (sweeper_args.command, sweeper_args.every) == ("sweep", 60.0)
