"""The operations endpoints on the app's aiohttp server: ``/metrics`` and ``/readyz``
(``/healthz`` — alive — is served by the app itself), and a middleware counting requests.

Example::

    application = web_application(bolt_app, routes=ops_routes(readiness, refresh_gauges),
                                  middlewares=[request_metrics])

``refresh`` updates gauges computed on demand (the roof passes
``opsbot.observability.refresh_runtime_gauges``) before each scrape.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from infra.observability import metrics as m
from infra.observability.health import Readiness
from infra.observability.logs import request_context

METRICS_PATH = "/metrics"
READY_PATH = "/readyz"

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def ops_routes(
    readiness: Readiness | None, refresh: Callable[[], Awaitable[None]] | None = None
) -> list[web.RouteDef]:
    async def metrics(_request: web.Request) -> web.Response:
        if refresh is not None:
            await refresh()
        body = generate_latest(m.REGISTRY)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    routes = [web.get(METRICS_PATH, metrics)]
    if readiness is not None:

        async def ready(_request: web.Request) -> web.Response:
            report = await readiness.check()
            return web.json_response(report.as_json(), status=200 if report.ready else 503)

        routes.append(web.get(READY_PATH, ready))
    return routes


@web.middleware
async def request_metrics(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Counts each request by route template (never the raw path) and status; binds a
    request id to the logs of everything the request does."""
    info = request.match_info.route.resource
    route = info.canonical if info is not None else "unmatched"
    with request_context(route=route, method=request.method):
        try:
            response = await handler(request)
        except web.HTTPException as exc:
            m.HTTP_REQUESTS.labels(route=route, status=str(exc.status)).inc()
            raise
        except Exception:
            m.HTTP_REQUESTS.labels(route=route, status="500").inc()
            raise
    m.HTTP_REQUESTS.labels(route=route, status=str(response.status)).inc()
    return response
