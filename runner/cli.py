"""Runner subcommands of ``replayscope``."""


def add_parsers(sub) -> None:
    """Register this package's subcommands on ``sub``."""
