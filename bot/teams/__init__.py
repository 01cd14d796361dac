"""Teams adapter: translates Microsoft Teams activities (through the Microsoft 365 Agents SDK)
into ``Assistant`` calls and the results into Adaptive Cards. No business rules live here.

Public API::

    from bot.teams import TeamsBotConfig, open_teams_bot, teams_routes

Requires the optional extra ``opsbot[teams]``.
"""

from bot.teams.app import TeamsBot, open_teams_bot
from bot.teams.config import TeamsBotConfig
from bot.teams.server import MESSAGES_PATH, teams_routes

__all__ = ["MESSAGES_PATH", "TeamsBot", "TeamsBotConfig", "open_teams_bot", "teams_routes"]
