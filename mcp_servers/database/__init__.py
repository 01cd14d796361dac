"""The reference database MCP server (SQLite embedded default, PostgreSQL with mapped roles)."""

from mcp_servers.database.gateway import DatabaseGateway, open_gateway, role_for
from mcp_servers.database.models import DatabaseConfig
from mcp_servers.database.postgres import deprovision, gateway_url, is_provisioned, provision
from mcp_servers.database.server import build_database

__all__ = [
    "DatabaseConfig",
    "DatabaseGateway",
    "build_database",
    "deprovision",
    "gateway_url",
    "is_provisioned",
    "open_gateway",
    "provision",
    "role_for",
]
