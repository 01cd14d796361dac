"""Microsoft Teams adapter: translates Teams activities and card clicks into ``Assistant``
calls and the results into Adaptive Cards. Like ``bot.slack`` it sees only ``assistant.types``."""
