"""The sandbox's one identity (``sandbox.one_identity``) wraps the core it hands to the chat
apps. The wrapper is a whole ``AssistantPort``: each of the port's calls is a method of its
own that reaches the core with the caller's arguments and returns the core's answer; none is
left to ``__getattr__`` (which mypy cannot check against the port). ``complete_link``'s own
behaviour, linking the other platform too, is shown in ``test_sandbox_teams_browser.py``."""

from __future__ import annotations

import inspect
from unittest import mock

import pytest

from assistant.types import AssistantPort
from sandbox.one_identity import _OneIdentity

PORT_METHODS = sorted(
    name
    for name, value in vars(AssistantPort).items()
    if inspect.isfunction(value) and not name.startswith("_")
)


def test_the_wrapper_passes_nothing_on_by_lookup() -> None:
    assert len(PORT_METHODS) > 20  # the port as read here (its methods, not other names)
    assert "complete_link" in PORT_METHODS
    assert [name for name in PORT_METHODS if name not in vars(_OneIdentity)] == []
    assert not hasattr(_OneIdentity, "__getattr__")


@pytest.mark.parametrize("name", PORT_METHODS)
async def test_each_port_call_reaches_the_core(name: str) -> None:
    core = mock.create_autospec(AssistantPort, instance=True)
    wrapper = _OneIdentity(core, pairs={})
    parameters = list(inspect.signature(getattr(AssistantPort, name)).parameters.values())[1:]
    args = [object() for p in parameters if p.kind is p.POSITIONAL_OR_KEYWORD]
    kwargs = {p.name: object() for p in parameters if p.kind is p.KEYWORD_ONLY}

    result = getattr(wrapper, name)(*args, **kwargs)
    if inspect.isawaitable(result):
        result = await result

    reached = getattr(core, name)
    reached.assert_called_once_with(*args, **kwargs)
    assert result is reached.return_value
