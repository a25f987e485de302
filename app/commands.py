"""Dashboard subcommands of ``replayscope`` (filled in by the dashboard)."""


def add_parsers(sub) -> None:
    """Register this package's subcommands on ``sub``."""
