"""One agent run for one user: model, user-scoped MCP tools, tool policy, middleware, answers.

Platform-neutral: nothing here imports a chat SDK.

Public API::

    from agent_core import Agent, AgentConfig, ServerConfig, ToolPolicy
    result = await agent.run(identity, thread_id, "show ticket PAY-1")   # Answer | Interrupt
    result = await agent.resume(identity, thread_id, [{"type": "approve"}], approval_id=...)

Names are imported on first use (PEP 562): a process that needs only a light module
(``agent_core.pii``, ``agent_core.checkpointer``: ``opsbot migrate``, the memory store) no
longer loads the agent and LangChain (~2 s of CPU) through this package's ``__init__``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agent_core.agent import Agent
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
    from agent_core.config import AgentConfig
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
    from agent_core.graph import interrupt_on_for
    from agent_core.policy import ToolClass, ToolPolicy
    from agent_core.sessions import ServerConfig
    from agent_core.threads import NotThreadOwnerError, ThreadNotFoundError

# name -> the module that defines it
_EXPORTS = {
    "ActionRequest": "agent_core.answer",
    "Agent": "agent_core.agent",
    "AgentConfig": "agent_core.config",
    "AgentError": "agent_core.errors",
    "Answer": "agent_core.answer",
    "CredentialError": "agent_core.errors",
    "CredentialUnavailableError": "agent_core.errors",
    "FinalAnswer": "agent_core.answer",
    "Interrupt": "agent_core.answer",
    "InvalidDecisionError": "agent_core.errors",
    "ModelUnavailableError": "agent_core.errors",
    "NoPendingApprovalError": "agent_core.errors",
    "NotThreadOwnerError": "agent_core.threads",
    "PolicyError": "agent_core.errors",
    "ReadStep": "agent_core.answer",
    "ReviewConfig": "agent_core.answer",
    "RunResult": "agent_core.answer",
    "ServerConfig": "agent_core.sessions",
    "ServerUnavailableError": "agent_core.errors",
    "Source": "agent_core.answer",
    "ThreadNotFoundError": "agent_core.threads",
    "ToolAuthError": "agent_core.errors",
    "ToolCallError": "agent_core.errors",
    "ToolCallEvent": "agent_core.binding",
    "ToolClass": "agent_core.policy",
    "ToolCollisionError": "agent_core.errors",
    "ToolObserver": "agent_core.binding",
    "ToolPolicy": "agent_core.policy",
    "ToolResultError": "agent_core.errors",
    "ToolTimeoutError": "agent_core.errors",
    "ToolTransientError": "agent_core.errors",
    "agent_config": "agent_core.factory",
    "build_agent": "agent_core.factory",
    "idempotency_key": "agent_core.binding",
    "interrupt_on_for": "agent_core.graph",
    "validate_decisions": "agent_core.decisions",
    "validate_edit": "agent_core.decisions",
}


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'agent_core' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # once: later lookups do not come here
    return value


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
