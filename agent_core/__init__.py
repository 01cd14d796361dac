"""One agent run for one user: model, user-scoped MCP tools, tool policy, middleware, answers.

Platform-neutral: nothing here imports a chat SDK.
"""
