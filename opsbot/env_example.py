"""``.env.example``, generated from the ``Settings`` model (``opsbot config example``)."""

from __future__ import annotations

import json
import textwrap
from collections.abc import Iterator
from pathlib import Path

from pydantic import BaseModel, SecretStr
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined, to_jsonable_python

from infra.settings import Settings

WIDTH = 100
HEADER = """\
opsbot configuration, generated from infra/settings.py by `opsbot config example` (do not
edit: change the settings model and regenerate). Copy to .env or set in the environment;
every variable is optional for `opsbot dev`. Each line shows the default, commented out.
Our variables carry the OPSBOT_ prefix and nested sections use a double underscore; Slack's
own keep the names Bolt reads."""


def env_example(model: type[BaseModel] = Settings) -> str:
    """Every variable ``model`` reads, with its description and default (commented out)."""
    lines = _comment(HEADER)
    nested = []
    for name, field in model.model_fields.items():
        section = _section(field)
        if section is None:
            lines += ["", *_variable(_env_name(name, field, "OPSBOT_"), field)]
        else:
            nested.append((name, section))
    for name, section in nested:
        lines += _section_lines(f"OPSBOT_{name.upper()}__", section)
    return "\n".join(lines) + "\n"


def _section_lines(prefix: str, section: type[BaseModel]) -> list[str]:
    # Sections nest (e.g. OPSBOT_REFERENCE_SERVERS__TICKETING__ALLOWED_HOSTS): each level is
    # its own block, so every variable the settings read is written out.
    lines = ["", "", f"# --- {prefix}* " + "-" * (WIDTH - len(prefix) - 9)]
    lines += _comment(section.__doc__ or "")
    deeper = []
    for field_name, field in section.model_fields.items():
        inner = _section(field)
        if inner is None:
            lines += ["", *_variable(prefix + field_name.upper(), field)]
        else:
            deeper.append((field_name, inner))
    for field_name, inner in deeper:
        lines += _section_lines(f"{prefix}{field_name.upper()}__", inner)
    return lines


def _section(field: FieldInfo) -> type[BaseModel] | None:
    annotation = field.annotation
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    return None


def _env_name(name: str, field: FieldInfo, prefix: str) -> str:
    alias = field.validation_alias
    choices = getattr(alias, "choices", None)  # AliasChoices: the first is the variable
    return str(choices[0]) if choices else f"{prefix}{name.upper()}"


def _variable(env: str, field: FieldInfo) -> Iterator[str]:
    yield from _comment(field.description or "")
    yield f"# {env}={_value(field)}"


def _value(field: FieldInfo) -> str:
    default = field.get_default(call_default_factory=True)
    if default is None or default is PydanticUndefined:
        return ""
    if isinstance(default, SecretStr):
        return default.get_secret_value()
    if isinstance(default, bool):
        return str(default).lower()
    if isinstance(default, str | int | float | Path):
        return str(default)
    return json.dumps(to_jsonable_python(default), separators=(",", ":"))


def _comment(text: str) -> list[str]:
    paragraph = " ".join(text.split())
    return [f"# {line}" for line in textwrap.wrap(paragraph, WIDTH - 2)] if paragraph else []
