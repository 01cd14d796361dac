"""The local sandbox (``opsbot dev``): the whole system on one machine, and a Slack emulator
with a web UI that speaks Slack's real protocol to the production Bolt app, beside a Teams
view (``/teams``) whose people talk to the production Teams app through
``testing.teams.FakeTeams`` (``sandbox.teams_chat``). DEVELOPMENT ONLY.

Public API::

    from sandbox import open_sandbox

    async with open_sandbox(settings) as sandbox:   # binds every port first
        print(sandbox.urls.ui)                      # open this in a browser

Exception tree: ``infra.serving.PortInUseError`` (an ``OSError``) when a configured port is
taken, naming the port and the variable that sets it; ``sandbox.InputError`` (a
``ValueError``) for a web-UI request that cannot be carried out (answered with HTTP 400).
Anything the bot does wrong reaches the UI as Web API errors or Slackbot notices.

The Slack it serves is ``testing``'s: the workspace's state in ``testing.slack_workspace``,
the Web API methods in ``testing.slack_webapi`` (with the refusals every Slack fake shares,
``testing.slack_api``); this package adds the page, its polling, and people's actions sent
to the app as Slack would (``sandbox.emulator``, ``sandbox.delivery``).
"""

from sandbox.delivery import AppDelivery, AppResponse
from sandbox.emulator import InputError, SlackEmulator
from sandbox.stack import PORTS, Sandbox, SandboxUrls, bind_ports, open_sandbox

__all__ = [
    "PORTS",
    "AppDelivery",
    "AppResponse",
    "InputError",
    "Sandbox",
    "SandboxUrls",
    "SlackEmulator",
    "bind_ports",
    "open_sandbox",
]
