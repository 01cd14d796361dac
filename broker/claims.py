"""Reading a user's email, name and groups from an IdP's claims, wherever the IdP puts them.

Providers differ: Okta and Entra ID send ``groups`` only when configured to, Keycloak puts
roles under ``realm_access.roles``, and many send email and groups only from the userinfo
endpoint. ``ClaimNames`` says where to look (a dotted name reads a nested claim);
``read_profile`` reads the ID token's claims and reports what is missing, so the caller can
ask the userinfo endpoint for the rest.

Example::

    names = ClaimNames(groups="realm_access.roles")
    profile = read_profile(id_claims, names)
    if profile.missing:
        profile = profile.merged(read_profile(await provider.userinfo(access_token), names))
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class ClaimNames:
    groups: str = "groups"
    email: str = "email"
    name: str = "name"


@dataclass(frozen=True, slots=True)
class Profile:
    """What the claims said; ``None`` where a claim was absent (not merely empty)."""

    email: str | None
    name: str | None
    groups: frozenset[str] | None

    @property
    def missing(self) -> bool:
        return self.email is None or self.name is None or self.groups is None

    def merged(self, other: Profile) -> Profile:
        """This profile, with its gaps filled from ``other``."""
        return Profile(
            self.email if self.email is not None else other.email,
            self.name if self.name is not None else other.name,
            self.groups if self.groups is not None else other.groups,
        )


def claim(claims: dict[str, Any], path: str) -> Any:
    """The value at a dotted claim path (a literal key with dots wins), or ``None``."""
    if path in claims:
        return claims[path]
    value: Any = claims
    for part in path.split("."):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _groups(value: Any) -> frozenset[str] | None:
    if isinstance(value, list):
        return frozenset(str(g) for g in value if isinstance(g, str | int))
    if isinstance(value, str):  # some providers send one group, or a space-separated list
        return frozenset(value.split())
    return None


def read_profile(claims: dict[str, Any], names: ClaimNames) -> Profile:
    return Profile(
        email=_text(claim(claims, names.email)),
        name=_text(claim(claims, names.name)),
        groups=_groups(claim(claims, names.groups)),
    )
