"""``opsbot dev`` as a process: it prints the URL to open and that URL serves the web UI over
the demo users; Ctrl-C (SIGINT) stops it cleanly (exit 0, no traceback; the browser test stops
it with SIGTERM); a port in use is a clear error naming the port and its setting."""

from __future__ import annotations

import signal
import socket
from pathlib import Path

import httpx

from tests.sandbox.sandbox_process import spawn_opsbot_dev


async def test_starts_prints_the_url_and_stops_cleanly_on_a_double_ctrl_c(tmp_path: Path) -> None:
    async with spawn_opsbot_dev(tmp_path) as dev:
        url = await dev.wait_ready()
        async with httpx.AsyncClient() as http:
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
