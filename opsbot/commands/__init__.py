"""Subcommands of the ``opsbot`` command line, one module each."""
