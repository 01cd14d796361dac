"""panva's certified ``oidc-provider`` (node) as an independent OpenID provider for tests.

Pinned in ``tests/oidc_provider/package.json`` (+ lock), installed by ``.ci/run`` with
``npm ci --prefix tests/oidc_provider`` (the ``node`` fixture runs it when ``node_modules`` is
missing), and started per test by ``tests/oidc_provider/server.mjs`` on a free loopback port.
Without node the fixture skips, except under ``CI=true``, where it fails.

``node_provider(node, redirect_uri, registration=, resource=)`` yields its issuer;
``sign_in(browser, url, login, callback_url)`` walks its login and consent pages as a browser.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import shutil
import subprocess
from collections.abc import AsyncIterator
from html import unescape
from pathlib import Path
from urllib.parse import parse_qsl, urlencode, urljoin, urlsplit, urlunsplit

import httpx
import pytest

from infra.settings import Settings

PROVIDER_DIR = Path(__file__).resolve().parents[1] / "tests" / "oidc_provider"
SERVER = PROVIDER_DIR / "server.mjs"
CLIENT_ID, CLIENT_SECRET = "opsbot", "opsbot-third-party-secret"
ACCOUNTS = {"carol": {"email": "carol@example.com", "name": "Carol", "groups": ["sre", "oncall"]}}


def _unavailable(reason: str) -> None:
    if Settings(_env_file=None).ci:
        pytest.fail(f"{reason} (CI=true: the third-party OpenID provider test must run)")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def node() -> str:
    """The node binary, with the pinned provider installed (``npm ci`` if it is missing)."""
    node = shutil.which("node")
    if node is None:
        _unavailable("node is not installed (Debian: apt-get install nodejs npm)")
    assert node is not None
    if not (PROVIDER_DIR / "node_modules" / "oidc-provider").exists():
        npm = shutil.which("npm")
        if npm is None:
            _unavailable("npm is not installed, and tests/oidc_provider/node_modules is missing")
        assert npm is not None
        try:
            subprocess.run(
                [npm, "ci", "--no-audit", "--no-fund", "--prefix", str(PROVIDER_DIR)],
                check=True,
                capture_output=True,
                timeout=300,
            )
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
            output = getattr(exc, "stderr", b"") or b""
            tail = output.decode(errors="replace").strip().splitlines()[-1:] or [str(exc)]
            _unavailable(f"could not install oidc-provider with npm ci: {tail[0]}")
    return node


@contextlib.asynccontextmanager
async def node_provider(
    node: str,
    redirect_uri: str,
    *,
    registration: bool = False,
    resource: dict[str, str] | None = None,
) -> AsyncIterator[str]:
    """``oidc-provider`` with one confidential client (and RFC 7591 registration if asked);
    its issuer URL while the block runs."""
    config = {
        "registration": registration,
        "resource": resource,
        "clients": [
            {
                "client_id": CLIENT_ID,
                "client_secret": CLIENT_SECRET,
                "redirect_uris": [redirect_uri],
                "grant_types": ["authorization_code", "refresh_token"],
                "response_types": ["code"],
                "token_endpoint_auth_method": "client_secret_basic",
            }
        ],
        "accounts": ACCOUNTS,
    }
    process = await asyncio.create_subprocess_exec(
        node,
        str(SERVER),
        json.dumps(config),
        cwd=PROVIDER_DIR,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        assert process.stdout is not None
        assert process.stderr is not None
        try:
            line = await asyncio.wait_for(process.stdout.readline(), timeout=30)
        except TimeoutError:
            line = b""
        issuer = line.decode().strip()
        if not issuer.startswith("http://127.0.0.1:"):
            process.kill()
            errors = (await process.stderr.read()).decode(errors="replace")[-2000:]
            pytest.fail(f"oidc-provider did not start: {errors}")
        yield issuer
    finally:
        if process.returncode is None:
            process.kill()
        await process.wait()


_FORM = re.compile(r'<form[^>]*action="([^"]+)"[^>]*>(.*?)</form>', re.S)
_INPUT = re.compile(r"<input([^>]*)>")
_ATTR = re.compile(r'(\w+)="([^"]*)"')


async def sign_in(
    http: httpx.AsyncClient, url: str, login: str, callback_url: str, *, drop_iss: bool = False
) -> httpx.Response:
    """Walk the provider's login and consent pages as a browser would, until it redirects to
    ``callback_url``; our callback's response (``drop_iss`` removes RFC 9207 ``iss`` first)."""
    response = await http.get(url)
    for _ in range(12):
        if response.is_redirect:
            target = urljoin(str(response.url), response.headers["location"])
            if target.startswith(callback_url):
                if drop_iss:
                    parts = urlsplit(target)
                    query = [(k, v) for k, v in parse_qsl(parts.query) if k != "iss"]
                    target = urlunsplit(parts._replace(query=urlencode(query)))
                return await http.get(target)
            response = await http.get(target)
            continue
        assert response.status_code == 200, response.text[:500]
        form = _FORM.search(response.text)
        assert form is not None, response.text[:500]
        fields: dict[str, str] = {}
        for attrs in _INPUT.findall(form.group(2)):
            found = dict(_ATTR.findall(attrs))
            if "name" in found:
                fields[found["name"]] = unescape(found.get("value", ""))
        if "login" in fields:
            fields.update(login=login, password="any password")  # dev interactions
        action = urljoin(str(response.url), unescape(form.group(1)))
        response = await http.post(action, data=fields)
    raise AssertionError("the provider never redirected back to the callback")
