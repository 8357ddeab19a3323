#!/usr/bin/env python3
"""ONNX Runtime side of the peer benchmark (scripts/peer-bench.sh): the
workloads of examples/peer_bench.rs, same token ids, one JSON line each.

    python3 benches/peers/ort_bench.py MODEL.onnx THREADS REPS [SYSTEM]

REPS = 0 runs one call of the first workload (a cold start, timed from
outside by scripts/peer-bench.sh).

SYSTEM names the column (default "ort", the hand-built graph of
minilm_onnx.py; the script runs the standard export as "ort-std", its
transformer-optimized form as "ort-std-opt" and the int8 model as
"ort-int8", all made by minilm_export.py). The inputs fed are those the
model names.
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


def feeds(sess, b, s):
    """The inputs the model names: the hand-built graph's (input_ids,
    float attention_mask, position_ids) or a standard export's
    (input_ids, int64 attention_mask, token_type_ids)."""
    x = ids(b, s)
    have = {i.name: i.type for i in sess.get_inputs()}
    feed = {"input_ids": x}
    if "attention_mask" in have:
        dt = np.float32 if have["attention_mask"] == "tensor(float)" else np.int64
        feed["attention_mask"] = np.ones((b, s), dtype=dt)
    if "position_ids" in have:
        feed["position_ids"] = np.arange(s, dtype=np.int64)
    if "token_type_ids" in have:
        feed["token_type_ids"] = np.zeros((b, s), dtype=np.int64)
    return feed


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
        feed = feeds(sess, b, s)
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


if __name__ == "__main__":
    main()
