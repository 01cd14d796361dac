"""Where the reference MCP servers listen by default: the default ``OPSBOT_MCP_SERVERS``,
the sandbox's ports and ``opsbot mcp`` read it here (a module with no imports, so the CLI can
build its parser before anything heavy is imported)."""

REFERENCE_PORTS = {"ticketing": 8101, "docs": 8102, "database": 8103}
