"""The collector's configuration, resolved one way for every command and the server:
flags > environment (``REPLAYSCOPE_<FIELD>``) > defaults.

``resolve(args)`` takes the command's parsed flags (an argparse namespace: any attribute
named like a field, when not None) over the environment over the defaults below.
Pure standard library, so building the command line stays cheap.
"""

from __future__ import annotations

import ipaddress
import math
import os
import re
from dataclasses import dataclass, fields, replace
from typing import Any, Mapping

from replayscope.contract import environment
from replayscope.contract.errors import ReplayscopeError

DEFAULT_DB = "sqlite:///replayscope.db"
DEMO_DB = "sqlite:///replayscope-demo.db"     # the demo's own store: its runs stay apart from yours
DEFAULT_PORT = 8300
LOG_LEVELS = ("critical", "error", "warning", "info", "debug")   # uvicorn's; info shows the access log
DAY_S = 86400
# Each number's accepted range (inclusive), checked once when settings resolve: a value out of
# it would fail on every tick (a period of 1e-300 s), spin a core (1e-9 s) or never be reached.
BOUNDS: dict[str, tuple[float, float]] = {
    "port": (1, 65535),
    "max_body_bytes": (1024, 1024 ** 3),
    "heartbeat_timeout_s": (1.0, 7 * DAY_S),
    "evaluate_every_s": (0.1, DAY_S),
    "notify_every_s": (0.1, 3600.0),
    "notify_expire_s": (1.0, 30 * DAY_S),
    "notify_repeat_s": (1.0, 30 * DAY_S),
    "webhook_timeout_s": (0.1, 600.0),
    "prune_every_s": (1.0, 7 * DAY_S),
}
MAX_RETENTION_S = 3650 * DAY_S      # ten years: beyond it a cut falls before any clock's epoch
RETENTIONS = ("raw_retention", "second_retention")
FOREVER = ("forever", "never", "off", "0")
_AGE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*$")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": DAY_S, "w": 7 * DAY_S, "": DAY_S}


@dataclass(frozen=True)
class Settings:
    db: str = DEFAULT_DB                       # REPLAYSCOPE_DB, --db
    token: str | None = None                   # REPLAYSCOPE_TOKEN: writes need "Bearer <token>"
    host: str = "127.0.0.1"                    # REPLAYSCOPE_HOST, --host
    port: int = DEFAULT_PORT                   # REPLAYSCOPE_PORT, --port
    log_level: str = "info"                    # REPLAYSCOPE_LOG_LEVEL, --log-level
    max_body_bytes: int = 8 * 1024 * 1024      # REPLAYSCOPE_MAX_BODY_BYTES
    heartbeat_timeout_s: float = 120.0         # REPLAYSCOPE_HEARTBEAT_TIMEOUT_S
    alert_webhook: str | None = None           # REPLAYSCOPE_ALERT_WEBHOOK (rules may name their own)
    alertmanager_url: str | None = None        # REPLAYSCOPE_ALERTMANAGER_URL: also post alerts to its /api/v2/alerts
    external_url: str | None = None            # REPLAYSCOPE_EXTERNAL_URL: the dashboard's address, for links
    evaluate_every_s: float = 10.0             # REPLAYSCOPE_EVALUATE_EVERY_S
    notify_every_s: float = 1.0                # REPLAYSCOPE_NOTIFY_EVERY_S: how often the outbox is sent
    notify_expire_s: float = 12 * 3600.0       # REPLAYSCOPE_NOTIFY_EXPIRE_S: retried until this old, then dropped
    notify_repeat_s: float = 4 * 3600.0        # REPLAYSCOPE_NOTIFY_REPEAT_S: a firing alert is re-sent this often
    webhook_timeout_s: float = 30.0            # REPLAYSCOPE_WEBHOOK_TIMEOUT_S: a slower answer is a failed attempt
    webhook_allow: str | None = None           # REPLAYSCOPE_WEBHOOK_ALLOW: non-public receivers allowed (names, addresses, networks)
    allowed_hosts: str | None = None           # REPLAYSCOPE_ALLOWED_HOSTS: Host names this collector answers to
    forwarded_allow_ips: str | None = None     # REPLAYSCOPE_FORWARDED_ALLOW_IPS, --forwarded-allow-ips: proxies whose X-Forwarded-For is believed
    run_services: bool = True                  # start the background services with the app
    raw_retention: str = "14d"                 # REPLAYSCOPE_RAW_RETENTION: raw step events ("forever": keep)
    second_retention: str = "7d"               # REPLAYSCOPE_SECOND_RETENTION: 1-second rollups
    prune_every_s: float = 3600.0              # REPLAYSCOPE_PRUNE_EVERY_S: the retention service's period

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides) -> "Settings":
        """The environment over the defaults, then ``overrides`` (those not None) over both."""
        env = os.environ if environ is None else environ
        values: dict = {}
        for f in fields(cls):
            if f.name == "token":        # the runner's commands read it too: one lookup (and check) for both
                values["token"] = environment.token(overrides.pop("token", None), environ=env)
                continue
            raw = env.get(f"REPLAYSCOPE_{f.name.upper()}")
            if raw is None or raw == "":
                continue
            values[f.name] = _convert(f.name, f.type, raw)
        settings = replace(cls(), **values)
        given = {k: v for k, v in overrides.items() if v is not None}
        settings = replace(settings, **given)
        if settings.log_level not in LOG_LEVELS:
            raise ReplayscopeError(f"log level {settings.log_level!r}: choose one of {', '.join(LOG_LEVELS)}")
        if settings.forwarded_allow_ips is not None:
            settings = replace(settings, forwarded_allow_ips=trusted_proxies(settings.forwarded_allow_ips))
        _check_bounds(settings, flags=set(given))
        return settings

    @property
    def proxy_headers(self) -> bool:
        """Whether uvicorn reads X-Forwarded-For/-Proto at all: only from proxies named in
        ``forwarded_allow_ips`` (off by default: a client could name any address in it, and
        the token throttle would give each forged one a fresh allowance)."""
        return bool(self.forwarded_allow_ips)


def trusted_proxies(raw: str) -> str:
    """``--forwarded-allow-ips``: comma-separated addresses or networks (``10.0.0.0/8``), or
    ``*`` (every peer is a trusted proxy: only behind a proxy that every request passes);
    returned normalised, or a one-line error."""
    items = [item.strip() for item in raw.split(",") if item.strip()]
    if not items:
        raise ReplayscopeError(f"forwarded-allow-ips {raw!r}: name the proxies' addresses or networks, "
                               f"comma-separated (e.g. 10.0.0.5,10.1.0.0/16)")
    for item in items:
        if item == "*":
            continue
        try:
            ipaddress.ip_network(item, strict=False)
        except ValueError:
            raise ReplayscopeError(f"forwarded-allow-ips {item!r} is not an IP address or network "
                                   f"(e.g. 10.0.0.5 or 10.1.0.0/16, or * for every peer)") from None
    return ",".join(items)


def resolve(args: Any = None, environ: Mapping[str, str] | None = None, **overrides) -> Settings:
    """Flags (``args`` attributes named like a field, when not None) > environment > defaults;
    ``overrides`` are what a command fixes itself (e.g. the demo's host)."""
    flags = {f.name: getattr(args, f.name) for f in fields(Settings) if getattr(args, f.name, None) is not None}
    return Settings.from_env(environ, **{**flags, **overrides})


def parse_retention(text: str, what: str = "retention") -> float | None:
    """Seconds from ``14d``, ``36h``, ``90m``, ``3600s``, ``2w`` (a bare number is days), at
    most ten years; None for ``forever`` (or ``0``, ``off``, ``never``): keep everything."""
    if text.strip().lower() in FOREVER:
        return None
    match = _AGE.match(text)
    if match is None or float(match.group(1)) <= 0:
        raise ReplayscopeError(f"{what} {text!r}: expected a duration like 14d, 36h, 90m, 3600s, 2w "
                               f"(a bare number is days), or 'forever'")
    seconds = float(match.group(1)) * _UNIT_S[match.group(2)]
    if seconds > MAX_RETENTION_S:
        raise ReplayscopeError(f"{what} {text!r}: at most {MAX_RETENTION_S // DAY_S}d (ten years); "
                               f"'forever' keeps everything")
    return seconds


def source_of(name: str, flags: set[str] = frozenset()) -> str:
    """Where a setting came from, as the user wrote it: ``--raw-retention`` or ``REPLAYSCOPE_RAW_RETENTION``."""
    return f"--{name.replace('_', '-')}" if name in flags else f"REPLAYSCOPE_{name.upper()}"


def _check_bounds(settings: Settings, flags: set[str]) -> None:
    """Every number within ``BOUNDS`` and every retention a duration within its ceiling;
    the error names the flag or variable it came from."""
    for name, (low, high) in BOUNDS.items():
        value = getattr(settings, name)
        if not (isinstance(value, (int, float)) and math.isfinite(value) and low <= value <= high):
            raise ReplayscopeError(f"{source_of(name, flags)}={value!r}: expected a number from {low:g} to {high:g}")
    for name in RETENTIONS:
        parse_retention(getattr(settings, name), source_of(name, flags))


def _convert(name: str, type_: str, raw: str):
    try:
        if type_ == "int":
            value = int(raw)
            if value <= 0:
                raise ValueError
            return value
        if type_ == "float":
            value = float(raw)
            if not value > 0:
                raise ValueError
            return value
        if type_ == "bool":
            return raw.strip().lower() in ("1", "true", "yes", "on")
    except ValueError:
        raise ReplayscopeError(f"REPLAYSCOPE_{name.upper()}={raw!r}: expected a positive {type_}") from None
    if name == "log_level":
        return raw.strip().lower()
    return raw
