"""The Teams app package (``opsbot teams package``): manifest v1.30 and its two icons, zipped.

The manifest declares one bot (scopes team and personal, a command list), the SSO
``webApplicationInfo`` (``api://botid-<app id>``) and the valid domains. The icons are drawn
here (a 192x192 colour icon and a 32x32 white-on-transparent outline), so the package needs
no image files or imaging library.

Example::

    path = write_package(Path("opsbot-teams.zip"), app_id="...", domain="opsbot.example.com")
"""

from __future__ import annotations

import io
import json
import struct
import zipfile
import zlib
from pathlib import Path
from typing import Any

MANIFEST_SCHEMA = (
    "https://developer.microsoft.com/en-us/json-schemas/teams/v1.30/MicrosoftTeams.schema.json"
)
MANIFEST_VERSION = "1.30"
ACCENT = (0x1F, 0x6F, 0xEB)
COMMANDS = (
    ("help", "What opsbot can do and how approvals work"),
    ("status", "Your connected account and groups"),
    ("link", "Connect your company account"),
    ("approvals", "Approvals waiting for you"),
    ("memory", "What opsbot remembers about you"),
)


def manifest(
    app_id: str,
    *,
    version: str = "1.0.0",
    domain: str | None = None,
    developer_url: str = "https://github.com/opsbot",
) -> dict[str, Any]:
    commands = [{"title": title, "description": text} for title, text in COMMANDS]
    domains = ["*.botframework.com"] + ([domain] if domain else [])
    return {
        "$schema": MANIFEST_SCHEMA,
        "manifestVersion": MANIFEST_VERSION,
        "version": version,
        "id": app_id,
        "developer": {
            "name": "opsbot",
            "websiteUrl": developer_url,
            "privacyUrl": developer_url,
            "termsOfUseUrl": developer_url,
        },
        "name": {"short": "opsbot", "full": "opsbot operations assistant"},
        "description": {
            "short": "Ask about tickets, docs and databases as yourself.",
            "full": (
                "opsbot answers from your ticketing, docs and database systems with your own "
                "rights, and every change it proposes waits for an approver."
            ),
        },
        "icons": {"color": "color.png", "outline": "outline.png"},
        "accentColor": "#{:02X}{:02X}{:02X}".format(*ACCENT),
        "bots": [
            {
                "botId": app_id,
                "scopes": ["team", "personal"],
                "isNotificationOnly": False,
                "supportsFiles": False,
                "supportsCalling": False,
                "supportsVideo": False,
                "commandLists": [
                    {"scopes": ["team", "personal"], "commands": commands},
                ],
            }
        ],
        "permissions": ["identity", "messageTeamMembers"],
        "validDomains": domains,
        "webApplicationInfo": {"id": app_id, "resource": f"api://botid-{app_id}"},
        # No "supportedChannelTypes": standard channels only, deliberately. Shared channels
        # hold other tenants' users, whose messages and decisions opsbot refuses.
    }


def _png(width: int, height: int, pixel: Any) -> bytes:
    """An RGBA PNG whose pixel (x, y) is ``pixel(x, y)`` → (r, g, b, a)."""
    rows = bytearray()
    for y in range(height):
        rows.append(0)  # filter: none
        for x in range(width):
            rows.extend(pixel(x, y))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (
            struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
        )

    header = struct.pack(">IIBBBBB", width, height, 8, 6, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(bytes(rows), 9))
        + chunk(b"IEND", b"")
    )


def _ring(size: int, x: int, y: int) -> bool:
    """An "o" (a ring) centred in a ``size`` square."""
    c = (size - 1) / 2
    r2 = (x - c) ** 2 + (y - c) ** 2
    return (size * 0.22) ** 2 <= r2 <= (size * 0.38) ** 2


def color_icon(size: int = 192) -> bytes:
    white = (255, 255, 255, 255)
    accent = (*ACCENT, 255)
    return _png(size, size, lambda x, y: white if _ring(size, x, y) else accent)


def outline_icon(size: int = 32) -> bytes:
    return _png(
        size, size, lambda x, y: (255, 255, 255, 255) if _ring(size, x, y) else (0, 0, 0, 0)
    )


def package_bytes(app_id: str, *, domain: str | None = None, version: str = "1.0.0") -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        body = json.dumps(manifest(app_id, domain=domain, version=version), indent=2)
        archive.writestr("manifest.json", body)
        archive.writestr("color.png", color_icon())
        archive.writestr("outline.png", outline_icon())
    return buffer.getvalue()


def write_package(
    path: Path, app_id: str, *, domain: str | None = None, version: str = "1.0.0"
) -> Path:
    path.write_bytes(package_bytes(app_id, domain=domain, version=version))
    return path
