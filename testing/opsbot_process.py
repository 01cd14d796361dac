"""``opsbot`` as a real process, configured only through its environment as deployed, for
tests (``tests/reliability``) and benches (``bench/_fleet.py``): the Slack app on a free
loopback port against the dev IdP, the reference MCP servers and a fake Slack; its log lines
are kept so a caller can find its URL and count what it logged."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import signal
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field

import httpx

from infra.tls import shared_ssl_context
from mcp_servers import ReferenceServers
from testing.identity import RunningIdp, sign_in_at_login_page
from testing.slack import BOT_TOKEN, SIGNING_SECRET, SlackSender

_LISTENING = re.compile(r"listening on (http://\S+?)/slack/events")


def slack_app_env(
    base: Mapping[str, str],
    *,
    database_url: str,
    data_dir: str,
    idp: RunningIdp,
    servers: ReferenceServers,
    slack_api_url: str,
    link_key: str,
    **extra: str,
) -> dict[str, str]:
    """``base`` plus what an ``opsbot slack`` process needs: the database, the demo model,
    the IdP, the MCP servers (each an audience the IdP mints for), the fake Slack."""
    for server in servers:
        idp.provider.set_audience(server.name, server.audience)
    env = dict(base)
    env.update(
        OPSBOT_DATABASE_URL=database_url,
        OPSBOT_DATA_DIR=data_dir,
        OPSBOT_MODEL="demo",
        OPSBOT_LOG_LEVEL="INFO",
        OPSBOT_IDP__ISSUER=idp.issuer,
        OPSBOT_IDP__CLIENT_ID=idp.client_id,
        OPSBOT_IDP__CLIENT_SECRET=idp.client_secret,
        OPSBOT_MCP_SERVERS=json.dumps(
            [{"name": s.name, "url": s.url, "audience": s.audience} for s in servers]
        ),
        OPSBOT_BROKER__LINK_CALLBACK_URL="http://127.0.0.1:9/oauth/callback",
        OPSBOT_BROKER__LINK_ENCRYPTION_KEY=link_key,
        SLACK_BOT_TOKEN=BOT_TOKEN,
        SLACK_SIGNING_SECRET=SIGNING_SECRET,
        SLACK_API_URL=slack_api_url,
    )
    env.update(extra)
    return env


async def link_over_slack(
    sender: SlackSender, http: httpx.AsyncClient, app_url: str, user: str, username: str
) -> None:
    """``/ops link`` as Slack ``user`` → the IdP's login page as ``username`` → the app's
    ``/oauth/callback``; ``RuntimeError`` when a step is refused."""
    status, body = await sender.post_command("link", user=user)
    if status != 200:
        raise RuntimeError(f"/ops link answered {status}: {body[:200]}")
    login_url = json.loads(body)["blocks"][1]["elements"][0]["url"]
    reply = await sign_in_at_login_page(http, login_url, username)
    page = await http.get(f"{app_url}/oauth/callback", params=reply)
    if page.status_code != 200:
        raise RuntimeError(f"linking {user} failed: {page.text[:200]}")


@dataclass
class AppProcess:
    url: str
    proc: asyncio.subprocess.Process
    lines: list[str] = field(default_factory=list)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def count(self, text: str) -> int:
        return sum(text in line for line in self.lines)

    async def readyz(self) -> tuple[int, str]:
        async with httpx.AsyncClient(verify=shared_ssl_context(), timeout=10) as http:
            response = await http.get(f"{self.url}/readyz")
        return response.status_code, response.text

    async def link(self, sender: SlackSender, user: str, username: str) -> None:
        async with httpx.AsyncClient(verify=shared_ssl_context(), timeout=10) as http:
            await link_over_slack(sender, http, self.url, user, username)


@contextlib.asynccontextmanager
async def serving_process(
    command: Sequence[str],
    env: Mapping[str, str],
    *,
    bound: float,
    stop_within: float = 15.0,
    cwd: str | None = None,
) -> AsyncIterator[AppProcess]:
    """``command`` (an ``opsbot slack`` on port 0) until it logs where it listens, within
    ``bound`` seconds (it fails if the process exits first); SIGTERM on exit, then SIGKILL
    after ``stop_within`` seconds."""
    proc = await asyncio.create_subprocess_exec(
        *command, env=dict(env), cwd=cwd,
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    lines: list[str] = []
    assert proc.stderr is not None
    reader = asyncio.create_task(_collect(proc.stderr, lines))
    try:
        url = await asyncio.wait_for(_listening(proc, lines), bound)
        yield AppProcess(url, proc, lines)
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(proc.wait(), stop_within)
            except TimeoutError:
                proc.kill()
                await proc.wait()
        await reader


async def run_to_end(
    command: Sequence[str], env: Mapping[str, str], *, bound: float, cwd: str | None = None
) -> tuple[int, str]:
    """Run ``command`` to completion (an ``opsbot migrate``): its exit code and output."""
    proc = await asyncio.create_subprocess_exec(
        *command, env=dict(env), cwd=cwd,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    out, _ = await asyncio.wait_for(proc.communicate(), bound)
    assert proc.returncode is not None
    return proc.returncode, out.decode(errors="replace")


async def _collect(stream: asyncio.StreamReader, lines: list[str]) -> None:
    while line := await stream.readline():
        lines.append(line.decode(errors="replace").rstrip())


async def _listening(proc: asyncio.subprocess.Process, lines: list[str]) -> str:
    # The log is another process's output: polled, there is nothing to await on.
    while True:
        for line in lines:
            if found := _LISTENING.search(line):
                return found.group(1)
        if proc.returncode is not None:
            tail = "\n".join(lines[-30:])
            raise RuntimeError(f"opsbot exited with {proc.returncode}:\n{tail}")
        await asyncio.sleep(0.05)
