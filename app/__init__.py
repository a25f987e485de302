"""replayscope dashboard (Dash) and the ``replayscope`` command line."""
