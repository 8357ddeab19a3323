#!/usr/bin/env python3
"""The transformers reference for tc's GPT-2 decoder test (tests/gpt2_decode.rs).

No GPT-2 checkpoint is reachable from this project's machines, and the test
must not need PyTorch, so the weights are made by tc's own seeded generator
(examples/gpt2_weights.rs: transformers' GPT-2 initialisation scheme, drawn
from a SplitMix64 stream; the same bytes on every machine). This script
loads that file into transformers' GPT2LMHeadModel(GPT2Config()) and writes
what transformers computes from it to tests/fixtures/gpt2_reference.json:
the first 64 logits and the argmax of the prompt's last position, and 32
greedy tokens. It also records the weights' fingerprint (the one the
generator reports), so the test can tell "the generator changed, remake
this fixture" apart from "tc computes something else".

Maintainer-only; it runs in the pinned PyTorch environment under target/:

    "$(scripts/py-torch-env.sh)" scripts/gpt2-reference.py [MODEL.safetensors]

Without an argument it first runs
`cargo run --release --example gpt2_weights -- target/gpt2-reference`.
"""
import json
import os
import subprocess
import sys

import numpy as np
import safetensors.numpy
import torch
import transformers
from safetensors.torch import load_file
from transformers import GPT2Config, GPT2LMHeadModel

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROMPT = [464, 2068, 7586, 21831, 18045, 625, 262, 16931]
STEPS = 32
SEED = 0
MASK = (1 << 64) - 1


def fingerprint(path):
    """examples/gpt2_weights.rs's fingerprint: over the tensors in name
    order, h = h * 0x100000001b3 + sum_i bits_i * (2i + 1), wrapping u64."""
    h = 0
    for name, a in sorted(safetensors.numpy.load_file(path).items()):
        bits = np.ascontiguousarray(a, dtype=np.float32).reshape(-1).view(np.uint32).astype(np.uint64)
        odd = np.arange(bits.size, dtype=np.uint64) * np.uint64(2) + np.uint64(1)
        s = int(np.sum(bits * odd, dtype=np.uint64))  # uint64 arithmetic wraps
        h = (h * 0x100000001B3 + s) & MASK
    return h


def main():
    if len(sys.argv) > 1:
        path = sys.argv[1]
    else:
        out = os.path.join(ROOT, "target", "gpt2-reference")
        subprocess.run(["cargo", "run", "--release", "--example", "gpt2_weights", "--", out,
                        "--seed", str(SEED)], cwd=ROOT, check=True)
        path = os.path.join(out, "model.safetensors")
    torch.manual_seed(0)  # only the throwaway init below; every weight is then loaded
    model = GPT2LMHeadModel(GPT2Config(attn_implementation="eager")).eval()
    missing, unexpected = model.transformer.load_state_dict(load_file(path), strict=False)
    # Older transformers keep the causal mask as a `attn.bias` buffer; no
    # parameter may be left at its random init.
    params = {k for k, _ in model.transformer.named_parameters()}
    assert not unexpected and not (set(missing) & params), (missing, unexpected)
    assert model.lm_head.weight.data_ptr() == model.transformer.wte.weight.data_ptr(), "LM head not tied"
    with torch.no_grad():
        ids = torch.tensor([PROMPT])
        logits = model(ids).logits[0, -1]
        greedy = model.generate(ids, max_new_tokens=STEPS, do_sample=False,
                                attention_mask=torch.ones_like(ids), pad_token_id=0)[0, len(PROMPT):]
        # How close each greedy choice was (top-1 minus top-2 logit, from
        # one pass over the whole sequence): a margin near tc's 1e-3
        # tolerance would make the token comparison fragile.
        full = model(torch.cat([ids[0], greedy])[None]).logits[0, len(PROMPT) - 1:-1]
        top2 = full.topk(2, dim=-1).values
        margins = top2[:, 0] - top2[:, 1]
        assert torch.equal(full.argmax(-1), greedy), "generate() disagrees with a full pass"
    ref = {
        "model": "GPT2LMHeadModel(GPT2Config()), eager attention, float32 on the CPU",
        "weights": {
            "generator": "examples/gpt2_weights.rs",
            "seed": SEED,
            "fingerprint": f"{fingerprint(path):016x}",
        },
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "prompt": PROMPT,
        "first_logits": [float(x) for x in logits[:64]],
        "argmax": int(logits.argmax()),
        "max_logit": float(logits.max()),
        "greedy": [int(t) for t in greedy],
        "min_greedy_margin": float(margins.min()),
    }
    with open(os.path.join(ROOT, "tests", "fixtures", "gpt2_reference.json"), "w") as f:
        json.dump(ref, f, indent=1)
        f.write("\n")
    print(json.dumps({k: ref[k] for k in ("weights", "argmax", "max_logit", "greedy", "min_greedy_margin")}))


main()
