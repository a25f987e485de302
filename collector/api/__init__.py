"""The collector's HTTP API: ``create_api(store, settings) -> FastAPI``, the one entry.

``app`` (the factory, mounting one router per resource from one list), ``ingest``,
``runs``, ``fleet``, ``alerts``, ``ops`` (the routers), ``deps`` (the store and friends as
FastAPI dependencies), ``guards`` (host, body size, origin and content type, the token),
``body`` (a write's body checked before any parser runs, then parsed), ``errors``
(one error body for every 4xx and 5xx).
"""

from replayscope.collector.api.app import create_api

__all__ = ["create_api"]
