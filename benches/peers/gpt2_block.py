#!/usr/bin/env python3
"""PyTorch and ONNX Runtime sides of the GPT-2-small block rows of the peer
benchmark (scripts/peer-bench.sh): transformers' GPT2Block with block 0 of
models/gpt2-seed0, `activation_function="gelu"` (erf GELU, as tc's `gelu`),
causal self-attention, on the inputs of examples/peer_bench.rs
(benches/peers/workloads.rs `gpt2_input`). One JSON line per workload: the
median ms over REPS calls after three warm-up calls, and the first four
output values of the first and of the last token.

    python3 benches/peers/gpt2_block.py export MODEL_DIR OUT.onnx
    python3 benches/peers/gpt2_block.py torch MODEL_DIR THREADS REPS
    python3 benches/peers/gpt2_block.py ort MODEL.onnx THREADS REPS [SYSTEM]

(SYSTEM names the ONNX Runtime column: default "ort", "ort-fused" for the
transformer optimizer's export, benches/peers/ort_fuse.py.)
"""
import json
import sys
import time

import numpy as np

WORKLOADS = [(1, 32), (1, 128), (8, 128)]
D = 768


def block_input(b, s):
    i = np.arange(b * s * D, dtype=np.int64)
    return (((i * 7919) % 2001 - 1000) / 1000.0).astype(np.float32).reshape(b, s, D)


def torch_block(model_dir):
    """GPT2Block 0 with the file's weights, in eval mode."""
    import torch
    from safetensors.torch import load_file
    from transformers import GPT2Config
    from transformers.models.gpt2.modeling_gpt2 import GPT2Block

    # SDPA with `is_causal` (no mask tensor): the causal block a user would
    # run; a standalone GPT2Block without it attends to every position.
    cfg = GPT2Config(activation_function="gelu", attn_implementation="sdpa")
    blk = GPT2Block(cfg, layer_idx=0).eval()
    state = {k[len("h.0."):]: v for k, v in load_file(f"{model_dir}/model.safetensors").items()
             if k.startswith("h.0.")}
    missing, unexpected = blk.load_state_dict(state, strict=False)
    # Only non-persistent buffers (the causal-mask table, where a version
    # has one) may be missing; every weight must come from the file.
    assert not unexpected and all(k.endswith("attn.bias") or "masked_bias" in k for k in missing), \
        (missing, unexpected)

    class Out(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.blk = blk

        def forward(self, x):
            y = self.blk(x)
            return y[0] if isinstance(y, tuple) else y

    return Out().eval()


def report(system, threads, run):
    for b, s in WORKLOADS:
        x = block_input(b, s)
        for _ in range(3):
            out = run(x)
        times = []
        for _ in range(REPS):
            t0 = time.perf_counter()
            out = run(x)
            times.append((time.perf_counter() - t0) * 1e3)
        values = list(out[0, 0, :4]) + list(out[-1, -1, :4])
        print(json.dumps({"system": system, "model": "gpt2-block", "threads": threads, "b": b,
                          "s": s, "ms": float(np.median(times)),
                          "emb": [float(v) for v in values]}))


def main():
    global REPS
    mode = sys.argv[1]
    if mode == "export":
        import torch
        blk = torch_block(sys.argv[2])
        with torch.inference_mode():
            torch.onnx.export(blk, (torch.from_numpy(block_input(1, 8)),), sys.argv[3],
                              input_names=["x"], output_names=["y"], dynamo=False,
                              dynamic_axes={"x": {0: "b", 1: "s"}, "y": {0: "b", 1: "s"}})
        return
    threads, REPS = int(sys.argv[3]), int(sys.argv[4])
    if mode == "torch":
        import torch
        torch.set_num_threads(threads)
        blk = torch_block(sys.argv[2])
        with torch.inference_mode():
            report("pytorch", threads, lambda x: blk(torch.from_numpy(x)).numpy())
    elif mode == "ort":
        import onnxruntime as ort
        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        sess = ort.InferenceSession(sys.argv[2], so, providers=["CPUExecutionProvider"])
        system = sys.argv[5] if len(sys.argv) > 5 else "ort"
        report(system, threads, lambda x: sess.run(None, {"x": x})[0])
    else:
        sys.exit(f"unknown mode {mode}")


main()
