"""What the Slack adapter uses from the platform-neutral core: ``assistant.types``.

The adapter only translates: it calls an ``AssistantPort`` (the real ``Assistant`` or a
test fake) and renders the results.
"""

from assistant.outcomes import args_summary, describe_state, is_settled, normalise_state
from assistant.types import (
    AlreadyDecided,
    Answer,
    Answered,
    ApprovalRequested,
    ApprovalSummary,
    ApprovalView,
    Approve,
    AssistantPort,
    ChatUser,
    Decided,
    Decision,
    DecisionOutcome,
    Edit,
    Expired,
    InvalidEdit,
    LinkRequired,
    NotAuthorised,
    PlatformRef,
    Refused,
    Reject,
    Reply,
    Source,
    UserStatus,
)

__all__ = [
    "AlreadyDecided",
    "Answer",
    "Answered",
    "ApprovalRequested",
    "ApprovalSummary",
    "ApprovalView",
    "Approve",
    "AssistantPort",
    "ChatUser",
    "Decided",
    "Decision",
    "DecisionOutcome",
    "Edit",
    "Expired",
    "InvalidEdit",
    "LinkRequired",
    "NotAuthorised",
    "PlatformRef",
    "Refused",
    "Reject",
    "Reply",
    "Source",
    "UserStatus",
    "args_summary",
    "describe_state",
    "is_settled",
    "normalise_state",
]
