"""Errors any part of opsbot may raise about its configuration.

``ConfigurationError``: the settings ask for something this installation cannot do (say, a
model provider whose extra is not installed). Its message is one line for a person; the
command line prints it without a traceback and exits 2.
"""

from __future__ import annotations


class ConfigurationError(Exception):
    """The settings name something this installation cannot do; the message says what to do."""
