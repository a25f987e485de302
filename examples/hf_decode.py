"""Wrap a Hugging Face ``transformers`` causal LM in replayscope's graph runner.

    python examples/hf_decode.py --target events.jsonl           # or --target http://127.0.0.1:8300

A random-weight Llama built from a config (nothing is downloaded) decodes batches of
prompts greedily. Each decode step goes through ``GraphRunner.step``: captured sizes
replay their CUDA graph, other sizes pad up to the next captured one, and batches
above the largest size run eager with reason ``batch_too_large``; prefills run eager
with reason ``prefill``. Every step, capture and phase lands in the collector (or the
file), so the run shows up on the dashboard like the built-in workload.

Hugging Face's ``StaticCache`` fixes its batch size at first use, so each captured size
gets its own cache, and a batch is padded to its graph size for the whole generation.
"""

from __future__ import annotations

import argparse
import inspect
import time

import torch
from transformers import LlamaConfig, LlamaForCausalLM, StaticCache

from replayscope import BatchShape, CapturePlan, GraphRunner, StaticInput, open_emitter


def build_model(device: str, seed: int = 0) -> LlamaForCausalLM:
    config = LlamaConfig(hidden_size=256, intermediate_size=688, num_hidden_layers=4, num_attention_heads=8,
                         num_key_value_heads=4, vocab_size=1024, max_position_embeddings=512)
    torch.manual_seed(seed)
    dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
    return LlamaForCausalLM(config).to(device=device, dtype=dtype).eval()


class HFGraphDecoder:
    """Greedy generation for a batch of equal-length prompts, decode steps through the runner."""

    def __init__(self, model: LlamaForCausalLM, sizes: tuple[int, ...], max_len: int, *, backend: str,
                 device: str, emitter=None):
        self.model, self.max_len, self.device = model, max_len, device
        self.caches: dict[int, StaticCache] = {}
        forward_params = inspect.signature(model.forward).parameters
        self.cache_kw = "cache" if "cache" in forward_params else "past_key_values"
        inputs = [StaticInput("input_ids", (1,), torch.long), StaticInput("cache_position", (1,), torch.long)]
        self.runner = GraphRunner(self.step, inputs, CapturePlan(sizes), backend=backend, device=device,
                                  emitter=emitter, progress=False)

    def cache_for(self, batch_size: int) -> StaticCache:
        if batch_size not in self.caches:
            self.caches[batch_size] = StaticCache(config=self.model.config, max_cache_len=self.max_len)
        return self.caches[batch_size]

    def step(self, input_ids: torch.Tensor, cache_position: torch.Tensor) -> torch.Tensor:
        """One forward of the HF model; the batch size picks the cache. Returns last-token logits."""
        cache = self.cache_for(input_ids.shape[0])
        out = self.model(input_ids=input_ids, cache_position=cache_position[0], use_cache=True,
                         **{self.cache_kw: cache})
        return out.logits[:, -1].float()

    @torch.inference_mode()
    def capture(self):
        return self.runner.capture()

    @torch.inference_mode()
    def generate(self, prompts: torch.Tensor, new_tokens: int) -> torch.Tensor:
        rows, prompt_len = prompts.shape
        decision = self.runner.decide(BatchShape("decode", rows))
        width = decision.graph_bs or rows            # rows the cache holds for this generation
        cache = self.cache_for(width)
        cache.reset()
        padded = torch.zeros(width, prompt_len, dtype=torch.long, device=self.device)
        padded[:rows] = prompts
        positions = torch.arange(prompt_len, device=self.device).expand(width, prompt_len)
        logits = self.runner.step({"input_ids": padded, "cache_position": positions}, stage="prefill",
                                  num_tokens=rows * prompt_len)[:rows]
        generated = [logits.argmax(-1)]
        for t in range(1, new_tokens):
            position = torch.full((rows, 1), prompt_len + t - 1, dtype=torch.long, device=self.device)
            logits = self.runner.step({"input_ids": generated[-1][:, None], "cache_position": position})
            generated.append(logits.argmax(-1))
        return torch.stack(generated, dim=1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="HF transformers decode through replayscope's graph runner")
    parser.add_argument("--target", default="hf-decode.jsonl", help="collector URL or JSON-lines file")
    parser.add_argument("--backend", default="auto", help="auto, cuda, static, disabled")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--batches", default="1,3,4,6,8,2,12,5", help="batch sizes to generate for")
    parser.add_argument("--new-tokens", type=int, default=16)
    options = parser.parse_args(argv)

    started = time.perf_counter()
    model = build_model(options.device)
    emitter = open_emitter(options.target, name="hf-llama-example", model="LlamaForCausalLM (random, 4x256)",
                           backend=options.backend, device=options.device, torch_version=torch.__version__,
                           config={"capture_sizes": [1, 2, 4, 8], "example": "examples/hf_decode.py"})
    emitter.emit("phase", phase="load_weights", duration_s=time.perf_counter() - started)
    decoder = HFGraphDecoder(model, (1, 2, 4, 8), max_len=128, backend=options.backend,
                             device=options.device, emitter=emitter)
    decoder.capture()
    generator = torch.Generator().manual_seed(0)
    for rows in (int(b) for b in options.batches.split(",")):
        prompts = torch.randint(1, 1024, (rows, 12), generator=generator).to(options.device)
        decoder.generate(prompts, options.new_tokens)
    emitter.close("finished")
    print(f"run {emitter.run_id}: {emitter.written} events to {options.target}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
