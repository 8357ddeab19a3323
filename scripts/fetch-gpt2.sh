#!/usr/bin/env bash
# Make models/gpt2-seed0/model.safetensors (transformers' own initialisation
# of GPT2LMHeadModel(GPT2Config()) under torch.manual_seed(0), deterministic
# on CPU): installs torch and transformers with pip when missing, then runs
# scripts/gpt2-reference.py --weights. The fixture in tests/fixtures was made
# by the same script (without --weights).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
[ -f "$root/models/gpt2-seed0/model.safetensors" ] && exit 0
python3 -c "import torch, transformers, safetensors" 2>/dev/null ||
  python3 -m pip install --quiet torch transformers safetensors
python3 "$root/scripts/gpt2-reference.py" --weights
