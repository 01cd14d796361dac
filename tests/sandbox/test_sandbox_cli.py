"""``opsbot dev`` as a process: it prints the URL to open and that URL serves the web UI over
the demo users; Ctrl-C (SIGINT) stops it cleanly (exit 0, no traceback; the browser test stops
it with SIGTERM); a port in use is a clear error naming the port and its setting."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import stat
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from infra.tls import shared_ssl_context
from testing.slack_workspace import BOT_USER_ID
from tests.sandbox.sandbox_process import DevProcess, spawn_opsbot_dev


async def test_starts_prints_the_url_and_stops_cleanly_on_a_double_ctrl_c(tmp_path: Path) -> None:
    async with spawn_opsbot_dev(tmp_path) as dev:
        url = await dev.wait_ready()
        async with httpx.AsyncClient(verify=shared_ssl_context()) as http:
            page = await http.get(url)
            users = (await http.get(f"{url}/ui/users")).json()["users"]
        assert page.status_code == 200
        assert "opsbot sandbox" in page.text
        assert [u["name"] for u in users] == ["alice", "bob", "carol", "dave", "erin", "mallory"]
        # A Ctrl-C under `uv run` arrives twice (the terminal signals the process group and
        # uv forwards it): the second one must not tear the servers down mid-shutdown.
        dev.process.send_signal(signal.SIGINT)
        code = await dev.stop(signal.SIGINT)
    assert code == 0, dev.stderr()
    assert "opsbot dev: stopped." in "".join(dev.output)
    assert "Traceback" not in dev.stderr(), dev.stderr()


async def test_a_port_in_use_is_a_clear_error(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        async with spawn_opsbot_dev(tmp_path, OPSBOT_SANDBOX__APP_PORT=str(port)) as dev:
            code = await dev.stop(0)  # signal 0: just wait for it to exit on its own
    assert code == 2
    error = dev.stderr()
    assert f"port {port} on 127.0.0.1 (the Slack app) is already in use" in error
    assert "OPSBOT_SANDBOX__APP_PORT" in error
    assert "Traceback" not in error


async def _written_by_now(dev: DevProcess, quiet: float = 0.05) -> str:
    """All of ``dev``'s output so far: its stdout read until nothing more comes for
    ``quiet`` seconds (the lines read land in ``dev.output`` too)."""
    assert dev.process.stdout is not None
    while True:
        try:
            line = await asyncio.wait_for(dev.process.stdout.readline(), quiet)
        except TimeoutError:
            return "".join(dev.output)
        if not line:
            return "".join(dev.output)
        dev.output.append(line.decode())


async def test_the_url_comes_first_and_a_message_sent_at_once_is_answered(tmp_path: Path) -> None:
    """The page is served while the bot, IdP and MCP servers still load (most of the
    start-up); what a user sends meanwhile waits for them and is answered."""
    started = time.perf_counter()
    async with spawn_opsbot_dev(tmp_path) as dev:
        url = await dev.wait_ready()
        seconds = time.perf_counter() - started
        async with httpx.AsyncClient(verify=shared_ssl_context(), timeout=30) as http:
            assert (await http.get(url)).status_code == 200
            # The page answers while the bot is still loading: what opsbot dev has written
            # by now ends with the URL's paragraph, without "the bot is ready" (had it waited
            # for the bot before printing the URL, that line would follow at once).
            written = await _written_by_now(dev)
            assert "Press Ctrl-C to stop." in written, written
            assert "the bot is ready" not in written, written
            said = await http.post(
                f"{url}/ui/say",
                json={"user": "UALICE", "channel": "C0OPS", "text": "@opsbot show ticket PAY-102"},
            )
            assert said.status_code == 200, said.text
            async with asyncio.timeout(60):
                while True:
                    state = (await http.get(f"{url}/ui/state", params={"user": "UALICE"})).json()
                    if any(m["user"] == BOT_USER_ID for m in state["messages"]):
                        break
                    await asyncio.sleep(0.1)
        code = await dev.stop(signal.SIGINT)
    assert code == 0, dev.stderr()
    output = "".join(dev.output)
    assert "opsbot dev: the bot is ready." in output
    assert output.index(f"Open {url} in your browser") < output.index("the bot is ready")
    # 5 s on an idle machine, stretched by how oversubscribed this one is.
    limit = 5.0 * max(1.0, os.getloadavg()[0] / (os.cpu_count() or 1))
    assert seconds <= limit, f"the URL took {seconds:.1f} s"


@pytest.fixture
def shell_umask() -> Iterator[None]:
    """A typical shell's umask while the test runs: opsbot must not rely on a strict one."""
    previous = os.umask(0o022)
    yield
    os.umask(previous)


async def test_the_sandbox_data_is_owner_only(tmp_path: Path, shell_umask: None) -> None:
    async with spawn_opsbot_dev(tmp_path) as dev:
        await dev.wait_ready()
        async with asyncio.timeout(60):
            while "the bot is ready" not in "".join(dev.output):
                assert dev.process.stdout is not None
                dev.output.append((await dev.process.stdout.readline()).decode())
        data = tmp_path / "sandbox"
        assert stat.S_IMODE(data.stat().st_mode) == 0o700
        files = [p for p in data.rglob("*") if p.is_file()]
        assert any(p.name == "link-encryption.key" for p in files)
        assert any(p.suffix in (".db", ".sqlite") for p in files)
        for path in files:
            mode = stat.S_IMODE(path.stat().st_mode)
            assert mode & 0o077 == 0, f"{path.relative_to(tmp_path)} is {oct(mode)}"
        await dev.stop(signal.SIGINT)
