"""The demo company directory (DEVELOPMENT AND TESTS ONLY): users, groups, per-resource scopes.

The YAML format is documented at the top of ``broker/dev_idp/directory.yaml``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

DEFAULT_DIRECTORY_PATH = Path(__file__).with_name("directory.yaml")


class DirectoryError(ValueError):
    """The directory file is missing or malformed."""


@dataclass(frozen=True, slots=True)
class DirectoryUser:
    subject: str
    name: str
    email: str
    groups: frozenset[str]
    revoked: bool = False


@dataclass(frozen=True, slots=True)
class Resource:
    """One MCP server the IdP mints tokens for: which scopes each group grants on it."""

    name: str
    scopes_by_group: Mapping[str, frozenset[str]]

    def granted(self, groups: Iterable[str]) -> frozenset[str]:
        """The union of scopes the given groups grant on this resource."""
        out: set[str] = set()
        for group in groups:
            out |= self.scopes_by_group.get(group, frozenset())
        return frozenset(out)


@dataclass(frozen=True, slots=True)
class Directory:
    users: Mapping[str, DirectoryUser]
    resources: Mapping[str, Resource] = field(default_factory=dict)

    def teams(self, subject: str) -> frozenset[str]:
        """The user's teams: their groups named ``team-<x>``, without the prefix."""
        user = self.users[subject]
        return frozenset(g.removeprefix("team-") for g in user.groups if g.startswith("team-"))


def _str_list(value: Any, where: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise DirectoryError(f"{where}: expected a list of strings")
    return list(value)


def parse_directory(data: Any) -> Directory:
    """Build a ``Directory`` from the parsed YAML document."""
    if not isinstance(data, dict):
        raise DirectoryError("directory: expected a mapping with 'users' and 'resources'")
    raw_users = data.get("users") or {}
    raw_resources = data.get("resources") or {}
    if not isinstance(raw_users, dict) or not isinstance(raw_resources, dict):
        raise DirectoryError("directory: 'users' and 'resources' must be mappings")
    users: dict[str, DirectoryUser] = {}
    for subject, spec in raw_users.items():
        if not isinstance(spec, dict):
            raise DirectoryError(f"users.{subject}: expected a mapping")
        users[str(subject)] = DirectoryUser(
            subject=str(subject),
            name=str(spec.get("name", subject)),
            email=str(spec.get("email", "")),
            groups=frozenset(_str_list(spec.get("groups", []), f"users.{subject}.groups")),
            revoked=bool(spec.get("revoked", False)),
        )
    resources: dict[str, Resource] = {}
    for name, spec in raw_resources.items():
        scopes = spec.get("scopes") if isinstance(spec, dict) else None
        if not isinstance(scopes, dict):
            raise DirectoryError(f"resources.{name}: expected a 'scopes' mapping")
        resources[str(name)] = Resource(
            name=str(name),
            scopes_by_group={
                str(group): frozenset(_str_list(granted, f"resources.{name}.scopes.{group}"))
                for group, granted in scopes.items()
            },
        )
    return Directory(users=users, resources=resources)


def load_directory(path: Path | None = None) -> Directory:
    """Read a directory YAML file (default: the bundled demo directory)."""
    path = path or DEFAULT_DIRECTORY_PATH
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise DirectoryError(f"cannot read directory file {path}: {exc}") from exc
    try:
        return parse_directory(yaml.safe_load(text))
    except yaml.YAMLError as exc:
        raise DirectoryError(f"directory file {path} is not valid YAML: {exc}") from exc
