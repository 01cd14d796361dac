"""The reference ticketing MCP server."""

from mcp_servers.ticketing.seed import INJECTION_TICKETS, seed_data
from mcp_servers.ticketing.server import build_ticketing
from mcp_servers.ticketing.store import TicketStore

__all__ = ["INJECTION_TICKETS", "TicketStore", "build_ticketing", "seed_data"]
