"""The dev IdP's state on disk, for ``opsbot dev --keep`` (DEVELOPMENT ONLY): its signing key
and the refresh tokens it issued, so account links made before a restart still refresh.

One JSON file, owner-only, replaced atomically on every change. Codes are not kept: a login
in flight at a restart is simply started again.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa


@dataclass(frozen=True, slots=True)
class SavedRefresh:
    client_id: str
    subject: str
    scope: str
    expires_at: datetime


@dataclass(frozen=True, slots=True)
class SavedState:
    key: rsa.RSAPrivateKey
    kid: str
    refresh: dict[str, SavedRefresh]


def load_state(path: Path) -> SavedState | None:
    """The state saved at ``path``; None when there is none yet. A file that cannot be read
    is an error naming it (delete it to start from fresh keys)."""
    if not path.exists():
        return None
    try:
        data: dict[str, Any] = json.loads(path.read_text())
        key = serialization.load_pem_private_key(data["key_pem"].encode(), password=None)
        if not isinstance(key, rsa.RSAPrivateKey):
            raise TypeError("not an RSA key")
        refresh = {
            token: SavedRefresh(
                r["client_id"], r["subject"], r["scope"], datetime.fromisoformat(r["expires_at"])
            )
            for token, r in data["refresh"].items()
        }
        return SavedState(key, str(data["kid"]), refresh)
    except (ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"the dev IdP state {path} cannot be read ({exc}); delete it") from None


def save_state(path: Path, state: SavedState) -> None:
    pem = state.key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()
    data = {
        "kid": state.kid,
        "key_pem": pem,
        "refresh": {
            token: {
                "client_id": r.client_id,
                "subject": r.subject,
                "scope": r.scope,
                "expires_at": r.expires_at.isoformat(),
            }
            for token, r in state.refresh.items()
        },
    }
    partial = path.with_name(path.name + ".tmp")
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as file:
        json.dump(data, file)
    partial.replace(path)
