"""The broker service's errors on the wire: each one comes back from ``RemoteBroker`` as the
class (and server, and connect URL) it left as; one table says how (``broker.errors``)."""

from __future__ import annotations

import pytest

from broker.errors import (
    AccessRevokedError,
    BrokerError,
    BrokerUnavailableError,
    ConnectRequired,
    ExchangeFailedError,
    InvalidStateError,
    LinkingError,
    NotLinkedError,
    from_wire,
    to_wire,
)


@pytest.mark.parametrize(
    ("error", "status"),
    [
        (NotLinkedError("carol has not connected"), 404),
        (AccessRevokedError("revoked"), 403),
        (ExchangeFailedError("docs", "invalid_target"), 502),
        (BrokerUnavailableError("idp down"), 503),
        (InvalidStateError("already used"), 400),
        (LinkingError("the authorization server refused: invalid_grant"), 502),
        (ConnectRequired("linear", "https://as.example/authorize?state=s"), 409),
    ],
)
def test_each_error_comes_back_as_it_left(error: BrokerError, status: int) -> None:
    body, sent = to_wire(error)
    assert sent == status
    back = from_wire(dict(body), sent, server="other")
    assert type(back) is type(error)
    assert str(back) == str(error)
    if isinstance(error, ExchangeFailedError | ConnectRequired):
        assert back.server == error.server  # type: ignore[attr-defined]
    if isinstance(error, ConnectRequired):
        assert isinstance(back, ConnectRequired)
        assert back.authorize_url == error.authorize_url


def test_unknown_answers_are_unavailable_or_refused() -> None:
    assert type(from_wire({"error": "teapot"}, 503, "x")) is BrokerUnavailableError
    refused = from_wire({"error": "teapot", "message": "short and stout"}, 418, "x")
    assert type(refused) is BrokerError
    assert "teapot" in str(refused)
    creds = from_wire({"error": "unauthorized"}, 401, "x")
    assert "service credentials" in str(creds)
    # A connect answer without a URL cannot send anyone anywhere: not a ConnectRequired.
    assert not isinstance(from_wire({"error": "connect_required"}, 409, "x"), ConnectRequired)
