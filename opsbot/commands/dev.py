"""``opsbot dev``: the whole system on one machine with embedded defaults, and a Slack-like
web UI (the sandbox). Prints the URL to open; Ctrl-C stops everything."""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from typing import Any

from opsbot.settings import Settings


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    parser = subparsers.add_parser(
        "dev",
        help="run the sandbox: dev IdP, MCP servers, the bot and a Slack-like web UI (local only)",
    )
    parser.add_argument(
        "--port", type=int, default=None, help="web UI port (default OPSBOT_SANDBOX__PORT, 8000)"
    )
    parser.set_defaults(handler=handle)


async def handle(args: argparse.Namespace, settings: Settings) -> int:
    from opsbot.serving import PortInUseError
    from sandbox import open_sandbox

    if args.port is not None:
        sandbox = settings.sandbox.model_copy(update={"port": args.port})
        settings = settings.model_copy(update={"sandbox": sandbox})
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        async with open_sandbox(settings) as running:
            model = settings.model if settings.model != "demo" else "demo (offline)"
            print(
                f"opsbot dev: the sandbox is running (model {model}; data in "
                f"{running.data_dir}, reset on every start).\n"
                f"  Open {running.urls.ui} in your browser.\n"
                f"  Slack app {running.urls.app}/slack/events · dev IdP {running.urls.idp} · "
                + " · ".join(f"{name} {url}" for name, url in running.urls.mcp.items())
                + "\nPress Ctrl-C to stop.",
                flush=True,
            )
            await stop.wait()
            print("opsbot dev: stopping…", flush=True)
    except PortInUseError as exc:
        print(f"opsbot dev: {exc.strerror}", file=sys.stderr)
        return 2
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
    print("opsbot dev: stopped.", flush=True)
    return 0
