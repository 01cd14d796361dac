"""Start-up configuration checks: a bad setting becomes one line an operator can act on.

The CLI runs these after parsing its arguments and before any heavy import, so a
misconfiguration is reported in well under a second: the variable, what is wrong and an
example, on one line, with exit code 2 and no traceback. Secret values are never echoed.

Example::

    try:
        settings = load_settings()
        require_link_key(settings)
    except ConfigError as exc:
        print(exc.line(), file=sys.stderr)
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, SecretStr, ValidationError
from pydantic_core import PydanticUndefined
from pydantic_settings import SettingsError

from infra.json_input import parse_json
from infra.settings import Settings

EXIT_CONFIG_ERROR = 2
PREFIX = "OPSBOT_"

_FERNET_HINT = (
    'a Fernet key; generate one with: python -c "from cryptography.fernet import Fernet; '
    'print(Fernet.generate_key().decode())"'
)
EXAMPLES: dict[str, str] = {
    "OPSBOT_DATABASE_URL": "OPSBOT_DATABASE_URL=postgresql://opsbot:secret@db.internal:5432/opsbot",
    "OPSBOT_MCP_SERVERS": 'OPSBOT_MCP_SERVERS=[{"name":"ticketing",'
    '"url":"https://tickets.internal/mcp","audience":"https://tickets.internal/mcp"}]',
    "OPSBOT_MODEL_FALLBACKS": 'OPSBOT_MODEL_FALLBACKS=["openai:gpt-4.1-mini"]',
    "OPSBOT_SLACK__ALLOWED_TEAM_IDS": 'OPSBOT_SLACK__ALLOWED_TEAM_IDS=["T0123ABCD"]',
    "OPSBOT_OBSERVABILITY__MODEL_PRICES": "OPSBOT_OBSERVABILITY__MODEL_PRICES="
    '{"openai:gpt-4.1":{"input_per_million":2.0,"output_per_million":8.0}}',
    "OPSBOT_BROKER__LINK_ENCRYPTION_KEY": _FERNET_HINT,
    "SLACK_BOT_TOKEN": "SLACK_BOT_TOKEN=xoxb-… (OAuth & Permissions page of your Slack app)",
    "SLACK_SIGNING_SECRET": "SLACK_SIGNING_SECRET=… (Basic Information page of your Slack app)",
    "SLACK_APP_TOKEN": "SLACK_APP_TOKEN=xapp-… (an app-level token with connections:write)",
    "PORT": "PORT=3000",
}


class ConfigError(Exception):
    """A setting that stops start-up: which variable, what is wrong, and an example."""

    def __init__(self, variable: str, problem: str, example: str | None = None) -> None:
        super().__init__(f"{variable}: {problem}")
        self.variable = variable
        self.problem = problem
        self.example = example if example is not None else EXAMPLES.get(variable)

    def line(self) -> str:
        text = f"opsbot: configuration error: {self.variable}: {self.problem}"
        if self.example:
            text += f"; example: {self.example}"
        return text


def load_settings() -> Settings:
    """``Settings()`` from the environment, or ``ConfigError`` for the first bad variable."""
    try:
        return Settings()
    except ValidationError as exc:
        raise _from_validation(exc) from None
    except SettingsError as exc:
        raise _from_settings_error(exc) from None
    except RecursionError:  # pydantic-settings' json.loads of a value nested past the stack
        raise ConfigError(_nested_too_deep(), "JSON nested too deeply") from None


def require_slack(settings: Settings, *, socket_mode: bool) -> None:
    """``opsbot slack`` needs the bot token and signing secret (and Socket Mode its app token)."""
    needed = ["SLACK_BOT_TOKEN", "SLACK_SIGNING_SECRET"]
    values = [settings.slack_bot_token, settings.slack_signing_secret]
    if socket_mode:
        needed.append("SLACK_APP_TOKEN")
        values.append(settings.slack_app_token)
    for name, value in zip(needed, values, strict=True):
        if value is None or not value.get_secret_value().strip():
            mode = "Socket Mode" if name == "SLACK_APP_TOKEN" else "the Slack app"
            raise ConfigError(name, f"not set: {mode} needs it")


def require_link_key(settings: Settings) -> None:
    """Outside ``opsbot dev`` refresh tokens are never encrypted with a generated key."""
    if settings.broker.link_encryption_key is None:
        raise ConfigError(
            "OPSBOT_BROKER__LINK_ENCRYPTION_KEY",
            "not set: outside `opsbot dev` the key that encrypts refresh tokens must be given "
            "explicitly (a generated key would be lost with the container)",
        )


def require_database(settings: Settings, timeout_seconds: int = 5) -> None:
    """PostgreSQL answers, checked with one plain connection before the heavy imports: an
    unreachable server or a wrong password is one line at once, not a pool's 30 s of retries.
    """
    url = settings.database_url
    if not url or not url.startswith("postgresql"):
        _require_sqlite_directory(settings)
        return
    import psycopg

    dsn = re.sub(r"^postgresql\+\w+://", "postgresql://", url)
    try:
        psycopg.connect(dsn, connect_timeout=timeout_seconds).close()
    except psycopg.Error as exc:
        detail = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise ConfigError(
            "OPSBOT_DATABASE_URL", f"cannot connect to {_redacted(url)}: {detail[:200]}"
        ) from None


def require_files(settings: Settings) -> None:
    """Files named by settings exist (their contents are checked when they are loaded)."""
    named = (
        ("OPSBOT_TOOL_POLICY_PATH", settings.tool_policy_path),
        ("OPSBOT_IDP__DIRECTORY_PATH", settings.idp.directory_path),
    )
    for variable, path in named:
        if path is not None and not path.is_file():
            raise ConfigError(
                variable, f"no such file: {path}", f"{variable}=/etc/opsbot/{path.name}"
            )


def startup_error(exc: BaseException, settings: Settings) -> ConfigError | None:
    """What stopped start-up, as one line naming its setting, if a setting is the cause:
    searched through ``exc``'s causes and exception groups."""
    seen: set[int] = set()
    todo: list[BaseException] = [exc]
    while todo:
        current = todo.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        found = _setting_error(current, settings)
        if found is not None:
            return found
        todo.extend(e for e in (current.__cause__, current.__context__) if e is not None)
        todo.extend(getattr(current, "exceptions", ()))
    return None


def _setting_error(exc: BaseException, settings: Settings) -> ConfigError | None:
    kind = type(exc).__name__
    if kind == "PolicyError":
        example = "OPSBOT_TOOL_POLICY_PATH=/etc/opsbot/tool-policy.yaml (format: the built-in "
        example += "agent_core/policies/default.yaml)"
        return ConfigError("OPSBOT_TOOL_POLICY_PATH", _one_line(str(exc)), example)
    if kind == "ModelConfigError":
        spec = getattr(exc, "spec", "")
        variable = "OPSBOT_MODEL" if spec == settings.model else "OPSBOT_MODEL_FALLBACKS"
        model = "openai:gpt-4.1"
        value = model if variable == "OPSBOT_MODEL" else f'["{model}"]'
        example = f"{variable}={value} (langchain-openai installed, OPENAI_API_KEY set)"
        return ConfigError(variable, _one_line(str(exc)), example)
    return database_error(exc, settings.resolved_database_url)


def _one_line(text: str, limit: int = 300) -> str:
    flat = "; ".join(line.strip() for line in text.splitlines() if line.strip())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _require_sqlite_directory(settings: Settings) -> None:
    """The SQLite file's directory exists or can be made (as the command would make it)."""
    url = settings.resolved_database_url
    location = url.partition("://")[2].partition("?")[0]
    if not location.startswith("/") or location in ("/", "/:memory:"):
        return
    path = Path(location[1:])
    variable = "OPSBOT_DATABASE_URL" if settings.database_url else "OPSBOT_DATA_DIR"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(
            variable,
            f"cannot create the directory of the SQLite database {path}: {exc.strerror}",
            f"{variable}=/var/lib/opsbot" if variable == "OPSBOT_DATA_DIR" else None,
        ) from None


def database_error(exc: BaseException, url: str) -> ConfigError | None:
    """A connection failure to the configured database as a one-line ``ConfigError``."""
    names = {cls.__name__ for cls in type(exc).__mro__}
    if not names & {"OperationalError", "InterfaceError"}:
        return None
    reason = str(getattr(exc, "orig", None) or exc).strip().splitlines()
    detail = reason[0] if reason else type(exc).__name__
    return ConfigError(
        "OPSBOT_DATABASE_URL",
        f"cannot connect to {_redacted(url)}: {detail[:200]}",
    )


def _redacted(url: str) -> str:
    return re.sub(r"://([^:/@]+):[^@/]*@", r"://\1:***@", url)


def _from_validation(exc: ValidationError) -> ConfigError:
    errors = exc.errors()
    first = errors[0]
    variable, rest, field = _variable_for(first["loc"])
    message = str(first["msg"]).removeprefix("Value error, ")
    where = ", ".join(f"entry {p}" if isinstance(p, int) else str(p) for p in rest)
    problem = f"{where}: {message}" if where else message
    if len(errors) > 1:
        problem += f" (and {len(errors) - 1} more problem(s))"
    return ConfigError(
        variable, problem, EXAMPLES.get(variable) or _default_example(variable, field)
    )


def _from_settings_error(exc: SettingsError) -> ConfigError:
    # pydantic-settings reports unparsable JSON as `error parsing value for field "x" ...`.
    match = re.search(r'field "([^"]+)"', str(exc))
    name = match.group(1) if match else "settings"
    variable, _rest, field = _variable_for((name,))
    section = getattr(field, "annotation", None)
    if isinstance(section, type) and issubclass(section, BaseModel):
        variable = _unparsable_nested(variable) or f"{variable}__…"
    cause = exc.__cause__
    why = f"not valid JSON ({cause})" if isinstance(cause, json.JSONDecodeError) else str(exc)
    return ConfigError(variable, why)


def _nested_too_deep() -> str:
    """The variable whose JSON value is nested past Python's stack."""
    from pydantic_settings import EnvSettingsSource

    for key, value in EnvSettingsSource(Settings).env_vars.items():
        if value and value.lstrip()[:1] in "[{":
            try:
                parse_json(value)
            except ValueError:
                return key.upper()
    return "OPSBOT_*"


def _unparsable_nested(section_variable: str) -> str | None:
    """Which ``SECTION__FIELD`` variable holds the JSON that did not parse (read through
    pydantic-settings' own environment source, as ``Settings`` reads it)."""
    from pydantic_settings import EnvSettingsSource

    prefix = f"{section_variable}__".lower()
    env = EnvSettingsSource(Settings).env_vars
    for key, value in env.items():
        if key.startswith(prefix) and value and value.lstrip()[:1] in "[{":
            try:
                parse_json(value)
            except ValueError:
                return key.upper()
    return None


def _variable_for(loc: Sequence[int | str]) -> tuple[str, Sequence[int | str], Any]:
    """The environment variable a validation error location comes from, the rest of the
    location inside its value, and the pydantic field (for a default example)."""
    head = str(loc[0]) if loc else ""
    fields = Settings.model_fields
    for name, info in fields.items():
        choices = getattr(info.validation_alias, "choices", None) or []
        if head in choices or (head == name and choices):
            return str(choices[0]).upper(), loc[1:], info
    field = fields.get(head)
    if field is None:
        return PREFIX + head.upper(), loc[1:], None
    section = field.annotation
    if (
        isinstance(section, type)
        and issubclass(section, BaseModel)
        and len(loc) > 1
        and isinstance(loc[1], str)
        and loc[1] in section.model_fields
    ):
        return f"{PREFIX}{head.upper()}__{loc[1].upper()}", loc[2:], section.model_fields[loc[1]]
    return PREFIX + head.upper(), loc[1:], field


def _default_example(variable: str, field: Any) -> str | None:
    default = getattr(field, "default", PydanticUndefined)
    if default is PydanticUndefined or default is None or isinstance(default, SecretStr):
        return None
    if isinstance(default, bool):
        return f"{variable}={str(default).lower()}"
    if isinstance(default, int | float | str):
        return f"{variable}={default}"
    return None
