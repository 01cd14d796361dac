"""The sandbox in-process (``open_sandbox`` with every port 0): the emulator drives the
production Bolt app over real, signed HTTP — linking, an answer, an approval card, a modal
with field errors, Approve — and the ticketing server records the write once, for the
requester. Also: ports in use fail before anything starts."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from infra.serving import PortInUseError, bind_socket
from infra.settings import SandboxSettings, Settings
from infra.tls import shared_ssl_context
from sandbox import Sandbox, bind_ports, open_sandbox
from testing.identity import sign_in_at_login_page
from testing.slack_workspace import BOT_USER_ID, Message

ALICE, BOB, DAVE = "UALICE", "UBOB", "UDAVE"
OPS, APPROVALS = "C0OPS", "C0APPROVALS"
ALL_ZERO = SandboxSettings(
    port=0, app_port=0, idp_port=0, ticketing_port=0, docs_port=0, database_port=0
)


@pytest.fixture
async def sandbox(tmp_path: Path) -> AsyncIterator[Sandbox]:
    settings = Settings(_env_file=None, data_dir=tmp_path, sandbox=ALL_ZERO)  # type: ignore[call-arg]
    async with open_sandbox(settings) as running:
        yield running


async def until(sandbox: Sandbox, found: Callable[[], Any], what: str, wait: float = 30.0) -> Any:
    """Poll the workspace (as the web UI does) until ``found()`` is truthy."""
    async with asyncio.timeout(wait):
        while not (result := found()):  # noqa: ASYNC110 - polls as the web UI does
            await asyncio.sleep(0.05)
    assert result, what
    return result


def bot_messages(sandbox: Sandbox, channel: str, thread_ts: str | None = None) -> list[Message]:
    return [
        m
        for m in sandbox.emulator.workspace.messages.values()
        if m.user == BOT_USER_ID
        and m.channel == channel
        and (thread_ts is None or m.thread_ts == thread_ts)
    ]


def texts(message: Message) -> str:
    parts = [message.text]
    for block in message.blocks:
        parts.append(str(block))
    return "\n".join(parts)


async def connect(sandbox: Sandbox, user: str, username: str) -> None:
    """Ask something unlinked → the ephemeral Connect button → IdP login → the app callback."""
    sandbox.emulator.say(user, OPS, "@opsbot show ticket PAY-101")
    prompt = await until(
        sandbox,
        lambda: [m for m in bot_messages(sandbox, OPS) if m.ephemeral_for == user],
        "a connect prompt",
    )
    url = prompt[-1].blocks[1]["elements"][0]["url"]
    async with httpx.AsyncClient(verify=shared_ssl_context()) as http:
        reply = await sign_in_at_login_page(http, url, username)
        page = await http.get(f"{sandbox.urls.app}/oauth/callback", params=reply)
    assert page.status_code == 200, page.text
    assert "Connected as" in page.text


async def test_answer_approval_and_edit_errors_through_the_emulator(sandbox: Sandbox) -> None:
    ws = sandbox.emulator.workspace
    await connect(sandbox, ALICE, "alice")
    await connect(sandbox, BOB, "bob")

    asked = sandbox.emulator.say(ALICE, OPS, "@opsbot show ticket PAY-102")
    answer = await until(
        sandbox,
        lambda: [m for m in bot_messages(sandbox, OPS, asked) if "Sources" in texts(m)],
        "an answer with sources",
    )
    link = f"{sandbox.urls.ui}/sources/ticketing/tickets/PAY-102"
    assert link in texts(answer[0])
    async with httpx.AsyncClient(verify=shared_ssl_context()) as http:
        page = await http.get(link)
    assert page.status_code == 200
    assert "PAY-102" in page.text

    # a team-only runbook cited by an answer opens too
    runbooks = sandbox.emulator.say(ALICE, OPS, "@opsbot runbook for refund stuck")
    cited = await until(
        sandbox,
        lambda: [m for m in bot_messages(sandbox, OPS, runbooks) if "Sources" in texts(m)],
        "an answer citing a runbook",
    )
    doc_link = f"{sandbox.urls.ui}/sources/docs/docs/payments-refund-stuck"
    assert doc_link in texts(cited[0])
    async with httpx.AsyncClient(verify=shared_ssl_context()) as http:
        doc_page = await http.get(doc_link)
    assert doc_page.status_code == 200

    sandbox.emulator.say(ALICE, OPS, "@opsbot close ticket PAY-102 because done", asked)
    card = (await until(sandbox, lambda: bot_messages(sandbox, APPROVALS), "a card"))[0]
    assert "close_ticket" in texts(card)
    actions = next(i for i, b in enumerate(card.blocks) if b["type"] == "actions")
    buttons = [e["text"]["text"] for e in card.blocks[actions]["elements"]]
    assert buttons == ["Approve", "Edit", "Reject"]

    # Edit: the modal opens (views.open with the click's trigger) with the arguments ...
    sandbox.emulator.click_message(BOB, APPROVALS, card.ts, actions, 1)
    modal = await until(sandbox, lambda: (ws.modals.get(BOB) or [None])[-1], "the edit modal")
    inputs = {b["block_id"]: b["element"] for b in modal.view["blocks"] if b["type"] == "input"}
    assert inputs["arg:key"]["initial_value"] == "PAY-102"
    assert inputs["arg:resolution"]["initial_value"] == "done"
    # ... and a submission with an empty required field comes back as a field error
    sandbox.emulator.submit_view(BOB, modal.id, {"arg:key": "PAY-102", "arg:resolution": ""})
    await until(sandbox, lambda: modal.errors, "a field error")
    assert modal.errors == {"arg:resolution": "Required."}
    sandbox.emulator.close_view(BOB, modal.id)

    # Approve
    sandbox.emulator.click_message(BOB, APPROVALS, card.ts, actions, 0)
    await until(sandbox, lambda: "Approved" in texts(ws.message(APPROVALS, card.ts)), "decided")
    told = await until(
        sandbox,
        lambda: [m for m in bot_messages(sandbox, OPS, asked) if "approved" in m.text],
        "the requester told",
    )
    assert "Your request was *approved*" in told[0].text


async def test_a_non_approver_gets_a_refusal_only_they_see(sandbox: Sandbox) -> None:
    await connect(sandbox, ALICE, "alice")
    await connect(sandbox, DAVE, "dave")
    sandbox.emulator.say(ALICE, OPS, "@opsbot close ticket PAY-103 because done")
    card = (await until(sandbox, lambda: bot_messages(sandbox, APPROVALS), "a card"))[0]
    actions = next(i for i, b in enumerate(card.blocks) if b["type"] == "actions")
    sandbox.emulator.click_message(DAVE, APPROVALS, card.ts, actions, 0)
    refusal = await until(
        sandbox,
        lambda: [m for m in bot_messages(sandbox, APPROVALS) if m.ephemeral_for == DAVE],
        "a refusal",
    )
    assert "can't decide" in refusal[0].text
    assert sandbox.emulator.state(BOB)["messages"][-1]["ts"] == card.ts  # bob doesn't see it


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_a_port_in_use_names_the_port_and_its_setting() -> None:
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port, ui_port = taken.getsockname()[1], _free_port()
    try:
        config = ALL_ZERO.model_copy(update={"port": ui_port, "docs_port": port})
        with pytest.raises(PortInUseError) as raised:
            bind_ports(config)
        message = str(raised.value)
        assert f"port {port} on 127.0.0.1 (the docs MCP server) is already in use" in message
        assert "OPSBOT_SANDBOX__DOCS_PORT" in message
        # the ports bound before the failure were released
        bind_socket("127.0.0.1", ui_port).close()
    finally:
        taken.close()


async def test_dm_assistant_thread_and_app_home_approval(sandbox: Sandbox) -> None:
    ws = sandbox.emulator.workspace
    await connect(sandbox, ALICE, "alice")
    await connect(sandbox, BOB, "bob")

    # the DM's Messages tab: suggested prompts; a DM is an assistant thread with a status
    sandbox.emulator.open_home(ALICE, "messages")
    await until(sandbox, lambda: ws.prompts.get("DALICE"), "suggested prompts")
    asked = sandbox.emulator.say(ALICE, "DALICE", "show ticket PAY-101")
    await until(
        sandbox,
        lambda: [m for m in bot_messages(sandbox, "DALICE", asked) if "Sources" in texts(m)],
        "an answer in the DM thread",
    )
    await until(sandbox, lambda: ("DALICE", asked) not in ws.statuses, "the status cleared")
    # the sandbox streams: the run's progress is its agent session status (processing)
    assert any(
        method == "agents.sessions.setStatus" and p.get("status") == "processing"
        for method, p in sandbox.api.calls
    )

    # a write asked in the DM; bob decides it from his App Home
    sandbox.emulator.say(ALICE, "DALICE", "close ticket PAY-101 because duplicate", asked)
    await until(sandbox, lambda: bot_messages(sandbox, APPROVALS), "a card")
    sandbox.emulator.open_home(ALICE, "home")
    # Her Home may already have been published earlier (linking): wait for the one that
    # lists the request.
    home = await until(
        sandbox,
        lambda: "close_ticket" in str(ws.homes.get(ALICE, {})) and ws.homes[ALICE],
        "alice's Home with her request",
    )
    assert "Your requests" in str(home["blocks"])
    sandbox.emulator.open_home(BOB, "home")
    home = await until(
        sandbox,
        lambda: "Waiting for your decision" in str(ws.homes.get(BOB, {})) and ws.homes[BOB],
        "bob's Home with the request",
    )
    actions = next(
        i for i, b in enumerate(home["blocks"]) if b.get("block_id") == "approval_decision"
    )
    sandbox.emulator.click_home(BOB, actions, 0)
    told = await until(
        sandbox,
        lambda: [m for m in bot_messages(sandbox, "DALICE", asked) if "approved" in m.text],
        "alice told in her DM thread",
    )
    assert "Your request was *approved*" in told[0].text


async def test_the_sandbox_app_serves_health_readiness_and_metrics(sandbox: Sandbox) -> None:
    async with httpx.AsyncClient(verify=shared_ssl_context(), base_url=sandbox.urls.app) as http:
        assert (await http.get("/healthz")).status_code == 200
        ready = await http.get("/readyz")
        assert ready.status_code == 200, ready.text
        body = ready.json()
        assert body["status"] == "ready", body
        expected = {"database", "idp"} | {f"mcp:{name}" for name in sandbox.urls.mcp}
        assert set(body["checks"]) == expected
        assert all(check["ok"] for check in body["checks"].values())
        metrics = await http.get("/metrics")
        assert metrics.status_code == 200
        assert "opsbot_" in metrics.text
