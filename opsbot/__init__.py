"""opsbot: the composition root — settings, storage, logging and the ``opsbot`` command line."""

__version__ = "0.1.0"
