"""The tool policy: which prefixed tools are reads, which are writes and who approves them.

A YAML file validated by pydantic. A tool the policy does not classify is a write (fail
closed). MCP annotations (``readOnlyHint`` ...) are the server's claims: consulted only for
servers whose operator opted in (``trust_read_only_hint``), and only for tools the policy does
not classify (``trust_read_only``).

Example YAML::

    defaults: {approver_group: ops-approvers, max_approval_age_seconds: 3600}
    allowlist: [ticketing_get_ticket, ticketing_close_ticket]
    tools:
      ticketing_get_ticket: {kind: read}
      ticketing_close_ticket: {kind: write, approver_group: ticket-leads, sensitive: true}
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import timedelta
from importlib import resources
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agent_core.errors import PolicyError

ToolKind = Literal["read", "write"]


class ToolRuleModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: ToolKind
    approver_group: str | None = None
    sensitive: bool = False
    # Default: reads are idempotent, writes are not. Only idempotent tools are ever retried.
    idempotent: bool | None = None
    max_approval_age_seconds: int | None = Field(default=None, gt=0)


class PolicyDefaults(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    approver_group: str = "ops-approvers"
    max_approval_age_seconds: int = Field(default=3600, gt=0)


class PolicyFile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    version: Literal[1] = 1
    defaults: PolicyDefaults = Field(default_factory=PolicyDefaults)
    # Prefixed tool names the model may see; None = every discovered tool.
    allowlist: list[str] | None = None
    tools: dict[str, ToolRuleModel] = Field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ToolClass:
    """The resolved policy for one prefixed tool name."""

    name: str
    kind: ToolKind
    approver_group: str | None
    sensitive: bool
    idempotent: bool
    max_approval_age: timedelta | None
    classified: bool
    # Why: "policy" (the file classifies it), "read_only_hint" (an unclassified tool whose
    # server is trusted for readOnlyHint) or "default" (unclassified: a sensitive write).
    source: Literal["policy", "read_only_hint", "default"] = "policy"

    @property
    def is_write(self) -> bool:
        return self.kind == "write"


class ToolPolicy:
    """Classifies prefixed tool names; unknown names are sensitive writes."""

    def __init__(self, spec: PolicyFile) -> None:
        self.spec = spec
        self._allow = None if spec.allowlist is None else frozenset(spec.allowlist)
        # Per server: its unclassified tools trusted as reads by their readOnlyHint, as it
        # listed them last (a tool that lost its hint is a write again).
        self._hinted_by_server: dict[str, frozenset[str]] = {}
        self._hinted_reads: frozenset[str] = frozenset()

    @classmethod
    def from_yaml(cls, text: str, *, source: str = "<policy>") -> ToolPolicy:
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise PolicyError(f"{source}: not valid YAML: {exc}") from exc
        if not isinstance(data, dict):
            raise PolicyError(f"{source}: the policy must be a mapping")
        try:
            return cls(PolicyFile.model_validate(data))
        except ValidationError as exc:
            raise PolicyError(f"{source}: invalid tool policy:\n{exc}") from exc

    @classmethod
    def load(cls, path: Path | None = None) -> ToolPolicy:
        """The policy at ``path``, or the built-in ``policies/default.yaml``."""
        if path is None:
            text = resources.files("agent_core").joinpath("policies/default.yaml").read_text()
            return cls.from_yaml(text, source="agent_core/policies/default.yaml")
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise PolicyError(f"cannot read tool policy {path}: {exc.strerror}") from exc
        return cls.from_yaml(text, source=str(path))

    def classify(self, name: str) -> ToolClass:
        rule = self.spec.tools.get(name)
        defaults = self.spec.defaults
        if rule is None and name in self._hinted_reads:
            return ToolClass(
                name=name,
                kind="read",
                approver_group=None,
                sensitive=False,
                idempotent=True,
                max_approval_age=None,
                classified=False,
                source="read_only_hint",
            )
        if rule is None:
            return ToolClass(
                name=name,
                kind="write",
                approver_group=defaults.approver_group,
                sensitive=True,
                idempotent=False,
                max_approval_age=timedelta(seconds=defaults.max_approval_age_seconds),
                classified=False,
                source="default",
            )
        is_write = rule.kind == "write"
        age = rule.max_approval_age_seconds or defaults.max_approval_age_seconds
        return ToolClass(
            name=name,
            kind=rule.kind,
            approver_group=(rule.approver_group or defaults.approver_group) if is_write else None,
            sensitive=rule.sensitive,
            idempotent=rule.idempotent if rule.idempotent is not None else not is_write,
            max_approval_age=timedelta(seconds=age) if is_write else None,
            classified=True,
        )

    def trust_read_only(self, server: str, names: Iterable[str]) -> None:
        """Treat these unclassified tools of ``server`` as reads (their ``readOnlyHint``,
        trusted by the operator per server), instead of those it named before. Tools the
        policy file classifies keep their rule."""
        self._hinted_by_server[server] = frozenset(n for n in names if n not in self.spec.tools)
        self._hinted_reads = frozenset().union(*self._hinted_by_server.values())

    def is_allowed(self, name: str) -> bool:
        return self._allow is None or name in self._allow

    def is_read(self, name: str) -> bool:
        return self.classify(name).kind == "read"

    def writes(self, names: list[str]) -> list[str]:
        return [n for n in names if not self.is_read(n)]
