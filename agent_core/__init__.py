"""One agent run for one user: model, user-scoped MCP tools, tool policy, middleware, answers.

Platform-neutral: nothing here imports a chat SDK.

Public API::

    from agent_core import Agent, AgentConfig, ServerConfig, ToolPolicy
    result = await agent.run(identity, thread_id, "show ticket PAY-1")   # Answer | Interrupt
    result = await agent.resume(identity, thread_id, [{"type": "approve"}], approval_id=...)
"""

from agent_core.agent import Agent, AgentConfig, interrupt_on_for
from agent_core.answer import (
    ActionRequest,
    Answer,
    FinalAnswer,
    Interrupt,
    ReadStep,
    ReviewConfig,
    RunResult,
    Source,
)
from agent_core.binding import ToolCallEvent, ToolObserver, idempotency_key
from agent_core.decisions import validate_decisions, validate_edit
from agent_core.errors import (
    AgentError,
    CredentialError,
    CredentialUnavailableError,
    InvalidDecisionError,
    ModelUnavailableError,
    NoPendingApprovalError,
    PolicyError,
    ServerUnavailableError,
    ToolAuthError,
    ToolCallError,
    ToolCollisionError,
    ToolResultError,
    ToolTimeoutError,
    ToolTransientError,
)
from agent_core.factory import agent_config, build_agent
from agent_core.policy import ToolClass, ToolPolicy
from agent_core.sessions import ServerConfig
from agent_core.threads import NotThreadOwnerError, ThreadNotFoundError

__all__ = [
    "ActionRequest",
    "Agent",
    "AgentConfig",
    "AgentError",
    "Answer",
    "CredentialError",
    "CredentialUnavailableError",
    "FinalAnswer",
    "Interrupt",
    "InvalidDecisionError",
    "ModelUnavailableError",
    "NoPendingApprovalError",
    "NotThreadOwnerError",
    "PolicyError",
    "ReadStep",
    "ReviewConfig",
    "RunResult",
    "ServerConfig",
    "ServerUnavailableError",
    "Source",
    "ThreadNotFoundError",
    "ToolAuthError",
    "ToolCallError",
    "ToolCallEvent",
    "ToolClass",
    "ToolCollisionError",
    "ToolObserver",
    "ToolPolicy",
    "ToolResultError",
    "ToolTimeoutError",
    "ToolTransientError",
    "agent_config",
    "build_agent",
    "idempotency_key",
    "interrupt_on_for",
    "validate_decisions",
    "validate_edit",
]
