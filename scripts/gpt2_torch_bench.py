#!/usr/bin/env python3
"""PyTorch eager side of scripts/gpt2-bench.sh: the same GPT-2 weights
(models/gpt2-seed0, loaded into GPT2LMHeadModel), the same 8-token prompt,
greedy decoding with the KV cache, one RESULT line.

    "$(scripts/py-torch-env.sh)" scripts/gpt2_torch_bench.py TOKENS THREADS
"""
import os
import sys
import time

import torch
from safetensors.torch import load_file
from transformers import GPT2Config, GPT2LMHeadModel

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROMPT = [464, 2068, 7586, 21831, 18045, 625, 262, 16931]

tokens, threads = int(sys.argv[1]), int(sys.argv[2])
torch.set_num_threads(threads)
model = GPT2LMHeadModel(GPT2Config()).eval()
model.transformer.load_state_dict(load_file(os.path.join(ROOT, "models/gpt2-seed0/model.safetensors")), strict=False)
model.tie_weights()
with torch.no_grad():
    ids = torch.tensor([PROMPT])
    model(ids, use_cache=True)  # warm-up, untimed (as every system gets)
    t0 = time.perf_counter()
    out = model(ids, use_cache=True)
    past, logits = out.past_key_values, out.logits[:, -1]
    prefill = time.perf_counter() - t0
    t1 = time.perf_counter()
    toks = []
    for _ in range(tokens):
        nxt = logits.argmax(-1, keepdim=True)
        toks.append(int(nxt))
        out = model(nxt, past_key_values=past, use_cache=True)
        past, logits = out.past_key_values, out.logits[:, -1]
    decode = time.perf_counter() - t1
print(f"RESULT system=pytorch threads={threads} tokens={tokens} prefill_ms={prefill * 1e3:.2f} "
      f"decode_ms={decode * 1e3:.2f} tokens_per_s={tokens / decode:.2f} first={toks[:4]}")
