"""Engine importers: vLLM and SGLang server logs (whole files and growing ones), and their
Prometheus endpoints.

``import_log(engine, path)`` reads a log file into an ``ImportResult``: the runs found
(a restart in the same file starts a new one), each a wire run record plus its events,
checked against ``runner.wire``. ``parse_vllm_text`` / ``parse_sglang_text`` do the
same for text in memory. None of them raises on the content of a log; a path that is
not a readable text file raises ``ReplayscopeError``. ``follow`` (``collector.importers.follow``)
feeds the same parsers line by line.
"""

from __future__ import annotations

from collector.importers.common import RANK_POLICY, ImportedRun, ImportResult, read_log_file
from collector.importers.sglang_log import ENGINE as SGLANG
from collector.importers.sglang_log import parse_text as parse_sglang_text
from collector.importers.vllm_log import ENGINE as VLLM
from collector.importers.vllm_log import parse_text as parse_vllm_text

ENGINES = {"vllm": parse_vllm_text, "sglang": parse_sglang_text}
ENGINE_SPECS = {"vllm": VLLM, "sglang": SGLANG}


def import_log(engine: str, path: str) -> ImportResult:
    """Parse the log at ``path`` written by ``engine`` (``vllm`` or ``sglang``)."""
    text, mtime, digest = read_log_file(path)
    return ENGINES[engine](text, path=path, mtime=mtime, digest=digest)


__all__ = ["ENGINES", "ENGINE_SPECS", "RANK_POLICY", "ImportResult", "ImportedRun", "import_log",
           "parse_sglang_text", "parse_vllm_text"]
