"""Collector subcommands of ``replayscope`` (filled in by the collector)."""


def add_parsers(sub) -> None:
    """Register this package's subcommands on ``sub``."""
