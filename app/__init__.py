"""replayscope dashboard (Dash) and the ``replayscope`` command line."""

__version__ = "0.1.0"   # the package's one version (pyproject.toml reads it from here)
