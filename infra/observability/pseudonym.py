"""Pseudonymous user ids for traces and logs: a keyed HMAC of the IdP subject.

Stable per user (traces of one user can be grouped), not reversible without the key, and
never the identity itself. Rotate the key to unlink old traces from new ones.
"""

from __future__ import annotations

import hashlib
import hmac


def pseudonymous_id(key: str, subject: str) -> str:
    """``u-`` + 24 hex digits of HMAC-SHA256(key, subject)."""
    digest = hmac.new(key.encode(), subject.encode(), hashlib.sha256).hexdigest()
    return f"u-{digest[:24]}"
