"""``.env.example`` documents every variable the settings object reads."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from pydantic import BaseModel
from pydantic.fields import FieldInfo

from infra.settings import Settings
from opsbot.cli import main
from opsbot.env_example import env_example

ROOT = Path(__file__).resolve().parent.parent


def _env_names(model: type[BaseModel], prefix: str) -> list[str]:
    names: list[str] = []
    for name, field in model.model_fields.items():
        names.extend(_field_env_names(name, field, prefix))
    return names


def _field_env_names(name: str, field: FieldInfo, prefix: str) -> list[str]:
    alias = field.validation_alias
    if alias is not None and prefix == "OPSBOT_":
        choices = getattr(alias, "choices", [alias])
        return [str(choices[0])]
    annotation = field.annotation
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return _env_names(annotation, f"{prefix}{name.upper()}__")
    return [f"{prefix}{name.upper()}"]


def test_every_setting_is_documented() -> None:
    documented = set(
        re.findall(r"^#?\s*([A-Z][A-Z0-9_]*)=", (ROOT / ".env.example").read_text(), re.M)
    )
    expected = set(_env_names(Settings, "OPSBOT_"))
    missing = sorted(expected - documented)
    assert missing == [], f"add these to .env.example: {missing}"
    unknown = sorted(name for name in documented - expected if name.startswith("OPSBOT_"))
    assert unknown == [], f".env.example documents variables opsbot does not read: {unknown}"


def test_committed_env_example_is_generated_from_settings() -> None:
    """Defaults live only in ``Settings``: the committed file is exactly what it generates."""
    committed = (ROOT / ".env.example").read_text()
    assert committed == env_example(), (
        ".env.example is stale: run `uv run opsbot config example > .env.example`"
    )


def test_the_example_follows_a_changed_default() -> None:
    """The generator reads defaults and descriptions from the model, not from a copy."""

    class Changed(Settings):
        model: str = "openai:gpt-4.1"
        """The model in this test."""

    text = env_example(Changed)
    assert "# The model in this test.\n# OPSBOT_MODEL=openai:gpt-4.1\n" in text
    assert "# OPSBOT_MODEL=openai:gpt-4.1" not in env_example()


def test_opsbot_config_example_prints_it(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config", "example"]) == 0
    assert capsys.readouterr().out == (ROOT / ".env.example").read_text()
