"""Chat models from configuration: ``init_chat_model("provider:model")`` or the demo.

Provider integrations are opsbot extras, so ``OPSBOT_MODEL=openai:gpt-4.1`` works after
``uv sync --extra openai`` (or ``pip install 'opsbot[openai]'``). A model whose integration is
not installed raises ``ModelConfigError`` with one line naming that command.
"""

from __future__ import annotations

import re

from langchain.chat_models import init_chat_model
from langchain_core.language_models import BaseChatModel

from agent_core.demo_model import DemoChatModel
from agent_core.errors import ModelConfigError

__all__ = ["DEMO", "EXTRAS", "ModelConfigError", "build_model"]

DEMO = "demo"

# LangChain integration package (module) → the opsbot extra that installs it.
EXTRAS = {
    "langchain_openai": "openai",
    "langchain_anthropic": "anthropic",
    "langchain_google_genai": "google",
    "langchain_aws": "bedrock",
    "langchain_ollama": "ollama",
}
# LangChain names the missing package as module (langchain_openai) or dist (langchain-openai).
_MODULE = re.compile(r"\blangchain[-_][a-z_-]+[a-z]")


def build_model(spec: str) -> BaseChatModel:
    """``"demo"`` is the offline demo model; anything else goes to ``init_chat_model``.
    Raises ``ModelConfigError`` when that fails (so start-up can name the setting)."""
    if spec.strip().lower() == DEMO:
        return DemoChatModel()
    try:
        return init_chat_model(spec)
    except ImportError as exc:
        raise ModelConfigError(spec, _install_hint(spec, exc)) from None
    except ValueError as exc:  # unknown provider, or one it cannot infer
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ModelConfigError(spec, first) from None
    except Exception as exc:  # an API key or option the provider needs is missing
        reason = " ".join(str(exc).split()) or type(exc).__name__
        raise ModelConfigError(spec, reason) from exc


def _install_hint(spec: str, exc: ImportError) -> str:
    found = _MODULE.search(str(exc)) or _MODULE.search(exc.name or "")
    module = found.group(0).replace("-", "_") if found else None
    extra = EXTRAS.get(module or "")
    if extra is not None:
        return (
            f"it needs the {extra!r} extra: run `uv sync --extra {extra}` "
            f"(or `pip install 'opsbot[{extra}]'`)"
        )
    package = module.replace("_", "-") if module else "its LangChain integration package"
    return f"it needs {package}, which opsbot has no extra for: install it"
