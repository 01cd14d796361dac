"""``opsbot teams package`` and the Teams commands' start-up checks, run as a user runs them."""

from __future__ import annotations

import json
import os
import subprocess
import zipfile
from pathlib import Path

from tests import forkserver

APP_ID = "00000000-0000-4000-8000-0000000b0771"


def _opsbot(*args: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("OPSBOT_", "SLACK_"))}
    return subprocess.run(
        forkserver.command(*args),
        env={**clean, "OPSBOT_DATA_DIR": str(cwd), **env},
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_package_writes_the_manifest_and_two_icons(tmp_path: Path) -> None:
    out = tmp_path / "app.zip"
    result = _opsbot(
        "teams",
        "package",
        "--out",
        str(out),
        env={"OPSBOT_TEAMS__APP_ID": APP_ID, "OPSBOT_TEAMS__APP_DOMAIN": "opsbot.example.com"},
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    with zipfile.ZipFile(out) as archive:
        assert sorted(archive.namelist()) == ["color.png", "manifest.json", "outline.png"]
        manifest = json.loads(archive.read("manifest.json"))
        color, outline = archive.read("color.png"), archive.read("outline.png")
    assert manifest["manifestVersion"] == "1.30"
    assert manifest["id"] == APP_ID
    (bot,) = manifest["bots"]
    assert bot["botId"] == APP_ID
    assert bot["scopes"] == ["team", "personal"]
    assert {c["title"] for c in bot["commandLists"][0]["commands"]} >= {"help", "link"}
    assert manifest["webApplicationInfo"] == {"id": APP_ID, "resource": f"api://botid-{APP_ID}"}
    assert manifest["validDomains"] == ["*.botframework.com", "opsbot.example.com"]
    # PNGs of the sizes Teams requires: 192x192 colour, 32x32 outline.
    for png, size in ((color, 192), (outline, 32)):
        assert png.startswith(b"\x89PNG\r\n\x1a\n")
        assert int.from_bytes(png[16:20]) == size
        assert int.from_bytes(png[20:24]) == size


def test_package_without_an_app_id_is_one_line(tmp_path: Path) -> None:
    result = _opsbot("teams", "package", env={}, cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "opsbot: configuration error: OPSBOT_TEAMS__APP_ID: not set: the app package names the bot"
    ]


def test_serving_teams_without_its_secret_is_one_line(tmp_path: Path) -> None:
    for command in ("teams", "serve"):
        env = {
            "OPSBOT_TEAMS__APP_ID": APP_ID,
            "OPSBOT_TEAMS__TENANT_ID": "t",
            "SLACK_BOT_TOKEN": "xoxb-1",
            "SLACK_SIGNING_SECRET": "s",
        }
        result = _opsbot(command, env=env, cwd=tmp_path)
        assert result.returncode == 2, (command, result.stderr)
        (line,) = result.stderr.strip().splitlines()
        assert "OPSBOT_TEAMS__APP_PASSWORD: not set" in line
