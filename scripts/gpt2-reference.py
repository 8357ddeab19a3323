#!/usr/bin/env python3
"""GPT-2-small weights and a reference for tc's decoder (issue #16).

No GPT-2 checkpoint is reachable from this project's machines, so the weights
are transformers' own initialisation of GPT2LMHeadModel(GPT2Config()) under
torch.manual_seed(0) (deterministic on CPU), saved as safetensors into the
git-ignored models/gpt2-seed0/. The reference (tests/fixtures/
gpt2_reference.json) is what transformers computes from them: the first 64
logits and the argmax of the prompt's last position, and 32 greedy tokens.

    python3 scripts/gpt2-reference.py            # weights + fixture
    python3 scripts/gpt2-reference.py --weights  # weights only (the test's fetch)
"""
import json
import os
import sys

import torch
from safetensors.torch import save_file
from transformers import GPT2Config, GPT2LMHeadModel

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROMPT = [464, 2068, 7586, 21831, 18045, 625, 262, 16931]
STEPS = 32


def main():
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config()).eval()
    out_dir = os.path.join(ROOT, "models", "gpt2-seed0")
    os.makedirs(out_dir, exist_ok=True)
    tensors = {k: v.detach().contiguous().clone() for k, v in model.transformer.named_parameters()}
    tmp = os.path.join(out_dir, "model.safetensors.tmp")
    save_file(tensors, tmp)
    os.replace(tmp, os.path.join(out_dir, "model.safetensors"))
    if "--weights" in sys.argv:
        return
    with torch.no_grad():
        ids = torch.tensor([PROMPT])
        logits = model(ids).logits[0, -1]
        greedy = model.generate(ids, max_new_tokens=STEPS, do_sample=False,
                                attention_mask=torch.ones_like(ids), pad_token_id=0)[0, len(PROMPT):]
    ref = {
        "model": "GPT2LMHeadModel(GPT2Config()) under torch.manual_seed(0)",
        "torch": torch.__version__,
        "prompt": PROMPT,
        "first_logits": [float(x) for x in logits[:64]],
        "argmax": int(logits.argmax()),
        "max_logit": float(logits.max()),
        "greedy": [int(t) for t in greedy],
    }
    with open(os.path.join(ROOT, "tests", "fixtures", "gpt2_reference.json"), "w") as f:
        json.dump(ref, f, indent=1)
    print(json.dumps({k: ref[k] for k in ("argmax", "max_logit", "greedy")}))


main()
