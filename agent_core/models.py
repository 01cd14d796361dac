"""Chat models from configuration: ``init_chat_model("provider:model")`` or the demo."""

from __future__ import annotations

from langchain.chat_models import init_chat_model
from langchain_core.language_models import BaseChatModel

from agent_core.demo_model import DemoChatModel
from agent_core.errors import ModelConfigError

DEMO = "demo"


def build_model(spec: str) -> BaseChatModel:
    """``"demo"`` is the offline demo model; anything else goes to ``init_chat_model``.
    Raises ``ModelConfigError`` when that fails (so start-up can name the setting)."""
    if spec.strip().lower() == DEMO:
        return DemoChatModel()
    try:
        return init_chat_model(spec)
    except Exception as exc:  # unknown provider, integration package or API key missing
        reason = " ".join(str(exc).split()) or type(exc).__name__
        raise ModelConfigError(spec, reason) from exc
