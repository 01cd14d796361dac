"""Errors raised by the approvals package.

Exception tree::

    ApprovalError
    ├── ApprovalNotFoundError   no approval has this id
    ├── AlreadyDecidedError     someone else's decision won the claim (names who, and the status)
    ├── NotAuthorisedError      the approver may not decide this approval (says why)
    ├── ApprovalExpiredError    the approval passed its maximum age
    └── InvalidEditError        edited arguments failed validation (``field_errors``)

Messages never contain tokens or argument values.
"""

from __future__ import annotations


class ApprovalError(Exception):
    """Base class for every approval failure."""


class ApprovalNotFoundError(ApprovalError):
    """No approval has this id."""


class AlreadyDecidedError(ApprovalError):
    """The approval was already claimed by another decision."""

    def __init__(self, decided_by: str | None, status: str) -> None:
        super().__init__(f"already decided by {decided_by or 'someone else'} ({status})")
        self.decided_by = decided_by
        self.status = status


class NotAuthorisedError(ApprovalError):
    """The approver may not decide this approval."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class ApprovalExpiredError(ApprovalError):
    """The approval is past its maximum age; it can only be rejected by the sweeper."""


class InvalidEditError(ApprovalError):
    """Edited arguments did not validate; ``field_errors`` maps a field to a message."""

    def __init__(self, field_errors: dict[str, str]) -> None:
        super().__init__("invalid edit: " + "; ".join(f"{k}: {v}" for k, v in field_errors.items()))
        self.field_errors = field_errors
