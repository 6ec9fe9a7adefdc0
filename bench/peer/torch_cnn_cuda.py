#!/usr/bin/env python3
"""torch_cnn_cuda.py: examples/cnn.yaml's CNN trained eagerly by PyTorch on a GPU.

A reference point for tolaria's `run_graph_bench --device cuda --preset cnn`:
the same layers (conv 1->32 3x3, batchnorm, ReLU, 2x2 max pool, conv 32->64,
batchnorm, ReLU, max pool, a residual block of two 64->64 convs with
batchnorm, ReLU, flatten, linear 128, ReLU, dropout 0.3, linear 10) in NCHW,
cross-entropy, global-norm clipping, AdamW, on one random batch kept on the
GPU (no data loading), cuDNN autotuning on. PyTorch's own initialisation.
Prints one JSON object: the mean milliseconds per step over 200 steps after
30 warm-up steps, at batch 64 and 256.

    python3 bench/peer/torch_cnn_cuda.py
"""

import json
import time

import torch
import torch.nn as nn


class Residual(nn.Module):
    def __init__(self, body):
        super().__init__()
        self.body = body

    def forward(self, x):
        return x + self.body(x)


def cnn():
    return nn.Sequential(
        nn.Conv2d(1, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
        Residual(nn.Sequential(nn.Conv2d(64, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(),
                               nn.Conv2d(64, 64, 3, padding=1), nn.BatchNorm2d(64))),
        nn.ReLU(), nn.Flatten(), nn.Linear(3136, 128), nn.ReLU(), nn.Dropout(0.3), nn.Linear(128, 10),
    ).cuda()


def main():
    torch.backends.cudnn.benchmark = True
    out = {"torch": torch.__version__, "device": torch.cuda.get_device_name()}
    for batch in (64, 256):
        model = cnn()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        x = torch.randn(batch, 1, 28, 28, device="cuda")
        y = torch.randint(0, 10, (batch,), device="cuda")

        def step():
            opt.zero_grad(set_to_none=False)
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()

        for _ in range(30):
            step()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(200):
            step()
        torch.cuda.synchronize()
        out[f"eager_b{batch}_ms"] = (time.perf_counter() - t0) / 200 * 1e3
    print(json.dumps(out))


if __name__ == "__main__":
    main()
