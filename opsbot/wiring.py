"""The roof's wiring: build the whole platform-neutral core from ``Settings``.

Example::

    async with open_assistant(settings) as assistant:
        reply = await assistant.handle_message(chat_user, ref, "close PAY-7")
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from agent_core.runs import SqlRunRegistry
from agent_core.threads import SqlThreadStore
from approvals.service import ApprovalService
from assistant.service import Assistant, Recovery
from audit.reconcile import McpChangeLog, Reconciler
from broker.links import linked_chat_users
from broker.remote import RemoteBroker
from broker.types import IdentityService, ServerConnector, SsoCompleter
from infra.clock import Clock, utc_now
from infra.lifecycle import cancel_and_wait
from infra.settings import Settings

if TYPE_CHECKING:
    from agent_core import Agent

log = logging.getLogger(__name__)


@contextlib.asynccontextmanager
async def open_assistant(settings: Settings, *, clock: Clock = utc_now) -> AsyncIterator[Assistant]:
    """The whole platform-neutral core as configured: database, identity service, checkpointer,
    agent (with the audit observer), approvals. Closes everything on exit."""
    from agent_core.checkpointer import open_checkpointer
    from agent_core.factory import build_agent
    from approvals.store import SqlApprovalStore
    from assistant.fanout import ApprovalFanout, SqlApprovalNotices
    from audit import AuditLog, AuditObserver, SqlAuditSink
    from broker.factory import open_identity_service
    from broker.local import LocalIdentityService
    from infra.storage import create_engine, warm_pool
    from opsbot.operations import open_operations

    url = settings.resolved_database_url
    grace = timedelta(seconds=settings.approvals.reconcile_grace_seconds)
    pools = settings.pools
    # Bounded pools (settings.pools): an instance's share of PostgreSQL's connections is
    # known in advance (README, Scaling).
    engine = create_engine(url, pool_name="app", pool_size=pools.app, max_overflow=pools.app)
    try:
        # The pool's connections open now, not on the first burst of clicks after a start
        # (each would pay a PostgreSQL connect on its way to its claim). Best effort: a
        # database not up yet is the later steps' to report, and the pool opens on demand.
        try:
            await warm_pool(engine, pools.app)
        except Exception as exc:
            log.warning("app pool not warmed at start: %s", type(exc).__name__)
        async with (
            open_identity_service(settings, engine, clock=clock) as identities,
            open_checkpointer(url, pool_size=pools.checkpointer) as saver,
            open_operations(settings, identities) as ops,
        ):
            audit = AuditLog(
                ops.audit_sink(SqlAuditSink(engine)),
                clock=clock,
                max_payload_bytes=settings.approvals.audit_max_payload_bytes,
            )
            threads = SqlThreadStore(engine, clock=clock)
            local = identities if isinstance(identities, LocalIdentityService) else None
            # Per-user OAuth to ``auth: oauth`` servers: in this process when it holds the
            # grants, else through the broker service (which refuses if it has none).
            servers: ServerConnector | None = (
                identities if isinstance(identities, RemoteBroker) else None
            )
            if local is not None and local.mcp_oauth is not None:
                servers = local
            mcp_oauth = None if servers is None else servers.oauth_token
            agent = build_agent(
                settings,
                broker=identities,
                threads=threads,
                checkpointer=saver,
                observer=ops.observer(AuditObserver(audit)),
                run_callbacks=ops.run_callbacks,
                extra_middleware=ops.middleware(),
                oauth_token=mcp_oauth,
            )
            runs = SqlRunRegistry(engine, clock)  # Stop reaches runs and resumes alike
            service = ApprovalService(
                SqlApprovalStore(engine),
                audit,
                agent,
                agent,
                identities.resolve_subject,
                identities,
                clock=clock,
                runs=runs,
            )
            recovery = Recovery(
                Reconciler(audit, _change_log(settings, identities), clock=clock, grace=grace),
                grace,
            )
            # In-process, this process finishes account links and owns the broker's counters;
            # a remote broker service does both itself.
            async with _settling(
                agent, ops.watch(agent, None if local is None else local.broker.metrics)
            ):
                yield Assistant(
                    identities,
                    threads,
                    agent,
                    service,
                    clock=clock,
                    memory=ops.memory,
                    recovery=recovery,
                    links=local,
                    people=functools.partial(linked_chat_users, engine),
                    fanout=ApprovalFanout(
                        SqlApprovalNotices(engine, clock),
                        card_platforms=frozenset(settings.approvals.card_platforms),
                        clock=clock,
                    ),
                    servers=servers,
                    exchange_servers=list(settings.exchange_audiences),
                    oauth_servers=[s.name for s in settings.mcp_servers if s.auth == "oauth"],
                    runs=runs,
                    # Teams SSO (the IdP is Entra): the in-process broker's, else the broker
                    # service's (configured with the same OPSBOT_TEAMS__SSO_* settings).
                    sso=_sso(settings, identities),
                )
    finally:
        await engine.dispose()


@contextlib.asynccontextmanager
async def _settling(
    agent: Agent, watch: contextlib.AbstractContextManager[Any]
) -> AsyncIterator[None]:
    """``watch`` entered, and the servers that need no user's token listed meanwhile (their
    tool counts in the start-up log); on the way out, the agent's runs' sessions are closed
    at their servers (they end after each run's answer, in the background) before anything
    stops."""
    listing = asyncio.create_task(agent.list_at_start(), name="mcp:list-at-start")
    listing.add_done_callback(_said_if_failed)
    try:
        with watch:
            yield
    finally:
        await cancel_and_wait(listing)
        await agent.settle()


def _said_if_failed(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.warning("mcp servers not listed at start: %r", task.exception())


def _change_log(settings: Settings, identities: IdentityService) -> McpChangeLog:
    """The servers' change logs, read as each pending write's requester."""

    async def token_for(subject: str, server: str) -> str:
        identity = await identities.resolve_subject(subject)
        return (await identities.get_token(identity, server)).value

    return McpChangeLog({s.name: s.url for s in settings.mcp_servers}, token_for)


def _sso(settings: Settings, identities: object) -> SsoCompleter | None:
    """Who links Teams users from their SSO token; ``None`` when Teams SSO is off."""
    from broker.local import LocalIdentityService

    if isinstance(identities, LocalIdentityService):
        return identities if identities.sso is not None else None
    if isinstance(identities, RemoteBroker) and settings.teams.sso_audience is not None:
        return identities
    return None
