"""Receiver URLs (webhooks, Alertmanager): parsed and checked once, shown without secrets,
and sent only to the addresses an operator allows.

A receiver URL is ``http`` or ``https`` with a host, a port in 1..65535 when it names one,
no whitespace and at most 2000 characters (``parse``; anything else is ``BadURL``, whose
message never repeats the URL). ``user:password@`` in it is basic auth: sent as an
``Authorization`` header, never as part of the address.

What a reader sees of a URL is ``redact(url)``: scheme, host and port, and ``/…`` when it
has a path or query (``https://hooks.slack.com/…``); never credentials, path or query, and
never an exception, whatever the store holds.

``TargetPolicy`` is where notifications may go: every address that is not public
(loopback, link-local such as 169.254.169.254, private, shared, reserved, multicast,
unspecified, and IPv4 written as IPv6 such as ``::ffff:127.0.0.1``) is refused unless
``REPLAYSCOPE_WEBHOOK_ALLOW`` names it: a host name as the URL writes it
(``alertmanager``), an address (``127.0.0.1``) or a network (``10.0.0.0/8``), comma
separated. A rule naming such an address is refused when it is created; a name is
resolved when each notification is sent, and only an allowed address is connected to.
"""

from __future__ import annotations

import base64
import ipaddress
import socket
from dataclasses import dataclass
from typing import Iterable
from urllib.parse import unquote, urlsplit

from replayscope.contract.errors import ReplayscopeError

REDACTED = "…"
MAX_URL_CHARS = 2000
ALLOW_VARIABLE = "REPLAYSCOPE_WEBHOOK_ALLOW"
Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network


class BadURL(ValueError):
    """Not a URL replayscope posts to; the message says why without repeating the URL."""


class RefusedTarget(BadURL):
    """A receiver whose address is not public and not allowed by the operator."""


@dataclass(frozen=True)
class ReceiverURL:
    scheme: str
    host: str                      # as written, lower case, IPv6 without brackets
    port: int                      # the URL's port, else the scheme's default
    target: str                    # path and query to request ("/" when empty)
    username: str | None
    password: str | None

    @property
    def authorization(self) -> str | None:
        """The basic-auth header value for ``user:password@``, else None."""
        if self.username is None:
            return None
        pair = f"{self.username}:{self.password or ''}".encode()
        return "Basic " + base64.b64encode(pair).decode()


def parse(url: object) -> ReceiverURL:
    """The parts of a receiver URL, or ``BadURL`` saying what is wrong with it."""
    if not isinstance(url, str) or not url:
        raise BadURL("must be an http(s) URL")
    if len(url) > MAX_URL_CHARS:
        raise BadURL(f"longer than {MAX_URL_CHARS} characters")
    if any(ch.isspace() or not ch.isprintable() for ch in url):
        raise BadURL("must not contain spaces or control characters")
    try:
        parts = urlsplit(url)
        host = parts.hostname
        port = parts.port
    except ValueError as error:          # "Invalid IPv6 URL", "Port out of range 0-65535", ...
        if "port" in str(error).lower():
            raise BadURL("the port must be a whole number in 1..65535") from None
        raise BadURL(f"not a valid URL ({_without_url(str(error))})") from None
    if parts.scheme not in ("http", "https"):
        raise BadURL("must be an http(s) URL")
    if not host:
        raise BadURL("has no host")
    if port is not None and not 1 <= port <= 65535:
        raise BadURL(f"port {port} is outside 1..65535")
    target = parts.path or "/"
    if parts.query:
        target += "?" + parts.query
    return ReceiverURL(parts.scheme, host.rstrip(".").lower(), port or (443 if parts.scheme == "https" else 80),
                       target, None if parts.username is None else unquote(parts.username),
                       None if parts.password is None else unquote(parts.password))


def _without_url(message: str) -> str:
    return message.split(":", 1)[0] if "://" in message else message


def redact(url: str | None) -> str | None:
    """What a reader may see of a URL: scheme, host and port, ``/…`` for any path or query."""
    if not url:
        return url
    try:
        parts = urlsplit(url)
        host, port = parts.hostname or "", parts.port
    except ValueError:
        return "(not a valid URL)"
    if ":" in host:
        host = f"[{host}]"
    shown = f"{parts.scheme}://{host}" + (f":{port}" if port is not None else "")
    return shown + ("/" + REDACTED if parts.path not in ("", "/") or parts.query else parts.path)


# -- where notifications may go ----------------------------------------------------------------

def address_kind(address: Address) -> str | None:
    """Why an address is not public (``loopback``, ``private``, ...), or None when it is."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    for kind, flag in (("loopback", address.is_loopback), ("link-local", address.is_link_local),
                       ("unspecified", address.is_unspecified), ("multicast", address.is_multicast),
                       ("private", address.is_private), ("reserved", address.is_reserved)):
        if flag:
            return kind
    return None if address.is_global else "not public"


def _loopback_name(host: str) -> bool:
    return host == "localhost" or host.endswith(".localhost") or host == "localhost.localdomain"


def numeric_address(host: str) -> Address | None:
    """The address a host written as a number stands for (``127.1``, ``0x7f.0.0.1``,
    ``2130706433``, ``::1``), without any DNS lookup; None for a name."""
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None, flags=socket.AI_NUMERICHOST)
    except (socket.gaierror, UnicodeError, ValueError):
        return None
    return ipaddress.ip_address(infos[0][4][0].split("%")[0]) if infos else None


@dataclass(frozen=True)
class TargetPolicy:
    """Non-public receivers allowed by the operator: host names, addresses, networks."""

    names: frozenset[str] = frozenset()
    networks: tuple[Network, ...] = ()

    @classmethod
    def from_setting(cls, text: str | None) -> "TargetPolicy":
        """``REPLAYSCOPE_WEBHOOK_ALLOW``: comma-separated names, addresses and networks."""
        names: set[str] = set()
        networks: list[Network] = []
        for entry in (text or "").split(","):
            entry = entry.strip().strip("[]").rstrip(".").lower()
            if not entry:
                continue
            try:
                networks.append(ipaddress.ip_network(entry, strict=False))
            except ValueError:
                if not all(part.isalnum() or part in "-_." for part in entry):
                    raise ReplayscopeError(f"{ALLOW_VARIABLE}: {entry!r} is not a host name, an address or a "
                                           f"network (e.g. alertmanager,127.0.0.1,10.0.0.0/8)") from None
                names.add(entry)
        return cls(frozenset(names), tuple(networks))

    def _allows_address(self, address: Address) -> bool:
        mapped = address.ipv4_mapped if isinstance(address, ipaddress.IPv6Address) else None
        return any(a in network for network in self.networks for a in (address, mapped)
                   if a is not None and a.version == network.version)

    def allows_host(self, host: str) -> bool:
        return host in self.names

    def refusal(self, host: str, address: Address | None) -> str | None:
        """Why a connection to ``address`` (resolved from ``host``) is refused, else None."""
        if self.allows_host(host):
            return None
        if address is None:
            return (f"{host} is a loopback name; allow it with {ALLOW_VARIABLE}"
                    if _loopback_name(host) else None)
        kind = address_kind(address)
        if kind is None or self._allows_address(address):
            return None
        what = f"{host} is" if numeric_address(host) is not None else f"{host} resolves to"
        return f"{what} a {kind} address; notifications go there only if {ALLOW_VARIABLE} names it"

    def check_written(self, url: ReceiverURL) -> None:
        """Refuse, before any lookup, a URL whose host is written as a non-public address
        (or ``localhost``) the operator does not allow."""
        reason = self.refusal(url.host, numeric_address(url.host))
        if reason:
            raise RefusedTarget(reason)

    def allowed_addresses(self, host: str, addresses: Iterable[Address]) -> list[Address]:
        """The addresses of ``host`` a notification may connect to; ``RefusedTarget`` when none."""
        addresses = list(addresses)
        allowed = [a for a in addresses if self.refusal(host, a) is None]
        if not allowed and addresses:
            raise RefusedTarget(self.refusal(host, addresses[0]))
        return allowed


def checked(url: object, policy: TargetPolicy) -> ReceiverURL:
    """``parse`` then ``TargetPolicy.check_written``: what a rule or setting may hold."""
    parsed = parse(url)
    policy.check_written(parsed)
    return parsed
