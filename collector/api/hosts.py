"""The host names this collector serves: a request naming another one is refused.

A web page can make a browser send requests to a collector on the browser's own machine
or network by pointing a name it controls at that address (DNS rebinding): the request
then carries ``Host: evil.example``. Every request must name a host the collector serves:
a loopback name or address (``localhost``, ``127.0.0.1``, ``[::1]``), the address it listens
on, the host of ``REPLAYSCOPE_EXTERNAL_URL``, or one of ``REPLAYSCOPE_ALLOWED_HOSTS``
(comma-separated names; ``*`` allows any). Listening on every interface (``0.0.0.0``, which
needs a token) with no ``REPLAYSCOPE_ALLOWED_HOSTS``, any name is accepted: the names it is
reached by are not known. A request without ``Host`` (HTTP/1.0 clients) is not a browser's.
"""

from __future__ import annotations

import ipaddress
from typing import Any
from urllib.parse import urlsplit

WILDCARD_BINDS = ("0.0.0.0", "::", "")
LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "127.0.0.1", "::1"})


def _name(host: str) -> str:
    return host.strip().strip("[]").rstrip(".").lower()


def host_of(header: str) -> str:
    """The host of a ``Host`` header, without its port, lower case."""
    header = header.strip()
    if header.startswith("["):
        return _name(header.split("]", 1)[0])
    return _name(header.rsplit(":", 1)[0] if header.count(":") == 1 else header)


def served_hosts(settings: Any) -> frozenset[str] | None:
    """The names this collector answers to; None when any is (see the module's doc)."""
    listed = [_name(h) for h in (getattr(settings, "allowed_hosts", None) or "").split(",") if h.strip()]
    if "*" in listed:
        return None
    bind = _name(getattr(settings, "host", "") or "")
    if bind in WILDCARD_BINDS and not listed:
        return None
    names = set(LOOPBACK_NAMES) | set(listed)
    if bind not in WILDCARD_BINDS:
        names.add(bind)
    external = getattr(settings, "external_url", None)
    if external:
        try:
            names.add(_name(urlsplit(external).hostname or ""))
        except ValueError:
            pass
    return frozenset(n for n in names if n)


def is_served(header: str | None, hosts: frozenset[str] | None) -> bool:
    if hosts is None or header is None:
        return True
    name = host_of(header)
    if name in hosts:
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return name.endswith(".localhost")
