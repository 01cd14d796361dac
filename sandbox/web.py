"""The emulator's HTTP face: the Web API for the bot (``/api/<method>``), the web UI and its
JSON endpoints (``/ui/…``), ``response_url`` hooks, and pages for the demo systems' links.

The UI is one static page (``static/``) that polls ``/ui/state`` (cheap: it answers only
``{"version": n}`` while nothing changed) and POSTs what the person does.
"""

from __future__ import annotations

import html
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import FileResponse, HTMLResponse, Response
from starlette.responses import JSONResponse as _StarletteJSONResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from infra.json_input import parse_json
from sandbox.emulator import InputError, SlackEmulator
from sandbox.teams_chat import TeamsChat
from testing.slack_api import Params, decode_params
from testing.slack_webapi import WebApi

STATIC_DIR = Path(__file__).parent / "static"

# (kind, id) → (title, body lines) of a record in a demo system, or None.
SourceLookup = Callable[[str, str], Awaitable[tuple[str, list[tuple[str, str]]] | None]]


class JSONResponse(_StarletteJSONResponse):
    """JSON with every non-ASCII character escaped. A browser's text box can hold a lone
    surrogate, which JSON can carry but UTF-8 cannot: the message's ``/ui/state`` failed with
    a 500 at every poll, and the page stopped updating for everyone in that channel."""

    def render(self, content: Any) -> bytes:
        return json.dumps(content, allow_nan=False, separators=(",", ":")).encode("ascii")


@dataclass(frozen=True, slots=True)
class _Body:
    data: dict[str, Any]

    def text(self, key: str) -> str:
        value = self.data.get(key)
        if not isinstance(value, str) or not value:
            raise InputError(f"{key} is required")
        return value

    def optional_text(self, key: str) -> str | None:
        value = self.data.get(key)
        return value if isinstance(value, str) and value else None

    def integer(self, key: str) -> int:
        value = self.data.get(key)
        if not isinstance(value, int) or isinstance(value, bool):
            raise InputError(f"{key} must be an integer")
        return value


async def _body(request: Request) -> _Body:
    try:
        data = parse_json(await request.body() or b"{}")
    except ValueError:
        raise InputError("the body is not JSON") from None
    except ClientDisconnect:
        raise InputError("the page went away mid-request") from None
    if not isinstance(data, dict):
        raise InputError("the body must be a JSON object")
    return _Body(data)


def _web_api(api: WebApi) -> Callable[[Request], Awaitable[Response]]:
    """Slack's wire around ``api``: ``POST /api/<method>`` with a form or JSON body, the bot
    token as ``Authorization: Bearer`` (or a ``token`` field), always HTTP 200 ``{"ok": ...}``."""

    async def endpoint(request: Request) -> Response:
        try:
            params = await _api_params(request)
        except ValueError:
            return JSONResponse({"ok": False, "error": "invalid_json"})
        except ClientDisconnect:
            return Response(status_code=400)  # nobody reads it
        auth = request.headers.get("authorization", "")
        token = auth.removeprefix("Bearer ").strip() if auth.startswith("Bearer ") else None
        token = token or params.pop("token", None)
        return JSONResponse(api.call(request.path_params["method"], params, token))

    return endpoint


async def _api_params(request: Request) -> Params:
    params: Params
    if request.headers.get("content-type", "").startswith("application/json"):
        data = parse_json(await request.body() or b"{}")
        params = dict(data) if isinstance(data, dict) else {}
    else:
        form = await request.form()
        params = {k: v for k, v in form.items() if isinstance(v, str)}
    return decode_params(params, dict(request.query_params))


def build_app(
    emulator: SlackEmulator,
    api: WebApi,
    sources: SourceLookup | None = None,
    teams: TeamsChat | None = None,
) -> Starlette:
    def ui_action(
        handler: Callable[[_Body], None],
    ) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            try:
                handler(await _body(request))
            except InputError as exc:
                return JSONResponse({"ok": False, "error": str(exc)}, status_code=400)
            return JSONResponse({"ok": True, "version": emulator.workspace.version})

        return endpoint

    async def index(_request: Request) -> Response:
        return FileResponse(STATIC_DIR / "index.html", headers={"Cache-Control": "no-store"})

    async def state(request: Request) -> Response:
        if request.query_params.get("since") == str(emulator.workspace.version):
            return JSONResponse({"version": emulator.workspace.version})
        try:
            return JSONResponse(emulator.state(request.query_params.get("user", "")))
        except InputError as exc:
            return JSONResponse({"ok": False, "error": str(exc)}, status_code=400)

    async def users(_request: Request) -> Response:
        people = [
            {"id": u.id, "name": u.name, "real_name": u.real_name}
            for u in emulator.workspace.humans()
        ]
        return JSONResponse({"users": people})

    async def hook(request: Request) -> Response:
        try:
            target = emulator.hook(request.path_params["token"])
            emulator.respond(target, (await _body(request)).data)
        except InputError as exc:
            return JSONResponse({"ok": False, "error": str(exc)}, status_code=404)
        return JSONResponse({"ok": True})

    async def source(request: Request) -> Response:
        kind, key = request.path_params["kind"], request.path_params["key"]
        found = None if sources is None else await sources(kind, key)
        if found is None:
            return HTMLResponse(_page("Not found", [("", f"No {kind} record {key}.")]), 404)
        title, lines = found
        return HTMLResponse(_page(title, lines))

    def say(body: _Body) -> None:
        emulator.say(
            body.text("user"),
            body.text("channel"),
            body.text("text"),
            body.optional_text("thread_ts"),
        )

    def click(body: _Body) -> None:
        user, block, element = body.text("user"), body.integer("block"), body.integer("element")
        if body.data.get("home"):
            emulator.click_home(user, block, element)
        else:
            choice = body.data.get("choice")
            emulator.click_message(
                user,
                body.text("channel"),
                body.text("ts"),
                block,
                element,
                choice if isinstance(choice, str) else None,
            )

    def submit(body: _Body) -> None:
        values = body.data.get("values")
        if not isinstance(values, dict):
            raise InputError("values must be an object")
        emulator.submit_view(body.text("user"), body.text("view_id"), values)

    routes = [
        Route("/", index),
        Route("/api/{method}", _web_api(api), methods=["GET", "POST"]),
        Route("/ui/state", state),
        Route("/ui/users", users),
        Route("/ui/say", ui_action(say), methods=["POST"]),
        Route("/ui/click", ui_action(click), methods=["POST"]),
        Route("/ui/submit", ui_action(submit), methods=["POST"]),
        Route(
            "/ui/close",
            ui_action(lambda b: emulator.close_view(b.text("user"), b.text("view_id"))),
            methods=["POST"],
        ),
        Route(
            "/ui/stop",
            ui_action(
                lambda b: emulator.stop_session(
                    b.text("user"), b.text("channel"), b.text("thread_ts")
                )
            ),
            methods=["POST"],
        ),
        Route(
            "/ui/home",
            ui_action(lambda b: emulator.open_home(b.text("user"), b.text("tab"))),
            methods=["POST"],
        ),
        *([] if teams is None else teams_routes(teams)),
        Route("/hooks/{token}", hook, methods=["POST"]),
        Route("/sources/{system}/{kind}/{key}", source),
        Route("/healthz", lambda _r: JSONResponse({"ok": True})),
        Mount("/static", StaticFiles(directory=STATIC_DIR), name="static"),
    ]
    return Starlette(routes=routes)


def teams_routes(teams: TeamsChat) -> list[Route]:
    """The Teams view (``/teams``) and its JSON endpoints, beside the Slack view's."""

    async def page(_request: Request) -> Response:
        return FileResponse(STATIC_DIR / "teams.html", headers={"Cache-Control": "no-store"})

    async def state(request: Request) -> Response:
        try:
            return JSONResponse(await teams.state(request.query_params.get("user", "")))
        except InputError as exc:
            return JSONResponse({"ok": False, "error": str(exc)}, status_code=400)

    async def say(request: Request) -> Response:
        try:
            body = await _body(request)
            place, text = body.text("place"), body.text("text")
            teams.say(body.text("user"), place, text, body.optional_text("thread"))
        except InputError as exc:
            return JSONResponse({"ok": False, "error": str(exc)}, status_code=400)
        return JSONResponse({"ok": True})

    async def click(request: Request) -> Response:
        try:
            body = await _body(request)
            data = body.data.get("data", {})
            if not isinstance(data, dict):
                raise InputError("data must be an object")
            answer = await teams.click(body.text("user"), body.text("key"), body.text("verb"), data)
        except InputError as exc:
            return JSONResponse({"ok": False, "error": str(exc)}, status_code=400)
        if isinstance(answer, str):
            return JSONResponse({"ok": True, "message": answer})
        return JSONResponse({"ok": True, "card": answer})

    return [
        Route("/teams", page),
        Route("/teams/state", state),
        Route("/teams/say", say, methods=["POST"]),
        Route("/teams/click", click, methods=["POST"]),
    ]


def _page(title: str, lines: list[tuple[str, str]]) -> str:
    rows = "".join(
        f"<dt>{html.escape(label)}</dt><dd>{html.escape(value)}</dd>" for label, value in lines
    )
    return (
        "<!doctype html><html><head><meta charset='utf-8'>"
        f"<title>{html.escape(title)}</title>"
        "<link rel='stylesheet' href='/static/app.css'></head>"
        "<body class='source'><p class='banner'>opsbot sandbox — demo data</p>"
        f"<h1>{html.escape(title)}</h1><dl>{rows}</dl></body></html>"
    )
