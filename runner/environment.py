"""Settings the runner side reads from the environment, read here once; the collector's
``collector.settings.resolve`` reads its token through the same function.

Standard library only, so building a command line stays cheap.
"""

from __future__ import annotations

import os
from typing import Mapping

TOKEN_VARIABLE = "REPLAYSCOPE_TOKEN"


def token(flag: str | None = None, environ: Mapping[str, str] | None = None) -> str | None:
    """The bearer token for a collector: the ``--token`` flag, else ``$REPLAYSCOPE_TOKEN``,
    else None (an empty value is none)."""
    if flag:
        return flag
    env = os.environ if environ is None else environ
    return env.get(TOKEN_VARIABLE) or None
