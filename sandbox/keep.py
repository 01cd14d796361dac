"""What ``opsbot dev --keep`` carries over a restart besides the databases and the dev IdP's
state: the conversations on both chat platforms (the Slack workspace's messages, thread
titles and statuses; the Teams channel's messages and what people said there), so a card
of a pending approval is still there to click.

Saved as one JSON file when the sandbox stops, read when it starts with ``--keep``.
Modals, App Home views and trigger ids are not kept (Slack forgets them too).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from pathlib import Path
from typing import Any

from sandbox.teams_chat import Said, TeamsChat
from testing.slack_workspace import Message, Stream, Workspace

log = logging.getLogger(__name__)
CHATS_FILE = "chats.json"


def save_chats(path: Path, workspace: Workspace, teams: TeamsChat | None) -> None:
    data: dict[str, Any] = {
        "slack": {
            "messages": [dataclasses.asdict(m) for m in workspace.messages.values()],
            "sessions": [[*key, value] for key, value in workspace.sessions.items()],
            "titles": [[*key, value] for key, value in workspace.titles.items()],
            "statuses": [[*key, value] for key, value in workspace.statuses.items()],
        },
    }
    if teams is not None:
        data["teams"] = {
            "messages": [[*key, m] for key, m in teams.fake.messages.items()],
            "posted_to": [[*key, c] for key, c in teams.fake.posted_to.items()],
            "said": [dataclasses.asdict(s) for s in teams.said],
        }
    partial = path.with_name(path.name + ".tmp")
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as file:
        json.dump(data, file)
    partial.replace(path)


def load_chats(path: Path, workspace: Workspace, teams: TeamsChat | None) -> None:
    """Restore what ``save_chats`` wrote; a missing file is a first start, an unreadable one
    is reported and skipped (the databases still hold the links and approvals)."""
    if not path.exists():
        return
    try:
        data = json.loads(path.read_text())
        slack = data["slack"]
        for raw in slack["messages"]:
            stream = raw.pop("stream", None)
            message = Message(**raw, stream=None if stream is None else Stream(**stream))
            workspace.messages[(message.channel, message.ts)] = message
        workspace.sessions.update({(c, t): v for c, t, v in slack["sessions"]})
        workspace.titles.update({(c, t): v for c, t, v in slack["titles"]})
        workspace.statuses.update({(c, t): v for c, t, v in slack["statuses"]})
        if teams is not None and "teams" in data:
            kept = data["teams"]
            teams.fake.messages.update({(c, i): m for c, i, m in kept["messages"]})
            teams.fake.posted_to.update({(c, i): v for c, i, v in kept["posted_to"]})
            teams.said.extend(Said(**s) for s in kept["said"])
    except (ValueError, KeyError, TypeError) as exc:
        log.warning("the kept conversations in %s cannot be read (%s): starting without", path, exc)
        return
    workspace.changed()
