"""Misconfiguration, as an operator meets it: the real ``opsbot`` command, one line naming
the variable, what is wrong and an example; exit code 2, no traceback, within 2 s.
Files opsbot creates are readable by their owner only."""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import forkserver

OPSBOT = str(Path(sys.executable).parent / "opsbot")
KEY = "0" * 43 + "="  # 32 zero bytes, url-safe base64: a valid Fernet key
SLACK = {"SLACK_BOT_TOKEN": "xoxb-test", "SLACK_SIGNING_SECRET": "signing"}
SERVER = '{"name":"ticketing","url":"http://127.0.0.1:1/mcp","audience":"http://127.0.0.1:1/mcp"}'


def opsbot(
    *args: str, env: dict[str, str], cwd: Path, timeout: float = 60, forked: bool = False
) -> tuple[subprocess.CompletedProcess[str], float]:
    """Run ``opsbot ARGS`` with only ``env`` (no OPSBOT_/SLACK_ from the caller's shell).
    ``forked``: from the fork server (tests/forkserver.py), for the tests that neither time the
    start nor look at its imports; the real script costs ~3 s of CPU once it imports the stack."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("OPSBOT_", "SLACK_"))}
    clean["OPSBOT_DATA_DIR"] = str(cwd / "data")
    started = time.perf_counter()
    result = subprocess.run(
        forkserver.command(*args) if forked else [OPSBOT, *args],
        env={**clean, **env},
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    return result, time.perf_counter() - started


def time_limit(seconds: float) -> float:
    """``seconds`` on an idle machine, stretched by how oversubscribed this one is (other
    test workers and agents share its cores); the import checks below are exact."""
    return seconds * max(1.0, os.getloadavg()[0] / (os.cpu_count() or 1))


def assert_one_line(result: subprocess.CompletedProcess[str], variable: str, *says: str) -> None:
    assert result.returncode == 2, (result.returncode, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr + result.stdout, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    line = lines[0]
    assert line.startswith(f"opsbot: configuration error: {variable}: "), line
    for text in says:
        assert text in line, line
    assert "example: " in line, line


MISCONFIGURATIONS = [
    pytest.param(
        ["migrate"],
        {"OPSBOT_DATABASE_URL": "mysql://opsbot@db/opsbot"},
        "OPSBOT_DATABASE_URL",
        ["postgresql://"],
        id="database-url-scheme",
    ),
    pytest.param(
        ["slack"],
        {**SLACK, "OPSBOT_DATABASE_URL": "postgresql://opsbot:hunter2@db:port/opsbot"},
        "OPSBOT_DATABASE_URL",
        ["port"],
        id="database-url-port",
    ),
    pytest.param(
        ["slack"],
        {**SLACK, "OPSBOT_MCP_SERVERS": "[{"},
        "OPSBOT_MCP_SERVERS",
        ["not valid JSON"],
        id="mcp-servers-bad-json",
    ),
    pytest.param(
        ["slack"],
        {**SLACK, "OPSBOT_MCP_SERVERS": SERVER},
        "OPSBOT_MCP_SERVERS",
        ["valid list"],
        id="mcp-servers-object-not-list",
    ),
    pytest.param(
        ["slack"],
        {**SLACK, "OPSBOT_MCP_SERVERS": '[{"name":"ticketing"}]'},
        "OPSBOT_MCP_SERVERS",
        ["entry 0, url: Field required"],
        id="mcp-servers-missing-field",
    ),
    pytest.param(
        ["sweep"],
        {"OPSBOT_MCP_SERVERS": f"[{SERVER.replace('ticketing', 'tick-eting')}]"},
        "OPSBOT_MCP_SERVERS",
        ["must be ASCII letters and digits"],
        id="mcp-servers-bad-name",
    ),
    pytest.param(
        ["slack"],
        {"SLACK_SIGNING_SECRET": "signing", "OPSBOT_BROKER__LINK_ENCRYPTION_KEY": KEY},
        "SLACK_BOT_TOKEN",
        ["not set"],
        id="slack-bot-token-missing",
    ),
    pytest.param(
        ["slack"],
        {"SLACK_BOT_TOKEN": "xoxb-test", "OPSBOT_BROKER__LINK_ENCRYPTION_KEY": KEY},
        "SLACK_SIGNING_SECRET",
        ["not set"],
        id="slack-signing-secret-missing",
    ),
    pytest.param(
        ["slack", "--socket-mode"],
        {**SLACK, "OPSBOT_BROKER__LINK_ENCRYPTION_KEY": KEY},
        "SLACK_APP_TOKEN",
        ["Socket Mode"],
        id="socket-mode-app-token-missing",
    ),
    pytest.param(
        ["slack"],
        SLACK,
        "OPSBOT_BROKER__LINK_ENCRYPTION_KEY",
        ["not set", "opsbot dev", "Fernet"],
        id="slack-without-link-key",
    ),
    pytest.param(
        ["sweep"],
        {},
        "OPSBOT_BROKER__LINK_ENCRYPTION_KEY",
        ["not set"],
        id="sweep-without-link-key",
    ),
    pytest.param(
        ["broker", "serve", "--port", "0"],
        {},
        "OPSBOT_BROKER__LINK_ENCRYPTION_KEY",
        ["not set"],
        id="broker-serve-without-link-key",
    ),
    pytest.param(
        ["slack"],
        {**SLACK, "OPSBOT_BROKER__LINK_ENCRYPTION_KEY": "not-a-key"},
        "OPSBOT_BROKER__LINK_ENCRYPTION_KEY",
        ["not a Fernet key"],
        id="link-key-malformed",
    ),
    pytest.param(
        ["migrate"],
        {"OPSBOT_RUNS__LEASE_SECONDS": "soon"},
        "OPSBOT_RUNS__LEASE_SECONDS",
        ["valid number", "OPSBOT_RUNS__LEASE_SECONDS=30.0"],
        id="nested-number",
    ),
    pytest.param(
        ["migrate"],
        {"OPSBOT_SLACK__ALLOWED_TEAM_IDS": "[T1"},
        "OPSBOT_SLACK__ALLOWED_TEAM_IDS",
        ["not valid JSON"],
        id="nested-bad-json",
    ),
    pytest.param(  # a RecursionError in pydantic-settings' json.loads: was a traceback
        ["slack"],
        {**SLACK, "OPSBOT_MCP_SERVERS": "[" * 100_000},
        "OPSBOT_MCP_SERVERS",
        ["JSON nested too deeply"],
        id="mcp-servers-nested-too-deep",
    ),
    pytest.param(
        ["migrate"],
        {"OPSBOT_SLACK__ALLOWED_TEAM_IDS": "[" * 100_000},
        "OPSBOT_SLACK__ALLOWED_TEAM_IDS",
        ["JSON nested too deeply"],
        id="nested-too-deep",
    ),
    pytest.param(["migrate"], {"PORT": "web"}, "PORT", ["valid integer", "PORT=3000"], id="port"),
    pytest.param(
        ["migrate"],
        {"OPSBOT_DATABASE_URL": "sqlite:////proc/no-such-dir/opsbot.db"},
        "OPSBOT_DATABASE_URL",
        ["cannot create the directory", "/proc/no-such-dir/opsbot.db"],
        id="sqlite-directory",
    ),
    pytest.param(
        ["audit"],
        {"OPSBOT_DATA_DIR": "/proc/no-such-dir"},
        "OPSBOT_DATA_DIR",
        ["cannot create the directory"],
        id="data-dir",
    ),
    pytest.param(
        ["sweep"],
        {"OPSBOT_BROKER__LINK_ENCRYPTION_KEY": KEY, "OPSBOT_TOOL_POLICY_PATH": "/nonexistent.yaml"},
        "OPSBOT_TOOL_POLICY_PATH",
        ["no such file: /nonexistent.yaml"],
        id="tool-policy-missing",
    ),
]


@pytest.mark.parametrize(("argv", "env", "variable", "says"), MISCONFIGURATIONS)
def test_a_misconfiguration_is_one_line_naming_the_variable_and_exit_2_within_2_s(
    argv: list[str], env: dict[str, str], variable: str, says: list[str], tmp_path: Path
) -> None:
    result, seconds = opsbot(*argv, env=env, cwd=tmp_path)
    assert_one_line(result, variable, *says)
    assert seconds <= time_limit(2.0), f"{seconds:.2f} s until the configuration error"
    assert "hunter2" not in result.stderr  # a password in a URL is never echoed
    assert not (tmp_path / "data").exists()  # nothing was started, nothing created


@pytest.mark.parametrize(
    ("env", "variable", "says"),
    [
        pytest.param(
            {"OPSBOT_TOOL_POLICY_PATH": "policy.yaml"},
            "OPSBOT_TOOL_POLICY_PATH",
            ["not valid YAML"],
            id="tool-policy-not-yaml",
        ),
        pytest.param(
            {"OPSBOT_MODEL": "nosuchprovider:model"},
            "OPSBOT_MODEL",
            ["cannot use model 'nosuchprovider:model'"],
            id="model-unknown-provider",
        ),
        pytest.param(
            {"OPSBOT_MODEL_FALLBACKS": '["demo", "nosuchprovider:model"]'},
            "OPSBOT_MODEL_FALLBACKS",
            ["cannot use model 'nosuchprovider:model'"],
            id="fallback-unknown-provider",
        ),
    ],
)
def test_a_setting_found_wrong_while_loading_is_one_line_too(
    env: dict[str, str], variable: str, says: list[str], tmp_path: Path
) -> None:
    """Contents checked only when loaded (the policy's YAML, the model provider): still one
    line naming the variable, exit 2."""
    (tmp_path / "policy.yaml").write_text("tools: [\n")
    result, _ = opsbot(
        "sweep", env={"OPSBOT_BROKER__LINK_ENCRYPTION_KEY": KEY, **env}, cwd=tmp_path, forked=True
    )
    assert_one_line(result, variable, *says)


def test_a_configuration_error_is_found_before_the_heavy_imports(tmp_path: Path) -> None:
    result, _ = opsbot(
        "slack", env={**SLACK, "PYTHONPROFILEIMPORTTIME": "1"}, cwd=tmp_path, timeout=60
    )
    assert result.returncode == 2
    imported = {
        line.rsplit("|", 1)[-1].strip()
        for line in result.stderr.splitlines()
        if line.startswith("import time:")
    }
    assert "pydantic_settings" in imported  # the profile is really there
    for heavy in ("sqlalchemy", "langchain", "langgraph", "slack_bolt", "mcp", "httpx", "rich"):
        assert heavy not in imported, heavy


# ``opsbot ARGS`` as the installed script runs it (``opsbot.cli.main()``, the real command line),
# then, at exit, what it imported and how it configured its console log, as one JSON line.
PLAIN_PROBE = """
import atexit, json, sys, types

def report():
    import structlog
    renderer = structlog.get_config()["processors"][-1]
    rich = sorted(
        name for name, module in sys.modules.items()
        if (name == "rich" or name.startswith("rich.")) and isinstance(module, types.ModuleType)
    )
    print("PROBE " + json.dumps({
        "rich": rich,
        "renderer": type(renderer).__name__,
        "colors": getattr(renderer, "colors", None),
        "formatter": getattr(getattr(renderer, "exception_formatter", None), "__name__", None),
    }), file=sys.__stderr__, flush=True)

atexit.register(report)
from opsbot.cli import main
sys.exit(main())
"""


def test_a_command_outside_a_terminal_never_imports_rich_nor_colours_its_log(
    tmp_path: Path,
) -> None:
    """rich comes with the dev tools only: outside ``opsbot dev`` in a terminal (here stdout
    and stderr are pipes) the command hides it (~0.3 s of imports) and its console log has
    no colours and the plain traceback, as in the production image."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("OPSBOT_", "SLACK_"))}
    result = subprocess.run(
        [sys.executable, "-c", PLAIN_PROBE, "migrate"],
        env={**clean, "OPSBOT_DATA_DIR": str(tmp_path / "data"), "OPSBOT_LOG_FORMAT": "console"},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "migrated" in result.stdout
    probe = json.loads(result.stderr.rsplit("PROBE ", 1)[-1])
    assert probe == {
        "rich": [],
        "renderer": "ConsoleRenderer",
        "colors": False,
        "formatter": "plain_traceback",
    }


def test_an_unreachable_database_is_one_line_naming_the_variable(tmp_path: Path) -> None:
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]  # bound, never listening: connection refused
        url = f"postgresql://opsbot:hunter2@127.0.0.1:{port}/opsbot"
        env = {**SLACK, "OPSBOT_DATABASE_URL": url, "OPSBOT_BROKER__LINK_ENCRYPTION_KEY": KEY}
        result, seconds = opsbot("slack", env=env, cwd=tmp_path)
    assert_one_line(result, "OPSBOT_DATABASE_URL", "cannot connect", f"127.0.0.1:{port}")
    assert seconds <= time_limit(2.0), f"{seconds:.2f} s until the database error"
    assert "hunter2" not in result.stderr


def test_help_is_fast_and_imports_nothing_heavy(tmp_path: Path) -> None:
    result, _ = opsbot("--help", env={"PYTHONPROFILEIMPORTTIME": "1"}, cwd=tmp_path)
    assert result.returncode == 0
    assert "migrate" in result.stdout
    imported = {line.rsplit("|", 1)[-1].strip() for line in result.stderr.splitlines()}
    for heavy in ("pydantic", "sqlalchemy", "structlog", "httpx"):
        assert heavy not in imported, heavy
    fastest = min(opsbot("--help", env={}, cwd=tmp_path)[1] for _ in range(3))
    assert fastest <= time_limit(0.3), f"opsbot --help took {fastest:.2f} s"


@pytest.fixture
def shell_umask() -> Iterator[None]:
    """A typical shell's umask while the test runs: opsbot must not rely on a strict one."""
    previous = os.umask(0o022)
    yield
    os.umask(previous)


def test_files_opsbot_creates_are_owner_only(tmp_path: Path, shell_umask: None) -> None:
    result, _ = opsbot("migrate", env={}, cwd=tmp_path, forked=True)
    assert result.returncode == 0, result.stderr
    data = tmp_path / "data"
    assert stat.S_IMODE(data.stat().st_mode) == 0o700
    created = list(data.iterdir())
    assert created, "migrate created no database"
    for path in created:
        mode = stat.S_IMODE(path.stat().st_mode)
        assert mode & 0o077 == 0, f"{path.name} is {oct(mode)}"


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://opsbot:secret@db.internal:5432/opsbot",
        "postgresql+psycopg://opsbot@db/opsbot?sslmode=require",
        "postgresql:///opsbot",  # local socket
        "sqlite:///relative/opsbot.db",
        "sqlite:////var/lib/opsbot/opsbot.db",
        "sqlite://",  # in memory
        "",  # unset: SQLite in the data directory
    ],
)
def test_the_database_urls_opsbot_uses_are_accepted(url: str) -> None:
    from infra.settings import Settings

    settings = Settings(_env_file=None, database_url=url)  # type: ignore[call-arg]
    assert settings.resolved_database_url.startswith(("postgresql", "sqlite"))


def test_a_generated_fernet_key_is_accepted() -> None:
    from cryptography.fernet import Fernet

    from infra.settings import Settings

    key = Fernet.generate_key().decode()
    settings = Settings(_env_file=None, broker={"link_encryption_key": key})  # type: ignore[call-arg]
    assert settings.broker.link_encryption_key is not None
    assert settings.broker.link_encryption_key.get_secret_value() == key


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["approvals", "--user", "\udcff\udcfe"], "argument --user: not UTF-8 text"),
        (["audit", "--thread", "\udced\udca0\udc80"], "argument --thread: not UTF-8 text"),
        (["tools", "--as", "\udcff"], "argument --as: not UTF-8 text"),
        (["audit", "--limit", "9" * 30], "is not between 0 and 100,000"),
        (["prune", "--older-than", "9" * 30 + "d", "--dry-run"], "is longer than any age"),
    ],
    ids=["user-not-utf8", "thread-not-utf8", "as-not-utf8", "limit-huge", "age-huge"],
)
def test_an_operators_bad_argument_is_one_line_and_exit_2(
    argv: list[str], says: str, tmp_path: Path
) -> None:
    """Bytes the locale does not decode (they reach Python as surrogates) and numbers past
    what a database or a timedelta holds were tracebacks of ~90 lines."""
    result, _ = opsbot(*argv, env={}, cwd=tmp_path, forked=True)
    assert result.returncode == 2, result.stderr[-500:]
    assert "Traceback" not in result.stderr
    assert says in result.stderr.strip().splitlines()[-1]
