"""The one settings object: prefixes, nesting, Slack's own names, defaults."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from pydantic import ValidationError

from infra.settings import PoolSettings, Settings


def _settings() -> Settings:
    return Settings(_env_file=None)  # type: ignore[call-arg]


def test_defaults_are_embedded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPSBOT_DATABASE_URL", raising=False)
    monkeypatch.delenv("OPSBOT_DATA_DIR", raising=False)
    settings = _settings()
    assert settings.resolved_database_url == "sqlite:///.opsbot/opsbot.db"
    assert [s.name for s in settings.mcp_servers] == ["ticketing", "docs", "database"]


def test_environment_overrides(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("OPSBOT_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("OPSBOT_MODEL", "openai:gpt-4.1")
    monkeypatch.setenv("OPSBOT_MODEL_FALLBACKS", '["anthropic:claude-sonnet-4-5"]')
    monkeypatch.setenv("OPSBOT_BROKER__TOKEN_TTL_SECONDS", "120")
    monkeypatch.setenv("SLACK_SIGNING_SECRET", "s3cret")
    monkeypatch.setenv("SLACK_API_URL", "http://127.0.0.1:9999/api/")
    monkeypatch.setenv("PORT", "8080")
    settings = _settings()
    assert settings.resolved_database_url == f"sqlite:///{tmp_path.as_posix()}/opsbot.db"
    assert settings.model == "openai:gpt-4.1"
    assert settings.model_fallbacks == ["anthropic:claude-sonnet-4-5"]
    assert settings.broker.token_ttl_seconds == 120
    assert settings.slack_signing_secret is not None
    assert settings.slack_signing_secret.get_secret_value() == "s3cret"
    assert "s3cret" not in repr(settings)
    assert settings.slack_api_url == "http://127.0.0.1:9999/api/"
    assert settings.port == 8080


@pytest.mark.parametrize("name", ["ticket-ing", "docs_v2", "jïra", "9docs", "x" * 33, ""])
def test_server_names_must_be_plain_ascii_words(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    # Each prefixes tool names that model providers take; "_" would make "a" + "b_c" and
    # "a_b" + "c" one name, and hide which server a prefixed name belongs to.
    monkeypatch.setenv(
        "OPSBOT_MCP_SERVERS", f'[{{"name": "{name}", "url": "http://x/mcp", "audience": "a"}}]'
    )
    with pytest.raises(ValidationError, match="must be ASCII letters and digits"):
        _settings()


def test_a_server_name_configured_twice_stops_start_up(monkeypatch: pytest.MonkeyPatch) -> None:
    servers = ",".join(
        f'{{"name": "docs", "url": "http://127.0.0.1:1/{i}", "audience": "a{i}"}}' for i in (1, 2)
    )
    monkeypatch.setenv("OPSBOT_MCP_SERVERS", f"[{servers}]")
    with pytest.raises(ValidationError, match="configured twice"):
        _settings()


def _readme_section(title: str) -> str:
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    start = readme.index(f"\n### {title}\n")
    end = readme.find("\n#", start + 1)
    return readme[start : end if end != -1 else None]


def test_the_pool_defaults_add_up_to_the_readmes_connection_budget() -> None:
    """README, Scaling: the PostgreSQL connections an instance holds at most, as the sum of
    its pools and their defaults, what a burst adds and the figure to keep under
    max_connections. Each is read from the README's text and checked against ``PoolSettings``
    (and the Kubernetes ConfigMap that sets them), so the two cannot drift."""
    scaling = _readme_section("Scaling")
    formula = re.search(r"connections ≤ instances × \(([a-z +]+)\)", scaling)
    assert formula, "README, Scaling: no 'connections ≤ instances × (…)' line"
    names = [n.strip() for n in formula.group(1).split("+")]
    defaults = re.search(r"defaults:\s+([\d +]+?)\s*=\s*(\d+) per instance", scaling)
    assert defaults, "README, Scaling: no 'defaults: … = N per instance' line"
    figures = [int(n) for n in defaults.group(1).split("+")]
    budget = int(defaults.group(2))

    pools = PoolSettings()
    assert sorted(names) == sorted(PoolSettings.model_fields), "a pool the README leaves out"
    assert dict(zip(names, figures, strict=True)) == {n: getattr(pools, n) for n in names}
    assert sum(getattr(pools, n) for n in names) == budget

    # SQLAlchemy's overflow: the pools that take it, their sum, and the figure to plan with
    burst = re.search(r"up to `([a-z +]+)` \((\d+)\) more per instance", scaling)
    assert burst, "README, Scaling: no 'up to `…` (N) more per instance'"
    overflow = int(burst.group(2))
    assert sum(getattr(pools, n.strip()) for n in burst.group(1).split("+")) == overflow
    keep_under = re.search(r"`\(web \+ worker replicas\) × (\d+)`", scaling)
    assert keep_under, "README, Scaling: no '(web + worker replicas) × N'"
    assert int(keep_under.group(1)) == budget + overflow

    config = (Path(__file__).resolve().parents[1] / "deploy/kubernetes/config.yaml").read_text()
    for name in names:
        assert f'OPSBOT_POOLS__{name.upper()}: "{getattr(pools, name)}"' in config, name
