"""Every HTTP client opsbot makes shares one TLS context (``infra.tls``).

``httpx.AsyncClient()`` loads the CA bundle into a new ``SSLContext`` each time: ~50 ms of
CPU on the event loop, paid per readiness probe, per JWKS fetch, per linking step."""

from __future__ import annotations

import ast
import ssl
import tomllib
from pathlib import Path

import httpx
import pytest
from aiohttp import web

from infra.observability.health import _http_probe
from infra.serving import bind_socket, serve_aiohttp
from infra.tls import shared_ssl_context

ROOT = Path(__file__).resolve().parent.parent
# The product's packages (the sandbox and the test fakes among them: they run beside it).
PACKAGES: list[str] = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"][
    "root_packages"
]
CLIENTS = {"AsyncClient", "Client"}
# The MCP SDK's client factory builds a client with a TLS context of its own.
FACTORIES = {"create_mcp_http_client"}


def clients_without_a_context(source: str) -> list[int]:
    """Lines that build an ``httpx`` client with neither ``verify=`` nor ``transport=``,
    or through the MCP SDK's factory."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Name) and func.id in FACTORIES:
            found.append(node.lineno)
            continue
        if not (
            isinstance(func, ast.Attribute)
            and func.attr in CLIENTS
            and isinstance(func.value, ast.Name)
            and func.value.id == "httpx"
        ):
            continue
        keywords = {k.arg for k in node.keywords}
        if not keywords & {"verify", "transport"}:
            found.append(node.lineno)
    return found


def test_every_client_in_the_product_passes_the_shared_context() -> None:
    offenders = [
        f"{path.relative_to(ROOT)}:{line}"
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
        for line in clients_without_a_context(path.read_text())
    ]
    assert offenders == [], "pass verify=shared_ssl_context() (infra.tls): " + ", ".join(offenders)


def test_the_finder_finds_a_client_without_a_context() -> None:
    source = (
        "import httpx\n"
        "a = httpx.AsyncClient(timeout=5)\n"
        "b = httpx.AsyncClient(verify=ctx)\n"
        "c = httpx.Client(transport=t)\n"
        "d = create_mcp_http_client(headers=h)\n"
    )
    assert clients_without_a_context(source) == [2, 5]


def test_one_context_per_process() -> None:
    context = shared_ssl_context()
    assert isinstance(context, ssl.SSLContext)
    assert shared_ssl_context() is context
    assert context.verify_mode == ssl.CERT_REQUIRED
    assert context.check_hostname


async def _ok(_request: web.Request) -> web.Response:
    return web.Response(text="ok")


async def test_readiness_probes_build_no_tls_context(monkeypatch: pytest.MonkeyPatch) -> None:
    """A ``/readyz`` probes each HTTP dependency; none of those probes loads the CA bundle."""
    import httpx._transports.default as transports

    built: list[object] = []
    real = transports.create_ssl_context

    def spy(verify: object = True, **kwargs: object) -> ssl.SSLContext:
        if not isinstance(verify, ssl.SSLContext):
            built.append(verify)
        return real(verify=verify, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(transports, "create_ssl_context", spy)
    app = web.Application()
    app.router.add_get("/", _ok)
    sock = bind_socket("127.0.0.1", 0)
    async with serve_aiohttp(app, sock) as url:
        probe = _http_probe(url, timeout=5.0)
        for _ in range(3):
            await probe()
    assert built == []
    # The spy sees what a client made without the shared context does.
    async with httpx.AsyncClient():
        pass
    assert built == [True]
