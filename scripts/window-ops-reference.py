#!/usr/bin/env python3
"""PyTorch's values for tc's convolution and pooling cases.

Writes tests/fixtures/window_ops_reference.json: for each case the input,
the weights (for a convolution), PyTorch's attributes and its output, all
f32. tests/window_ops_reference.rs runs the same cases through tc's
interpreter and JIT and compares. Deterministic (fixed seed, CPU, f64
reference rounded to f32). Runs in the pinned PyTorch environment under
target/ that scripts/py-torch-env.sh makes (nothing is installed
system-wide):

    "$(scripts/py-torch-env.sh)" scripts/window-ops-reference.py
"""
import json
import os
import sys

import torch
import torch.nn.functional as F

torch.manual_seed(0)

CASES = [
    # name, kind, input shape, weight shape (conv) or kernel (pool), stride, padding, dilation, groups
    ("resnet_stem_like", "conv2d", [2, 3, 9, 8], [4, 3, 3, 3], [2, 2], [1, 1], [1, 1], 1),
    ("dilated_asymmetric", "conv2d", [1, 2, 12, 9], [2, 2, 3, 2], [1, 2], [2, 0], [2, 3], 1),
    ("grouped", "conv2d", [2, 4, 6, 7], [6, 2, 3, 3], [1, 1], [1, 1], [1, 1], 2),
    ("depthwise", "conv2d", [1, 4, 5, 5], [4, 1, 3, 3], [2, 1], [1, 2], [1, 1], 4),
    ("padding_beyond_input", "conv2d", [1, 2, 2, 2], [3, 2, 3, 3], [1, 1], [3, 2], [1, 1], 1),
    ("stride_beyond_kernel", "conv2d", [1, 2, 11, 10], [3, 2, 2, 2], [3, 4], [0, 0], [1, 1], 1),
    ("wav2vec2_feature_conv", "conv1d", [2, 1, 53], [4, 1, 10], [5], [0], [1], 1),
    ("whisper_conv1_like", "conv1d", [1, 3, 16], [5, 3, 3], [1], [1], [1], 1),
    ("dilated_grouped_1d", "conv1d", [1, 6, 17], [3, 2, 3], [2], [4], [3], 3),
    ("resnet_maxpool", "max_pool2d", [2, 3, 9, 8], [3, 3], [2, 2], [1, 1], [1, 1], 1),
    ("maxpool_stride_beyond", "max_pool2d", [1, 2, 10, 11], [2, 2], [3, 4], [0, 1], [1, 1], 1),
    ("avgpool_include_pad", "avg_pool2d", [1, 2, 7, 6], [3, 3], [2, 2], [1, 1], [1, 1], 1),
    ("avgpool_1d", "avg_pool1d", [2, 3, 9], [3], [2], [1], [1], 1),
    ("maxpool_1d", "max_pool1d", [2, 3, 9], [2], [2], [0], [1], 1),
]


def run(kind, x, w, k, s, p, d, g):
    if kind == "conv2d":
        return F.conv2d(x, w, stride=s, padding=p, dilation=d, groups=g)
    if kind == "conv1d":
        return F.conv1d(x, w, stride=s, padding=p, dilation=d, groups=g)
    if kind == "max_pool2d":
        return F.max_pool2d(x, k, stride=s, padding=p)
    if kind == "max_pool1d":
        return F.max_pool1d(x, k, stride=s, padding=p)
    if kind == "avg_pool2d":
        return F.avg_pool2d(x, k, stride=s, padding=p, count_include_pad=True)
    if kind == "avg_pool1d":
        return F.avg_pool1d(x, k, stride=s, padding=p, count_include_pad=True)
    raise ValueError(kind)


def main():
    out = []
    for name, kind, xs, ws, s, p, d, g in CASES:
        x = (torch.rand(xs, dtype=torch.float64) * 8 - 4).float()
        conv = kind.startswith("conv")
        w = (torch.rand(ws, dtype=torch.float64) * 2 - 1).float() if conv else None
        y = run(kind, x.double(), w.double() if conv else None, ws, s, p, d, g).float()
        out.append({
            "name": name,
            "kind": kind,
            "x_shape": xs,
            "x": x.flatten().tolist(),
            "w_shape": ws if conv else None,
            "w": w.flatten().tolist() if conv else None,
            "kernel": None if conv else ws,
            "stride": s,
            "padding": p,
            "dilation": d,
            "groups": g,
            "y_shape": list(y.shape),
            "y": y.flatten().tolist(),
        })
    here = os.path.dirname(os.path.abspath(__file__))
    path = os.path.join(here, "..", "tests", "fixtures", "window_ops_reference.json")
    with open(path, "w") as f:
        json.dump({"torch": torch.__version__, "cases": out}, f)
    print(f"wrote {len(out)} cases to {os.path.normpath(path)}", file=sys.stderr)


if __name__ == "__main__":
    main()
