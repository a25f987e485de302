"""SGLang 0.5.17 captures some sizes more than once: its decode runner records a graph with and
one without LoRA (``capture_one_shape(bs, forward, stream_idx, variant_label)``, positional, with
``variant_label`` "lora" / "nolora"), and its prefill runner a variant per chunked-prefix count
(``capture_one_shape(num_tokens, prefix_num_chunks=n)``). Each capture event names its variant,
so two captures of one size are not the same graph twice (read in the 0.5.17 wheel:
``runner/decode_cuda_graph_runner.py`` ``_capture_one_stream``, ``runner/prefill_cuda_graph_runner.py``)."""

from __future__ import annotations

import types

from replayscope.runner.trace import sglang_recipes
from tests.trace.conftest import kinds
from tests.trace.test_engine_recipes import install, new_sglang_layout, server_args


def variants(events):
    return [(c["graph_bs"], c["stage"], c["variant"].rsplit(", pool", 1)[0]) for c in kinds(events, "capture")]


def test_decode_lora_variants_and_streams_are_named_in_each_capture(traced):
    modules, _ModelRunner = new_sglang_layout(decode_sizes=(2, 1))
    decode = modules[1].DecodeCudaGraphRunner

    def capture_one_stream(self, stream_idx=None):          # as 0.5.17 calls it: positional
        for bs in reversed(self.capture_bs):
            for variant_label in ("lora", "nolora"):
                self.capture_one_shape(bs, None, 1, variant_label)

    decode._capture_one_stream = capture_one_stream
    for module in modules:
        install(traced, sglang_recipes, module)
    decode(types.SimpleNamespace(server_args=server_args()))
    assert variants(traced.finish()) == [(2, "decode", "sglang full, lora, stream 1"),
                                         (2, "decode", "sglang full, nolora, stream 1"),
                                         (1, "decode", "sglang full, lora, stream 1"),
                                         (1, "decode", "sglang full, nolora, stream 1")]


def test_prefill_chunked_prefix_variants_are_named_and_the_plain_capture_is_not(traced):
    modules, _ModelRunner = new_sglang_layout()
    prefill = modules[2].PrefillCudaGraphRunner
    original_init = prefill.__init__

    def init(self, model_runner):
        original_init(self, model_runner)                    # the plain captures: 128, then 64
        self.capture_one_shape(64, prefix_num_chunks=2)

    prefill.__init__ = init
    for module in modules:
        install(traced, sglang_recipes, module)
    prefill(types.SimpleNamespace(server_args=server_args()))
    assert variants(traced.finish()) == [(128, "prefill", "sglang tc_piecewise, 2 graphs"),
                                         (64, "prefill", "sglang tc_piecewise, 2 graphs"),
                                         (64, "prefill", "sglang tc_piecewise, prefix chunks 2, 2 graphs")]
