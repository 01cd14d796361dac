"""Chat models from configuration: ``init_chat_model("provider:model")`` or the demo."""

from __future__ import annotations

from langchain.chat_models import init_chat_model
from langchain_core.language_models import BaseChatModel

from agent_core.demo_model import DemoChatModel

DEMO = "demo"


def build_model(spec: str) -> BaseChatModel:
    """``"demo"`` is the offline demo model; anything else goes to ``init_chat_model``."""
    if spec.strip().lower() == DEMO:
        return DemoChatModel()
    return init_chat_model(spec)
