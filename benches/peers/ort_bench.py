#!/usr/bin/env python3
"""ONNX Runtime side of the peer benchmark (scripts/peer-bench.sh): the
workloads of examples/peer_bench.rs, same token ids, one JSON line each.

    python3 benches/peers/ort_bench.py MODEL.onnx THREADS REPS [SYSTEM]

REPS = 0 runs one call of the first workload (a cold start, timed from
outside by scripts/peer-bench.sh).

SYSTEM names the column (default "ort"; the script runs the optimizer's
fused export as "ort-fused").
"""
import json
import sys
import time

import numpy as np
import onnxruntime as ort

WORKLOADS = [(1, 10), (32, 16), (8, 128)]


def ids(b, s):
    """The token ids both systems embed: [CLS] … [SEP], the rest a fixed
    pseudo-random spread over the vocabulary."""
    x = np.empty((b, s), dtype=np.int64)
    for i in range(b):
        for j in range(s):
            x[i, j] = 101 if j == 0 else 102 if j == s - 1 else 1000 + (i * 7919 + j * 104729) % 28000
    return x


def main():
    path, threads, reps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    system = sys.argv[4] if len(sys.argv) > 4 else "ort"
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    # REPS = 0: a cold start (scripts/peer-bench.sh times the process):
    # one call of the first workload.
    for b, s in WORKLOADS if reps > 0 else WORKLOADS[:1]:
        feed = {
            "input_ids": ids(b, s),
            "attention_mask": np.ones((b, s), dtype=np.float32),
            "position_ids": np.arange(s, dtype=np.int64),
        }
        t0 = time.perf_counter()
        out = sess.run(None, feed)[0]
        times = [(time.perf_counter() - t0) * 1e3]
        if reps > 0:
            times = []
            for _ in range(2):
                out = sess.run(None, feed)[0]
        for _ in range(reps):
            t0 = time.perf_counter()
            out = sess.run(None, feed)[0]
            times.append((time.perf_counter() - t0) * 1e3)
        print(json.dumps({"system": system, "threads": threads, "b": b, "s": s,
                          "ms": float(np.median(times)), "emb": [float(v) for v in out[0, :4]]}))


main()
