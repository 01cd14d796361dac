"""Fakes shared by tests/, bench/ and the sandbox: scripted chat models and agent environments,
the dev identity provider harness, a fake Slack Web API, MCP sessions, a fake assistant.

Nothing in the shipped packages imports this package.
"""
