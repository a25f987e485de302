"""A decode loop that captures torch.cuda.CUDAGraph per batch size itself and pads each batch
up to the next captured size, as the engines do; batches above the largest size run eager.
It knows nothing of replayscope. Its steady state runs under
torch.cuda.set_sync_debug_mode("error"): any device synchronisation raises. It writes what it
did at each step (raw batch, mode, graph size) as JSON to the file named on the command line.

    python padded_decode.py RECORD.json
"""

import json
import sys

import torch

SIZES = (1, 2, 4, 8)
BATCHES = [1, 3, 8, 5, 2, 12, 4, 7, 1, 16, 6, 8] * 3
VOCAB, WIDTH = 1024, 256


class TinyDecoder(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(VOCAB, WIDTH)
        self.layers = torch.nn.ModuleList(torch.nn.Linear(WIDTH, WIDTH) for _ in range(2))
        self.head = torch.nn.Linear(WIDTH, VOCAB)

    def forward(self, tokens):
        hidden = self.embed(tokens)
        for layer in self.layers:
            hidden = hidden + torch.nn.functional.gelu(layer(hidden))
        return self.head(hidden).argmax(-1)


def capture_graphs(model, static_tokens):
    """One graph per size, largest first, into one shared pool (warm-up on a side stream)."""
    pool = torch.cuda.graph_pool_handle()
    graphs, outputs = {}, {}
    for bs in sorted(SIZES, reverse=True):
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):
                model(static_tokens[:bs])
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=pool):
            outputs[bs] = model(static_tokens[:bs])
        graphs[bs] = graph
    return graphs, outputs


class Decoder:
    def __init__(self):
        torch.manual_seed(0)
        self.model = TinyDecoder().cuda().eval()
        self.static = torch.zeros(max(SIZES), dtype=torch.long, device="cuda")
        self.graphs, self.outputs = capture_graphs(self.model, self.static)
        self.record = []

    def decode_step(self, tokens):
        bs = tokens.shape[0]
        size = next((s for s in SIZES if s >= bs), None)
        if size is None:
            self.record.append({"raw_bs": bs, "mode": "eager", "graph_bs": None})
            return self.model(tokens)
        self.static[:bs].copy_(tokens)
        if size > bs:
            self.static[bs:size].zero_()            # pad rows
        self.graphs[size].replay()
        self.record.append({"raw_bs": bs, "mode": "graph" if size == bs else "padded", "graph_bs": size})
        return self.outputs[size][:bs]


def main(record_path):
    with torch.inference_mode():
        decoder = Decoder()
        batches = [torch.randint(0, VOCAB, (bs,), device="cuda") for bs in BATCHES]
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("error")
        for tokens in batches:
            decoder.decode_step(tokens)
        torch.cuda.set_sync_debug_mode(0)
        torch.cuda.synchronize()
    with open(record_path, "w") as f:
        json.dump(decoder.record, f)


if __name__ == "__main__":
    main(sys.argv[1])
