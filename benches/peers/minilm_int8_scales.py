#!/usr/bin/env python3
"""Which int8 scale layouts keep all-MiniLM-L6-v2 within the accuracy bound
tc's int8 model is held to (#47: every embedding of the 240-sentence corpus
at cosine >= 0.999 to fp32), simulated in PyTorch on the same weights.

    target/py-torch/bin/python benches/peers/minilm_int8_scales.py [MODEL_DIR]

Every encoder Linear's weight and input are rounded to symmetric int8
(scale = max|x| / 127, round to nearest even, as Q8_0 and tc's fast
numerics do) and multiplied in f32; attention, GELU and LayerNorm stay
f32. Layouts:
- per-channel weights, per-row activations: one scale per output channel
  and one per token over all of k (ONNX Runtime's per-channel dynamic
  quantization has one activation scale per tensor, coarser still);
- per-channel weights, activations per 32-block;
- Q8_0 both (tc's `Precision::Int8`): weights and activations per
  32-block.
A scale per channel or per row is what lets an int8 product accumulate
over all of k in integers and scale each output once; per-block scales
need a scaling per block. Prints each layout's min and mean cosine over
tests/fixtures/minilm_corpus.txt, embedded in batches of 16.
"""
import copy
import sys

import torch
from transformers import AutoModel, AutoTokenizer


def symmetric(x, block=None):
    """x rounded to int8 steps along its last axis: one scale per row, or
    per `block` elements."""
    shape = x.shape
    xb = x if block is None else x.reshape(*shape[:-1], shape[-1] // block, block)
    s = xb.abs().amax(-1, keepdim=True) / 127
    s = torch.where(s == 0, torch.ones_like(s), s)
    return (torch.round(xb / s).clamp(-127, 127) * s).reshape(shape)


def main():
    model_dir = sys.argv[1] if len(sys.argv) > 1 else "models/all-MiniLM-L6-v2"
    torch.set_num_threads(2)
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModel.from_pretrained(model_dir).eval()
    sentences = open("tests/fixtures/minilm_corpus.txt").read().splitlines()

    def embed(m):
        out = []
        for i in range(0, len(sentences), 16):
            b = tok(sentences[i : i + 16], padding=True, return_tensors="pt")
            with torch.no_grad():
                h = m(**b).last_hidden_state
            mask = b["attention_mask"].unsqueeze(-1).float()
            e = (h * mask).sum(1) / mask.sum(1)
            out.append(torch.nn.functional.normalize(e, dim=-1))
        return torch.cat(out)

    reference = embed(model)
    layouts = [
        ("per-channel weights, per-row activations", None, None),
        ("per-channel weights, 32-block activations", None, 32),
        ("Q8_0 weights and activations (tc)", 32, 32),
    ]
    print(f"{len(sentences)} sentences; cosine to fp32, min / mean")
    for name, wblock, ablock in layouts:
        m = copy.deepcopy(model)
        for mod in m.encoder.modules():
            if isinstance(mod, torch.nn.Linear):
                mod.weight.data = symmetric(mod.weight.data, wblock)
                forward = mod.forward
                mod.forward = lambda x, f=forward, b=ablock: f(symmetric(x, b))
        c = (embed(m) * reference).sum(-1)
        print(f"{name}: {c.min().item():.5f} / {c.mean().item():.5f}")


if __name__ == "__main__":
    main()
