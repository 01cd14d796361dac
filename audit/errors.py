"""Errors raised by the audit package.

Exception tree::

    AuditError
    └── AuditQueryError     a query was malformed (bad time range, unknown kind)

Appending never raises for content: whatever is passed is redacted, never refused.
"""

from __future__ import annotations


class AuditError(Exception):
    """Base class for audit failures."""


class AuditQueryError(AuditError):
    """An audit query was malformed."""
