"""Chat platform adapters. ``bot.slack`` translates Slack ↔ ``opsbot.assistant``."""
