"""What the Teams adapter uses from the platform-neutral core: exactly ``assistant.types``
(and ``assistant.outcomes``), re-exported so the adapter's modules name one place."""

from assistant.outcomes import args_summary, describe_state, is_settled, normalise_state
from assistant.types import *  # noqa: F403
from assistant.types import __all__ as _types_all

# A new list: ``+=`` on the imported one would change ``assistant.types.__all__`` itself.
__all__ = [*_types_all, "args_summary", "describe_state", "is_settled", "normalise_state"]
