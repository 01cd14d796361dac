"""Model providers as extras (issue 19): each extra's model is built offline from its
``OPSBOT_MODEL`` spec, and a missing extra is one line naming the install command.

A provider test skips only when its extra is not installed; under ``CI=true`` it fails
(``.ci/run`` syncs ``--all-extras``).
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from langchain.chat_models import base as chat_models_base

from agent_core.models import EXTRAS, ModelConfigError, build_model
from infra.settings import Settings
from opsbot import cli

PROVIDERS = [
    # extra, OPSBOT_MODEL, integration module, class, offline credentials for its SDK
    ("openai", "openai:gpt-4.1-mini", "langchain_openai", "ChatOpenAI", {"OPENAI_API_KEY": "k"}),
    (
        "anthropic",
        "anthropic:claude-sonnet-4-5",
        "langchain_anthropic",
        "ChatAnthropic",
        {"ANTHROPIC_API_KEY": "k"},
    ),
    (
        "google",
        "google_genai:gemini-2.5-flash",
        "langchain_google_genai",
        "ChatGoogleGenerativeAI",
        {"GOOGLE_API_KEY": "k"},
    ),
    (
        "bedrock",
        "bedrock_converse:anthropic.claude-3-5-sonnet-20240620-v1:0",
        "langchain_aws",
        "ChatBedrockConverse",
        {"AWS_DEFAULT_REGION": "eu-west-1", "AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s"},
    ),
    ("ollama", "ollama:llama3.1", "langchain_ollama", "ChatOllama", {}),
]


@pytest.fixture(autouse=True)
def _fresh_provider_imports() -> Iterator[None]:
    """LangChain caches each provider's class; hiding a module must reach the import."""
    chat_models_base._get_chat_model_creator.cache_clear()
    yield
    chat_models_base._get_chat_model_creator.cache_clear()


@pytest.mark.parametrize(
    ("extra", "spec", "module", "cls", "env"), PROVIDERS, ids=[p[0] for p in PROVIDERS]
)
def test_each_extra_builds_its_model_offline(
    extra: str,
    spec: str,
    module: str,
    cls: str,
    env: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    if importlib.util.find_spec(module) is None:
        reason = f"the {extra!r} extra is not installed (uv sync --extra {extra})"
        if Settings(_env_file=None).ci:  # type: ignore[call-arg]
            pytest.fail(f"{reason}; CI must install every extra")
        pytest.skip(reason)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    model = build_model(spec)
    assert type(model).__name__ == cls
    assert type(model).__module__.startswith(module)
    assert EXTRAS[module] == extra


@pytest.mark.parametrize(
    ("extra", "spec", "module"),
    [(p[0], p[1], p[2]) for p in PROVIDERS],
    ids=[p[0] for p in PROVIDERS],
)
def test_a_missing_extra_is_one_line_naming_the_install_command(
    extra: str, spec: str, module: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, module, None)  # as if the extra were not installed
    with pytest.raises(ModelConfigError) as caught:
        build_model(spec)
    message = str(caught.value)
    assert "\n" not in message
    assert f"uv sync --extra {extra}" in message
    assert f"opsbot[{extra}]" in message


def test_an_unknown_provider_is_one_line_too() -> None:
    with pytest.raises(ModelConfigError, match="cannot use model 'no-such-provider") as caught:
        build_model("no-such-provider:some-model")
    assert "\n" not in str(caught.value)


def test_the_command_line_prints_the_line_without_a_traceback(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "langchain_openai", None)
    monkeypatch.setenv("OPSBOT_MODEL", "openai:gpt-4.1-mini")

    async def handler(args: Any, settings: Settings) -> int:
        build_model("openai:gpt-4.1-mini")  # what starting the assistant does first
        return 0

    parser = argparse.ArgumentParser(prog="opsbot")
    parser.set_defaults(handler=handler, command="tools")
    monkeypatch.setattr(cli, "build_parser", lambda: parser)
    assert cli.main([]) == 2
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith(
        "opsbot: configuration error: OPSBOT_MODEL: cannot use model 'openai:gpt-4.1-mini': "
        "it needs the 'openai' extra: run `uv sync --extra openai` "
        "(or `pip install 'opsbot[openai]'`)"
    ), lines[0]
    assert "Traceback" not in err
