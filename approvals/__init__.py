"""Pending approvals: records, approver rules, exactly-once decisions, expiry and resume.

Public API::

    from approvals import Approval, ApprovalStatus, ApprovalStore, SqlApprovalStore
    from approvals import ApprovalService, DecisionReport    # decide, sweep, finish_interrupted
    from approvals import ApprovalError, AlreadyDecidedError, NotAuthorisedError
"""

from approvals.errors import (
    AlreadyDecidedError,
    ApprovalError,
    ApprovalExpiredError,
    ApprovalNotFoundError,
    InvalidEditError,
    NotAuthorisedError,
)
from approvals.records import (
    EXPIRY_DECIDER,
    ActionDecision,
    ActionRequest,
    Approval,
    ApprovalStatus,
    ReadRef,
)
from approvals.service import ApprovalService, DecisionReport
from approvals.store import ApprovalStore, MemoryApprovalStore, SqlApprovalStore

__all__ = [
    "EXPIRY_DECIDER",
    "ActionDecision",
    "ActionRequest",
    "AlreadyDecidedError",
    "Approval",
    "ApprovalError",
    "ApprovalExpiredError",
    "ApprovalNotFoundError",
    "ApprovalService",
    "ApprovalStatus",
    "ApprovalStore",
    "DecisionReport",
    "InvalidEditError",
    "MemoryApprovalStore",
    "NotAuthorisedError",
    "ReadRef",
    "SqlApprovalStore",
]
