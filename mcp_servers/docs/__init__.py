"""The reference docs MCP server."""

from mcp_servers.docs.seed import INJECTION_DOCS, seed_docs
from mcp_servers.docs.server import build_docs
from mcp_servers.docs.store import DocStore

__all__ = ["INJECTION_DOCS", "DocStore", "build_docs", "seed_docs"]
