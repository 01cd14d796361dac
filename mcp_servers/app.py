"""The factory every reference server uses: FastMCP with our verifier, the auth gate, tool scopes.

``ScopedServer.tool(scope=..., read_only=...)`` registers a FastMCP tool, records its scope for
the gate's 403 check and annotates it (``readOnlyHint``, ``destructiveHint``,
``idempotentHint``). Tool bodies raise ``ToolRefusedError`` for refusals the caller should read;
any other exception becomes a generic "internal error" result (logged here, not sent), so
database details never reach the client, and the server keeps serving.
"""

from __future__ import annotations

import functools
import importlib.metadata
import logging
import reprlib
import typing
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, ParamSpec, TypeVar
from urllib.parse import urlparse

from mcp.server.auth.settings import AuthSettings
from mcp.server.fastmcp import FastMCP
from mcp.server.fastmcp.exceptions import ToolError
from mcp.types import CallToolResult, ContentBlock, ToolAnnotations
from pydantic import AnyHttpUrl, ValidationError
from starlette.types import ASGIApp

from infra.logging import keep_root_handlers, quiet_mcp_streams
from mcp_servers.auth import JwksClient, JwtVerifier
from mcp_servers.errors import ToolRefusedError
from mcp_servers.gate import AuthGate
from mcp_servers.hosts import DEFAULT_ALLOWED_HOSTS, transport_security
from mcp_servers.output_schema import OutputValidators

logger = logging.getLogger(__name__)

P = ParamSpec("P")
R = TypeVar("R")


@functools.cache
def server_version() -> str:
    """The reference servers' ``serverInfo.version``: this project's version."""
    try:
        return importlib.metadata.version("opsbot")
    except importlib.metadata.PackageNotFoundError:  # run from a source tree, not installed
        return "0.0.0"


class _FastMCP(FastMCP):
    """FastMCP that advertises only what it has, with one-line argument-validation errors.

    FastMCP registers prompt and resource handlers up front, and the low-level server
    advertises a capability for every registered handler, so a server with only tools would
    claim ``prompts`` and ``resources`` (and fail conformance checks for them). Here only the
    tool handlers are registered at construction; the others when the app is built and the
    server actually has resources or prompts.
    """

    _output_validators: OutputValidators

    def _setup_handlers(self) -> None:
        self._output_validators = OutputValidators()
        # Named once here: without a version the SDK reads the installed ``mcp`` package's
        # metadata at every ``initialize`` (0.3 ms of CPU a session, on the server that runs
        # in opsbot's process under ``opsbot dev``), and calls that the server's version.
        self._mcp_server.version = server_version()
        # The low-level server's decorators are untyped upstream (hence the ignores).
        self._mcp_server.list_tools()(self.list_tools)  # type: ignore[no-untyped-call]
        # FastMCP converts arguments itself before validating them (as upstream does).
        self._mcp_server.call_tool(validate_input=False)(self._answer_tool_call)

    def prepare_output_validators(self) -> None:
        """Build every tool's output validator now, not on its first result."""
        for tool in self._tool_manager.list_tools():
            if tool.output_schema is not None:
                self._output_validators.prepare(tool.name, tool.output_schema)

    def register_implemented_handlers(self) -> None:
        """Add the resource and prompt handlers if (and only if) there is something to serve."""
        resources = self._resource_manager
        if resources.list_resources() or resources.list_templates():
            self._mcp_server.list_resources()(self.list_resources)  # type: ignore[no-untyped-call]
            self._mcp_server.read_resource()(self.read_resource)  # type: ignore[no-untyped-call]
            self._mcp_server.list_resource_templates()(self.list_resource_templates)  # type: ignore[no-untyped-call]
        if self._prompt_manager.list_prompts():
            self._mcp_server.list_prompts()(self.list_prompts)  # type: ignore[no-untyped-call]
            self._mcp_server.get_prompt()(self.get_prompt)  # type: ignore[no-untyped-call]

    async def call_tool(
        self, name: str, arguments: dict[str, Any]
    ) -> Sequence[ContentBlock] | dict[str, Any]:
        try:
            return await super().call_tool(name, arguments)
        except ToolError as exc:
            if isinstance(exc.__cause__, ValidationError):
                raise ToolError(readable_validation_error(name, exc.__cause__)) from exc
            raise

    async def _answer_tool_call(
        self, name: str, arguments: dict[str, Any]
    ) -> Sequence[ContentBlock] | dict[str, Any] | CallToolResult:
        """``call_tool`` for the low-level server, with the output schema checked here.

        The low-level server would check a structured result with ``jsonschema.validate``,
        which first re-checks the schema against its metaschema: ~80 ms of CPU per ticket
        written. Here each schema is checked once; a finished result passes through the SDK.
        """
        result = await self.call_tool(name, arguments)
        tool = self._tool_manager.get_tool(name)
        if tool is None or tool.output_schema is None or not isinstance(result, tuple):
            return result
        unstructured, structured = result
        self._output_validators.check(name, tool.output_schema, structured)
        return CallToolResult(content=list(unstructured), structuredContent=structured)


def readable_validation_error(tool: str, error: ValidationError) -> str:
    problems = []
    for item in error.errors(include_url=False):
        where = ".".join(str(part) for part in item["loc"]) or "arguments"
        problem = f"{where}: {item['msg']}"
        if item["type"] != "missing":
            problem += f" (got {reprlib.repr(item.get('input'))})"
        problems.append(problem)
    return f"invalid arguments for {tool}: " + "; ".join(problems)


@dataclass(frozen=True, slots=True)
class AuthConfig:
    """What a server trusts: the issuer, where its keys are, and this server's audience.

    The audience is the ``aud`` its tokens must carry. By default it is also the server's
    canonical URI (``resource_url``: its RFC 9728 metadata and its MCP path), as the MCP
    authorization spec has it; an identity provider that names audiences otherwise (Okta's
    ``api://tickets``, a Keycloak client id) gives ``audience`` as that name and
    ``resource_url`` as the URL. ``ValueError`` when the URL is not one.
    """

    issuer: str
    audience: str  # e.g. http://127.0.0.1:8101/mcp, or a name such as "tickets-mcp"
    jwks_url: str | None = None  # default: OIDC discovery from the issuer
    leeway_seconds: int = 0
    resource_url: str | None = None  # default: the audience

    def __post_init__(self) -> None:
        parsed = urlparse(self.resource)
        if parsed.scheme not in ("http", "https") or not parsed.hostname:
            raise ValueError(
                f"the server's URL must be an http(s) URL, got {self.resource!r} (an audience "
                "that is not a URL needs the server's URL beside it)"
            )

    @property
    def resource(self) -> str:
        """The server's canonical URI: its protected resource metadata and MCP path."""
        return self.resource_url or self.audience


@dataclass
class ScopedServer:
    """One MCP server: FastMCP plus the scope of each tool, served behind ``AuthGate``."""

    name: str
    auth: AuthConfig
    base_scope: str
    instructions: str
    jwks: JwksClient | None = None
    host: str = "127.0.0.1"
    # Host names this server answers (``mcp_servers.hosts``); others get 421.
    allowed_hosts: Sequence[str] = DEFAULT_ALLOWED_HOSTS
    tool_scopes: dict[str, str] = field(default_factory=dict)
    # Every tool call this server started, in order (its own record of what it was asked).
    served: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.transport_security = transport_security(self.allowed_hosts)
        if self.jwks is None:
            self.jwks = JwksClient(issuer=self.auth.issuer, jwks_url=self.auth.jwks_url)
        self.verifier = JwtVerifier(
            issuer=self.auth.issuer,
            audience=self.auth.audience,
            jwks=self.jwks,
            leeway_seconds=self.auth.leeway_seconds,
        )
        # FastMCP configures the root logger (rich handler, rich tracebacks) when nothing has
        # yet: the process that serves it decides how to log, not the server.
        quiet_mcp_streams()
        with keep_root_handlers():
            self.mcp = _FastMCP(
                self.name,
                instructions=self.instructions,
                token_verifier=self.verifier,
                auth=AuthSettings(
                    issuer_url=AnyHttpUrl(self.auth.issuer),
                    resource_server_url=AnyHttpUrl(self.auth.resource),
                    required_scopes=[self.base_scope],
                    # The verifier checks ``aud`` itself; the SDK's check of the token's
                    # resource holds only where the audience is the URL.
                    validate_token_resource=self.auth.audience == self.auth.resource,
                ),
                host=self.host,
                # Also checked by the gate, before auth; the SDK checks again on the MCP route.
                transport_security=self.transport_security,
                streamable_http_path=urlparse(self.auth.resource).path.rstrip("/") or "/mcp",
                # Each request answered with one JSON body, not an event stream: no tool here
                # sends progress or log messages mid-call, and the stream (a response task
                # group, its watcher and ping tasks, SSE framing on both ends) was about a
                # third of the server's CPU per call; twenty approved writes arriving at once
                # queue on it. Streamable HTTP allows either; the clients read both.
                json_response=True,
            )

    def tool(
        self,
        *,
        scope: str,
        read_only: bool,
        destructive: bool = False,
        idempotent: bool | None = None,
        title: str | None = None,
    ) -> Callable[[Callable[P, Awaitable[R]]], Callable[P, Awaitable[R]]]:
        """Register an async tool with its required scope and annotations."""

        def register(fn: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]:
            name = fn.__name__
            # Resolve annotations now: FastMCP reads the signature through the wrapper.
            fn.__annotations__ = typing.get_type_hints(fn, include_extras=True)

            @functools.wraps(fn)
            async def guarded(*args: P.args, **kwargs: P.kwargs) -> R:
                self.served.append(name)
                try:
                    return await fn(*args, **kwargs)
                except ToolRefusedError as exc:
                    raise ToolError(str(exc)) from exc
                except ToolError:
                    raise
                except Exception as exc:
                    logger.exception("tool %s failed", name)
                    raise ToolError(
                        f"internal error in {name} ({type(exc).__name__}); nothing was changed "
                        "unless the change log says so"
                    ) from exc

            self.tool_scopes[name] = scope
            self.mcp.tool(
                name=name,
                title=title,
                annotations=ToolAnnotations(
                    title=title,
                    readOnlyHint=read_only,
                    destructiveHint=destructive if not read_only else None,
                    idempotentHint=read_only if idempotent is None else idempotent,
                    openWorldHint=False,
                ),
            )(guarded)
            return guarded

        return register

    def asgi_app(self) -> ASGIApp:
        """The streamable-HTTP app behind the auth gate (build once per server)."""
        self.mcp.register_implemented_handlers()
        self.mcp.prepare_output_validators()
        return AuthGate(
            self.mcp.streamable_http_app(),
            verifier=self.verifier,
            resource=self.auth.resource,
            authorization_servers=[self.auth.issuer],
            tool_scopes=self.tool_scopes,
            resource_name=self.name,
            transport_security=self.transport_security,
        )
