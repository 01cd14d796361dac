"""The append-only audit log, redaction, and reconciliation of ambiguous writes.

Public API::

    from audit import AuditLog, SqlAuditSink, MemoryAuditSink, AuditQuery, EventKind
    from audit import redact, summarise, Reconciler
"""

from audit.errors import AuditError, AuditQueryError
from audit.log import (
    AuditEvent,
    AuditLog,
    AuditQuery,
    AuditSink,
    EventKind,
    MemoryAuditSink,
    SqlAuditSink,
    error_outcome,
)
from audit.observer import AuditObserver
from audit.reconcile import McpChangeLog, Reconciler, ReconcileReport
from audit.redaction import DETECTORS, detect_phone, detect_secret, redact, redact_text, summarise

__all__ = [
    "DETECTORS",
    "AuditError",
    "AuditEvent",
    "AuditLog",
    "AuditObserver",
    "AuditQuery",
    "AuditQueryError",
    "AuditSink",
    "EventKind",
    "McpChangeLog",
    "MemoryAuditSink",
    "ReconcileReport",
    "Reconciler",
    "SqlAuditSink",
    "detect_phone",
    "detect_secret",
    "error_outcome",
    "redact",
    "redact_text",
    "summarise",
]
