"""How the dashboard writes numbers: ``replayscope.contract.formats``, the one formatter the collector's
sentences and the runner use too (kept under this name for the pages)."""

from replayscope.contract.formats import (NOT_IN_THE_LOG, NOT_MEASURED, byte_unit, count, inert, number, pct,
                                          plural, rate, seconds, signed_seconds, size, unknown, when)

__all__ = ["NOT_IN_THE_LOG", "NOT_MEASURED", "byte_unit", "count", "inert", "number", "pct", "plural", "rate",
           "seconds", "signed_seconds", "size", "unknown", "when"]
