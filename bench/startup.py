"""Start-up: how long the real ``opsbot`` command takes to be useful, as a user runs it.

* ``help_s``: ``opsbot --help`` until it exits.
* ``config_error_s``: ``opsbot slack`` with a malformed ``OPSBOT_MCP_SERVERS`` until it has
  printed its one-line error and exited.
* ``dev_ready_s``: ``opsbot dev`` (every port 0, a fresh data dir) until it prints the URL;
  ``dev_bot_ready_s`` until the bot behind the page is ready too.

Each is the median of ``--runs`` runs (``*_min_s`` the fastest); ``load_average`` says how
busy the machine was. ``--command`` measures another build, e.g.
``PYTHONPATH=/tmp/old python -m bench startup --command "python -m opsbot.cli"``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shlex
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

PORT_VARIABLES = (
    "OPSBOT_SANDBOX__PORT",
    "OPSBOT_SANDBOX__APP_PORT",
    "OPSBOT_SANDBOX__IDP_PORT",
    "OPSBOT_SANDBOX__TICKETING_PORT",
    "OPSBOT_SANDBOX__DOCS_PORT",
    "OPSBOT_SANDBOX__DATABASE_PORT",
)
URL_LINE = re.compile(r"Open http://\S+ in your browser")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--command",
        default=str(Path(sys.executable).parent / "opsbot"),
        help="the opsbot command to measure (shell words)",
    )
    parser.add_argument("--no-dev", dest="dev", action="store_false", help="skip opsbot dev")
    parser.add_argument(
        "--no-bot-line",
        dest="bot_line",
        action="store_false",
        help="the build prints no 'the bot is ready' line (it starts the bot before the URL)",
    )


def _env(data_dir: str, extra: dict[str, str] | None = None) -> list[str]:
    """``env NAME=VALUE…``: the child inherits this environment with these settings on top
    (through the ``env`` utility: only ``infra.settings`` reads the environment here)."""
    values = {var: "0" for var in PORT_VARIABLES}
    values.update(OPSBOT_DATA_DIR=data_dir, OPSBOT_MODEL="demo", OPSBOT_LOG_LEVEL="WARNING")
    values.update(extra or {})
    return ["env", *(f"{k}={v}" for k, v in values.items())]


async def _until_exit(command: list[str], env: list[str], cwd: str) -> tuple[float, int]:
    started = time.perf_counter()
    proc = await asyncio.create_subprocess_exec(
        *env,
        *command,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
        cwd=cwd,
    )
    code = await proc.wait()
    return time.perf_counter() - started, code


async def _dev(command: list[str], data_dir: str, bot_line: bool) -> tuple[float, float]:
    """Seconds until ``opsbot dev`` prints its URL, and until it says the bot is ready
    (builds without that line start the bot before the URL: the same time)."""
    started = time.perf_counter()
    proc = await asyncio.create_subprocess_exec(
        *_env(data_dir),
        *command,
        "dev",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
        cwd=data_dir,
    )
    assert proc.stdout is not None
    url_s = 0.0
    try:
        async with asyncio.timeout(120):
            while True:
                line = (await proc.stdout.readline()).decode()
                if not line:
                    raise RuntimeError("opsbot dev exited before it was ready")
                if not url_s and URL_LINE.search(line):
                    url_s = time.perf_counter() - started
                    if not bot_line:
                        return url_s, url_s
                if "the bot is ready" in line:
                    return url_s, time.perf_counter() - started
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGINT)
            try:
                async with asyncio.timeout(30):
                    await proc.communicate()
            except TimeoutError:
                proc.kill()
                await proc.wait()


def _summary(name: str, values: list[float]) -> dict[str, float]:
    return {
        f"{name}_s": round(statistics.median(values), 3),
        f"{name}_min_s": round(min(values), 3),
    }


async def run(args: argparse.Namespace) -> dict[str, Any]:
    command = shlex.split(args.command)
    load = os.getloadavg()[0]
    helps: list[float] = []
    errors: list[float] = []
    urls: list[float] = []
    bots: list[float] = []
    error_codes: set[int] = set()
    with tempfile.TemporaryDirectory(prefix="opsbot-bench-startup-") as tmp:
        plain = _env(tmp)
        slack = {"SLACK_BOT_TOKEN": "xoxb-bench", "SLACK_SIGNING_SECRET": "bench-secret"}
        bad = _env(tmp, {**slack, "OPSBOT_MCP_SERVERS": '[{"name": "ticketing", '})
        for _ in range(args.runs):
            seconds, _code = await _until_exit([*command, "--help"], plain, tmp)
            helps.append(seconds)
            seconds, code = await _until_exit([*command, "slack"], bad, tmp)
            errors.append(seconds)
            error_codes.add(code)
        if args.dev:
            for i in range(args.runs):
                data_dir = Path(tmp) / f"dev-{i}"
                data_dir.mkdir()
                url_s, bot_s = await _dev(command, str(data_dir), args.bot_line)
                urls.append(url_s)
                bots.append(bot_s)
    result: dict[str, Any] = {
        **_summary("help", helps),
        **_summary("config_error", errors),
        "config_error_exit_codes": sorted(error_codes),
    }
    if urls:
        result.update(_summary("dev_ready", urls))
        result.update(_summary("dev_bot_ready", bots))
    result.update(runs=args.runs, load_average=round(load, 2), cpus=os.cpu_count())
    return result
