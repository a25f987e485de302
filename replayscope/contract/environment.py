"""Settings the runner side reads from the environment, read here once; the collector's
``replayscope.collector.settings.resolve`` reads its token through the same function.

Standard library only, so building a command line stays cheap.
"""

from __future__ import annotations

import os
import re
from typing import Mapping

from replayscope.contract.errors import ReplayscopeError

TOKEN_VARIABLE = "REPLAYSCOPE_TOKEN"
# RFC 6750's b64token: what may follow "Bearer " in an Authorization header, so the only
# tokens a client can send (replayscope.collector.api.auth.bearer parses by it).
B64TOKEN = re.compile(r"[A-Za-z0-9\-._~+/]+=*")


def token(flag: str | None = None, environ: Mapping[str, str] | None = None) -> str | None:
    """The bearer token for a collector: the ``--token`` flag, else ``$REPLAYSCOPE_TOKEN``,
    else None (an empty value is none). A token no ``Authorization: Bearer`` header could
    carry (RFC 6750: letters, digits, ``-._~+/``, then ``=`` padding) is a one-line error."""
    env = os.environ if environ is None else environ
    value = flag or env.get(TOKEN_VARIABLE) or None
    if value is not None and not B64TOKEN.fullmatch(value):
        where = "--token" if flag else TOKEN_VARIABLE
        raise ReplayscopeError(f"{where}: a bearer token is letters, digits and -._~+/ (then = padding), "
                               f"as RFC 6750 allows; use e.g. python3 -c 'import secrets; "
                               f"print(secrets.token_urlsafe(32))'")
    return value
