"""Engine importers: vLLM and SGLang server logs (whole files and growing ones), and their
Prometheus endpoints.

``import_log(engine, path)`` reads a log file into an ``ImportResult``: the runs found
(a restart in the same file starts a new one), each a wire run record plus its events,
checked against ``replayscope.contract.wire``. ``parse_vllm_text`` / ``parse_sglang_text`` do the
same for text in memory. None of them raises on the content of a log; a path that is
not a readable text file raises ``ReplayscopeError``. ``follow`` (``replayscope.collector.importers.follow``)
feeds the same parsers line by line.
"""

from __future__ import annotations

import importlib

# Loaded on first use: the parsers compile many patterns, and ``replayscope --help`` imports
# this package (for ``replayscope.app.cli.imports``) without needing them.
_EXPORTS = {
    "RANK_POLICY": ("replayscope.collector.importers.builder", "RANK_POLICY"),
    "ImportedRun": ("replayscope.collector.importers.parser", "ImportedRun"),
    "ImportResult": ("replayscope.collector.importers.parser", "ImportResult"),
    "parse_sglang_text": ("replayscope.collector.importers.sglang_log", "parse_text"),
    "parse_vllm_text": ("replayscope.collector.importers.vllm_log", "parse_text"),
}


def __getattr__(name: str):
    if name == "ENGINES":
        return {"vllm": __getattr__("parse_vllm_text"), "sglang": __getattr__("parse_sglang_text")}
    if name == "ENGINE_SPECS":
        return {engine: importlib.import_module(f"replayscope.collector.importers.{engine}_log").ENGINE
                for engine in ("vllm", "sglang")}
    if name not in _EXPORTS:
        raise AttributeError(f"module 'replayscope.collector.importers' has no attribute {name!r}")
    module, attribute = _EXPORTS[name]
    return getattr(importlib.import_module(module), attribute)


def import_log(engine: str, path: str, drain=None):
    """Parse the log at ``path`` written by ``engine`` (``vllm`` or ``sglang``) -> ``ImportResult``,
    streamed: the file is read a chunk at a time and each run's events go to ``drain`` as
    they are emitted (``parser.parse_lines``; without one they are counted and dropped, as
    ``--dry-run`` does), so memory stays bounded for any size of log. ReplayscopeError, before
    anything is parsed, for a path that is not a regular text file (``log_source``) and for a
    log that is plainly the other engine's (it says which)."""
    from replayscope.collector.importers.log_source import open_log_file
    from replayscope.collector.importers.parser import parse_lines

    log = open_log_file(path)
    refuse_other_engine(engine, log.head, path)
    return parse_lines(__getattr__("ENGINE_SPECS")[engine], log.lines(), ends_mid_line=lambda: log.ends_mid_line,
                       head=log.head, path=path, mtime=log.mtime, digest=log.digest,
                       drain=drain or (lambda run, name, events, final: None))


def refuse_other_engine(engine: str, text: str, path: str) -> None:
    """ReplayscopeError when ``text`` is plainly another engine's log than ``engine``'s."""
    from replayscope.collector.importers.parser import wrong_engine
    from replayscope.contract.errors import ReplayscopeError

    specs = __getattr__("ENGINE_SPECS")
    why = wrong_engine(specs[engine], [spec for name, spec in specs.items() if name != engine], text)
    if why:
        raise ReplayscopeError(f"{path}: {why}; nothing was written")


__all__ = ["ENGINES", "ENGINE_SPECS", "RANK_POLICY", "ImportResult", "ImportedRun", "import_log",
           "parse_sglang_text", "parse_vllm_text", "refuse_other_engine"]
