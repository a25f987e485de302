"""A CPU decode loop that knows nothing of replayscope, for the picture test's traced run:
``decode_step`` runs 80 steps at batch sizes that rise and fall as requests come and go."""

import torch

torch.set_num_threads(1)
torch.manual_seed(0)
WEIGHT = torch.randn(64, 64)
BATCH_SIZES = [1, 2, 3, 4, 6, 8, 8, 7, 5, 12, 16, 16, 14, 9, 4, 2] * 5


def decode_step(hidden):
    return torch.tanh(hidden @ WEIGHT)


if __name__ == "__main__":
    for bs in BATCH_SIZES:
        decode_step(torch.randn(bs, 64))
