"""One wording for an approval's state, shared by every place a person reads it.

The card, the requester's thread, App Home and ``opsbot approvals`` all call
``describe_state`` so they can never disagree. States (see ``approvals``):
``pending → approved → executing → succeeded | failed | unknown``, plus ``rejected``,
``expired`` and ``withdrawn``; the older ``deciding``/``edited`` are mapped onto them.
``reason`` is the approval's ``outcome_reason``: text for people, never for the model.

Example::

    describe_state("failed", "the ticketing server refused — you may not close PAY-104")
    # 'failed: the ticketing server refused — you may not close PAY-104'
"""

from __future__ import annotations

from typing import Any

from approvals.records import Approval

__all__ = [
    "STATE_LABELS",
    "args_summary",
    "describe_state",
    "is_settled",
    "normalise_state",
    "reason_of",
    "state_of",
]

STATE_LABELS: dict[str, str] = {
    "pending": "waiting for an approver",
    "approved": "approved",
    "executing": "approved, running now",
    "succeeded": "done",
    "failed": "failed",
    "unknown": "outcome unknown — being reconciled",
    "rejected": "rejected, nothing was run",
    "expired": "expired before anyone decided, nothing was run",
    "withdrawn": "withdrawn (the request was stopped), nothing was run",
}

# Older names for the same facts, so records written before the new states still read right.
_ALIASES = {"deciding": "approved", "edited": "approved"}
_SETTLED = frozenset({"succeeded", "failed", "unknown", "rejected", "expired", "withdrawn"})
SUMMARY_LIMIT = 120


def normalise_state(state: str) -> str:
    state = state.strip().lower()
    return _ALIASES.get(state, state)


def is_settled(state: str) -> bool:
    """Whether nothing more will happen to the approval (until a reconcile settles ``unknown``)."""
    return normalise_state(state) in _SETTLED


def describe_state(state: str, reason: str | None = None) -> str:
    """The state in people's words, with the reason after a colon when there is one."""
    key = normalise_state(state)
    label = STATE_LABELS.get(key, key or "unknown")
    reason = (reason or "").strip()
    return f"{label}: {reason}" if reason else label


def args_summary(args: dict[str, Any], limit: int = SUMMARY_LIMIT) -> str:
    """``key=value, …`` on one line, cut at ``limit`` characters (App Home, lists)."""
    parts = []
    for key, value in args.items():
        text = value if isinstance(value, str) else repr(value)
        parts.append(f"{key}={' '.join(str(text).split())}")
    line = ", ".join(parts) or "no arguments"
    return line if len(line) <= limit else line[: limit - 1] + "…"


def state_of(approval: Approval) -> str:
    """The approval's state name (``deciding`` reads as the state it is claimed for)."""
    return approval.state.value


def reason_of(approval: Approval) -> str | None:
    """The reason for people: the record's ``outcome_reason`` when it has one, else the
    older ``outcome["reason"]``."""
    reason = approval.outcome_reason or approval.outcome.get("reason")
    return str(reason) if reason else None
