#!/usr/bin/env python3
"""PyTorch (eager, transformers' BertModel) side of the peer benchmark
(scripts/peer-bench.sh): same weights, workloads and token ids as
examples/peer_bench.rs, mean pooling and L2 norm as sentence-transformers.

    python3 benches/peers/torch_bench.py MODEL_DIR THREADS REPS
"""
import json
import sys
import time

import numpy as np
import torch
from transformers import BertModel

WORKLOADS = [(1, 10), (32, 16), (8, 128)]


def ids(b, s):
    x = np.empty((b, s), dtype=np.int64)
    for i in range(b):
        for j in range(s):
            x[i, j] = 101 if j == 0 else 102 if j == s - 1 else 1000 + (i * 7919 + j * 104729) % 28000
    return torch.from_numpy(x)


def main():
    path, threads, reps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    torch.set_num_threads(threads)
    model = BertModel.from_pretrained(path).eval()

    def embed(x, mask):
        h = model(input_ids=x, attention_mask=mask).last_hidden_state
        m = mask.unsqueeze(-1).to(h.dtype)
        pooled = (h * m).sum(1) / m.sum(1).clamp(min=1e-9)
        return torch.nn.functional.normalize(pooled, p=2, dim=1)

    with torch.inference_mode():
        # REPS = 0: a cold start (scripts/peer-bench.sh times the process):
        # one call of the first workload.
        for b, s in WORKLOADS if reps > 0 else WORKLOADS[:1]:
            x, mask = ids(b, s), torch.ones((b, s), dtype=torch.int64)
            t0 = time.perf_counter()
            out = embed(x, mask)
            times = [(time.perf_counter() - t0) * 1e3]
            if reps > 0:
                times = []
                for _ in range(2):
                    out = embed(x, mask)
            for _ in range(reps):
                t0 = time.perf_counter()
                out = embed(x, mask)
                times.append((time.perf_counter() - t0) * 1e3)
            print(json.dumps({"system": "pytorch", "threads": threads, "b": b, "s": s,
                              "ms": float(np.median(times)), "emb": [float(v) for v in out[0, :4]]}))


main()
