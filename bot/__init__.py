"""Chat platform adapters. ``bot.slack`` translates Slack ↔ ``assistant.types``."""
