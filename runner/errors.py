"""User-facing errors: the command line prints them as one line and exits non-zero."""


class ReplayscopeError(Exception):
    """Bad input or an unusable environment, explained in one line for the user."""
