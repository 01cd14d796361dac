"""What the Slack adapter uses from the platform-neutral core: exactly ``assistant.types``,
re-exported so the adapter's modules name one place.

The adapter only translates: it calls an ``AssistantPort`` (the real ``Assistant`` or a
test fake) and renders the results.
"""

from assistant.outcomes import args_summary, describe_state, is_settled, normalise_state
from assistant.types import *  # noqa: F403
from assistant.types import __all__ as _types_all

# A new list: ``+=`` on the imported one would change ``assistant.types.__all__`` itself.
__all__ = [*_types_all, "args_summary", "describe_state", "is_settled", "normalise_state"]
