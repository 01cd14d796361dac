"""The broker's one rule for HTTP it sends (IdP, authorization servers, the broker service):
a transport failure — refused, DNS, timeout — is ``BrokerUnavailableError`` naming whom it
tried, never a raw ``httpx`` error (callers tell "down, try later" from "refused").

Example::

    response = await request(http, "POST", token_url, "identity provider", "token endpoint",
                             data=form)
"""

from __future__ import annotations

from typing import Any

import httpx

from broker.errors import BrokerUnavailableError


async def request(
    http: httpx.AsyncClient, method: str, url: str, who: str, what: str = "", **kwargs: Any
) -> httpx.Response:
    """``http.request(method, url, **kwargs)``; unreachable: ``BrokerUnavailableError``."""
    try:
        return await http.request(method, url, **kwargs)
    except httpx.HTTPError as exc:
        where = f" ({what})" if what else ""
        raise BrokerUnavailableError(f"{who} unreachable{where}: {type(exc).__name__}") from exc
